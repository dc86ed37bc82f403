//! The ratios between rows that the bench reports, and the targets it
//! checks them against.

use serde_json::{Value, json};

use crate::latency::{Row, us};

/// A bound on a ratio or a value.
#[derive(Clone, Copy)]
enum Target {
    /// At most this.
    Max(f64),
    /// At least this.
    Min(f64),
}

use Target::{Max, Min};

impl Target {
    fn met(self, value: f64) -> bool {
        match self {
            Max(bound) => value <= bound,
            Min(bound) => value >= bound,
        }
    }

    /// As the report prints it, e.g. `max 1.15`.
    fn describe(self) -> String {
        match self {
            Max(bound) => format!("max {bound}"),
            Min(bound) => format!("min {bound}"),
        }
    }
}

/// The ratios of two rows' latencies: a label, the numerator and the
/// denominator rows (the JSON key is `<numerator>_over_<denominator>`), and
/// the target, if any.
const RATIOS: [(&str, &str, &str, Option<Target>); 13] = [
    (
        "Python session-url, Winch's code / Cranelift's",
        "python_session_url_winch",
        "python_session_url",
        None,
    ),
    (
        "JS call-context, Winch's code / Cranelift's",
        "js_call_context_winch",
        "js_call_context",
        None,
    ),
    (
        "bash tool call, 8 WASM / built-ins only (end to end)",
        "tool_wasm_8",
        "tool_builtins",
        Some(Max(1.05)),
    ),
    (
        "8 WASM collect after a child / built-ins bash tool call",
        "wasm_8_after_child",
        "tool_builtins",
        None,
    ),
    (
        "8 WASM collect / bash -c true (tokio, as the executor spawns)",
        "wasm_8",
        "spawn_bash_tokio",
        Some(Max(0.15)),
    ),
    (
        "8 WASM collect / bash -c true (std)",
        "wasm_8",
        "spawn_bash_std",
        Some(Max(0.15)),
    ),
    (
        "1 sh -c hook / 1 WASM",
        "hook_sh_1",
        "wasm_1",
        Some(Min(20.0)),
    ),
    (
        "8 sh -c hooks / 8 WASM",
        "hook_sh_8",
        "wasm_8",
        Some(Min(20.0)),
    ),
    (
        "1 compiled hook / 1 WASM",
        "hook_c_1",
        "wasm_1",
        Some(Min(20.0)),
    ),
    (
        "8 compiled hooks / 8 WASM",
        "hook_c_8",
        "wasm_8",
        Some(Min(20.0)),
    ),
    ("1 WASM / 1 native", "wasm_1", "native_1", None),
    ("8 WASM / 1 native", "wasm_8", "native_1", None),
    (
        "1 puppet / 1 agent-lineage (import-heavy guest)",
        "puppet_1",
        "wasm_1",
        None,
    ),
];

/// Which statistic of a row a target bounds.
#[derive(Clone, Copy)]
enum Stat {
    P50,
    P99,
}

/// Bounds on single rows, in µs (issue 16): a label, the row, the statistic
/// and the bound. A row that was not sampled (e.g. the polyglot examples
/// without their toolchains) is left out.
const LATENCIES: [(&str, &str, Stat, Target); 5] = [
    (
        "1 Rust WASM contributor, p50 (µs)",
        "wasm_1",
        Stat::P50,
        Max(10.0),
    ),
    (
        "1 Rust WASM contributor, p99 (µs)",
        "wasm_1",
        Stat::P99,
        Max(30.0),
    ),
    (
        "8 Rust WASM contributors, p50 (µs)",
        "wasm_8",
        Stat::P50,
        Max(80.0),
    ),
    (
        "Python session-url, p50 (µs)",
        "python_session_url",
        Stat::P50,
        Max(200.0),
    ),
    (
        "JS call-context, p50 (µs)",
        "js_call_context",
        Stat::P50,
        Max(200.0),
    ),
];

/// Bounds on the start-up child's figures (issue 16): a label, its key in
/// the start-up report, the bound, and what the figure is divided by to be
/// in the label's unit.
const STARTUP: [(&str, &str, Target, f64); 2] = [
    (
        "start-up with the examples, warm cache (ms)",
        "total_ms",
        Max(5.0),
        1.0,
    ),
    (
        "RSS after 256 collects by 64 callers (MiB)",
        "rss_after_burst_kib",
        Max(64.0),
        1024.0,
    ),
];

/// The bounds on the first-run child's figures: its label, its key in the
/// child's report, the target, and the unit the key is divided by.
const FIRST_RUN: [(&str, &str, Target, f64); 2] = [
    (
        "first run of the examples, cold cache (s)",
        "first_run_s",
        Max(10.0),
        1.0,
    ),
    (
        "first run's peak RSS, host or compile helper (MiB)",
        "peak_rss_kib",
        Max(512.0),
        1024.0,
    ),
];

/// A target on one value, as the report prints it.
fn absolute(key: &str, label: &str, value: f64, target: Target) -> Value {
    json!({
        "key": key,
        "label": label,
        "value": value,
        "target": target.describe(),
        "met": target.met(value),
    })
}

/// Each ratio whose rows were sampled, then the bounds on single rows.
pub fn ratios(rows: &[Row]) -> Vec<Value> {
    let get = |key: &str| rows.iter().find(|r| r.key == key);
    let mut ratios = Vec::new();
    for (label, numerator, denominator, target) in RATIOS {
        let (Some(a), Some(b)) = (get(numerator), get(denominator)) else {
            continue;
        };
        let median = a.median().as_secs_f64() / b.median().as_secs_f64();
        let p99 = a.p99().as_secs_f64() / b.p99().as_secs_f64();
        ratios.push(json!({
            "key": format!("{numerator}_over_{denominator}"),
            "label": label,
            "median": median,
            "p99": p99,
            "target": target.map(Target::describe),
            "met": target.map(|t| t.met(median)),
        }));
    }
    for (label, key, stat, target) in LATENCIES {
        let Some(row) = get(key) else { continue };
        let (value, suffix) = match stat {
            Stat::P50 => (us(row.median()), "p50"),
            Stat::P99 => (us(row.p99()), "p99"),
        };
        ratios.push(absolute(
            &format!("{key}_{suffix}_us"),
            label,
            value,
            target,
        ));
    }
    ratios
}

/// The bounds on the start-up child's figures (`startup` is its report).
pub fn startup(startup: &Value) -> Vec<Value> {
    bounded(startup, &STARTUP)
}

/// The bounds on the first-run child's figures (`first_run` is its report).
pub fn first_run(first_run: &Value) -> Vec<Value> {
    bounded(first_run, &FIRST_RUN)
}

/// Each of `bounds` on a figure of `report`.
fn bounded(report: &Value, bounds: &[(&str, &str, Target, f64)]) -> Vec<Value> {
    let mut targets = Vec::new();
    for (label, key, target, unit) in bounds {
        if let Some(value) = report[key].as_f64() {
            targets.push(absolute(key, label, value / unit, *target));
        }
    }
    targets
}

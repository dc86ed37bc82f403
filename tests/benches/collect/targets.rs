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
const RATIOS: [(&str, &str, &str, Option<Target>); 10] = [
    (
        "bash tool call, 8 WASM / built-ins only (end to end)",
        "tool_wasm_8",
        "tool_builtins",
        Some(Max(1.15)),
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

/// The p50 of one Rust WASM contributor, in µs.
const WASM_1_P50_US: Target = Max(40.0);

/// Each ratio whose rows were sampled, then the one absolute target.
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
    let wasm_1_p50 = us(get("wasm_1").unwrap().median());
    ratios.push(json!({
        "key": "wasm_1_p50_us",
        "label": "1 Rust WASM contributor, p50 (µs)",
        "value": wasm_1_p50,
        "target": WASM_1_P50_US.describe(),
        "met": WASM_1_P50_US.met(wasm_1_p50),
    }));
    ratios
}

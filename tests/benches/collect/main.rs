//! The cost of `collect()`, side by side in one run, against the things it is
//! meant to beat or to ride on:
//!
//! - latency (median, p99) of `collect()` with the built-ins only, one native
//!   contributor, one and eight Rust WASM contributors, and each polyglot
//!   example (Python, JavaScript, C) when it has been built;
//! - the same facts computed by process-per-contributor hooks (`sh -c` and a
//!   small compiled helper), and a plain `bash -c true` spawn;
//! - throughput (executions/s) at 1, 2, 8 and 64 concurrent callers;
//! - start-up: building a registry (its report says `Registry::new`, as the
//!   bench history does) plus registering every example from the
//!   precompiled cache, and the process's VmRSS after loading (measured in a
//!   fresh child process, so nothing else pollutes the figures).
//!
//! Rows are sampled in interleaved rounds, so that noise from other work on
//! the machine lands on every row alike and the ratios stay meaningful.
//!
//! The modules: `setups` builds the registries, `baselines` the native
//! contributor and the hooks they are compared with; `latency`,
//! `throughput` and `startup` measure; `targets` holds the ratios and the
//! targets checked; `report` prints the tables.
//!
//! Run: `cargo bench --profile perf --bench collect`
//! (`-- --json` prints one JSON object instead of the tables; `-- --quick`
//! samples for a tenth of the time, `-- --seconds <n>` for n seconds per row;
//! `-- --only <row key>[,<row key>…]` samples those rows, interleaved, and
//! nothing else: for a profiler, or an A/B ratio of two rows).

mod baselines;
mod latency;
mod report;
mod setups;
mod startup;
mod targets;
mod throughput;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_env::ToolExecution;
use serde_json::{Value, json};

use baselines::compile_hook_helper;
use latency::{ROW_BUDGET, Row, measure, spawn_rows, us};
use report::{machine, print_report};
use setups::{ExampleSetups, Setups, execution};
use startup::{FIRST_RUN_CHILD, STARTUP_CHILD, first_run, first_run_child, startup, startup_child};

fn main() {
    if std::env::var_os(STARTUP_CHILD).is_some() {
        return startup_child();
    }
    if std::env::var_os(FIRST_RUN_CHILD).is_some() {
        return first_run_child();
    }
    build_compile_helper();
    let args: Vec<String> = std::env::args().collect();
    let as_json = args.iter().any(|a| a == "--json");
    let budget = if args.iter().any(|a| a == "--quick") {
        ROW_BUDGET / 10
    } else {
        ROW_BUDGET
    };
    // `--seconds <n>`: the sampling time per row.
    let budget = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .map_or(budget, Duration::from_secs_f64);
    let runtime = cli_runtime();
    // `--only <row key>[,…]`: sample those rows and nothing else.
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let report = runtime.block_on(run(budget, only));
    if report.is_null() {
        // `--only`: the row was printed already.
        return;
    }
    // The JSON is always kept, so a table run can be read by a script too.
    let saved = Path::new(env!("CARGO_TARGET_TMPDIR")).join("collect-bench.json");
    match std::fs::write(&saved, report.to_string()) {
        Ok(()) => eprintln!("JSON report: {}", saved.display()),
        Err(err) => eprintln!("cannot write {}: {err}", saved.display()),
    }
    if as_json {
        println!("{report}");
    } else {
        print_report(&report);
    }
}

/// Builds the compile helper `dsh-env-compile` into this bench's profile
/// directory, where the registries find it (beside `deps/`, as tests find
/// theirs): a bench builds only its own package, and the helper is a binary
/// of the core's, so a fresh clone has none there until this runs. A plain
/// `cargo build` of it (no `-p`) resolves features as the bench did, but for
/// the core's test-only contract, so it builds the core again, not wasmtime.
fn build_compile_helper() {
    let exe = std::env::current_exe().unwrap();
    // The bench runs as <target>/<profile dir>/deps/collect-<hash>.
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name);
    let profile = match dir.and_then(|dir| dir.to_str()).unwrap_or("debug") {
        "debug" => "dev",
        other => other,
    };
    eprintln!("building the compile helper: cargo build --profile {profile} --bin dsh-env-compile");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let status = std::process::Command::new(env!("CARGO"))
        .current_dir(workspace)
        .args(["build", "--profile", profile, "--bin", "dsh-env-compile"])
        .status()
        .unwrap();
    assert!(
        status.success(),
        "building the compile helper failed: {status}"
    );
}

/// A runtime as the CLI runs one: multi-thread, with two workers.
fn cli_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Sets up, measures, and returns the report (`Null` with `--only`).
async fn run(budget: Duration, only: Option<String>) -> Value {
    let execution = Arc::new(execution());
    let helper_dir = tempfile::tempdir().unwrap();
    let compiled = compile_hook_helper(helper_dir.path());
    if compiled.is_none() {
        eprintln!("no C compiler: the compiled-hook rows are skipped");
    }

    eprintln!("setting up (the first run compiles the polyglot examples into the cache)");
    let setups = Setups::new(compiled).await;
    setups.check_agreement(&execution).await;
    let wanted = |key: &str| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|one| one == key))
    };
    let examples = ExampleSetups::new(&execution, wanted).await;

    let mut rows = rows(&setups, &examples, &execution);
    if let Some(only) = &only {
        rows.retain(|row| only.split(',').any(|one| one == row.key));
        assert!(!rows.is_empty(), "no row {only}");
    }
    measure(&mut rows, budget).await;
    if only.is_some() {
        for row in &rows {
            eprintln!(
                "{}: median {:.2}µs, p99 {:.1}µs, {} samples",
                row.name,
                us(row.median()),
                us(row.p99()),
                row.samples.len()
            );
        }
        return Value::Null;
    }

    let mut latency = serde_json::Map::new();
    for row in &rows {
        latency.insert(
            row.key.clone(),
            json!({
                "name": row.name,
                "median_us": us(row.median()),
                "p99_us": us(row.p99()),
                "samples": row.samples.len(),
            }),
        );
    }
    let mut ratios = targets::ratios(&rows);
    let throughput = throughput::table(&setups).await;

    // Start-up last: the children compete with nothing of ours.
    drop(rows);
    let startup = tokio::task::spawn_blocking(startup).await.unwrap();
    ratios.extend(targets::startup(&startup));
    let first_run = tokio::task::spawn_blocking(first_run).await.unwrap();
    ratios.extend(targets::first_run(&first_run));

    json!({
        "machine": machine(),
        "latency": latency,
        "polyglot_skipped": examples.skipped,
        "ratios": ratios,
        "throughput": throughput,
        "startup": startup,
        "first_run": first_run,
    })
}

/// Every latency row, in the order they are sampled.
fn rows(setups: &Setups, examples: &ExampleSetups, execution: &Arc<ToolExecution>) -> Vec<Row> {
    let mut rows = spawn_rows();
    for (name, key, setup) in [
        ("built-ins only", "builtins", &setups.builtins),
        ("1 native contributor", "native_1", &setups.native),
        ("1 Rust WASM contributor", "wasm_1", &setups.wasm_1),
        ("8 Rust WASM contributors", "wasm_8", &setups.wasm_8),
        ("1 Rust WASM (puppet)", "puppet_1", &setups.puppet_1),
        ("1 hook (sh -c)", "hook_sh_1", &setups.hook_sh_1),
        ("8 hooks (sh -c)", "hook_sh_8", &setups.hook_sh_8),
    ] {
        rows.push(Row::collect(name, key, setup, execution));
    }
    for (name, key, setup) in [
        (
            "bash tool: true, built-ins only",
            "tool_builtins",
            &setups.builtins,
        ),
        (
            "bash tool: true, 8 Rust WASM",
            "tool_wasm_8",
            &setups.wasm_8,
        ),
    ] {
        rows.push(Row::tool(name, key, setup, execution));
    }
    rows.push(Row::collect_after_child(
        "8 Rust WASM, after a child",
        "wasm_8_after_child",
        &setups.wasm_8,
        execution,
    ));
    if let Some((one, eight)) = &setups.hook_c {
        rows.push(Row::collect(
            "1 hook (compiled)",
            "hook_c_1",
            one,
            execution,
        ));
        rows.push(Row::collect(
            "8 hooks (compiled)",
            "hook_c_8",
            eight,
            execution,
        ));
    }
    for (name, key, setup) in &examples.polyglot {
        rows.push(Row::collect(name, key, setup, execution));
    }
    for (name, key, setup) in &examples.winch {
        rows.push(Row::collect(name, key, setup, execution));
    }
    if let Some(all) = &examples.all {
        let name = format!("all {} examples together", all.registrations.len());
        rows.push(Row::collect(&name, "all_examples", all, execution));
    }
    rows
}

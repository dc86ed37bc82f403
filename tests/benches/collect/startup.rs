//! Start-up: building a registry (reported as `Registry::new`) plus
//! registering every example from the precompiled cache, and the process's
//! memory after, measured in fresh child processes so that nothing else
//! pollutes the figures.

use std::process::{Command, Stdio};
use std::time::Instant;

use dsh_env_tests::registry;
use serde_json::{Value, json};

use crate::cli_runtime;
use crate::setups::{EXAMPLES, Example, examples_manifest, execution};
use dsh_env::CollectOptions;

/// Start-up measurements (each in a fresh child process).
const STARTUP_RUNS: usize = 5;
/// After start-up, the child runs this many callers doing this many
/// `collect()`s each, and reports VmRSS with the pool's slots warm.
pub const WARM_CALLERS: usize = 64;
const WARM_COLLECTS_EACH: usize = 4;
/// Set in the child process that measures start-up.
pub const STARTUP_CHILD: &str = "DSH_ENV_BENCH_STARTUP_CHILD";
/// Set in the child process that measures the first run, cold cache.
pub const FIRST_RUN_CHILD: &str = "DSH_ENV_BENCH_FIRST_RUN_CHILD";

/// A field of `/proc/self/status`, in KiB.
fn proc_status_kib(field: &str) -> u64 {
    kib_field("/proc/self/status", field)
}

/// The process's proportional set size (`Pss` in `/proc/self/smaps_rollup`),
/// in KiB: each resident page divided by the processes that map it, and
/// counted once however many of this process's mappings hold it.
fn pss_kib() -> u64 {
    kib_field("/proc/self/smaps_rollup", "Pss:")
}

/// The `field` line of the `/proc` file at `path`, in KiB.
fn kib_field(path: &str, field: &str) -> u64 {
    let text = std::fs::read_to_string(path).expect("Linux /proc");
    text.lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in {path}"))
}

/// The child: builds a registry, then loads and registers every example from
/// the (warm) cache; prints one JSON line.
pub fn startup_child() {
    let runtime = cli_runtime();
    let rss_before = proc_status_kib("VmRSS:");
    let vm_before = proc_status_kib("VmSize:");
    let start = Instant::now();
    let registry = registry();
    let new_time = start.elapsed();
    let rss_empty = proc_status_kib("VmRSS:");
    let vm_empty = proc_status_kib("VmSize:");
    let built: Vec<&Example> = EXAMPLES.iter().filter(|e| e.built()).collect();
    let manifest = examples_manifest(&built);
    let registrations = runtime
        .block_on(registry.register_manifest(&manifest, &dsh_env::HostEnv::from_process()))
        .unwrap();
    let total = start.elapsed();
    let rss_loaded = proc_status_kib("VmRSS:");
    let rss_loaded_anon = proc_status_kib("RssAnon:");
    let rss_loaded_file = proc_status_kib("RssFile:");
    let rss_loaded_shmem = proc_status_kib("RssShmem:");
    let first = Instant::now();
    runtime
        .block_on(registry.collect(&execution(), &CollectOptions::new()))
        .unwrap();
    let first_collect = first.elapsed();
    let rss_first = proc_status_kib("VmRSS:");
    // Then a burst from many callers, so that the pool's slots warm up.
    runtime.block_on(async {
        let tasks: Vec<_> = (0..WARM_CALLERS)
            .map(|_| {
                let registry = registry.clone();
                tokio::spawn(async move {
                    for _ in 0..WARM_COLLECTS_EACH {
                        registry
                            .collect(&execution(), &CollectOptions::new())
                            .await
                            .unwrap();
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    let report = json!({
        "registry_new_ms": new_time.as_secs_f64() * 1e3,
        "register_all_ms": (total - new_time).as_secs_f64() * 1e3,
        "total_ms": total.as_secs_f64() * 1e3,
        "examples": built.iter().map(|e| e.name).collect::<Vec<_>>(),
        "first_collect_ms": first_collect.as_secs_f64() * 1e3,
        "contributors": registrations.len(),
        "rss_before_kib": rss_before,
        "rss_empty_registry_kib": rss_empty,
        "rss_loaded_kib": rss_loaded,
        "rss_loaded_anon_kib": rss_loaded_anon,
        "rss_loaded_file_kib": rss_loaded_file,
        "rss_loaded_shmem_kib": rss_loaded_shmem,
        "rss_after_first_collect_kib": rss_first,
        "rss_after_burst_kib": proc_status_kib("VmRSS:"),
        "pss_after_burst_kib": pss_kib(),
        "rss_after_burst_anon_kib": proc_status_kib("RssAnon:"),
        "rss_after_burst_file_kib": proc_status_kib("RssFile:"),
        "burst_collects": WARM_CALLERS * WARM_COLLECTS_EACH,
        "vm_size_before_kib": vm_before,
        "vm_size_registry_kib": vm_empty,
    });
    println!("{report}");
}

/// Runs [`startup_child`] [`STARTUP_RUNS`] times; returns the run with the
/// median total time, plus the spread of totals.
pub fn startup() -> Value {
    let exe = std::env::current_exe().unwrap();
    let mut runs: Vec<Value> = (0..STARTUP_RUNS)
        .map(|i| {
            eprint!("\rstart-up: run {}/{STARTUP_RUNS}", i + 1);
            let output = Command::new(&exe)
                .env(STARTUP_CHILD, "1")
                .stderr(Stdio::inherit())
                .output()
                .unwrap();
            assert!(output.status.success(), "start-up child failed");
            serde_json::from_slice(&output.stdout).unwrap()
        })
        .collect();
    eprintln!();
    runs.sort_by(|a, b| {
        a["total_ms"]
            .as_f64()
            .partial_cmp(&b["total_ms"].as_f64())
            .unwrap()
    });
    let totals: Vec<f64> = runs
        .iter()
        .map(|r| r["total_ms"].as_f64().unwrap())
        .collect();
    let mut median = runs[runs.len() / 2].clone();
    median["total_ms_min"] = json!(totals[0]);
    median["total_ms_max"] = json!(totals[totals.len() - 1]);
    median["runs"] = json!(runs.len());
    median
}

/// The child: registers every example from a cold cache in a new home, as
/// the CLI's short-lived commands do (Winch only), and collects once;
/// prints the wall time and the peak RSS of this process and of its
/// largest compile helper.
pub fn first_run_child() {
    let runtime = cli_runtime();
    let home = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let registry = (dsh_env_tests::builder(dsh_env::DshHome::from_absolute(home.path()).unwrap()))
        .tiering(dsh_env::Tiering::Baseline)
        .build()
        .unwrap();
    let built: Vec<&Example> = EXAMPLES.iter().filter(|e| e.built()).collect();
    let manifest = examples_manifest(&built);
    let registrations = runtime
        .block_on(registry.register_manifest(&manifest, &dsh_env::HostEnv::from_process()))
        .unwrap();
    runtime
        .block_on(registry.collect(&execution(), &CollectOptions::new()))
        .unwrap();
    let elapsed = start.elapsed();
    // SAFETY: rusage is plain data, filled in by the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a live rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let report = json!({
        "first_run_s": elapsed.as_secs_f64(),
        "contributors": registrations.len(),
        "peak_rss_kib": proc_status_kib("VmHWM:").max(usage.ru_maxrss as u64),
        "host_peak_rss_kib": proc_status_kib("VmHWM:"),
        "helper_peak_rss_kib": usage.ru_maxrss,
    });
    println!("{report}");
}

/// Runs [`first_run_child`] once: it compiles every example.
pub fn first_run() -> Value {
    eprintln!("first run, cold cache: compiling every example");
    let output = Command::new(std::env::current_exe().unwrap())
        .env(FIRST_RUN_CHILD, "1")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "first-run child failed");
    serde_json::from_slice(&output.stdout).unwrap()
}

//! The report: the machine it ran on, and the tables printed from the
//! JSON report.

use serde_json::{Value, json};

use crate::startup::WARM_CALLERS;

/// The CPU count, CPU model and kernel.
pub fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    json!({
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu": cpu,
        "kernel": kernel.trim(),
    })
}

/// Prints the JSON report as tables.
pub fn print_report(report: &Value) {
    let machine = &report["machine"];
    println!(
        "machine: {} CPUs, {}, Linux {}\n",
        machine["cpus"],
        machine["cpu"].as_str().unwrap_or(""),
        machine["kernel"].as_str().unwrap_or("")
    );
    print_latency(report);
    print_ratios(report);
    print_throughput(report);
    print_startup(&report["startup"]);
}

/// Each row's median and p99, and how they compare with one native
/// contributor and with spawning `bash -c true`.
fn print_latency(report: &Value) {
    let latency = report["latency"].as_object().unwrap();
    let native = latency["native_1"]["median_us"].as_f64().unwrap();
    let bash = latency["spawn_bash_tokio"]["median_us"].as_f64().unwrap();
    println!(
        "{:<28} {:>11} {:>11} {:>9} {:>10}",
        "latency", "median", "p99", "x native", "x spawn"
    );
    // In insertion order of the rows (the map is sorted by key).
    let mut rows: Vec<(&String, &Value)> = latency.iter().collect();
    let order = [
        "spawn_bash_std",
        "spawn_bash_tokio",
        "builtins",
        "native_1",
        "wasm_1",
        "wasm_8",
        "wasm_8_after_child",
        "puppet_1",
        "python_session_url",
        "js_call_context",
        "c_workspace_id",
        "all_examples",
        "hook_sh_1",
        "hook_sh_8",
        "hook_c_1",
        "hook_c_8",
    ];
    rows.sort_by_key(|(k, _)| order.iter().position(|o| o == k).unwrap_or(order.len()));
    for (_, row) in rows {
        let median = row["median_us"].as_f64().unwrap();
        println!(
            "{:<28} {:>9.1}µs {:>9.1}µs {:>8.1}x {:>9.3}x",
            row["name"].as_str().unwrap(),
            median,
            row["p99_us"].as_f64().unwrap(),
            median / native,
            median / bash,
        );
    }
    for name in report["polyglot_skipped"].as_array().unwrap() {
        println!("{:<28} (not built; skipped)", name.as_str().unwrap());
    }
}

/// Each ratio and the target it is held to.
fn print_ratios(report: &Value) {
    println!(
        "\n{:<62} {:>8} {:>8}  {:<9} verdict",
        "ratios", "median", "p99", "target"
    );
    for r in report["ratios"].as_array().unwrap() {
        let verdict = match r["met"].as_bool() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "",
        };
        let (median, p99) = match r["value"].as_f64() {
            Some(value) => (format!("{value:.1}"), String::new()),
            None => (
                format!("{:.3}", r["median"].as_f64().unwrap()),
                format!("{:.3}", r["p99"].as_f64().unwrap()),
            ),
        };
        println!(
            "{:<62} {median:>8} {p99:>8}  {:<9} {verdict}",
            r["label"].as_str().unwrap(),
            r["target"].as_str().unwrap_or("")
        );
    }
}

/// `collect()`s per second by caller count.
fn print_throughput(report: &Value) {
    println!("\nthroughput (collect()/s, 2-worker tokio runtime)");
    println!(
        "{:>8} {:>14} {:>14} {:>14} {:>16}",
        "callers", "1 WASM", "8 WASM", "1 native", "WASM instances/s"
    );
    for row in report["throughput"].as_array().unwrap() {
        let eight = row["wasm_8_per_s"].as_f64().unwrap();
        println!(
            "{:>8} {:>14.0} {:>14.0} {:>14.0} {:>16.0}",
            row["callers"],
            row["wasm_1_per_s"].as_f64().unwrap(),
            eight,
            row["native_1_per_s"].as_f64().unwrap(),
            eight * 8.0
        );
    }
}

/// Start-up time and memory, from the child processes.
fn print_startup(s: &Value) {
    let ms = |k: &str| s[k].as_f64().unwrap_or(f64::NAN);
    let kib = |k: &str| s[k].as_u64().unwrap_or(0) as f64 / 1024.0;
    println!(
        "\nstart-up (fresh process, warm cache, median of {} runs)",
        s["runs"]
    );
    println!(
        "Registry::new                 {:>8.2} ms",
        ms("registry_new_ms")
    );
    println!(
        "register all {} examples       {:>8.2} ms",
        s["contributors"],
        ms("register_all_ms")
    );
    if let Some(examples) = s["examples"].as_array() {
        let names: Vec<&str> = examples.iter().filter_map(Value::as_str).collect();
        println!("  (one manifest: {})", names.join(", "));
    }
    println!(
        "total                         {:>8.2} ms  (min {:.2}, max {:.2})",
        ms("total_ms"),
        ms("total_ms_min"),
        ms("total_ms_max")
    );
    println!(
        "first collect() after        {:>8.2} ms",
        ms("first_collect_ms")
    );
    println!(
        "VmRSS: {:.1} MiB before, {:.1} MiB with an empty registry, {:.1} MiB loaded, {:.1} MiB after the first collect()",
        kib("rss_before_kib"),
        kib("rss_empty_registry_kib"),
        kib("rss_loaded_kib"),
        kib("rss_after_first_collect_kib")
    );
    println!(
        "  loaded: {:.1} MiB anonymous, {:.1} MiB file-backed, {:.1} MiB shared memory",
        kib("rss_loaded_anon_kib"),
        kib("rss_loaded_file_kib"),
        kib("rss_loaded_shmem_kib")
    );
    println!(
        "VmRSS after {} more collect()s by {WARM_CALLERS} callers: {:.1} MiB (Pss {:.1} MiB: a \
         page of a component's memory image mapped in several pool slots counts once per slot \
         in VmRSS, once in all in Pss)",
        s["burst_collects"],
        kib("rss_after_burst_kib"),
        kib("pss_after_burst_kib")
    );
    // File-backed pages are the components' code and memory images, mapped
    // from the cache and shared with the page cache; how many count follows
    // the size of its folios (docs/bench-log/, session 11).
    println!(
        "  after the burst: {:.1} MiB anonymous, {:.1} MiB file-backed",
        kib("rss_after_burst_anon_kib"),
        kib("rss_after_burst_file_kib")
    );
    println!(
        "VmSize: {:.1} GiB reserved by Registry::new (engine pool)",
        (kib("vm_size_registry_kib") - kib("vm_size_before_kib")) / 1024.0
    );
}

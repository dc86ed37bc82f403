//! The cost of `collect()`, side by side in one run, against the things it is
//! meant to beat or to ride on:
//!
//! - latency (median, p99) of `collect()` with the built-ins only, one native
//!   contributor, one and eight Rust WASM contributors, and each polyglot
//!   example (Python, JavaScript, C) when it has been built;
//! - the same facts computed by process-per-contributor hooks (`sh -c` and a
//!   small compiled helper), and a plain `bash -c true` spawn;
//! - throughput (executions/s) at 1, 2, 8 and 64 concurrent callers;
//! - start-up: `Registry::new` plus registering every example from the
//!   precompiled cache, and the process's VmRSS after loading (measured in a
//!   fresh child process, so nothing else pollutes the figures).
//!
//! Rows are sampled in interleaved rounds, so that noise from other work on
//! the machine lands on every row alike and the ratios stay meaningful.
//!
//! Run: `cargo bench -p dsh-env-tests --profile dev --bench collect`
//! (`-- --json` prints one JSON object instead of the tables; `-- --quick`
//! samples for a tenth of the time, `-- --seconds <n>` for n seconds per row;
//! `-- --only <row key>` samples one row and nothing else, for a profiler).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dsh_env::manifest::Manifest;
use dsh_env::sandbox::{ContributorComponent, Grants};
use dsh_env::{
    Agent, NativeContributor, Overlay, RawDeclaration, Registration, Registry, ToolExecution,
};
use dsh_env_harness::LocalExecutor;
use dsh_env_harness::tool::{BashOutcome, BashTool};
use dsh_env_tests::{artifacts, echo, puppet, registry};
use serde_json::{Value, json};

/// Interleaved rounds per latency row.
const ROUNDS: usize = 10;
/// Sampling time per latency row, over all rounds (a tenth with `--quick`).
const ROW_BUDGET: Duration = Duration::from_secs(2);
/// Bounds on the samples per latency row.
const MIN_SAMPLES: usize = 200;
const MAX_SAMPLES: usize = 20_000;
/// Concurrent callers for the throughput table, and the time per measurement.
const CALLERS: [usize; 4] = [1, 2, 8, 64];
const THROUGHPUT_TIME: Duration = Duration::from_millis(1500);
/// Start-up measurements (each in a fresh child process).
const STARTUP_RUNS: usize = 5;
/// After start-up, the child runs this many callers doing this many
/// `collect()`s each, and reports VmRSS with the pool's slots warm.
const WARM_CALLERS: usize = 64;
const WARM_COLLECTS_EACH: usize = 4;
/// Set in the child process that measures start-up.
const STARTUP_CHILD: &str = "DSH_ENV_BENCH_STARTUP_CHILD";

// ---------------------------------------------------------------------------
// Contributors to compare against.

/// The same facts as the `agent-lineage` component, computed in-process.
struct NativeLineage;

fn lineage_declaration(name: &str) -> RawDeclaration {
    RawDeclaration {
        name: name.into(),
        keys: vec![
            ("DSH_PARENT_SESSION_ID".into(), "Parent session.".into()),
            ("DSH_AGENT_DEPTH".into(), "Depth.".into()),
        ],
    }
}

impl NativeContributor for NativeLineage {
    fn declare(&self) -> RawDeclaration {
        lineage_declaration("native-lineage")
    }

    fn resolve(&self, execution: &ToolExecution) -> Result<Vec<(String, String)>, String> {
        let Some(agent) = &execution.agent else {
            return Ok(Vec::new());
        };
        let mut pairs = vec![("DSH_AGENT_DEPTH".to_string(), agent.depth.to_string())];
        if let Some(parent) = &agent.parent_session_id {
            pairs.push(("DSH_PARENT_SESSION_ID".to_string(), parent.clone()));
        }
        Ok(pairs)
    }
}

/// How a hook is run: a shell script, or a compiled helper.
#[derive(Clone)]
enum HookProgram {
    Shell,
    Compiled(PathBuf),
}

/// What a hook reports: the agent's lineage, or `DSH_ECHO_<n>=<session>`
/// (the facts of the puppets in the eight-contributor row).
#[derive(Clone, Copy)]
enum HookFacts {
    Lineage,
    Echo(usize),
}

/// A process-per-contributor hook: one process per call, which gets the
/// execution's facts as arguments and prints `KEY=VALUE` lines.
struct Hook {
    program: HookProgram,
    facts: HookFacts,
}

/// The shell versions of the hooks (`$0` is the facts' kind).
const SHELL_HOOK: &str = r#"case "$0" in
lineage) printf 'DSH_AGENT_DEPTH=%s\n' "$1"; [ -n "$2" ] && printf 'DSH_PARENT_SESSION_ID=%s\n' "$2";;
echo) printf 'DSH_ECHO_%s=%s\n' "$1" "$2";;
esac; exit 0"#;

/// The compiled version of the same hooks.
const C_HOOK: &str = r#"#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "lineage") == 0) {
        printf("DSH_AGENT_DEPTH=%s\n", argv[2]);
        if (argv[3][0]) printf("DSH_PARENT_SESSION_ID=%s\n", argv[3]);
    } else if (argc == 4 && strcmp(argv[1], "echo") == 0) {
        printf("DSH_ECHO_%s=%s\n", argv[2], argv[3]);
    }
    return 0;
}
"#;

impl NativeContributor for Hook {
    fn declare(&self) -> RawDeclaration {
        match self.facts {
            HookFacts::Lineage => lineage_declaration("hook-lineage"),
            HookFacts::Echo(n) => RawDeclaration {
                name: format!("hook-echo-{n}"),
                keys: vec![(format!("DSH_ECHO_{n}"), "Echo.".into())],
            },
        }
    }

    fn resolve(&self, execution: &ToolExecution) -> Result<Vec<(String, String)>, String> {
        let agent = execution.agent.as_ref();
        let args: [String; 3] = match self.facts {
            HookFacts::Lineage => {
                let Some(agent) = agent else {
                    return Ok(Vec::new());
                };
                [
                    "lineage".into(),
                    agent.depth.to_string(),
                    agent.parent_session_id.clone().unwrap_or_default(),
                ]
            }
            HookFacts::Echo(n) => [
                "echo".into(),
                n.to_string(),
                agent.map_or("none".into(), |a| a.session_id.clone()),
            ],
        };
        let mut command = match &self.program {
            HookProgram::Shell => {
                let mut command = Command::new("sh");
                command.arg("-c").arg(SHELL_HOOK);
                command
            }
            HookProgram::Compiled(path) => Command::new(path),
        };
        let output = command
            .args(&args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if !output.status.success() {
            return Err(format!("hook failed: {}", output.status));
        }
        let stdout = String::from_utf8(output.stdout).map_err(|e| e.to_string())?;
        Ok(stdout
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }
}

/// Compiles the C hook helper into `dir`, statically if possible; `None`
/// when there is no C compiler.
fn compile_hook_helper(dir: &Path) -> Option<PathBuf> {
    let source = dir.join("hook.c");
    let binary = dir.join("hook");
    std::fs::write(&source, C_HOOK).ok()?;
    for flags in [&["-O2", "-static"][..], &["-O2"]] {
        let built = Command::new("cc")
            .args(flags)
            .arg("-o")
            .arg(&binary)
            .arg(&source)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if built {
            return Some(binary);
        }
    }
    None
}

// ---------------------------------------------------------------------------
// Registries for the rows.

/// The execution every row resolves: an agent call with a parent, so that
/// every contributor has something to say.
fn execution() -> ToolExecution {
    ToolExecution::new("bench-call", "bash").with_agent(Agent {
        session_id: "bench-session".into(),
        cwd: "/work".into(),
        parent_session_id: Some("bench-parent".into()),
        depth: 1,
    })
}

/// A registry, and the registrations that keep its contributors.
struct Setup {
    registry: Registry,
    registrations: Vec<Registration>,
}

/// `agent-lineage`, then `count - 1` echo guests that each echo the session id.
async fn wasm_contributors(count: usize) -> Setup {
    let registry = registry();
    let mut registrations = Vec::new();
    let lineage = registry
        .load_file(artifacts::AGENT_LINEAGE.as_ref())
        .unwrap();
    registrations.push(registry.register(lineage).await.unwrap());
    for i in 1..count {
        let component = echo(&registry, &format!("echo-{i}"), &format!("DSH_ECHO_{i}"));
        registrations.push(registry.register(component).await.unwrap());
    }
    Setup {
        registry,
        registrations,
    }
}

/// The hooks that compute the same facts as [`wasm_contributors`]`(count)`.
fn hooks(program: &HookProgram, count: usize) -> Setup {
    let registry = registry();
    let registrations = (0..count)
        .map(|i| {
            let facts = if i == 0 {
                HookFacts::Lineage
            } else {
                HookFacts::Echo(i)
            };
            let hook = Hook {
                program: program.clone(),
                facts,
            };
            registry.register_native(Arc::new(hook)).unwrap()
        })
        .collect();
    Setup {
        registry,
        registrations,
    }
}

/// An example contributor: its row name and JSON key, its component, and
/// its manifest config.
struct Example {
    name: &'static str,
    key: &'static str,
    path: &'static str,
    config: &'static [(&'static str, &'static str)],
}

/// Every example contributor, in every language.
const EXAMPLES: [Example; 6] = [
    Example {
        name: "Rust agent-lineage",
        key: "rust_agent_lineage",
        path: artifacts::AGENT_LINEAGE,
        config: &[],
    },
    Example {
        name: "Rust call-trace",
        key: "rust_call_trace",
        path: artifacts::CALL_TRACE,
        config: &[],
    },
    Example {
        name: "Rust git-context",
        key: "rust_git_context",
        path: artifacts::GIT_CONTEXT,
        config: &[],
    },
    Example {
        name: "Python session-url",
        key: "python_session_url",
        path: artifacts::SESSION_URL,
        config: &[("base_url", "https://agents.example.com/sessions/")],
    },
    Example {
        name: "JS call-context",
        key: "js_call_context",
        path: artifacts::CALL_CONTEXT,
        config: &[],
    },
    Example {
        name: "C workspace-id",
        key: "c_workspace_id",
        path: artifacts::WORKSPACE_ID,
        config: &[],
    },
];

impl Example {
    fn is_polyglot(&self) -> bool {
        !self.name.starts_with("Rust")
    }

    fn built(&self) -> bool {
        Path::new(self.path).exists()
    }

    /// Loads and registers it.
    async fn register(&self, registry: &Registry) -> Registration {
        registry.register(self.load(registry)).await.unwrap()
    }

    /// Loads it, configured (git-context gets the cwd grant it needs).
    fn load(&self, registry: &Registry) -> ContributorComponent {
        registry
            .load_file(self.path.as_ref())
            .unwrap()
            .with_config(
                (self.config.iter())
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
            .with_grants(Grants {
                env: Vec::new(),
                cwd_read: self.path == artifacts::GIT_CONTEXT,
            })
    }
}

/// A manifest of `examples`, as `dsh-env --manifest` would read one.
fn examples_manifest(examples: &[&Example]) -> Manifest {
    let mut text = String::new();
    for example in examples {
        text += &format!("[[contributor]]\npath = {:?}\n", example.path);
        if !example.config.is_empty() {
            text += "[contributor.config]\n";
            for (key, value) in example.config {
                text += &format!("{key} = {value:?}\n");
            }
        }
        if example.path == artifacts::GIT_CONTEXT {
            text += "[contributor.grants]\ncwd = \"read\"\n";
        }
    }
    Manifest::parse(&text, "bench examples", PathBuf::from("/")).unwrap()
}

/// A registry with `examples` registered.
async fn examples<'a>(examples: impl IntoIterator<Item = &'a Example>) -> Setup {
    let registry = registry();
    let mut registrations = Vec::new();
    for example in examples {
        registrations.push(example.register(&registry).await);
    }
    Setup {
        registry,
        registrations,
    }
}

// ---------------------------------------------------------------------------
// Latency.

type Timed = Pin<Box<dyn Future<Output = Duration>>>;

/// One latency row: a name, a JSON key, and how to take one sample.
struct Row {
    name: String,
    key: String,
    sample: Box<dyn Fn() -> Timed>,
    samples: Vec<Duration>,
}

impl Row {
    fn collect(name: &str, key: &str, setup: &Setup, execution: &Arc<ToolExecution>) -> Row {
        let (registry, execution) = (setup.registry.clone(), execution.clone());
        Row::new(name, key, move || {
            let (registry, execution) = (registry.clone(), execution.clone());
            Box::pin(async move {
                let start = Instant::now();
                let overlay = registry.collect(&execution).await.unwrap();
                let elapsed = start.elapsed();
                drop(overlay);
                // As the bash tool does while its child starts.
                registry.prepare().await;
                elapsed
            })
        })
    }

    /// One bash tool call running `true`, end to end: collect, spawn
    /// `bash -c true` with the overlay, wait for it.
    fn tool(name: &str, key: &str, setup: &Setup, execution: &Arc<ToolExecution>) -> Row {
        let tool = BashTool::new(setup.registry.clone(), LocalExecutor, "/tmp");
        let execution = execution.clone();
        Row::new(name, key, move || {
            let (tool, execution) = (tool.clone(), execution.clone());
            Box::pin(async move {
                let start = Instant::now();
                let outcome = tool
                    .call(&execution, &json!({ "command": "true" }))
                    .await
                    .unwrap();
                let elapsed = start.elapsed();
                assert!(matches!(outcome, BashOutcome::Finished(o) if o.exit_code == Some(0)));
                elapsed
            })
        })
    }

    fn new(name: &str, key: &str, sample: impl Fn() -> Timed + 'static) -> Row {
        Row {
            name: name.into(),
            key: key.into(),
            sample: Box::new(sample),
            samples: Vec::new(),
        }
    }

    fn median(&self) -> Duration {
        self.samples[self.samples.len() / 2]
    }

    fn p99(&self) -> Duration {
        self.samples[(self.samples.len() * 99 / 100).min(self.samples.len() - 1)]
    }
}

/// Samples every row in interleaved rounds, after a warm-up that also sizes
/// each row's sample count to the time budget.
async fn measure(rows: &mut [Row], budget: Duration) {
    let mut per_round = Vec::new();
    for row in rows.iter() {
        let warm_start = Instant::now();
        let mut warm = Vec::new();
        while warm.len() < 20 || (warm.len() < 200 && warm_start.elapsed() < budget / 20) {
            warm.push((row.sample)().await);
        }
        warm.sort();
        let typical = warm[warm.len() / 2].max(Duration::from_nanos(100));
        let samples = (budget.as_secs_f64() / typical.as_secs_f64()) as usize;
        per_round.push(samples.clamp(MIN_SAMPLES, MAX_SAMPLES).div_ceil(ROUNDS));
    }
    for round in 0..ROUNDS {
        eprint!("\rlatency: round {}/{ROUNDS}", round + 1);
        for (row, &count) in rows.iter_mut().zip(&per_round) {
            for _ in 0..count {
                let elapsed = (row.sample)().await;
                row.samples.push(elapsed);
            }
        }
    }
    eprintln!();
    for row in rows.iter_mut() {
        row.samples.sort();
    }
}

fn spawn_rows() -> Vec<Row> {
    vec![
        Row::new("spawn bash -c true (std)", "spawn_bash_std", || {
            Box::pin(async {
                let start = Instant::now();
                let status = Command::new("bash").args(["-c", "true"]).status().unwrap();
                let elapsed = start.elapsed();
                assert!(status.success());
                elapsed
            })
        }),
        Row::new("spawn bash -c true (tokio)", "spawn_bash_tokio", || {
            Box::pin(async {
                let start = Instant::now();
                let status = tokio::process::Command::new("bash")
                    .args(["-c", "true"])
                    .status()
                    .await
                    .unwrap();
                let elapsed = start.elapsed();
                assert!(status.success());
                elapsed
            })
        }),
    ]
}

// ---------------------------------------------------------------------------
// Throughput.

/// `collect()` calls per second with `callers` tasks calling in a loop.
async fn throughput(registry: &Registry, callers: usize) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let counting = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (registry, stop, done, counting) = (
                registry.clone(),
                stop.clone(),
                done.clone(),
                counting.clone(),
            );
            tokio::spawn(async move {
                let execution = execution();
                while !stop.load(Ordering::Relaxed) {
                    registry.collect(&execution).await.unwrap();
                    registry.prepare().await;
                    if counting.load(Ordering::Relaxed) {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    // collect() completes without ever returning Pending (a
                    // guest that makes no pending host call runs to its end),
                    // so a caller must yield for the others to get a turn.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    // This runs on the `block_on` thread, not on a worker: a blocking sleep
    // keeps it off the workers' timer wheel, which busy workers seldom turn.
    std::thread::sleep(THROUGHPUT_TIME / 5);
    counting.store(true, Ordering::Relaxed);
    let start = Instant::now();
    std::thread::sleep(THROUGHPUT_TIME);
    counting.store(false, Ordering::Relaxed);
    let elapsed = start.elapsed();
    let count = done.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    count as f64 / elapsed.as_secs_f64()
}

// ---------------------------------------------------------------------------
// Start-up, in a child process.

fn proc_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// The child: `Registry::new`, then load and register every example from
/// the (warm) cache; prints one JSON line.
fn startup_child() {
    // As the CLI runs: a multi-thread runtime with two workers.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
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
        .block_on(registry.register_manifest(&manifest))
        .unwrap();
    let total = start.elapsed();
    let rss_loaded = proc_status_kib("VmRSS:");
    let rss_loaded_anon = proc_status_kib("RssAnon:");
    let rss_loaded_file = proc_status_kib("RssFile:");
    let rss_loaded_shmem = proc_status_kib("RssShmem:");
    let first = Instant::now();
    runtime.block_on(registry.collect(&execution())).unwrap();
    let first_collect = first.elapsed();
    let rss_first = proc_status_kib("VmRSS:");
    // Then a burst from many callers, so that the pool's slots warm up.
    runtime.block_on(async {
        let tasks: Vec<_> = (0..WARM_CALLERS)
            .map(|_| {
                let registry = registry.clone();
                tokio::spawn(async move {
                    for _ in 0..WARM_COLLECTS_EACH {
                        registry.collect(&execution()).await.unwrap();
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
        "burst_collects": WARM_CALLERS * WARM_COLLECTS_EACH,
        "vm_size_before_kib": vm_before,
        "vm_size_registry_kib": vm_empty,
    });
    println!("{report}");
}

/// Runs [`startup_child`] [`STARTUP_RUNS`] times; returns the run with the
/// median total time, plus the spread of totals.
fn startup() -> Value {
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

// ---------------------------------------------------------------------------

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn machine() -> Value {
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

fn main() {
    if std::env::var_os(STARTUP_CHILD).is_some() {
        return startup_child();
    }
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
    // As the CLI runs: a multi-thread runtime with two workers.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // `--only <row key>`: sample that one row and nothing else (for a profiler).
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

async fn run(budget: Duration, only: Option<String>) -> Value {
    let execution = Arc::new(execution());
    let helper_dir = tempfile::tempdir().unwrap();
    let compiled = compile_hook_helper(helper_dir.path());
    if compiled.is_none() {
        eprintln!("no C compiler: the compiled-hook rows are skipped");
    }

    // Setups, checking that the rows that should agree do agree.
    eprintln!("setting up (the first run compiles the polyglot examples into the cache)");
    let builtins = Setup {
        registry: registry(),
        registrations: Vec::new(),
    };
    let native = {
        let registry = registry();
        let registration = registry.register_native(Arc::new(NativeLineage)).unwrap();
        Setup {
            registry,
            registrations: vec![registration],
        }
    };
    let wasm_1 = wasm_contributors(1).await;
    let wasm_8 = wasm_contributors(8).await;
    let puppet_1 = {
        let registry = registry();
        let echo = puppet(
            &registry,
            &[
                ("name", "echo"),
                ("keys", "DSH_ECHO=e"),
                ("pairs", "DSH_ECHO={session}"),
            ],
        );
        let imports = (
            echo.imports().len(),
            registry
                .load_file(artifacts::AGENT_LINEAGE.as_ref())
                .unwrap()
                .imports()
                .len(),
        );
        eprintln!(
            "imported interfaces: puppet {}, agent-lineage {}",
            imports.0, imports.1
        );
        let registration = registry.register(echo).await.unwrap();
        Setup {
            registry,
            registrations: vec![registration],
        }
    };
    let hook_sh_1 = hooks(&HookProgram::Shell, 1);
    let hook_sh_8 = hooks(&HookProgram::Shell, 8);
    let hook_c = compiled.map(|path| {
        let program = HookProgram::Compiled(path);
        (hooks(&program, 1), hooks(&program, 8))
    });
    let collect = async |setup: &Setup| setup.registry.collect(&execution).await.unwrap();
    let same = |a: &Overlay, b: &Overlay, what: &str| assert_eq!(a, b, "{what}");
    let wasm_1_overlay = collect(&wasm_1).await;
    assert_eq!(wasm_1_overlay.get("DSH_AGENT_DEPTH"), Some("1"));
    same(&collect(&native).await, &wasm_1_overlay, "native vs WASM");
    same(
        &collect(&hook_sh_1).await,
        &wasm_1_overlay,
        "sh hook vs WASM",
    );
    let wasm_8_overlay = collect(&wasm_8).await;
    assert_eq!(wasm_8_overlay.len(), 3 + 2 + 7);
    same(
        &collect(&hook_sh_8).await,
        &wasm_8_overlay,
        "8 sh hooks vs WASM",
    );
    if let Some((one, eight)) = &hook_c {
        same(&collect(one).await, &wasm_1_overlay, "C hook vs WASM");
        same(&collect(eight).await, &wasm_8_overlay, "8 C hooks vs WASM");
    }
    // Each polyglot example alone, and every example together.
    let wanted = |key: &str| only.as_deref().is_none_or(|only| only == key);
    let mut polyglot = Vec::new();
    let mut skipped = Vec::new();
    for example in EXAMPLES.iter().filter(|e| e.is_polyglot()) {
        if !example.built() {
            eprintln!("{}: {} not built; row skipped", example.name, example.path);
            skipped.push(example.name);
        } else if wanted(example.key) {
            let setup = examples([example]).await;
            let overlay = collect(&setup).await;
            assert!(overlay.len() > 3, "{} adds a key", example.name);
            polyglot.push((example.name, example.key, setup));
        }
    }
    let all = if wanted("all_examples") {
        let setup = examples(EXAMPLES.iter().filter(|e| e.built())).await;
        let overlay = collect(&setup).await;
        assert!(overlay.get("DSH_TRACEPARENT").is_some());
        Some(setup)
    } else {
        None
    };

    let mut rows = spawn_rows();
    for (name, key, setup) in [
        ("built-ins only", "builtins", &builtins),
        ("1 native contributor", "native_1", &native),
        ("1 Rust WASM contributor", "wasm_1", &wasm_1),
        ("8 Rust WASM contributors", "wasm_8", &wasm_8),
        ("1 Rust WASM (puppet)", "puppet_1", &puppet_1),
        ("1 hook (sh -c)", "hook_sh_1", &hook_sh_1),
        ("8 hooks (sh -c)", "hook_sh_8", &hook_sh_8),
    ] {
        rows.push(Row::collect(name, key, setup, &execution));
    }
    rows.push(Row::tool(
        "bash tool: true, built-ins only",
        "tool_builtins",
        &builtins,
        &execution,
    ));
    rows.push(Row::tool(
        "bash tool: true, 8 Rust WASM",
        "tool_wasm_8",
        &wasm_8,
        &execution,
    ));
    if let Some((one, eight)) = &hook_c {
        rows.push(Row::collect(
            "1 hook (compiled)",
            "hook_c_1",
            one,
            &execution,
        ));
        rows.push(Row::collect(
            "8 hooks (compiled)",
            "hook_c_8",
            eight,
            &execution,
        ));
    }
    for (name, key, setup) in &polyglot {
        rows.push(Row::collect(name, key, setup, &execution));
    }
    if let Some(all) = &all {
        let name = format!("all {} examples together", all.registrations.len());
        rows.push(Row::collect(&name, "all_examples", all, &execution));
    }
    if let Some(only) = &only {
        rows.retain(|row| &row.key == only);
        assert!(!rows.is_empty(), "no row {only}");
    }
    measure(&mut rows, budget).await;
    if only.is_some() {
        for row in &rows {
            eprintln!(
                "{}: median {:.1}µs, p99 {:.1}µs, {} samples",
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
    let get = |key: &str| rows.iter().find(|r| r.key == key);
    let ratio = |a: &str, b: &str, p: fn(&Row) -> Duration| {
        let (a, b) = (get(a)?, get(b)?);
        Some(p(a).as_secs_f64() / p(b).as_secs_f64())
    };
    let median = |r: &Row| r.median();
    let p99 = |r: &Row| r.p99();
    // (JSON key, label, numerator row, denominator row, target: "max" or
    // "min" and its value; "" for none).
    let comparisons: [(&str, &str, &str, &str, &str, f64); 10] = [
        (
            "tool_wasm_8_over_tool_builtins",
            "bash tool call, 8 WASM / built-ins only (end to end)",
            "tool_wasm_8",
            "tool_builtins",
            "max",
            1.15,
        ),
        (
            "wasm_8_over_spawn_bash_tokio",
            "8 WASM collect / bash -c true (tokio, as the executor spawns)",
            "wasm_8",
            "spawn_bash_tokio",
            "max",
            0.15,
        ),
        (
            "wasm_8_over_spawn_bash_std",
            "8 WASM collect / bash -c true (std)",
            "wasm_8",
            "spawn_bash_std",
            "max",
            0.15,
        ),
        (
            "hook_sh_1_over_wasm_1",
            "1 sh -c hook / 1 WASM",
            "hook_sh_1",
            "wasm_1",
            "min",
            20.0,
        ),
        (
            "hook_sh_8_over_wasm_8",
            "8 sh -c hooks / 8 WASM",
            "hook_sh_8",
            "wasm_8",
            "min",
            20.0,
        ),
        (
            "hook_c_1_over_wasm_1",
            "1 compiled hook / 1 WASM",
            "hook_c_1",
            "wasm_1",
            "min",
            20.0,
        ),
        (
            "hook_c_8_over_wasm_8",
            "8 compiled hooks / 8 WASM",
            "hook_c_8",
            "wasm_8",
            "min",
            20.0,
        ),
        (
            "wasm_1_over_native_1",
            "1 WASM / 1 native",
            "wasm_1",
            "native_1",
            "",
            0.0,
        ),
        (
            "wasm_8_over_native_1",
            "8 WASM / 1 native",
            "wasm_8",
            "native_1",
            "",
            0.0,
        ),
        (
            "puppet_1_over_wasm_1",
            "1 puppet / 1 agent-lineage (import-heavy guest)",
            "puppet_1",
            "wasm_1",
            "",
            0.0,
        ),
    ];
    let mut ratios = Vec::new();
    for (key, label, numerator, denominator, target, bound) in comparisons {
        let (Some(m), Some(p)) = (
            ratio(numerator, denominator, median),
            ratio(numerator, denominator, p99),
        ) else {
            continue;
        };
        let met = match target {
            "max" => Some(m <= bound),
            "min" => Some(m >= bound),
            _ => None,
        };
        ratios.push(json!({
                "key": key, "label": label, "median": m, "p99": p,
                "target": (!target.is_empty()).then(|| format!("{target} {bound}")),
                "met": met,
        }));
    }
    let wasm_1_p50 = us(get("wasm_1").unwrap().median());
    ratios.push(json!({
        "key": "wasm_1_p50_us",
        "label": "1 Rust WASM contributor, p50 (µs)",
        "value": wasm_1_p50,
        "target": "max 40",
        "met": wasm_1_p50 <= 40.0,
    }));

    let mut throughput_rows = Vec::new();
    for callers in CALLERS {
        eprint!("\rthroughput: {callers} callers   ");
        let one = throughput(&wasm_1.registry, callers).await;
        let eight = throughput(&wasm_8.registry, callers).await;
        let native = throughput(&native.registry, callers).await;
        throughput_rows.push(json!({
            "callers": callers,
            "wasm_1_per_s": one,
            "wasm_8_per_s": eight,
            "native_1_per_s": native,
        }));
    }
    eprintln!();

    // Start-up last: the children compete with nothing of ours.
    drop(rows);
    let startup = tokio::task::spawn_blocking(startup).await.unwrap();

    json!({
        "machine": machine(),
        "latency": latency,
        "polyglot_skipped": skipped,
        "ratios": ratios,
        "throughput": throughput_rows,
        "startup": startup,
    })
}

fn print_report(report: &Value) {
    let machine = &report["machine"];
    println!(
        "machine: {} CPUs, {}, Linux {}\n",
        machine["cpus"],
        machine["cpu"].as_str().unwrap_or(""),
        machine["kernel"].as_str().unwrap_or("")
    );
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

    let s = &report["startup"];
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
        "VmRSS after {} more collect()s by {WARM_CALLERS} callers: {:.1} MiB",
        s["burst_collects"],
        kib("rss_after_burst_kib")
    );
    println!(
        "VmSize: {:.1} GiB reserved by Registry::new (engine pool)",
        (kib("vm_size_registry_kib") - kib("vm_size_before_kib")) / 1024.0
    );
}

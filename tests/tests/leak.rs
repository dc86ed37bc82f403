//! Memory over many collections: after a warm-up, the resident set must level
//! off, so a host that serves an agent for days does not grow per call. Each
//! cycle instantiates every contributor afresh (a real component, a puppet,
//! and a puppet that fails under `on_error = "omit"`), so a leak per instance,
//! per store or per error shows up as steady growth.
//!
//! The soak: thousands of overlapping executions by parent and child agents,
//! foreground and background, while contributors come and go and hostile
//! ones misbehave under `on_error = "omit"`; every healthy execution gets
//! exactly its own values, RSS stays bounded, and threads and descriptors
//! return to where they started.
//!
//! This is its own test binary, and its tests take turns (`QUIET`), so
//! nothing else runs in the process while one measures.
//! `tests/benches/leak.rs` runs the same cycle 100,000 times.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use dsh_env::Grants;
use dsh_env::{
    Agent, HostLimits, Limits, Mode, OnError, Overlay, Registration, Registry, ToolExecution,
};
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};
use dsh_env_harness::LocalExecutor;
use dsh_env_harness::tool::{BashTool, ShellRun};
use dsh_env_tests::leak::{contributors, rss_kib};
use dsh_env_tests::{agent_call, artifacts, puppet, registry, registry_with};
use serde_json::json;

/// Held by each test while it runs: they measure the whole process.
static QUIET: Mutex<()> = Mutex::new(());

/// Cycles before the first reading, so pools, caches and the allocator settle.
const WARM_UP: usize = 1_000;
/// Cycles measured: half before the midpoint reading, half after.
const CYCLES: usize = 24_000;
/// Growth allowed between the midpoint and the end.
const BOUND_KIB: u64 = 8 << 10;

/// Collects for cycles `range`, checking every overlay.
async fn run(registry: &Registry, range: std::ops::Range<usize>) {
    for i in range {
        let (call, session) = (format!("call-{i}"), format!("session-{}", i % 97));
        let collection = registry
            .collect(&agent_call(&call, &session), &CollectOptions::new())
            .await
            .unwrap();
        assert_eq!(collection.overlay.get("DSH_ECHO_CALL"), Some(call.as_str()));
        assert_eq!(
            collection.overlay.get("DSH_ECHO_SESSION"),
            Some(session.as_str())
        );
        assert_eq!(collection.overlay.get("DSH_AGENT_DEPTH"), Some("0"));
        assert_eq!(collection.omitted.len(), 1);
    }
}

#[test]
fn resident_memory_levels_off_over_many_collections() {
    let _quiet = QUIET.lock().unwrap_or_else(|p| p.into_inner());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(resident_memory_levels_off());
}

async fn resident_memory_levels_off() {
    let registry = registry();
    let _contributors = contributors(&registry).await;
    let start = Instant::now();

    run(&registry, 0..WARM_UP).await;
    let warm = rss_kib();
    let measured = Instant::now();
    run(&registry, WARM_UP..WARM_UP + CYCLES / 2).await;
    let mid = rss_kib();
    run(&registry, WARM_UP + CYCLES / 2..WARM_UP + CYCLES).await;
    let end = rss_kib();

    let per_cycle = measured.elapsed() / CYCLES as u32;
    println!(
        "RSS after {WARM_UP} warm-up cycles: {warm} KiB; after {} more: {mid} KiB; \
         after {} more: {end} KiB (midpoint to end: {:+} KiB); \
         {per_cycle:?} per cycle, {:?} in all",
        CYCLES / 2,
        CYCLES / 2,
        end as i64 - mid as i64,
        start.elapsed(),
    );
    assert!(
        end.saturating_sub(mid) < BOUND_KIB,
        "RSS grew by {} KiB over {} collections (from {mid} to {end} KiB)",
        end - mid,
        CYCLES / 2
    );
}

/// Executions in the soak, all told.
const SOAK_EXECUTIONS: usize = 10_000;
/// Callers collecting at once.
const SOAK_CALLERS: usize = 32;
/// Every this many executions, one runs a real `bash` through the bash tool.
const SOAK_SPAWN_EVERY: usize = 100;
/// The soak's resident set must stay under this, hostile guests included.
const SOAK_RSS_BOUND_KIB: u64 = 256 << 10;

/// What one execution must see: its own values, from one snapshot.
fn check_overlay(overlay: &Overlay, execution: &ToolExecution) {
    let agent = execution.agent.as_ref().expect("soak calls have agents");
    let mode = match execution.mode {
        Mode::Foreground => "foreground",
        Mode::Background => "background",
    };
    assert_eq!(
        overlay.get("DSH_SESSION_ID"),
        Some(agent.session_id.as_str())
    );
    assert_eq!(
        overlay.get("DSH_ECHO_SESSION"),
        Some(agent.session_id.as_str())
    );
    assert_eq!(
        overlay.get("DSH_ECHO_CALL"),
        Some(execution.call_id.as_str())
    );
    assert_eq!(overlay.get("DSH_ECHO_MODE"), Some(mode));
    let depth = agent.depth.to_string();
    assert_eq!(overlay.get("DSH_AGENT_DEPTH"), Some(depth.as_str()));
    assert_eq!(
        overlay.get("DSH_PARENT_SESSION_ID"),
        agent.parent_session_id.as_deref()
    );
    // `second` is registered after `first` and disposed before it, always
    // with the same generation: one snapshot never shows `second` alone or
    // the two from different generations.
    if let Some(second) = overlay.get("DSH_SECOND_GEN") {
        assert_eq!(overlay.get("DSH_FIRST_GEN"), Some(second), "mixed snapshot");
    }
    for (key, _) in overlay.iter() {
        assert!(
            !key.as_str().starts_with("DSH_HOSTILE"),
            "a failing contributor's key {key} reached the overlay"
        );
    }
}

/// Execution `i`: a parent or its child, in the foreground or background.
fn soak_execution(i: usize, cwd: &str) -> ToolExecution {
    let parent = format!("parent-{}", i % 13);
    let child = i.is_multiple_of(3);
    let agent = Agent {
        session_id: if child {
            format!("child-{i}")
        } else {
            parent.clone()
        },
        cwd: Some(cwd.to_string()),
        parent_session_id: child.then_some(parent),
        depth: u32::from(child),
    };
    let mode = if i.is_multiple_of(4) {
        Mode::Background
    } else {
        Mode::Foreground
    };
    ToolExecution::new(format!("call-{i}"), "bash")
        .with_agent(agent)
        .with_mode(mode)
}

/// Registers and disposes contributors while the callers run: the pair
/// `first`/`second` with a new generation each time, and in turns the
/// hostile ones (a loop, a memory hog, a descriptor hoarder), under `omit`.
async fn churn(registry: &Registry, cwd: &str, done: &std::sync::atomic::AtomicBool) -> u64 {
    let hostile = |name: &str, resolve: &str, limits: Limits, cwd_read: bool| {
        puppet(
            registry,
            &[
                ("name", name),
                ("keys", &format!("DSH_HOSTILE_{}=h", name.to_uppercase())),
                ("resolve", resolve),
            ],
        )
        .with_limits(limits)
        .with_on_error(OnError::Omit)
        .with_grants(Grants {
            cwd_read,
            ..Grants::default()
        })
    };
    let quick = Limits {
        deadline: Duration::from_millis(20),
        memory_bytes: 32 << 20,
        ..Limits::default()
    };
    let hostiles = [
        hostile("looper", "loop", quick.clone(), false),
        hostile("hog", "grow", quick.clone(), false),
        hostile("hoarder", &format!("hoard:{cwd}/f:100000"), quick, true),
    ];
    let mut peak = rss_kib();
    let mut generation = 0u64;
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        generation += 1;
        let generation_text = generation.to_string();
        let flap = |name: &str, key: &str| {
            puppet(
                registry,
                &[
                    ("name", name),
                    ("keys", &format!("{key}=g")),
                    ("pairs", &format!("{key}={generation_text}")),
                ],
            )
        };
        let first = registry
            .register(flap("first", "DSH_FIRST_GEN"))
            .await
            .unwrap();
        let second = registry
            .register(flap("second", "DSH_SECOND_GEN"))
            .await
            .unwrap();
        let hostile = hostiles[generation as usize % hostiles.len()].clone();
        let hostile: Option<Registration> = if generation.is_multiple_of(2) {
            Some(registry.register(hostile).await.unwrap())
        } else {
            None
        };
        tokio::time::sleep(Duration::from_millis(15)).await;
        drop(hostile);
        drop(second);
        drop(first);
        peak = peak.max(rss_kib());
    }
    peak
}

/// This process's runtime threads (tokio's and dsh-env's own, by name: the
/// test harness starts threads of its own meanwhile) and open descriptors.
fn threads_and_descriptors() -> (usize, usize) {
    let ours = |task: &std::fs::DirEntry| {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        name.starts_with("tokio-") || name.starts_with("dsh-env")
    };
    let threads = std::fs::read_dir("/proc/self/task")
        .expect("Linux /proc")
        .flatten()
        .filter(ours)
        .count();
    let descriptors = std::fs::read_dir("/proc/self/fd")
        .expect("Linux /proc")
        .count();
    (threads, descriptors)
}

#[test]
fn the_soak_holds_under_churn_and_hostile_contributors() {
    let _quiet = QUIET.lock().unwrap_or_else(|p| p.into_inner());
    let before = threads_and_descriptors();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_keep_alive(Duration::from_millis(50))
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), "x").unwrap();
    let cwd = dir.path().to_str().unwrap().to_string();
    let (served, peak_kib, elapsed) = runtime.block_on(async {
        // A runtime of its own: its threads and descriptors must go with it.
        let registry = registry_with(HostLimits::default());
        let echo = puppet(
            &registry,
            &[
                ("name", "echo"),
                ("keys", "DSH_ECHO_SESSION=s|DSH_ECHO_CALL=c|DSH_ECHO_MODE=m"),
                (
                    "pairs",
                    "DSH_ECHO_SESSION={session}|DSH_ECHO_CALL={call}|DSH_ECHO_MODE={mode}",
                ),
            ],
        );
        let lineage = registry
            .load(
                LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
                &LoadOptions::new(),
            )
            .unwrap();
        let _echo = registry.register(echo).await.unwrap();
        let _lineage = registry.register(lineage).await.unwrap();
        let tool = BashTool::new(registry.clone(), LocalExecutor, &cwd);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let done = std::sync::atomic::AtomicBool::new(false);
        let started = Instant::now();
        let caller = async || {
            let mut served = 0;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= SOAK_EXECUTIONS {
                    return served;
                }
                let execution = soak_execution(i, &cwd);
                if i.is_multiple_of(SOAK_SPAWN_EVERY) {
                    let arguments = json!({
                        "command": "printf %s \"$DSH_ECHO_CALL $DSH_SESSION_ID\"",
                        "run_in_background": execution.mode == Mode::Background,
                    });
                    let outcome = tool.call(&execution, &arguments).await.unwrap();
                    let output = match outcome {
                        ShellRun::Finished(output) => output,
                        ShellRun::Started(handle) => handle.wait().await.unwrap(),
                    };
                    let session = &execution.agent.as_ref().unwrap().session_id;
                    let expected = format!("{} {session}", execution.call_id);
                    assert_eq!(String::from_utf8_lossy(&output.stdout), expected);
                } else {
                    let collection = registry
                        .collect(&execution, &CollectOptions::new())
                        .await
                        .unwrap();
                    check_overlay(&collection.overlay, &execution);
                }
                served += 1;
                if i.is_multiple_of(64) {
                    registry.prepare().await;
                }
            }
        };
        let callers = async {
            let served = futures::future::join_all((0..SOAK_CALLERS).map(|_| caller())).await;
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            served.into_iter().sum::<usize>()
        };
        let (served, peak) = tokio::join!(callers, churn(&registry, &cwd, &done));
        let elapsed = started.elapsed();
        // A store retired by the last calls may close its files a moment
        // later, off this task (it once read 1 under load): a leak stays.
        let settle = Instant::now();
        while registry.shared_engine().guest_descriptors() > 0
            && settle.elapsed() < Duration::from_secs(5)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(registry.shared_engine().guest_descriptors(), 0);
        (served, peak, elapsed)
    });
    drop(runtime);
    // Threads (the epoch ticker, the guest I/O runtime, the callers'
    // runtime) and descriptors go away with their owners.
    let settled = Instant::now();
    let mut after = threads_and_descriptors();
    while (after.0 > before.0 || after.1 > before.1) && settled.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(50));
        after = threads_and_descriptors();
    }
    println!(
        "soak: {served} executions by {SOAK_CALLERS} callers in {elapsed:?}; peak RSS \
         {peak_kib} KiB (bound {SOAK_RSS_BOUND_KIB} KiB); threads and descriptors \
         {before:?} before, {after:?} after"
    );
    assert_eq!(served, SOAK_EXECUTIONS);
    assert!(peak_kib < SOAK_RSS_BOUND_KIB, "peak RSS {peak_kib} KiB");
    assert!(
        after.0 <= before.0 && after.1 <= before.1,
        "threads and descriptors: {before:?} before, {after:?} after"
    );
}

/// If a spawn still runs out of descriptors while a guest holds some, the
/// error names the contributor. The process's descriptor limit is lowered
/// for a moment to make the spawn fail for real.
#[test]
fn a_spawn_out_of_descriptors_names_the_guests_holding_them() {
    let _quiet = QUIET.lock().unwrap_or_else(|p| p.into_inner());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let registry = registry();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        let cwd = dir.path().to_str().unwrap().to_string();
        let hoarder = puppet(
            &registry,
            &[
                ("name", "hoarder"),
                ("keys", "DSH_HOARDED=h"),
                ("resolve", &format!("hoard:{cwd}/f:20:3000")),
            ],
        )
        .with_grants(Grants {
            cwd_read: true,
            ..Grants::default()
        })
        .with_limits(Limits {
            deadline: Duration::from_secs(10),
            ..Limits::default()
        })
        // Calls without an agent get no cwd, so its resolve fails at once
        // there: the bash calls below run without it.
        .with_on_error(OnError::Omit);
        let _hoarder = registry.register(hoarder).await.unwrap();
        let execution = dsh_env_tests::agent_call_in("c", "s", &cwd);
        let holding = tokio::spawn({
            let (registry, execution) = (registry.clone(), execution.clone());
            async move { registry.collect(&execution, &CollectOptions::new()).await }
        });
        while registry.shared_engine().guest_descriptors() < 20 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A spawn that needs any new descriptor now fails with EMFILE.
        let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        let original = set_descriptor_limit(open);
        let tool = BashTool::new(registry.clone(), LocalExecutor, &cwd);
        let no_agent = ToolExecution::new("d", "bash");
        let started = tool.call(&no_agent, &json!({"command": "true"})).await;
        set_descriptor_limit(original);
        let Err(message) = started.map_err(|e| e.to_string()) else {
            panic!("the spawn must fail")
        };
        assert!(
            message.contains("guest descriptors held now: `hoarder`: 20"),
            "{message}"
        );
        let overlay = holding.await.unwrap().unwrap().overlay;
        assert_eq!(overlay.get("DSH_HOARDED"), Some("20"));
        assert_eq!(registry.shared_engine().guest_descriptors(), 0);
        let spawned = tool.call(&no_agent, &json!({"command": "true"})).await;
        assert!(matches!(spawned, Ok(ShellRun::Finished(ref out)) if out.exit_code == Some(0)));
    });
}

/// Sets this process's soft descriptor limit; returns the previous one.
fn set_descriptor_limit(soft: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        let previous = limit.rlim_cur;
        limit.rlim_cur = soft;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        previous
    }
}

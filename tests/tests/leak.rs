//! Memory over many collections: after a warm-up, the resident set must level
//! off, so a host that serves an agent for days does not grow per call. Each
//! cycle instantiates every contributor afresh (a real component, a puppet,
//! and a puppet that fails under `on_error = "omit"`), so a leak per instance,
//! per store or per error shows up as steady growth.
//!
//! This is its own test binary, so nothing else runs in the process while it
//! measures. `tests/benches/leak.rs` runs the same cycle 100,000 times.

use std::time::Instant;

use dsh_env::{OnError, Registration, Registry};
use dsh_env_tests::{agent_call, artifacts, puppet, registry};

/// Cycles before the first reading, so pools, caches and the allocator settle.
const WARM_UP: usize = 1_000;
/// Cycles measured: half before the midpoint reading, half after.
const CYCLES: usize = 24_000;
/// Growth allowed between the midpoint and the end.
const BOUND_KIB: u64 = 8 << 10;

/// The resident set of this process, in KiB (`VmRSS` of /proc/self/status).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

async fn contributors(registry: &Registry) -> Vec<Registration> {
    let lineage = registry
        .load_file(artifacts::AGENT_LINEAGE.as_ref())
        .unwrap();
    let echo = puppet(
        registry,
        &[
            ("name", "echo"),
            ("keys", "DSH_ECHO_SESSION=s|DSH_ECHO_CALL=c"),
            ("pairs", "DSH_ECHO_SESSION={session}|DSH_ECHO_CALL={call}"),
        ],
    );
    let failing = puppet(
        registry,
        &[
            ("name", "failing"),
            ("keys", "DSH_FAILING=f"),
            ("resolve", "err:always fails"),
        ],
    )
    .with_on_error(OnError::Omit);
    let mut registrations = Vec::new();
    for component in [lineage, echo, failing] {
        registrations.push(registry.register(component).await.unwrap());
    }
    registrations
}

/// Collects for cycles `range`, checking every overlay.
async fn run(registry: &Registry, range: std::ops::Range<usize>) {
    for i in range {
        let (call, session) = (format!("call-{i}"), format!("session-{}", i % 97));
        let collection = registry
            .collect_report(&agent_call(&call, &session))
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

#[tokio::test]
async fn resident_memory_levels_off_over_many_collections() {
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

//! Memory over many collections: after a warm-up, the resident set must level
//! off, so a host that serves an agent for days does not grow per call. Each
//! cycle instantiates every contributor afresh (a real component, a puppet,
//! and a puppet that fails under `on_error = "omit"`), so a leak per instance,
//! per store or per error shows up as steady growth.
//!
//! This is its own test binary, so nothing else runs in the process while it
//! measures. `tests/benches/leak.rs` runs the same cycle 100,000 times.

use std::time::Instant;

use dsh_env::Registry;
use dsh_env_tests::leak::{contributors, rss_kib};
use dsh_env_tests::{agent_call, registry};

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

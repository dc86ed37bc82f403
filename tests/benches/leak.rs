//! Resident memory over 100,000 `collect()` cycles, each instantiating a real
//! component, a puppet, and a puppet that fails under `on_error = "omit"`.
//! Prints RSS every 25,000 cycles and the time per cycle; a steady climb
//! between readings is a leak. `tests/tests/leak.rs` asserts the same shorter.
//!
//! Run: `cargo bench --profile perf --bench leak`

use std::time::Instant;

use dsh_env::CollectOptions;
use dsh_env_tests::leak::{contributors, rss_kib};
use dsh_env_tests::{agent_call, registry};

const CYCLES: usize = 100_000;
const READINGS: usize = 4;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let registry = registry();
    let _contributors = contributors(&registry).await;
    let step = CYCLES / READINGS;
    println!(
        "{:>8} {:>10} {:>12} {:>14}",
        "cycles", "RSS KiB", "Δ KiB", "µs/cycle"
    );
    let first = rss_kib();
    println!("{:>8} {first:>10} {:>12} {:>14}", 0, "", "");
    let (mut previous, start) = (first, Instant::now());
    for reading in 1..=READINGS {
        let segment = Instant::now();
        for i in (reading - 1) * step..reading * step {
            let (call, session) = (format!("call-{i}"), format!("session-{}", i % 97));
            let collection = registry
                .collect(&agent_call(&call, &session), &CollectOptions::new())
                .await
                .unwrap();
            assert_eq!(collection.overlay.get("DSH_ECHO_CALL"), Some(call.as_str()));
            assert_eq!(collection.omitted.len(), 1);
        }
        let per_cycle = segment.elapsed().as_secs_f64() * 1e6 / step as f64;
        let rss = rss_kib();
        println!(
            "{:>8} {rss:>10} {:>+12} {per_cycle:>14.1}",
            reading * step,
            rss as i64 - previous as i64
        );
        previous = rss;
    }
    let total = start.elapsed();
    println!(
        "{CYCLES} cycles in {total:.1?}: {:.1} µs per cycle; RSS {first} -> {previous} KiB ({:+} KiB)",
        total.as_secs_f64() * 1e6 / CYCLES as f64,
        previous as i64 - first as i64
    );
}

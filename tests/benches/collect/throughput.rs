//! Throughput: `collect()` calls per second from many concurrent callers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dsh_env::Registry;
use serde_json::{Value, json};

use crate::setups::{Setups, execution};
use dsh_env::CollectOptions;

/// Concurrent callers for the throughput table, and the time per measurement.
const CALLERS: [usize; 4] = [1, 2, 8, 64];
const THROUGHPUT_TIME: Duration = Duration::from_millis(1500);

/// The throughput table: one row per caller count, for one and eight WASM
/// contributors and one native one.
pub async fn table(setups: &Setups) -> Vec<Value> {
    let mut rows = Vec::new();
    for callers in CALLERS {
        eprint!("\rthroughput: {callers} callers   ");
        let one = throughput(&setups.wasm_1.registry, callers).await;
        let eight = throughput(&setups.wasm_8.registry, callers).await;
        let native = throughput(&setups.native.registry, callers).await;
        rows.push(json!({
            "callers": callers,
            "wasm_1_per_s": one,
            "wasm_8_per_s": eight,
            "native_1_per_s": native,
        }));
    }
    eprintln!();
    rows
}

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
                    registry
                        .collect(&execution, &CollectOptions::new())
                        .await
                        .unwrap();
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

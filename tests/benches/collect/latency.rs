//! Latency rows: how one sample of each is taken, and the interleaved
//! rounds that sample them all.

use std::future::Future;
use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_env::ToolExecution;
use dsh_env_harness::LocalExecutor;
use dsh_env_harness::tool::{BashTool, ShellRun};
use serde_json::json;

use crate::setups::Setup;
use dsh_env::CollectOptions;

/// Interleaved rounds per latency row.
const ROUNDS: usize = 10;
/// Sampling time per latency row, over all rounds (a tenth with `--quick`).
pub const ROW_BUDGET: Duration = Duration::from_secs(2);
/// Bounds on the samples per latency row.
const MIN_SAMPLES: usize = 200;
const MAX_SAMPLES: usize = 20_000;

type Timed = Pin<Box<dyn Future<Output = Duration>>>;

/// One latency row: a name, a JSON key, and how to take one sample.
pub struct Row {
    pub name: String,
    pub key: String,
    sample: Box<dyn Fn() -> Timed>,
    pub samples: Vec<Duration>,
}

/// The time `work` takes; `check` then looks at its output, untimed.
async fn timed<T>(work: impl Future<Output = T>, check: impl FnOnce(T)) -> Duration {
    let start = Instant::now();
    let output = work.await;
    let elapsed = start.elapsed();
    check(output);
    elapsed
}

impl Row {
    /// One `collect()` from `setup`'s registry.
    pub fn collect(name: &str, key: &str, setup: &Setup, execution: &Arc<ToolExecution>) -> Row {
        Row::collect_after(name, key, setup, execution, false)
    }

    /// One `collect()` from `setup`'s registry right after a `bash -c true`
    /// child has run (untimed), as the bash tool's next call starts in a
    /// back-to-back loop: the part of end to end that no placement of the
    /// other work can hide.
    pub fn collect_after_child(
        name: &str,
        key: &str,
        setup: &Setup,
        execution: &Arc<ToolExecution>,
    ) -> Row {
        Row::collect_after(name, key, setup, execution, true)
    }

    fn collect_after(
        name: &str,
        key: &str,
        setup: &Setup,
        execution: &Arc<ToolExecution>,
        child: bool,
    ) -> Row {
        let (registry, execution) = (setup.registry.clone(), execution.clone());
        Row::new(name, key, move || {
            let (registry, execution) = (registry.clone(), execution.clone());
            Box::pin(async move {
                if child {
                    let mut bash = tokio::process::Command::new("bash");
                    assert!(bash.args(["-c", "true"]).status().await.unwrap().success());
                }
                let collect = async {
                    registry
                        .collect(&execution, &CollectOptions::new())
                        .await
                        .unwrap()
                        .overlay
                };
                let elapsed = timed(collect, drop).await;
                // As the bash tool does while its child starts.
                registry.prepare().await;
                elapsed
            })
        })
    }

    /// One bash tool call running `true`, end to end: collect, spawn
    /// `bash -c true` with the overlay, wait for it.
    pub fn tool(name: &str, key: &str, setup: &Setup, execution: &Arc<ToolExecution>) -> Row {
        let tool = BashTool::new(setup.registry.clone(), LocalExecutor, "/tmp");
        let execution = execution.clone();
        Row::new(name, key, move || {
            let (tool, execution) = (tool.clone(), execution.clone());
            Box::pin(async move {
                let call = async {
                    let arguments = json!({ "command": "true" });
                    tool.call(&execution, &arguments).await.unwrap()
                };
                timed(call, |outcome| {
                    assert!(matches!(outcome, ShellRun::Finished(o) if o.exit_code == Some(0)));
                })
                .await
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

    /// The median sample (once [`measure`] has sorted them).
    pub fn median(&self) -> Duration {
        self.samples[self.samples.len() / 2]
    }

    /// The 99th percentile sample (once [`measure`] has sorted them).
    pub fn p99(&self) -> Duration {
        self.samples[(self.samples.len() * 99 / 100).min(self.samples.len() - 1)]
    }
}

/// Samples every row in interleaved rounds, after a warm-up that also sizes
/// each row's sample count to the time budget.
pub async fn measure(rows: &mut [Row], budget: Duration) {
    let mut per_round = Vec::new();
    for row in rows.iter() {
        let warm_start = Instant::now();
        let mut warm = Vec::new();
        while warm.len() < 20 || (warm.len() < 200 && warm_start.elapsed() < budget / 20) {
            // By the wall time of a whole sample, untimed parts included.
            let start = Instant::now();
            (row.sample)().await;
            warm.push(start.elapsed());
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

/// `bash -c true` spawned by std (blocking) and by tokio (as the executor
/// spawns): what a `collect()` is weighed against.
pub fn spawn_rows() -> Vec<Row> {
    let succeeded = |status: std::process::ExitStatus| assert!(status.success());
    vec![
        Row::new("spawn bash -c true (std)", "spawn_bash_std", move || {
            let spawn = async { Command::new("bash").args(["-c", "true"]).status().unwrap() };
            Box::pin(timed(spawn, succeeded))
        }),
        Row::new(
            "spawn bash -c true (tokio)",
            "spawn_bash_tokio",
            move || {
                let spawn = async {
                    let mut command = tokio::process::Command::new("bash");
                    command.args(["-c", "true"]).status().await.unwrap()
                };
                Box::pin(timed(spawn, succeeded))
            },
        ),
    ]
}

/// A duration in microseconds.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

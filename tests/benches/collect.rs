//! `collect()` cost, side by side in one run: built-ins only, one native
//! contributor, one and eight Rust WASM contributors. Reports median and p99,
//! and ratios against the native contributor.
//!
//! Run: `cargo bench -p dsh-env-tests --profile dev --bench collect`

use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_env::{NativeContributor, RawDeclaration, Registration, Registry, ToolExecution};
use dsh_env_tests::{agent_call, artifacts, puppet, registry};

const ITERATIONS: usize = 2000;

/// The same facts as the `agent-lineage` component, computed in-process.
struct NativeLineage;

impl NativeContributor for NativeLineage {
    fn declare(&self) -> RawDeclaration {
        RawDeclaration {
            name: "native-lineage".into(),
            keys: vec![
                ("DSH_PARENT_SESSION_ID".into(), "Parent session.".into()),
                ("DSH_AGENT_DEPTH".into(), "Depth.".into()),
            ],
        }
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

struct Stats {
    median: Duration,
    p99: Duration,
}

async fn measure(registry: &Registry) -> Stats {
    let execution = agent_call("bench-call", "bench-session");
    for _ in 0..100 {
        registry.collect(&execution).await.unwrap();
    }
    let mut samples = Vec::with_capacity(ITERATIONS);
    for _ in 0..ITERATIONS {
        let start = Instant::now();
        let overlay = registry.collect(&execution).await.unwrap();
        samples.push(start.elapsed());
        drop(overlay);
    }
    samples.sort();
    Stats {
        median: samples[samples.len() / 2],
        p99: samples[samples.len() * 99 / 100],
    }
}

async fn wasm_contributors(registry: &Registry, count: usize) -> Vec<Registration> {
    let mut registrations = Vec::new();
    let lineage = registry
        .load_file(artifacts::AGENT_LINEAGE.as_ref())
        .unwrap();
    registrations.push(registry.register(lineage).await.unwrap());
    for i in 1..count {
        let (name, keys) = (format!("echo-{i}"), format!("DSH_ECHO_{i}=e"));
        let pairs = format!("DSH_ECHO_{i}={{session}}");
        let component = puppet(
            registry,
            &[("name", &name), ("keys", &keys), ("pairs", &pairs)],
        );
        registrations.push(registry.register(component).await.unwrap());
    }
    registrations
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut rows: Vec<(&str, Stats)> = Vec::new();

    let builtins = registry();
    rows.push(("built-ins only", measure(&builtins).await));

    let native = registry();
    let _native = native.register_native(Arc::new(NativeLineage)).unwrap();
    rows.push(("1 native contributor", measure(&native).await));

    let one = registry();
    let _one = wasm_contributors(&one, 1).await;
    rows.push(("1 Rust WASM contributor", measure(&one).await));

    let eight = registry();
    let _eight = wasm_contributors(&eight, 8).await;
    rows.push(("8 Rust WASM contributors", measure(&eight).await));

    let baseline = rows[1].1.median.as_secs_f64();
    println!(
        "{:<26} {:>12} {:>12} {:>14}",
        "collect()", "median", "p99", "x native"
    );
    for (name, stats) in &rows {
        println!(
            "{name:<26} {:>10.1}µs {:>10.1}µs {:>13.1}x",
            stats.median.as_secs_f64() * 1e6,
            stats.p99.as_secs_f64() * 1e6,
            stats.median.as_secs_f64() / baseline
        );
    }
}

//! Tiered compilation: a cache miss compiled by Winch at once, Cranelift's
//! code in the background (or never, for a short-lived process), and the
//! same bounds on either kind of code.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use dsh_env::{
    CodeTier, ContributorComponent, FailureCause, GuestFailure, Limits, Registry, Tiering,
};
use dsh_env_tests::{agent_call, artifacts, builder, registry_at};

use crate::cache::entries;
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};

/// How long a tier-up of a small Rust guest may take on a loaded machine.
const TIER_UP_BOUND: Duration = Duration::from_secs(300);

/// A registry with a cold cache in `home`, compiling as `tiering` says.
fn tiered(home: &Path, tiering: Tiering) -> Registry {
    let home = dsh_env::DshHome::from_absolute(home).unwrap();
    builder(home).tiering(tiering).build().unwrap()
}

/// The first collect's `DSH_AGENT_DEPTH` in `registry`.
async fn depth(registry: &Registry) -> Option<String> {
    let overlay = registry
        .collect(&agent_call("c", "s"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    overlay.get("DSH_AGENT_DEPTH").map(str::to_string)
}

#[tokio::test]
async fn a_long_lived_host_runs_baseline_code_until_the_optimized_code_is_ready() {
    let home = tempfile::tempdir().unwrap();
    let registry = tiered(home.path(), Tiering::Background);
    let component = registry
        .load(
            LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap();
    assert_eq!(component.tier(), Some(CodeTier::Baseline));
    let _registration = registry.register(component.clone()).await.unwrap();
    assert_eq!(depth(&registry).await.as_deref(), Some("0"));

    // Registration queued the tier-up; calls go on meanwhile.
    let started = Instant::now();
    while component.tier() != Some(CodeTier::Optimized) {
        assert!(started.elapsed() < TIER_UP_BOUND, "no tier-up");
        assert_eq!(depth(&registry).await.as_deref(), Some("0"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(depth(&registry).await.as_deref(), Some("0"));
    assert_eq!(entries(&registry).len(), 2, "one artifact per tier");

    // The next process finds the optimized code, whatever its tiering.
    for tiering in [Tiering::Baseline, Tiering::Background] {
        let next = tiered(home.path(), tiering);
        let component = next
            .load(
                LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
                &LoadOptions::new(),
            )
            .unwrap();
        assert_eq!(component.tier(), Some(CodeTier::Optimized), "{tiering:?}");
    }
}

#[tokio::test]
async fn a_short_lived_process_compiles_only_the_baseline() {
    let home = tempfile::tempdir().unwrap();
    let registry = tiered(home.path(), Tiering::Baseline);
    let component = registry
        .load(
            LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap();
    let _registration = registry.register(component.clone()).await.unwrap();
    assert_eq!(depth(&registry).await.as_deref(), Some("0"));
    // Longer than the optimized compile of this guest takes here.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(component.tier(), Some(CodeTier::Baseline));
    assert_eq!(entries(&registry).len(), 1);

    // The default compiles the optimized code at load, as before tiers.
    let optimized = registry_at(home.path());
    let component = (optimized.load(
        LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
        &LoadOptions::new(),
    ))
    .unwrap();
    assert_eq!(component.tier(), Some(CodeTier::Optimized));
    assert_eq!(entries(&registry).len(), 2);
}

/// The puppet guest as `registry` loads it, playing `resolve` under `limits`.
fn hostile(component: &ContributorComponent, how: &str, limits: Limits) -> ContributorComponent {
    let config: BTreeMap<String, String> = [("name", "hostile"), ("keys", "DSH_OUT=o")]
        .into_iter()
        .chain([("resolve", how)])
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    component.clone().with_config(config).with_limits(limits)
}

/// Winch emits the same epoch and fuel checks as Cranelift, and its code
/// runs under the same limiter, stack limit and deadline.
#[tokio::test]
async fn baseline_code_is_bounded_like_optimized_code() {
    let home = tempfile::tempdir().unwrap();
    let registry = tiered(home.path(), Tiering::Baseline);
    let puppet = registry
        .load(
            LoadFrom::File(artifacts::PUPPET.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap();
    assert_eq!(puppet.tier(), Some(CodeTier::Baseline));
    let quick = Limits {
        deadline: Duration::from_millis(300),
        ..Limits::default()
    };
    let cases = [
        (
            "loop",
            quick.clone(),
            GuestFailure::Deadline(Duration::from_millis(300)),
        ),
        (
            "loop",
            Limits {
                fuel: Some(5_000_000),
                ..Limits::default()
            },
            GuestFailure::Fuel(5_000_000),
        ),
        ("recurse", quick.clone(), GuestFailure::StackOverflow),
    ];
    for (how, limits, expected) in cases {
        let registration = (registry.register(hostile(&puppet, how, limits)).await).unwrap();
        let started = Instant::now();
        let err = registry
            .collect(&agent_call("c", "s"), &CollectOptions::new())
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(15), "{how}");
        match err.cause {
            FailureCause::Guest(failure) => assert_eq!(failure, expected, "{how}"),
            other => panic!("{how}: expected a guest failure, got {other}"),
        }
        drop(registration);
    }
    let limits = Limits {
        memory_bytes: 32 << 20,
        ..quick
    };
    let _grow = (registry.register(hostile(&puppet, "grow", limits)).await).unwrap();
    let err = registry
        .collect(&agent_call("c", "s"), &CollectOptions::new())
        .await
        .unwrap_err();
    let FailureCause::Guest(GuestFailure::ResourceLimit(message)) = err.cause else {
        panic!("expected a resource limit, got {}", err.cause)
    };
    assert!(message.starts_with("memory limit of 33554432 bytes exceeded"));
}

/// Winch's engine allocates on demand, so no pool refuses a component with
/// many memories when it loads; the limiter refuses its instance instead,
/// naming the count.
#[tokio::test]
async fn baseline_code_with_many_memories_is_refused_when_instantiated() {
    let home = tempfile::tempdir().unwrap();
    let registry = tiered(home.path(), Tiering::Baseline);
    let hogs = crate::hostile::with_hogs(1, 16);
    let component = registry
        .load(
            LoadFrom::Bytes {
                origin: "sixteen-hogs",
                bytes: &hogs,
            },
            &LoadOptions::new(),
        )
        .unwrap();
    assert_eq!(component.tier(), Some(CodeTier::Baseline));
    let err = registry.register(component).await.err().unwrap();
    let message = err.to_string();
    assert!(message.contains("memory count"), "{message}");
}

//! A collect's contributors on two threads: when two components' calls
//! lately took long, a helper on another of the runtime's workers takes
//! the next contributor while the caller runs one; the overlay and the
//! failure reported are those of the contributors in name order.

use dsh_env::{CollectOptions, Registry};
use dsh_env_tests::{agent_call, puppet, registry};

/// Registers a puppet named `name`, declaring `key`, that acts out `resolve`.
async fn register(
    registry: &Registry,
    name: &str,
    key: &str,
    resolve: &str,
) -> dsh_env::Registration {
    let keys = format!("{key}={name}");
    let config = [
        ("name", name),
        ("keys", keys.as_str()),
        ("resolve", resolve),
    ];
    registry.register(puppet(registry, &config)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_collect_runs_its_contributors_side_by_side() {
    let registry = registry();
    // `a` is busy for 100 ms, then reads the wall clock; `b` for 1 ms. The
    // helper has all of `a`'s 100 ms to wake, even on a busy machine.
    let _a = register(&registry, "side-a", "DSH_A_DONE", "spin:100+clock").await;
    let _b = register(&registry, "side-b", "DSH_B_AT", "spin:1+clock").await;
    let clock = |overlay: &dsh_env::Overlay, key: &str| -> u128 {
        overlay.get(key).unwrap().parse().unwrap()
    };
    // In name order on one thread, `b` reads the clock after `a` is done.
    // The first collect has no past calls to go by; a later one lets a
    // helper take `b` while the caller runs `a`.
    let mut side_by_side = false;
    for i in 0..20 {
        let execution = agent_call(&format!("side-{i}"), "s");
        let collection = (registry.collect(&execution, &CollectOptions::new())).await;
        let overlay = collection.unwrap().overlay;
        if clock(&overlay, "DSH_B_AT") < clock(&overlay, "DSH_A_DONE") {
            side_by_side = true;
            break;
        }
    }
    assert!(side_by_side, "`side-b` never ran while `side-a` did");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failure_reported_is_the_first_in_name_order_when_a_later_one_fails_sooner() {
    let registry = registry();
    let _a = register(&registry, "fail-a", "DSH_FAIL_A", "spin:40+err:first").await;
    let _b = register(&registry, "fail-b", "DSH_FAIL_B", "spin:1+err:second").await;
    // The helper takes `fail-b` from the second collect on, and it fails
    // while `fail-a` still runs.
    for i in 0..4 {
        let execution = agent_call(&format!("fail-{i}"), "s");
        let failed = (registry.collect(&execution, &CollectOptions::new())).await;
        let err = failed.expect_err("both contributors fail");
        assert_eq!(err.contributor, "fail-a", "{err}");
        assert!(err.to_string().contains("first"), "{err}");
    }
}

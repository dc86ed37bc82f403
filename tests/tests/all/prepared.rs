//! Instances made ahead of a call (`Registry::prepare`, which the bash tool
//! runs while its child starts): each serves one call, under the same limits,
//! and the result is what an instance made at the call would give.

use std::path::Path;
use std::time::Duration;

use dsh_env::__internal::MAX_LIVE_INSTANCES;
use dsh_env::__internal::MAX_PREPARED;
use dsh_env::CollectOptions;
use dsh_env::Grants;
use dsh_env::{
    ContributorError, FailureCause, GuestFailure, HostLimits, Limits, Registration, Registry,
};
use dsh_env::{LoadFrom, LoadOptions};
use dsh_env_harness::LocalExecutor;
use dsh_env_harness::tool::{BashTool, ShellRun};
use dsh_env_tests::{agent_call, agent_call_in, artifacts, echo, puppet, registry, registry_with};

use crate::traces::Recorder;
use serde_json::json;

/// A puppet that reports how many calls its instance has served, and the call id.
async fn counter(registry: &Registry) -> Registration {
    let component = puppet(
        registry,
        &[
            ("name", "counter"),
            ("keys", "DSH_SERVED=s|DSH_CALL=c"),
            ("pairs", "DSH_SERVED={count}|DSH_CALL={call}"),
        ],
    );
    registry.register(component).await.unwrap()
}

#[tokio::test]
async fn an_instance_made_ahead_serves_one_call_only() {
    let registry = registry();
    let _counter = counter(&registry).await;
    for i in 0..4 {
        registry.prepare().await;
        if i % 2 == 1 {
            registry.prepare().await; // preparing twice makes no second instance
        }
        assert_eq!(registry.prepared(), 1);
        assert!(registry.is_prepared());
        let call = format!("call-{i}");
        let overlay = registry
            .collect(&agent_call(&call, "s"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay;
        assert_eq!(registry.prepared(), 0, "the call took it");
        assert!(!registry.is_prepared());
        assert_eq!(overlay.get("DSH_SERVED"), Some("1"), "call {i}");
        assert_eq!(overlay.get("DSH_CALL"), Some(call.as_str()));
    }
    // Two calls after one prepare: one gets the instance made ahead, the
    // other a new one; neither sees the other's.
    registry.prepare().await;
    let (a, b) = (agent_call("a", "s"), agent_call("b", "s"));
    let options = CollectOptions::new();
    let (a, b) = tokio::join!(
        registry.collect(&a, &options),
        registry.collect(&b, &options)
    );
    for overlay in [a.unwrap().overlay, b.unwrap().overlay] {
        assert_eq!(overlay.get("DSH_SERVED"), Some("1"));
    }
}

#[tokio::test]
async fn limits_hold_on_an_instance_made_ahead() {
    let registry = registry();
    let limits = Limits {
        deadline: Duration::from_millis(200),
        memory_bytes: 8 << 20,
        ..Limits::default()
    };
    let mut registrations = Vec::new();
    for (name, behaviour) in [("looping", "loop"), ("growing", "grow")] {
        let key = format!("DSH_{}=k", name.to_uppercase());
        let component = puppet(
            &registry,
            &[("name", name), ("keys", &key), ("resolve", behaviour)],
        )
        .with_limits(limits.clone());
        registrations.push(registry.register(component).await.unwrap());
        registry.prepare().await;
        assert_eq!(registry.prepared(), 1);
        let err: ContributorError = registry
            .collect(&agent_call("c", "s"), &CollectOptions::new())
            .await
            .unwrap_err();
        assert_eq!(err.contributor, name);
        let expected_kind = match &err.cause {
            FailureCause::Guest(GuestFailure::Deadline(d)) => {
                *d == limits.deadline && name == "looping"
            }
            FailureCause::Guest(GuestFailure::ResourceLimit(_)) => name == "growing",
            _ => false,
        };
        assert!(expected_kind, "{err}");
        registrations.pop().unwrap().dispose();
    }
    // The registry is healthy afterwards.
    let _counter = counter(&registry).await;
    registry.prepare().await;
    let overlay = registry
        .collect(&agent_call("after", "s"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_SERVED"), Some("1"));
}

#[tokio::test]
async fn every_bash_tool_call_gets_a_fresh_instance() {
    let registry = registry();
    let _counter = counter(&registry).await;
    let tool = BashTool::new(registry, LocalExecutor, std::env::temp_dir());
    for i in 0..3 {
        let call = format!("tool-{i}");
        let command = json!({ "command": "printf %s-%s \"$DSH_SERVED\" \"$DSH_CALL\"" });
        let outcome = tool.call(&agent_call(&call, "s"), &command).await.unwrap();
        let ShellRun::Finished(output) = outcome else {
            panic!("a foreground call finishes");
        };
        assert_eq!(
            String::from_utf8(output.stdout).unwrap(),
            format!("1-{call}")
        );
    }
}

#[tokio::test]
async fn instances_made_ahead_never_take_every_pool_slot() {
    // Its own runtime: it counts the pool's slots, which other tests in a
    // shared runtime would be holding.
    let registry = registry_with(HostLimits::default());
    // First in name order, and never made ahead (its WASI context needs the
    // execution's cwd): it needs a free slot at the call.
    let first = puppet(
        &registry,
        &[
            ("name", "aaa"),
            ("keys", "DSH_FIRST=f"),
            ("pairs", "DSH_FIRST=1"),
        ],
    )
    .with_grants(Grants {
        env: Vec::new(),
        cwd_read: true,
    });
    let mut registrations = vec![registry.register(first).await.unwrap()];
    let more = MAX_LIVE_INSTANCES as usize + 2;
    for i in 0..more {
        let component = echo(
            &registry,
            &format!("echo-{i:03}"),
            &format!("DSH_ECHO_{i:03}"),
        );
        registrations.push(registry.register(component).await.unwrap());
    }
    registry.prepare().await;
    assert_eq!(registry.prepared(), MAX_PREPARED);
    let collected = tokio::time::timeout(
        Duration::from_secs(60),
        registry.collect(&agent_call("c", "s"), &CollectOptions::new()),
    )
    .await
    .expect("a call finds a free slot")
    .unwrap()
    .overlay;
    assert_eq!(collected.get("DSH_FIRST"), Some("1"));
    assert_eq!(collected.len(), 3 + 1 + more);
}

/// A finished store waits to be dropped beside the next child only when
/// its instance was made ahead, by a caller that runs `prepare`. A caller
/// that never does drops each store at the end of its call, so it keeps no
/// pool slot busy between calls (each slot a big guest has used keeps the
/// pages of its memory image it touched).
#[tokio::test]
async fn only_a_preparing_caller_leaves_finished_stores_to_drop_later() {
    let registry = registry_with(HostLimits::default());
    let _counter = counter(&registry).await;
    let runtime = registry.shared_engine();
    for call in 0..3 {
        (registry
            .collect(
                &agent_call(&format!("c{call}"), "s"),
                &CollectOptions::new(),
            )
            .await)
            .unwrap();
        assert_eq!(runtime.retired_memory(), 0, "call {call}, made at the call");
    }
    registry.prepare().await;
    registry
        .collect(&agent_call("ahead", "s"), &CollectOptions::new())
        .await
        .unwrap();
    assert!(
        runtime.retired_memory() > 0,
        "made ahead: its store waits for the next prepare"
    );
    registry.prepare().await;
    assert_eq!(runtime.retired_memory(), 0, "the next prepare dropped it");
}

/// Makes `dir` a git repository with `branch` checked out.
fn check_out(dir: &Path, branch: &str) {
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    std::fs::write(dir.join(".git/HEAD"), format!("ref: refs/heads/{branch}\n")).unwrap();
}

/// The branch git-context gives call `call` in `cwd`, and how its instance
/// was made (`ahead` or `at-call`), as its span says.
async fn branch_in(
    registry: &Registry,
    recorder: &Recorder,
    call: &str,
    cwd: &Path,
) -> (Option<String>, String) {
    let execution = agent_call_in(call, "s", cwd.to_str().unwrap());
    let collection = registry.collect(&execution, &CollectOptions::new()).await;
    let overlay = collection.unwrap().overlay;
    let branch = overlay.get("DSH_GIT_BRANCH").map(str::to_string);
    let spans = recorder.named("contributor");
    let span = (spans.iter())
        .find(|span| span.field("call_id") == Some(call))
        .unwrap_or_else(|| panic!("no span for {call}: {spans:?}"));
    let instance = span.field("instance").unwrap_or("none").to_string();
    (branch, instance)
}

#[tokio::test(flavor = "current_thread")]
async fn a_cwd_granted_contributor_is_made_ahead_for_the_cwd_of_its_last_call() {
    let (recorder, _guard) = Recorder::on_this_thread();
    let registry = registry();
    let component = registry
        .load(
            LoadFrom::File(artifacts::GIT_CONTEXT.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap()
        .with_grants(Grants {
            env: Vec::new(),
            cwd_read: true,
        });
    let _git = registry.register(component).await.unwrap();
    let (main, topic) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (main, topic) = (main.path(), topic.path());
    check_out(main, "main");
    check_out(topic, "topic");
    let owned = |branch: &str, instance: &str| (Some(branch.to_string()), instance.to_string());

    // Nothing is made before its first call: no cwd to make it for.
    registry.prepare().await;
    assert_eq!(registry.prepared(), 0);
    assert!(registry.is_prepared());
    let first = branch_in(&registry, &recorder, "c1", main).await;
    assert_eq!(first, owned("main", "at-call"));

    // Made for the last call's cwd, it serves the next call there, once.
    assert!(!registry.is_prepared());
    registry.prepare().await;
    assert_eq!(registry.prepared(), 1);
    let same = branch_in(&registry, &recorder, "c2", main).await;
    assert_eq!(same, owned("main", "ahead"));
    assert_eq!(registry.prepared(), 0, "the call took it");

    // Another cwd: the one made for `main` is dropped, a new one made.
    registry.prepare().await;
    let other = branch_in(&registry, &recorder, "c3", topic).await;
    assert_eq!(other, owned("topic", "at-call"));
    assert_eq!(registry.prepared(), 0, "the unfit one is dropped");

    // The same path, but a new directory: the one made ahead holds the old.
    registry.prepare().await;
    assert_eq!(registry.prepared(), 1);
    std::fs::remove_dir_all(topic).unwrap();
    check_out(topic, "recreated");
    let recreated = branch_in(&registry, &recorder, "c4", topic).await;
    assert_eq!(recreated, owned("recreated", "at-call"));

    // Two calls at once: one takes the instance made ahead, the other
    // makes its own; each sees its own directory.
    registry.prepare().await;
    let (a, b) = tokio::join!(
        branch_in(&registry, &recorder, "c5", topic),
        branch_in(&registry, &recorder, "c6", main),
    );
    assert_eq!(
        (a.0.as_deref(), b.0.as_deref()),
        (Some("recreated"), Some("main"))
    );
    let mut instances = [a.1, b.1];
    instances.sort();
    assert_eq!(instances, ["ahead", "at-call"]);
}

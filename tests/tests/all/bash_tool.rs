//! The model-facing bash tool, with a recording executor: what reaches a
//! request, and that every call collects its own snapshot.

use std::sync::Arc;

use dsh_env::{Agent, ToolExecution};
use dsh_env_harness::tool::{BASH_TOOL_DESCRIPTION, BashTool, ShellRun};
use dsh_env_tests::{agent_call, artifacts, puppet, registry};
use serde_json::json;

use crate::recorder::Recorder;
use dsh_env::{LoadFrom, LoadOptions};

async fn tool() -> (BashTool<Recorder>, Vec<dsh_env::Registration>) {
    let registry = registry();
    let lineage = registry
        .load(
            LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap();
    let mode = puppet(
        &registry,
        &[
            ("name", "mode"),
            ("keys", "DSH_MODE=m"),
            ("pairs", "DSH_MODE={mode}"),
        ],
    );
    let registrations = vec![
        registry.register(lineage).await.unwrap(),
        registry.register(mode).await.unwrap(),
    ];
    (
        BashTool::new(registry, Recorder::default(), "/default/dir"),
        registrations,
    )
}

#[tokio::test]
async fn model_env_stdin_and_extra_fields_are_ignored() {
    let (tool, _r) = tool().await;
    let arguments = json!({
        "command": "echo hi", "description": "say hi", "timeout": 5000,
        "env": {"DSH_SESSION_ID": "forged", "FOO": "1"}, "stdin": "secret", "cwd": "/etc",
    });
    let outcome = tool
        .call(&agent_call("c1", "real-session"), &arguments)
        .await
        .unwrap();
    assert!(matches!(outcome, ShellRun::Finished(_)));
    let [(request, background)] = &tool.executor().taken()[..] else {
        panic!("one request")
    };
    assert!(!background);
    assert_eq!(request.command, "echo hi");
    assert!(
        request.env.is_empty(),
        "model env must not reach the request"
    );
    assert_eq!(
        request.stdin, None,
        "model stdin must not reach the request"
    );
    assert_eq!(
        request.workdir,
        std::path::Path::new("/work"),
        "the agent's cwd, not the model's"
    );
    assert_eq!(request.timeout, std::time::Duration::from_millis(5000));
    assert_eq!(request.dsh_env.get("DSH_SESSION_ID"), Some("real-session"));
}

#[tokio::test]
async fn foreground_and_background_calls_each_collect_their_own_snapshot() {
    let (tool, _r) = tool().await;
    let execution = agent_call("c1", "s1");
    tool.call(&execution, &json!({"command": "a"}))
        .await
        .unwrap();
    let outcome = tool
        .call(
            &execution,
            &json!({"command": "b", "run_in_background": true}),
        )
        .await
        .unwrap();
    let ShellRun::Started(handle) = outcome else {
        panic!("background call should start")
    };
    handle.wait().await.unwrap();
    let requests = tool.executor().taken();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        (requests[0].1, requests[0].0.dsh_env.get("DSH_MODE")),
        (false, Some("foreground"))
    );
    assert_eq!(
        (requests[1].1, requests[1].0.dsh_env.get("DSH_MODE")),
        (true, Some("background"))
    );
}

#[tokio::test]
async fn a_call_without_an_agent_has_no_session_and_runs_in_the_default_dir() {
    let (tool, _r) = tool().await;
    tool.call(&ToolExecution::new("c1", "bash"), &json!({"command": "x"}))
        .await
        .unwrap();
    let [(request, _)] = &tool.executor().taken()[..] else {
        panic!("one request")
    };
    assert_eq!(request.dsh_env.get("DSH_SESSION_ID"), None);
    assert_eq!(request.dsh_env.get("DSH_AGENT_DEPTH"), None);
    assert_eq!(request.workdir, std::path::Path::new("/default/dir"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_and_child_calls_never_share_values() {
    let (tool, _r) = tool().await;
    let tool = Arc::new(tool);
    let calls = (0..20).map(|i| {
        let tool = tool.clone();
        tokio::spawn(async move {
            let execution = if i % 2 == 0 {
                agent_call(&format!("c{i}"), "parent")
            } else {
                ToolExecution::new(format!("c{i}"), "bash").with_agent(Agent {
                    session_id: "child".into(),
                    cwd: Some("/work/child".into()),
                    parent_session_id: Some("parent".into()),
                    depth: 1,
                })
            };
            tool.call(&execution, &json!({"command": format!("call {i}")}))
                .await
                .unwrap();
        })
    });
    for call in calls.collect::<Vec<_>>() {
        call.await.unwrap();
    }
    let requests = tool.executor().taken();
    assert_eq!(requests.len(), 20);
    for (request, _) in requests {
        let i: usize = request.command.trim_start_matches("call ").parse().unwrap();
        let overlay = &request.dsh_env;
        if i.is_multiple_of(2) {
            assert_eq!(overlay.get("DSH_SESSION_ID"), Some("parent"));
            assert_eq!(overlay.get("DSH_PARENT_SESSION_ID"), None);
        } else {
            assert_eq!(overlay.get("DSH_SESSION_ID"), Some("child"));
            assert_eq!(overlay.get("DSH_PARENT_SESSION_ID"), Some("parent"));
            assert_eq!(request.workdir, std::path::Path::new("/work/child"));
        }
    }
}

#[tokio::test]
async fn a_failing_contributor_means_the_command_is_not_run() {
    let registry = registry();
    let bad = puppet(
        &registry,
        &[("name", "bad"), ("keys", "DSH_B=b"), ("resolve", "trap")],
    );
    let _bad = registry.register(bad).await.unwrap();
    let tool = BashTool::new(registry, Recorder::default(), "/");
    let err = tool
        .call(&agent_call("c1", "s"), &json!({"command": "x"}))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("the command was not run: contributor `bad`"),
        "{err}"
    );
    assert!(tool.executor().taken().is_empty());
}

#[tokio::test]
async fn arguments_without_a_command_are_refused() {
    let (tool, _r) = tool().await;
    let err = tool
        .call(&agent_call("c1", "s"), &json!({"cmd": "x"}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("missing field `command`"), "{err}");
}

#[test]
fn the_description_teaches_only_the_durable_convention() {
    assert!(BASH_TOOL_DESCRIPTION.contains("$DSH_*"));
    let sentences = BASH_TOOL_DESCRIPTION.matches(". ").count() + 1;
    assert!(sentences <= 2, "{BASH_TOOL_DESCRIPTION}");
    for specific in ["DSH_SESSION", "DSH_HOME", "DSH_PARENT", "session id"] {
        assert!(
            !BASH_TOOL_DESCRIPTION.contains(specific),
            "names {specific}"
        );
    }
}

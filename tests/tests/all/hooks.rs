//! Hook bridges, with real hook processes: payload shapes of both dialects,
//! the managed overlay in hook processes, blocking, timeouts and crashes.

use std::path::Path;

use dsh_env::Registry;
use dsh_env_harness::ShellExecutor;
use dsh_env_harness::agent::{AgentLoop, ScriptedModel};
use dsh_env_harness::hooks::{HookDialect, Hooks};
use dsh_env_harness::session::{Session, SessionStore};
use dsh_env_harness::tool::BashTool;
use dsh_env_tests::registry;
use serde_json::{Value, json};

use crate::recorder::Recorder;

/// A hooks.json whose hooks save their stdin and `$DSH_SESSION_ID` under `dir`.
fn recording_hooks(dir: &Path, extra_pre: &str) -> String {
    let save = |event: &str| {
        format!(
            "cat > {dir}/{event}.json; printf %s \"$DSH_SESSION_ID\" > {dir}/{event}.session",
            dir = dir.display()
        )
    };
    json!({"hooks": {
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": save("SessionStart")}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": save("PreToolUse")},
            {"type": "command", "command": extra_pre, "timeout": 1}
        ]}],
        "PostToolUse": [{"matcher": "Edit|Bash", "hooks": [{"type": "command", "command": save("PostToolUse")}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "exit 1"}]}]
    }})
    .to_string()
}

/// An agent whose model runs `command` once; its hooks and its bash tool
/// both run with `hooks`' executor.
fn agent<E: ShellExecutor + Clone>(
    registry: &Registry,
    hooks: Hooks<E>,
    session: Session,
    command: &str,
    store: &Path,
) -> AgentLoop<ScriptedModel, E> {
    let tool = BashTool::new(registry.clone(), hooks.executor().clone(), "/");
    let model = ScriptedModel::bash_turn(&[command], "done");
    AgentLoop::new(session, model, tool, hooks, SessionStore::new(store))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn run_dialect(dialect: HookDialect) -> (tempfile::TempDir, Session) {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    let hooks = Hooks::parse(
        &recording_hooks(dir.path(), "true"),
        "hooks.json",
        dialect,
        registry.clone(),
    )
    .unwrap();
    let session = Session::new(dir.path().display().to_string());
    let mut agent = agent(&registry, hooks, session.clone(), "echo ran", dir.path());
    agent.start("startup").await;
    let records = agent.run_turn("go").await.unwrap();
    assert_eq!(records[0].output, "ran\n");
    assert_eq!(
        agent.hook_log.len(),
        4,
        "start, two pre, post: {:#?}",
        agent.hook_log
    );
    assert!(
        agent
            .hook_log
            .iter()
            .all(|run| run.exit_code == Some(0) && !run.blocked)
    );
    (dir, session)
}

#[tokio::test]
async fn claude_code_payloads_are_pinned() {
    let (dir, session) = run_dialect(HookDialect::ClaudeCode).await;
    let cwd = dir.path().display().to_string();
    assert_eq!(
        read_json(&dir.path().join("SessionStart.json")),
        json!({"session_id": session.id(), "transcript_path": "", "cwd": cwd,
               "hook_event_name": "SessionStart", "source": "startup"})
    );
    let input = json!({"command": "echo ran", "description": "scripted"});
    assert_eq!(
        read_json(&dir.path().join("PreToolUse.json")),
        json!({"session_id": session.id(), "transcript_path": "", "cwd": cwd,
               "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": input})
    );
    assert_eq!(
        read_json(&dir.path().join("PostToolUse.json")),
        json!({"session_id": session.id(), "transcript_path": "", "cwd": cwd,
               "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": input,
               "tool_response": {"output": "ran\n", "is_error": false}})
    );
    for event in ["SessionStart", "PreToolUse", "PostToolUse"] {
        let seen = std::fs::read_to_string(dir.path().join(format!("{event}.session"))).unwrap();
        assert_eq!(
            seen,
            session.id(),
            "{event} hook ran with the managed overlay"
        );
    }
}

#[tokio::test]
async fn codex_payloads_are_pinned() {
    let (dir, session) = run_dialect(HookDialect::Codex).await;
    let pre = read_json(&dir.path().join("PreToolUse.json"));
    assert_eq!(pre["transcript_path"], Value::Null);
    assert_eq!(pre["session_id"], session.id());
    assert_eq!(pre["hook_event_name"], "PreToolUse");
    let keys: Vec<&String> = pre.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "cwd",
            "hook_event_name",
            "session_id",
            "tool_input",
            "tool_name",
            "transcript_path"
        ]
    );
}

#[tokio::test]
async fn a_pre_tool_use_hook_exiting_2_blocks_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    let blocker = "cat >/dev/null; echo 'rm is not allowed here' >&2; exit 2";
    let hooks = Hooks::parse(
        &recording_hooks(dir.path(), blocker),
        "hooks.json",
        HookDialect::ClaudeCode,
        registry.clone(),
    )
    .unwrap();
    let marker = dir.path().join("ran");
    let session = Session::new(dir.path().display().to_string());
    let mut agent = agent(
        &registry,
        hooks,
        session,
        &format!("touch {}", marker.display()),
        dir.path(),
    );
    let records = agent.run_turn("go").await.unwrap();
    let [record] = &records[..] else {
        panic!("one call")
    };
    assert!(record.is_error);
    assert_eq!(
        record.output, "rm is not allowed here\n",
        "the hook's stderr reaches the model"
    );
    assert!(!marker.exists(), "the blocked command did not run");
    assert!(
        !dir.path().join("PostToolUse.json").exists(),
        "no PostToolUse for a blocked call"
    );
}

#[tokio::test]
async fn a_hook_that_hangs_or_crashes_is_reported_and_the_loop_goes_on() {
    for (hook, expect_timeout) in [
        ("sleep 30", true),
        ("exit 3", false),
        ("/no/such/hook-binary", false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let registry = registry();
        let hooks = Hooks::parse(
            &recording_hooks(dir.path(), hook),
            "hooks.json",
            HookDialect::ClaudeCode,
            registry.clone(),
        )
        .unwrap();
        let session = Session::new(dir.path().display().to_string());
        let mut agent = agent(&registry, hooks, session, "echo still-ran", dir.path());
        let records = agent.run_turn("go").await.unwrap();
        assert_eq!(records[0].output, "still-ran\n", "{hook}");
        let failing = records[0]
            .hooks
            .iter()
            .find(|run| run.command == hook)
            .unwrap();
        assert_eq!(failing.timed_out, expect_timeout, "{hook}");
        assert!(
            !failing.blocked && failing.exit_code != Some(0),
            "{hook}: {failing:?}"
        );
    }
}

/// The loop and its hooks are generic over the executor: one recording
/// executor receives every hook's request and the bash call's, in order,
/// each with the session's overlay, and nothing runs on this machine.
#[tokio::test]
async fn a_recording_executor_receives_the_hooks_and_the_loops_requests() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    let touch = |name: &str| format!("touch {}", dir.path().join(name).display());
    let hooks_json = json!({"hooks": {
        "SessionStart": [{"hooks": [{"type": "command", "command": touch("start")}]}],
        "PreToolUse": [{"hooks": [{"type": "command", "command": touch("pre")}]}],
        "PostToolUse": [{"hooks": [{"type": "command", "command": touch("post")}]}],
    }});
    let recorder = Recorder::default();
    let hooks = Hooks::parse(
        &hooks_json.to_string(),
        "hooks.json",
        HookDialect::ClaudeCode,
        registry.clone(),
    )
    .unwrap()
    .with_executor(recorder.clone());
    let session = Session::new(dir.path().display().to_string());
    let mut agent = agent(
        &registry,
        hooks,
        session.clone(),
        &touch("bash"),
        dir.path(),
    );
    agent.start("startup").await;
    let records = agent.run_turn("go").await.unwrap();
    assert_eq!((records.len(), records[0].is_error), (1, false));

    let requests = recorder.taken();
    let commands: Vec<&str> = requests.iter().map(|(r, _)| r.command.as_str()).collect();
    assert_eq!(
        commands,
        [touch("start"), touch("pre"), touch("bash"), touch("post")]
    );
    for (request, background) in &requests {
        assert!(!background, "{}", request.command);
        assert_eq!(
            request.dsh_env.get("DSH_SESSION_ID"),
            Some(session.id()),
            "{}",
            request.command
        );
    }
    let events: Vec<Option<Value>> = (requests.iter())
        .map(|(r, _)| {
            r.stdin
                .as_ref()
                .map(|b| serde_json::from_slice::<Value>(b).unwrap())
        })
        .map(|payload| payload.map(|p| p["hook_event_name"].clone()))
        .collect();
    assert_eq!(
        events,
        [
            Some(json!("SessionStart")),
            Some(json!("PreToolUse")),
            None,
            Some(json!("PostToolUse"))
        ],
        "hooks get their payload on stdin, the bash call none"
    );
    for name in ["start", "pre", "bash", "post"] {
        assert!(!dir.path().join(name).exists(), "{name} ran locally");
    }
}

#[test]
fn malformed_hooks_files_are_refused_with_their_name() {
    let registry = || dsh_env_tests::registry_at("/tmp/x");
    let err = Hooks::parse("{\"hooks\": 3}", "bad.json", HookDialect::Codex, registry())
        .err()
        .unwrap();
    assert!(err.to_string().starts_with("hooks file bad.json:"), "{err}");
    let http = r#"{"hooks": {"PreToolUse": [{"hooks": [{"type": "http", "command": "x"}]}]}}"#;
    let err = Hooks::parse(http, "http.json", HookDialect::ClaudeCode, registry())
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("hook type `http` is not supported"),
        "{err}"
    );
}

/// The model can run commands: a hooks.json that became a FIFO is refused
/// at once, naming the file, instead of blocking the harness.
#[tokio::test]
async fn a_hooks_file_that_became_a_fifo_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hooks.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    let err = Hooks::from_file(&path, HookDialect::ClaudeCode, registry())
        .err()
        .expect("a FIFO is not a hooks file")
        .to_string();
    assert!(
        err.contains(&path.display().to_string()) && err.contains("is a FIFO"),
        "{err}"
    );
}

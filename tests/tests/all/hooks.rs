//! Hook bridges, with real hook processes: payload shapes of both dialects,
//! the managed overlay in hook processes, blocking, timeouts and crashes,
//! and hooks.json files written after Claude Code's and Codex's documented
//! examples: regex matchers, JSON decisions, concurrency, CLAUDE_PROJECT_DIR.

use std::path::Path;

use dsh_env::Registry;
use dsh_env_harness::ShellExecutor;
use dsh_env_harness::agent::{AgentLoop, ScriptedModel};
use dsh_env_harness::hooks::{HookDecision, HookDialect, Hooks};
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
        "PostToolUse": [{"matcher": "Edit|Bash", "hooks": [{"type": "command", "command": save("PostToolUse")}]}]
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
    let hooks = Hooks::parse(&recording_hooks(dir.path(), "true"), "hooks.json", dialect).unwrap();
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
            .all(|run| run.exit_code == Some(0) && run.decision.is_none())
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
    // The call id the session file records for the call.
    let call_id = format!("{}-call-1", session.id());
    assert_eq!(
        read_json(&dir.path().join("PreToolUse.json")),
        json!({"session_id": session.id(), "transcript_path": "", "cwd": cwd,
               "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": input,
               "tool_use_id": call_id})
    );
    assert_eq!(
        read_json(&dir.path().join("PostToolUse.json")),
        json!({"session_id": session.id(), "transcript_path": "", "cwd": cwd,
               "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": input,
               "tool_response": {"output": "ran\n", "is_error": false}, "tool_use_id": call_id})
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
            "tool_use_id",
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
            failing.decision.is_none() && failing.exit_code != Some(0),
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
    let err = Hooks::parse("{\"hooks\": 3}", "bad.json", HookDialect::Codex)
        .err()
        .unwrap();
    assert!(err.to_string().starts_with("hooks file bad.json:"), "{err}");
    let http = r#"{"hooks": {"PreToolUse": [{"hooks": [{"type": "http", "command": "x"}]}]}}"#;
    let err = Hooks::parse(http, "http.json", HookDialect::ClaudeCode)
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("hook type `http` is not supported"),
        "{err}"
    );
    // Events without `hooks` around them would be no hooks at all.
    let bare = r#"{"PreToolUse": [{"hooks": [{"type": "command", "command": "exit 2"}]}]}"#;
    let err = Hooks::parse(bare, "bare.json", HookDialect::ClaudeCode)
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("unknown field `PreToolUse`, expected `hooks` or `description`"),
        "{err}"
    );
    // A document handed over directly has the file's cap.
    let big = format!("{{\"hooks\": {{}}, \"pad\": \"{}\"}}", "x".repeat(1 << 20));
    let err = Hooks::parse(&big, "big", HookDialect::ClaudeCode)
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("over the limit of 1048576"),
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
    let err = Hooks::from_file(&path, HookDialect::ClaudeCode)
        .err()
        .expect("a FIFO is not a hooks file")
        .to_string();
    assert!(
        err.contains(&path.display().to_string()) && err.contains("is a FIFO"),
        "{err}"
    );
}

/// An executable shell script `name` in `dir`, holding `body`.
fn script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// Runs one turn of `command` under `hooks_json` (a `dialect` file).
async fn turn(
    dir: &Path,
    dialect: HookDialect,
    hooks_json: &Value,
    command: &str,
) -> (dsh_env_harness::agent::CallRecord, Session) {
    let registry = registry();
    let hooks = Hooks::parse(&hooks_json.to_string(), "hooks.json", dialect).unwrap();
    let session = Session::new(dir.display().to_string());
    let mut agent = agent(&registry, hooks, session, command, dir);
    agent.start("startup").await;
    let mut records = agent.run_turn("go").await.unwrap();
    assert_eq!(records.len(), 1);
    (records.remove(0), agent.session().clone())
}

/// Claude Code's documented guard: a `Bash` PreToolUse hook that reads the
/// call from stdin and denies it in JSON; an `Edit|Write` PostToolUse hook
/// that must not fire for Bash; a `Bash` one that adds context; a
/// SessionStart hook whose stdout is context. Each sees CLAUDE_PROJECT_DIR.
#[tokio::test]
async fn claude_code_documented_hooks_deny_in_json_and_add_context() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let guard = script(
        d,
        "guard.sh",
        r#"printf %s "$CLAUDE_PROJECT_DIR" > "$CLAUDE_PROJECT_DIR/project-dir"
if grep -q '"command":"rm ' ; then
  echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"rm is blocked by policy"}}'
fi
exit 0"#,
    );
    let formatter = script(d, "format.sh", "touch \"$CLAUDE_PROJECT_DIR/formatted\"");
    let context = script(
        d,
        "context.sh",
        r#"echo '{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"tests still pass"}}'"#,
    );
    let hooks = json!({"hooks": {
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo 'branch: main'"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": guard, "timeout": 30}]}],
        "PostToolUse": [
            {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": formatter}]},
            {"matcher": "Bash", "hooks": [{"type": "command", "command": context}]}
        ]
    }});

    let marker = d.join("removed");
    std::fs::write(&marker, "").unwrap();
    let (record, _) = turn(
        d,
        HookDialect::ClaudeCode,
        &hooks,
        &format!("rm {}", marker.display()),
    )
    .await;
    assert!(record.is_error);
    assert_eq!(record.output, "rm is blocked by policy\n");
    assert!(marker.exists(), "the denied command did not run");
    assert_eq!(record.hooks[0].decision, Some(HookDecision::Deny));
    assert_eq!(
        std::fs::read_to_string(d.join("project-dir")).unwrap(),
        d.display().to_string()
    );

    let (record, session) = turn(d, HookDialect::ClaudeCode, &hooks, "echo fine").await;
    assert!(!record.is_error);
    assert_eq!(record.output, "fine\n[hook] tests still pass\n");
    assert!(
        !d.join("formatted").exists(),
        "`Edit|Write` does not match Bash"
    );
    let first = session.events.iter().find_map(|event| match event {
        dsh_env_harness::session::Event::Message { role, text } if role == "system" => Some(text),
        _ => None,
    });
    assert_eq!(first.map(String::as_str), Some("branch: main\n"));
}

/// Codex's documented PreToolUse policy hook (with its `statusMessage`),
/// blocking with the older `decision: "block"`; a PostToolUse hook that
/// exits 2 feeds its stderr back; one that exits 1 only warns.
#[tokio::test]
async fn codex_documented_hooks_block_and_feed_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let policy = script(
        d,
        "pre_tool_use_policy.sh",
        r#"if grep -q 'git push'; then echo '{"decision":"block","reason":"pushing is reviewed by a human"}'; fi"#,
    );
    let review = script(
        d,
        "post_tool_use_review.sh",
        "echo 'output looks truncated' >&2; exit 2",
    );
    let hooks = json!({"hooks": {
        "PreToolUse": [{"matcher": "^Bash$", "hooks": [
            {"type": "command", "command": policy, "statusMessage": "Checking Bash command"},
            {"type": "command", "command": "exit 1"}
        ]}],
        "PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": review}]}]
    }});
    let (record, _) = turn(d, HookDialect::Codex, &hooks, "git push origin main").await;
    assert!(record.is_error);
    assert_eq!(record.output, "pushing is reviewed by a human\n");

    let (record, _) = turn(d, HookDialect::Codex, &hooks, "echo ok").await;
    assert!(!record.is_error, "exit 1 does not block: {record:?}");
    assert_eq!(record.output, "ok\n[hook] output looks truncated\n");
}

/// Matching hooks run at once: the first waits for a file only the second
/// makes, so one after the other the first would time out.
#[tokio::test]
async fn matching_hooks_run_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let flag = d.join("second-ran");
    let hooks = json!({"hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "timeout": 5, "command":
            format!("while [ ! -e {} ]; do sleep 0.05; done", flag.display())}]},
        {"matcher": ".*", "hooks": [{"type": "command", "command": format!("touch {}", flag.display())}]}
    ]}});
    let (record, _) = turn(d, HookDialect::ClaudeCode, &hooks, "echo ran").await;
    assert_eq!(record.output, "ran\n");
    assert!(
        record
            .hooks
            .iter()
            .all(|run| run.exit_code == Some(0) && !run.timed_out),
        "{:#?}",
        record.hooks
    );
}

/// Concurrent hooks that disagree: deny wins over ask over allow, and only
/// the winners' reasons reach the model.
#[tokio::test]
async fn deny_wins_over_ask_and_ask_over_allow() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let decide = |decision: &str| {
        let output = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": decision, "permissionDecisionReason": format!("{decision} said so")}});
        json!({"type": "command", "command": format!("echo '{output}'")})
    };
    let hooks = json!({"hooks": {"PreToolUse": [{"hooks": [decide("allow"), decide("deny"), decide("ask")]}]}});
    let (record, _) = turn(d, HookDialect::ClaudeCode, &hooks, "echo ran").await;
    assert_eq!(
        (record.is_error, record.output.as_str()),
        (true, "deny said so\n")
    );

    let hooks = json!({"hooks": {"PreToolUse": [{"hooks": [decide("ask"), decide("allow")]}]}});
    let (record, _) = turn(d, HookDialect::ClaudeCode, &hooks, "echo ran").await;
    assert_eq!(
        (record.is_error, record.output.as_str()),
        (true, "ask said so\n")
    );

    let hooks = json!({"hooks": {"PreToolUse": [{"hooks": [decide("allow")]}]}});
    let (record, _) = turn(d, HookDialect::ClaudeCode, &hooks, "echo ran").await;
    assert_eq!((record.is_error, record.output.as_str()), (false, "ran\n"));
}

#[test]
fn unsupported_hooks_and_bad_matchers_are_refused_naming_them() {
    let refused = |hooks: Value| {
        Hooks::parse(&hooks.to_string(), "h.json", HookDialect::ClaudeCode)
            .err()
            .expect("refused")
            .to_string()
    };
    let prompt = refused(
        json!({"hooks": {"PostToolUse": [{"hooks": [{"type": "prompt", "prompt": "ok?"}]}]}}),
    );
    assert!(
        prompt.contains("PostToolUse: hook type `prompt` is not supported (only `command`)"),
        "{prompt}"
    );
    let condition = refused(json!({"hooks": {"PreToolUse": [{"matcher": "Bash",
        "hooks": [{"type": "command", "command": "./guard.sh", "if": "Bash(rm *)"}]}]}}));
    assert!(
        condition.contains("the `if` field of hook `./guard.sh` is not supported"),
        "{condition}"
    );
    let regex = refused(json!({"hooks": {"PreToolUse": [{"matcher": "Bash(",
        "hooks": [{"type": "command", "command": "true"}]}]}}));
    assert!(
        regex.contains("PreToolUse: matcher is not a regular expression"),
        "{regex}"
    );
}

/// A key nobody reads is refused wherever it is in a hooks file, naming it
/// (escaped) and the known ones: a misspelt `matcher` would run the hook for
/// every tool, a `timout` would leave it the default, and Claude Code's
/// `async` or `args` would be run otherwise than they say. The keys both
/// tools document that change nothing here are taken.
#[test]
fn unknown_keys_in_a_hooks_file_are_refused_naming_them_and_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let parse = |hooks: Value| {
        let file = dir.path().join("hooks.json");
        std::fs::write(&file, hooks.to_string()).unwrap();
        Hooks::from_file(&file, HookDialect::ClaudeCode)
            .err()
            .map(|err| err.message)
    };
    let command = json!({"type": "command", "command": "./guard.sh"});
    let with = |extra: Value| {
        let mut hook = command.clone();
        hook.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        hook
    };
    let known = "expected one of `type`, `command`, `timeout`, `if`, `statusMessage`, \
                 `commandWindows`";
    for (key, value) in [
        ("timout", json!(5)),
        ("async", json!(true)),
        ("args", json!(["-x"])),
    ] {
        let err = parse(json!({"hooks": {"PreToolUse": [{"matcher": "Bash",
            "hooks": [with(json!({key: value}))]}]}}))
        .unwrap_or_else(|| panic!("`{key}` was taken"));
        assert_eq!(
            err,
            format!("PreToolUse: hook `./guard.sh`: unknown field `{key}`, {known}")
        );
    }
    let group = parse(json!({"hooks": {"PreToolUse": [{"matchers": "Bash",
        "hooks": [command]}]}}))
    .expect("`matchers` was taken");
    assert!(
        group.starts_with("unknown field `matchers`, expected `matcher` or `hooks`"),
        "{group}"
    );
    let top = parse(json!({"hooks": {"PreToolUse": []}, "disableAllHooks\u{1b}[2J": true}))
        .expect("the top-level key was taken");
    assert!(
        top.starts_with(
            "unknown field `disableAllHooks\\u{1b}[2J`, expected `hooks` or `description`"
        ),
        "{top}"
    );
    // What Claude Code and Codex document and this runtime need not read.
    let documented = json!({"description": "guards", "hooks": {"PreToolUse": [{"matcher": "Bash",
        "hooks": [with(json!({"statusMessage": "checking", "commandWindows": "guard.cmd"}))]}]}});
    assert_eq!(parse(documented), None);
}

/// An event this runtime never fires is refused, naming it and the ones it
/// fires: a misspelled `PreToolUse` would otherwise turn its guard off, and
/// a `Stop` hook would never run.
#[test]
fn unknown_events_are_refused_naming_the_supported_ones() {
    for event in ["PreTooluse", "Stop", "UserPromptSubmit", "pretooluse"] {
        let hooks = json!({"hooks": {event: [{"matcher": "Bash",
            "hooks": [{"type": "command", "command": "exit 2"}]}]}});
        let err = Hooks::parse(&hooks.to_string(), "h.json", HookDialect::ClaudeCode)
            .err()
            .expect("refused")
            .to_string();
        assert_eq!(
            err,
            format!(
                "hooks file h.json: event `{event}` is not one this runtime fires \
                 (SessionStart, PreToolUse, PostToolUse)"
            )
        );
    }
}

/// What a hooks file can make the harness hold or wait for is bounded when
/// it is read: a matcher's compiled size, the number of regular expression
/// matchers, each hook's timeout (whole seconds, 1 s to a day).
#[test]
fn pathological_matchers_and_timeouts_are_refused() {
    let parse = |hooks: Value| {
        Hooks::parse(&hooks.to_string(), "h.json", HookDialect::ClaudeCode)
            .err()
            .map(|err| err.to_string())
    };
    let group = |matcher: &str| json!({"matcher": matcher, "hooks": [{"type": "command", "command": "true"}]});
    let huge = parse(json!({"hooks": {"PreToolUse": [group(r"(\w{100}){100}")]}})).unwrap();
    assert!(
        huge.contains(
            r"PreToolUse: matcher `(\w{100}){100}` compiles past the limit of 262144 bytes"
        ),
        "{huge}"
    );
    // Ordinary expressions, Unicode classes included, stay well inside it.
    assert_eq!(
        parse(json!({"hooks": {"PreToolUse": [group(r"^mcp__\w+__(read|write)\w*$")]}})),
        None
    );
    let many = |n: usize| json!({"hooks": {"PreToolUse": (0..n).map(|i| group(&format!("^Tool{i}$"))).collect::<Vec<_>>()}});
    assert_eq!(parse(many(64)), None);
    let too_many = parse(many(65)).unwrap();
    assert!(
        too_many.contains("more than 64 matchers are regular expressions"),
        "{too_many}"
    );
    for timeout in [json!(-1), json!(1.5), json!(0), json!(86401), json!(1e300)] {
        let hooks = json!({"hooks": {"PreToolUse": [{"hooks": [
            {"type": "command", "command": "./guard.sh", "timeout": timeout}]}]}});
        let err = parse(hooks).expect("refused");
        assert!(
            err.contains(&format!(
                "PreToolUse: the timeout of hook `./guard.sh` must be a whole number of seconds \
                 from 1 to 86400, not {timeout}"
            )),
            "{err}"
        );
    }
}

/// A hook that prints without end is cut at 64 KiB a stream and killed at
/// its timeout; more matching hooks than may run at once wait their turn:
/// 17 hooks that each wait until 17 have started cannot all meet, so the
/// 17th starts only once one of the first 16 has timed out, and then sees
/// all 17 (as may those of the first 16 that started late enough).
#[tokio::test]
async fn a_flooding_hook_is_cut_and_at_most_16_hooks_run_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let flood = json!({"hooks": {"PreToolUse": [{"hooks": [
        {"type": "command", "command": "yes; yes >&2", "timeout": 1}]}]}});
    let (record, _) = turn(d, HookDialect::ClaudeCode, &flood, "echo ran").await;
    assert_eq!(record.output, "ran\n");
    let run = &record.hooks[0];
    assert!(run.timed_out, "{:?}", run.exit_code);
    assert_eq!(
        run.stdout.len(),
        dsh_env_harness::hooks::HOOK_OUTPUT_CAP,
        "stdout is cut at the cap"
    );

    let started = d.join("started");
    std::fs::create_dir(&started).unwrap();
    let waiter = |i: usize| {
        json!({"type": "command", "timeout": 5, "command": format!(
            "touch {s}/{i}; while [ $(ls {s} | wc -l) -lt 17 ]; do sleep 0.05; done",
            s = started.display()
        )})
    };
    let hooks =
        json!({"hooks": {"PreToolUse": [{"hooks": (0..17).map(waiter).collect::<Vec<_>>()}]}});
    let (record, _) = turn(d, HookDialect::ClaudeCode, &hooks, "echo ran").await;
    let timed_out: Vec<bool> = record.hooks.iter().map(|run| run.timed_out).collect();
    assert_eq!(timed_out.len(), 17);
    assert!(
        timed_out[..16].contains(&true) && !timed_out[16],
        "one of the first 16 waits out its timeout, the 17th sees all 17: {:#?}",
        record.hooks
    );
}

/// Each event's hooks share one collect, and a bash call's hooks share its
/// command's: with several hooks on every event, each contributor resolves
/// once for the session start and once for the call.
#[tokio::test(flavor = "current_thread")]
async fn the_agent_loop_runs_each_contributor_once_per_event_whatever_its_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    let counted = dsh_env_tests::echo(&registry, "counted", "DSH_COUNTED");
    let _counted = registry.register(counted).await.unwrap();
    let seen = dir.path().join("seen");
    let save = format!("printf '%s\\n' \"$DSH_COUNTED\" >> {}", seen.display());
    // Distinct commands: identical ones run once per event.
    let hook = |n: u8| json!({"type": "command", "command": format!("{save} # {n}")});
    let three = json!([{"hooks": [hook(1), hook(2), hook(3)]}]);
    let hooks =
        json!({"hooks": {"SessionStart": three, "PreToolUse": three, "PostToolUse": three}});
    let hooks = Hooks::parse(&hooks.to_string(), "hooks.json", HookDialect::ClaudeCode).unwrap();
    let session = Session::new(dir.path().display().to_string());
    let mut agent = agent(&registry, hooks, session, "true", dir.path());

    let (spans, guard) = crate::traces::Recorder::on_this_thread();
    agent.start("startup").await;
    let records = agent.run_turn("go").await.unwrap();
    drop(guard);

    assert_eq!(records.len(), 1);
    let resolves = spans.named("contributor");
    let calls: Vec<_> = (resolves.iter())
        .filter(|span| span.field("phase") == Some("resolve"))
        .filter_map(|span| span.field("call_id"))
        .collect();
    assert_eq!(calls.len(), 2, "one resolve per event: {calls:?}");
    assert_ne!(calls[0], calls[1], "{calls:?}");
    let seen = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(seen.lines().count(), 9, "every hook ran: {seen}");
}

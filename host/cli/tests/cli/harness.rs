//! `dsh-env hook` and `dsh-env setup`: each harness's real hook input in,
//! its answer out, and the rewritten command run by bash as the harness
//! would; each harness's configuration written, kept, and taken out again.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use dsh_env_artifacts::{CALL_TRACE, PUPPET};
use serde_json::{Value, json};

use super::*;

/// A value holding everything a shell would act on.
const HOSTILE: &str = r#"it's "q" $(touch pwned) `touch pwned2`; echo injected"#;

/// The probing command: a heredoc, stdin, several lines, an exit code.
const PROBE: &str = "read -r line\ncat <<EOF\nsid=$DSH_SESSION_ID\ncall=$DSH_ROOT_CALL_ID\nEOF\nprintf '%s\\n' \"probe=$DSH_PROBE\" \"tp=$DSH_TRACEPARENT\" \"stale=${DSH_STALE-unset}\" \"token=${MY_API_TOKEN-unset}\" \"shell=$DSH_SHELL\" \"stdin=$line\"\nexit 7";

/// The harness's environment: a stale DSH_* name and a credential, both to
/// be kept out of the command.
const HARNESS_ENV: [(&str, &str); 2] = [("DSH_STALE", "old"), ("MY_API_TOKEN", "secret")];

/// A manifest of call-trace and a puppet whose keys name the call and hold
/// [`HOSTILE`]; its `hooks` file would leave `ran-hook` behind if run.
fn manifest(f: &Fixture, puppet: &str) -> String {
    f.write(
        "hooks.json",
        r#"{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"touch ran-hook"}]}]}}"#,
    );
    let path = f.write(
        "harness.toml",
        &format!(
            "hooks = \"hooks.json\"\n\n[[contributor]]\npath = {CALL_TRACE:?}\n\n\
             [[contributor]]\npath = {PUPPET:?}\n{puppet}"
        ),
    );
    path.display().to_string()
}

/// The puppet's entry for [`manifest`]: DSH_ROOT_CALL_ID and DSH_PROBE.
fn probing_puppet() -> String {
    format!(
        "[contributor.config]\nkeys = \"DSH_ROOT_CALL_ID=the call|DSH_PROBE=a hostile value\"\n\
         pairs = {:?}\n",
        format!("DSH_ROOT_CALL_ID={{call}}|DSH_PROBE={HOSTILE}")
    )
}

/// `dsh-env hook <harness>` fed `input`, in the harness's environment.
fn hook(f: &Fixture, harness: &str, m: &str, input: &Value) -> Output {
    let args = ["hook", harness, "--manifest", m, "--home", &f.home()];
    let command = f.command(&args, &HARNESS_ENV);
    output_within(
        command,
        Stdio::piped(),
        Some(input.to_string().into_bytes()),
    )
}

/// Runs `command` with `bash -c` in the harness's environment, in `f`'s
/// directory, `stdin` on its stdin.
fn bash(f: &Fixture, command: &str, stdin: &str) -> Output {
    let mut bash = Command::new("bash");
    bash.args(["-c", command])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(HARNESS_ENV)
        .current_dir(f.dir.path());
    output_within(bash, Stdio::piped(), Some(stdin.as_bytes().to_vec()))
}

/// Claude Code 2.1's PreToolUse input for a Bash call.
fn claude_input(f: &Fixture, command: &str) -> Value {
    json!({"session_id": "sess-claude", "transcript_path": "/t.jsonl", "cwd": f.dir.path(),
        "prompt_id": "p1", "permission_mode": "default", "effort": {"level": "medium"},
        "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": command, "description": "probe", "timeout": 5000},
        "tool_use_id": "toolu_01"})
}

/// The rewritten command of a Claude Code or Codex answer.
fn updated_command(answer: &Value) -> String {
    let command = &answer["hookSpecificOutput"]["updatedInput"]["command"];
    command
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_string()
}

/// Asserts what the probing command printed and that it exited 7.
fn assert_probe(output: &Output, session: &str, call: &str) {
    assert_eq!(output.status.code(), Some(7), "{}", stderr(output));
    let out = stdout(output);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("sid={session}"));
    assert_eq!(lines[1], format!("call={call}"));
    assert_eq!(lines[2], format!("probe={HOSTILE}"));
    assert!(lines[3].starts_with("tp=00-"), "{out}");
    assert_eq!(
        &lines[4..],
        ["stale=unset", "token=unset", "shell=1", "stdin=hello"]
    );
}

#[test]
fn hook_claude_code_rewrites_the_command_to_run_with_the_overlay_and_the_scrub() {
    let f = Fixture::new();
    let m = manifest(&f, &probing_puppet());
    let output = hook(&f, "claude-code", &m, &claude_input(&f, PROBE));
    succeeded("hook", &output);
    let answer = json(&output);
    // No permission decision: the user's rules judge the rewritten command.
    assert_eq!(answer["hookSpecificOutput"].get("permissionDecision"), None);
    assert_eq!(answer["hookSpecificOutput"]["hookEventName"], "PreToolUse");
    let input = &answer["hookSpecificOutput"]["updatedInput"];
    assert_eq!(
        (input["description"].as_str(), input["timeout"].as_u64()),
        (Some("probe"), Some(5000))
    );
    let command = updated_command(&answer);
    assert!(command.ends_with(&format!("\n{PROBE}")), "{command}");
    assert_probe(&bash(&f, &command, "hello\n"), "sess-claude", "toolu_01");
    for left in ["pwned", "pwned2", "ran-hook"] {
        assert!(!f.path(left).exists(), "{left} exists");
    }
}

#[test]
fn hook_codex_allows_only_to_rewrite_and_gemini_gets_a_fresh_call_id_each_time() {
    let f = Fixture::new();
    let m = manifest(&f, &probing_puppet());
    let codex = json!({"session_id": "thread-1", "turn_id": "t1", "transcript_path": null,
        "cwd": f.dir.path(), "hook_event_name": "PreToolUse", "model": "m",
        "permission_mode": "default", "tool_name": "Bash", "tool_input": {"command": PROBE},
        "tool_use_id": "call_9"});
    let answer = json(&hook(&f, "codex", &m, &codex));
    assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "allow");
    assert_probe(
        &bash(&f, &updated_command(&answer), "hello\n"),
        "thread-1",
        "call_9",
    );

    let gemini = |dir: &str| {
        json!({"session_id": "gem-1", "transcript_path": "/t", "cwd": f.dir.path(),
            "hook_event_name": "BeforeTool", "timestamp": "2026-12-04T00:00:00Z",
            "tool_name": "run_shell_command",
            "tool_input": {"command": PROBE, "dir_path": dir, "is_background": false}})
    };
    let mut calls = Vec::new();
    for _ in 0..2 {
        let answer = json(&hook(&f, "gemini", &m, &gemini(".")));
        let command = answer["hookSpecificOutput"]["tool_input"]["command"]
            .as_str()
            .unwrap();
        // Gemini CLI refuses these outside single quotes.
        let unquoted = outside_single_quotes(command.lines().next().unwrap());
        for refused in ["$(", "`", "<(", ">("] {
            assert!(!unquoted.contains(refused), "{command}");
        }
        let output = bash(&f, command, "hello\n");
        let call = stdout(&output).lines().nth(1).unwrap().to_string();
        assert_eq!(
            uuid_version(call.trim_start_matches("call=")),
            Some(7),
            "{call}"
        );
        assert_probe(&output, "gem-1", call.trim_start_matches("call="));
        calls.push(call);
    }
    assert_ne!(calls[0], calls[1]);
}

/// The characters of the shell line `line` outside single quotes (a
/// backslash outside them escapes the next character).
fn outside_single_quotes(line: &str) -> String {
    let (mut out, mut quoted, mut chars) = (String::new(), false, line.chars());
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (false, '\\') => {
                chars.next();
            }
            (_, '\'') => quoted = !quoted,
            (false, c) => out.push(c),
            (true, _) => {}
        }
    }
    out
}

/// The version of the UUID `text`, if it is one.
fn uuid_version(text: &str) -> Option<u32> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    (text.len() == 36 && hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| hex[12..13].parse::<u32>().ok())
        .flatten()
}

#[test]
fn hook_opencode_and_serve_shell_env_give_the_changes_as_data() {
    let f = Fixture::new();
    let m = manifest(&f, &probing_puppet());
    let input = json!({"sessionID": "ses_1", "callID": "call_1", "cwd": f.dir.path()});
    let answer = json(&hook(&f, "opencode", &m, &input));
    assert_eq!(answer["set"]["DSH_SESSION_ID"], "ses_1");
    assert_eq!(answer["set"]["DSH_ROOT_CALL_ID"], "call_1");
    assert_eq!(answer["set"]["DSH_PROBE"], HOSTILE);
    assert_eq!(answer["unset"], json!(["DSH_STALE", "MY_API_TOKEN"]));

    let mut serve = f
        .command(
            &["serve", "--manifest", &m, "--home", &f.home()],
            &HARNESS_ENV,
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let execution = json!({"callId": "call_2", "name": "bash",
        "agent": {"session": {"header": {"id": "ses_1", "cwd": f.dir.path()}}}});
    let mut stdin = serve.stdin.take().unwrap();
    writeln!(
        stdin,
        "{}",
        rpc(1, "shell_env", json!({"execution": execution}))
    )
    .unwrap();
    drop(stdin);
    let mut line = String::new();
    BufReader::new(serve.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    serve.wait().unwrap();
    let result = &serde_json::from_str::<Value>(&line).unwrap()["result"];
    assert_eq!(result["set"]["DSH_ROOT_CALL_ID"], "call_2", "{line}");
    assert_eq!(result["unset"], json!(["DSH_STALE", "MY_API_TOKEN"]));
    assert_eq!(result["omitted"], json!([]));
}

#[test]
fn hook_blocks_the_call_naming_a_failing_contributor_and_omit_lets_it_run_without() {
    let f = Fixture::new();
    let undeclared = "[contributor.config]\nkeys = \"DSH_A=declared\"\npairs = \"DSH_B=x\"\n";
    let m = manifest(&f, undeclared);
    let claude = json(&hook(&f, "claude-code", &m, &claude_input(&f, "echo hi")));
    let output = &claude["hookSpecificOutput"];
    assert_eq!(output["permissionDecision"], "deny", "{claude}");
    let reason = output["permissionDecisionReason"].as_str().unwrap();
    assert!(
        reason.starts_with("dsh-env: ") && reason.contains("puppet") && reason.contains("DSH_B"),
        "{reason}"
    );
    assert_eq!(reason.lines().count(), 1);
    assert!(output.get("updatedInput").is_none());

    let gemini_input = json!({"session_id": "g", "cwd": f.dir.path(), "hook_event_name": "BeforeTool",
        "tool_name": "run_shell_command", "tool_input": {"command": "echo hi"}});
    let gemini = json(&hook(&f, "gemini", &m, &gemini_input));
    assert_eq!(gemini["decision"], "deny");
    assert!(
        gemini["reason"].as_str().unwrap().contains("DSH_B"),
        "{gemini}"
    );
    let opencode = json!({"sessionID": "s", "callID": "c", "cwd": f.dir.path()});
    assert!(
        json(&hook(&f, "opencode", &m, &opencode))["error"]
            .as_str()
            .unwrap()
            .contains("DSH_B")
    );

    let m = manifest(&f, &format!("on_error = \"omit\"\n{undeclared}"));
    let answer = json(&hook(
        &f,
        "claude-code",
        &m,
        &claude_input(&f, "echo \"a=${DSH_A-none}\""),
    ));
    let output = bash(&f, &updated_command(&answer), "");
    assert_eq!(stdout(&output), "a=none\n");
}

#[test]
fn hook_leaves_other_tools_alone_and_blocks_input_it_cannot_read() {
    let f = Fixture::new();
    let m = manifest(&f, &probing_puppet());
    let mut read = claude_input(&f, "x");
    read["tool_name"] = json!("Read");
    let output = hook(&f, "claude-code", &m, &read);
    assert_eq!(
        (output.status.code(), stdout(&output)),
        (Some(0), String::new())
    );
    let garbled = hook(&f, "claude-code", &m, &json!({"session_id": 1}));
    assert_eq!(
        json(&garbled)["hookSpecificOutput"]["permissionDecision"],
        "deny"
    );
}

/// `dsh-env setup <args>` with `HOME` (and `CODEX_HOME`, `XDG_CONFIG_HOME`
/// under it) in the fixture.
fn setup(f: &Fixture, args: &[&str]) -> Output {
    let mut all = vec!["setup"];
    all.extend(args);
    let codex = f.path("codex-home").display().to_string();
    f.run(&all, &[("CODEX_HOME", &codex)])
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[test]
fn setup_adds_one_hook_keeps_every_other_byte_and_remove_restores_the_file() {
    let f = Fixture::new();
    let m = manifest(&f, &probing_puppet());
    let claude = f.path(".claude/settings.json");
    std::fs::create_dir_all(claude.parent().unwrap()).unwrap();
    let original = "{\n    \"model\": \"opus\",\n    \"hooks\": {\n        \"PreToolUse\": [\n            {\"matcher\": \"Edit\", \"hooks\": [{\"type\": \"command\", \"command\": \"lint\"}]}\n        ]\n    },\n    \"n\": 1.50\n}\n";
    std::fs::write(&claude, original).unwrap();
    succeeded("setup", &setup(&f, &["claude-code", "--manifest", &m]));
    let added = read(&claude).unwrap();
    let settings: Value = serde_json::from_str(&added).unwrap();
    let groups = settings["hooks"]["PreToolUse"].as_array().unwrap();
    assert_eq!((groups.len(), &groups[1]["matcher"]), (2, &json!("Bash")));
    let command = groups[1]["hooks"][0]["command"].as_str().unwrap();
    assert!(
        command.starts_with(&format!("{BINARY} hook claude-code --manifest ")),
        "{command}"
    );
    assert!(added.contains("\"n\": 1.50") && added.starts_with("{\n    \"model\": \"opus\","));
    // Idempotent: a second run writes nothing.
    let again = setup(&f, &["claude-code", "--manifest", &m]);
    assert!(
        stdout(&again).contains("already set up"),
        "{}",
        stdout(&again)
    );
    assert_eq!(read(&claude).unwrap(), added);
    succeeded("remove", &setup(&f, &["claude-code", "--remove"]));
    assert_eq!(read(&claude).unwrap(), original);

    // Gemini CLI's settings may hold comments; they stay.
    let gemini = f.path(".gemini/settings.json");
    std::fs::create_dir_all(gemini.parent().unwrap()).unwrap();
    let commented = "{\n  // mine\n  \"general\": {\"vimMode\": true}\n}\n";
    std::fs::write(&gemini, commented).unwrap();
    succeeded("setup", &setup(&f, &["gemini", "--manifest", &m]));
    let added = read(&gemini).unwrap();
    assert!(
        added.contains("// mine") && added.contains("\"BeforeTool\""),
        "{added}"
    );
    succeeded("remove", &setup(&f, &["gemini", "--remove"]));
    assert_eq!(read(&gemini).unwrap(), commented);
}

#[test]
fn setup_codex_records_the_hook_trust_and_remove_takes_out_both() {
    let f = Fixture::new();
    let m = manifest(&f, &probing_puppet());
    let config = f.path("codex-home/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let original = "model = \"gpt\"\n\n[features]\nplugins = false\n";
    std::fs::write(&config, original).unwrap();
    succeeded("setup", &setup(&f, &["codex", "--manifest", &m]));
    let hooks_json = f.path("codex-home/hooks.json");
    let hooks: Value = serde_json::from_str(&read(&hooks_json).unwrap()).unwrap();
    assert_eq!(hooks["hooks"]["PreToolUse"][0]["matcher"], "Bash");
    let toml = read(&config).unwrap();
    let key = format!(
        "[hooks.state.\"{}:pre_tool_use:0:0\"]\ntrusted_hash = \"sha256:",
        hooks_json.display()
    );
    assert!(toml.starts_with(original) && toml.contains(&key), "{toml}");
    succeeded("remove", &setup(&f, &["codex", "--remove"]));
    assert_eq!(
        (read(&hooks_json), read(&config).unwrap()),
        (None, original.to_string())
    );
}

#[test]
fn setup_creates_what_is_missing_dry_run_writes_nothing_and_remove_leaves_no_trace() {
    let f = Fixture::new();
    let m = manifest(&f, &probing_puppet());
    let plugin = f.path(".config/opencode/plugin/dsh-env.js");
    let dry = setup(&f, &["opencode", "--manifest", &m, "--dry-run"]);
    assert!(
        stdout(&dry).contains("+++ ") && stdout(&dry).contains("shell.env"),
        "{}",
        stdout(&dry)
    );
    assert!(!plugin.exists() && !f.path(".config").exists());
    succeeded("setup", &setup(&f, &["opencode", "--manifest", &m]));
    let text = read(&plugin).unwrap();
    assert!(
        text.contains(&format!("[{BINARY:?},\"serve\",\"--manifest\",{m:?}]")),
        "{text}"
    );
    succeeded("remove", &setup(&f, &["opencode", "--remove"]));
    assert!(!plugin.exists() && !plugin.parent().unwrap().exists());

    let project = f.path("proj");
    let proj = project.display().to_string();
    succeeded(
        "setup",
        &setup(&f, &["claude-code", "--project", &proj, "--manifest", &m]),
    );
    assert!(project.join(".claude/settings.json").exists());
    assert!(!f.path(".claude").exists());
    succeeded(
        "remove",
        &setup(&f, &["claude-code", "--project", &proj, "--remove"]),
    );
    assert!(!project.join(".claude/settings.json").exists());
}

#[test]
fn setup_refuses_a_config_that_does_not_parse_and_leaves_it_untouched() {
    let f = Fixture::new();
    let m = manifest(&f, &probing_puppet());
    let settings = f.path(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    let broken = "{\n  \"model\": \"opus\",\n}\n";
    std::fs::write(&settings, broken).unwrap();
    for args in [
        &["claude-code", "--manifest", &m][..],
        &["claude-code", "--remove"],
    ] {
        let output = setup(&f, args);
        let shown = settings.display().to_string();
        assert_config_error(&output, &[&shown, "line 3 column 1"]);
        assert_eq!(read(&settings).unwrap(), broken);
    }
}

/// `dsh-env -v hook claude-code` fed `input`, with `env` besides the
/// harness's: its answer, and what it says on stderr of the server.
fn hook_verbose(f: &Fixture, m: &str, input: &Value, env: &[(&str, &str)]) -> (Value, String) {
    let args = [
        "-v",
        "hook",
        "claude-code",
        "--manifest",
        m,
        "--home",
        &f.home(),
    ];
    let env: Vec<(&str, &str)> = HARNESS_ENV.iter().chain(env).copied().collect();
    let output = output_within(
        f.command(&args, &env),
        Stdio::piped(),
        Some(input.to_string().into_bytes()),
    );
    (json(&output), stderr(&output))
}

/// The pids of the hook servers serving `f`'s home.
fn hook_servers(f: &Fixture) -> Vec<u32> {
    let home = f.home();
    (std::fs::read_dir("/proc").unwrap().flatten())
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            (args.contains(&b"--serve".as_slice()) && args.contains(&home.as_bytes()))
                .then_some(pid)
        })
        .collect()
}

/// Polls `done` every 50 ms, up to [`BOUND`] (a hang guard, not a measure).
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < BOUND, "{what}: not within {BOUND:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The sockets in `f`'s home's `run/`.
fn server_sockets(f: &Fixture) -> usize {
    std::fs::read_dir(Path::new(&f.home()).join("run")).map_or(0, Iterator::count)
}

#[test]
fn hook_answers_through_a_kept_server_that_sees_changed_files_and_other_environments() {
    let f = Fixture::new();
    let m = manifest(&f, &probing_puppet());
    let input = claude_input(&f, PROBE);
    let (first, said) = hook_verbose(&f, &m, &input, &[]);
    assert!(said.contains("started a hook server"), "{said}");
    assert_probe(
        &bash(&f, &updated_command(&first), "hello\n"),
        "sess-claude",
        "toolu_01",
    );
    let run = Path::new(&f.home()).join("run");
    let sockets = || server_sockets(&f);
    eventually("the server's socket", || sockets() == 1);

    // The same answer, from the server.
    let (second, said) = hook_verbose(&f, &m, &input, &[]);
    assert!(said.contains("answered by the hook server"), "{said}");
    assert_eq!(second, first);
    // `_`, which a shell sets to the command it starts, is not part of it.
    let (_, said) = hook_verbose(&f, &m, &input, &[("_", "/usr/bin/env")]);
    assert!(said.contains("answered by the hook server"), "{said}");

    // A changed manifest is opened again before the answer.
    let changed = "[contributor.config]\nkeys = \"DSH_ROOT_CALL_ID=the call|DSH_PROBE=changed\"\n\
                   pairs = \"DSH_ROOT_CALL_ID={call}|DSH_PROBE=now this\"\n";
    let m = manifest(&f, changed);
    let (third, said) = hook_verbose(&f, &m, &input, &[]);
    assert!(said.contains("answered by the hook server"), "{said}");
    assert!(
        updated_command(&third).contains("DSH_PROBE='now this'"),
        "{third}"
    );

    // A component replaced under the same path is loaded again: the
    // puppet's file becomes call-trace's, which gives no DSH_PROBE.
    let puppet = f.path("puppet.wasm");
    std::fs::copy(PUPPET, &puppet).unwrap();
    let own = |component: &Path| {
        format!(
            "[[contributor]]\npath = {component:?}\n{}",
            probing_puppet()
        )
    };
    let m = f.write("own.toml", &own(&puppet)).display().to_string();
    let (_, said) = hook_verbose(&f, &m, &input, &[]);
    assert!(said.contains("started a hook server"), "{said}");
    eventually("the second server", || sockets() == 2);
    std::fs::copy(CALL_TRACE, &puppet).unwrap();
    let (replaced, said) = hook_verbose(&f, &m, &input, &[]);
    assert!(said.contains("answered by the hook server"), "{said}");
    let command = updated_command(&replaced);
    assert!(
        !command.contains("DSH_PROBE=") && command.contains("DSH_TRACEPARENT="),
        "{command}"
    );

    // Another environment is not answered by a server started in this one:
    // its credential is unset too.
    let (other, said) = hook_verbose(&f, &m, &input, &[("OTHER_TOKEN", "t")]);
    assert!(!said.contains("answered by the hook server"), "{said}");
    assert!(updated_command(&other).contains("OTHER_TOKEN"), "{other}");
    eventually("its own server", || sockets() == 3);
    assert_eq!(hook_servers(&f).len(), 3);

    // Servers stop when their socket goes.
    std::fs::remove_dir_all(&run).unwrap();
    eventually("the servers' exit", || hook_servers(&f).is_empty());
}

#[test]
fn hook_claude_code_gives_a_subagents_call_its_own_session_under_the_harness_session() {
    let f = Fixture::new();
    let m = f.path("manifest.toml").display().to_string();
    let mut input = claude_input(&f, "true");
    let main = updated_command(&json(&hook(&f, "claude-code", &m, &input)));
    assert!(
        main.contains("DSH_AGENT_DEPTH=0 ") && main.contains("DSH_SESSION_ID=sess-claude "),
        "{main}"
    );
    assert!(!main.contains("DSH_PARENT_SESSION_ID"), "{main}");
    // Claude Code 2.1 adds `agent_id` and `agent_type` inside a subagent.
    input["agent_id"] = json!("a1b2c3");
    input["agent_type"] = json!("general-purpose");
    let sub = updated_command(&json(&hook(&f, "claude-code", &m, &input)));
    for expected in [
        "DSH_AGENT_DEPTH=1 ",
        "DSH_PARENT_SESSION_ID=sess-claude ",
        "DSH_SESSION_ID=a1b2c3 ",
    ] {
        assert!(sub.contains(expected), "{expected} in {sub}");
    }
}

#[test]
fn hook_servers_of_one_home_are_bounded_and_a_killed_ones_socket_is_reclaimed() {
    let f = Fixture::new();
    let m = manifest(&f, &probing_puppet());
    let input = claude_input(&f, "true");
    let call = |n: usize| {
        let n = n.to_string();
        hook_verbose(&f, &m, &input, &[("HOOK_SERVER_TEST", &n)]).1
    };
    // Each environment its own server, up to eight.
    for n in 0..8 {
        let said = call(n);
        assert!(said.contains("started a hook server"), "{n}: {said}");
        eventually("the server's socket", || server_sockets(&f) == n + 1);
    }
    let said = call(8);
    assert!(!said.contains("hook server"), "{said}");
    assert_eq!(server_sockets(&f), 8);
    // A server killed before it could remove its socket leaves room.
    let killed = hook_servers(&f)[0];
    let status = Command::new("kill")
        .args(["-KILL", &killed.to_string()])
        .status();
    assert!(status.unwrap().success());
    eventually("the kill", || !hook_servers(&f).contains(&killed));
    let said = call(8);
    assert!(said.contains("started a hook server"), "{said}");
    // Its socket in place of the killed one's.
    eventually("the new server", || {
        server_sockets(&f) == 8 && hook_servers(&f).len() == 8
    });
    std::fs::remove_dir_all(Path::new(&f.home()).join("run")).unwrap();
    eventually("the servers' exit", || hook_servers(&f).is_empty());
}

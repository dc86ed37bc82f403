//! `dsh-env run`: the child gets exactly the promised environment.

use super::*;

#[test]
fn run_gives_the_child_exactly_the_promised_environment() {
    let f = Fixture::new();
    let (manifest, home, execution) = (f.path("manifest.toml"), f.home(), f.path("execution.json"));
    let mut args = f.with_setup("run", manifest.to_str().unwrap(), &home);
    args.extend([
        "--execution",
        execution.to_str().unwrap(),
        "--env",
        "FOO=1",
        "--",
        "env",
    ]);
    let parent_env = [
        ("DSH_STALE", "x"),
        ("dsh_lower", "y"),
        ("MY_API_TOKEN", "z"),
        ("TERM", "xterm-256color"),
        ("DATABASE_URL", "postgres://user:pw@host/db"),
        ("MYSQL_PWD", "p"),
        ("SSH_AUTH_SOCK", "/tmp/agent.sock"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ];
    let output = f.run(&args, &parent_env);
    assert!(output.status.success(), "{}", stderr(&output));
    let seen = stdout(&output);
    let vars: Vec<(&str, &str)> = seen.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    for gone in [
        "DSH_STALE",
        "dsh_lower",
        "MY_API_TOKEN",
        "DATABASE_URL",
        "MYSQL_PWD",
    ] {
        assert_eq!(get(gone), None, "{gone} leaked into the child");
    }
    assert_eq!(get("SSH_AUTH_SOCK"), Some("/tmp/agent.sock"));
    assert_eq!(get("TOKENIZERS_PARALLELISM"), Some("false"));
    assert!(get("PATH").is_some());
    assert_eq!(get("TERM"), Some("dumb"));
    assert_eq!(get("NO_COLOR"), Some("1"));
    assert_eq!(get("FOO"), Some("1"));
    assert_eq!(get("DSH_SHELL"), Some("1"));
    assert_eq!(get("DSH_HOME"), Some(home.as_str()));
    assert!(Path::new(get("DSH_HOME").unwrap()).is_absolute());
    assert_eq!(get("DSH_SESSION_ID"), Some("child-1"));
    assert_eq!(get("DSH_PARENT_SESSION_ID"), Some("parent-1"));
}

#[test]
fn run_refuses_a_managed_env_before_spawning() {
    let f = Fixture::new();
    let marker = f.path("spawned");
    let touch = format!("touch {}", marker.display());
    let output = f.run(
        &[
            "run",
            "--home",
            &f.home(),
            "--env",
            "DSH_X=1",
            "--",
            "bash",
            "-c",
            &touch,
        ],
        &[],
    );
    assert_run_failure(&output, &["`DSH_X` is in the managed DSH_* namespace"]);
    assert!(!marker.exists(), "the command must not have run");
}

/// `run`'s own failure: exit 125 and exactly one line on stderr, containing
/// every `needle`.
fn assert_run_failure(output: &Output, needles: &[&str]) {
    assert_one_line_error(output, 125, needles);
}

#[test]
fn run_passes_the_commands_exit_code_and_signal_through() {
    let f = Fixture::new();
    let home = f.home();
    for (script, code) in [
        ("exit 7", 7),
        ("exit 2", 2),
        ("exit 125", 125),
        ("kill -TERM $$", 143),
        ("kill -KILL $$", 137),
    ] {
        let output = f.run(&["run", "--home", &home, "--", "bash", "-c", script], &[]);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{script}: {}",
            stderr(&output)
        );
        assert_eq!(stderr(&output), "", "{script}");
    }
}

#[test]
fn run_gives_the_command_its_stdin_and_streams_its_output() {
    let f = Fixture::new();
    let command = f.command(
        &[
            "run",
            "--home",
            &f.home(),
            "--",
            "bash",
            "-c",
            "tr a-z A-Z; echo err >&2",
        ],
        &[],
    );
    let output = output_within(command, Stdio::piped(), Some(b"from stdin\n".to_vec()));
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "FROM STDIN\n");
    assert_eq!(stderr(&output), "err\n");
}

#[test]
fn run_keeps_its_own_failures_apart_from_the_commands() {
    let f = Fixture::new();
    let home = f.home();
    let marker = f.path("spawned");
    let touch = format!("touch {}", marker.display());

    let output = f.run(
        &[
            "run",
            "--home",
            &home,
            "--timeout-secs",
            "1",
            "--",
            "sleep",
            "30",
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(124), "{}", stderr(&output));
    assert!(stderr(&output).contains("the command timed out after 1 s"));

    let trapping = f.write(
        "trapping.toml",
        &format!(
            "[[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nname = \"panicky\"\nkeys = \"DSH_P=p\"\nresolve = \"trap:the config is \\u001b[31mbroken\"\n"
        ),
    );
    let mut args = f.with_setup("run", trapping.to_str().unwrap(), &home);
    args.extend(["--", "bash", "-c", &touch]);
    let output = f.run(&args, &[]);
    assert_run_failure(
        &output,
        &[
            "contributor `panicky` (keys DSH_P) failed in resolve: trap:",
            "the guest's stderr ended:",
            "the config is broken",
        ],
    );
    assert!(!stderr(&output).contains('\u{1b}'), "{}", stderr(&output));

    let output = f.run(&["run", "--no-such-flag", "--", "bash", "-c", &touch], &[]);
    assert_eq!(output.status.code(), Some(125), "{}", stderr(&output));
    let output = f.run(
        &[
            "run",
            "--manifest",
            "/no/such.toml",
            "--",
            "bash",
            "-c",
            &touch,
        ],
        &[],
    );
    assert_run_failure(&output, &["/no/such.toml"]);
    assert!(!marker.exists(), "the command must not have run");

    let help = stdout(&f.run(&["run", "--help"], &[]));
    assert!(
        help.contains("124 when it timed out; 125 when dsh-env"),
        "{help}"
    );

    // Other commands keep 2 for usage.
    let output = f.run(&["list", "--no-such-flag"], &[]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn run_background_detaches_and_returns_at_once() {
    let f = Fixture::new();
    let done = f.path("done");
    let script = format!("sleep 3; echo $DSH_SHELL > {}", done.display());
    let log = std::fs::File::create(f.path("stderr")).unwrap();
    let started = std::time::Instant::now();
    let status = f
        .command(
            &[
                "run",
                "--home",
                &f.home(),
                "--background",
                "--",
                "bash",
                "-c",
                &script,
            ],
            &[],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    assert!(!done.exists(), "returned before the command ended");
    let said = std::fs::read_to_string(f.path("stderr")).unwrap();
    assert!(
        said.starts_with("dsh-env: started in the background as pid "),
        "{said}"
    );
    while !done.exists() && started.elapsed() < BOUND {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Written once the shell's echo finishes.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(std::fs::read_to_string(&done).unwrap(), "1\n");
}

#[test]
fn run_passes_a_signal_on_to_the_command_and_exits_as_it_did() {
    use std::io::BufRead;
    let f = Fixture::new();
    let marker = f.path("terminated");
    let script = format!(
        "trap 'echo term > {}; exit 3' TERM; echo ready; while :; do sleep 0.05; done",
        marker.display()
    );
    let mut child = f
        .command(
            &["run", "--home", &f.home(), "--", "bash", "-c", &script],
            &[],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready, "ready\n");
    // SAFETY: kill(2) on our own child's pid; it reads no memory.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < BOUND, "dsh-env did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.code(),
        Some(3),
        "the command's own exit, after its trap"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "term\n");
}

#[test]
fn the_manifests_environment_policy_shapes_the_child_and_explain_names_each_rule() {
    let f = Fixture::new();
    let manifest = f.write(
        "policy.toml",
        &format!(
            "[environment]\ninherit = \"core\"\nexclude = [\"USER\"]\n\
             set = {{ CI = \"1\", DEPLOY_TOKEN = \"t\" }}\n\n\
             [[contributor]]\npath = {AGENT_LINEAGE:?}\n"
        ),
    );
    let parent_env = [("USER", "me"), ("EDITOR", "vi"), ("SHELL", "/bin/sh")];
    let home = f.home();
    let mut args = f.with_setup("run", manifest.to_str().unwrap(), &home);
    args.extend(["--", "env"]);
    let output = f.run(&args, &parent_env);
    assert!(output.status.success(), "{}", stderr(&output));
    let seen = stdout(&output);
    let vars: Vec<(&str, &str)> = seen.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    // Core names stay, others go; exclude beats core; set adds; the scrub
    // still removes a credential that set would add; the overlay is there.
    assert_eq!(
        (get("SHELL"), get("CI"), get("DSH_SHELL")),
        (Some("/bin/sh"), Some("1"), Some("1"))
    );
    assert!(get("PATH").is_some());
    assert_eq!(
        (get("USER"), get("EDITOR"), get("DEPLOY_TOKEN")),
        (None, None, None)
    );

    let mut args = f.with_setup("explain", manifest.to_str().unwrap(), &home);
    args.push("--json");
    let output = f.run(&args, &parent_env);
    assert!(output.status.success(), "{}", stderr(&output));
    let explained = json(&output);
    let rule_of = |list: &str, name: &str| {
        (explained[list].as_array().unwrap().iter())
            .find(|row| row["name"] == name)
            .map(|row| row["rule"].as_str().unwrap().to_string())
    };
    assert_eq!(rule_of("scrubbed", "EDITOR").as_deref(), Some("inherit"));
    assert_eq!(rule_of("scrubbed", "USER").as_deref(), Some("exclude"));
    assert_eq!(rule_of("set", "CI").as_deref(), Some("set"));
    assert_eq!(rule_of("set", "DEPLOY_TOKEN").as_deref(), Some("name-part"));

    // A DSH_* name in set is refused, naming it.
    let bad = f.write(
        "bad.toml",
        "[environment]\nset = { DSH_SESSION_ID = \"x\" }\n",
    );
    let output = f.run(&["list", "--manifest", bad.to_str().unwrap()], &[]);
    assert_config_error(&output, &["bad.toml", "DSH_SESSION_ID", "only the overlay"]);
}

/// A hook script that saves its stdin (the payload) and the session the
/// managed overlay gave it to `<$1>.json` and `<$1>.session`, then prints
/// `$2` on stderr and exits with `$3` (0 by default).
fn hook_script(f: &Fixture) -> PathBuf {
    let script = f.write(
        "hook.sh",
        "#!/bin/sh\ncat > \"$1.json\"\nprintf %s \"$DSH_SESSION_ID\" > \"$1.session\"\n\
         [ -n \"$2\" ] && echo \"$2\" >&2\nexit \"${3:-0}\"\n",
    );
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn run_hooks_get_the_call_and_a_blocking_hook_keeps_the_command_from_running() {
    let f = Fixture::new();
    let script = hook_script(&f).display().to_string();
    let (pre, post) = (f.path("pre"), f.path("post"));
    let hooks = f.write(
        "hooks.json",
        &hooks_json(
            &format!("{script} {}", pre.display()),
            &format!("{script} {}", post.display()),
        ),
    );
    let (manifest, home, execution) = (f.path("manifest.toml"), f.home(), f.path("execution.json"));
    let mut args = f.with_setup("run", manifest.to_str().unwrap(), &home);
    args.extend([
        "--execution",
        execution.to_str().unwrap(),
        "--hooks",
        hooks.to_str().unwrap(),
        "--permission-mode",
        "plan",
        "--",
        "echo",
        "ran",
    ]);
    let output = f.run(&args, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "ran\n");
    let input = serde_json::json!({"command": "echo ran", "timeout": 600_000});
    assert_eq!(
        read_json(&pre.with_extension("json")),
        serde_json::json!({"session_id": "child-1", "transcript_path": "", "cwd": "/tmp",
            "permission_mode": "plan", "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": input, "tool_use_id": "c1"})
    );
    let post_payload = read_json(&post.with_extension("json"));
    assert_eq!(post_payload["tool_use_id"], "c1");
    assert_eq!(post_payload["permission_mode"], "plan");
    assert_eq!(
        post_payload["tool_response"],
        serde_json::json!({"exit_code": 0, "timed_out": false})
    );
    let session = std::fs::read_to_string(pre.with_extension("session")).unwrap();
    assert_eq!(session, "child-1", "the hook ran with the managed overlay");

    // Exit 2 blocks: the command does not run (the contributors ran
    // first: the hooks saw their overlay); exit 125
    // with the hook's reason.
    let (blocker, after) = (f.path("blocker"), f.path("after"));
    let blocking = f.write(
        "blocking.json",
        &hooks_json(
            &format!("{script} {} 'no touching today' 2", blocker.display()),
            &format!("{script} {}", after.display()),
        ),
    );
    let marker = f.path("touched");
    let output = f.run(
        &[
            "run",
            "--home",
            &home,
            "--hooks",
            blocking.to_str().unwrap(),
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
        &[],
    );
    assert_run_failure(
        &output,
        &["blocked by a PreToolUse hook: no touching today"],
    );
    assert!(!marker.exists(), "the command must not have run");
    assert!(
        !after.with_extension("json").exists(),
        "no PostToolUse for a blocked call"
    );
    let payload = read_json(&blocker.with_extension("json"));
    assert_eq!(
        payload["tool_use_id"], "cli",
        "the call id of an execution-less run"
    );
    assert!(payload.get("permission_mode").is_none(), "{payload}");
    assert!(payload.get("session_id").is_none(), "no agent: {payload}");
}

#[test]
fn run_reads_the_manifests_hooks_and_the_flag_overrides_them() {
    let f = Fixture::new();
    let script = hook_script(&f).display().to_string();
    let (from_manifest, from_flag) = (f.path("from-manifest"), f.path("from-flag"));
    std::fs::create_dir(f.path("conf")).unwrap();
    f.write(
        "conf/hooks.json",
        &hooks_json(&format!("{script} {}", from_manifest.display()), "true"),
    );
    let flag = f.write(
        "flag.json",
        &hooks_json(&format!("{script} {}", from_flag.display()), "true"),
    );
    let manifest = f.write(
        "conf/dsh-env.toml",
        &format!("hooks = \"hooks.json\"\n\n[[contributor]]\npath = {AGENT_LINEAGE:?}\n"),
    );
    let home = f.home();
    let args = f.with_setup("run", manifest.to_str().unwrap(), &home);
    let output = f.run(&[&args[..], &["--", "true"]].concat(), &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let payload = read_json(&from_manifest.with_extension("json"));
    assert_eq!(payload["hook_event_name"], "PreToolUse");
    assert!(payload.get("permission_mode").is_none(), "{payload}");

    std::fs::remove_file(from_manifest.with_extension("json")).unwrap();
    let flagged = [
        &args[..],
        &["--hooks", flag.to_str().unwrap(), "--", "true"],
    ]
    .concat();
    let output = f.run(&flagged, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(from_flag.with_extension("json").exists());
    assert!(
        !from_manifest.with_extension("json").exists(),
        "the flag wins"
    );

    // A manifest's hooks file that is not there is named with the line
    // that names it; a misspelled key is refused with its line.
    let broken = f.write(
        "conf/broken.toml",
        "# hooks for run and serve\nhooks = \"missing.json\"\n",
    );
    let args = f.with_setup("run", broken.to_str().unwrap(), &home);
    let output = f.run(&[&args[..], &["--", "true"]].concat(), &[]);
    assert_run_failure(
        &output,
        &["missing.json", "`hooks` of manifest", "line 2, column 9"],
    );
    let typo = f.write("conf/typo.toml", "hook = \"hooks.json\"\n");
    let args = f.with_setup("run", typo.to_str().unwrap(), &home);
    let output = f.run(&[&args[..], &["--", "true"]].concat(), &[]);
    assert_run_failure(&output, &["line 1, column 1", "unknown field `hook`"]);
}

/// Each hook of a call sees the overlay of the call's one collect: with two
/// hooks before and two after, a contributor that prints once per resolve
/// (its output goes to the log, line by line) prints once per call.
#[test]
fn one_bash_call_runs_each_contributor_once_whatever_its_hooks() {
    let f = Fixture::new();
    let manifest = f.write(
        "counted.toml",
        &format!(
            "[[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nname = \"counted\"\n\
             keys = \"DSH_COUNTED=c\"\npairs = \"DSH_COUNTED={{call}}\"\nresolve = \"print:1\"\n"
        ),
    );
    let seen = f.path("seen");
    let save = format!("printf '%s\\n' \"$DSH_COUNTED\" >> {}", seen.display());
    // Distinct commands: identical ones run once per event.
    let hook = |n: u8| serde_json::json!({"type": "command", "command": format!("{save} # {n}")});
    let hooks = serde_json::json!({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [hook(1), hook(2)]}],
        "PostToolUse": [{"matcher": "Bash", "hooks": [hook(3), hook(4)]}],
    }});
    let hooks = f.write("hooks.json", &hooks.to_string());
    let (home, execution) = (f.home(), f.path("execution.json"));
    let mut args = f.with_setup("run", manifest.to_str().unwrap(), &home);
    args.extend([
        "--execution",
        execution.to_str().unwrap(),
        "--hooks",
        hooks.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo \"$DSH_COUNTED\"",
    ]);
    let output = f.run(&args, &[("DSH_ENV_LOG", "info")]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "c1\n", "the command saw the overlay");
    let resolves = stderr(&output)
        .lines()
        .filter(|line| line.contains("counted") && line.contains("stdout: "))
        .count();
    assert_eq!(
        resolves,
        1,
        "one resolve for the call:\n{}",
        stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "c1\nc1\nc1\nc1\n",
        "each of the four hooks saw the call's overlay"
    );
}

//! `dsh-env resolve`: the overlay for one execution, and what it refuses.

use super::*;

#[test]
fn resolve_prints_the_sorted_overlay_for_an_execution() {
    let f = Fixture::new();
    let (manifest, home, execution) = (f.path("manifest.toml"), f.home(), f.path("execution.json"));
    let mut args = f.with_setup("resolve", manifest.to_str().unwrap(), &home);
    args.extend(["--execution", execution.to_str().unwrap(), "--json"]);
    let output = f.run(&args, &[("DSH_SESSION_ID", "stale")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let overlay = &json(&output)["overlay"];
    let keys: Vec<&String> = overlay.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "DSH_AGENT_DEPTH",
            "DSH_HOME",
            "DSH_PARENT_SESSION_ID",
            "DSH_SESSION_ID",
            "DSH_SHELL",
            "DSH_TRACEPARENT"
        ]
    );
    assert_eq!(overlay["DSH_SESSION_ID"], "child-1");
    assert_eq!(overlay["DSH_PARENT_SESSION_ID"], "parent-1");
    assert_eq!(overlay["DSH_HOME"], home.as_str());

    // From stdin, and with no execution at all (no agent).
    let stdin_run = Command::new(BINARY)
        .args(["resolve", "--home", &home, "--execution", "-"])
        .stdin(std::fs::File::open(&execution).unwrap())
        .output()
        .unwrap();
    assert!(
        stdout(&stdin_run).contains("DSH_SESSION_ID=child-1\n"),
        "{}",
        stderr(&stdin_run)
    );
    let no_agent = f.run(&["resolve", "--home", &home], &[]);
    assert_eq!(stdout(&no_agent), format!("DSH_HOME={home}\nDSH_SHELL=1\n"));
}

#[test]
fn a_contributor_failure_is_a_runtime_error() {
    let f = Fixture::new();
    let manifest = f.write(
        "failing.toml",
        &format!(
            "[[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nname = \"flaky\"\nkeys = \"DSH_F=f\"\nresolve = \"err:boom\"\n"
        ),
    );
    let output = f.run(
        &[
            "resolve",
            "--manifest",
            manifest.to_str().unwrap(),
            "--home",
            &f.home(),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output)
            .contains("contributor `flaky` (keys DSH_F) failed in resolve: guest error: boom")
    );
}

#[test]
fn a_session_id_with_a_control_character_is_refused_and_forges_no_line() {
    let f = Fixture::new();
    let home = f.home();
    for (id, shown) in [(r"s1\nDSH_HOME=/evil", r"`\n`"), (r"s1\u0000", r"`\0`")] {
        let execution = f.write(
            "forged.json",
            &format!(
                r#"{{"callId":"c1","name":"bash","agent":{{"session":{{"header":{{"id":"{id}","cwd":"/tmp"}}}}}}}}"#
            ),
        );
        let output = f.run(
            &[
                "resolve",
                "--home",
                &home,
                "--execution",
                execution.to_str().unwrap(),
            ],
            &[],
        );
        assert_config_error(
            &output,
            &[
                "forged.json",
                "field `agent.session.header.id`",
                "control character",
                shown,
            ],
        );
        assert_eq!(stdout(&output), "");
    }
    let output = f.run(&["resolve", "--home", "/tmp/h\nDSH_HOME=/evil"], &[]);
    assert_config_error(&output, &[r"/tmp/h\nDSH_HOME=/evil", "control character"]);
    assert!(!stdout(&output).lines().any(|l| l == "DSH_HOME=/evil"));
}

#[test]
fn a_contributor_value_with_a_newline_forges_no_line() {
    let f = Fixture::new();
    let manifest = f.write(
        "forger.toml",
        &format!(
            "[[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nname = \"forger\"\nkeys = \"DSH_OUT=o\"\npairs = \"DSH_OUT=x\\\\nDSH_HOME=/evil\"\n"
        ),
    );
    let args = f.with_setup("resolve", manifest.to_str().unwrap(), "home");
    let output = f.run(&args, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(!stdout(&output).lines().any(|l| l == "DSH_HOME=/evil"));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("contributor `forger`")
            && err.contains("value of `DSH_OUT` holds control character `\\n` (U+000A)"),
        "{err}"
    );
}

#[test]
fn the_cli_exits_when_a_guest_is_stuck_on_a_fifo() {
    let f = Fixture::new();
    std::fs::create_dir_all(f.path("repo/.git")).unwrap();
    f.fifo("repo/.git/HEAD");
    let manifest = f.write(
        "git.toml",
        &format!("[[contributor]]\npath = {GIT_CONTEXT:?}\n[contributor.grants]\ncwd = \"read\"\n"),
    );
    let cwd = f.path("repo").display().to_string();
    let execution = f.write(
        "repo.json",
        &serde_json::json!({"callId": "c1", "name": "bash",
            "agent": {"session": {"header": {"id": "s1", "cwd": cwd}}}})
        .to_string(),
    );
    let mut args = f.with_setup("resolve", manifest.to_str().unwrap(), "home");
    args.extend(["--execution", execution.to_str().unwrap()]);
    // Without the fix the guest's `open` blocks a runtime thread for good,
    // and the process never exits: `output_within` fails the test then.
    let output = f.run(&args, &[]);
    let err = stderr(&output);
    match output.status.code() {
        Some(0) => assert!(stdout(&output).contains("DSH_SESSION_ID=s1"), "{err}"),
        Some(1) => {
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains("contributor `git-context`"), "{err}");
        }
        other => panic!("exit {other:?}: {err}"),
    }
}

#[test]
fn the_execution_json_names_unknown_fields_and_refuses_a_relative_cwd() {
    let f = Fixture::new();
    let typo = f.write(
        "typo.json",
        r#"{"callId":"c1","name":"bash","token":"t","agnet":{"session":{"header":{"id":"s","cwd":"/tmp"}}}}"#,
    );
    let output = f.run(
        &[
            "resolve",
            "--home",
            &f.home(),
            "--execution",
            typo.to_str().unwrap(),
        ],
        &[],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unknown field `agnet` ignored"), "{err}");
    assert!(
        !stdout(&output).contains("DSH_SESSION_ID"),
        "no agent was read"
    );

    let relative = f.write(
        "relative.json",
        r#"{"callId":"c1","name":"bash","agent":{"session":{"header":{"id":"s","cwd":"work"}}}}"#,
    );
    let output = f.run(
        &[
            "resolve",
            "--home",
            &f.home(),
            "--execution",
            relative.to_str().unwrap(),
        ],
        &[],
    );
    assert_config_error(
        &output,
        &["relative.json", "must be an absolute path, not `work`"],
    );

    // The example that ships with the contributors runs as it is.
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../contributors/execution.json"
    );
    let output = f.run(
        &["resolve", "--home", &f.home(), "--execution", example],
        &[],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stderr(&output), "");
    assert!(
        stdout(&output).contains("DSH_SESSION_ID=sess-child"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn a_manifest_home_is_relative_to_the_manifest_and_its_mistakes_are_named() {
    let f = Fixture::new();
    std::fs::create_dir_all(f.path("sub")).unwrap();
    let manifest = f.write(
        "sub/manifest.toml",
        &format!("home = \"h\"\n\n[[contributor]]\npath = {AGENT_LINEAGE:?}\n"),
    );
    let output = f.run(&["resolve", "--manifest", manifest.to_str().unwrap()], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let expected = format!("DSH_HOME={}\n", f.path("sub/h").display());
    assert!(stdout(&output).contains(&expected), "{}", stdout(&output));

    let home_dir = f.home();
    // `list` of a manifest `text` fails with a config error holding `needles`.
    let refused = |name: &str, text: &str, needles: &[&str]| {
        let manifest = f.write(name, text);
        let args = f.with_setup("list", manifest.to_str().unwrap(), &home_dir);
        assert_config_error(&f.run(&args, &[]), needles);
    };
    let copy = component_copy(&f, PUPPET, "copy.wasm");
    refused(
        "duplicate.toml",
        &format!("[[contributor]]\npath = {PUPPET:?}\n\n[[contributor]]\npath = {copy:?}\n"),
        &[
            "contributor `puppet`: a contributor with this name is already registered",
            &format!("from {PUPPET}; this one is from {}", copy.display()),
        ],
    );
    refused(
        "single.toml",
        &format!("[contributor]\npath = {PUPPET:?}\n"),
        &["single.toml", "hint: write each entry as `[[contributor]]`"],
    );

    let home = f.path("check-home");
    let output = f.run(&["check", PUPPET, "--home", home.to_str().unwrap()], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        home.join("cache").is_dir(),
        "check compiled into --home's cache"
    );
}

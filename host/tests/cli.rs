//! Black-box tests of the `dsh-env` binary: every subcommand, real
//! components, real processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use dsh_env_artifacts::{AGENT_LINEAGE, CALL_TRACE, PUPPET};

const BINARY: &str = env!("CARGO_BIN_EXE_dsh-env");

/// A temporary home, manifest and execution file.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let fixture = Fixture {
            dir: tempfile::tempdir().unwrap(),
        };
        fixture.write(
            "manifest.toml",
            &format!("[[contributor]]\npath = {AGENT_LINEAGE:?}\n\n[[contributor]]\npath = {CALL_TRACE:?}\n"),
        );
        fixture.write(
            "execution.json",
            r#"{"callId":"c1","rootCallId":"c0","name":"bash","background":false,
                "arguments":{"command":"x","env":{"DSH_SESSION_ID":"forged"},"stdin":"x"},
                "agent":{"session":{"header":{"id":"child-1","cwd":"/tmp","parentId":"parent-1"}},"depth":1}}"#,
        );
        fixture
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn home(&self) -> String {
        self.path("home").display().to_string()
    }

    /// `dsh-env <args>` with a clean, known environment plus `env`.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(BINARY)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .envs(env.iter().copied())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn with_setup<'a>(
        &'a self,
        command: &'a str,
        manifest: &'a str,
        home: &'a str,
    ) -> Vec<&'a str> {
        vec![command, "--manifest", manifest, "--home", home]
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(output)))
}

/// Exit code 2 and exactly one line on stderr, containing every `needle`.
fn assert_config_error(output: &Output, needles: &[&str]) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    for needle in needles {
        assert!(err.contains(needle), "`{needle}` not in: {err}");
    }
}

#[test]
fn list_shows_every_key_with_owner_and_description() {
    let f = Fixture::new();
    let (manifest, home) = (f.path("manifest.toml"), f.home());
    let mut args = f.with_setup("list", manifest.to_str().unwrap(), &home);
    let human = f.run(&args, &[]);
    assert!(human.status.success(), "{}", stderr(&human));
    let text = stdout(&human);
    assert!(
        text.contains("DSH_AGENT_DEPTH") && text.contains("agent-lineage"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("DSH_HOME") && l.contains("dsh-env")),
        "{text}"
    );
    args.push("--json");
    let rows = json(&f.run(&args, &[]));
    let keys: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
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
    assert_eq!(rows[5]["owner"], "call-trace");
}

#[test]
fn resolve_prints_the_sorted_overlay_for_an_execution() {
    let f = Fixture::new();
    let (manifest, home, execution) = (f.path("manifest.toml"), f.home(), f.path("execution.json"));
    let mut args = f.with_setup("resolve", manifest.to_str().unwrap(), &home);
    args.extend(["--execution", execution.to_str().unwrap(), "--json"]);
    let output = f.run(&args, &[("DSH_SESSION_ID", "stale")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let overlay = json(&output);
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
    ];
    let output = f.run(&args, &parent_env);
    assert!(output.status.success(), "{}", stderr(&output));
    let seen = stdout(&output);
    let vars: Vec<(&str, &str)> = seen.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    for gone in ["DSH_STALE", "dsh_lower", "MY_API_TOKEN"] {
        assert_eq!(get(gone), None, "{gone} leaked into the child");
    }
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
    assert_config_error(&output, &["`DSH_X` is in the managed DSH_* namespace"]);
    assert!(!marker.exists(), "the command must not have run");
}

#[test]
fn run_exits_with_the_commands_status_in_both_modes() {
    let f = Fixture::new();
    let home = f.home();
    let foreground = f.run(&["run", "--home", &home, "--", "bash", "-c", "exit 7"], &[]);
    assert_eq!(foreground.status.code(), Some(7));
    let background = f.run(
        &[
            "run",
            "--home",
            &home,
            "--background",
            "--",
            "bash",
            "-c",
            "echo $DSH_SHELL; exit 3",
        ],
        &[],
    );
    assert_eq!(background.status.code(), Some(3));
    assert_eq!(stdout(&background), "1\n");
    assert!(stderr(&background).contains("started in the background as pid"));
}

#[test]
fn check_reports_declaration_imports_and_every_broken_rule() {
    let f = Fixture::new();
    let good = f.run(&["check", AGENT_LINEAGE], &[]);
    assert!(good.status.success(), "{}", stderr(&good));
    let text = stdout(&good);
    assert!(
        text.contains("contributor `agent-lineage`") && text.contains("DSH_AGENT_DEPTH"),
        "{text}"
    );
    assert!(
        text.contains("dsh:env/types@0.1.0") && text.contains("No problems"),
        "{text}"
    );

    let bad = f.run(
        &[
            "check",
            PUPPET,
            "--config",
            "name=bad",
            "--config",
            "keys=lower=x|DSH_HOME=h|DSH_A= ",
            "--json",
        ],
        &[],
    );
    assert_eq!(bad.status.code(), Some(1));
    let report = json(&bad);
    assert_eq!(
        report["problems"],
        serde_json::json!([
            "contributor `bad`, key `lower`: malformed key: does not start with `DSH_`",
            "contributor `bad`, key `DSH_HOME`: the key is reserved for dsh-env",
            "contributor `bad`, key `DSH_A`: the description is blank",
        ])
    );
}

#[test]
fn explain_names_scrubbed_variables_but_never_their_values() {
    let f = Fixture::new();
    let (manifest, home, execution) = (f.path("manifest.toml"), f.home(), f.path("execution.json"));
    let mut args = f.with_setup("explain", manifest.to_str().unwrap(), &home);
    args.extend(["--execution", execution.to_str().unwrap()]);
    let output = f.run(
        &args,
        &[
            ("DSH_STALE", "stale-value"),
            ("MY_API_TOKEN", "secret-value"),
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("DSH_AGENT_DEPTH=1  (agent-lineage:"),
        "{text}"
    );
    assert!(
        text.contains("DSH_STALE: managed DSH_* namespace"),
        "{text}"
    );
    assert!(
        text.contains("MY_API_TOKEN: credential-shaped name"),
        "{text}"
    );
    assert!(
        !text.contains("stale-value") && !text.contains("secret-value"),
        "{text}"
    );
    args.push("--json");
    let report = json(&f.run(&args, &[("MY_API_TOKEN", "secret-value")]));
    assert_eq!(
        report["scrubbed"],
        serde_json::json!([{"name": "MY_API_TOKEN", "reason": "credential-shaped"}])
    );
}

#[test]
fn serve_speaks_json_rpc_to_a_node_client() {
    let f = Fixture::new();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve_client.mjs");
    let output = Command::new("node")
        .arg(script)
        .args([BINARY, &f.home(), AGENT_LINEAGE])
        .output()
        .expect("node is installed");
    assert!(
        output.status.success(),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(stdout(&output).contains("all checks passed"));
}

#[test]
fn configuration_errors_are_one_line_and_exit_2() {
    let f = Fixture::new();
    let bad = f.write(
        "bad.toml",
        "[[contributor]]\npath = \"a.wasm\"\ncolour = \"blue\"\n",
    );
    let output = f.run(&["list", "--manifest", bad.to_str().unwrap()], &[]);
    assert_config_error(&output, &["bad.toml", "line 3", "unknown field `colour`"]);

    let output = f.run(&["list", "--manifest", "/no/such/manifest.toml"], &[]);
    assert_config_error(&output, &["/no/such/manifest.toml"]);

    let missing = f.write("missing.toml", "[[contributor]]\npath = \"nowhere.wasm\"\n");
    let output = f.run(&["list", "--manifest", missing.to_str().unwrap()], &[]);
    assert_config_error(&output, &["nowhere.wasm"]);

    let junk = f.write("junk.wasm", "not wasm at all");
    let output = f.run(&["check", junk.to_str().unwrap()], &[]);
    assert_config_error(&output, &["junk.wasm", "not a WebAssembly component"]);

    let other_world = f.path("other.wasm");
    std::fs::write(&other_world, b"\0asm\x0d\0\x01\0").unwrap();
    let output = f.run(&["check", other_world.to_str().unwrap()], &[]);
    assert_config_error(
        &output,
        &["other.wasm", "not a dsh:env/contributor component"],
    );

    let output = f.run(&["resolve", "--execution", "/no/exec.json"], &[]);
    assert_config_error(&output, &["/no/exec.json"]);
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
fn every_subcommand_has_help() {
    for sub in ["list", "resolve", "run", "check", "explain", "serve"] {
        let output = Command::new(BINARY).args([sub, "--help"]).output().unwrap();
        assert!(output.status.success(), "{sub}");
        assert!(stdout(&output).contains("Usage: dsh-env"), "{sub}");
    }
}

//! Black-box tests of the `dsh-env` binary: every subcommand, real
//! components, real processes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use dsh_env_artifacts::minisign::SigningKey;
use dsh_env_artifacts::{AGENT_LINEAGE, CALL_TRACE, GIT_CONTEXT, PUPPET, SESSION_URL};

const BINARY: &str = env!("CARGO_BIN_EXE_dsh-env");

/// A command that may hang without the fix must end within this; a hang
/// fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(15);

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
                "agent":{"session":{"header":{"version":1,"id":"child-1","createdAt":0,"cwd":"/tmp","parentSession":"parent-1","delegationDepth":1}}}}"#,
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
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(BINARY);
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .envs(env.iter().copied())
            .current_dir(self.dir.path());
        command
    }

    /// `dsh-env <args>` with a clean, known environment plus `env`.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        output_within(self.command(args, env), Stdio::null(), None)
    }

    /// `dsh-env <args>` on a real terminal (a pty from util-linux `script`),
    /// typing `input`; stdout and stderr both arrive as the pty's output.
    fn on_terminal(&self, args: &[&str], input: &str) -> Output {
        self.on_terminal_with(args, &[], input)
    }

    /// [`Fixture::on_terminal`], with `env` too.
    fn on_terminal_with(&self, args: &[&str], env: &[(&str, &str)], input: &str) -> Output {
        let inner = self.command(args, env);
        let quote =
            |arg: &std::ffi::OsStr| format!("'{}'", arg.to_str().unwrap().replace('\'', r"'\''"));
        let line: Vec<String> = std::iter::once(inner.get_program())
            .chain(inner.get_args())
            .map(quote)
            .collect();
        let mut script = Command::new("script");
        script
            .args(["-q", "-e", "-c", &line.join(" "), "/dev/null"])
            .env_clear()
            .envs(
                inner
                    .get_envs()
                    .filter_map(|(name, value)| Some((name, value?))),
            )
            .current_dir(self.dir.path());
        output_within(script, Stdio::piped(), Some(input.as_bytes().to_vec()))
    }

    /// A FIFO named `name`, with no writer: opening it for reading blocks.
    fn fifo(&self, name: &str) -> PathBuf {
        let path = self.path(name);
        let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) reads the NUL-terminated path and nothing else.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        path
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

/// Runs `command` to its end with `stdin` (and `input` written to it, if
/// given), capturing its output; kills it and fails the test if it takes
/// longer than [`BOUND`].
fn output_within(mut command: Command, stdin: Stdio, input: Option<Vec<u8>>) -> Output {
    let stdin = if input.is_some() {
        Stdio::piped()
    } else {
        stdin
    };
    let mut child = command
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = input {
        let mut pipe = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            // A child that exits early closes the pipe; the assertions say why.
            let _ = pipe.write_all(&bytes);
        });
    }
    let pid = child.id() as i32;
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(child.wait_with_output()));
    match receiver.recv_timeout(BOUND) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid; it reads no memory.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{command:?} did not finish within {BOUND:?}");
        }
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
    assert_one_line_error(output, 2, needles);
}

/// Exit `code` and exactly one line on stderr, containing every `needle`.
fn assert_one_line_error(output: &Output, code: i32, needles: &[&str]) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(code), "{err}");
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
    let listed = json(&f.run(&args, &[]));
    let rows = &listed["keys"];
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
fn the_installed_binary_alone_compiles_components_as_its_own_helper() {
    // As `cargo install --path host/cli` leaves it: `dsh-env` alone in a
    // directory, that directory alone on PATH, a fresh home (a cold cache).
    let f = Fixture::new();
    let bin = f.path("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::copy(BINARY, bin.join("dsh-env")).unwrap();
    let user = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new("dsh-env");
        command
            .args(args)
            .env_clear()
            .env("PATH", &bin)
            .env("HOME", f.path("user"))
            .envs(env.iter().copied())
            .current_dir(f.dir.path());
        output_within(command, Stdio::null(), None)
    };
    let listed = user(&["list", "--manifest", "manifest.toml"], &[]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(
        stdout(&listed).contains("DSH_PARENT_SESSION_ID"),
        "{}",
        stdout(&listed)
    );
    let cached = json(&user(&["cache", "list", "--json"], &[]));
    assert_eq!(
        cached["entries"].as_array().map(Vec::len),
        Some(2),
        "{cached}"
    );
    let resolved = user(
        &[
            "resolve",
            "--manifest",
            "manifest.toml",
            "--execution",
            "execution.json",
            "--json",
        ],
        &[],
    );
    assert!(resolved.status.success(), "{}", stderr(&resolved));
    assert_eq!(
        json(&resolved)["overlay"]["DSH_PARENT_SESSION_ID"],
        "parent-1"
    );
    // $DSH_ENV_COMPILER still names another helper, on a cold cache.
    let other = user(
        &[
            "list",
            "--manifest",
            "manifest.toml",
            "--home",
            "other-home",
        ],
        &[("DSH_ENV_COMPILER", "/nonexistent/helper")],
    );
    assert_one_line_error(&other, 2, &["/nonexistent/helper", "$DSH_ENV_COMPILER"]);
}

#[test]
fn compiling_shows_a_line_per_component_on_a_terminal_and_nothing_on_a_pipe() {
    let f = Fixture::new();
    let manifest = f.path("manifest.toml");
    let list = |home: &str| {
        let home = f.path(home);
        let args = ["list", "--manifest", manifest.to_str().unwrap()];
        (args, home)
    };
    let compiled_lines = |text: &str| -> Vec<String> {
        (text.split(['\n', '\r']))
            .filter(|l| l.starts_with("dsh-env: compiled "))
            .map(str::to_string)
            .collect()
    };
    // A cold cache on a terminal: one line per component, with its file,
    // size and time; no escape sequences, so NO_COLOR needs nothing more.
    let (args, home) = list("cold-terminal");
    let home_flag = ["--home", home.to_str().unwrap()];
    let on_terminal = |args: &[&str]| {
        let output = f.on_terminal(&[args, &home_flag].concat(), "");
        assert!(output.status.success(), "{}", stdout(&output));
        stdout(&output)
    };
    let shown = on_terminal(&args);
    let lines = compiled_lines(&shown);
    assert_eq!(lines.len(), 2, "{shown}");
    for file in [AGENT_LINEAGE, CALL_TRACE] {
        let line = lines.iter().find(|l| l.contains(file));
        let line = line.unwrap_or_else(|| panic!("no line for {file}: {shown}"));
        assert!(line.contains(" KiB) in "), "{line}");
        assert!(line.ends_with(" ms") || line.ends_with(" s"), "{line}");
    }
    assert!(!shown.contains('\u{1b}'), "{shown:?}");
    // Warm: nothing was compiled, nothing is said.
    assert_eq!(compiled_lines(&on_terminal(&args)), Vec::<String>::new());

    // A cold cache through a pipe: nothing on stderr.
    let (args, home) = list("cold-pipe");
    let output = f.run(
        &[&args[..], &["--home", home.to_str().unwrap()]].concat(),
        &[],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stderr(&output), "");
}

#[test]
fn every_json_output_carries_its_format_version() {
    let f = Fixture::new();
    let (manifest, home, execution) = (f.path("manifest.toml"), f.home(), f.path("execution.json"));
    let (manifest, execution) = (manifest.to_str().unwrap(), execution.to_str().unwrap());
    let call = |command| {
        let mut args = f.with_setup(command, manifest, &home);
        args.extend(["--execution", execution, "--json"]);
        args
    };
    let mut list = f.with_setup("list", manifest, &home);
    list.push("--json");
    // Each shape as the README's "JSON output" section documents it.
    let outputs: [(&[&str], &[&str]); 5] = [
        (&list, &["keys"]),
        (&call("resolve"), &["overlay"]),
        (
            &call("explain"),
            &[
                "home",
                "keys",
                "absent",
                "contributors",
                "scrubbed",
                "set",
                "omitted",
            ],
        ),
        (
            &["check", AGENT_LINEAGE, "--home", &home, "--json"],
            &[
                "file", "sha256", "signer", "name", "keys", "imports", "dry_run", "problems",
            ],
        ),
        (
            &["cache", "list", "--home", &home, "--json"],
            &["dir", "max_bytes", "total_bytes", "entries"],
        ),
    ];
    for (args, fields) in outputs {
        let output = f.run(args, &[]);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        let value = json(&output);
        assert_eq!(value["format"], 1, "{args:?}: {value}");
        let mut expected: Vec<&str> = fields.to_vec();
        expected.push("format");
        expected.sort_unstable();
        let mut found: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        found.sort_unstable();
        assert_eq!(found, expected, "{args:?}");
    }
}

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

/// `dsh-env <args>` with its stdout a pipe whose reader is already gone, as
/// under `| head -c 1` once head has left.
fn run_into_a_closed_pipe(f: &Fixture, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut command = f.command(args, &[("RUST_BACKTRACE", "1")]);
    command.stdin(Stdio::null()).stdout(writer);
    command.output().unwrap()
}

/// A reader that stops early ends a printing command quietly, by SIGPIPE as
/// C tools end, with nothing on stderr (no panic, no backtrace); `run` stays
/// out of it: its command gets SIGPIPE's default action and `run` passes
/// the command's death by it through as 141.
#[test]
fn a_closed_stdout_ends_the_cli_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let f = Fixture::new();
    let (manifest, home, execution) = (f.path("manifest.toml"), f.home(), f.path("execution.json"));
    let mut resolve = f.with_setup("resolve", manifest.to_str().unwrap(), &home);
    resolve.extend(["--execution", execution.to_str().unwrap(), "--json"]);
    let list = f.with_setup("list", manifest.to_str().unwrap(), &home);
    for args in [resolve, list, vec!["completions", "bash"]] {
        let output = run_into_a_closed_pipe(&f, &args);
        assert_eq!(stderr(&output), "", "{args:?}");
        assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{args:?}");
    }
    let output = run_into_a_closed_pipe(&f, &["run", "--home", &home, "--", "sh", "-c", "echo hi"]);
    assert_eq!(
        (output.status.code(), stderr(&output).as_str()),
        (Some(128 + libc::SIGPIPE), "")
    );
    // The command's own pipes see the default action too: `yes` dies by it.
    let pipeline = "yes | head -c 1 >/dev/null; echo ${PIPESTATUS[0]}";
    let output = f.run(&["run", "--home", &home, "--", "bash", "-c", pipeline], &[]);
    assert_eq!(stdout(&output), "141\n", "{}", stderr(&output));
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
        text.contains("dsh:env/types@0.2.0") && text.contains("No problems"),
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
fn the_cli_introduces_itself_and_every_help_ends_with_examples_that_parse() {
    let f = Fixture::new();
    let version = f.run(&["--version"], &[]);
    succeeded("--version", &version);
    let text = stdout(&version);
    for needle in [
        "contracts: dsh:env 0.1.0 (components targeting 0.1.x), 0.2.0",
        &format!("wasmtime: {}", dsh_env::WASMTIME_VERSION),
    ] {
        assert!(text.contains(needle), "{text}");
    }
    let commands = [
        "list",
        "resolve",
        "run",
        "add",
        "check",
        "explain",
        "push",
        "pull",
        "login",
        "demo",
        "serve",
        "cache",
        "store",
        "new",
        "bindgen",
        "componentize",
        "completions",
    ];
    for command in commands {
        let help = stdout(&f.run(&[command, "--help"], &[]));
        let (_, examples) = (help.split_once("\nExamples:\n"))
            .unwrap_or_else(|| panic!("`{command} --help` ends with no examples:\n{help}"));
        let lines: Vec<&str> = examples.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(!lines.is_empty(), "{command}");
        for line in lines {
            // Each example's words parse as they are (with --help, before
            // any `--`, so that nothing runs).
            let example = line.split("   #").next().unwrap().trim();
            let mut words: Vec<&str> = example.split_whitespace().collect();
            assert_eq!(words[..2], ["dsh-env", command], "{line}");
            let end = words.iter().position(|w| *w == "--").unwrap_or(words.len());
            words.insert(end, "--help");
            succeeded(example, &f.run(&words[1..], &[]));
        }
    }
}

#[test]
fn check_dry_runs_resolve_and_reports_its_keys_or_its_failure() {
    let f = Fixture::new();
    // The sample execution: a top-level agent's call.
    let good = f.run(&["check", AGENT_LINEAGE], &[]);
    assert!(good.status.success(), "{}", stderr(&good));
    let text = stdout(&good);
    assert!(
        text.contains("Dry run (resolve for the sample execution, no grants):\n  DSH_AGENT_DEPTH=0\n  DSH_PARENT_SESSION_ID absent\n"),
        "{text}"
    );
    // An execution of the caller's: a spawned child.
    let child = repository().join("tests/fixtures/executions/child.json");
    let child = child.to_str().unwrap();
    let report = f.run(
        &["check", AGENT_LINEAGE, "--execution", child, "--json"],
        &[],
    );
    assert!(report.status.success(), "{}", stderr(&report));
    assert_eq!(
        json(&report)["dry_run"],
        serde_json::json!({
            "execution": child,
            "overlay": {"DSH_AGENT_DEPTH": "1", "DSH_PARENT_SESSION_ID": "sess-parent"},
            "absent": [],
        })
    );
    // A declaration that can be registered, and a resolve that cannot
    // succeed: each is a problem, named.
    let failing = [
        ("pairs=DSH_A=a|DSH_UNDECLARED=b", "key `DSH_UNDECLARED`"),
        ("resolve=trap:every call panics", "every call panics"),
        ("resolve=err:no team configured", "no team configured"),
    ];
    for (config, reason) in failing {
        let args = [
            "check",
            PUPPET,
            "--config",
            "keys=DSH_A=A key.",
            "--config",
            config,
            "--json",
        ];
        let out = f.run(&args, &[]);
        assert_eq!(out.status.code(), Some(1), "{config}: {}", stdout(&out));
        let report = json(&out);
        let problems = report["problems"].as_array().unwrap();
        assert!(
            problems.len() == 1
                && problems[0]
                    .as_str()
                    .unwrap()
                    .starts_with("its dry run failed: ")
                && problems[0].as_str().unwrap().contains(reason),
            "{config}: {problems:?}"
        );
        assert!(
            report["dry_run"]["error"]
                .as_str()
                .unwrap()
                .contains(reason),
            "{report}"
        );
    }
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
            ("MYSQL_PWD", "secret-pwd"),
            ("PGPASSWORD", "secret-pg"),
            ("DATABASE_URL", "postgres://user:secret-url@host/db"),
            ("EVIL\nNAME_TOKEN", "secret-evil"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("SSH_AUTH_SOCK", "/tmp/agent.sock"),
            ("KEYBOARD", "us"),
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("DSH_AGENT_DEPTH=1  (agent-lineage:"),
        "{text}"
    );
    for line in [
        "  DSH_STALE: managed DSH_* namespace: only the overlay sets it\n",
        "  MY_API_TOKEN: name part `TOKEN`\n",
        "  MYSQL_PWD: name part `PWD`\n",
        "  PGPASSWORD: known credential name\n",
        "  DATABASE_URL: password in a URL value\n",
        // A name is shown escaped: it cannot start a line of its own.
        "  EVIL\\nNAME_TOKEN: name part `TOKEN`\n",
    ] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }
    for kept in ["HTTPS_PROXY", "SSH_AUTH_SOCK", "KEYBOARD"] {
        assert!(!text.contains(kept), "{kept} is not scrubbed: {text}");
    }
    assert!(
        !text.contains("secret") && !text.contains("stale-value"),
        "{text}"
    );
    assert!(!text.lines().any(|l| l.starts_with("NAME_TOKEN")), "{text}");
    args.push("--json");
    let report = json(&f.run(&args, &[("MY_API_TOKEN", "secret-value")]));
    assert_eq!(
        report["scrubbed"],
        serde_json::json!([
            {"name": "MY_API_TOKEN", "rule": "name-part", "reason": "name part `TOKEN`"}
        ])
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
    for sub in [
        "list",
        "resolve",
        "run",
        "check",
        "explain",
        "serve",
        "completions",
        "push",
        "store",
        "new",
        "bindgen",
        "componentize",
    ] {
        let output = Command::new(BINARY).args([sub, "--help"]).output().unwrap();
        assert!(output.status.success(), "{sub}");
        assert!(stdout(&output).contains("Usage: dsh-env"), "{sub}");
    }
}

#[test]
fn paths_that_are_not_regular_files_fail_at_once_naming_the_file() {
    let f = Fixture::new();
    let home = f.home();
    let fifo = f.fifo("fifo");
    let fifo = fifo.to_str().unwrap();

    let output = f.run(&["check", fifo], &[]);
    assert_config_error(&output, &[fifo, "is a FIFO, not a regular file"]);
    let output = f.run(&["check", "/dev/zero"], &[]);
    assert_config_error(&output, &["/dev/zero", "is a character device"]);
    let dir = f.dir.path().to_str().unwrap();
    let output = f.run(&["check", dir], &[]);
    assert_config_error(&output, &[dir, "is a directory"]);

    let output = f.run(&["list", "--manifest", fifo, "--home", &home], &[]);
    assert_config_error(&output, &["cannot read manifest", fifo, "is a FIFO"]);
    let output = f.run(&["list", "--manifest", "/dev/zero", "--home", &home], &[]);
    assert_config_error(
        &output,
        &["cannot read manifest /dev/zero", "character device"],
    );

    let entry = f.write("entry.toml", &format!("[[contributor]]\npath = {fifo:?}\n"));
    let output = f.run(
        &[
            "list",
            "--manifest",
            entry.to_str().unwrap(),
            "--home",
            &home,
        ],
        &[],
    );
    assert_config_error(
        &output,
        &["cannot load contributor component", fifo, "is a FIFO"],
    );

    let output = f.run(&["resolve", "--home", &home, "--execution", fifo], &[]);
    assert_config_error(&output, &["cannot read execution", fifo, "is a FIFO"]);
    let output = f.run(
        &["resolve", "--home", &home, "--execution", "/dev/zero"],
        &[],
    );
    assert_config_error(&output, &["/dev/zero", "is a character device"]);
}

#[test]
fn inputs_over_their_size_limit_are_refused_naming_the_limit() {
    let f = Fixture::new();
    let home = f.home();
    // Stdin may be a pipe, but it is read through the same cap.
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let output = output_within(
        f.command(&["resolve", "--home", &home, "--execution", "-"], &[]),
        Stdio::from(zero),
        None,
    );
    assert_config_error(&output, &["from stdin", "over the 1048576-byte limit"]);

    let big = f.write("big.toml", &format!("# {}\n", "x".repeat(1 << 20)));
    let output = f.run(
        &["list", "--manifest", big.to_str().unwrap(), "--home", &home],
        &[],
    );
    assert_config_error(&output, &["big.toml", "over the 1048576-byte limit"]);
    let big = f.write("big.json", &" ".repeat((1 << 20) + 1));
    let output = f.run(
        &[
            "resolve",
            "--home",
            &home,
            "--execution",
            big.to_str().unwrap(),
        ],
        &[],
    );
    assert_config_error(&output, &["big.json", "over the 1048576-byte limit"]);
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
fn check_escapes_what_the_guest_declared_and_json_stays_exact() {
    let f = Fixture::new();
    let config = [
        "--config",
        "name=bad\nname",
        "--config",
        "keys=DSH_A=one\rtwo",
    ];
    let mut args = vec!["check", PUPPET];
    args.extend(config);
    let output = f.run(&args, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains(r"contributor `bad\nname`"), "{text}");
    assert!(text.contains(r"DSH_A: one\rtwo"), "{text}");
    assert!(
        !text.contains('\r') && !text.lines().any(|l| l.starts_with("name`")),
        "{text}"
    );
    assert!(
        text.contains(r"the name holds control character `\n` (U+000A)"),
        "{text}"
    );
    assert!(
        text.contains(r"key `DSH_A`: the description holds control character `\r` (U+000D)"),
        "{text}"
    );
    args.push("--json");
    let report = json(&f.run(&args, &[]));
    assert_eq!(report["name"], "bad\nname");
    assert_eq!(report["keys"][0]["description"], "one\rtwo");

    // Registration refuses it for the same reason, not for a length.
    let manifest = f.write(
        "control.toml",
        &format!(
            "[[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nkeys = \"DSH_A=one\\ttwo\"\n"
        ),
    );
    let output = f.run(
        &f.with_setup("list", manifest.to_str().unwrap(), &f.home()),
        &[],
    );
    assert_config_error(
        &output,
        &[r"key `DSH_A`: the description holds control character `\t` (U+0009)"],
    );
}

/// Characters that reorder or hide text on a terminal: a right-to-left
/// override, a left-to-right isolate, a line separator, a zero-width space.
const HIDING: [char; 4] = ['\u{202e}', '\u{2066}', '\u{2028}', '\u{200b}'];

/// `output`'s stdout and stderr hold none of [`HIDING`] raw, and each of
/// `escapes`.
fn assert_shown_escaped(output: &Output, escapes: &[&str]) {
    let both = format!("{}{}", stdout(output), stderr(output));
    for c in HIDING {
        assert!(!both.contains(c), "U+{:04X} raw in: {both:?}", u32::from(c));
    }
    for escape in escapes {
        assert!(both.contains(escape), "`{escape}` not in: {both}");
    }
}

/// What a reviewer reads is what is there: a name, a description, a
/// config value shown back, a trusted comment and a guest's error message
/// that hold bidirectional controls, zero-width characters or separators
/// are shown escaped by `add`, `check` and `resolve`; the name and the
/// description are refused.
#[test]
fn add_and_check_show_text_that_could_reorder_or_hide_itself_escaped() {
    let f = Fixture::new();
    let home = f.home();
    // `dsh-env <args> --manifest <manifest> --home <home>`.
    let run = |args: &[&str], manifest: &Path| {
        let mut all = args.to_vec();
        all.extend(["--manifest", manifest.to_str().unwrap(), "--home", &home]);
        f.run(&all, &[])
    };
    let puppet = component_copy(&f, PUPPET, "puppet.wasm");
    let manifest = f.write(
        "m.toml",
        "[[contributor]]\npath = \"puppet.wasm\"\n[contributor.config]\n\
         name = \"evil\\u202Egnp.exe\"\nkeys = \"DSH_A=one\\u2066two\"\n\
         [contributor.grants.config]\nnote = \"a\\u2028b\\u200Bc\"\n",
    );
    let output = run(&["add", "puppet.wasm", "--yes"], &manifest);
    assert_shown_escaped(
        &output,
        &[
            r"Contributor `evil\u{202e}gnp.exe`",
            r"DSH_A: one\u{2066}two",
            r"config note = a\u{2028}b\u{200b}c",
            r"the name holds format character `\u{202e}` (U+202E)",
            r"key `DSH_A`: the description holds format character `\u{2066}` (U+2066)",
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));

    // A trusted comment, verified, shown by `check` beside the declaration.
    let author = SigningKey::new(f.dir.path(), "author");
    author.sign_with_comment(&puppet, "release \u{202e}1.0\u{2028}");
    let trusted = f.write("trusted.toml", &requiring(&author));
    let config = [
        "--config",
        "name=evil\u{202e}gnp.exe",
        "--config",
        "keys=DSH_A=one\u{200b}two",
    ];
    let output = run(&[&["check", "puppet.wasm"][..], &config].concat(), &trusted);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_shown_escaped(
        &output,
        &[
            &format!(
                r"signed by trusted key {} (release \u{{202e}}1.0\u{{2028}})",
                author.id
            ),
            r"contributor `evil\u{202e}gnp.exe`",
            r"DSH_A: one\u{200b}two",
        ],
    );

    // A guest's error message.
    let failing = f.write(
        "failing.toml",
        "[[contributor]]\npath = \"puppet.wasm\"\n[contributor.config]\n\
         keys = \"DSH_A=a\"\nresolve = \"err:evil\\u202Egnp\\u2066.exe\"\n",
    );
    let output = run(&["resolve"], &failing);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_shown_escaped(&output, &[r"guest error: evil\u{202e}gnp\u{2066}.exe"]);
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
fn serve_answers_bad_lines_and_keeps_serving() {
    let f = Fixture::new();
    let fifo = f.fifo("fifo");
    let mut input = Vec::new();
    input.extend_from_slice(b"\xff\xfe{\"jsonrpc\":\"2.0\"}\n");
    input.extend(std::iter::repeat_n(b'x', (4 << 20) + 1));
    input.push(b'\n');
    input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"list\"}\n");
    let register = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "register",
        "params": {"path": fifo}});
    input.extend_from_slice(format!("{register}\n").as_bytes());
    input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"list\"}\n");
    let output = output_within(
        f.command(&["serve", "--home", &f.home()], &[]),
        Stdio::null(),
        Some(input),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let answers: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(answers.len(), 5, "{answers:?}");
    // Responses may come out of order: find each by its id, or its message.
    let unnamed: Vec<&serde_json::Value> = answers.iter().filter(|a| a["id"].is_null()).collect();
    let message =
        |answer: &serde_json::Value| answer["error"]["message"].as_str().unwrap().to_string();
    let answer = |id: u64| answers.iter().find(|a| a["id"] == id).unwrap();
    assert_eq!(unnamed.len(), 2, "{answers:?}");
    let not_utf8 = unnamed
        .iter()
        .find(|a| message(a).contains("not UTF-8"))
        .unwrap();
    assert_eq!(not_utf8["error"]["code"], -32700);
    assert!(
        unnamed
            .iter()
            .any(|a| message(a).contains("over the 4194304-byte limit")),
        "{unnamed:?}"
    );
    assert!(answer(1)["result"].as_array().unwrap().len() >= 3);
    let refused = message(answer(2));
    assert!(
        refused.contains("is a FIFO") && refused.contains(fifo.to_str().unwrap()),
        "{refused}"
    );
    assert!(answer(3)["result"].is_array());
}

/// A running `dsh-env serve`, spoken to line by line; killed if dropped.
struct ServeClient {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ServeClient {
    fn start(f: &Fixture, env: &[(&str, &str)]) -> Self {
        let mut child = f
            .command(&["serve", "--home", &f.home()], env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        ServeClient {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// Writes one line.
    fn send(&mut self, message: &serde_json::Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line the server writes, as JSON; `None` at its end.
    fn next(&self) -> Option<serde_json::Value> {
        match self.lines.recv_timeout(BOUND) {
            Ok(line) => Some(serde_json::from_str(&line).unwrap()),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("no answer within {BOUND:?}")
            }
        }
    }

    /// Sends request `id` and waits for its answer, which must be the next line.
    fn call(&mut self, id: u64, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        let answer = self.next().expect("an answer");
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }

    /// Closes stdin; the lines written after that, once the server has exited 0.
    fn finish(mut self) -> Vec<serde_json::Value> {
        drop(self.stdin.take());
        let rest: Vec<_> = std::iter::from_fn(|| self.next()).collect();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
        rest
    }
}

impl Drop for ServeClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `dsh-env serve` with `requests`, each sent once the one before is
/// answered; their answers.
fn serve_answers(
    f: &Fixture,
    env: &[(&str, &str)],
    requests: &[serde_json::Value],
) -> Vec<serde_json::Value> {
    let mut client = ServeClient::start(f, env);
    let answers = requests
        .iter()
        .map(|request| {
            client.send(request);
            client.next().expect("an answer")
        })
        .collect();
    assert_eq!(client.finish(), Vec::<serde_json::Value>::new());
    answers
}

#[test]
fn serve_registers_with_grants_and_limits_like_a_manifest_entry() {
    let f = Fixture::new();
    let request = |id: u64, method: &str, params: serde_json::Value| serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let answers = serve_answers(
        &f,
        &[("GRANTED_VAR", "granted"), ("OTHER_VAR", "hidden")],
        &[
            request(
                1,
                "register",
                serde_json::json!({
                    "path": PUPPET,
                    "config": {"name": "env-probe", "keys": "DSH_PROBE=p", "resolve": "env"},
                    "grants": {"env": ["GRANTED_VAR", "UNSET_VAR"]},
                    "limits": {"deadline_ms": 5000, "max_value_bytes": 4096},
                    "on_error": "fail",
                }),
            ),
            request(
                2,
                "collect",
                serde_json::json!({"execution": {"callId": "c1", "name": "bash"}}),
            ),
            request(
                3,
                "register",
                serde_json::json!({
                    "path": PUPPET, "limits": {"deadline_ms": 0},
                }),
            ),
            request(
                4,
                "register",
                serde_json::json!({
                    "path": PUPPET, "grants": {"network": true},
                }),
            ),
        ],
    );
    assert_eq!(answers[0]["result"]["name"], "env-probe", "{}", answers[0]);
    assert_eq!(
        answers[1]["result"]["overlay"]["DSH_PROBE"], "GRANTED_VAR=granted",
        "only the granted, set variable reaches the guest: {}",
        answers[1]
    );
    assert_eq!(answers[2]["error"]["code"], -32602);
    assert_eq!(
        answers[2]["error"]["message"],
        "invalid params: limits.deadline_ms must be at least 1"
    );
    assert_eq!(answers[3]["error"]["code"], -32602);
    assert!(
        answers[3]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `network`"),
        "{}",
        answers[3]
    );
}

/// One JSON-RPC request.
fn rpc(
    id: impl Into<serde_json::Value>,
    method: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id.into(), "method": method, "params": params})
}

#[test]
fn serve_answers_a_list_while_a_slow_register_and_exec_run_then_finishes_them_at_eof() {
    let f = Fixture::new();
    let mut client = ServeClient::start(&f, &[]);
    let slow_declare = serde_json::json!({
        "path": PUPPET,
        "config": {"name": "slow", "keys": "DSH_SLOW=slow", "declare": "sleep:1500"},
    });
    client.send(&rpc(1, "register", slow_declare));
    let sleeper = serde_json::json!({
        "execution": {"callId": "c1", "name": "bash"}, "command": "sleep 2; echo slept",
    });
    client.send(&rpc(2, "exec", sleeper));
    client.send(&rpc(3, "list", serde_json::json!({})));
    // End of input with two requests still running: both are answered.
    let answers = client.finish();
    let ids: Vec<_> = answers.iter().map(|a| a["id"].clone()).collect();
    assert_eq!(ids.len(), 3, "{answers:?}");
    assert_eq!(ids[0], 3, "the list waits for nothing: {answers:?}");
    let answer = |id: u64| answers.iter().find(|a| a["id"] == id).unwrap();
    assert_eq!(answer(1)["result"]["name"], "slow", "{}", answer(1));
    assert_eq!(answer(2)["result"]["stdout"], "slept\n", "{}", answer(2));
}

/// The 17th request waits for a slot: with 16 slow `exec`s in flight, a
/// `list` is read, and so answered, only after one of them is.
#[test]
fn serve_holds_at_most_16_requests_in_flight() {
    let f = Fixture::new();
    let mut client = ServeClient::start(&f, &[]);
    let sleeper = serde_json::json!({
        "execution": {"callId": "c1", "name": "bash"}, "command": "sleep 1",
    });
    for id in 1..=16 {
        client.send(&rpc(id, "exec", sleeper.clone()));
    }
    client.send(&rpc(17, "list", serde_json::json!({})));
    let answers = client.finish();
    assert_eq!(answers.len(), 17, "{answers:?}");
    assert_ne!(
        answers[0]["id"], 17,
        "the list waited for a slot: {answers:?}"
    );
}

/// The most resident memory `serve` may reach under the flood below: its
/// own (some 40 MiB) and what PROTOCOL.md bounds for requests (91 MiB),
/// with room for the allocator's slack.
const FLOOD_PEAK_BOUND_MIB: u64 = 256;

/// What a client can make `serve` hold: 16 `exec`s in flight, each a line
/// of nearly 4 MiB, all but a few bytes of it an `arguments` member of small
/// numbers (which nothing reads). Kept as a JSON tree (16 times its line)
/// for each command, they took serve's peak resident memory past 1 GiB;
/// with params typed as they are read, it stays under the bound.
#[test]
fn serve_holds_what_a_flood_sent_not_a_multiple_of_it() {
    let f = Fixture::new();
    let (started, go) = (f.path("started"), f.path("go"));
    std::fs::create_dir(&started).unwrap();
    let mut client = ServeClient::start(&f, &[]);
    for id in 0..16 {
        // Each command says it started, then waits for the test's go.
        let command = format!(
            "touch {}/{id}; while [ ! -e {} ]; do sleep 0.05; done; echo done",
            started.display(),
            go.display()
        );
        let params = serde_json::json!({"command": command,
            "execution": {"callId": "c", "name": "bash", "arguments": "ARGUMENTS"}});
        let line = rpc(id, "exec", params).to_string();
        let numbers = ((4 << 20) - line.len()) / 2;
        let arguments = format!("[{}0]", "1,".repeat(numbers - 1));
        let line = line.replacen("\"ARGUMENTS\"", &arguments, 1);
        assert!(line.len() <= 4 << 20, "{}", line.len());
        let stdin = client.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
    }
    client.stdin.as_mut().unwrap().flush().unwrap();
    let deadline = std::time::Instant::now() + BOUND * 4;
    while std::fs::read_dir(&started).unwrap().count() < 16 {
        assert!(
            std::time::Instant::now() < deadline,
            "16 commands did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", client.child.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().strip_suffix("kB"))
        .map(|kib| kib.trim().parse().unwrap())
        .expect("VmHWM in /proc/<pid>/status");
    eprintln!("serve's peak resident memory: {} MiB", peak_kib >> 10);
    std::fs::write(&go, "").unwrap();
    let answers = client.finish();
    assert_eq!(answers.len(), 16, "{answers:?}");
    for answer in &answers {
        assert_eq!(answer["result"]["stdout"], "done\n", "{answer}");
    }
    assert!(
        peak_kib < FLOOD_PEAK_BOUND_MIB << 10,
        "serve's peak resident memory was {} MiB",
        peak_kib >> 10
    );
}

/// Every number a client gives `serve` is checked, and an error names it:
/// `exec`'s `timeout_ms` (negative, fractional, 0, past a day: a negative
/// one was a 49-day wait in the Node addon) and `register`'s limits.
#[test]
fn serve_refuses_numbers_out_of_range_naming_them() {
    let f = Fixture::new();
    let execution = serde_json::json!({"callId": "c1", "name": "bash"});
    let timeouts = [
        serde_json::json!(-1),
        serde_json::json!(1.5),
        serde_json::json!(0),
        serde_json::json!(86_400_001),
        serde_json::json!(1e300),
    ];
    let limits = [
        (
            serde_json::json!({"deadline_ms": -1}),
            "limits.deadline_ms: invalid value: integer `-1`",
        ),
        (
            serde_json::json!({"deadline_ms": 2.5}),
            "limits.deadline_ms: invalid type: floating point `2.5`",
        ),
        (
            serde_json::json!({"deadline_ms": 3_600_001}),
            "limits.deadline_ms must be from 1 to 3600000",
        ),
        (
            serde_json::json!({"max_pairs": 1u64 << 40}),
            "limits.max_pairs must be at most 1048576",
        ),
        (
            serde_json::json!({"max_value_bytes": 1u64 << 40}),
            "limits.max_value_bytes must be at most 536870912",
        ),
        (
            serde_json::json!({"compile_cpu_ms": 1e20}),
            "limits.compile_cpu_ms: invalid type: floating point",
        ),
    ];
    let mut requests: Vec<serde_json::Value> = timeouts
        .iter()
        .enumerate()
        .map(|(id, timeout)| {
            rpc(
                id,
                "exec",
                serde_json::json!({"execution": execution, "command": "true",
                "timeout_ms": timeout}),
            )
        })
        .collect();
    requests.extend(limits.iter().enumerate().map(|(id, (limits, _))| {
        rpc(
            100 + id,
            "register",
            serde_json::json!({"path": PUPPET, "limits": limits}),
        )
    }));
    // Each name in `env` costs a map entry beside its bytes: 4096 at most.
    let env: serde_json::Map<String, serde_json::Value> = (0..4097)
        .map(|i| (format!("V{i}"), serde_json::json!("")))
        .collect();
    requests.push(rpc(
        200,
        "exec",
        serde_json::json!({"execution": execution,
        "command": "true", "env": env}),
    ));
    let answers = serve_answers(&f, &[], &requests);
    assert_eq!(
        answers.last().unwrap()["error"]["message"],
        "invalid params: env holds 4097 names, over the limit of 4096"
    );
    for (answer, timeout) in answers.iter().zip(&timeouts) {
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert_eq!(
            answer["error"]["message"],
            format!(
                "invalid params: timeout_ms must be a whole number of milliseconds from 1 to \
                 86400000, not {timeout}"
            )
        );
    }
    for (answer, (_, needle)) in answers[timeouts.len()..].iter().zip(&limits) {
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "`{needle}` not in {message}");
        assert!(!message.contains(" at line "), "{message}");
    }
}

/// The CLI's numbers are checked by their parsers: `run --timeout-secs`
/// from 1 to a day (exit 125, `run`'s own failure), `cache gc --max-mib`
/// and `$DSH_CACHE_MAX_MIB` from 0 to 1 TiB (exit 2), each error naming
/// the option.
#[test]
fn cli_numbers_out_of_range_are_refused_naming_the_option() {
    let f = Fixture::new();
    let home = f.home();
    for value in ["-1", "1.5", "0", "86401", "99999999999999999999", "NaN"] {
        let flag = format!("--timeout-secs={value}");
        let output = f.run(&["run", "--home", &home, &flag, "--", "true"], &[]);
        assert_eq!(
            output.status.code(),
            Some(125),
            "{value}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("--timeout-secs"),
            "{}",
            stderr(&output)
        );
    }
    for value in ["-1", "1.5", "1048577", "NaN"] {
        let flag = format!("--max-mib={value}");
        let output = f.run(&["cache", "--home", &home, "gc", &flag], &[]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{value}: {}",
            stderr(&output)
        );
        assert!(stderr(&output).contains("--max-mib"), "{}", stderr(&output));
        let output = f.run(
            &["cache", "--home", &home, "list"],
            &[("DSH_CACHE_MAX_MIB", value)],
        );
        assert_config_error(
            &output,
            &["$DSH_CACHE_MAX_MIB must be a whole number of MiB from 0 to 1048576"],
        );
    }
}

#[test]
fn serve_never_answers_notifications_and_echoes_every_kind_of_id() {
    let f = Fixture::new();
    let mut client = ServeClient::start(&f, &[]);
    // Notifications: a good one, an unknown method, bad params. No answer.
    client.send(&serde_json::json!({"jsonrpc": "2.0", "method": "list"}));
    client.send(&serde_json::json!({"jsonrpc": "2.0", "method": "nope"}));
    client.send(&serde_json::json!({"jsonrpc": "2.0", "method": "collect", "params": {}}));
    // Each request is answered before the next is sent, so nothing above
    // can have been answered later than this.
    assert_eq!(client.call(1, "list", serde_json::json!({}))["id"], 1);
    for id in [
        serde_json::json!("text-id"),
        serde_json::json!(-7),
        serde_json::Value::Null,
    ] {
        client.send(&rpc(id.clone(), "list", serde_json::json!({})));
        let answer = client.next().unwrap();
        assert_eq!(answer["id"], id, "{answer}");
        assert!(answer["result"].is_array(), "{answer}");
    }
    // An id that is neither a string, a number nor null is no request.
    client.send(&rpc(
        serde_json::json!({"a": 1}),
        "list",
        serde_json::json!({}),
    ));
    let answer = client.next().unwrap();
    assert_eq!(answer["id"], serde_json::Value::Null);
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    // A batch: one array, with no answer for its notification.
    client.send(&serde_json::json!([
        rpc(2, "list", serde_json::json!({})),
        {"jsonrpc": "2.0", "method": "list"},
        rpc(3, "nope", serde_json::json!({})),
    ]));
    let batch = client.next().unwrap();
    let batch = batch.as_array().unwrap();
    assert_eq!(batch.len(), 2, "{batch:?}");
    assert_eq!(batch[0]["id"], 2);
    assert_eq!(batch[1]["error"]["code"], -32601);
    assert_eq!(client.finish(), Vec::<serde_json::Value>::new());
}

#[test]
fn serve_initialize_gives_the_protocol_contract_and_server_versions() {
    let f = Fixture::new();
    let answers = serve_answers(&f, &[], &[rpc(1, "initialize", serde_json::json!({}))]);
    let result = &answers[0]["result"];
    assert_eq!(result["protocol_version"], 2, "{result}");
    assert_eq!(result["server"]["name"], "dsh-env");
    assert_eq!(result["server"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(
        result["contracts"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!({"version": "0.1.0", "accepts": "0.1.x"})),
        "{result}"
    );
}

#[test]
fn serve_errors_name_the_contributor_key_file_and_limit() {
    let f = Fixture::new();
    let execution = serde_json::json!({"callId": "c1", "name": "bash"});
    let answers = serve_answers(
        &f,
        &[],
        &[
            rpc(
                1,
                "register",
                serde_json::json!({
                    "path": PUPPET,
                    "config": {"name": "liar", "keys": "DSH_DECLARED=d", "pairs": "DSH_OTHER=x"},
                }),
            ),
            rpc(2, "collect", serde_json::json!({"execution": execution})),
            rpc(3, "register", serde_json::json!({"path": "/no/such.wasm"})),
            rpc(
                4,
                "register",
                serde_json::json!({"path": PUPPET, "limits": {"fuel": 0}}),
            ),
            rpc(5, "dispose", serde_json::json!({"name": "liar"})),
            rpc(
                6,
                "exec",
                serde_json::json!({
                    "execution": execution, "command": "true", "env": {"DSH_FORGED": "1"},
                }),
            ),
        ],
    );
    assert!(answers[0]["result"].is_object(), "{}", answers[0]);
    let data = |answer: &serde_json::Value| answer["error"]["data"].clone();
    assert_eq!(
        data(&answers[1]),
        serde_json::json!({"contributor": "liar", "key": "DSH_OTHER"})
    );
    assert_eq!(
        data(&answers[2]),
        serde_json::json!({"file": "/no/such.wasm"})
    );
    assert_eq!(answers[3]["error"]["code"], -32602);
    assert_eq!(data(&answers[3]), serde_json::json!({"limit": "fuel"}));
    assert_eq!(answers[4]["result"]["disposed"], true);
    assert_eq!(data(&answers[5]), serde_json::json!({"key": "DSH_FORGED"}));
}

#[test]
fn without_room_for_the_instance_pool_it_says_so_and_still_works() {
    use std::os::unix::process::CommandExt;
    let f = Fixture::new();
    let mut command = f.command(
        &[
            "resolve",
            "--home",
            &f.home(),
            "--manifest",
            f.path("manifest.toml").to_str().unwrap(),
        ],
        &[],
    );
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            // 64 GiB of address space: room for on-demand instances (each
            // memory reserves about 4 GiB), far too little for the pool's
            // reservation (about 1 TiB).
            let limit = libc::rlimit {
                rlim_cur: 64 << 30,
                rlim_max: 64 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let output = output_within(command, Stdio::null(), None);
    let err = stderr(&output);
    assert!(output.status.success(), "{err}");
    assert!(
        err.contains("WARN")
            && err.contains("the instance pool cannot be reserved (")
            && err.contains("allocating instances on demand"),
        "{err}"
    );
    assert!(stdout(&output).contains("DSH_SHELL=1"));
}

#[test]
fn check_prints_a_pinned_entry_and_a_pin_refuses_other_bytes() {
    let f = Fixture::new();
    let output = f.run(&["check", AGENT_LINEAGE], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    let entry = &out[out.find("[[contributor]]").expect("an entry to paste")..];
    let pin = entry
        .lines()
        .find_map(|line| line.strip_prefix("sha256 = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("a sha256 line");
    assert!(out.contains(&format!("sha256: {pin}\n")), "{out}");
    // Pasted as it is, the entry registers.
    let manifest = f.write("pinned.toml", entry);
    let manifest = manifest.to_str().unwrap();
    let resolve = |manifest: &str| {
        f.run(
            &["resolve", "--home", &f.home(), "--manifest", manifest],
            &[],
        )
    };
    let output = resolve(manifest);
    assert!(output.status.success(), "{}", stderr(&output));
    // The same entry pinning other bytes: refused at registration, naming
    // the file and both digests.
    let other = "0".repeat(64);
    let wrong = f.write("wrong.toml", &entry.replace(pin, &other));
    let output = resolve(wrong.to_str().unwrap());
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains(AGENT_LINEAGE)
            && err.contains(&format!("its sha256 is {pin}, but its entry pins {other}")),
        "{err}"
    );
    // A pin that is no digest is a manifest error naming the field.
    let bad = f.write("bad.toml", &entry.replace(pin, "abc"));
    let output = resolve(bad.to_str().unwrap());
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("sha256 must be 64 hexadecimal digits, not `abc`"),
        "{}",
        stderr(&output)
    );
}

/// A copy of the component `from`, at `name` in the fixture.
fn component_copy(f: &Fixture, from: &str, name: &str) -> PathBuf {
    let path = f.path(name);
    std::fs::copy(from, &path).unwrap();
    path
}

#[test]
fn a_signature_under_a_trusted_key_is_verified_and_shown() {
    let f = Fixture::new();
    let author = SigningKey::new(f.dir.path(), "author");
    let component = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    author.sign(&component);
    let trust = |keys: &[&str], required: bool| {
        format!("[trust]\nkeys = {keys:?}\nrequire_signature = {required}\n\n")
    };
    let manifest = |name: &str, trust: &str| {
        f.write(
            name,
            &format!("{trust}[[contributor]]\npath = \"lineage.wasm\"\n"),
        )
        .display()
        .to_string()
    };
    let trusted = manifest("trusted.toml", &trust(&[&author.public], true));
    let explain = |manifest: &str| {
        f.run(
            &[
                "explain",
                "--home",
                &f.home(),
                "--manifest",
                manifest,
                "--json",
            ],
            &[],
        )
    };
    let output = explain(&trusted);
    assert!(output.status.success(), "{}", stderr(&output));
    let signer = &json(&output)["contributors"][0]["signer"];
    assert_eq!(signer["status"], "trusted", "{signer}");
    assert_eq!(signer["key_id"], author.id.as_str());
    assert!(
        signer["trusted_comment"]
            .as_str()
            .unwrap()
            .contains("release 1.0")
    );
    // check shows the same, verified under the manifest's keys.
    let output = f.run(&["check", "lineage.wasm", "--manifest", &trusted], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains(&format!("signature: signed by trusted key {}", author.id)),
        "{}",
        stdout(&output)
    );

    // Signed by a key the manifest does not trust: refused, naming the key.
    let stranger = SigningKey::new(f.dir.path(), "stranger");
    let only_stranger = manifest("stranger.toml", &trust(&[&stranger.public], false));
    assert_config_error(
        &explain(&only_stranger),
        &["lineage.wasm", &author.id, "not in [trust] keys"],
    );

    // A signature that is not of these bytes: refused, naming file and key.
    let other = component_copy(&f, CALL_TRACE, "other.wasm");
    author.sign(&other);
    std::fs::copy(f.path("other.wasm.minisig"), f.path("lineage.wasm.minisig")).unwrap();
    assert_config_error(
        &explain(&trusted),
        &["lineage.wasm", &author.id, "does not verify"],
    );

    // Unsigned, with a signature required: refused; not required: unsigned.
    std::fs::remove_file(f.path("lineage.wasm.minisig")).unwrap();
    assert_config_error(
        &explain(&trusted),
        &["lineage.wasm", "is not signed", "requires a signature"],
    );
    let optional = manifest("optional.toml", &trust(&[&author.public], false));
    let output = explain(&optional);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        json(&output)["contributors"][0]["signer"]["status"],
        "unsigned"
    );

    // A trusted key that is not a key: the manifest is refused, naming it.
    let broken = manifest("broken.toml", &trust(&["not-a-key"], false));
    assert_config_error(&explain(&broken), &["broken.toml", "trust.keys[0]"]);
}

/// One trust rule through every entry point: under `require_signature`,
/// the same unsigned component is refused by every command and by
/// `serve`'s `register` (under `serve --manifest`'s `[trust]`); signed, it
/// is taken by each.
#[test]
fn every_entry_point_refuses_an_unsigned_component_under_required_signatures() {
    let f = Fixture::new();
    let author = SigningKey::new(f.dir.path(), "author");
    let component = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    let trust_only = f.write("trust.toml", &requiring(&author));
    let with_entry = f.write(
        "m.toml",
        &format!(
            "{}\n[[contributor]]\npath = \"lineage.wasm\"\n",
            requiring(&author)
        ),
    );
    let (trust_only, with_entry) = (trust_only.to_str().unwrap(), with_entry.to_str().unwrap());
    let home = f.home();
    let command = |name: &str| -> Output {
        let mut args = vec![name, "--manifest", with_entry, "--home", &home];
        if name == "run" {
            args.extend(["--", "true"]);
        }
        f.run(&args, &[])
    };
    let check = || {
        f.run(
            &[
                "check",
                "lineage.wasm",
                "--manifest",
                trust_only,
                "--home",
                &home,
            ],
            &[],
        )
    };
    let add = || {
        f.run(
            &[
                "add",
                "lineage.wasm",
                "--manifest",
                trust_only,
                "--home",
                &home,
                "--yes",
            ],
            &[],
        )
    };
    let serve_register = || {
        let request = rpc(1, "register", serde_json::json!({"path": component}));
        let output = output_within(
            f.command(&["serve", "--manifest", trust_only, "--home", &home], &[]),
            Stdio::null(),
            Some(format!("{request}\n").into_bytes()),
        );
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_str::<serde_json::Value>(stdout(&output).trim()).unwrap()
    };
    let unsigned = ["lineage.wasm", "is not signed", "requires a signature"];

    for name in ["list", "resolve", "explain"] {
        assert_config_error(&command(name), &unsigned);
    }
    assert_one_line_error(&command("run"), 125, &unsigned);
    let output = check();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    for needle in unsigned {
        assert!(stdout(&output).contains(needle), "{}", stdout(&output));
    }
    assert_config_error(&add(), &unsigned);
    let answer = serve_register();
    assert_eq!(answer["error"]["code"], -32000, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    for needle in unsigned {
        assert!(message.contains(needle), "{answer}");
    }
    assert!(
        answer["error"]["data"]["file"]
            .as_str()
            .unwrap()
            .ends_with("lineage.wasm"),
        "{answer}"
    );

    // Signed by the trusted key, the same component is taken by each.
    author.sign(&component);
    for name in ["list", "resolve", "explain", "run"] {
        let output = command(name);
        assert!(output.status.success(), "{name}: {}", stderr(&output));
    }
    let output = check();
    assert!(output.status.success(), "{}", stdout(&output));
    let answer = serve_register();
    assert_eq!(answer["result"]["name"], "agent-lineage", "{answer}");
    // Last: it pins the component in trust.toml.
    let output = add();
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn add_reviews_pins_and_refuses_what_changed_until_added_again() {
    let f = Fixture::new();
    let component = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    let layout = "# Contributors for this project.\nhome = \"home\"  # kept as written\n";
    let manifest = f.write("m.toml", layout);
    let manifest_arg = manifest.to_str().unwrap();
    let add = |extra: &[&str]| {
        let mut args = vec!["add", "lineage.wasm", "--manifest", manifest_arg];
        args.extend_from_slice(extra);
        f.run(&args, &[])
    };
    let list = || f.run(&["list", "--manifest", manifest_arg], &[]);

    // Without a terminal and without --yes: the review is shown, nothing written.
    let output = add(&[]);
    assert_config_error(&output, &["no terminal to confirm on", "--yes"]);
    let review = stdout(&output);
    for needle in [
        "Contributor `agent-lineage`",
        "DSH_PARENT_SESSION_ID",
        "wasi:cli/environment",
        "Grants its entry asks for:\n    (none)",
        "signature: unsigned",
    ] {
        assert!(review.contains(needle), "`{needle}` not in: {review}");
    }
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), layout);

    // On a terminal (a real pty, from util-linux `script`), "n" declines and
    // "y" pins; --yes pins without asking.
    let on_terminal =
        |answer: &str| f.on_terminal(&["add", "lineage.wasm", "--manifest", manifest_arg], answer);
    let output = on_terminal("n\n");
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("Trust `agent-lineage` and pin it in"),
        "{}",
        stdout(&output)
    );
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), layout);
    let output = on_terminal("y\n");
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(
        std::fs::read_to_string(&manifest)
            .unwrap()
            .contains("sha256 = ")
    );
    std::fs::write(&manifest, layout).unwrap();

    // With --yes: pinned, comments and layout kept, and it loads.
    let output = add(&["--yes"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let pinned = std::fs::read_to_string(&manifest).unwrap();
    assert!(pinned.starts_with(layout), "{pinned}");
    assert!(pinned.contains("path = \"lineage.wasm\""), "{pinned}");
    assert!(pinned.contains("grants_sha256 = "), "{pinned}");
    let output = list();
    assert!(output.status.success(), "{}", stderr(&output));

    // Other bytes at the same path: refused until added again.
    std::fs::copy(CALL_TRACE, &component).unwrap();
    assert_config_error(
        &list(),
        &[
            "lineage.wasm",
            "changed since it was pinned",
            "run `dsh-env add` again",
        ],
    );
    let output = add(&["--yes"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("Updated `call-trace`"),
        "{}",
        stdout(&output)
    );
    let repinned = std::fs::read_to_string(&manifest).unwrap();
    assert_eq!(repinned.matches("[[contributor]]").count(), 1, "{repinned}");
    assert!(list().status.success());

    // Grants edited by hand: refused until reviewed again by `add`.
    let widened = format!("{repinned}\n[contributor.grants]\ncwd = \"read\"\n");
    std::fs::write(&manifest, &widened).unwrap();
    assert_config_error(
        &list(),
        &[
            "m.toml",
            "grants or config changed since it was added",
            "run `dsh-env add` again",
        ],
    );
    let output = add(&["--yes"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("the agent's cwd, read-only"),
        "{}",
        stdout(&output)
    );
    assert!(list().status.success());

    // Config is reviewed and pinned too, under either spelling: a value
    // changed by hand is refused until added again, and the review shows it.
    let reviewed = std::fs::read_to_string(&manifest).unwrap();
    for table in ["[contributor.config]", "[contributor.grants.config]"] {
        std::fs::write(
            &manifest,
            format!("{reviewed}\n{table}\nteam = \"other\"\n"),
        )
        .unwrap();
        assert_config_error(
            &list(),
            &["m.toml", "grants or config changed since it was added"],
        );
        let output = add(&["--yes"]);
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(
            stdout(&output).contains("config team = other"),
            "{table}: {}",
            stdout(&output)
        );
        assert!(list().status.success(), "{table}");
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

#[test]
fn logs_are_coloured_only_on_a_terminal_without_no_color_and_debug_is_dsh_envs_own() {
    let f = Fixture::new();
    let manifest = f.path("manifest.toml");
    let log = |verbose: &str, home: &str| {
        let home = f.path(home);
        let args = [
            "list",
            verbose,
            "--manifest",
            manifest.to_str().unwrap(),
            "--home",
            home.to_str().unwrap(),
        ];
        let output = f.run(&args, &[]);
        assert!(output.status.success(), "{}", stderr(&output));
        stderr(&output)
    };
    let wasmtime_lines = |err: &str| err.lines().filter(|l| l.contains("wasmtime::")).count();
    // Each run compiles into a fresh home, so wasmtime has things to say.
    let everything = log("-vvv", "h1");
    assert!(
        wasmtime_lines(&everything) > 0,
        "-vvv shows wasmtime's debug: {everything}"
    );
    assert!(
        !everything.contains('\u{1b}'),
        "colour codes on a pipe: {everything}"
    );
    let debug = log("-vv", "h2");
    assert_eq!(wasmtime_lines(&debug), 0, "{debug}");

    // On a terminal: colour, unless $NO_COLOR is set.
    let on_terminal = |home: &str, env: &[(&str, &str)]| {
        let home = f.path(home);
        let args = [
            "list",
            "-vvv",
            "--manifest",
            manifest.to_str().unwrap(),
            "--home",
            home.to_str().unwrap(),
        ];
        let output = f.on_terminal_with(&args, env, "");
        assert!(output.status.success(), "{}", stdout(&output));
        stdout(&output)
    };
    let coloured = on_terminal("h3", &[]);
    assert!(wasmtime_lines(&coloured) > 0, "{coloured}");
    assert!(
        coloured.contains("\u{1b}["),
        "colour on a terminal: {coloured}"
    );
    let plain = on_terminal("h4", &[("NO_COLOR", "1")]);
    assert!(wasmtime_lines(&plain) > 0, "{plain}");
    assert!(!plain.contains('\u{1b}'), "NO_COLOR: {plain}");
}

#[test]
fn the_demo_shows_both_shells_and_whole_hook_lines_from_both_agents() {
    let f = Fixture::new();
    let manifest = f.path("manifest.toml");
    // The demo's home is one directory under the temporary directory,
    // replaced by each run rather than left beside the last.
    let tmp = f.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let demo = || {
        f.run(
            &["demo", "--manifest", manifest.to_str().unwrap()],
            &[("TMPDIR", tmp.to_str().unwrap())],
        )
    };
    assert!(demo().status.success());
    let output = demo();
    assert!(output.status.success(), "{}", stderr(&output));
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["dsh-env-demo"], "two runs leave one home");
    let text = stdout(&output);
    let row = |key: &str| -> Vec<String> {
        let line = text.lines().find(|l| l.starts_with(key));
        let line = line.unwrap_or_else(|| panic!("no {key} row: {text}"));
        line.split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect()
    };
    // The child's parent is the parent's session.
    let sessions = row("DSH_SESSION_ID");
    assert_eq!(
        row("DSH_PARENT_SESSION_ID"),
        ["(absent)", &sessions[0]],
        "{text}"
    );
    // Both agents' SessionStart and PreToolUse hooks ran at once; each line
    // is whole: the hook's DSH_SESSION_ID, then the payload naming the same
    // session.
    let hooks: Vec<&str> = (text.lines())
        .skip_while(|l| !l.starts_with("What the hooks received"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(hooks.len(), 4, "{text}");
    for line in hooks {
        let (session, payload) = line.trim().split_once(' ').unwrap();
        let payload: serde_json::Value =
            serde_json::from_str(payload).unwrap_or_else(|e| panic!("{e}: a broken line: {line}"));
        assert_eq!(payload["session_id"], session, "{line}");
        assert!(sessions.iter().any(|s| s == session), "{line}");
    }
}

/// What bash's completion offers for the words typed so far (the last one
/// being completed), through the script `dsh-env completions bash` prints,
/// sourced into a real bash.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let script = Command::new(BINARY)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(script.status.success());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dsh-env.bash");
    std::fs::write(&path, &script.stdout).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let driver = format!(
        "source {path:?}\nCOMP_WORDS=({words})\nCOMP_CWORD={cword}\n\
         _dsh__env dsh-env '{cur}' '{prev}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        words = quoted.join(" "),
        cword = words.len() - 1,
        cur = words[words.len() - 1],
        prev = words[words.len() - 2],
    );
    let output = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &driver])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output).lines().map(str::to_string).collect()
}

#[test]
fn bash_completes_after_the_subcommand() {
    let langs = bash_completes(&["dsh-env", "new", "x", "--lang", ""]);
    for lang in ["rust", "python", "js", "c"] {
        assert!(langs.iter().any(|l| l == lang), "--lang offers {langs:?}");
    }
    let flags = bash_completes(&["dsh-env", "resolve", "--ma"]);
    assert_eq!(flags, ["--manifest"]);
    let commands = bash_completes(&["dsh-env", "exp"]);
    assert_eq!(commands, ["explain"]);
}

#[test]
fn completions_are_printed_for_each_shell() {
    for (shell, marker) in [
        ("bash", "_dsh__env()"),
        ("zsh", "#compdef dsh-env"),
        ("fish", "complete -c dsh-env"),
    ] {
        let output = Command::new(BINARY)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(output.status.success(), "{shell}");
        let script = stdout(&output);
        assert!(
            script.contains(marker),
            "{shell}: {}",
            &script[..script.len().min(200)]
        );
        assert!(script.contains("explain"), "{shell}");
    }
    let output = Command::new(BINARY)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn explain_shows_absent_keys_where_the_home_came_from_and_structured_omissions() {
    let f = Fixture::new();
    let manifest = f.write(
        "explain.toml",
        &format!(
            "[[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nname = \"quiet\"\nkeys = \"DSH_QUIET=never set\"\n\n\
             [[contributor]]\npath = {PUPPET:?}\non_error = \"omit\"\n[contributor.config]\nname = \"broken\"\nkeys = \"DSH_BROKEN=b\"\nresolve = \"trap:gone wrong\"\n"
        ),
    );
    let home = f.home();
    let args = f.with_setup("explain", manifest.to_str().unwrap(), &home);
    let output = f.run(&args, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    for line in [
        "Declared but absent for this execution:\n",
        "  DSH_QUIET  (quiet: never set)\n",
        "  DSH_BROKEN  (broken: b)\n",
        "  DSH_SESSION_ID  (dsh-env: ",
        &format!("DSH_HOME: {home} (from --home)\n"),
    ] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }

    let explain = [
        "explain",
        "--manifest",
        manifest.to_str().unwrap(),
        "--json",
    ];
    let report = json(&f.run(&explain, &[("DSH_HOME", &home)]));
    assert_eq!(
        report["home"],
        serde_json::json!({"path": home, "from": "$DSH_HOME"})
    );
    let absent: Vec<&str> = report["absent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["key"].as_str().unwrap())
        .collect();
    assert_eq!(absent, ["DSH_BROKEN", "DSH_QUIET", "DSH_SESSION_ID"]);
    let omitted = &report["omitted"][0];
    assert_eq!(
        (&omitted["name"], &omitted["phase"], &omitted["rule"]),
        (
            &serde_json::json!("broken"),
            &serde_json::json!("resolve"),
            &serde_json::json!("trap")
        )
    );
    assert!(
        omitted["reason"].as_str().unwrap().contains("gone wrong"),
        "{omitted}"
    );
    assert_eq!(report["omitted"].as_array().unwrap().len(), 1);
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

#[test]
fn cache_lists_trims_and_clears_the_homes_compile_cache() {
    let fixture = Fixture::new();
    let home = fixture.home();
    let manifest = fixture.path("manifest.toml").display().to_string();
    let cache = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["cache"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--home", &home]);
        let output = fixture.run(&all, env);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        output
    };
    let listed = |env: &[(&str, &str)]| json(&cache(&["list", "--json"], env));
    let names = |listing: &serde_json::Value| -> Vec<String> {
        let entries = listing["entries"].as_array().unwrap();
        let mut names: Vec<String> = entries
            .iter()
            .flat_map(|e| e["names"].as_array().unwrap().clone())
            .map(|n| n.as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    let register = |env: &[(&str, &str)]| {
        let output = fixture.run(&["list", "--manifest", &manifest, "--home", &home], env);
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(stdout(&output).contains("DSH_AGENT_DEPTH"));
    };

    let empty = listed(&[]);
    assert_eq!(empty["format"], 1);
    assert_eq!(empty["entries"], serde_json::json!([]));
    assert_eq!(empty["max_bytes"], 512 << 20);

    // A cap of 0: each write keeps only what its process holds, here the
    // manifest's two components, loaded together.
    let nothing = [("DSH_CACHE_MAX_MIB", "0")];
    register(&nothing);
    let two = listed(&nothing);
    assert_eq!(two["max_bytes"], 0);
    assert_eq!(names(&two), ["agent-lineage", "call-trace"]);
    let entries = two["entries"].as_array().unwrap();
    assert!(entries.iter().all(|e| e["artifact"] == true
        && e["bytes"].as_u64().unwrap() > 0
        && e["content"].as_str().unwrap().len() == 64));
    let text = stdout(&cache(&["list"], &[]));
    assert!(
        text.contains("agent-lineage") && text.contains("call-trace"),
        "{text}"
    );
    assert!(text.contains("2 entries"), "{text}");

    // Another process's write under that cap evicts both.
    let checked = fixture.run(&["check", GIT_CONTEXT, "--home", &home], &nothing);
    assert!(checked.status.success(), "{}", stderr(&checked));
    let one = listed(&[]);
    let entries = one["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{one}");
    assert_eq!(
        entries[0]["content"].as_str().unwrap(),
        sha256_of(GIT_CONTEXT)
    );

    let trimmed = stdout(&cache(&["gc", "--max-mib", "0"], &[]));
    assert!(trimmed.starts_with("removed 1 entries"), "{trimmed}");
    assert_eq!(listed(&[])["entries"], serde_json::json!([]));

    // Cleared while nothing is registered: empty, and it works again.
    register(&[]);
    assert_eq!(names(&listed(&[])), ["agent-lineage", "call-trace"]);
    let cleared = stdout(&cache(&["clear"], &[]));
    assert!(cleared.starts_with("removed 2 entries"), "{cleared}");
    let dir = std::path::Path::new(&home).join("cache");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    register(&[]);
    assert_eq!(names(&listed(&[])), ["agent-lineage", "call-trace"]);

    let bad = fixture.run(
        &["list", "--manifest", &manifest, "--home", &home],
        &[("DSH_CACHE_MAX_MIB", "lots")],
    );
    assert_config_error(&bad, &["$DSH_CACHE_MAX_MIB", "lots"]);
}

/// The SHA-256 of the file at `path`, in lowercase hex.
fn sha256_of(path: &str) -> String {
    dsh_env::__internal::sha256_hex(&std::fs::read(path).unwrap())
}

/// `dsh-env push <file> <target>` (plus `extra`), run in `f`.
fn push(f: &Fixture, file: &Path, target: &str, extra: &[&str]) -> Output {
    let mut args = vec!["push", file.to_str().unwrap(), target];
    args.extend(extra);
    f.run(&args, &[])
}

/// Pulls `reference` into the store of `f`'s home, as `dsh-env add` does.
fn pull_into_home(f: &Fixture, reference: &str) {
    let reference = dsh_env::OciReference::parse(reference).unwrap();
    let store = dsh_env::Store::new(f.path("home").join("store"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(dsh_env_oci::pull(&reference, &store, &Default::default()))
        .unwrap();
}

#[test]
fn a_pushed_contributor_pinned_by_source_resolves_from_the_store_with_the_registry_stopped() {
    let f = Fixture::new();
    let mut registry = dsh_env_test_registry::TestRegistry::start();
    let component = f.path("lineage.wasm");
    std::fs::copy(AGENT_LINEAGE, &component).unwrap();
    f.write(
        "lineage.wasm.minisig",
        "untrusted comment: not verified by push\nRWQ=\n",
    );
    let target = format!("{}/dsh/agent-lineage:v1", registry.host());
    let output = push(&f, &component, &target, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("with its signature"),
        "{}",
        stderr(&output)
    );
    let pinned = stdout(&output).trim().to_string();
    let prefix = format!("oci://{}/dsh/agent-lineage@sha256:", registry.host());
    assert!(pinned.starts_with(&prefix), "{pinned}");

    pull_into_home(&f, &pinned);
    registry.stop();
    let manifest = f.write(
        "oci.toml",
        &format!("[[contributor]]\nsource = {pinned:?}\n"),
    );
    let mut args = f.with_setup("resolve", manifest.to_str().unwrap(), "home");
    args.extend(["--execution", "execution.json"]);
    let output = f.run(&args, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("DSH_PARENT_SESSION_ID=parent-1\n"),
        "{}",
        stdout(&output)
    );

    // A pinned source that was never pulled: exit 2, saying how to get it.
    let other = format!("{prefix}{}", "ab".repeat(32));
    let manifest = f.write(
        "missing.toml",
        &format!("[[contributor]]\nsource = {other:?}\n"),
    );
    let output = f.run(
        &f.with_setup("resolve", manifest.to_str().unwrap(), "home"),
        &[],
    );
    assert_config_error(
        &output,
        &[
            &other,
            "not in the store",
            "dsh-env pull --manifest",
            "dsh-env add",
        ],
    );
    // A tag is not a pin.
    let tagged = format!("oci://{target}");
    let manifest = f.write(
        "tagged.toml",
        &format!("[[contributor]]\nsource = {tagged:?}\n"),
    );
    let output = f.run(
        &f.with_setup("resolve", manifest.to_str().unwrap(), "home"),
        &[],
    );
    assert_config_error(&output, &["tagged.toml", &tagged, "not pinned by digest"]);
}

#[test]
fn push_refuses_bad_input_and_plain_http_off_loopback() {
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start();
    let component = Path::new(AGENT_LINEAGE);
    let target = format!("{}/dsh/lineage:v1", registry.host());

    let not_wasm = f.write("notes.wasm", "hello");
    let output = push(&f, &not_wasm, &target, &[]);
    assert_config_error(&output, &["notes.wasm", "not a WebAssembly component"]);
    let output = push(&f, component, &format!("{}/Dsh:v1", registry.host()), &[]);
    assert_config_error(&output, &["Dsh", "repository must be lowercase"]);
    let output = push(
        &f,
        component,
        &format!("{}/dsh/lineage", registry.host()),
        &[],
    );
    assert_config_error(&output, &["give a :<tag>"]);
    let output = push(&f, component, "127.0.0.1:1/dsh/lineage:v1", &[]);
    assert_config_error(
        &output,
        &[
            "oci://127.0.0.1:1/dsh/lineage:v1",
            "registry unreachable over http",
        ],
    );

    // 0.0.0.0 is not loopback, yet reaches this machine (Linux): HTTPS
    // unless --plain-http.
    let port = registry.host().rsplit_once(':').unwrap().1.to_string();
    let remote = format!("0.0.0.0:{port}/dsh/lineage:v1");
    let output = push(&f, component, &remote, &[]);
    assert_config_error(
        &output,
        &["registry unreachable over https", "--plain-http"],
    );
    let output = push(&f, component, &remote, &["--plain-http"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).contains("unsigned"), "{}", stderr(&output));
}

/// `[trust]` requiring a signature by `key`.
fn requiring(key: &SigningKey) -> String {
    format!(
        "[trust]\nkeys = [{:?}]\nrequire_signature = true\n",
        key.public
    )
}

/// An `author` key, and copies of agent-lineage and call-trace it signed.
fn signed_copies(f: &Fixture) -> (SigningKey, PathBuf, PathBuf) {
    let author = SigningKey::new(f.dir.path(), "author");
    let (lineage, trace) = (
        component_copy(f, AGENT_LINEAGE, "lineage.wasm"),
        component_copy(f, CALL_TRACE, "trace.wasm"),
    );
    author.sign(&lineage);
    author.sign(&trace);
    (author, lineage, trace)
}

#[test]
fn add_pulls_reviews_and_pins_an_oci_source_which_a_moved_tag_or_a_stopped_registry_leaves_alone() {
    let f = Fixture::new();
    let mut registry = dsh_env_test_registry::TestRegistry::start();
    let (author, lineage, trace) = signed_copies(&f);
    let target = format!("{}/dsh/tool:v1", registry.host());
    assert!(push(&f, &lineage, &target, &[]).status.success());

    let manifest = f.write("m.toml", &requiring(&author));
    let (m, home, tagged) = (
        manifest.to_str().unwrap(),
        f.home(),
        format!("oci://{target}"),
    );
    let add = || {
        f.run(
            &["add", &tagged, "--manifest", m, "--home", &home, "--yes"],
            &[],
        )
    };
    let resolve = || {
        let args = [
            "resolve",
            "--manifest",
            m,
            "--home",
            &home,
            "--execution",
            "execution.json",
        ];
        let output = f.run(&args, &[]);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    };
    let output = add();
    assert!(output.status.success(), "{}", stderr(&output));
    let review = stdout(&output);
    for needle in [
        "Contributor `agent-lineage` from oci://",
        &format!("signed by trusted key {}", author.id),
        "DSH_PARENT_SESSION_ID",
        "Added `agent-lineage`",
    ] {
        assert!(review.contains(needle), "`{needle}` not in: {review}");
    }
    let pinned = std::fs::read_to_string(&manifest).unwrap();
    let source = format!("source = \"oci://{}/dsh/tool@sha256:", registry.host());
    assert!(pinned.starts_with(&requiring(&author)), "{pinned}");
    assert!(pinned.contains(&source), "{pinned}");
    let lineage_sha = dsh_env::__internal::sha256_hex(&std::fs::read(&lineage).unwrap());
    assert!(
        pinned.contains(&format!("sha256 = \"{lineage_sha}\"")),
        "{pinned}"
    );
    assert!(resolve().contains("DSH_PARENT_SESSION_ID=parent-1\n"));

    // The tag moves to other code: the pinned entry keeps the old code
    // until `add` runs again.
    assert!(push(&f, &trace, &target, &[]).status.success());
    let overlay = resolve();
    assert!(
        overlay.contains("DSH_PARENT_SESSION_ID=") && !overlay.contains("DSH_TRACEPARENT="),
        "{overlay}"
    );
    let output = add();
    assert!(
        stdout(&output).contains("Updated `call-trace`"),
        "{}",
        stdout(&output)
    );
    let repinned = std::fs::read_to_string(&manifest).unwrap();
    assert_ne!(repinned, pinned);
    assert_eq!(repinned.matches("[[contributor]]").count(), 1, "{repinned}");
    assert!(resolve().contains("DSH_TRACEPARENT="));

    // The registry stopped: the pinned entry loads from the store; `add`
    // fails, naming the reference, and changes nothing.
    registry.stop();
    assert!(resolve().contains("DSH_TRACEPARENT="));
    assert_config_error(&add(), &[&tagged, "registry unreachable"]);
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), repinned);
}

#[test]
fn add_refuses_an_unsigned_badly_signed_or_broken_oci_source_and_stores_none_of_it() {
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start();
    let author = SigningKey::new(f.dir.path(), "author");
    let manifest = f.write("m.toml", &requiring(&author));
    let (m, home) = (manifest.to_str().unwrap(), f.home());
    let add = |target: &str| {
        let reference = format!("oci://{}/{target}", registry.host());
        f.run(
            &["add", &reference, "--manifest", m, "--home", &home, "--yes"],
            &[],
        )
    };
    let lineage = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    assert!(
        push(
            &f,
            &lineage,
            &format!("{}/dsh/unsigned:v1", registry.host()),
            &[]
        )
        .status
        .success()
    );
    assert_config_error(
        &add("dsh/unsigned:v1"),
        &[
            "dsh/unsigned@sha256:",
            "is not signed",
            "requires a signature",
        ],
    );

    // A signature by the trusted key, but of other bytes.
    let trace = component_copy(&f, CALL_TRACE, "trace.wasm");
    author.sign(&trace);
    std::fs::copy(f.path("trace.wasm.minisig"), f.path("lineage.wasm.minisig")).unwrap();
    assert!(
        push(
            &f,
            &lineage,
            &format!("{}/dsh/forged:v1", registry.host()),
            &[]
        )
        .status
        .success()
    );
    assert_config_error(
        &add("dsh/forged:v1"),
        &["dsh/forged@sha256:", &author.id, "does not verify"],
    );

    // Not a component (`push` refuses one, the library does not).
    let junk = format!("oci://{}/dsh/junk:v1", registry.host());
    let junk = dsh_env::OciReference::parse(&junk).unwrap();
    let options = dsh_env_oci::Options::default();
    let pushed = dsh_env_oci::push(b"\0asm, and then junk", None, &junk, &options);
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(pushed)
        .unwrap();
    let output = add("dsh/junk:v1");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("dsh/junk@sha256:"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(&manifest).unwrap(),
        requiring(&author)
    );
    assert_eq!(
        stored_blobs(&f),
        Vec::<String>::new(),
        "a refused pull leaves nothing in the store"
    );
}

/// The file names in the blob directory of `f`'s home store, sorted.
fn stored_blobs(f: &Fixture) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(f.path("home/store/blobs/sha256")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn a_declined_add_leaves_nothing_in_the_store_and_store_gc_drops_what_no_manifest_pins() {
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start();
    let manifest = f.write("m.toml", "");
    let (m, home) = (manifest.to_str().unwrap(), f.home());
    let tagged = format!("oci://{}/dsh/tool:v1", registry.host());
    let add = || {
        f.run(
            &["add", &tagged, "--manifest", m, "--home", &home, "--yes"],
            &[],
        )
    };
    let lineage = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    let target = format!("{}/dsh/tool:v1", registry.host());
    assert!(push(&f, &lineage, &target, &[]).status.success());
    let declined = f.on_terminal(&["add", &tagged, "--manifest", m, "--home", &home], "n\n");
    assert_eq!(declined.status.code(), Some(1), "{}", stdout(&declined));
    assert_eq!(stored_blobs(&f), Vec::<String>::new());

    // Accepted, then the tag moves and `add` re-pins: the first artifact
    // stays in the store, pinned by nothing.
    assert!(add().status.success());
    let first = stored_blobs(&f);
    assert_eq!(first.len(), 3, "manifest, config, layer: {first:?}");
    let trace = component_copy(&f, CALL_TRACE, "trace.wasm");
    assert!(push(&f, &trace, &target, &[]).status.success());
    assert!(add().status.success());
    assert_eq!(stored_blobs(&f).len(), 6);
    let store = dsh_env::Store::new(f.path("home/store"));
    let orphan = store.put_blob(b"a blob no manifest references").unwrap();

    let gc = |extra: &[&str]| {
        let mut args = vec!["store", "gc", "--home", &home];
        args.extend(extra);
        let output = f.run(&args, &[]);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    };
    let swept = gc(&[]);
    assert!(swept.starts_with(&format!("removed {orphan}  ")), "{swept}");
    assert!(swept.contains("removed 1 blobs"), "{swept}");
    assert_eq!(stored_blobs(&f).len(), 6, "every stored artifact is kept");

    let swept = gc(&["--manifest", m]);
    assert!(swept.contains("removed 3 blobs"), "{swept}");
    let lineage_sha = sha256_of(AGENT_LINEAGE);
    assert!(
        swept.contains(&format!("removed {lineage_sha}  ")),
        "{swept}"
    );
    let left = stored_blobs(&f);
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(left.iter().all(|blob| !first.contains(blob)), "{left:?}");
    let mut args = f.with_setup("resolve", m, &home);
    args.extend(["--execution", "execution.json"]);
    let output = f.run(&args, &[]);
    assert!(
        stdout(&output).contains("DSH_TRACEPARENT="),
        "{}",
        stderr(&output)
    );

    // A manifest that cannot be read removes nothing.
    let output = f.run(
        &["store", "gc", "--home", &home, "--manifest", "missing.toml"],
        &[],
    );
    assert_config_error(&output, &["missing.toml"]);
    assert_eq!(stored_blobs(&f), left);
}

/// `dsh-env pull --manifest <m> --home <home>` (plus `extra`), run in `f`.
fn pull(f: &Fixture, m: &str, home: &str, extra: &[&str]) -> Output {
    let mut args = vec!["pull", "--manifest", m, "--home", home];
    args.extend(extra);
    f.run(&args, &[])
}

#[test]
fn pull_fills_a_fresh_home_from_a_reviewed_manifest_once_and_it_then_loads_offline() {
    let f = Fixture::new();
    let mut registry = dsh_env_test_registry::TestRegistry::start();
    let (author, lineage, trace) = signed_copies(&f);
    let manifest = f.write("m.toml", &requiring(&author));
    let m = manifest.to_str().unwrap();
    // The author's machine: push, then `add` reviews and pins each.
    for (file, repository) in [(&lineage, "dsh/lineage:v1"), (&trace, "dsh/trace:v1")] {
        let target = format!("{}/{repository}", registry.host());
        assert!(push(&f, file, &target, &[]).status.success());
        let tagged = format!("oci://{target}");
        let added = f.run(
            &[
                "add",
                &tagged,
                "--manifest",
                m,
                "--home",
                "author-home",
                "--yes",
            ],
            &[],
        );
        assert!(added.status.success(), "{}", stderr(&added));
    }
    let reviewed = std::fs::read_to_string(&manifest).unwrap();

    // A worker: an empty home, the reviewed manifest, no prompt.
    let worker = f.path("worker").display().to_string();
    let output = pull(&f, m, &worker, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "2 of 2 artifacts in the store (2 pulled, 0 already there)\n"
    );
    assert_eq!(stderr(&output), "", "no progress lines off a terminal");
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), reviewed);

    // The registry stopped: a second pull needs nothing from it, and the
    // manifest loads from the store.
    registry.stop();
    let output = pull(&f, m, &worker, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("(0 pulled, 2 already there)"),
        "{}",
        stdout(&output)
    );
    let mut args = f.with_setup("resolve", m, &worker);
    args.extend(["--execution", "execution.json"]);
    let output = f.run(&args, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let overlay = stdout(&output);
    assert!(
        overlay.contains("DSH_PARENT_SESSION_ID=parent-1\n")
            && overlay.contains("DSH_TRACEPARENT="),
        "{overlay}"
    );

    // On a terminal, a line per artifact; --optimize compiles each with
    // Cranelift into the cache, beside the baseline code the checks made.
    let cached = || {
        let output = f.run(&["cache", "list", "--json", "--home", &worker], &[]);
        let listing: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
        listing["entries"].as_array().unwrap().len()
    };
    let baseline = cached();
    assert_eq!(baseline, 2, "the checks compiled each once");
    let shown = f.on_terminal(
        &["pull", "--manifest", m, "--home", &worker, "--optimize"],
        "",
    );
    let text = stdout(&shown);
    assert!(shown.status.success(), "{text}");
    for needle in [
        "[1/2] oci://127.0.0.1:",
        "[2/2] oci://",
        ": already in the store",
    ] {
        assert!(text.contains(needle), "`{needle}` not in: {text}");
    }
    assert_eq!(cached(), 4, "optimized code beside the baseline's");
}

#[test]
fn pull_names_each_artifact_it_cannot_store_and_stores_none_of_a_refused_one() {
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start();
    let author = SigningKey::new(f.dir.path(), "author");
    let lineage = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    let trace = component_copy(&f, CALL_TRACE, "trace.wasm");
    author.sign(&trace);
    let pushed = |file: &Path, repository: &str| {
        let output = push(&f, file, &format!("{}/{repository}", registry.host()), &[]);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output).trim().to_string()
    };
    let unsigned = pushed(&lineage, "dsh/unsigned:v1");
    let signed = pushed(&trace, "dsh/trace:v1");
    let absent = format!(
        "oci://{}/dsh/absent@sha256:{}",
        registry.host(),
        "ab".repeat(32)
    );
    let mut text = requiring(&author);
    for source in [&unsigned, &signed, &absent] {
        text.push_str(&format!("\n[[contributor]]\nsource = {source:?}\n"));
    }
    let manifest = f.write("m.toml", &text);
    let (m, home) = (manifest.to_str().unwrap(), f.home());

    let output = pull(&f, m, &home, &[]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        stdout(&output).contains("1 of 3 artifacts in the store (1 pulled"),
        "{}",
        stdout(&output)
    );
    for needle in [
        &format!("[1/3] not in the store: {unsigned}"),
        "is not signed",
        &format!("[3/3] not in the store: {absent}: unknown manifest digest"),
        &format!("2 of 3 artifacts pinned by {m} are not in the store: {unsigned}, {absent}"),
    ] {
        assert!(err.contains(needle), "`{needle}` not in: {err}");
    }
    assert!(!err.contains(&signed), "{err}");
    let stored = stored_blobs(&f);
    assert_eq!(stored.len(), 3, "only the signed artifact: {stored:?}");
    assert!(stored.contains(&sha256_of(CALL_TRACE)), "{stored:?}");
    assert!(!stored.contains(&sha256_of(AGENT_LINEAGE)), "{stored:?}");
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), text);

    // A manifest that does not parse is a configuration error: exit 2.
    let broken = f.write(
        "broken.toml",
        "[[contributor]]\nsource = \"oci://x/y:v1\"\n",
    );
    let output = pull(&f, broken.to_str().unwrap(), &home, &[]);
    assert_config_error(&output, &["broken.toml", "not pinned by digest"]);
}

/// `f.command(args, env)` with `input` on its stdin.
fn run_with_stdin(f: &Fixture, args: &[&str], env: &[(&str, &str)], input: &str) -> Output {
    output_within(
        f.command(args, env),
        Stdio::piped(),
        Some(input.as_bytes().to_vec()),
    )
}

#[test]
fn login_lets_push_add_and_pull_through_a_registry_with_htpasswd_auth_and_never_shows_the_password()
{
    use base64::Engine as _;
    const PASSWORD: &str = "s3cret-Pa55word";
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start_with_login("fleet", PASSWORD);
    let host = registry.host();
    let docker = f.path("docker").display().to_string();
    let env = [("DOCKER_CONFIG", docker.as_str())];
    let config = f.path("docker/config.json");
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("fleet:{PASSWORD}"));
    let mut outputs = Vec::new();
    let mut keep = |output: Output| {
        outputs.push(format!("{}{}", stdout(&output), stderr(&output)));
        output
    };
    let lineage = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    let target = format!("{host}/dsh/private:v1");
    let push = |env: &[(&str, &str)]| f.run(&["push", lineage.to_str().unwrap(), &target], env);

    // No credentials: refused, naming the registry and what to run.
    let output = keep(push(&env));
    assert_config_error(
        &output,
        &[
            &host,
            "asks for credentials",
            &format!("`dsh-env login {host}`"),
        ],
    );
    // A wrong password is named plainly, and nothing is stored.
    let login = [
        "login",
        host.as_str(),
        "--username",
        "fleet",
        "--password-stdin",
    ];
    let output = keep(run_with_stdin(&f, &login, &env, "not-it\n"));
    assert_config_error(
        &output,
        &[
            &host,
            "refused the username `fleet`",
            "wrong username or password",
        ],
    );
    assert!(!config.exists());
    // A password past the cap is refused before any request, naming it.
    let output = keep(run_with_stdin(&f, &login, &env, &"x".repeat(4097)));
    assert_config_error(
        &output,
        &["the password on stdin is over the 4096-byte limit"],
    );
    assert!(!config.exists());

    let output = keep(run_with_stdin(&f, &login, &env, &format!("{PASSWORD}\n")));
    assert!(output.status.success(), "{}", stderr(&output));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&config).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(stored["auths"][&host]["auth"], encoded.as_str());

    // Push, add and pull with the stored login.
    let output = keep(push(&env));
    assert!(output.status.success(), "{}", stderr(&output));
    let manifest = f.write("m.toml", "");
    let m = manifest.to_str().unwrap();
    let tagged = format!("oci://{target}");
    let output = keep(f.run(
        &["add", &tagged, "--manifest", m, "--home", "author", "--yes"],
        &env,
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let pull =
        |home: &str, env: &[(&str, &str)]| f.run(&["pull", "--manifest", m, "--home", home], env);
    let output = keep(pull("worker", &env));
    assert!(output.status.success(), "{}", stderr(&output));

    // A stale password in the file: the pull names the refusal.
    let wrong = base64::engine::general_purpose::STANDARD.encode("fleet:old-password");
    std::fs::write(
        &config,
        format!(r#"{{"auths": {{"{host}": {{"auth": "{wrong}"}}}}}}"#),
    )
    .unwrap();
    let output = keep(pull("worker-2", &env));
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("wrong username or password"),
        "{}",
        stderr(&output)
    );

    // $REGISTRY_AUTH_FILE comes first; its credHelpers entry runs
    // docker-credential-<name> (the registry on its stdin).
    let bin = f.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let helper = bin.join("docker-credential-fleet-test");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\nread server\n[ \"$1\" = get ] && [ \"$server\" = '{host}' ] || exit 1\nprintf '{{\"Username\":\"fleet\",\"Secret\":\"{PASSWORD}\"}}'\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let auth_file = f.write(
        "auth.json",
        &format!(r#"{{"credHelpers": {{"{host}": "fleet-test"}}}}"#),
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let helped = [
        ("DOCKER_CONFIG", docker.as_str()),
        ("REGISTRY_AUTH_FILE", auth_file.to_str().unwrap()),
        ("PATH", path.as_str()),
    ];
    let output = keep(pull("worker-3", &helped));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("(1 pulled, 0 already there)"),
        "{}",
        stdout(&output)
    );

    for text in &outputs {
        assert!(!text.contains(PASSWORD), "the password shown: {text}");
        assert!(!text.contains(&encoded), "the credential shown: {text}");
    }
}

#[test]
fn add_and_push_meet_the_network_deadline_and_quote_little_of_a_flood() {
    use dsh_env_test_registry::{Body, HostileServer, Reply};
    let server = HostileServer::start(|request| {
        match (request.method.as_str(), request.path()) {
            ("GET", "/v2/") => Reply::status(200),
            // A manifest, one byte a second.
            ("GET", _) => Reply::new(200, Body::Trickle(br#"{"schemaVersion":2}"#.to_vec())),
            ("HEAD", _) => Reply::status(404),
            ("POST", path) if path.starts_with("/v2/dsh/slow/") => {
                Reply::new(500, Body::Trickle(b"slow".to_vec()))
            }
            _ => Reply::new(500, Body::Sized(32 << 20)),
        }
    });
    let f = Fixture::new();
    let (m, home) = (f.path("m.toml"), f.home());
    let reference = format!("oci://{}/dsh/slow:v1", server.host());
    let add = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["add", &reference, "--manifest", m.to_str().unwrap()];
        args.extend(["--home", &home, "--yes"]);
        args.extend(extra);
        f.run(&args, env)
    };
    let output = add(&["--network-timeout-secs", "2"], &[]);
    assert_config_error(&output, &[&reference, "network deadline of 2 s"]);
    assert!(!m.exists());
    assert_eq!(stored_blobs(&f), Vec::<String>::new());

    let component = Path::new(AGENT_LINEAGE);
    let slow = format!("{}/dsh/slow:v1", server.host());
    let output = f.run(
        &["push", AGENT_LINEAGE, &slow],
        &[("DSH_ENV_NETWORK_TIMEOUT_SECS", "2")],
    );
    assert_config_error(&output, &["network deadline of 2 s"]);
    let flood = format!("{}/dsh/flood:v1", server.host());
    let output = push(&f, component, &flood, &[]);
    assert_config_error(&output, &["the registry answered 500 for the upload: `xxx"]);
    assert!(stderr(&output).len() < 600, "{}", stderr(&output));

    for (flag, env) in [("0", ""), ("", "soon")] {
        let output = match flag {
            "" => add(&[], &[("DSH_ENV_NETWORK_TIMEOUT_SECS", env)]),
            _ => add(&["--network-timeout-secs", flag], &[]),
        };
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("--network-timeout-secs"),
            "{}",
            stderr(&output)
        );
    }
}

/// The repository: the suite's installed tools live there.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `dsh-env new <tmp>/<name> --lang <lang>`, then `make <vars>` in it (with
/// this process's environment, for the toolchains); returns the project.
fn new_and_make(f: &Fixture, lang: &str, vars: &[String]) -> PathBuf {
    let name = format!("my-{lang}-tool");
    let project = f.path(&name);
    let project_arg = project.to_str().unwrap();
    let created = f.run(&["new", project_arg, "--lang", lang], &[]);
    assert!(created.status.success(), "{}", stderr(&created));
    assert!(
        stdout(&created).contains(&key_of(lang)),
        "{}",
        stdout(&created)
    );
    let made = Command::new("make")
        .arg("-C")
        .arg(&project)
        .arg(format!("DSH_ENV={BINARY}"))
        .args(vars)
        .output()
        .unwrap();
    succeeded(&format!("make in a new {lang} project"), &made);
    project
}

/// Asserts that `output`'s process succeeded, showing its output if not.
fn succeeded(what: &str, output: &Output) {
    let (out, err) = (stdout(output), stderr(output));
    assert!(output.status.success(), "{what} failed:\n{out}{err}");
}

/// The key the template for `lang` declares (named `my-<lang>-tool`).
fn key_of(lang: &str) -> String {
    format!("DSH_MY_{}_TOOL", lang.to_uppercase())
}

/// The project's component passes `check`, and its manifest resolves the
/// template's key to the call's tool.
fn assert_checks_and_resolves(f: &Fixture, lang: &str, project: &Path) {
    let home = f.home();
    let component = project.join("contributor.wasm");
    let check = ["check", component.to_str().unwrap(), "--home", &home];
    let checked = f.command(&check, &[]).output().unwrap();
    succeeded(&format!("check of the {lang} component"), &checked);
    assert!(
        stdout(&checked).contains(&key_of(lang)),
        "{}",
        stdout(&checked)
    );
    let resolved = resolve_project(f, project);
    succeeded(&format!("resolve with the {lang} contributor"), &resolved);
    let line = format!("{}=bash\n", key_of(lang));
    assert!(
        stdout(&resolved).contains(&line),
        "{lang}: {}",
        stdout(&resolved)
    );
}

#[test]
fn new_rust_and_c_projects_build_with_make_pass_check_and_resolve_their_key() {
    let f = Fixture::new();
    // The guest SDK as published would come from crates.io; offline, the
    // checkout's stands in for it, and the registry cache serves the rest.
    // A target folder of the suite's own keeps the second run quick.
    let sdk = repository().join("guest-sdk");
    let rust_target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("template-rust");
    let rust = new_and_make(
        &f,
        "rust",
        &[
            format!(
                "CARGO_FLAGS=--offline --config 'patch.crates-io.dsh-env-guest.path=\"{}\"'",
                sdk.display()
            ),
            format!("CARGO_TARGET_DIR={}", rust_target.display()),
        ],
    );
    assert_checks_and_resolves(&f, "rust", &rust);
    let size = std::fs::metadata(rust.join("contributor.wasm"))
        .unwrap()
        .len();
    assert!(
        size < 200_000,
        "the size profile is not applied: {size} bytes"
    );

    let c = new_and_make(&f, "c", &[]);
    assert!(c.join("gen/contributor_component_type.o").exists());
    assert_checks_and_resolves(&f, "c", &c);
}

#[test]
fn new_python_and_js_projects_build_with_the_pinned_toolchains() {
    let f = Fixture::new();
    let repo = repository();
    let tool = repo.join("target/tools/venv/bin/componentize-py");
    let modules = repo.join("contributors/call-context/node_modules");
    // Each keeps one core busy for tens of seconds: side by side.
    std::thread::scope(|scope| {
        let python = scope.spawn(|| {
            let vars = [format!("COMPONENTIZE_PY={}", tool.display())];
            let project = new_and_make(&f, "python", &vars);
            assert!(project.join("wit/contributor.wit").exists());
            assert_checks_and_resolves(&f, "python", &project);
        });
        let vars = [format!("NODE_MODULES={}", modules.display())];
        let project = new_and_make(&f, "js", &vars);
        assert_checks_and_resolves(&f, "js", &project);
        // What a JavaScript author gets wrong reaches them by name: an
        // `Error`'s message, and a result that is not a list of pairs.
        let failures = [
            (
                "(() => { throw new Error('no team configured'); })()",
                "no team configured",
            ),
            (
                "({ DSH_MY_JS_TOOL: execution.tool })",
                "resolve returned an object, not a list of [key, value] pairs",
            ),
            (
                "[[KEY, execution.tool.length]]",
                "resolve's value for DSH_MY_JS_TOOL is a number, not a string",
            ),
        ];
        for (result, message) in failures {
            assert_resolve_fails_after_edit(
                &f,
                &project,
                "[[KEY, execution.tool]]",
                result,
                message,
            );
        }
        python.join().unwrap();
    });
}

/// `dsh-env resolve` with the project's manifest and the fixture's execution.
fn resolve_project(f: &Fixture, project: &Path) -> Output {
    let manifest = project.join("manifest.toml");
    let (execution, home) = (f.path("execution.json"), f.home());
    let resolve = [
        "resolve",
        "--manifest",
        manifest.to_str().unwrap(),
        "--home",
        &home,
        "--execution",
        execution.to_str().unwrap(),
    ];
    f.command(&resolve, &[]).output().unwrap()
}

/// Replaces `from` with `to` in the project's `contributor.js`, remakes it,
/// and checks `resolve` then fails with `message`.
fn assert_resolve_fails_after_edit(
    f: &Fixture,
    project: &Path,
    from: &str,
    to: &str,
    message: &str,
) {
    let source = project.join("contributor.js");
    let text = std::fs::read_to_string(&source).unwrap();
    assert!(text.contains(from), "{from} is not in {text}");
    std::fs::write(&source, text.replacen(from, to, 1)).unwrap();
    let made = Command::new("make")
        .arg("-C")
        .arg(project)
        .output()
        .unwrap();
    succeeded(&format!("make after `{to}`"), &made);
    std::fs::write(&source, text).unwrap();
    let out = resolve_project(f, project);
    assert!(!out.status.success(), "`{to}` resolved: {}", stdout(&out));
    assert!(stderr(&out).contains(message), "`{to}`: {}", stderr(&out));
}

#[test]
fn new_refuses_a_non_empty_directory_and_a_bad_name_saying_why() {
    let f = Fixture::new();
    let taken = f.path("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("notes.txt"), "mine").unwrap();
    let out = f.run(&["new", taken.to_str().unwrap(), "--lang", "c"], &[]);
    assert_config_error(&out, &["taken exists and is not empty"]);
    assert_eq!(std::fs::read_dir(&taken).unwrap().count(), 1);

    let out = f.run(
        &["new", f.path("My_Tool").to_str().unwrap(), "--lang", "rust"],
        &[],
    );
    assert_config_error(
        &out,
        &["`My_Tool` cannot name a contributor", "'M'", "--name"],
    );
    let out = f.run(
        &[
            "new",
            f.path("x").to_str().unwrap(),
            "--lang",
            "js",
            "--name",
            "session-id",
        ],
        &[],
    );
    assert_config_error(&out, &["DSH_SESSION_ID, is reserved"]);
    assert!(!f.path("x").exists());

    // An empty directory is fine, and --name wins over its name.
    let empty = f.path("Empty Dir");
    std::fs::create_dir(&empty).unwrap();
    let out = f.run(
        &[
            "new",
            empty.to_str().unwrap(),
            "--lang",
            "python",
            "--name",
            "greeter",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let app = std::fs::read_to_string(empty.join("app.py")).unwrap();
    assert!(
        app.contains("\"greeter\"") && app.contains("DSH_GREETER"),
        "{app}"
    );
    assert!(empty.join(".gitignore").exists() && empty.join("README.md").exists());
}

#[test]
fn bindgen_and_componentize_name_what_is_wrong() {
    let f = Fixture::new();
    let gen_dir = f.path("gen");
    let out = f.run(&["bindgen", "c", gen_dir.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    for file in [
        "contributor.h",
        "contributor.c",
        "contributor_component_type.o",
    ] {
        assert!(stdout(&out).contains(file), "{}", stdout(&out));
        assert!(gen_dir.join(file).exists(), "{file}");
    }

    let componentize = |input: &Path, output: &str| {
        let output = f.path(output);
        let out = f.run(
            &[
                "componentize",
                input.to_str().unwrap(),
                "-o",
                output.to_str().unwrap(),
            ],
            &[],
        );
        (out, output)
    };
    let text = f.write("notes.txt", "not wasm");
    let (out, written) = componentize(&text, "a.wasm");
    assert_one_line_error(&out, 1, &["notes.txt", "not a WebAssembly module"]);
    assert!(!written.exists());

    let (out, _) = componentize(Path::new(AGENT_LINEAGE), "b.wasm");
    assert_one_line_error(&out, 1, &["already a component"]);

    // An empty core module: the world is embedded, but nothing exports it.
    let empty = f.path("empty.wasm");
    std::fs::write(&empty, b"\0asm\x01\0\0\0").unwrap();
    let (out, written) = componentize(&empty, "c.wasm");
    assert_one_line_error(
        &out,
        1,
        &[
            "empty.wasm",
            "does not fit the world `dsh:env/contributor@0.1.0`",
            "declare",
        ],
    );
    assert!(!written.exists());

    let (out, _) = componentize(&f.path("missing.wasm"), "d.wasm");
    assert_config_error(&out, &["cannot read module", "missing.wasm"]);
}

/// The fields of `/proc/<pid>/stat` after the command name, from the
/// state (field 3) on, or none once the process is gone.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    Some(rest.split(' ').map(str::to_string).collect())
}

/// The processes whose parent is `parent`, with their command lines.
fn children_of(parent: u32) -> Vec<(u32, String)> {
    let entries = std::fs::read_dir("/proc").unwrap().flatten();
    let pids = entries.filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
    pids.filter(|pid| stat_fields(*pid).is_some_and(|f| f[1] == parent.to_string()))
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            (pid, String::from_utf8_lossy(&cmdline).replace('\0', " "))
        })
        .collect()
}

/// `serve` on a cold cache answers with Winch's code, and compiles
/// Cranelift's in a helper at the lowest CPU priority; a `serve` killed
/// meanwhile takes that helper with it, instead of leaving a compiler
/// running for its whole CPU limit.
#[test]
fn serve_tiers_up_in_a_low_priority_helper_that_dies_with_it() {
    let f = Fixture::new();
    let manifest = f.write(
        "python.toml",
        &format!("[[contributor]]\npath = {SESSION_URL:?}\n"),
    );
    let args = ["serve", "--manifest", manifest.to_str().unwrap()];
    let mut serve = f.command(&[&args[..], &["--home", &f.home()]].concat(), &[]);
    let mut serve = serve
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let helper = loop {
        let children = children_of(serve.id());
        if let Some((pid, _)) = children.iter().find(|(_, cmd)| cmd.contains("--nice 19")) {
            break *pid;
        }
        if started.elapsed() > Duration::from_secs(300) {
            let _ = serve.kill();
            panic!("no tier-up helper; children: {children:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Compiling, not still reading the component (which a dying parent
    // would cut short): it has used a second of CPU (fields 14 and 15, in
    // clock ticks of 10 ms).
    let cpu_ticks = |fields: &[String]| -> u64 {
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    while stat_fields(helper).is_some_and(|f| cpu_ticks(&f) < 100) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its niceness (field 19), set before it compiles, is the lowest.
    let niceness = stat_fields(helper).map(|f| f[16].clone());
    assert_eq!(niceness.as_deref(), Some("19"), "the helper ended early?");
    serve.kill().unwrap();
    serve.wait().unwrap();
    let killed = std::time::Instant::now();
    // Gone, or a zombie that its new parent has not reaped yet.
    while stat_fields(helper).is_some_and(|f| f[0] != "Z") {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the tier-up helper outlived serve"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `list` on a cold cache compiles with Winch only; `--optimize` compiles
/// Cranelift's code, filed beside it; neither compiles again after.
#[test]
fn list_compiles_the_baseline_unless_told_to_optimize() {
    let f = Fixture::new();
    let manifest = f.path("manifest.toml").display().to_string();
    let home = f.home();
    let engines = || -> Vec<String> {
        let output = f.run(&["cache", "list", "--json", "--home", &home], &[]);
        let entries = json(&output)["entries"].as_array().unwrap().clone();
        let mut engines: Vec<String> = (entries.iter())
            .filter(|e| e["artifact"] == true)
            .map(|e| e["engine"].as_str().unwrap().to_string())
            .collect();
        engines.sort();
        engines.dedup();
        engines
    };
    let list = |extra: &[&str]| {
        let args = [
            &["list", "--manifest", &manifest, "--home", &home][..],
            extra,
        ]
        .concat();
        let output = f.run(&args, &[]);
        assert!(output.status.success(), "{}", stderr(&output));
    };
    list(&[]);
    let baseline = engines();
    assert_eq!(baseline.len(), 1, "{baseline:?}");
    list(&[]);
    assert_eq!(engines(), baseline);
    list(&["--optimize"]);
    let both = engines();
    assert_eq!(both.len(), 2, "{both:?}");
    list(&[]);
    assert_eq!(engines(), both);
}

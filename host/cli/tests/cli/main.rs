//! Black-box tests of the `dsh-env` binary: every subcommand, real
//! components, real processes. One binary (each links wasmtime), a module
//! per command; the fixture and the helpers several modules share live here.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use dsh_env_artifacts::minisign::SigningKey;
use dsh_env_artifacts::{
    AGENT_LINEAGE, CALL_CONTEXT, CALL_TRACE, GIT_CONTEXT, PUPPET, SESSION_URL, WORKSPACE_ID,
};

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

    /// A directory `repo` that looks like a git checkout on `branch`.
    fn git_repo(&self, branch: &str) -> PathBuf {
        let repo = self.path("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::write(
            repo.join(".git/HEAD"),
            format!("ref: refs/heads/{branch}\n"),
        )
        .unwrap();
        repo
    }

    /// `in-repo.json`: a bash call whose agent's session works in `cwd`.
    fn execution_in(&self, cwd: &Path) -> PathBuf {
        self.write(
            "in-repo.json",
            &serde_json::json!({"callId": "c1", "name": "bash", "arguments": {"command": "x"},
                "agent": {"session": {"header": {"version": 1, "id": "s1", "createdAt": 0,
                    "cwd": cwd}}}})
            .to_string(),
        )
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
fn output_within(command: Command, stdin: Stdio, input: Option<Vec<u8>>) -> Output {
    output_bounded(command, stdin, input, BOUND)
}

/// [`output_within`] with another bound than [`BOUND`] (for a binary under
/// emulation: a hang guard, not a measure).
fn output_bounded(
    mut command: Command,
    stdin: Stdio,
    input: Option<Vec<u8>>,
    bound: Duration,
) -> Output {
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
    match receiver.recv_timeout(bound) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid; it reads no memory.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{command:?} did not finish within {bound:?}");
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

/// One JSON-RPC request.
fn rpc(
    id: impl Into<serde_json::Value>,
    method: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id.into(), "method": method, "params": params})
}

/// A copy of the component `from`, at `name` in the fixture.
fn component_copy(f: &Fixture, from: &str, name: &str) -> PathBuf {
    let path = f.path(name);
    std::fs::copy(from, &path).unwrap();
    path
}

/// The SHA-256 of the file at `path`, in lowercase hex.
fn sha256_of(path: &str) -> String {
    dsh_env_support::digest::sha256_hex(&std::fs::read(path).unwrap())
}

/// `dsh-env push <file> <target>` (plus `extra`), run in `f`.
fn push(f: &Fixture, file: &Path, target: &str, extra: &[&str]) -> Output {
    let mut args = vec!["push", file.to_str().unwrap(), target];
    args.extend(extra);
    f.run(&args, &[])
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

/// `dsh-env pull --manifest <m> --home <home>` (plus `extra`), run in `f`.
fn pull(f: &Fixture, m: &str, home: &str, extra: &[&str]) -> Output {
    let mut args = vec!["pull", "--manifest", m, "--home", home];
    args.extend(extra);
    f.run(&args, &[])
}

/// The repository: the suite's installed tools live there.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A hooks.json whose `PreToolUse` hook runs `pre` and whose `PostToolUse`
/// hook runs `post`, both Bash-only.
fn hooks_json(pre: &str, post: &str) -> String {
    serde_json::json!({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": pre}]}],
        "PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": post}]}],
    }})
    .to_string()
}

/// Asserts that `output`'s process succeeded, showing its output if not.
fn succeeded(what: &str, output: &Output) {
    let (out, err) = (stdout(output), stderr(output));
    assert!(output.status.success(), "{what} failed:\n{out}{err}");
}

mod add;
mod archive;
mod cache;
mod check;
mod completions;
mod demo;
mod doors;
mod explain;
mod harness;
mod interface;
mod interop;
mod list;
mod login;
mod manifests;
mod new;
mod pull;
mod push;
mod resolve;
mod run;
mod serve;
mod store;
mod targets;
mod traces;
mod trust;

//! The local executor: spawns a shell command with exactly the promised
//! environment, and never touches the process-global one.
//!
//! The child's environment is built in this order, later entries winning:
//! 1. the inherited environment, minus every `DSH_*` name (case-insensitive)
//!    and minus credential-shaped names;
//! 2. the terminal settings for model-driven shells ([`TERMINAL_SETTINGS`]);
//! 3. the caller's ordinary `env` (no `DSH_*` name allowed);
//! 4. the overlay.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::key::is_managed_name;
use crate::overlay::Overlay;

/// Settings that keep model-driven shells plain: no colour, no pager.
pub const TERMINAL_SETTINGS: [(&str, &str); 4] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// Words that make an inherited name credential-shaped.
const CREDENTIAL_WORDS: [&str; 4] = ["KEY", "PASSWORD", "SECRET", "TOKEN"];

/// Default cap on captured bytes, per stream.
pub const DEFAULT_OUTPUT_CAP: usize = 1 << 20;

/// Why an inherited variable was kept out of the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScrubReason {
    /// In the managed `DSH_*` namespace: only the overlay may set it.
    ManagedNamespace,
    /// Looks like a credential (`KEY`, `PASSWORD`, `SECRET` or `TOKEN`).
    CredentialShaped,
}

impl std::fmt::Display for ScrubReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ScrubReason::ManagedNamespace => "managed DSH_* namespace: only the overlay sets it",
            ScrubReason::CredentialShaped => "credential-shaped name",
        })
    }
}

/// Whether an inherited variable is scrubbed, and why.
pub fn scrub_reason(name: &str) -> Option<ScrubReason> {
    if is_managed_name(name) {
        return Some(ScrubReason::ManagedNamespace);
    }
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_WORDS
        .iter()
        .any(|word| upper.contains(word))
        .then_some(ScrubReason::CredentialShaped)
}

/// One shell command to run.
#[derive(Debug, Clone)]
pub struct ShellExecRequest {
    /// The command, run as `bash -c <command>`.
    pub command: String,
    /// The working directory.
    pub workdir: PathBuf,
    /// Foreground: kill the process group after this long. Background: the
    /// same bound applies to the background task.
    pub timeout: Duration,
    /// Bytes for the child's stdin; `None` gives it no stdin.
    pub stdin: Option<Vec<u8>>,
    /// The caller's ordinary variables; may hold no `DSH_*` name.
    pub env: BTreeMap<String, String>,
    /// The managed overlay, applied last.
    pub dsh_env: Overlay,
    /// Bytes kept per output stream.
    pub output_cap: usize,
}

impl ShellExecRequest {
    /// A request for `command` in `workdir` with `dsh_env`, no stdin, no
    /// extra env, a 2-minute timeout and the default output cap.
    pub fn new(command: impl Into<String>, workdir: impl Into<PathBuf>, dsh_env: Overlay) -> Self {
        ShellExecRequest {
            command: command.into(),
            workdir: workdir.into(),
            timeout: Duration::from_secs(120),
            stdin: None,
            env: BTreeMap::new(),
            dsh_env,
            output_cap: DEFAULT_OUTPUT_CAP,
        }
    }
}

/// Why a command could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The ordinary `env` held a managed name.
    #[error("env variable `{0}` is in the managed DSH_* namespace; only the overlay may set it")]
    ManagedNameInEnv(String),
    /// An `env` name that cannot be a variable name.
    #[error("env variable name `{0}` is invalid (empty, or holds `=` or NUL)")]
    InvalidName(String),
    /// An `env` value with a NUL byte.
    #[error("env variable `{0}` has a NUL byte in its value")]
    NulInValue(String),
    /// The shell could not be started.
    #[error("cannot start bash in {workdir}: {source}")]
    Spawn {
        /// The requested working directory.
        workdir: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Waiting for the command failed.
    #[error("while running the command: {0}")]
    Io(#[from] std::io::Error),
    /// A background task ended abnormally.
    #[error("background task failed: {0}")]
    Background(String),
}

/// What a finished command left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit code; `None` when killed by a signal.
    pub exit_code: Option<i32>,
    /// Captured stdout, up to the cap.
    pub stdout: Vec<u8>,
    /// Captured stderr, up to the cap.
    pub stderr: Vec<u8>,
    /// Whether stdout or stderr went over the cap and was cut.
    pub truncated: bool,
    /// Whether the timeout killed the process group.
    pub timed_out: bool,
}

/// The child's environment, in spawn order. `inherited` is normally
/// `std::env::vars_os()`; names that are not UTF-8 are scrubbed.
pub fn child_environment(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    env: &BTreeMap<String, String>,
    dsh_env: &Overlay,
) -> Result<BTreeMap<OsString, OsString>, ExecError> {
    for (name, value) in env {
        if is_managed_name(name) {
            return Err(ExecError::ManagedNameInEnv(name.clone()));
        }
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(ExecError::InvalidName(name.clone()));
        }
        if value.contains('\0') {
            return Err(ExecError::NulInValue(name.clone()));
        }
    }
    let mut child: BTreeMap<OsString, OsString> = inherited
        .into_iter()
        .filter(|(name, _)| name.to_str().is_some_and(|n| scrub_reason(n).is_none()))
        .collect();
    child.extend(TERMINAL_SETTINGS.iter().map(|(k, v)| (k.into(), v.into())));
    child.extend(env.iter().map(|(k, v)| (k.into(), v.into())));
    child.extend(dsh_env.iter().map(|(k, v)| (k.as_str().into(), v.into())));
    Ok(child)
}

/// A command running in the background.
#[derive(Debug)]
pub struct BackgroundHandle {
    /// The process id (also its process group id), if a process was spawned.
    pub pid: Option<u32>,
    task: JoinHandle<Result<ExecOutput, ExecError>>,
}

impl BackgroundHandle {
    /// A handle for work already running in `task`.
    pub fn new(pid: Option<u32>, task: JoinHandle<Result<ExecOutput, ExecError>>) -> Self {
        BackgroundHandle { pid, task }
    }

    /// Waits for the command to finish.
    pub async fn wait(self) -> Result<ExecOutput, ExecError> {
        self.task
            .await
            .map_err(|e| ExecError::Background(e.to_string()))?
    }
}

/// Spawns commands on this machine.
#[derive(Debug, Clone, Default)]
pub struct LocalExecutor;

impl LocalExecutor {
    /// Runs `request` in the foreground and waits for it.
    pub async fn run(&self, request: ShellExecRequest) -> Result<ExecOutput, ExecError> {
        let (child, stdin) = spawn(&request)?;
        finish(child, stdin, request.timeout, request.output_cap).await
    }

    /// Starts `request` in the background and returns at once.
    pub fn spawn_background(
        &self,
        request: ShellExecRequest,
    ) -> Result<BackgroundHandle, ExecError> {
        let (child, stdin) = spawn(&request)?;
        let pid = child.id();
        let task = tokio::spawn(finish(child, stdin, request.timeout, request.output_cap));
        Ok(BackgroundHandle::new(pid, task))
    }
}

fn spawn(request: &ShellExecRequest) -> Result<(Child, Option<Vec<u8>>), ExecError> {
    let environment = child_environment(std::env::vars_os(), &request.env, &request.dsh_env)?;
    let mut command = Command::new(shell_program(&environment, &request.workdir));
    command
        .arg("-c")
        .arg(&request.command)
        .current_dir(&request.workdir)
        .env_clear()
        .envs(environment)
        .stdin(if request.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout can kill everything it started.
        .process_group(0)
        .kill_on_drop(true);
    let child = command.spawn().map_err(|source| ExecError::Spawn {
        workdir: request.workdir.display().to_string(),
        source,
    })?;
    Ok((child, request.stdin.clone()))
}

/// `bash` as the child's own `PATH` finds it (relative entries from its
/// workdir), or plain `bash` when none does. Naming the program by path lets
/// std spawn it with `posix_spawn`: for a bare name under a changed `PATH` it
/// falls back to `fork`, which copies this process's address-space map
/// (large, with the engine's pool) and cost about 3.5 ms per call here.
fn shell_program(environment: &BTreeMap<OsString, OsString>, workdir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    environment
        .get(OsStr::new("PATH"))
        .and_then(|path| {
            std::env::split_paths(path)
                .map(|dir| workdir.join(dir).join("bash"))
                .find(|candidate| executable(candidate))
        })
        .unwrap_or_else(|| PathBuf::from("bash"))
}

/// How long to keep reading output after the shell exits, in case a process
/// it left behind still holds the pipes open.
const OUTPUT_GRACE: Duration = Duration::from_millis(200);

async fn finish(
    mut child: Child,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
    cap: usize,
) -> Result<ExecOutput, ExecError> {
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        tokio::spawn(async move {
            // A command that ignores its stdin closes the pipe early; that is fine.
            let _ = pipe.write_all(&bytes).await;
        });
    }
    let stdout = Capture::start(child.stdout.take(), cap);
    let stderr = Capture::start(child.stderr.take(), cap);
    let (status, timed_out) = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => (status?, false),
        Err(_) => {
            kill_group(&child);
            (child.wait().await?, true)
        }
    };
    let (stdout, stdout_cut) = stdout.finish().await;
    let (stderr, stderr_cut) = stderr.finish().await;
    Ok(ExecOutput {
        exit_code: status.code(),
        stdout,
        stderr,
        truncated: stdout_cut || stderr_cut,
        timed_out,
    })
}

fn kill_group(child: &Child) {
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        // SAFETY: kill(2) with a negative pid signals that process group; it
        // reads no memory of ours.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

/// Reads one output stream into a capped buffer.
struct Capture {
    buffer: Arc<Mutex<(Vec<u8>, bool)>>,
    task: Option<JoinHandle<()>>,
}

impl Capture {
    fn start(stream: Option<impl AsyncRead + Unpin + Send + 'static>, cap: usize) -> Self {
        let buffer = Arc::new(Mutex::new((Vec::new(), false)));
        let task = stream.map(|mut stream| {
            let buffer = buffer.clone();
            tokio::spawn(async move {
                let mut chunk = [0u8; 8192];
                while let Ok(n @ 1..) = stream.read(&mut chunk).await {
                    let mut guard = buffer.lock().unwrap_or_else(|p| p.into_inner());
                    let (bytes, cut) = &mut *guard;
                    let room = cap.saturating_sub(bytes.len());
                    bytes.extend_from_slice(&chunk[..n.min(room)]);
                    *cut |= n > room;
                }
            })
        });
        Capture { buffer, task }
    }

    async fn finish(mut self) -> (Vec<u8>, bool) {
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(OUTPUT_GRACE, task).await.is_err() {
                abort.abort();
            }
        }
        let mut guard = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *guard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn scrub_reasons() {
        assert_eq!(
            scrub_reason("DSH_STALE"),
            Some(ScrubReason::ManagedNamespace)
        );
        assert_eq!(
            scrub_reason("dsh_lower"),
            Some(ScrubReason::ManagedNamespace)
        );
        for name in [
            "MY_API_TOKEN",
            "aws_secret_access_key",
            "DB_PASSWORD",
            "SSH_KEY_PATH",
        ] {
            assert_eq!(
                scrub_reason(name),
                Some(ScrubReason::CredentialShaped),
                "{name}"
            );
        }
        assert_eq!(scrub_reason("PATH"), None);
    }

    #[test]
    fn environment_order_is_inherited_terminal_env_overlay() {
        let inherited = vars(&[
            ("PATH", "/bin"),
            ("TERM", "xterm"),
            ("DSH_OLD", "x"),
            ("GH_TOKEN", "t"),
        ]);
        let env = BTreeMap::from([
            ("PAGER".to_string(), "less".to_string()),
            ("GH_TOKEN".to_string(), "explicit".to_string()),
        ]);
        let built = child_environment(inherited, &env, &Overlay::default()).unwrap();
        let get = |k: &str| built.get(&OsString::from(k)).map(|v| v.to_str().unwrap());
        assert_eq!(get("PATH"), Some("/bin"));
        assert_eq!(
            get("TERM"),
            Some("dumb"),
            "terminal settings beat inherited"
        );
        assert_eq!(
            get("PAGER"),
            Some("less"),
            "the caller's env beats terminal settings"
        );
        assert_eq!(
            get("GH_TOKEN"),
            Some("explicit"),
            "a deliberately passed credential survives"
        );
        assert_eq!(get("DSH_OLD"), None);
    }

    #[test]
    fn managed_or_malformed_env_is_refused() {
        let refuse = |name: &str, value: &str| {
            let env = BTreeMap::from([(name.to_string(), value.to_string())]);
            child_environment(vars(&[]), &env, &Overlay::default())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refuse("DSH_X", "1"),
            "env variable `DSH_X` is in the managed DSH_* namespace; only the overlay may set it"
        );
        assert!(refuse("dsh_x", "1").contains("`dsh_x` is in the managed"));
        assert!(refuse("A=B", "1").contains("invalid"));
        assert!(refuse("A", "x\0y").contains("NUL"));
    }
}

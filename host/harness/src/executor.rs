//! The local executor: spawns a shell command with exactly the promised
//! environment ([`dsh_env::child_environment`]), and never
//! touches the process-global one.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_env::Overlay;
use dsh_env::{EnvError, EnvironmentPolicy, child_environment};
use dsh_env_support::input::is_executable;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// Default cap on captured bytes, per stream.
pub const DEFAULT_OUTPUT_CAP: usize = 1 << 20;

/// The longest timeout a caller may give a command (`serve`'s and the Node
/// addon's `exec`, `run --timeout-secs`, a hook's `timeout`): a day.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// The unit a timeout is given in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutUnit {
    /// Whole seconds.
    Seconds,
    /// Whole milliseconds.
    Milliseconds,
}

impl TimeoutUnit {
    fn of(self, n: u64) -> Duration {
        match self {
            TimeoutUnit::Seconds => Duration::from_secs(n),
            TimeoutUnit::Milliseconds => Duration::from_millis(n),
        }
    }

    fn max(self) -> u64 {
        match self {
            TimeoutUnit::Seconds => MAX_TIMEOUT.as_secs(),
            TimeoutUnit::Milliseconds => MAX_TIMEOUT.as_secs() * 1000,
        }
    }
}

/// A timeout given as a number that is not a whole number of its unit from
/// 1 to [`MAX_TIMEOUT`]: negative, NaN, fractional, 0 or too large.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeoutError {
    /// The option, as its caller names it (`timeout_ms`, `timeoutMs`).
    pub option: String,
    /// Its unit.
    pub unit: TimeoutUnit,
    /// The number given, as written.
    pub value: String,
}

impl std::fmt::Display for TimeoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.unit {
            TimeoutUnit::Seconds => "seconds",
            TimeoutUnit::Milliseconds => "milliseconds",
        };
        write!(
            f,
            "{} must be a whole number of {unit} from 1 to {}, not {}",
            self.option,
            self.unit.max(),
            self.value
        )
    }
}

impl std::error::Error for TimeoutError {}

/// The timeout `value` (in `unit`s) given for `option`, checked: a whole
/// number from 1 to [`MAX_TIMEOUT`]. `shown` is the number as the caller
/// wrote it, for the error.
pub fn checked_timeout(
    option: &str,
    value: f64,
    shown: impl std::fmt::Display,
    unit: TimeoutUnit,
) -> Result<Duration, TimeoutError> {
    if value.fract() == 0.0 && (1.0..=unit.max() as f64).contains(&value) {
        return Ok(unit.of(value as u64));
    }
    Err(TimeoutError {
        option: option.to_string(),
        unit,
        value: shown.to_string(),
    })
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
    /// What the child inherits: the harness's policy, then the scrub.
    pub environment: EnvironmentPolicy,
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
            environment: EnvironmentPolicy::default(),
        }
    }

    /// [`ShellExecRequest::new`] for the call `execution`: in its agent's
    /// cwd; when the call has none, in `default_workdir`, else in this
    /// process's.
    pub fn for_execution(
        command: impl Into<String>,
        execution: &dsh_env::ToolExecution,
        dsh_env: Overlay,
        default_workdir: Option<PathBuf>,
    ) -> std::io::Result<Self> {
        let agent_cwd = execution.agent.as_ref().and_then(|a| a.cwd.as_ref());
        let workdir = match (agent_cwd, default_workdir) {
            (Some(cwd), _) => PathBuf::from(cwd),
            (None, Some(dir)) => dir,
            (None, None) => std::env::current_dir()?,
        };
        Ok(Self::new(command, workdir, dsh_env))
    }
}

/// Why a command could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The caller's ordinary `env` cannot be given to a child.
    #[error(transparent)]
    Env(#[from] EnvError),
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
/// An [`ExecOutput`] as a harness reports it over JSON: the output as text
/// (invalid UTF-8 replaced), field names in snake_case.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExecReport {
    /// Exit code; `None` when killed by a signal.
    pub exit_code: Option<i32>,
    /// Captured stdout, up to the cap.
    pub stdout: String,
    /// Captured stderr, up to the cap.
    pub stderr: String,
    /// Whether the timeout killed the process group.
    pub timed_out: bool,
    /// Whether stdout or stderr went over the cap and was cut.
    pub truncated: bool,
}

impl From<ExecOutput> for ExecReport {
    fn from(output: ExecOutput) -> Self {
        ExecReport {
            exit_code: output.exit_code,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            timed_out: output.timed_out,
            truncated: output.truncated,
        }
    }
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

/// Runs requests; [`LocalExecutor`] spawns them, a test may record them.
/// The bash tool, hooks and the agent loop are generic over it.
pub trait ShellExecutor: Send + Sync {
    /// Runs a foreground request to completion.
    fn run(
        &self,
        request: ShellExecRequest,
    ) -> impl Future<Output = Result<ExecOutput, ExecError>> + Send;
    /// Starts a background request.
    fn spawn_background(&self, request: ShellExecRequest) -> Result<BackgroundHandle, ExecError>;
}

impl ShellExecutor for LocalExecutor {
    fn run(
        &self,
        request: ShellExecRequest,
    ) -> impl Future<Output = Result<ExecOutput, ExecError>> + Send {
        LocalExecutor::run(self, request)
    }

    fn spawn_background(&self, request: ShellExecRequest) -> Result<BackgroundHandle, ExecError> {
        LocalExecutor::spawn_background(self, request)
    }
}

/// `bash -c <command>` for `request`, in its workdir, with exactly the
/// promised environment; stdio, process group and `stdin` bytes are left to
/// the caller (`dsh-env run` hands the command its own terminal).
pub fn shell_command(request: &ShellExecRequest) -> Result<Command, ExecError> {
    let environment = child_environment(
        std::env::vars_os(),
        &request.env,
        &request.dsh_env,
        &request.environment,
    )?;
    let mut command = Command::new(shell_program(&environment, &request.workdir));
    command
        .arg("-c")
        .arg(&request.command)
        .current_dir(&request.workdir)
        .env_clear()
        .envs(environment);
    Ok(command)
}

fn spawn(request: &ShellExecRequest) -> Result<(Child, Option<Vec<u8>>), ExecError> {
    let mut command = shell_command(request)?;
    command
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
/// (large, with the engine's pool): milliseconds per call (BENCHMARKS.md).
fn shell_program(environment: &BTreeMap<OsString, OsString>, workdir: &Path) -> PathBuf {
    environment
        .get(OsStr::new("PATH"))
        .and_then(|path| {
            std::env::split_paths(path)
                .map(|dir| workdir.join(dir).join("bash"))
                .find(|candidate| is_executable(candidate))
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

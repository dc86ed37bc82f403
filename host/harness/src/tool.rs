//! The model-facing bash tool: the boundary where a model's arguments become
//! a [`BashRequest`]. Only `command`, `description`, `run_in_background`
//! and `timeout` are read; any `env`, `stdin` or other field a model sends is
//! ignored, so a model can neither set nor displace a `DSH_*` value.
//!
//! The call itself is the [`Host`]'s ([`Host::run_bash`]: one collect, the
//! hooks the tool has, the command, the next call's instances made beside
//! it); the tool only reads the model's arguments and runs the command
//! through its executor.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

// Re-exported here, where the bash tool first made it generic.
pub use crate::executor::ShellExecutor;
use crate::executor::{BackgroundHandle, ExecError, ExecOutput, ShellExecRequest};
use crate::hooks::Hooks;
use crate::host::{self, BashRequest, BashRunner, Host, HostError, HostErrorCode, Ran};
use dsh_env::{ContributorError, Registry};
use dsh_env::{Mode, ToolExecution};
use dsh_env_support::input::escape_controls;

/// The tool's name.
pub const BASH_TOOL_NAME: &str = "bash";

/// The tool's description: only the durable convention.
pub const BASH_TOOL_DESCRIPTION: &str = "Runs a bash command. Current harness facts are available to \
the command as $DSH_* environment variables; inspect them (for example with `env | grep ^DSH_`) when you need them.";

/// The longest timeout a model may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// The arguments the tool reads; everything else in the call is ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct BashArguments {
    /// The command line.
    pub command: String,
    /// What the command is for (shown to people, not run).
    #[serde(default)]
    pub description: Option<String>,
    /// Run in the background and return at once.
    #[serde(default)]
    pub run_in_background: bool,
    /// Timeout in milliseconds (capped at [`MAX_TIMEOUT`]).
    #[serde(default)]
    pub timeout: Option<u64>,
}

/// What a bash call produced.
#[derive(Debug)]
pub enum ShellRun {
    /// A foreground command finished.
    Finished(ExecOutput),
    /// A background command started.
    Started(BackgroundHandle),
}

/// Why a bash call did not run.
#[derive(Debug, thiserror::Error)]
pub enum BashToolError {
    /// The model's arguments are unusable.
    #[error("invalid bash arguments: {0}")]
    Arguments(#[from] serde_json::Error),
    /// A contributor failed, so the command was not run.
    #[error("the command was not run: {0}")]
    Collect(#[from] ContributorError),
    /// The command could not be run.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The shell could not be started because this process ran out of
    /// descriptors; names the contributors holding guest descriptors then.
    #[error("{source} (guest descriptors held now: {holders})")]
    OutOfDescriptors {
        /// The spawn failure.
        source: ExecError,
        /// `contributor: count` for each holder, or `none`.
        holders: String,
    },
    /// The model asked for a tool that does not exist (the agent loop's
    /// calls; its hooks still ran).
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    /// The host did not run the call: a `PreToolUse` hook blocked it, or
    /// this process has no working directory to run it in.
    #[error(transparent)]
    Host(#[from] HostError),
}

/// The mode of a call with the model's `arguments`: background when
/// `run_in_background` is `true`.
pub fn call_mode(arguments: &serde_json::Value) -> Mode {
    if arguments.get("run_in_background") == Some(&serde_json::Value::Bool(true)) {
        Mode::Background
    } else {
        Mode::Foreground
    }
}

/// What one call of the tool gave: how its command ended or started, or
/// why it did not run.
pub type Called = Result<ShellRun, BashToolError>;

/// What a call gives the model: its output (stdout, then stderr, then how
/// a failed command ended), a background start, or why it did not run;
/// and whether that is an error.
pub fn model_text(called: &Called) -> (String, bool) {
    match called {
        Ok(ShellRun::Finished(output)) => {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            let failed = output.exit_code != Some(0);
            if failed {
                text.push_str(&match output.exit_code {
                    Some(code) => format!("\n[exit code {code}]"),
                    None if output.timed_out => "\n[timed out]".to_string(),
                    None => "\n[killed]".to_string(),
                });
            }
            (text, failed)
        }
        Ok(ShellRun::Started(handle)) => (
            format!("started in the background (pid {:?})", handle.pid),
            false,
        ),
        Err(err) => (err.to_string(), true),
    }
}

/// The bash tool: an adapter over a [`Host`] on its registry, each call a
/// fresh overlay, then the command through the tool's executor.
#[derive(Clone)]
pub struct BashTool<E> {
    host: Arc<Host<E>>,
    executor: E,
    default_workdir: PathBuf,
    default_timeout: Duration,
}

impl<E: ShellExecutor + Clone> BashTool<E> {
    /// A tool over `registry` and `executor`, with no hooks; calls without
    /// an agent run in `default_workdir`.
    pub fn new(registry: Registry, executor: E, default_workdir: impl Into<PathBuf>) -> Self {
        BashTool {
            host: Arc::new(Host::over(registry, None, executor.clone())),
            executor,
            default_workdir: default_workdir.into(),
            default_timeout: Duration::from_secs(120),
        }
    }

    /// The same tool with `hooks` around each call, run by their own
    /// executor (the agent loop's).
    pub fn with_hooks(self, hooks: Hooks<E>) -> Self {
        let registry = self.host.registry().clone();
        let executor = hooks.executor().clone();
        BashTool {
            host: Arc::new(Host::over(registry, Some(hooks), executor)),
            ..self
        }
    }

    /// The executor (e.g. to inspect a recording one).
    pub fn executor(&self) -> &E {
        &self.executor
    }

    /// The host the tool runs its calls through.
    pub fn host(&self) -> &Host<E> {
        &self.host
    }

    /// The registry the tool collects from.
    pub fn registry(&self) -> &Registry {
        self.host.registry()
    }

    /// Runs one model call. `execution` identifies the call and its agent;
    /// `arguments` is the model's JSON, of which only the documented fields
    /// are read. The overlay is collected from this call's own execution.
    pub async fn call(
        &self,
        execution: &ToolExecution,
        arguments: &Value,
    ) -> Result<ShellRun, BashToolError> {
        let outcome = self.run(execution, BASH_TOOL_NAME, arguments).await;
        match outcome {
            Ok(outcome) => outcome.output,
            Err(err) => Err(refused(err)),
        }
    }

    /// One call of the tool `tool_name` with the model's `arguments`, run
    /// whole by the host, with the tool's hooks (which see `arguments` as
    /// their `tool_input`): an unknown tool or unreadable arguments run no
    /// command, but their hooks do, and [`Called`] says why. The host's
    /// error when it did not get as far as the command.
    pub async fn run(
        &self,
        execution: &ToolExecution,
        tool_name: &str,
        arguments: &Value,
    ) -> Result<host::BashOutcome<Called>, HostError> {
        let parsed = BashArguments::deserialize(arguments);
        let mut call = BashRequest::new(execution.clone(), "");
        call.background = call_mode(arguments) == Mode::Background;
        call.default_workdir = Some(self.default_workdir.clone());
        call.tool_input = self.host.hooks().map(|_| arguments.clone());
        let refusal = match parsed {
            _ if tool_name != BASH_TOOL_NAME => Some(BashToolError::UnknownTool(tool_name.into())),
            Err(err) => Some(BashToolError::Arguments(err)),
            Ok(arguments) => {
                call.timeout = Some(
                    (arguments.timeout)
                        .map_or(self.default_timeout, Duration::from_millis)
                        .min(MAX_TIMEOUT),
                );
                call.command = arguments.command;
                None
            }
        };
        let runner = ToolRunner {
            tool: self,
            refusal: Mutex::new(refusal),
        };
        self.host.run_bash(call, &runner).await
    }

    /// An executor failure; when the spawn ran out of descriptors, it
    /// names who holds guest descriptors at that moment.
    fn exec_error(&self, err: ExecError) -> BashToolError {
        let exhausted = matches!(&err, ExecError::Spawn { source, .. }
            if matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)));
        if !exhausted {
            return BashToolError::Exec(err);
        }
        let holders: Vec<String> = (self
            .registry()
            .shared_engine()
            .descriptor_holders()
            .into_iter())
        .map(|(name, count)| format!("`{}`: {count}", escape_controls(&name)))
        .collect();
        BashToolError::OutOfDescriptors {
            source: err,
            holders: if holders.is_empty() {
                "none".into()
            } else {
                holders.join(", ")
            },
        }
    }
}

/// A call the host did not run as the tool's error: a contributor's
/// failure as [`BashToolError::Collect`], as before the host.
pub(crate) fn refused(err: HostError) -> BashToolError {
    if err.code != HostErrorCode::Contributor {
        return BashToolError::Host(err);
    }
    match err.into_source::<ContributorError>() {
        Ok(err) => BashToolError::Collect(err),
        Err(err) => BashToolError::Host(err),
    }
}

/// How the tool runs one call's command: through its executor, in the
/// foreground or started in the background; a call that cannot run
/// (`refusal`) runs nothing. Every outcome is the runner's output, so that
/// the `PostToolUse` hooks see it as the model will.
struct ToolRunner<'a, E> {
    tool: &'a BashTool<E>,
    /// Taken by the one run.
    refusal: Mutex<Option<BashToolError>>,
}

impl<E: ShellExecutor + Clone> BashRunner for ToolRunner<'_, E> {
    type Output = Called;

    async fn run(&self, request: ShellExecRequest, mode: Mode) -> Result<Ran<Called>, ExecError> {
        let refusal = (self.refusal.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let executor = &self.tool.executor;
        let called = match (refusal, mode) {
            (Some(refusal), _) => Err(refusal),
            (None, Mode::Foreground) => (executor.run(request).await)
                .map(ShellRun::Finished)
                .map_err(|e| self.tool.exec_error(e)),
            (None, Mode::Background) => (executor.spawn_background(request))
                .map(ShellRun::Started)
                .map_err(|e| self.tool.exec_error(e)),
        };
        // Worded only for hooks: a tool without any has no one to read it.
        let tool_response = match self.tool.host.hooks() {
            Some(_) => {
                let (output, is_error) = model_text(&called);
                json!({"output": output, "is_error": is_error})
            }
            None => Value::Null,
        };
        Ok(Ran {
            tool_response,
            output: called,
        })
    }
}

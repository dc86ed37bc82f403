//! The model-facing bash tool: the boundary where a model's arguments become
//! a [`ShellExecRequest`]. Only `command`, `description`, `run_in_background`
//! and `timeout` are read; any `env`, `stdin` or other field a model sends is
//! ignored, so a model can neither set nor displace a `DSH_*` value.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

// Re-exported here, where the bash tool first made it generic.
pub use crate::executor::ShellExecutor;
use crate::executor::{BackgroundHandle, ExecError, ExecOutput, ShellExecRequest};
use dsh_env::CollectOptions;
use dsh_env::{ContributorError, Registry};
use dsh_env::{Mode, Overlay, ToolExecution};
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
pub enum BashOutcome {
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

/// The bash tool: collects a fresh overlay for every call, then executes.
#[derive(Clone)]
pub struct BashTool<E> {
    registry: Registry,
    executor: E,
    default_workdir: PathBuf,
    default_timeout: Duration,
}

impl<E: ShellExecutor> BashTool<E> {
    /// A tool over `registry` and `executor`; calls without an agent run in
    /// `default_workdir`.
    pub fn new(registry: Registry, executor: E, default_workdir: impl Into<PathBuf>) -> Self {
        BashTool {
            registry,
            executor,
            default_workdir: default_workdir.into(),
            default_timeout: Duration::from_secs(120),
        }
    }

    /// The executor (e.g. to inspect a recording one).
    pub fn executor(&self) -> &E {
        &self.executor
    }

    /// Runs one model call. `execution` identifies the call and its agent;
    /// `arguments` is the model's JSON, of which only the documented fields
    /// are read. The overlay is collected from this call's own execution.
    pub async fn call(
        &self,
        execution: &ToolExecution,
        arguments: &serde_json::Value,
    ) -> Result<BashOutcome, BashToolError> {
        let execution = execution.clone().with_mode(call_mode(arguments));
        let overlay = self
            .registry
            .collect(&execution, &CollectOptions::new())
            .await?
            .overlay;
        self.call_with(&execution, arguments, overlay).await
    }

    /// [`BashTool::call`] with `overlay`, collected for `execution` (in the
    /// mode [`call_mode`] gives it) by the caller: the agent loop collects
    /// once for the call and its hooks.
    pub async fn call_with(
        &self,
        execution: &ToolExecution,
        arguments: &serde_json::Value,
        overlay: Overlay,
    ) -> Result<BashOutcome, BashToolError> {
        let arguments = BashArguments::deserialize(arguments)?;
        let mode = if arguments.run_in_background {
            Mode::Background
        } else {
            Mode::Foreground
        };
        let workdir = (execution.agent.as_ref().and_then(|a| a.cwd.as_ref()))
            .map_or_else(|| self.default_workdir.clone(), PathBuf::from);
        let timeout = arguments
            .timeout
            .map_or(self.default_timeout, Duration::from_millis)
            .min(MAX_TIMEOUT);
        let mut request = ShellExecRequest::new(arguments.command, workdir, overlay);
        request.timeout = timeout;
        Ok(match mode {
            Mode::Foreground => {
                // Biased: `run` is polled first and spawns the child; the
                // work `collect` left for later then runs while it starts.
                let (output, ()) =
                    tokio::join!(biased; self.executor.run(request), self.registry.prepare());
                BashOutcome::Finished(output.map_err(|e| self.exec_error(e))?)
            }
            Mode::Background => {
                let handle =
                    (self.executor.spawn_background(request)).map_err(|e| self.exec_error(e))?;
                self.registry.prepare().await;
                BashOutcome::Started(handle)
            }
        })
    }

    /// The registry the tool collects from.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// An executor failure; when the spawn ran out of descriptors, it
    /// names who holds guest descriptors at that moment.
    fn exec_error(&self, err: ExecError) -> BashToolError {
        let exhausted = matches!(&err, ExecError::Spawn { source, .. }
            if matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)));
        if !exhausted {
            return BashToolError::Exec(err);
        }
        let holders: Vec<String> = (self.registry.runtime().descriptor_holders().into_iter())
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

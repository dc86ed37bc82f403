//! Hook bridges: hook commands configured in the Claude Code or Codex
//! `hooks.json` format, run through an executor (the local one unless
//! [`Hooks::with_executor`] says otherwise) with the managed overlay, with
//! the event's JSON payload on stdin.
//!
//! ```json
//! {"hooks": {"PreToolUse": [{"matcher": "Bash",
//!   "hooks": [{"type": "command", "command": "./check.sh", "timeout": 10}]}]}}
//! ```
//!
//! A `PreToolUse` hook that exits 2 blocks the call; its stderr becomes the
//! tool result the model sees. A hook that times out or crashes is reported
//! and never blocks or hangs the loop.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::executor::{LocalExecutor, ShellExecRequest, ShellExecutor};
use crate::session::Session;
use dsh_env::execution::ToolExecution;
use dsh_env::registry::Registry;

/// Whose payload shape to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookDialect {
    /// Claude Code: `transcript_path` is `""`.
    ClaudeCode,
    /// Codex: `transcript_path` is `null`.
    Codex,
}

/// A lifecycle event that hooks can observe.
#[derive(Debug, Clone)]
pub enum HookEvent {
    /// A session started (`startup`) or was resumed (`resume`).
    SessionStart {
        /// `startup` or `resume`.
        source: String,
    },
    /// A tool is about to run.
    PreToolUse {
        /// The tool, e.g. `Bash`.
        tool_name: String,
        /// The model's arguments.
        tool_input: Value,
    },
    /// A tool has run.
    PostToolUse {
        /// The tool.
        tool_name: String,
        /// The model's arguments.
        tool_input: Value,
        /// What the tool returned.
        tool_response: Value,
    },
}

impl HookEvent {
    /// The event's name in hooks.json.
    pub fn name(&self) -> &'static str {
        match self {
            HookEvent::SessionStart { .. } => "SessionStart",
            HookEvent::PreToolUse { .. } => "PreToolUse",
            HookEvent::PostToolUse { .. } => "PostToolUse",
        }
    }

    /// What a matcher is compared with: the tool name, or the start source.
    fn subject(&self) -> &str {
        match self {
            HookEvent::SessionStart { source } => source,
            HookEvent::PreToolUse { tool_name, .. } | HookEvent::PostToolUse { tool_name, .. } => {
                tool_name
            }
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
struct HooksFile {
    #[serde(default)]
    hooks: BTreeMap<String, Vec<MatcherGroup>>,
}

#[derive(Debug, Clone, Deserialize)]
struct MatcherGroup {
    #[serde(default)]
    matcher: Option<String>,
    hooks: Vec<HookCommand>,
}

#[derive(Debug, Clone, Deserialize)]
struct HookCommand {
    #[serde(rename = "type")]
    kind: String,
    command: String,
    /// Seconds.
    timeout: Option<u64>,
}

/// Why a hooks file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("hooks file {path}: {message}")]
pub struct HooksError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// What one hook command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRun {
    /// The event.
    pub event: &'static str,
    /// The command line.
    pub command: String,
    /// Exit code (`None`: killed, timed out, or could not start).
    pub exit_code: Option<i32>,
    /// Captured stdout.
    pub stdout: String,
    /// Captured stderr, or why the hook could not run.
    pub stderr: String,
    /// Whether it ran past its timeout.
    pub timed_out: bool,
    /// Whether it blocked the tool call (PreToolUse, exit 2).
    pub blocked: bool,
}

/// Configured hooks of one dialect, and how to run them: with `E`.
#[derive(Clone)]
pub struct Hooks<E = LocalExecutor> {
    dialect: HookDialect,
    file: HooksFile,
    registry: Registry,
    executor: E,
}

/// The default timeout of a hook without one (Claude Code's default).
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

impl Hooks {
    /// Parses a hooks.json document; its hooks run on this machine.
    pub fn parse(
        text: &str,
        origin: &str,
        dialect: HookDialect,
        registry: Registry,
    ) -> Result<Self, HooksError> {
        let error = |message: String| HooksError {
            path: origin.to_string(),
            message,
        };
        let file: HooksFile = serde_json::from_str(text).map_err(|e| error(e.to_string()))?;
        for (event, groups) in &file.hooks {
            for hook in groups.iter().flat_map(|g| &g.hooks) {
                if hook.kind != "command" {
                    return Err(error(format!(
                        "{event}: hook type `{}` is not supported (only `command`)",
                        hook.kind
                    )));
                }
            }
        }
        Ok(Hooks {
            dialect,
            file,
            registry,
            executor: LocalExecutor,
        })
    }

    /// Reads and parses a hooks.json file.
    pub fn from_file(
        path: &Path,
        dialect: HookDialect,
        registry: Registry,
    ) -> Result<Self, HooksError> {
        // The model can run commands: the file may have become a FIFO.
        let text = dsh_env::input::read_regular_text(path, dsh_env::input::MAX_HOOKS_BYTES)
            .map_err(|e| HooksError {
                path: path.display().to_string(),
                message: e.problem.to_string(),
            })?;
        Self::parse(&text, &path.display().to_string(), dialect, registry)
    }

    /// No hooks at all.
    pub fn none(registry: Registry) -> Self {
        Hooks {
            dialect: HookDialect::ClaudeCode,
            file: HooksFile {
                hooks: BTreeMap::new(),
            },
            registry,
            executor: LocalExecutor,
        }
    }
}

impl<E: ShellExecutor> Hooks<E> {
    /// The same hooks, run by `executor` instead.
    pub fn with_executor<F: ShellExecutor>(self, executor: F) -> Hooks<F> {
        Hooks {
            dialect: self.dialect,
            file: self.file,
            registry: self.registry,
            executor,
        }
    }

    /// The executor (e.g. to give the bash tool the same one).
    pub fn executor(&self) -> &E {
        &self.executor
    }

    /// The JSON payload a hook of this dialect receives on stdin.
    pub fn payload(&self, event: &HookEvent, session: &Session) -> Value {
        let transcript_path = match self.dialect {
            HookDialect::ClaudeCode => json!(""),
            HookDialect::Codex => Value::Null,
        };
        let mut payload = json!({
            "session_id": session.id(),
            "transcript_path": transcript_path,
            "cwd": session.header.cwd,
            "hook_event_name": event.name(),
        });
        let fields = match event {
            HookEvent::SessionStart { source } => json!({"source": source}),
            HookEvent::PreToolUse {
                tool_name,
                tool_input,
            } => json!({"tool_name": tool_name, "tool_input": tool_input}),
            HookEvent::PostToolUse {
                tool_name,
                tool_input,
                tool_response,
            } => {
                json!({"tool_name": tool_name, "tool_input": tool_input, "tool_response": tool_response})
            }
        };
        if let (Some(payload), Value::Object(fields)) = (payload.as_object_mut(), fields) {
            payload.extend(fields);
        }
        payload
    }

    /// Runs every hook matching `event`, one after another, each with the
    /// overlay of a `hook` execution made by the session's agent.
    pub async fn run(&self, event: &HookEvent, session: &Session) -> Vec<HookRun> {
        let commands: Vec<&HookCommand> = self
            .file
            .hooks
            .get(event.name())
            .into_iter()
            .flatten()
            .filter(|group| matches(group.matcher.as_deref(), event.subject()))
            .flat_map(|group| &group.hooks)
            .collect();
        let mut runs = Vec::with_capacity(commands.len());
        for (index, hook) in commands.into_iter().enumerate() {
            runs.push(self.run_one(event, session, hook, index).await);
        }
        runs
    }

    async fn run_one(
        &self,
        event: &HookEvent,
        session: &Session,
        hook: &HookCommand,
        index: usize,
    ) -> HookRun {
        let mut run = HookRun {
            event: event.name(),
            command: hook.command.clone(),
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            timed_out: false,
            blocked: false,
        };
        let execution = ToolExecution::new(format!("hook-{}-{index}", event.name()), "hook")
            .with_agent(session.agent());
        let overlay = match self.registry.collect(&execution).await {
            Ok(overlay) => overlay,
            Err(err) => {
                run.stderr = format!("hook not run: {err}");
                return run;
            }
        };
        let mut request = ShellExecRequest::new(hook.command.clone(), &session.header.cwd, overlay);
        request.stdin = Some(self.payload(event, session).to_string().into_bytes());
        request.timeout = hook
            .timeout
            .map_or(DEFAULT_HOOK_TIMEOUT, Duration::from_secs);
        match self.executor.run(request).await {
            Ok(output) => {
                run.exit_code = output.exit_code;
                run.stdout = String::from_utf8_lossy(&output.stdout).into_owned();
                run.stderr = String::from_utf8_lossy(&output.stderr).into_owned();
                run.timed_out = output.timed_out;
                run.blocked =
                    matches!(event, HookEvent::PreToolUse { .. }) && output.exit_code == Some(2);
            }
            Err(err) => run.stderr = format!("hook could not run: {err}"),
        }
        if run.timed_out || run.exit_code.is_none_or(|code| code != 0 && !run.blocked) {
            tracing::warn!(
                "{} hook `{}` failed (exit {:?}, timed out: {}): {}",
                run.event,
                run.command,
                run.exit_code,
                run.timed_out,
                run.stderr.trim()
            );
        }
        run
    }
}

/// Claude Code matchers: absent, empty or `*` match everything; otherwise
/// `A|B` alternatives, each matched exactly.
fn matches(matcher: Option<&str>, subject: &str) -> bool {
    match matcher.map(str::trim) {
        None | Some("") | Some("*") => true,
        Some(alternatives) => alternatives.split('|').any(|a| a.trim() == subject),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn matchers() {
        assert!(matches(None, "Bash"));
        assert!(matches(Some("*"), "Bash"));
        assert!(matches(Some("Edit|Bash"), "Bash"));
        assert!(!matches(Some("Edit"), "Bash"));
        assert!(matches(Some("startup"), "startup"));
    }
}

//! Hook bridges: hook commands configured in the Claude Code or Codex
//! `hooks.json` format, run through an executor (the local one unless
//! [`Hooks::with_executor`] says otherwise) with the managed overlay of the
//! call they are about (the caller collects it once, for the call and all
//! its hooks), `CLAUDE_PROJECT_DIR` set to the agent's cwd, and the event's
//! JSON payload on stdin. Reading and checking a file needs no registry.
//!
//! ```json
//! {"hooks": {"PreToolUse": [{"matcher": "Bash",
//!   "hooks": [{"type": "command", "command": "./check.sh", "timeout": 10}]}]}}
//! ```
//!
//! As both tools document:
//! - a matcher that is absent, `""` or `*` matches every tool (or start
//!   source); one made only of letters, digits, `_` and `|` is a list of
//!   exact names; any other is a regular expression searched in the name
//!   (`Edit|Write`, `Notebook.*`, `mcp__.*`);
//! - the matching hooks of an event run concurrently (at most
//!   [`MAX_CONCURRENT_HOOKS`] at once; an identical command once), each
//!   bounded by its `timeout` (seconds; [`DEFAULT_HOOK_TIMEOUT`]) and
//!   [`HOOK_OUTPUT_CAP`] bytes per stream;
//! - exit 2 blocks (`PreToolUse`) or sends feedback (`PostToolUse`), with
//!   stderr as the reason; any other non-zero exit, a timeout or a crash is
//!   a warning and blocks nothing;
//! - on exit 0, JSON stdout is read: `decision: "block"` with `reason`,
//!   `hookSpecificOutput.permissionDecision` (`"allow"`, `"ask"`, `"deny"`)
//!   with `permissionDecisionReason`, and `additionalContext` (in
//!   `hookSpecificOutput`); a `SessionStart` hook's plain stdout is context.
//!
//! When concurrent hooks disagree, deny wins over ask, and ask over allow
//! ([`HookVerdict`]); the reasons of every hook that gave the winning
//! decision are kept. Only `command` hooks exist here: any other type, and
//! the `if` field (Claude Code's permission-rule filter), are refused when
//! the file is read, naming them; so is an event this runtime never fires
//! ([`EVENTS`]), as a misspelled `PreToolUse` would turn a guard off in
//! silence, and any key nobody reads (see `HOOK_FIELDS`). A file is bounded as a whole: its size (1 MiB), each regular
//! expression's compiled size ([`MATCHER_SIZE_LIMIT`]) and their number
//! ([`MAX_PATTERN_MATCHERS`]), each hook's `timeout` ([`MAX_TIMEOUT`](crate::executor::MAX_TIMEOUT)).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use crate::executor::{
    LocalExecutor, ShellExecRequest, ShellExecutor, TimeoutError, TimeoutUnit, checked_timeout,
};
use crate::session::Session;
use dsh_env::{Agent, Mode, Overlay, ToolExecution};
use dsh_env_support::input::{escape_controls, unknown_key};

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
        /// The call's id (`tool_use_id` in the payload).
        tool_use_id: String,
    },
    /// A tool has run.
    PostToolUse {
        /// The tool.
        tool_name: String,
        /// The model's arguments.
        tool_input: Value,
        /// The call's id (`tool_use_id` in the payload).
        tool_use_id: String,
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

/// Claude Code's permission mode, sent as `permission_mode` when the
/// caller names one. The reference harness's execution has no such field,
/// so it comes from the caller (`run --permission-mode`, `exec`'s
/// `permission_mode`, the addon's `permissionMode`); without one the field
/// is left out of the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PermissionMode {
    /// `default`.
    Default,
    /// `plan`.
    Plan,
    /// `acceptEdits`.
    AcceptEdits,
    /// `dontAsk`.
    DontAsk,
    /// `bypassPermissions`.
    BypassPermissions,
}

impl PermissionMode {
    /// Every mode, by its name in the payload.
    pub const NAMES: [&'static str; 5] = [
        "default",
        "plan",
        "acceptEdits",
        "dontAsk",
        "bypassPermissions",
    ];

    /// Its name in the payload.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::Plan => "plan",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::DontAsk => "dontAsk",
            PermissionMode::BypassPermissions => "bypassPermissions",
        }
    }
}

/// A name that is not one of [`PermissionMode::NAMES`].
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "unknown permission mode `{}` (one of: {})",
    escape_controls(.0),
    PermissionMode::NAMES.join(", ")
)]
pub struct UnknownPermissionMode(pub String);

impl std::str::FromStr for PermissionMode {
    type Err = UnknownPermissionMode;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let modes = [
            PermissionMode::Default,
            PermissionMode::Plan,
            PermissionMode::AcceptEdits,
            PermissionMode::DontAsk,
            PermissionMode::BypassPermissions,
        ];
        (modes.into_iter())
            .find(|mode| mode.as_str() == name)
            .ok_or_else(|| UnknownPermissionMode(name.to_string()))
    }
}

/// Whose call an event is about, and where: what a payload says beside the
/// event, and what a hook runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookContext {
    /// The calling agent: its session id is `session_id`. Without one,
    /// `session_id` is left out.
    pub agent: Option<Agent>,
    /// The payload's `cwd`, `CLAUDE_PROJECT_DIR`, and where hooks run.
    pub cwd: String,
    /// `permission_mode`, when the caller knows it.
    pub permission_mode: Option<PermissionMode>,
}

impl HookContext {
    /// The context of `session`'s calls: its agent, its cwd.
    pub fn of_session(session: &Session) -> Self {
        HookContext {
            agent: Some(session.agent()),
            cwd: session.header.cwd.clone(),
            permission_mode: None,
        }
    }

    /// The context of `execution`: its agent, and its cwd or else this
    /// process's (where [`ShellExecRequest::for_execution`] runs it too).
    pub fn of_execution(
        execution: &ToolExecution,
        permission_mode: Option<PermissionMode>,
    ) -> std::io::Result<Self> {
        let cwd = match execution.agent.as_ref().and_then(|a| a.cwd.clone()) {
            Some(cwd) => cwd,
            None => std::env::current_dir()?.display().to_string(),
        };
        Ok(HookContext {
            agent: execution.agent.clone(),
            cwd,
            permission_mode,
        })
    }
}

/// The tool name hooks see for a bash command, as in Claude Code and Codex.
pub const HOOK_TOOL_NAME: &str = "Bash";

/// One bash command run by [`crate::host::Host::run_bash`] (`dsh-env run`, `serve`'s
/// `exec`, the Node addon's `exec`, the agent loop's bash tool), as its hooks
/// see it.
#[derive(Debug, Clone)]
pub struct BashCall {
    /// Whose call, and where.
    pub context: HookContext,
    /// The execution's call id.
    pub tool_use_id: String,
    /// As Claude Code's Bash tool has it: `command`, and `timeout` (ms) and
    /// `run_in_background` when they apply.
    pub tool_input: Value,
}

impl BashCall {
    /// `command` for `execution`, killed after `timeout` (when the caller
    /// set one), in the execution's mode.
    pub fn new(
        execution: &ToolExecution,
        command: &str,
        timeout: Option<Duration>,
        permission_mode: Option<PermissionMode>,
    ) -> std::io::Result<Self> {
        let mut tool_input = json!({"command": command});
        if let Some(timeout) = timeout {
            let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            tool_input["timeout"] = json!(millis);
        }
        if execution.mode == Mode::Background {
            tool_input["run_in_background"] = json!(true);
        }
        Ok(BashCall {
            context: HookContext::of_execution(execution, permission_mode)?,
            tool_use_id: execution.call_id.clone(),
            tool_input,
        })
    }
}

/// What the hooks around a command that ran said, for whoever reads its
/// result (the agent loop gives the same to the model as `[hook]` lines).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct HookNotes {
    /// The `additionalContext` of the `PreToolUse`, then the `PostToolUse`
    /// hooks.
    pub context: Vec<String>,
    /// The reasons of `PostToolUse` hooks that blocked: feedback, as the
    /// command has run.
    pub feedback: Vec<String>,
    /// Every hook run, the `PreToolUse` ones first, for a caller that keeps
    /// a log of them (the agent loop); not part of a result.
    #[serde(skip)]
    pub runs: Vec<HookRun>,
}

/// A `PreToolUse` verdict that kept a command from running: deny, or ask
/// (there is no one to ask), and the hook runs it comes from. Its message
/// is one line, hook text escaped.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0.blocked_line())]
pub struct HookBlocked(pub HookVerdict, pub Vec<HookRun>);

/// Required: events written at the top level, without `hooks` around
/// them, would otherwise be no hooks at all, in silence. Every object of
/// the file is closed: a key nobody reads (a misspelt `matcher` would run
/// the hook for every tool) is refused, naming it and the known ones.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct HooksFile {
    hooks: BTreeMap<String, Vec<MatcherGroup>>,
    /// A Claude Code plugin's hooks.json may describe itself; not read.
    #[serde(default, rename = "description")]
    _description: Option<IgnoredAny>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatcherGroup {
    #[serde(default)]
    matcher: Option<String>,
    hooks: Vec<HookCommand>,
}

/// The keys a command hook may have ([`HookCommand`]'s): those read, `if`
/// (refused by name), and two that both tools document and that change
/// nothing here: `statusMessage` (shown while the hook runs, by a UI this
/// runtime has not) and Codex's `commandWindows` (this runtime runs on
/// Unix). Any other, such as Claude Code's `async`, `args` or `shell`, would
/// change how the hook runs if it were read: refused.
const HOOK_FIELDS: &[&str] = &[
    "type",
    "command",
    "timeout",
    "if",
    "statusMessage",
    "commandWindows",
];

#[derive(Debug, Clone, Deserialize)]
struct HookCommand {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    command: String,
    /// Seconds: any JSON number, checked when the file is read so that the
    /// error names the field (see [`MAX_TIMEOUT`](crate::executor::MAX_TIMEOUT)).
    timeout: Option<serde_json::Number>,
    /// Claude Code's permission-rule filter (`"Bash(rm *)"`): refused, as
    /// running the hook for every call would be wrong.
    #[serde(rename = "if")]
    condition: Option<Value>,
    /// The other keys, checked against [`HOOK_FIELDS`] once the type is
    /// known to be `command` (another type is refused as such first).
    #[serde(flatten)]
    other: BTreeMap<String, IgnoredAny>,
}

/// A matcher, compiled once.
#[derive(Debug, Clone)]
enum Matcher {
    /// Absent, `""` or `*`.
    All,
    /// Letters, digits, `_` and `|` only: exact names.
    Names(Vec<String>),
    /// Anything else: a regular expression, searched in the name.
    Pattern(Regex),
}

impl Matcher {
    fn new(matcher: Option<&str>) -> Result<Self, regex::Error> {
        let matcher = matcher.map(str::trim).unwrap_or_default();
        if matcher.is_empty() || matcher == "*" {
            return Ok(Matcher::All);
        }
        let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '|';
        if matcher.chars().all(plain) {
            return Ok(Matcher::Names(
                matcher.split('|').map(str::to_string).collect(),
            ));
        }
        RegexBuilder::new(matcher)
            .size_limit(MATCHER_SIZE_LIMIT)
            .dfa_size_limit(MATCHER_SIZE_LIMIT)
            .build()
            .map(Matcher::Pattern)
    }

    fn is_pattern(&self) -> bool {
        matches!(self, Matcher::Pattern(_))
    }

    fn matches(&self, subject: &str) -> bool {
        match self {
            Matcher::All => true,
            Matcher::Names(names) => names.iter().any(|name| name == subject),
            Matcher::Pattern(regex) => regex.is_match(subject),
        }
    }
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

/// What a hook decided about a tool call. The order is the precedence
/// when concurrent hooks disagree: deny over ask over allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HookDecision {
    /// `permissionDecision: "allow"` (or the older `decision: "approve"`).
    Allow,
    /// `permissionDecision: "ask"`: a user should confirm. The agent loop
    /// has no one to ask, so it does not run the call.
    Ask,
    /// Exit 2, `permissionDecision: "deny"` or `decision: "block"`: on
    /// `PreToolUse` the call does not run; on `PostToolUse` the reason is
    /// fed back with the tool's result.
    Deny,
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
    /// Its decision, from exit 2 or its JSON output.
    pub decision: Option<HookDecision>,
    /// Why: stderr on exit 2, or the JSON's reason.
    pub reason: Option<String>,
    /// Context for the model: `additionalContext`, or a `SessionStart`
    /// hook's plain stdout.
    pub additional_context: Option<String>,
}

impl HookRun {
    /// `hook`'s run for `event`, before it ran.
    fn of(event: &HookEvent, hook: &HookCommand) -> Self {
        HookRun {
            event: event.name(),
            command: hook.command.clone(),
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            timed_out: false,
            decision: None,
            reason: None,
            additional_context: None,
        }
    }
}

/// What the hooks of one event decided together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookVerdict {
    /// The strongest decision any hook gave (deny over ask over allow).
    pub decision: Option<HookDecision>,
    /// The reasons of the hooks that gave that decision, in hooks.json order.
    pub reasons: Vec<String>,
    /// Every hook's additional context, in hooks.json order.
    pub additional_context: Vec<String>,
}

impl HookVerdict {
    /// Combines the runs of one event.
    pub fn of(runs: &[HookRun]) -> Self {
        let decision = runs.iter().filter_map(|run| run.decision).max();
        HookVerdict {
            decision,
            reasons: runs
                .iter()
                .filter(|run| decision.is_some() && run.decision == decision)
                .filter_map(|run| run.reason.clone())
                .collect(),
            additional_context: runs
                .iter()
                .filter_map(|run| run.additional_context.clone())
                .collect(),
        }
    }

    /// Whether a `PreToolUse` verdict keeps the call from running: deny,
    /// or ask (there is no one to ask).
    pub fn blocks(&self) -> bool {
        matches!(self.decision, Some(HookDecision::Deny | HookDecision::Ask))
    }

    /// Why a blocked call did not run, for the model: the reasons, one a
    /// line, or what blocked it when the hooks gave none.
    pub fn blocked_text(&self) -> String {
        let mut text: String = (self.reasons.iter())
            .map(|reason| format!("{}\n", reason.trim_end()))
            .collect();
        if text.trim().is_empty() {
            text = match self.decision {
                Some(HookDecision::Ask) => {
                    "a PreToolUse hook asked for confirmation, and no one can give it here\n"
                }
                _ => "blocked by a PreToolUse hook\n",
            }
            .to_string();
        }
        text
    }

    /// [`HookVerdict::blocked_text`] as one line, for a terminal or an
    /// error message: `blocked by a PreToolUse hook: <reasons>`, escaped.
    fn blocked_line(&self) -> String {
        let reasons: Vec<String> = (self.reasons.iter())
            .map(|reason| reason.trim())
            .filter(|reason| !reason.is_empty())
            .map(|reason| escape_controls(reason).into_owned())
            .collect();
        match (self.decision, reasons.is_empty()) {
            (Some(HookDecision::Ask), true) => {
                "a PreToolUse hook asked for confirmation, and no one can give it here".into()
            }
            (_, true) => "blocked by a PreToolUse hook".into(),
            (_, false) => format!("blocked by a PreToolUse hook: {}", reasons.join("; ")),
        }
    }
}

/// Configured hooks of one dialect, and how to run them: with `E`.
#[derive(Clone)]
pub struct Hooks<E = LocalExecutor> {
    dialect: HookDialect,
    /// Per event: each matcher group's matcher and commands, in file order.
    groups: BTreeMap<String, Vec<(Matcher, Vec<HookCommand>)>>,
    executor: E,
}

/// The default timeout of a hook without one (Claude Code's default).
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes kept of each hook's stdout and of its stderr; the rest is cut.
pub const HOOK_OUTPUT_CAP: usize = 64 << 10;

/// Hooks of one event running at once; further matching hooks wait.
pub const MAX_CONCURRENT_HOOKS: usize = 16;

/// The events this runtime fires, the only ones a hooks file may name.
pub const EVENTS: [&str; 3] = ["SessionStart", "PreToolUse", "PostToolUse"];

/// Bytes one matcher's compiled regular expression may take, and its lazy
/// DFA's cache: a pathological matcher (`(\w{100}){100}`) is refused.
pub const MATCHER_SIZE_LIMIT: usize = 256 << 10;

/// Matchers compiled as regular expressions in one hooks file: with
/// [`MATCHER_SIZE_LIMIT`], what a file's matchers may hold (16 MiB each way).
pub const MAX_PATTERN_MATCHERS: usize = 64;

impl HookCommand {
    /// Its `timeout`, or the default: whole seconds from 1 to [`MAX_TIMEOUT`](crate::executor::MAX_TIMEOUT).
    fn timeout(&self) -> Result<Duration, TimeoutError> {
        let Some(number) = &self.timeout else {
            return Ok(DEFAULT_HOOK_TIMEOUT);
        };
        let option = format!("the timeout of hook `{}`", escape_controls(&self.command));
        let value = number.as_f64().unwrap_or(f64::NAN);
        checked_timeout(&option, value, number, TimeoutUnit::Seconds)
    }
}

impl Hooks {
    /// Parses a hooks.json document (at most the file's cap, 1 MiB); its
    /// hooks run on this machine.
    pub fn parse(text: &str, origin: &str, dialect: HookDialect) -> Result<Self, HooksError> {
        let error = |message: String| HooksError {
            path: origin.to_string(),
            message,
        };
        // The file's cap, for a document handed over directly too.
        let cap = dsh_env_support::input::MAX_HOOKS_BYTES;
        if u64::try_from(text.len()).unwrap_or(u64::MAX) > cap {
            return Err(error(format!(
                "{} bytes, over the limit of {cap}",
                text.len()
            )));
        }
        // serde's message quotes the document's text (an unknown key).
        let file: HooksFile = serde_json::from_str(text)
            .map_err(|e| error(escape_controls(&e.to_string()).into_owned()))?;
        let mut groups = BTreeMap::new();
        let mut patterns = 0;
        for (event, event_groups) in file.hooks {
            if !EVENTS.contains(&event.as_str()) {
                return Err(error(format!(
                    "event `{}` is not one this runtime fires ({})",
                    escape_controls(&event),
                    EVENTS.join(", ")
                )));
            }
            let mut compiled = Vec::with_capacity(event_groups.len());
            for group in event_groups {
                for hook in &group.hooks {
                    if hook.kind != "command" {
                        return Err(error(format!(
                            "{event}: hook type `{}` is not supported (only `command`)",
                            escape_controls(&hook.kind)
                        )));
                    }
                    if hook.command.trim().is_empty() {
                        return Err(error(format!("{event}: a command hook has no `command`")));
                    }
                    let unknown =
                        (hook.other.keys()).find(|key| !HOOK_FIELDS.contains(&key.as_str()));
                    if let Some(key) = unknown {
                        return Err(error(format!(
                            "{event}: hook `{}`: {}",
                            escape_controls(&hook.command),
                            unknown_key(key, HOOK_FIELDS)
                        )));
                    }
                    if hook.condition.is_some() {
                        return Err(error(format!(
                            "{event}: the `if` field of hook `{}` is not supported; \
                             filter in the hook's command instead",
                            escape_controls(&hook.command)
                        )));
                    }
                    hook.timeout().map_err(|e| error(format!("{event}: {e}")))?;
                }
                let matcher = Matcher::new(group.matcher.as_deref()).map_err(|e| match e {
                    regex::Error::CompiledTooBig(limit) => error(format!(
                        "{event}: matcher `{}` compiles past the limit of {limit} bytes",
                        escape_controls(group.matcher.as_deref().unwrap_or_default())
                    )),
                    e => error(format!("{event}: matcher is not a regular expression: {e}")),
                })?;
                patterns += usize::from(matcher.is_pattern());
                if patterns > MAX_PATTERN_MATCHERS {
                    return Err(error(format!(
                        "more than {MAX_PATTERN_MATCHERS} matchers are regular expressions"
                    )));
                }
                compiled.push((matcher, group.hooks));
            }
            groups.insert(event, compiled);
        }
        Ok(Hooks {
            dialect,
            groups,
            executor: LocalExecutor,
        })
    }

    /// Reads and parses a hooks.json file.
    pub fn from_file(path: &Path, dialect: HookDialect) -> Result<Self, HooksError> {
        // The model can run commands: the file may have become a FIFO.
        let text = dsh_env_support::input::read_regular_text(
            path,
            dsh_env_support::input::MAX_HOOKS_BYTES,
        )
        .map_err(|e| HooksError {
            path: path.display().to_string(),
            message: e.problem.to_string(),
        })?;
        Self::parse(&text, &path.display().to_string(), dialect)
    }

    /// No hooks at all.
    pub fn none() -> Self {
        Hooks {
            dialect: HookDialect::ClaudeCode,
            groups: BTreeMap::new(),
            executor: LocalExecutor,
        }
    }
}

impl<E: ShellExecutor> Hooks<E> {
    /// The same hooks, run by `executor` instead.
    pub fn with_executor<F: ShellExecutor>(self, executor: F) -> Hooks<F> {
        Hooks {
            dialect: self.dialect,
            groups: self.groups,
            executor,
        }
    }

    /// The executor (e.g. to give the bash tool the same one).
    pub fn executor(&self) -> &E {
        &self.executor
    }

    /// The JSON payload a hook of this dialect receives on stdin: the
    /// fields Claude Code sends that apply here (`session_id` only with an
    /// agent, `permission_mode` only when the caller named one).
    pub fn payload(&self, event: &HookEvent, context: &HookContext) -> Value {
        let transcript_path = match self.dialect {
            HookDialect::ClaudeCode => json!(""),
            HookDialect::Codex => Value::Null,
        };
        let mut payload = serde_json::Map::new();
        if let Some(agent) = &context.agent {
            payload.insert("session_id".into(), json!(agent.session_id));
        }
        payload.insert("transcript_path".into(), transcript_path);
        payload.insert("cwd".into(), json!(context.cwd));
        if let Some(mode) = context.permission_mode {
            payload.insert("permission_mode".into(), json!(mode.as_str()));
        }
        payload.insert("hook_event_name".into(), json!(event.name()));
        let fields = match event {
            HookEvent::SessionStart { source } => json!({"source": source}),
            HookEvent::PreToolUse {
                tool_name,
                tool_input,
                tool_use_id,
            } => {
                json!({"tool_name": tool_name, "tool_input": tool_input, "tool_use_id": tool_use_id})
            }
            HookEvent::PostToolUse {
                tool_name,
                tool_input,
                tool_use_id,
                tool_response,
            } => {
                json!({"tool_name": tool_name, "tool_input": tool_input,
                       "tool_response": tool_response, "tool_use_id": tool_use_id})
            }
        };
        if let Value::Object(fields) = fields {
            payload.extend(fields);
        }
        Value::Object(payload)
    }

    /// Runs the `PreToolUse` hooks of `call`, each with `overlay` (the
    /// call's own): the notes for its result, or the verdict that keeps it
    /// from running.
    pub async fn before_bash(
        &self,
        call: &BashCall,
        overlay: &Overlay,
    ) -> Result<HookNotes, HookBlocked> {
        let event = HookEvent::PreToolUse {
            tool_name: HOOK_TOOL_NAME.into(),
            tool_input: call.tool_input.clone(),
            tool_use_id: call.tool_use_id.clone(),
        };
        let runs = self.run(&event, &call.context, overlay).await;
        let verdict = HookVerdict::of(&runs);
        if verdict.blocks() {
            return Err(HookBlocked(verdict, runs));
        }
        Ok(HookNotes {
            context: verdict.additional_context,
            feedback: Vec::new(),
            runs,
        })
    }

    /// Runs the `PostToolUse` hooks of `call`, which ran with `overlay` and
    /// gave `tool_response`, each with that overlay, adding what they say to
    /// `notes`.
    pub async fn after_bash(
        &self,
        call: &BashCall,
        overlay: &Overlay,
        tool_response: Value,
        notes: &mut HookNotes,
    ) {
        let event = HookEvent::PostToolUse {
            tool_name: HOOK_TOOL_NAME.into(),
            tool_input: call.tool_input.clone(),
            tool_use_id: call.tool_use_id.clone(),
            tool_response,
        };
        let runs = self.run(&event, &call.context, overlay).await;
        let verdict = HookVerdict::of(&runs);
        if verdict.decision == Some(HookDecision::Deny) {
            notes.feedback.extend(verdict.reasons);
        }
        notes.context.extend(verdict.additional_context);
        notes.runs.extend(runs);
    }

    /// Runs every hook matching `event`, concurrently (an identical command
    /// once), each with `overlay`: the one collected for the call the event
    /// is about (or, for `SessionStart`, once for the event), so that no
    /// hook runs the contributors again. Their runs in hooks.json order;
    /// combine them with [`HookVerdict::of`].
    pub async fn run(
        &self,
        event: &HookEvent,
        context: &HookContext,
        overlay: &Overlay,
    ) -> Vec<HookRun> {
        let commands = self.matching(event);
        // Collected first: a stream over a borrowing closure would not be
        // `Send` for callers that spawn this (a higher-ranked lifetime limit).
        let runs: Vec<_> = commands
            .into_iter()
            .map(|hook| self.run_one(event, context, hook, overlay))
            .collect();
        futures::stream::iter(runs)
            .buffered(MAX_CONCURRENT_HOOKS)
            .collect()
            .await
    }

    /// What [`Hooks::run`] gives when the overlay for the event's call
    /// could not be collected: every matching hook, not run, `why` as its
    /// stderr.
    pub fn not_run(&self, event: &HookEvent, why: &str) -> Vec<HookRun> {
        (self.matching(event).into_iter())
            .map(|hook| HookRun {
                stderr: format!("hook not run: {why}"),
                ..HookRun::of(event, hook)
            })
            .collect()
    }

    /// The hooks matching `event`, in hooks.json order, an identical
    /// command once.
    fn matching(&self, event: &HookEvent) -> Vec<&HookCommand> {
        let mut commands: Vec<&HookCommand> = Vec::new();
        let groups = self.groups.get(event.name()).into_iter().flatten();
        for (_, hooks) in groups.filter(|(matcher, _)| matcher.matches(event.subject())) {
            for hook in hooks {
                if !commands.iter().any(|seen| seen.command == hook.command) {
                    commands.push(hook);
                }
            }
        }
        commands
    }

    async fn run_one(
        &self,
        event: &HookEvent,
        context: &HookContext,
        hook: &HookCommand,
        overlay: &Overlay,
    ) -> HookRun {
        let mut run = HookRun::of(event, hook);
        let mut request =
            ShellExecRequest::new(hook.command.clone(), &context.cwd, overlay.clone());
        request.stdin = Some(self.payload(event, context).to_string().into_bytes());
        request
            .env
            .insert("CLAUDE_PROJECT_DIR".to_string(), context.cwd.clone());
        request.output_cap = HOOK_OUTPUT_CAP;
        // Checked when the file was read.
        request.timeout = hook.timeout().unwrap_or(DEFAULT_HOOK_TIMEOUT);
        match self.executor.run(request).await {
            Ok(output) => {
                run.exit_code = output.exit_code;
                run.stdout = String::from_utf8_lossy(&output.stdout).into_owned();
                run.stderr = String::from_utf8_lossy(&output.stderr).into_owned();
                run.timed_out = output.timed_out;
                decide(event, &mut run);
            }
            Err(err) => run.stderr = format!("hook could not run: {err}"),
        }
        let failed = run.timed_out || run.exit_code.is_none_or(|code| code != 0 && code != 2);
        if failed {
            tracing::warn!(
                "{} hook `{}` failed (exit {:?}, timed out: {}): {}",
                run.event,
                escape_controls(&run.command),
                run.exit_code,
                run.timed_out,
                escape_controls(run.stderr.trim())
            );
        }
        run
    }
}

/// Reads a finished hook's decision, reason and context from its exit code
/// and output, as Claude Code and Codex document them.
fn decide(event: &HookEvent, run: &mut HookRun) {
    let tool_event = matches!(
        event,
        HookEvent::PreToolUse { .. } | HookEvent::PostToolUse { .. }
    );
    match run.exit_code {
        Some(2) if tool_event => {
            run.decision = Some(HookDecision::Deny);
            run.reason = Some(run.stderr.clone());
        }
        Some(0) => match serde_json::from_str::<Value>(run.stdout.trim()) {
            Ok(Value::Object(output)) => read_json_output(tool_event, &output, run),
            _ if matches!(event, HookEvent::SessionStart { .. }) => {
                run.additional_context =
                    Some(run.stdout.clone()).filter(|text| !text.trim().is_empty());
            }
            _ => {}
        },
        _ => {}
    }
}

/// The fields of a hook's JSON output that this harness acts on.
fn read_json_output(tool_event: bool, output: &serde_json::Map<String, Value>, run: &mut HookRun) {
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_string);
    let specific = output.get("hookSpecificOutput");
    let field = |name: &str| specific.and_then(|s| s.get(name));
    run.additional_context = text(field("additionalContext"));
    if !tool_event {
        return;
    }
    // The newer `permissionDecision` wins over the older `decision`.
    let (decision, reason) = match field("permissionDecision").and_then(Value::as_str) {
        Some("allow") => (Some(HookDecision::Allow), field("permissionDecisionReason")),
        Some("ask") => (Some(HookDecision::Ask), field("permissionDecisionReason")),
        Some("deny") => (Some(HookDecision::Deny), field("permissionDecisionReason")),
        _ => match output.get("decision").and_then(Value::as_str) {
            Some("block") => (Some(HookDecision::Deny), output.get("reason")),
            Some("approve") => (Some(HookDecision::Allow), output.get("reason")),
            _ => (None, None),
        },
    };
    run.decision = decision;
    run.reason = text(reason);
}

#[cfg(test)]
mod tests {
    use super::Matcher;

    #[test]
    fn matchers_are_exact_names_or_regular_expressions() {
        let matches =
            |matcher: Option<&str>, subject: &str| Matcher::new(matcher).unwrap().matches(subject);
        assert!(matches(None, "Bash"));
        assert!(matches(Some(""), "Bash"));
        assert!(matches(Some("*"), "Bash"));
        assert!(matches(Some("Edit|Bash"), "Bash"));
        assert!(
            !matches(Some("Bash"), "BashOutput"),
            "a plain name is exact"
        );
        assert!(!matches(Some("Edit"), "Bash"));
        assert!(matches(Some("Notebook.*"), "NotebookEdit"));
        assert!(matches(Some("mcp__.*__write"), "mcp__fs__write"));
        assert!(!matches(Some("^Edit$"), "MultiEdit"));
        assert!(matches(Some("startup"), "startup"));
        assert!(Matcher::new(Some("Bash(")).is_err());
    }
}

//! The agent loop: a model decides, the bash tool runs, hooks observe, and
//! the session is checkpointed at the end of every turn.
//!
//! The model is pluggable; [`ScriptedModel`] replays a script, so the whole
//! loop runs (and is tested) with no API key. The executor is too: the bash
//! tool and the hooks run their commands with the same [`ShellExecutor`].
//!
//! Each tool call is the bash tool's host's ([`BashTool::run`], over
//! [`crate::host::Host::run_bash`]): one collect, the `PreToolUse` hooks,
//! the command, the `PostToolUse` hooks. The loop words the outcome for the
//! model and keeps the hooks' runs in its log.

use std::collections::VecDeque;
use std::future::Future;

use serde_json::{Value, json};

use crate::executor::{BackgroundHandle, ExecError, ExecOutput, LocalExecutor, ShellExecutor};
use crate::hooks::{
    HookBlocked, HookContext, HookDecision, HookEvent, HookRun, HookVerdict, Hooks,
};
use crate::session::{Event, Session, SessionError, SessionStore};
use crate::tool::{BASH_TOOL_NAME, BashTool, BashToolError, Called, ShellRun, model_text, refused};
use dsh_env::ToolExecution;

pub use crate::hooks::HOOK_TOOL_NAME;

/// Most model steps one turn may take.
pub const MAX_STEPS_PER_TURN: usize = 32;

/// One tool call requested by the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRequest {
    /// The tool's name (only `bash` exists).
    pub name: String,
    /// The model's arguments.
    pub arguments: Value,
}

/// What the model does next.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelResponse {
    /// Call these tools, then ask again.
    ToolCalls(Vec<ToolCallRequest>),
    /// Answer, ending the turn.
    Final(String),
}

/// A model: given the history, the next step. Async, so a model client
/// awaits its network call instead of blocking a runtime worker; an
/// implementation may write `async fn respond`.
pub trait Model: Send {
    /// The next response for this history.
    fn respond(&mut self, history: &[Event]) -> impl Future<Output = ModelResponse> + Send;
}

/// A model that replays a fixed script, then answers "done".
#[derive(Debug, Clone, Default)]
pub struct ScriptedModel {
    script: VecDeque<ModelResponse>,
}

impl ScriptedModel {
    /// A model that gives `script`'s responses in order.
    pub fn new(script: impl IntoIterator<Item = ModelResponse>) -> Self {
        ScriptedModel {
            script: script.into_iter().collect(),
        }
    }

    /// A one-turn script: run each command with bash, in order, then answer.
    pub fn bash_turn(commands: &[&str], answer: &str) -> Self {
        let mut script: Vec<ModelResponse> = commands
            .iter()
            .map(|command| {
                ModelResponse::ToolCalls(vec![ToolCallRequest {
                    name: BASH_TOOL_NAME.into(),
                    arguments: json!({"command": command, "description": "scripted"}),
                }])
            })
            .collect();
        script.push(ModelResponse::Final(answer.into()));
        Self::new(script)
    }
}

impl Model for ScriptedModel {
    async fn respond(&mut self, _history: &[Event]) -> ModelResponse {
        self.script
            .pop_front()
            .unwrap_or_else(|| ModelResponse::Final("done".into()))
    }
}

/// Why a turn could not complete.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The session could not be checkpointed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The model kept calling tools past the step limit.
    #[error("the model took more than {MAX_STEPS_PER_TURN} steps in one turn")]
    TooManySteps,
}

/// What a tool call returned to the model, and what its hooks did.
#[derive(Debug, Clone)]
pub struct CallRecord {
    /// The call id.
    pub call_id: String,
    /// The command the model asked for.
    pub command: String,
    /// The text the model saw.
    pub output: String,
    /// Whether it failed or was blocked.
    pub is_error: bool,
    /// The hooks that ran around it.
    pub hooks: Vec<HookRun>,
}

/// One agent: its session, model `M`, tool (with the hooks) and store; the
/// tool and the hooks run commands with `E`.
pub struct AgentLoop<M, E = LocalExecutor> {
    session: Session,
    model: M,
    tool: BashTool<E>,
    store: SessionStore,
    calls: u64,
    background: Vec<(String, BackgroundHandle)>,
    /// Every hook run so far, SessionStart included.
    pub hook_log: Vec<HookRun>,
}

impl<M: Model, E: ShellExecutor + Clone> AgentLoop<M, E> {
    /// An agent for `session`, its tool's calls run with `hooks`. Nothing is
    /// written until the first turn ends.
    pub fn new(
        session: Session,
        model: M,
        tool: BashTool<E>,
        hooks: Hooks<E>,
        store: SessionStore,
    ) -> Self {
        AgentLoop {
            session,
            model,
            tool: tool.with_hooks(hooks),
            store,
            calls: 0,
            background: Vec::new(),
            hook_log: Vec::new(),
        }
    }

    /// The session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Runs the SessionStart hooks (`startup` or `resume`), all with one
    /// overlay collected for the event.
    pub async fn start(&mut self, source: &str) {
        let event = HookEvent::SessionStart {
            source: source.into(),
        };
        let execution = ToolExecution::new(format!("hook-{}", event.name()), "hook")
            .with_agent(self.session.agent());
        let runs = self.run_hooks(&event, &execution).await;
        // What the hooks want the model to know: the session's first message.
        for text in HookVerdict::of(&runs).additional_context {
            self.session.events.push(Event::Message {
                role: "system".into(),
                text,
            });
        }
        self.hook_log.extend(runs);
    }

    /// One turn: the user's message, model steps and tool calls until the
    /// model answers, then a checkpoint of the session file.
    pub async fn run_turn(&mut self, user: &str) -> Result<Vec<CallRecord>, AgentError> {
        self.session.events.push(Event::Message {
            role: "user".into(),
            text: user.into(),
        });
        let mut records = Vec::new();
        let mut finished = false;
        for _ in 0..MAX_STEPS_PER_TURN {
            match self.model.respond(&self.session.events).await {
                ModelResponse::Final(text) => {
                    self.session.events.push(Event::Message {
                        role: "assistant".into(),
                        text,
                    });
                    finished = true;
                    break;
                }
                ModelResponse::ToolCalls(calls) => {
                    for call in calls {
                        records.push(self.call_tool(call).await);
                    }
                }
            }
        }
        self.store.checkpoint(&self.session)?;
        if finished {
            Ok(records)
        } else {
            Err(AgentError::TooManySteps)
        }
    }

    /// Waits for this agent's background commands, in start order.
    pub async fn wait_background(&mut self) -> Vec<(String, Result<ExecOutput, ExecError>)> {
        let mut done = Vec::new();
        for (call_id, handle) in self.background.drain(..) {
            done.push((call_id, handle.wait().await));
        }
        done
    }

    async fn call_tool(&mut self, call: ToolCallRequest) -> CallRecord {
        self.calls += 1;
        let call_id = format!("{}-call-{}", self.session.id(), self.calls);
        self.session.events.push(Event::ToolCall {
            call_id: call_id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        let command = call.arguments["command"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let execution = ToolExecution::new(&call_id, &call.name).with_agent(self.session.agent());
        let ran = (self.tool)
            .run(&execution, &call.name, &call.arguments)
            .await;
        let (output, is_error, hooks) = match ran {
            Ok(outcome) => {
                let runs = outcome.notes.map(|notes| notes.runs).unwrap_or_default();
                let (text, is_error) = self.bash_result(&call_id, outcome.output);
                (with_hook_context(text, &runs), is_error, runs)
            }
            Err(err) => match err.into_source::<HookBlocked>() {
                Ok(HookBlocked(verdict, runs)) => (verdict.blocked_text(), true, runs),
                // No overlay (a contributor failed): no hook ran, nor the
                // command.
                Err(err) => {
                    let why = err.message.clone();
                    let text = match call.name.as_str() {
                        BASH_TOOL_NAME => refused(err).to_string(),
                        other => BashToolError::UnknownTool(other.into()).to_string(),
                    };
                    let (pre, post) = tool_events(&call_id, &call.arguments, &text);
                    let hooks = self.tool.host().hooks().map_or_else(Vec::new, |hooks| {
                        let mut runs = hooks.not_run(&pre, &why);
                        runs.extend(hooks.not_run(&post, &why));
                        runs
                    });
                    (text, true, hooks)
                }
            },
        };
        self.hook_log.extend(hooks.iter().cloned());
        self.session.events.push(Event::ToolResult {
            call_id: call_id.clone(),
            output: output.clone(),
            is_error,
        });
        CallRecord {
            call_id,
            command,
            output,
            is_error,
            hooks,
        }
    }

    /// The hooks of `event` (not a tool call's), with one overlay collected
    /// for `execution`.
    async fn run_hooks(&self, event: &HookEvent, execution: &ToolExecution) -> Vec<HookRun> {
        let Some(hooks) = self.tool.host().hooks() else {
            return Vec::new();
        };
        let context = HookContext::of_session(&self.session);
        match self.tool.host().collect(execution).await {
            Ok(collection) => hooks.run(event, &context, &collection.overlay).await,
            Err(err) => hooks.not_run(event, &err.message),
        }
    }

    /// What a bash call gives the model, and whether it failed; a command
    /// started in the background is kept, to wait for.
    fn bash_result(&mut self, call_id: &str, called: Called) -> (String, bool) {
        let text = model_text(&called);
        if let Ok(ShellRun::Started(handle)) = called {
            self.background.push((call_id.to_string(), handle));
        }
        text
    }
}

/// A tool call's `PreToolUse` and `PostToolUse` events, the latter with
/// `output` as an error.
fn tool_events(call_id: &str, arguments: &Value, output: &str) -> (HookEvent, HookEvent) {
    let pre = HookEvent::PreToolUse {
        tool_name: HOOK_TOOL_NAME.into(),
        tool_input: arguments.clone(),
        tool_use_id: call_id.into(),
    };
    let post = HookEvent::PostToolUse {
        tool_name: HOOK_TOOL_NAME.into(),
        tool_input: arguments.clone(),
        tool_use_id: call_id.into(),
        tool_response: json!({"output": output, "is_error": true}),
    };
    (pre, post)
}

/// `text` with what the hooks of a call that ran said for the model: the
/// `PreToolUse` hooks' context, the `PostToolUse` hooks' blocking reasons
/// (feedback: the tool has run), then their context.
fn with_hook_context(mut text: String, runs: &[HookRun]) -> String {
    let (pre, post): (Vec<HookRun>, Vec<HookRun>) =
        (runs.iter().cloned()).partition(|run| run.event == "PreToolUse");
    let (pre, post) = (HookVerdict::of(&pre), HookVerdict::of(&post));
    add_context(&mut text, &pre.additional_context);
    if post.decision == Some(HookDecision::Deny) {
        add_context(&mut text, &post.reasons);
    }
    add_context(&mut text, &post.additional_context);
    text
}

/// Appends hook text for the model to a tool result, one `[hook]` line each.
fn add_context(output: &mut String, texts: &[String]) {
    for text in texts {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&format!("[hook] {}\n", text.trim_end()));
    }
}

//! The facts of one tool execution, as the host sees them.

/// Whether the caller waits for the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The caller waits.
    #[default]
    Foreground,
    /// The command runs on in the background.
    Background,
}

/// The agent that made a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    /// Session id; becomes `DSH_SESSION_ID`.
    pub session_id: String,
    /// Working directory (absolute).
    pub cwd: String,
    /// The session that spawned or forked this one.
    pub parent_session_id: Option<String>,
    /// 0 for a top-level agent.
    pub depth: u32,
}

/// One tool call. It holds no command text and no secrets: that is all a
/// contributor ever sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolExecution {
    /// This call's id.
    pub call_id: String,
    /// The outermost call's id (this call's own id when not nested).
    pub root_call_id: String,
    /// The tool, e.g. `bash`.
    pub tool: String,
    /// Foreground or background.
    pub mode: Mode,
    /// The calling agent, if any.
    pub agent: Option<Agent>,
}

impl ToolExecution {
    /// A foreground, un-nested call of `tool` with no agent.
    pub fn new(call_id: impl Into<String>, tool: impl Into<String>) -> Self {
        let call_id = call_id.into();
        ToolExecution {
            root_call_id: call_id.clone(),
            call_id,
            tool: tool.into(),
            mode: Mode::Foreground,
            agent: None,
        }
    }

    /// The same call, made by `agent`.
    pub fn with_agent(mut self, agent: Agent) -> Self {
        self.agent = Some(agent);
        self
    }

    /// The same call, in `mode`.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
}

//! The facts of one tool execution, as the host sees them.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;

use crate::input::{control_character, describe_control, escape_controls};

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
///
/// It deserializes from the reference harness's JSON shape, with the checks
/// of [`ToolExecution::from_json`], from any serde format (the Node.js addon
/// reads a JavaScript object directly).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "ExecutionJson")]
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

/// Why an execution JSON document was refused.
#[derive(Debug, thiserror::Error)]
pub enum ExecutionJsonError {
    /// Not JSON, or not the expected shape.
    #[error("invalid execution JSON: {0}")]
    Syntax(#[from] serde_json::Error),
    /// A text field holds a control character (any but TAB, as for values):
    /// these fields reach `DSH_*` values, guests and output lines.
    #[error("invalid execution JSON: field `{field}` holds control character {}", describe_control(*.character))]
    ControlCharacter {
        /// The field, as a JSON path (`agent.session.header.id`).
        field: &'static str,
        /// The first control character found.
        character: char,
    },
    /// The agent's working directory is not an absolute path.
    #[error(
        "invalid execution JSON: field `agent.session.header.cwd` must be an absolute path, \
         not `{}`",
        escape_controls(.0)
    )]
    RelativeCwd(String),
}

/// The top-level fields of the reference harness's `ToolExecution`: those
/// read here, `arguments` (never read), and the harness's own that a
/// contributor has no use for (`token`). Any other is likely a typo.
pub const KNOWN_FIELDS: [&str; 7] = [
    "callId",
    "rootCallId",
    "name",
    "arguments",
    "background",
    "agent",
    "token",
];

/// The reference harness's `ToolExecution` JSON shape. Only the fields below
/// are read; `arguments` (including any `env` or `stdin` in it) never reaches
/// a contributor.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecutionJson {
    call_id: String,
    root_call_id: Option<String>,
    name: String,
    #[serde(default)]
    background: bool,
    agent: Option<AgentJson>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AgentJson {
    session: SessionJson,
    #[serde(default)]
    depth: u32,
}

#[derive(serde::Deserialize)]
struct SessionJson {
    header: HeaderJson,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeaderJson {
    id: String,
    cwd: String,
    parent_id: Option<String>,
}

impl ToolExecution {
    /// Parses the reference harness's execution JSON:
    /// `{"callId", "rootCallId", "name", "arguments", "background",
    /// "agent": {"session": {"header": {"id", "cwd", "parentId"?}}, "depth"?}}`.
    pub fn from_json(text: &str) -> Result<Self, ExecutionJsonError> {
        Self::try_from(serde_json::from_str::<ExecutionJson>(text)?)
    }
}

impl TryFrom<ExecutionJson> for ToolExecution {
    type Error = ExecutionJsonError;

    /// Checks the text fields for control characters and the cwd for being absolute.
    fn try_from(json: ExecutionJson) -> Result<Self, ExecutionJsonError> {
        let header = json.agent.as_ref().map(|agent| &agent.session.header);
        let fields = [
            ("callId", Some(&json.call_id)),
            ("rootCallId", json.root_call_id.as_ref()),
            ("name", Some(&json.name)),
            ("agent.session.header.id", header.map(|h| &h.id)),
            ("agent.session.header.cwd", header.map(|h| &h.cwd)),
            (
                "agent.session.header.parentId",
                header.and_then(|h| h.parent_id.as_ref()),
            ),
        ];
        for (field, value) in fields {
            if let Some(character) = value.and_then(|v| control_character(v)) {
                return Err(ExecutionJsonError::ControlCharacter { field, character });
            }
        }
        if let Some(header) = header
            && !std::path::Path::new(&header.cwd).is_absolute()
        {
            return Err(ExecutionJsonError::RelativeCwd(header.cwd.clone()));
        }
        Ok(ToolExecution {
            root_call_id: json.root_call_id.unwrap_or_else(|| json.call_id.clone()),
            call_id: json.call_id,
            tool: json.name,
            mode: if json.background {
                Mode::Background
            } else {
                Mode::Foreground
            },
            agent: json.agent.map(|agent| Agent {
                session_id: agent.session.header.id,
                cwd: agent.session.header.cwd,
                parent_session_id: agent.session.header.parent_id,
                depth: agent.depth,
            }),
        })
    }
}

impl ToolExecution {
    /// [`ToolExecution::from_json`], and the top-level fields it does not
    /// know (see [`KNOWN_FIELDS`]), sorted: a caller warns about them.
    pub fn from_json_noting_unknown(text: &str) -> Result<(Self, Vec<String>), ExecutionJsonError> {
        let execution = Self::from_json(text)?;
        // It parsed as an object above, so it parses as a map here.
        let fields: BTreeMap<String, IgnoredAny> = serde_json::from_str(text)?;
        let unknown = fields
            .into_keys()
            .filter(|field| !KNOWN_FIELDS.contains(&field.as_str()))
            .collect();
        Ok((execution, unknown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_reference_harness_shape() {
        let text = r#"{"callId":"c2","rootCallId":"c1","name":"bash",
            "arguments":{"command":"env","env":{"DSH_X":"1"},"stdin":"secret"},
            "background":true,
            "agent":{"session":{"header":{"id":"s1","cwd":"/w","parentId":"s0"}},"depth":1}}"#;
        let execution = ToolExecution::from_json(text).unwrap();
        assert_eq!(
            execution,
            ToolExecution {
                call_id: "c2".into(),
                root_call_id: "c1".into(),
                tool: "bash".into(),
                mode: Mode::Background,
                agent: Some(Agent {
                    session_id: "s1".into(),
                    cwd: "/w".into(),
                    parent_session_id: Some("s0".into()),
                    depth: 1,
                }),
            }
        );
    }

    #[test]
    fn minimal_execution_has_no_agent_and_is_its_own_root() {
        let execution = ToolExecution::from_json(r#"{"callId":"c","name":"bash"}"#).unwrap();
        assert_eq!(execution, ToolExecution::new("c", "bash"));
    }

    #[test]
    fn control_characters_are_refused_naming_the_field() {
        let doc = |call: &str, header: &str| {
            format!(
                r#"{{"callId":{call},"rootCallId":"r","name":"bash","agent":{{"session":{{"header":{header}}}}}}}"#
            )
        };
        let cases = [
            (
                doc(r#""c\n""#, r#"{"id":"s","cwd":"/"}"#),
                "callId",
                r"`\n` (U+000A)",
            ),
            (
                doc(r#""c""#, r#"{"id":"s\nDSH_HOME=/evil","cwd":"/"}"#),
                "agent.session.header.id",
                r"`\n` (U+000A)",
            ),
            (
                doc(r#""c""#, r#"{"id":"s\u0000","cwd":"/"}"#),
                "agent.session.header.id",
                r"`\0` (U+0000)",
            ),
            (
                doc(r#""c""#, r#"{"id":"s","cwd":"/\r"}"#),
                "agent.session.header.cwd",
                r"`\r` (U+000D)",
            ),
            (
                doc(r#""c""#, r#"{"id":"s","cwd":"/","parentId":"p\u001b"}"#),
                "agent.session.header.parentId",
                r"`\u{1b}` (U+001B)",
            ),
        ];
        for (text, field, shown) in cases {
            let message = ToolExecution::from_json(&text).unwrap_err().to_string();
            assert_eq!(
                message,
                format!("invalid execution JSON: field `{field}` holds control character {shown}")
            );
        }
        let root = r#"{"callId":"c","rootCallId":"r\u0085","name":"bash"}"#;
        let err = ToolExecution::from_json(root).unwrap_err();
        assert!(matches!(
            err,
            ExecutionJsonError::ControlCharacter {
                field: "rootCallId",
                character: '\u{85}'
            }
        ));
        let tool = r#"{"callId":"c","name":"ba\u007fsh"}"#;
        let err = ToolExecution::from_json(tool).unwrap_err();
        assert!(matches!(
            err,
            ExecutionJsonError::ControlCharacter { field: "name", .. }
        ));
        let tab = r#"{"callId":"c\td","name":"bash"}"#;
        assert_eq!(ToolExecution::from_json(tab).unwrap().call_id, "c\td");
    }

    #[test]
    fn unknown_fields_are_named_and_the_harness_own_pass() {
        let text = r#"{"callId":"c","name":"bash","token":"t","agnet":{},"zeta":1}"#;
        let (execution, unknown) = ToolExecution::from_json_noting_unknown(text).unwrap();
        assert_eq!(execution, ToolExecution::new("c", "bash"));
        assert_eq!(unknown, ["agnet", "zeta"]);
    }

    #[test]
    fn a_relative_cwd_is_refused() {
        for cwd in ["work", "", "./w", "~/w"] {
            let text = format!(
                r#"{{"callId":"c","name":"bash","agent":{{"session":{{"header":{{"id":"s","cwd":"{cwd}"}}}}}}}}"#
            );
            let err = ToolExecution::from_json(&text).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "invalid execution JSON: field `agent.session.header.cwd` must be an \
                     absolute path, not `{cwd}`"
                )
            );
        }
    }

    #[test]
    fn the_example_file_parses_with_no_unknown_field() {
        let text = include_str!("../../../contributors/execution.json");
        let (execution, unknown) = ToolExecution::from_json_noting_unknown(text).unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert!(execution.agent.is_some());
    }

    #[test]
    fn malformed_json_names_the_problem() {
        let err = ToolExecution::from_json(r#"{"name":"bash"}"#).unwrap_err();
        assert!(err.to_string().contains("missing field `callId`"), "{err}");
    }
}

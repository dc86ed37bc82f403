//! The facts of one tool execution, as the host sees them.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;

use dsh_env_support::input::{control_character, describe_control, escape_controls};

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
    /// Working directory (absolute), when the session has one (the
    /// reference harness's `SessionHeader.cwd` is optional).
    pub cwd: Option<String>,
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

    /// The calling agent's working directory, if there is an agent with one.
    pub fn agent_cwd(&self) -> Option<&str> {
        self.agent.as_ref().and_then(|agent| agent.cwd.as_deref())
    }
}

/// Why an execution JSON document was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// A field under a name dsh-env used before it followed the reference
    /// harness's `SessionHeader`.
    #[error(
        "invalid execution JSON: field `{old}` is not the reference harness's; \
         it is `{new}` there"
    )]
    Renamed {
        /// The old name, as a JSON path.
        old: &'static str,
        /// The reference harness's name, as a JSON path.
        new: &'static str,
    },
}

/// The top-level fields of the reference harness's `ToolExecution`
/// (`@deepseek-ai/dsh-tools`): those read here, `arguments` (read only for
/// the bash tool's `run_in_background`), the harness's own that a
/// contributor has no use for (`token`, `parent`, `signal`), and dsh-env's
/// `background`. Any other is likely a typo.
pub const KNOWN_FIELDS: [&str; 9] = [
    "callId",
    "rootCallId",
    "name",
    "arguments",
    "background",
    "agent",
    "token",
    "parent",
    "signal",
];

/// The fields of the reference harness's `SessionHeader`
/// (`@deepseek-ai/dsh-session`): `id`, `cwd`, `parentSession` and
/// `delegationDepth` are read, the others pass quietly.
pub const KNOWN_HEADER_FIELDS: [&str; 9] = [
    "version",
    "id",
    "createdAt",
    "cwd",
    "parentSession",
    "seedLength",
    "origin",
    "delegationDepth",
    "agentPreset",
];

/// The reference harness's `ToolExecution` JSON shape. Only the fields below
/// are read; `arguments` (including any `env` or `stdin` in it) never reaches
/// a contributor: only its `run_in_background` flag becomes the mode.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecutionJson {
    call_id: String,
    root_call_id: Option<String>,
    name: String,
    #[serde(default)]
    background: bool,
    #[serde(default)]
    arguments: Arguments,
    agent: Option<AgentJson>,
}

/// The reference's live `Agent` as data: its session's header. Its other
/// members (`id`, `options`, `inbox`, …) are the harness's own.
#[derive(serde::Deserialize)]
struct AgentJson {
    session: SessionJson,
    /// dsh-env's old name for the header's `delegationDepth`.
    depth: Option<IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct SessionJson {
    header: HeaderJson,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeaderJson {
    id: String,
    cwd: Option<String>,
    parent_session: Option<String>,
    /// Absent for a top-level session.
    #[serde(default)]
    delegation_depth: u32,
    /// dsh-env's old name for `parentSession`.
    parent_id: Option<IgnoredAny>,
}

/// A tool's `arguments`, which the tool validates: only a bash call's
/// `run_in_background: true` is read (it is how the reference harness asks
/// for a background command); anything else, of any type, is skipped without
/// being kept.
#[derive(Default)]
struct Arguments {
    run_in_background: bool,
}

impl<'de> serde::Deserialize<'de> for Arguments {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Arguments;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a tool's arguments")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Arguments, A::Error> {
                let mut arguments = Arguments::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "run_in_background" {
                        let value: serde_json::Value = map.next_value()?;
                        arguments.run_in_background = value == serde_json::Value::Bool(true);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(arguments)
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Arguments, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Arguments::default())
            }

            fn visit_unit<E>(self) -> Result<Arguments, E> {
                Ok(Arguments::default())
            }

            fn visit_none<E>(self) -> Result<Arguments, E> {
                Ok(Arguments::default())
            }

            fn visit_bool<E>(self, _: bool) -> Result<Arguments, E> {
                Ok(Arguments::default())
            }

            fn visit_i64<E>(self, _: i64) -> Result<Arguments, E> {
                Ok(Arguments::default())
            }

            fn visit_u64<E>(self, _: u64) -> Result<Arguments, E> {
                Ok(Arguments::default())
            }

            fn visit_f64<E>(self, _: f64) -> Result<Arguments, E> {
                Ok(Arguments::default())
            }

            fn visit_str<E>(self, _: &str) -> Result<Arguments, E> {
                Ok(Arguments::default())
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl ToolExecution {
    /// Parses the reference harness's execution JSON:
    /// `{"callId", "rootCallId"?, "name", "arguments"?, "agent"?: {"session":
    /// {"header": {"id", "cwd"?, "parentSession"?, "delegationDepth"?, …}}}}`.
    pub fn from_json(text: &str) -> Result<Self, ExecutionJsonError> {
        Self::try_from(serde_json::from_str::<ExecutionJson>(text)?)
    }
}

impl TryFrom<ExecutionJson> for ToolExecution {
    type Error = ExecutionJsonError;

    /// Checks the text fields for control characters and the cwd for being
    /// absolute, and refuses dsh-env's old field names.
    fn try_from(json: ExecutionJson) -> Result<Self, ExecutionJsonError> {
        if let Some(agent) = &json.agent {
            if agent.depth.is_some() {
                return Err(ExecutionJsonError::Renamed {
                    old: "agent.depth",
                    new: "agent.session.header.delegationDepth",
                });
            }
            if agent.session.header.parent_id.is_some() {
                return Err(ExecutionJsonError::Renamed {
                    old: "agent.session.header.parentId",
                    new: "agent.session.header.parentSession",
                });
            }
        }
        let header = json.agent.as_ref().map(|agent| &agent.session.header);
        let fields = [
            ("callId", Some(&json.call_id)),
            ("rootCallId", json.root_call_id.as_ref()),
            ("name", Some(&json.name)),
            ("agent.session.header.id", header.map(|h| &h.id)),
            (
                "agent.session.header.cwd",
                header.and_then(|h| h.cwd.as_ref()),
            ),
            (
                "agent.session.header.parentSession",
                header.and_then(|h| h.parent_session.as_ref()),
            ),
        ];
        for (field, value) in fields {
            if let Some(character) = value.and_then(|v| control_character(v)) {
                return Err(ExecutionJsonError::ControlCharacter { field, character });
            }
        }
        if let Some(cwd) = header.and_then(|h| h.cwd.as_ref())
            && !std::path::Path::new(cwd).is_absolute()
        {
            return Err(ExecutionJsonError::RelativeCwd(cwd.clone()));
        }
        Ok(ToolExecution {
            root_call_id: json.root_call_id.unwrap_or_else(|| json.call_id.clone()),
            call_id: json.call_id,
            tool: json.name,
            mode: if json.background || json.arguments.run_in_background {
                Mode::Background
            } else {
                Mode::Foreground
            },
            agent: json.agent.map(|agent| {
                let header = agent.session.header;
                Agent {
                    session_id: header.id,
                    cwd: header.cwd,
                    parent_session_id: header.parent_session,
                    depth: header.delegation_depth,
                }
            }),
        })
    }
}

/// Just enough of an execution to find its header's field names.
#[derive(serde::Deserialize)]
struct HeaderProbe {
    agent: Option<AgentProbe>,
}

#[derive(serde::Deserialize)]
struct AgentProbe {
    session: Option<SessionProbe>,
}

#[derive(serde::Deserialize)]
struct SessionProbe {
    header: Option<BTreeMap<String, IgnoredAny>>,
}

impl ToolExecution {
    /// [`ToolExecution::from_json`], and the fields it does not know, as
    /// JSON paths, sorted: top-level ones (see [`KNOWN_FIELDS`]) and the
    /// session header's (see [`KNOWN_HEADER_FIELDS`]). A caller warns about
    /// them.
    pub fn from_json_noting_unknown(text: &str) -> Result<(Self, Vec<String>), ExecutionJsonError> {
        let execution = Self::from_json(text)?;
        // It parsed as an object above, so it parses as a map here.
        let fields: BTreeMap<String, IgnoredAny> = serde_json::from_str(text)?;
        let mut unknown: Vec<String> = fields
            .into_keys()
            .filter(|field| !KNOWN_FIELDS.contains(&field.as_str()))
            .collect();
        let probe: HeaderProbe = serde_json::from_str(text)?;
        let header = probe.agent.and_then(|a| a.session).and_then(|s| s.header);
        unknown.extend(
            header
                .into_iter()
                .flat_map(BTreeMap::into_keys)
                .filter(|field| !KNOWN_HEADER_FIELDS.contains(&field.as_str()))
                .map(|field| format!("agent.session.header.{field}")),
        );
        unknown.sort();
        Ok((execution, unknown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_reference_harness_shape() {
        let text = r#"{"callId":"c2","rootCallId":"c1","name":"bash",
            "arguments":{"command":"env","env":{"DSH_X":"1"},"stdin":"secret","run_in_background":true},
            "signal":{},
            "agent":{"session":{"header":{"version":1,"id":"s1","createdAt":1764000000000,
                "cwd":"/w","parentSession":"s0","seedLength":4,"origin":"subagent",
                "delegationDepth":1,"agentPreset":"coder"}}}}"#;
        let (execution, unknown) = ToolExecution::from_json_noting_unknown(text).unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(
            execution,
            ToolExecution {
                call_id: "c2".into(),
                root_call_id: "c1".into(),
                tool: "bash".into(),
                mode: Mode::Background,
                agent: Some(Agent {
                    session_id: "s1".into(),
                    cwd: Some("/w".into()),
                    parent_session_id: Some("s0".into()),
                    depth: 1,
                }),
            }
        );
    }

    #[test]
    fn a_header_without_cwd_or_depth_is_a_top_level_agent_with_no_cwd() {
        let text = r#"{"callId":"c","name":"bash","arguments":"not an object",
            "agent":{"session":{"header":{"version":1,"id":"s","createdAt":0}}}}"#;
        let execution = ToolExecution::from_json(text).unwrap();
        assert_eq!(execution.mode, Mode::Foreground);
        let agent = execution.agent.unwrap();
        assert_eq!(
            (agent.cwd, agent.depth, agent.parent_session_id),
            (None, 0, None)
        );
    }

    #[test]
    fn the_old_names_are_refused_naming_the_reference_harness_names() {
        let header = r#"{"callId":"c","name":"bash","agent":{"session":{"header":{"id":"s","parentId":"p"}}}}"#;
        assert_eq!(
            ToolExecution::from_json(header).unwrap_err().to_string(),
            "invalid execution JSON: field `agent.session.header.parentId` is not the \
             reference harness's; it is `agent.session.header.parentSession` there"
        );
        let depth =
            r#"{"callId":"c","name":"bash","agent":{"session":{"header":{"id":"s"}},"depth":1}}"#;
        assert!(matches!(
            ToolExecution::from_json(depth).unwrap_err(),
            ExecutionJsonError::Renamed {
                old: "agent.depth",
                new: "agent.session.header.delegationDepth"
            }
        ));
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
                doc(
                    r#""c""#,
                    r#"{"id":"s","cwd":"/","parentSession":"p\u001b"}"#,
                ),
                "agent.session.header.parentSession",
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
        let text = r#"{"callId":"c","name":"bash","token":"t","parent":"p","agnet":{},"zeta":1,
            "agent":{"session":{"header":{"id":"s","parentSesion":"typo"}}}}"#;
        let (execution, unknown) = ToolExecution::from_json_noting_unknown(text).unwrap();
        assert_eq!(execution.agent.unwrap().parent_session_id, None);
        assert_eq!(
            unknown,
            ["agent.session.header.parentSesion", "agnet", "zeta"]
        );
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

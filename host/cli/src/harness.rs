//! What the adapters for other agent harnesses share (`dsh-env setup`,
//! `dsh-env hook`, `serve`'s `shell_env`): the harnesses, the execution a
//! harness's call maps to, and the change a call's shell environment needs
//! to become what `dsh-env run` would give it, as data or as a shell line.

use std::collections::BTreeMap;
use std::ffi::OsString;

use dsh_env::{EnvironmentPolicy, ExecutionJsonError, Overlay, ToolExecution};
use dsh_env_support::input::escape_controls;
use serde_json::json;

use crate::manifests::shell_quoted;

/// An agent harness that dsh-env can be wired into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Harness {
    /// Claude Code: a `PreToolUse` command hook on `Bash`.
    ClaudeCode,
    /// Codex: a `PreToolUse` hook on `Bash` in `hooks.json`.
    Codex,
    /// OpenCode: a plugin whose `shell.env` hook sets the call's environment.
    Opencode,
    /// Gemini CLI: a `BeforeTool` command hook on `run_shell_command`.
    Gemini,
}

impl Harness {
    /// Its name on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "claude-code",
            Harness::Codex => "codex",
            Harness::Opencode => "opencode",
            Harness::Gemini => "gemini",
        }
    }
}

/// The execution of one shell call a harness is about to make: the bash
/// tool, called as `call_id` in session `session_id` working in `cwd`, by
/// the subagent `subagent` of that session if a subagent makes it (its own
/// session, one delegation below). It goes through the reference harness's
/// JSON shape, so that every check an execution file gets (control
/// characters, an absolute cwd) applies.
pub(crate) fn execution(
    call_id: &str,
    session_id: &str,
    subagent: Option<&str>,
    cwd: Option<&str>,
    background: bool,
) -> Result<ToolExecution, ExecutionJsonError> {
    let header = match subagent {
        None => json!({"id": session_id, "cwd": cwd}),
        Some(agent) => json!({"id": agent, "cwd": cwd, "parentSession": session_id,
            "delegationDepth": 1}),
    };
    let json = json!({
        "callId": call_id,
        "name": "bash",
        "arguments": {"run_in_background": background},
        "agent": {"session": {"header": header}},
    });
    Ok(serde_json::from_value::<ToolExecution>(json)?)
}

/// How a harness's shell environment must change for one call: the
/// variables `dsh-env run` would not pass on, and those it would set.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct EnvChanges {
    /// Inherited names to remove, sorted.
    pub(crate) unset: Vec<String>,
    /// Names to set, with their values: `[environment] set`, then the overlay.
    pub(crate) set: BTreeMap<String, String>,
}

impl EnvChanges {
    /// The changes that turn `inherited` (the environment the harness gives
    /// its shell, as it gave it to this process) into what `dsh-env run`
    /// builds from it under `policy` with `overlay`, less the terminal
    /// settings (the harness keeps its own): an inherited variable the policy
    /// or the scrub keeps out is unset, `set` and the overlay are set.
    pub(crate) fn new(
        inherited: impl IntoIterator<Item = (OsString, OsString)>,
        policy: &EnvironmentPolicy,
        overlay: &Overlay,
    ) -> Result<Self, String> {
        let mut unset = Vec::new();
        for (name, value) in inherited {
            if let Some(rule) = policy.inherited_rule(&name, &value) {
                let Ok(name) = name.into_string() else {
                    return Err(format!(
                        "cannot remove an inherited variable whose name is not UTF-8 ({})",
                        rule.rule()
                    ));
                };
                unset.push(name);
            }
        }
        unset.sort();
        let mut set: BTreeMap<String, String> = (policy.set.iter())
            .filter(|(name, value)| policy.set_rule(name, value).is_none())
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        set.extend(
            overlay
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), v.to_string())),
        );
        Ok(EnvChanges { unset, set })
    }

    /// The line that makes these changes in bash, to run before a command
    /// on a line of its own: `unset -v A B; export K='v' …`. Every value is
    /// quoted (a `'` as `'\''`), so none can add shell syntax, and nothing
    /// outside quotes is `$(`, a backtick, `<(` or `>(`. A name that is not
    /// a shell identifier cannot be removed or set by a shell line: an
    /// error names it.
    pub(crate) fn shell_line(&self) -> Result<String, String> {
        let mut line = String::new();
        for name in &self.unset {
            if !is_identifier(name) {
                return Err(format!(
                    "cannot remove the inherited variable `{}` from the command: its name is not \
                     a shell identifier (remove it from the harness's environment)",
                    escape_controls(name)
                ));
            }
        }
        if !self.unset.is_empty() {
            line = format!("unset -v {}; ", self.unset.join(" "));
        }
        if !self.set.is_empty() {
            line.push_str("export");
            for (name, value) in &self.set {
                if !is_identifier(name) {
                    return Err(format!(
                        "cannot set `{}` in the command: its name is not a shell identifier",
                        escape_controls(name)
                    ));
                }
                line.push(' ');
                line.push_str(name);
                line.push('=');
                line.push_str(&shell_quoted(value));
            }
        }
        Ok(line)
    }
}

/// Whether `name` is a name bash can `unset` and `export`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_line_quotes_every_value_and_refuses_odd_names() {
        let changes = EnvChanges {
            unset: vec!["A_TOKEN".into(), "DSH_OLD".into()],
            set: BTreeMap::from([
                ("DSH_A".into(), "it's $(x) `y`; \"z\"".into()),
                ("DSH_B".into(), String::new()),
            ]),
        };
        assert_eq!(
            changes.shell_line().unwrap(),
            r#"unset -v A_TOKEN DSH_OLD; export DSH_A='it'\''s $(x) `y`; "z"' DSH_B=''"#
        );
        let odd = EnvChanges {
            unset: vec!["npm_config_//r/:_authToken".into()],
            ..EnvChanges::default()
        };
        assert!(
            odd.shell_line()
                .unwrap_err()
                .contains("not a shell identifier")
        );
    }
}

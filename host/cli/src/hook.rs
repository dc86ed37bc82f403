//! `dsh-env hook <harness>`: the adapter a harness runs before each shell
//! call (`dsh-env setup` wires it in). It reads the harness's hook input on
//! stdin, maps it to an execution, collects the overlay as `run` does, and
//! answers in the harness's own form:
//!
//! - Claude Code, Codex and Gemini CLI get the command rewritten: a first
//!   line `unset -v …; export K='v' …` ([`EnvChanges::shell_line`]), then
//!   the original command unchanged, so its exit code, output, stdin,
//!   heredocs and a `cd` the harness tracks are its own.
//! - OpenCode's plugin gets the changes as data (`{"set", "unset"}`), which
//!   it applies to the call's real environment.
//!
//! A failure (a contributor under `on_error = "fail"`, a manifest that does
//! not load, input that is not the harness's) is an answer too: one that
//! blocks the call with one line naming what failed, which the harness
//! shows to the model. The command never runs without its keys. Hooks of
//! the dsh-env manifest are not run: the harness runs its own.

use std::process::ExitCode;

use dsh_env::ToolExecution;
use dsh_env_support::input::{MAX_HOOKS_BYTES, escape_controls, read_capped, utf8};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::failure::{CliResult, Failure};
use crate::harness::{EnvChanges, Harness, execution};
use crate::setup::{Setup, Uses};

/// The arguments of `hook`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The harness whose hook input comes on stdin.
    harness: Harness,
    #[command(flatten)]
    setup: Setup,
}

/// What Claude Code, Codex and Gemini CLI send a tool hook (the fields read).
#[derive(Deserialize)]
struct ToolHookInput {
    session_id: String,
    cwd: Option<String>,
    tool_name: Option<String>,
    /// Claude Code's and Codex's id of the call; Gemini CLI sends none.
    tool_use_id: Option<String>,
    tool_input: Map<String, Value>,
}

/// What OpenCode's `shell.env` hook gets (the plugin passes it on).
#[derive(Deserialize)]
struct OpenCodeInput {
    #[serde(rename = "sessionID")]
    session_id: String,
    #[serde(rename = "callID")]
    call_id: String,
    cwd: Option<String>,
}

/// A harness's shell call, mapped: the execution, and for a rewrite the
/// tool input to rewrite.
struct Call {
    execution: ToolExecution,
    /// The tool input with its `command` (none for OpenCode).
    tool_input: Option<Map<String, Value>>,
}

/// Answers the harness on stdout; exit 0 whenever an answer was given,
/// blocking or not.
pub(crate) async fn run(args: Args) -> CliResult<ExitCode> {
    let harness = args.harness;
    let answer = match answer(&args).await {
        Ok(Some(answer)) => answer,
        // Not a shell call: nothing to change.
        Ok(None) => return Ok(ExitCode::SUCCESS),
        Err(failure) => {
            let reason = format!("dsh-env: {}", failure.message.replace('\n', " "));
            blocked(harness, &escape_controls(&reason))
        }
    };
    println!("{answer}");
    Ok(ExitCode::SUCCESS)
}

/// The answer that lets the call run with the overlay, `None` when the input
/// is not a shell call.
async fn answer(args: &Args) -> CliResult<Option<Value>> {
    let text = read_capped(std::io::stdin().lock(), MAX_HOOKS_BYTES)
        .and_then(utf8)
        .map_err(|e| Failure::config(format!("cannot read the hook input from stdin: {e}")))?;
    let Some(call) = map_input(args.harness, &text)? else {
        return Ok(None);
    };
    let host = args.setup.open(Uses::once()).await?.host;
    let collection = host.collect(&call.execution).await?;
    for omitted in &collection.omitted {
        eprintln!(
            "dsh-env: warning: omitted: {}",
            escape_controls(&omitted.to_string())
        );
    }
    let changes = EnvChanges::new(std::env::vars_os(), host.environment(), &collection.overlay)
        .map_err(Failure::runtime)?;
    let Some(mut tool_input) = call.tool_input else {
        return Ok(Some(json!({"set": changes.set, "unset": changes.unset})));
    };
    let line = changes.shell_line().map_err(Failure::runtime)?;
    let command = tool_input
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let rewritten = format!("{line}\n{command}");
    Ok(Some(match args.harness {
        Harness::Gemini => json!({"hookSpecificOutput": {"tool_input": {"command": rewritten}}}),
        harness => {
            tool_input.insert("command".into(), Value::String(rewritten));
            let mut output = json!({"hookEventName": "PreToolUse", "updatedInput": tool_input});
            // Codex takes a rewrite only beside "allow", which there is not
            // an approval: its approval policy and sandbox still judge the
            // command. Claude Code's "allow" would skip the user's
            // permission prompt, so it gets no decision: its permission
            // rules judge the rewritten command.
            if harness == Harness::Codex {
                output["permissionDecision"] = json!("allow");
            }
            json!({"hookSpecificOutput": output})
        }
    }))
}

/// The harness's input mapped to a call, `None` when it is not the harness's
/// shell tool.
fn map_input(harness: Harness, text: &str) -> CliResult<Option<Call>> {
    let invalid = |e: serde_json::Error| {
        Failure::config(format!("the hook input is not {}'s: {e}", harness.name()))
    };
    let bad_execution = |e| Failure::config(format!("the hook input: {e}"));
    if harness == Harness::Opencode {
        let input: OpenCodeInput = serde_json::from_str(text).map_err(invalid)?;
        let execution = execution(
            &input.call_id,
            &input.session_id,
            input.cwd.as_deref(),
            false,
        )
        .map_err(bad_execution)?;
        return Ok(Some(Call {
            execution,
            tool_input: None,
        }));
    }
    let input: ToolHookInput = serde_json::from_str(text).map_err(invalid)?;
    let shell_tool = match harness {
        Harness::Gemini => "run_shell_command",
        _ => "Bash",
    };
    if input
        .tool_name
        .as_deref()
        .is_some_and(|name| name != shell_tool)
    {
        return Ok(None);
    }
    if !input
        .tool_input
        .get("command")
        .is_some_and(Value::is_string)
    {
        return Err(Failure::config(
            "the hook input has no tool_input.command string",
        ));
    }
    let flag = |name: &str| input.tool_input.get(name) == Some(&Value::Bool(true));
    let (call_id, cwd, background) = match harness {
        // Gemini CLI names no call: each gets a fresh id of its own.
        Harness::Gemini => {
            let dir = input.tool_input.get("dir_path").and_then(Value::as_str);
            let cwd = match (input.cwd.as_deref(), dir) {
                (Some(cwd), Some(dir)) => Some(
                    std::path::Path::new(cwd)
                        .join(dir)
                        .to_string_lossy()
                        .into_owned(),
                ),
                (cwd, _) => cwd.map(str::to_string),
            };
            (uuid::Uuid::now_v7().to_string(), cwd, flag("is_background"))
        }
        _ => {
            let Some(id) = input.tool_use_id.clone() else {
                return Err(Failure::config("the hook input has no tool_use_id"));
            };
            (id, input.cwd.clone(), flag("run_in_background"))
        }
    };
    let execution = execution(&call_id, &input.session_id, cwd.as_deref(), background)
        .map_err(bad_execution)?;
    Ok(Some(Call {
        execution,
        tool_input: Some(input.tool_input),
    }))
}

/// The answer that blocks the call, giving `reason` to the model.
fn blocked(harness: Harness, reason: &str) -> Value {
    match harness {
        Harness::ClaudeCode | Harness::Codex => json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }}),
        Harness::Gemini => json!({"decision": "deny", "reason": reason}),
        Harness::Opencode => json!({"error": reason}),
    }
}

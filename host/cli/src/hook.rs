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

mod server;

use std::process::ExitCode;
use std::sync::Arc;

use dsh_env::ToolExecution;
use dsh_env_harness::host::Host;
use dsh_env_support::input::{MAX_HOOKS_BYTES, escape_controls, read_capped, utf8};
use serde::{Deserialize, Serialize};
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
    /// Be the kept-alive server the hook starts (internal).
    #[arg(long, hide = true)]
    serve: bool,
}

/// What Claude Code, Codex and Gemini CLI send a tool hook (the fields read).
#[derive(Deserialize)]
struct ToolHookInput {
    session_id: String,
    cwd: Option<String>,
    tool_name: Option<String>,
    /// Claude Code's and Codex's id of the call; Gemini CLI sends none.
    tool_use_id: Option<String>,
    /// Claude Code's id of the subagent making the call, if one does.
    agent_id: Option<String>,
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
/// blocking or not. The answer comes from the kept-alive server when one
/// answers ([`server`]), else from this process, which then starts one.
pub(crate) async fn run(args: Args) -> CliResult<ExitCode> {
    if args.serve {
        return server::serve(args).await;
    }
    let harness = args.harness;
    let reply = match read_input() {
        Err(failure) => Reply::blocked(harness, &failure),
        Ok(input) => {
            let endpoint = server::Endpoint::for_this_process(&args.setup);
            match endpoint.as_ref().map(|e| e.ask(harness, &input)) {
                Some(Ok(reply)) => {
                    tracing::info!("answered by the hook server");
                    reply
                }
                unreached => {
                    let reply = respond(harness, &input, Hosts::Once(&args.setup)).await;
                    if let (Some(endpoint), Some(Err(server::Unreached::Absent))) =
                        (&endpoint, unreached)
                        && endpoint.start(harness, &args.setup)
                    {
                        tracing::info!("answered here, and started a hook server");
                    }
                    reply
                }
            }
        }
    };
    for warning in &reply.warnings {
        eprintln!("dsh-env: warning: {}", escape_controls(warning));
    }
    if let Some(answer) = reply.answer {
        println!("{answer}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The hook input on stdin.
fn read_input() -> CliResult<String> {
    read_capped(std::io::stdin().lock(), MAX_HOOKS_BYTES)
        .and_then(utf8)
        .map_err(|e| Failure::config(format!("cannot read the hook input from stdin: {e}")))
}

/// What the hook says: the answer for the harness (none when the input is
/// not a shell call) and warnings for stderr.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Reply {
    answer: Option<Value>,
    warnings: Vec<String>,
}

impl Reply {
    /// The answer that blocks the call, naming `failure`.
    fn blocked(harness: Harness, failure: &Failure) -> Reply {
        let reason = format!("dsh-env: {}", failure.message.replace('\n', " "));
        Reply {
            answer: Some(blocked(harness, &escape_controls(&reason))),
            warnings: Vec::new(),
        }
    }
}

/// Where [`respond`] gets its host.
enum Hosts<'a> {
    /// Opened for this one answer.
    Once(&'a Setup),
    /// The server's, kept while its files stay as they were.
    Kept(&'a server::Kept),
}

impl Hosts<'_> {
    async fn host(&self) -> CliResult<Arc<Host>> {
        match self {
            Hosts::Once(setup) => Ok(Arc::new(setup.open(Uses::once()).await?.host)),
            Hosts::Kept(kept) => kept.host().await,
        }
    }
}

/// The reply to `input`: the call allowed with the overlay, or blocked.
async fn respond(harness: Harness, input: &str, hosts: Hosts<'_>) -> Reply {
    answer(harness, input, hosts)
        .await
        .unwrap_or_else(|failure| Reply::blocked(harness, &failure))
}

/// The answer that lets the call run with the overlay, `None` when the input
/// is not a shell call.
async fn answer(harness: Harness, input: &str, hosts: Hosts<'_>) -> CliResult<Reply> {
    let Some(call) = map_input(harness, input)? else {
        return Ok(Reply {
            answer: None,
            warnings: Vec::new(),
        });
    };
    let host = hosts.host().await?;
    let collection = host.collect(&call.execution).await?;
    let warnings = (collection.omitted.iter())
        .map(|omitted| format!("omitted: {omitted}"))
        .collect();
    let changes = EnvChanges::new(std::env::vars_os(), host.environment(), &collection.overlay)
        .map_err(Failure::runtime)?;
    let reply = |answer| Reply {
        answer: Some(answer),
        warnings,
    };
    let Some(mut tool_input) = call.tool_input else {
        return Ok(reply(json!({"set": changes.set, "unset": changes.unset})));
    };
    let line = changes.shell_line().map_err(Failure::runtime)?;
    let command = tool_input
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let rewritten = format!("{line}\n{command}");
    Ok(reply(match harness {
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
            None,
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
    // Only Claude Code names a subagent (an empty id is none).
    let subagent =
        (input.agent_id.as_deref()).filter(|id| harness == Harness::ClaudeCode && !id.is_empty());
    let execution = execution(
        &call_id,
        &input.session_id,
        subagent,
        cwd.as_deref(),
        background,
    )
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

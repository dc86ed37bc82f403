//! `dsh-env run`: a command with the overlay, on this terminal.
//!
//! Exit codes, as `env`, `timeout` and `docker run` keep theirs apart from
//! the command's: the command's own code; 128+n when a signal n killed it;
//! 124 when it timed out; 125 when dsh-env or a contributor failed, or a
//! `PreToolUse` hook blocked it, and the command did not run. SIGINT,
//! SIGQUIT, SIGTERM and SIGHUP sent to dsh-env are passed on to the command.
//!
//! With hooks (`--hooks`, or the manifest's `hooks`), the `PreToolUse` hooks
//! run once the overlay is collected, with it (a block is exit 125, naming
//! its reasons, and the command does not run), and the `PostToolUse` hooks
//! after the command ends (or has started, with `--background`); what they
//! say is printed on stderr as `[hook]` lines. The bash call is the host's
//! ([`dsh_env_harness::host::Host::run_bash`]); this module only runs the
//! command on the terminal.

use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use dsh_env::Mode;
use dsh_env_harness::executor::shell_command;
use dsh_env_harness::hooks::PermissionMode;
use dsh_env_harness::host::{BashRequest, BashRunner, HostError, HostErrorCode, Ran};
use dsh_env_harness::{ExecError, ShellExecRequest};
use dsh_env_support::input::escape_controls;
use serde_json::json;

use crate::failure::{CliResult, Failure, TIMED_OUT};
use crate::manifests::shell_quoted;
use crate::setup::{Call, HooksArg, Uses, parse_env_pair};

/// Exit code for dsh-env's own failure (a contributor's included), when the
/// command did not run.
pub(crate) const OWN_FAILURE: u8 = 125;

/// The arguments of `run`.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    call: Call,
    #[command(flatten)]
    hooks: HooksArg,
    /// Claude Code's permission mode, sent to hooks as `permission_mode`
    /// (default, plan, acceptEdits, dontAsk, bypassPermissions); without
    /// it the payload has none.
    #[arg(long, value_name = "MODE")]
    permission_mode: Option<PermissionMode>,
    /// An ordinary variable for the command, NAME=VALUE (repeatable; no DSH_* names).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env_pair)]
    env: Vec<(String, String)>,
    /// Start the command detached as a background call (contributors see
    /// mode=background), print its pid on stderr and return at once; it
    /// keeps stdout and stderr, gets no stdin and no timeout.
    #[arg(long)]
    background: bool,
    /// Kill the command after this many seconds (exit code 124): 1 to 86400.
    #[arg(long, default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=dsh_env_harness::MAX_TIMEOUT.as_secs()))]
    timeout_secs: u64,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Runs the command with this process's stdin, stdout and stderr; its exit
/// code is the command's (see the module's doc for dsh-env's own codes).
pub(crate) async fn run(args: Args) -> CliResult<ExitCode> {
    run_command(args)
        .await
        .map_err(|failure| match failure.code {
            TIMED_OUT => failure,
            _ => Failure {
                code: OWN_FAILURE,
                ..failure
            },
        })
}

/// [`run`], with dsh-env's failures still in their usual codes: the
/// host's bash call, run on this terminal.
async fn run_command(args: Args) -> CliResult<ExitCode> {
    let execution = args.call.execution()?;
    let uses = Uses {
        hooks: Some(&args.hooks),
        ..Uses::once()
    };
    let host = args.call.setup.open(uses).await?.host;
    let mut call = BashRequest::new(execution, shell_command_line(&args.command));
    call.env = args.env.into_iter().collect();
    call.timeout = Some(Duration::from_secs(args.timeout_secs));
    call.permission_mode = args.permission_mode;
    call.background = args.background;
    let outcome = host.run_bash(call, &Terminal).await?;
    for text in (outcome.notes.iter()).flat_map(|notes| notes.context.iter().chain(&notes.feedback))
    {
        eprintln!("dsh-env: [hook] {}", escape_controls(text.trim_end()));
    }
    match outcome.output {
        Ended::Exited(status) => Ok(ExitCode::from(exit_code(status))),
        Ended::Started => Ok(ExitCode::SUCCESS),
        Ended::TimedOut => Err(HostError::new(
            HostErrorCode::TimedOut,
            format!("the command timed out after {} s", args.timeout_secs),
        )
        .into()),
    }
}

/// How the command ended, for `run`'s exit code.
enum Ended {
    /// It exited, or a signal killed it.
    Exited(std::process::ExitStatus),
    /// It ran past its timeout and was killed.
    TimedOut,
    /// It was started in the background.
    Started,
}

/// `run`'s way of running a command: on this terminal, with dsh-env's
/// signals passed on; detached in its own process group in the background.
struct Terminal;

impl BashRunner for Terminal {
    type Output = Ended;

    async fn run(&self, request: ShellExecRequest, mode: Mode) -> Result<Ran<Ended>, ExecError> {
        let mut command = shell_command(&request)?;
        let spawn_failure = |source| ExecError::Spawn {
            workdir: request.workdir.display().to_string(),
            source,
        };
        if mode == Mode::Background {
            // Its own process group: the terminal's Ctrl-C is not for it.
            let child = command
                .stdin(Stdio::null())
                .process_group(0)
                .spawn()
                .map_err(spawn_failure)?;
            if let Some(pid) = child.id() {
                eprintln!("dsh-env: started in the background as pid {pid}");
            }
            return Ok(Ran {
                tool_response: json!({"background": true, "pid": child.id()}),
                output: Ended::Started,
            });
        }
        // A command reading a terminal must stay in its foreground process
        // group; elsewhere it gets a group of its own, so that a timeout ends
        // everything it started.
        let own_group = !std::io::stdin().is_terminal();
        if own_group {
            command.process_group(0);
        }
        // Caught from before the spawn: a signal that comes while the command
        // starts is held, then passed on, instead of ending dsh-env.
        catch_signals();
        let mut child = command.kill_on_drop(true).spawn().map_err(spawn_failure)?;
        if let Some(pid) = child.id() {
            forward_signals(pid, own_group);
        }
        let waited = tokio::time::timeout(request.timeout, child.wait()).await;
        // Reaped, its pid may be reused: pass nothing on any more.
        FORWARD_TO.store(0, Ordering::Relaxed);
        let status = match waited {
            Ok(status) => Some(status?),
            Err(_) => {
                kill(&mut child, own_group);
                let _ = child.wait().await;
                None
            }
        };
        Ok(Ran {
            tool_response: json!({
                "exit_code": status.and_then(|status| status.code()),
                "timed_out": status.is_none(),
            }),
            output: status.map_or(Ended::TimedOut, Ended::Exited),
        })
    }
}

/// Where a signal sent to dsh-env goes on to: the command's process group
/// (negative), its pid, or nowhere (0).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

/// Whether SIGINT and SIGQUIT go on too: not when the command shares the
/// terminal's process group, which gets them from the terminal itself.
static FORWARD_INTERRUPTS: AtomicBool = AtomicBool::new(false);

/// The signals passed on to the command, so that stopping dsh-env stops
/// it (and dsh-env then exits as the command did).
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP];

/// A signal that came before the command's pid was known (0: none).
static HELD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(signal: libc::c_int) {
    let target = FORWARD_TO.load(Ordering::SeqCst);
    if target == 0 {
        HELD.store(signal, Ordering::SeqCst);
    } else {
        pass_on(target, signal);
    }
}

/// Sends `signal` to `target`, unless it is an interrupt the command gets
/// from the terminal itself.
fn pass_on(target: i32, signal: libc::c_int) {
    let interrupt = signal == libc::SIGINT || signal == libc::SIGQUIT;
    if !interrupt || FORWARD_INTERRUPTS.load(Ordering::SeqCst) {
        // SAFETY: kill(2) is async-signal-safe and reads no memory of ours.
        unsafe { libc::kill(target, signal) };
    }
}

/// From now on, [`FORWARDED`] signals to dsh-env are caught: held until
/// [`forward_signals`] names the command, instead of ending dsh-env.
fn catch_signals() {
    let handler = forward as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for signal in FORWARDED {
        // SAFETY: `forward` only uses atomics and calls kill(2), both
        // async-signal-safe; a handler (unlike SIG_IGN) is not inherited
        // across exec.
        unsafe { libc::signal(signal, handler) };
    }
}

/// [`FORWARDED`] signals to dsh-env go to the command `pid` (to its whole
/// group when it has its own), a held one first, instead of ending
/// dsh-env and leaving the command running.
fn forward_signals(pid: u32, own_group: bool) {
    let Ok(pid) = i32::try_from(pid) else {
        return;
    };
    let target = if own_group { -pid } else { pid };
    FORWARD_INTERRUPTS.store(own_group, Ordering::SeqCst);
    FORWARD_TO.store(target, Ordering::SeqCst);
    let held = HELD.swap(0, Ordering::SeqCst);
    if held != 0 {
        pass_on(target, held);
    }
}

/// The command's exit code, or 128+n when signal n ended it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code.clamp(0, 255) as u8,
        (None, Some(signal)) => (128 + signal).clamp(0, 255) as u8,
        (None, None) => OWN_FAILURE,
    }
}

/// Kills the command, and its whole process group when it has one.
fn kill(child: &mut tokio::process::Child, own_group: bool) {
    match child.id().and_then(|pid| i32::try_from(pid).ok()) {
        Some(pid) if own_group => {
            // SAFETY: kill(2) with a negative pid signals that process
            // group (the child's own); it reads no memory of ours.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        // Already reaped, or sharing our group: the command alone.
        _ => {
            let _ = child.start_kill();
        }
    }
}

/// Joins argv into one `bash -c` string, quoting every word that needs it.
fn shell_command_line(words: &[String]) -> String {
    words
        .iter()
        .map(|word| shell_quoted(word))
        .collect::<Vec<_>>()
        .join(" ")
}

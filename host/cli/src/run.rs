//! `dsh-env run`: a command through the local executor, with the overlay.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use dsh_env_harness::{ExecError, LocalExecutor, ShellExecRequest};

use crate::setup::{Call, CliResult, Failure, parse_env_pair};

/// The arguments of `run`.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    call: Call,
    /// An ordinary variable for the command, NAME=VALUE (repeatable; no DSH_* names).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env_pair)]
    env: Vec<(String, String)>,
    /// Run as a background call (contributors see mode=background).
    #[arg(long)]
    background: bool,
    /// Kill the command's process group after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Runs the command; its exit code is the command's.
pub(crate) async fn run(args: Args) -> CliResult<ExitCode> {
    let (execution, _registered, collection) = args.call.collect(args.background).await?;
    let workdir = match &execution.agent {
        Some(agent) => PathBuf::from(&agent.cwd),
        None => std::env::current_dir().map_err(Failure::runtime)?,
    };
    let mut request =
        ShellExecRequest::new(shell_command(&args.command), workdir, collection.overlay);
    request.env = args.env.into_iter().collect();
    request.timeout = Duration::from_secs(args.timeout_secs);
    let executor = LocalExecutor;
    let output = if args.background {
        let handle = executor.spawn_background(request).map_err(exec_failure)?;
        if let Some(pid) = handle.pid {
            eprintln!("dsh-env: started in the background as pid {pid}");
        }
        handle.wait().await
    } else {
        executor.run(request).await
    }
    .map_err(exec_failure)?;
    let _ = std::io::stdout().write_all(&output.stdout);
    let _ = std::io::stderr().write_all(&output.stderr);
    if output.timed_out {
        return Err(Failure::runtime(format!(
            "the command timed out after {} s",
            args.timeout_secs
        )));
    }
    Ok(ExitCode::from(
        output.exit_code.map_or(1, |c| c.clamp(0, 255) as u8),
    ))
}

/// A request the executor refused before spawning (a `DSH_*` or malformed
/// `--env`) is a usage error; anything after the spawn is a runtime failure.
fn exec_failure(err: ExecError) -> Failure {
    match err {
        ExecError::Env(_) => Failure::config(err),
        other => Failure::runtime(other),
    }
}

/// Joins argv into one `bash -c` string, quoting every word.
fn shell_command(words: &[String]) -> String {
    words
        .iter()
        .map(|word| {
            if !word.is_empty()
                && word
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
            {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

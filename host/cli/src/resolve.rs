//! `dsh-env resolve`: the overlay for one execution.

use std::process::ExitCode;

use dsh_env_support::input::escape_controls;

use crate::failure::CliResult;
use crate::output::print_json;
use crate::setup::{Call, Uses};

/// The arguments of `resolve`.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    call: Call,
    /// Print a sorted JSON object.
    #[arg(long)]
    json: bool,
}

/// Prints one `KEY=value` line per key (values cannot hold a line break;
/// each is escaped as all guest text on a human-readable line is), or JSON
/// (`{format, overlay: {KEY: value}}`, keys sorted, exact).
pub(crate) async fn run(args: Args) -> CliResult<ExitCode> {
    let execution = args.call.execution()?;
    let opened = args.call.setup.open(Uses::once()).await?;
    let overlay = opened.host.collect(&execution).await?.overlay;
    if args.json {
        print_json(serde_json::json!({ "overlay": overlay.to_map() }));
    } else {
        for (key, value) in overlay.iter() {
            println!("{key}={}", escape_controls(value));
        }
    }
    Ok(ExitCode::SUCCESS)
}

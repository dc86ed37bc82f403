//! `dsh-env list`: every key with its owner and description; runs no resolver.

use std::process::ExitCode;

use dsh_env_support::input::escape_controls;

use crate::failure::CliResult;
use crate::output::print_json;
use crate::setup::{Setup, Uses};

/// The arguments of `list`.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    setup: Setup,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Prints the registry's keys.
pub(crate) async fn run(Args { setup, json }: Args) -> CliResult<ExitCode> {
    let rows = setup.open(Uses::once()).await?.host.list();
    if json {
        print_json(serde_json::json!({ "keys": rows }));
    } else {
        let width = rows.iter().map(|r| r.key.as_str().len()).max().unwrap_or(0);
        let owner_width = rows.iter().map(|r| r.owner.len()).max().unwrap_or(0);
        for row in rows {
            println!(
                "{:<width$}  {:<owner_width$}  {}",
                row.key,
                escape_controls(&row.owner),
                escape_controls(&row.description)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

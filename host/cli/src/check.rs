//! `dsh-env check`: load a component and report its declaration, imports and
//! every rule it breaks, without registering it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use dsh_env::input::escape_controls;
use serde_json::json;

use crate::setup::{CliResult, Failure, open_default_registry, parse_env_pair, print_json};

/// The arguments of `check`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The component file.
    file: PathBuf,
    /// A config value to serve to the component, NAME=VALUE (repeatable).
    #[arg(long = "config", value_name = "NAME=VALUE", value_parser = parse_env_pair)]
    config: Vec<(String, String)>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Reports on the component; exit 1 when it breaks a rule.
pub(crate) async fn run(Args { file, config, json }: Args) -> CliResult<ExitCode> {
    let registry = open_default_registry()?;
    let config: BTreeMap<String, String> = config.into_iter().collect();
    let component = registry
        .load_file(&file)
        .map_err(Failure::config)?
        .with_config(config);
    let (declaration, problems) = registry.check(&component).await.map_err(Failure::runtime)?;
    let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
    if json {
        let keys: Vec<_> = declaration
            .keys
            .iter()
            .map(|(key, description)| json!({"key": key, "description": description}))
            .collect();
        print_json(&json!({
            "file": file.display().to_string(),
            "name": declaration.name,
            "keys": keys,
            "imports": component.imports(),
            "problems": problems,
        }));
    } else {
        // The declaration is the guest's, unchecked: shown escaped.
        println!(
            "{}: contributor `{}`",
            escape_controls(&file.display().to_string()),
            escape_controls(&declaration.name)
        );
        println!("Keys:");
        for (key, description) in &declaration.keys {
            println!(
                "  {}: {}",
                escape_controls(key),
                escape_controls(description)
            );
        }
        println!("Imports:");
        for import in component.imports() {
            println!("  {}", escape_controls(import));
        }
        if problems.is_empty() {
            println!("No problems: it can be registered.");
        } else {
            println!("Problems:");
            for problem in &problems {
                println!("  {}", escape_controls(problem));
            }
        }
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

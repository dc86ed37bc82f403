//! `dsh-env check`: load a component and report its declaration, imports and
//! every rule it breaks, without registering it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use dsh_env::__internal::default_signature_path;
use dsh_env::__internal::read_signature;
use dsh_env::__internal::sha256_hex;
use dsh_env::__internal::{MAX_COMPONENT_BYTES, escape_controls, read_regular_file};
use dsh_env::Manifest;
use serde_json::json;

use crate::failure::{CliResult, Failure};
use crate::home::resolve_home;
use crate::output::print_json;
use crate::setup::{open_home_registry, parse_env_pair};

/// The arguments of `check`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The component file.
    file: PathBuf,
    /// A config value to serve to the component, NAME=VALUE (repeatable).
    #[arg(long = "config", value_name = "NAME=VALUE", value_parser = parse_env_pair)]
    config: Vec<(String, String)>,
    /// Verify its signature (`<file>.minisig`) under this manifest's `[trust]`
    /// keys; without it a signature is shown, not verified.
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// The harness home, for its compile cache (default: the manifest's
    /// `home`, then $DSH_HOME, then ~/.dsh).
    #[arg(long, value_name = "DIR")]
    home: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Reports on the component; exit 1 when it breaks a rule.
pub(crate) async fn run(
    Args {
        file,
        config,
        manifest,
        home,
        json,
    }: Args,
) -> CliResult<ExitCode> {
    let manifest =
        (manifest.as_deref().map(Manifest::from_file).transpose()).map_err(Failure::config)?;
    let registry = open_home_registry(
        resolve_home(home.as_deref(), manifest.as_ref())?,
        dsh_env::Tiering::Optimized,
        manifest.as_ref(),
    )?;
    let config: BTreeMap<String, String> = config.into_iter().collect();
    // The bytes are read once: the digest shown is that of the bytes checked.
    let shown_file = file.display().to_string();
    let bytes = read_regular_file(&file, MAX_COMPONENT_BYTES)
        .map_err(|e| Failure::config(format!("cannot read component {e}")))?;
    let sha256 = sha256_hex(&bytes);
    let component = registry
        .load_bytes(&shown_file, &bytes)
        .map_err(Failure::config)?
        .with_config(config);
    let (declaration, problems) = registry.check(&component).await.map_err(Failure::runtime)?;
    let mut problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let signature_path = default_signature_path(&file);
    let signature_shown = signature_path.display().to_string();
    let signer = read_signature(&signature_path)
        .map_err(|problem| format!("its signature {signature_shown} cannot be read: {problem}"))
        .and_then(|signature| {
            // The registry's trust, the one its registrations pass.
            (registry.trust())
                .check(&shown_file, &bytes, signature.as_deref(), &signature_shown)
                .map_err(|e| e.to_string())
        });
    let signer = match signer {
        Ok(signer) => Some(signer),
        Err(problem) => {
            problems.push(problem);
            None
        }
    };
    if json {
        let keys: Vec<_> = declaration
            .keys
            .iter()
            .map(|(key, description)| json!({"key": key, "description": description}))
            .collect();
        print_json(json!({
            "file": shown_file,
            "sha256": sha256,
            "signer": signer,
            "name": declaration.name,
            "keys": keys,
            "imports": component.imports(),
            "problems": problems,
        }));
    } else {
        // The declaration is the guest's, unchecked: shown escaped.
        println!(
            "{}: contributor `{}`",
            escape_controls(&shown_file),
            escape_controls(&declaration.name)
        );
        println!("sha256: {sha256}");
        if let Some(signer) = &signer {
            println!("signature: {signer}");
        }
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
            println!("No problems: it can be registered. A manifest entry that pins it:");
            // A JSON string is a valid TOML basic string.
            let path = serde_json::to_string(&shown_file).unwrap_or_default();
            println!("\n[[contributor]]\npath = {path}\nsha256 = \"{sha256}\"");
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

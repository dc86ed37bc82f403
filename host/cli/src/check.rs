//! `dsh-env check`: load a component and report its declaration, imports and
//! every rule it breaks, then run `resolve` once in the sandbox (a dry run),
//! without registering it anywhere that lasts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use dsh_env::{Agent, Collection, ContributorComponent, Registry, ToolExecution};
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};
use dsh_env::{default_signature_path, read_signature};
use dsh_env_support::digest::sha256_hex;
use dsh_env_support::input::{MAX_COMPONENT_BYTES, escape_controls, read_regular_file};
use serde_json::json;

use crate::failure::{CliResult, Failure};
use crate::home::resolve_home;
use crate::manifests::{Approval, find};
use crate::output::print_json;
use crate::setup::{manifest_trust, open_home_registry, parse_env_pair, read_execution};

/// The arguments of `check`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The component file.
    file: PathBuf,
    /// A config value to serve to the component, NAME=VALUE (repeatable).
    #[arg(long = "config", value_name = "NAME=VALUE", value_parser = parse_env_pair)]
    config: Vec<(String, String)>,
    /// Verify its signature (`<file>.minisig`) under this manifest's `[trust]`
    /// keys (default: the manifest `list` would use, if any); without one a
    /// signature is shown, not verified.
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// The harness home, for its compile cache (default: the manifest's
    /// `home`, then $DSH_HOME, then ~/.dsh).
    #[arg(long, value_name = "DIR")]
    home: Option<String>,
    /// The execution to dry-run `resolve` with, as JSON (reference harness
    /// shape), from a file or `-` for stdin. Without it: a sample bash call
    /// by a top-level agent in the current directory.
    #[arg(long, value_name = "FILE|-")]
    execution: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// What the dry run gave: the component's keys for the execution, or why
/// it failed.
struct DryRun {
    /// `--execution`'s source, or `sample`.
    execution: String,
    /// The overlay, or the failure (shown as the registry reports it).
    outcome: Result<Collection, String>,
}

/// Reports on the component; exit 1 when it breaks a rule.
pub(crate) async fn run(
    Args {
        file,
        config,
        manifest,
        home,
        execution,
        json,
    }: Args,
) -> CliResult<ExitCode> {
    let manifest = find(manifest.as_deref(), home.as_deref(), Approval::Required)?.manifest;
    let (shown_execution, execution) = match execution {
        Some(source) => (source.clone(), read_execution(&source)?),
        None => ("sample".to_string(), sample_execution()),
    };
    // A registry of its own that trusts nobody, so the dry run can register
    // what it checks; the signature is checked apart, under the manifest's
    // trust, below.
    let trust = manifest_trust(manifest.as_ref())?;
    let registry = open_home_registry(
        resolve_home(home.as_deref(), manifest.as_ref())?,
        home.as_deref(),
        dsh_env::Tiering::Optimized,
        None,
    )?;
    let config: BTreeMap<String, String> = config.into_iter().collect();
    // The bytes are read once: the digest shown is that of the bytes checked.
    let shown_file = file.display().to_string();
    let bytes = read_regular_file(&file, MAX_COMPONENT_BYTES)
        .map_err(|e| Failure::config(format!("cannot read component {e}")))?;
    let sha256 = sha256_hex(&bytes);
    let component = registry
        .load(
            LoadFrom::Bytes {
                origin: &shown_file,
                bytes: &bytes,
            },
            &LoadOptions::new(),
        )
        .map_err(Failure::config)?
        .with_config(config);
    let (declaration, problems) = registry.check(&component).await.map_err(Failure::runtime)?;
    let mut problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let signature_path = default_signature_path(&file);
    let signature_shown = signature_path.display().to_string();
    let signer = read_signature(&signature_path)
        .map_err(|problem| format!("its signature {signature_shown} cannot be read: {problem}"))
        .and_then(|signature| {
            // The manifest's trust, the one its registrations pass.
            trust
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
    let imports: Vec<String> = component.imports().to_vec();
    // Only a declaration that can be registered can be called.
    let dry_run = if problems.is_empty() {
        let outcome = dry_run(&registry, component, &declaration.name, &execution).await;
        if let Err(problem) = &outcome {
            problems.push(format!("its dry run failed: {problem}"));
        }
        Some(DryRun {
            execution: shown_execution,
            outcome,
        })
    } else {
        None
    };
    let absent = |collection: &Collection| -> Vec<String> {
        let keys = declaration.keys.iter().map(|(key, _)| key);
        keys.filter(|key| collection.overlay.get(key).is_none())
            .cloned()
            .collect()
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
            "imports": imports,
            "dry_run": dry_run.as_ref().map(|run| match &run.outcome {
                Ok(collection) => json!({
                    "execution": run.execution,
                    "overlay": collection.overlay.to_map(),
                    "absent": absent(collection),
                }),
                Err(error) => json!({"execution": run.execution, "error": error}),
            }),
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
        for import in &imports {
            println!("  {}", escape_controls(import));
        }
        if let Some(DryRun {
            execution,
            outcome: Ok(collection),
        }) = &dry_run
        {
            println!(
                "Dry run (resolve for the {} execution, no grants):",
                escape_controls(execution)
            );
            for (key, value) in collection.overlay.iter() {
                println!("  {key}={}", escape_controls(value));
            }
            for key in absent(collection) {
                println!("  {} absent", escape_controls(&key));
            }
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

/// A top-level agent's foreground `bash` call in the current directory.
fn sample_execution() -> ToolExecution {
    let cwd = std::env::current_dir().ok();
    ToolExecution::new("check-call", "bash").with_agent(Agent {
        session_id: "check-session".to_string(),
        cwd: cwd.map(|dir| dir.display().to_string()),
        parent_session_id: None,
        depth: 0,
    })
}

/// Registers `component` in `registry` (one that lasts only for `check`)
/// and runs its `resolve` for `execution` in a fresh sandboxed instance.
async fn dry_run(
    registry: &Registry,
    component: ContributorComponent,
    name: &str,
    execution: &ToolExecution,
) -> Result<Collection, String> {
    // Held until the call is done: dropping a registration removes it.
    let _registered = (registry.register(component).await).map_err(|e| e.to_string())?;
    match registry
        .collect(execution, &CollectOptions::new().only(name))
        .await
    {
        Ok(Some(collection)) => Ok(collection),
        Ok(None) => Err(format!(
            "no contributor `{}` was registered",
            escape_controls(name)
        )),
        Err(e) => Err(e.to_string()),
    }
}

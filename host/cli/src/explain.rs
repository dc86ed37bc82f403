//! `dsh-env explain`: each key's owner and description, and which inherited
//! variables the scrub removes (names only, never values) and why.

use std::collections::BTreeMap;
use std::process::ExitCode;

use dsh_env::{Absence, OnError};
use dsh_env_harness::host::Explanation;
use dsh_env_support::input::escape_controls;
use serde_json::json;

use crate::failure::CliResult;
use crate::manifests::Approval;
use crate::output::print_json;
use crate::setup::{Call, Uses};

/// The arguments of `explain`.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    call: Call,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Prints the overlay with owners, what the scrub removed, and what was omitted.
pub(crate) async fn run(args: Args) -> CliResult<ExitCode> {
    // Explaining is how a user finds out why a manifest was not loaded.
    let execution = args.call.execution()?;
    let uses = Uses {
        approval: Approval::Reported,
        ..Uses::once()
    };
    let opened = args.call.setup.open(uses).await?;
    let Explanation {
        collection,
        absences: why_absent,
    } = opened.host.explain(&execution).await?;
    let (registry, home_origin) = (opened.host.registry(), opened.host.home_origin());
    let listing: BTreeMap<String, (String, String)> = registry
        .list()
        .into_iter()
        .map(|row| (row.key.to_string(), (row.owner, row.description)))
        .collect();
    // Declared, but left out of this overlay (the contributor returned
    // no value, or it was omitted).
    let absent: Vec<_> = (listing.iter())
        .filter(|(key, _)| collection.overlay.get(key).is_none())
        .map(|(key, (owner, description))| {
            json!({"key": key, "owner": owner, "description": description})
        })
        .collect();
    let home = json!({"path": registry.home().as_str(), "from": home_origin});
    let manifests: Vec<_> = (opened.manifests.iter())
        .map(|m| {
            json!({"path": m.path.display().to_string(), "source": m.source.name(),
                   "used": m.used, "why": m.why})
        })
        .collect();
    let keys: Vec<_> = collection
        .overlay
        .iter()
        .map(|(key, value)| {
            let (owner, description) = listing.get(key.as_str()).cloned().unwrap_or_default();
            json!({"key": key, "value": value, "owner": owner, "description": description})
        })
        .collect();
    // Every inherited variable the child does not get, and every one the
    // manifest's `[environment] set` gives it, with the rule.
    let policy = opened.host.environment();
    let scrubbed = policy.scrubbed_from_process();
    let set: Vec<_> = (policy.set.iter())
        .map(|(name, value)| match policy.set_rule(name, value) {
            None => json!({"name": name, "rule": "set", "reason": "set by [environment] set"}),
            Some(rule) => json!({"name": name, "rule": rule.rule(),
                "reason": format!("set by [environment] set, then removed: {rule}")}),
        })
        .collect();
    let omitted: Vec<_> = (collection.omitted.iter())
        .map(|err| {
            json!({"name": err.contributor, "phase": err.phase.to_string(),
                   "rule": err.cause.rule(), "reason": err.to_string()})
        })
        .collect();
    let contributors = registry.contributors();
    if args.json {
        let scrubbed: Vec<_> = scrubbed
            .iter()
            .map(|(name, reason)| {
                json!({"name": name, "rule": reason.rule(), "reason": reason.to_string()})
            })
            .collect();
        print_json(json!({
            "home": home,
            "manifests": manifests,
            "keys": keys,
            "absent": absent,
            "why_absent": why_absent,
            "contributors": contributors,
            "scrubbed": scrubbed,
            "set": set,
            "omitted": omitted,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    // A row's text fields, escaped: `KEY=value  (owner: description)`, the
    // value left out for an absent key.
    let key_line = |row: &serde_json::Value| {
        let field = |name: &str| escape_controls(row[name].as_str().unwrap_or_default());
        let value = (row.get("value")).map_or_else(String::new, |_| format!("={}", field("value")));
        format!(
            "  {}{value}  ({}: {})",
            field("key"),
            field("owner"),
            field("description")
        )
    };
    println!("Overlay:");
    for key in &keys {
        println!("{}", key_line(key));
    }
    println!("Declared but absent for this execution:");
    if absent.is_empty() {
        println!("  (nothing)");
    }
    for key in &absent {
        println!("{}", key_line(key));
    }
    if !why_absent.is_empty() {
        println!("What the calls of their contributors showed:");
    }
    for absence in &why_absent {
        print_absence(absence);
    }
    println!(
        "DSH_HOME: {} (from {})",
        escape_controls(registry.home().as_str()),
        escape_controls(home_origin)
    );
    println!("Manifests:");
    if manifests.is_empty() {
        println!("  (none)");
    }
    for m in &opened.manifests {
        println!(
            "  {} {} ({})",
            if m.used { "used   " } else { "skipped" },
            escape_controls(&m.path.display().to_string()),
            escape_controls(&m.why)
        );
    }
    println!("Contributors:");
    for contributor in &contributors {
        println!(
            "  {}: {}, sha256 {}, {}; grants: {}; on_error = {}",
            escape_controls(&contributor.name),
            escape_controls(&contributor.origin),
            contributor.sha256.as_deref().unwrap_or("-"),
            contributor.signer,
            contributor.grants_text(),
            match contributor.on_error {
                OnError::Fail => "fail",
                OnError::Omit => "omit",
            }
        );
    }
    println!("Removed from the inherited environment:");
    if scrubbed.is_empty() {
        println!("  (nothing)");
    }
    for (name, reason) in &scrubbed {
        println!("  {}: {reason}", escape_controls(name));
    }
    if !set.is_empty() {
        println!("Set by the manifest's [environment]:");
    }
    for row in &set {
        let field = |name: &str| escape_controls(row[name].as_str().unwrap_or_default());
        println!("  {}: {}", field("name"), field("reason"));
    }
    for err in &collection.omitted {
        println!("Omitted: {}", escape_controls(&err.to_string()));
    }
    Ok(ExitCode::SUCCESS)
}

/// Why a contributor's keys are absent, as far as its call showed: its
/// grants and manifest line, the end of its stderr (indented, escaped) and
/// the grant it lacked.
fn print_absence(absence: &Absence) {
    let at = (absence.declared_at.as_deref())
        .map_or_else(String::new, |at| format!(" ({})", escape_controls(at)));
    println!(
        "  {}{at}: grants: {}",
        escape_controls(&absence.contributor),
        absence.grants
    );
    match &absence.stderr_tail {
        None => println!("    stderr: (nothing)"),
        Some(tail) => {
            println!("    stderr, the end:");
            for line in tail.lines() {
                println!("      {}", escape_controls(line));
            }
        }
    }
    for hint in &absence.hints {
        println!("    hint: {}", escape_controls(hint));
    }
}

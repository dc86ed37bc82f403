//! `dsh-env cache list|gc|clear`: the home's compile cache (its cap: `home.rs`).

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use dsh_env::{ArtifactCache, CacheKey, DshHome};
use dsh_env::{CacheError, CachedEntry, Eviction};
use dsh_env_support::input::escape_controls;

use crate::failure::{CliResult, Failure};
use crate::home::{MAX_MIB, home_cache, mib, resolve_home};
use crate::output::{print_json, size};

/// The arguments of `cache`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The harness home whose `cache/` to use (default: $DSH_HOME, then ~/.dsh).
    #[arg(long, value_name = "DIR", global = true)]
    home: Option<String>,
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Every entry: component digest, declared names, size, last use.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove the least recently used entries until the cache fits.
    Gc {
        /// The size to cut back to, 0 to 1048576 (default: the cap,
        /// $DSH_CACHE_MAX_MIB or 512).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=MAX_MIB))]
        max_mib: Option<u64>,
    },
    /// Remove every entry; the next load of each component compiles it again.
    Clear,
}

/// Runs `cache list|gc|clear`.
pub(crate) fn run(Args { home, action }: Args) -> CliResult<ExitCode> {
    let home: DshHome = resolve_home(home.as_deref(), None)?;
    let cache = home_cache(home.path(), CacheKey::in_home(&home))?;
    let failed = |err: CacheError| Failure::runtime(err);
    match action {
        Action::List { json } => {
            let entries = cache.entries().map_err(failed)?;
            if json {
                print_json(listing_json(&cache, &entries));
            } else {
                print_listing(&cache, &entries);
            }
        }
        Action::Gc { max_mib } => {
            let max_bytes = max_mib.map_or(cache.max_bytes(), mib);
            let eviction = cache.gc(max_bytes).map_err(failed)?;
            print_eviction(&cache, &eviction);
        }
        Action::Clear => {
            let eviction = cache.clear().map_err(failed)?;
            print_eviction(&cache, &eviction);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line an entry, least recently used first, then the total.
fn print_listing(cache: &ArtifactCache, entries: &[CachedEntry]) {
    let now = SystemTime::now();
    for entry in entries {
        let what = match &entry.content {
            Some(content) if entry.artifact => content[..16].to_string(),
            Some(content) => format!("{} (no artifact)", &content[..16]),
            None => escape_controls(&entry.id).into_owned(),
        };
        let names = if entry.names.is_empty() {
            "-".to_string()
        } else {
            escape_controls(&entry.names.join(",")).into_owned()
        };
        let age = now
            .duration_since(entry.last_used)
            .map_or(0, |age| age.as_secs());
        println!(
            "{what}  {names}  {}  used {} ago",
            size(entry.bytes),
            duration(age)
        );
    }
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    println!(
        "{} entries, {} of a {} cap, in {}",
        entries.len(),
        size(total),
        size(cache.max_bytes()),
        escape_controls(&cache.dir().display().to_string())
    );
}

/// `cache list --json`.
fn listing_json(cache: &ArtifactCache, entries: &[CachedEntry]) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = entries
        .iter()
        .map(|entry| {
            serde_json::json!({
                "id": entry.id,
                "content": entry.content,
                "engine": entry.engine,
                "artifact": entry.artifact,
                "names": entry.names,
                "files": entry.files,
                "bytes": entry.bytes,
                "last_used_unix": entry
                    .last_used
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |t| t.as_secs()),
            })
        })
        .collect();
    serde_json::json!({
        // Lossy: a path need not be UTF-8, and JSON text must be.
        "dir": cache.dir().to_string_lossy(),
        "max_bytes": cache.max_bytes(),
        "total_bytes": entries.iter().map(|e| e.bytes).sum::<u64>(),
        "entries": rows,
    })
}

fn print_eviction(cache: &ArtifactCache, eviction: &Eviction) {
    println!(
        "removed {} entries ({}); {} left in {}",
        eviction.removed,
        size(eviction.freed_bytes),
        size(eviction.remaining_bytes),
        escape_controls(&cache.dir().display().to_string())
    );
}

/// `secs` as the largest whole unit.
fn duration(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        3600..86400 => format!("{} h", secs / 3600),
        _ => format!("{} d", secs / 86400),
    }
}

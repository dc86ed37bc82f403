//! `dsh-env pull --manifest M`: fill the home's store with every
//! `oci://…@sha256:…` artifact a reviewed manifest pins, so that it loads
//! with no network (a fresh worker, an image build).
//!
//! Nothing is asked and the manifest is not changed: its pins are the
//! review. Each artifact missing from the store is fetched (verified, capped,
//! within the network deadline), held in memory, loaded as the manifest's
//! entry would be (its `sha256` pin, `[trust]`, a valid component), and only
//! then committed; an artifact already in the store is not fetched again.

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use dsh_env::{ContributorSource, ContributorSpec, HostEnv, Registry, Tiering};
use dsh_env::{LoadFrom, LoadOptions};
use dsh_env_store::{BlobStore, OciReference};
use dsh_env_support::input::escape_controls;

use crate::failure::{CliResult, Failure, with_remedy};
use crate::home::resolve_home;
use crate::manifests::{Approval, NO_MANIFEST, find};
use crate::network::NetworkArgs;
use crate::output::size;
use crate::setup::open_home_registry;

/// The arguments of `pull`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The reviewed manifest whose `source = "oci://…@sha256:…"` entries to
    /// pull; it is read, never written (default: the manifest `list` would
    /// use).
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// The harness home whose store to fill (default: the manifest's
    /// `home`, then $DSH_HOME, then ~/.dsh).
    #[arg(long, value_name = "DIR")]
    home: Option<String>,
    /// Also compile every pinned component with Cranelift into the home's
    /// cache now (slow once), so the first calls on this machine are fast.
    #[arg(long)]
    optimize: bool,
    #[command(flatten)]
    network: NetworkArgs,
}

/// What became of one artifact.
enum Outcome {
    /// It was in the store already: nothing was fetched.
    Present,
    /// Fetched, checked and stored: its component's size.
    Pulled(u64),
    /// Not in the store: why (the error names the reference).
    Failed(String),
}

/// Pulls what is missing; exit 0 when every pinned artifact is in the store,
/// 1 naming each one that is not.
pub(crate) async fn run(args: Args) -> CliResult<ExitCode> {
    let found = find(
        args.manifest.as_deref(),
        args.home.as_deref(),
        Approval::Required,
    )?;
    let manifest = found.manifest.ok_or_else(|| Failure::config(NO_MANIFEST))?;
    let specs = manifest
        .specs(&HostEnv::from_process())
        .map_err(|e| Failure::config_error(&e))?;
    let home = resolve_home(args.home.as_deref(), Some(&manifest))?;
    let store = BlobStore::in_home(home.path());
    let tiering = if args.optimize {
        Tiering::Optimized
    } else {
        Tiering::Baseline
    };
    let registry = open_home_registry(home, args.home.as_deref(), tiering, Some(&manifest))?;

    // One pull per artifact, however many entries pin it.
    let mut seen = BTreeSet::new();
    let pinned: Vec<(&ContributorSpec, &OciReference)> = (specs.iter())
        .filter_map(|spec| match &spec.source {
            ContributorSource::Oci(reference) if seen.insert(reference.to_string()) => {
                Some((spec, reference))
            }
            _ => None,
        })
        .collect();
    let terminal = std::io::stderr().is_terminal();
    let (mut pulled, mut present, mut failed) = (0, 0, Vec::new());
    for (index, &(spec, reference)) in pinned.iter().enumerate() {
        let shown = escape_controls(&reference.to_string()).into_owned();
        let outcome = pull_one(&registry, &store, spec, &args.network, args.optimize).await;
        let counter = format!("[{}/{}]", index + 1, pinned.len());
        match outcome {
            Outcome::Present => {
                present += 1;
                if terminal {
                    eprintln!("{counter} {shown}: already in the store");
                }
            }
            Outcome::Pulled(bytes) => {
                pulled += 1;
                if terminal {
                    eprintln!("{counter} {shown}: pulled, {}", size(bytes));
                }
            }
            Outcome::Failed(why) => {
                // Always said, terminal or not: the exit code alone does not
                // name what is missing.
                let why = why.replace('\n', " ");
                eprintln!(
                    "dsh-env: {counter} not in the store: {}",
                    escape_controls(&dsh_env_oci::secrets::redact(&why))
                );
                failed.push(shown);
            }
        }
    }
    println!(
        "{} of {} artifacts in the store ({pulled} pulled, {present} already there)",
        pulled + present,
        pinned.len()
    );
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(Failure::runtime(format!(
            "{} of {} artifacts pinned by {} are not in the store: {}",
            failed.len(),
            pinned.len(),
            escape_controls(&manifest.origin),
            failed.join(", ")
        )))
    }
}

/// Makes sure the artifact `spec` pins is in `store`: fetched only if it is
/// missing, and committed only once it loads as the entry would. With
/// `optimize`, a present one is loaded too, which compiles it into the cache.
async fn pull_one(
    registry: &Registry,
    store: &BlobStore,
    spec: &ContributorSpec,
    network: &NetworkArgs,
    optimize: bool,
) -> Outcome {
    let ContributorSource::Oci(reference) = &spec.source else {
        return Outcome::Present;
    };
    if store.load(reference).is_ok() {
        if optimize && let Err(e) = registry.load(LoadFrom::Spec(spec), &LoadOptions::new()) {
            return Outcome::Failed(with_remedy(&e));
        }
        return Outcome::Present;
    }
    // Credentials are looked up only for what must be fetched.
    let options = match network.options(reference) {
        Ok(options) => options,
        Err(failure) => return Outcome::Failed(failure.message),
    };
    let fetched = match dsh_env_oci::fetch(reference, &options).await {
        Ok(fetched) => fetched,
        Err(e) => return Outcome::Failed(with_remedy(&e)),
    };
    // The checks a load makes (the entry's pin, `[trust]`, a component that
    // compiles), on the bytes in memory: a refused artifact is never stored.
    if let Err(e) = registry.load(
        LoadFrom::Pulled {
            spec,
            artifact: fetched.artifact(),
        },
        &LoadOptions::new(),
    ) {
        return Outcome::Failed(with_remedy(&e));
    }
    let bytes = fetched.artifact().wasm.len() as u64;
    match fetched.commit(store) {
        Ok(_) => Outcome::Pulled(bytes),
        Err(e) => Outcome::Failed(with_remedy(&e)),
    }
}

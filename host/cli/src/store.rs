//! `dsh-env store gc`: remove from the home's store of pulled contributors
//! what nothing references, listing each blob removed.

use std::path::PathBuf;
use std::process::ExitCode;

use dsh_env::Manifest;
use dsh_env_store::{BlobStore, Keep, OciReference, Sweep};
use dsh_env_support::input::escape_controls;

use crate::failure::{CliResult, Failure, with_remedy};
use crate::home::resolve_home;
use crate::output::size;

/// The arguments of `store`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The harness home whose `store/` to use (default: the first
    /// manifest's `home`, then $DSH_HOME, then ~/.dsh).
    #[arg(long, value_name = "DIR", global = true)]
    home: Option<String>,
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Remove every blob that no image manifest in the store references;
    /// with --manifest, every artifact that none of those manifests pins.
    Gc {
        /// Keep only the artifacts this manifest's `source`s pin; repeat it
        /// for every manifest in use.
        #[arg(long, value_name = "FILE")]
        manifest: Vec<PathBuf>,
    },
}

/// Runs `store gc`.
pub(crate) fn run(Args { home, action }: Args) -> CliResult<ExitCode> {
    let Action::Gc { manifest: paths } = action;
    let manifests = (paths.iter())
        .map(|path| Manifest::from_file(path).map_err(|e| Failure::config_error(&e)))
        .collect::<CliResult<Vec<_>>>()?;
    let home = resolve_home(home.as_deref(), manifests.first())?;
    let store = BlobStore::in_home(home.path());
    let pinned: Vec<OciReference> = (manifests.iter())
        .flat_map(|manifest| &manifest.contributors)
        .filter_map(|entry| entry.source.as_deref())
        .map(|source| OciReference::parse(source).map_err(Failure::config))
        .collect::<CliResult<_>>()?;
    let keep = if manifests.is_empty() {
        Keep::Stored
    } else {
        Keep::Pinned(&pinned)
    };
    let sweep = (store.sweep(keep)).map_err(|e| Failure::runtime(with_remedy(&e)))?;
    print_sweep(&store, &sweep);
    Ok(ExitCode::SUCCESS)
}

/// One line a blob removed, then the totals.
fn print_sweep(store: &BlobStore, sweep: &Sweep) {
    for blob in &sweep.removed {
        println!("removed {}  {}", blob.name, size(blob.bytes));
    }
    let freed: u64 = sweep.removed.iter().map(|blob| blob.bytes).sum();
    println!(
        "removed {} blobs ({}); {} blobs ({}) left in {}",
        sweep.removed.len(),
        size(freed),
        sweep.kept,
        size(sweep.kept_bytes),
        escape_controls(&store.root().display().to_string())
    );
}

//! `dsh-env add`: review a contributor (its name, every key it may set, the
//! WASI interfaces it imports, the grants its entry asks for, its digest and
//! its signer), confirm, then pin it in a manifest edited in place.
//!
//! The entry gets `sha256` (the bytes reviewed) and `grants_sha256` (the
//! grants reviewed); loading refuses either change until `add` runs again.
//!
//! The source is a file, or `oci://<registry>/<repository>:<tag>` (or
//! `@sha256:<digest>`): that is pulled (verified, capped, within the network
//! deadline) and held in memory, reviewed from there, put in the home's store
//! only once accepted, and pinned as
//! `source = "oci://<registry>/<repository>@sha256:<manifest digest>"`.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use dsh_env::ReadProblem;
use dsh_env::{
    ContributorComponent, ContributorEntry, CwdGrant, GrantsEntry, HostEnv, Manifest,
    RawDeclaration, Registry,
};
use dsh_env::{LoadFrom, LoadOptions};
use dsh_env_store::{BlobStore, OCI_SCHEME, OciReference};
use dsh_env_support::atomic_file;
use dsh_env_support::input::{MAX_MANIFEST_BYTES, escape_controls, read_regular_text};
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, TableLike, value};

use crate::failure::{CliResult, Failure, with_remedy};
use crate::home::resolve_home;
use crate::network::NetworkArgs;
use crate::setup::open_home_registry;

/// The arguments of `add`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The component file, or `oci://<registry>/<repository>:<tag>` to pull.
    source: PathBuf,
    /// The manifest to pin it in (created if missing).
    #[arg(long, value_name = "FILE")]
    manifest: PathBuf,
    /// The harness home, for the compile cache (default: the manifest's
    /// `home`, then $DSH_HOME, then ~/.dsh).
    #[arg(long, value_name = "DIR")]
    home: Option<String>,
    /// Pin without asking, after the review is shown (for scripts).
    #[arg(long)]
    yes: bool,
    /// Grant it something, written into its entry's `[contributor.grants]`
    /// and reviewed with it: `cwd=read` (the agent's cwd, read-only) or
    /// `env=NAME` (the host's variable NAME); repeatable.
    #[arg(long = "grant", value_name = "cwd=read|env=NAME", value_parser = parse_grant)]
    grants: Vec<Grant>,
    #[command(flatten)]
    network: NetworkArgs,
}

/// What `add` shows before asking.
struct Review<'a> {
    origin: &'a str,
    declaration: &'a RawDeclaration,
    component: &'a ContributorComponent,
    entry: &'a ContributorEntry,
}

impl Review<'_> {
    /// Prints the review on stdout; guest text is escaped.
    fn print(&self) {
        println!(
            "Contributor `{}` from {}",
            escape_controls(&self.declaration.name),
            escape_controls(self.origin)
        );
        println!("  sha256: {}", self.component.sha256());
        println!("  signature: {}", self.component.signer());
        println!("  Keys it may set:");
        for (key, description) in &self.declaration.keys {
            println!(
                "    {}: {}",
                escape_controls(key),
                escape_controls(description)
            );
        }
        println!("  Interfaces it imports:");
        for import in self.component.imports() {
            println!("    {}", escape_controls(import));
        }
        println!("  Grants its entry asks for:");
        let grants = &self.entry.grants;
        // Both spellings of config, as the pin covers them (a key set in
        // both is refused before the review).
        let config = self.entry.config().unwrap_or_default();
        if grants.env.is_empty() && grants.cwd.is_none() && config.is_empty() {
            println!("    (none)");
        }
        if !grants.env.is_empty() {
            let names: Vec<_> = grants.env.iter().map(|n| escape_controls(n)).collect();
            println!("    environment variables: {}", names.join(", "));
        }
        if grants.cwd.is_some() {
            println!("    the agent's cwd, read-only");
        }
        for (key, value) in &config {
            println!(
                "    config {} = {}",
                escape_controls(key),
                escape_controls(value)
            );
        }
    }
}

/// Reviews, confirms and pins; exit 2 when refused, 1 when declined.
pub(crate) async fn run(args: Args) -> CliResult<ExitCode> {
    let manifest_shown = args.manifest.display().to_string();
    let text = read_manifest(&args.manifest)?;
    let base_dir = manifest_dir(&args.manifest);
    let manifest = Manifest::parse_unchecked(&text, &manifest_shown, base_dir.clone())
        .map_err(Failure::config)?;
    // Refused early, before a pull: a [trust] that cannot be used.
    manifest.trust().map_err(Failure::config)?;

    let home = resolve_home(args.home.as_deref(), Some(&manifest))?;
    let store = BlobStore::in_home(home.path());
    let oci = (args.source.to_str()).filter(|text| text.starts_with(OCI_SCHEME));
    // A pull is held in memory, reviewed from there, and stored only once
    // accepted: a refused artifact leaves nothing in the store.
    let (
        Located {
            origin,
            existing,
            mut entry,
        },
        pulled,
    ) = match oci {
        Some(text) => {
            let (located, pulled) = pull(text, &manifest, &args.network).await?;
            (located, Some(pulled))
        }
        None => (locate_file(&args.source, &manifest, &base_dir)?, None),
    };
    entry.sha256 = None;
    entry.grants_sha256 = None;
    for grant in &args.grants {
        grant.apply(&mut entry.grants);
    }
    let spec = (entry.to_spec(&base_dir, &HostEnv::from_process())).map_err(|e| {
        Failure::config(format!(
            "invalid manifest {manifest_shown}: {}",
            with_remedy(&e)
        ))
    })?;

    let registry: Registry = open_home_registry(
        home,
        args.home.as_deref(),
        dsh_env::Tiering::Optimized,
        Some(&manifest),
    )?;
    let from = match &pulled {
        Some(pulled) => LoadFrom::Pulled {
            spec: &spec,
            artifact: pulled.artifact(),
        },
        None => LoadFrom::Spec(&spec),
    };
    let component = registry
        .load(from, &LoadOptions::new())
        .map_err(|e| Failure::config_error(&e))?;
    let (declaration, problems) = registry.check(&component).await.map_err(Failure::config)?;
    Review {
        origin: &origin,
        declaration: &declaration,
        component: &component,
        entry: &entry,
    }
    .print();
    if !problems.is_empty() {
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(Failure::config(format!(
            "cannot add {}: {}",
            escape_controls(&origin),
            problems.join("; ")
        )));
    }
    if !args.yes && !confirm(&declaration.name, &manifest_shown)? {
        eprintln!("dsh-env: not added; {manifest_shown} is unchanged");
        return Ok(ExitCode::from(1));
    }

    let pins = Pins {
        location: match (&entry.source, &entry.path) {
            (Some(source), _) => ("source", source.clone()),
            (None, path) => (
                "path",
                path.as_deref()
                    .unwrap_or(Path::new(""))
                    .display()
                    .to_string(),
            ),
        },
        sha256: component.sha256(),
        grants_sha256: &entry.grants_digest().map_err(Failure::config)?,
        grants: &args.grants,
    };
    let edited = pin_entry(&text, existing, &pins)
        .map_err(|e| Failure::config(format!("cannot edit {manifest_shown}: {e}")))?;
    // The edited text must load as written, or nothing is written.
    let check = Manifest::parse_unchecked(&edited, &manifest_shown, base_dir.clone())
        .map_err(Failure::config)?;
    let index = existing.unwrap_or(check.contributors.len().saturating_sub(1));
    if let Some(entry) = check.contributors.get(index) {
        (entry.to_spec(&base_dir, &HostEnv::default())).map_err(|e| {
            Failure::config(format!(
                "invalid manifest {manifest_shown}: {}",
                with_remedy(&e)
            ))
        })?;
    }
    if let Some(pulled) = pulled {
        pulled
            .commit(&store)
            .map_err(|e| Failure::config_error(&e))?;
    }
    atomic_file::write(&args.manifest, edited)
        .map_err(|e| Failure::config(format!("cannot write {manifest_shown}: {e}")))?;
    let pinned_to = match &pins.location {
        ("source", source) => format!("{source}, sha256 {}", component.sha256()),
        _ => format!("sha256 {}", component.sha256()),
    };
    println!(
        "{} `{}` in {manifest_shown}, pinned to {pinned_to}",
        if existing.is_some() {
            "Updated"
        } else {
            "Added"
        },
        escape_controls(&declaration.name),
    );
    Ok(ExitCode::SUCCESS)
}

/// What is being added, and the manifest entry it updates, if any.
struct Located {
    /// The file or the pinned reference, for the review.
    origin: String,
    /// The index of the entry for the same file or repository.
    existing: Option<usize>,
    /// That entry (or a new one) pointing at what is added.
    entry: ContributorEntry,
}

/// The component file `source`, and the entry that names the same file.
fn locate_file(source: &Path, manifest: &Manifest, base_dir: &Path) -> CliResult<Located> {
    let component_path = std::fs::canonicalize(source).map_err(|e| {
        Failure::config(format!(
            "cannot add {}: {e}",
            escape_controls(&source.display().to_string())
        ))
    })?;
    let existing = (manifest.contributors.iter()).position(|entry| {
        (manifest.component_path(entry)).is_some_and(|path| same_file(&path, &component_path))
    });
    let entry = match existing {
        Some(index) => manifest.contributors[index].clone(),
        None => ContributorEntry {
            path: Some(entry_path(&component_path, base_dir)),
            ..ContributorEntry::default()
        },
    };
    Ok(Located {
        origin: source.display().to_string(),
        existing,
        entry,
    })
}

/// Fetches `reference` (verified, in memory: nothing is written), and the
/// entry for the same registry and repository, re-pinned to what was fetched.
async fn pull(
    reference: &str,
    manifest: &Manifest,
    network: &NetworkArgs,
) -> CliResult<(Located, dsh_env_oci::Pulled)> {
    let reference = OciReference::parse(reference).map_err(Failure::config)?;
    let pulled = dsh_env_oci::fetch(&reference, &network.options(&reference)?)
        .await
        .map_err(|e| Failure::config_error(&e))?;
    let pinned = pulled.artifact().reference.clone();
    let same_repository = |entry: &ContributorEntry| {
        (entry.source.as_deref())
            .and_then(|source| OciReference::parse(source).ok())
            .is_some_and(|r| {
                (r.registry(), r.repository()) == (pinned.registry(), pinned.repository())
            })
    };
    let existing = manifest.contributors.iter().position(same_repository);
    let mut entry = match existing {
        Some(index) => manifest.contributors[index].clone(),
        None => ContributorEntry::default(),
    };
    entry.source = Some(pinned.to_string());
    let origin = match reference.tag() {
        Some(_) => format!("{reference} = {pinned}"),
        None => pinned.to_string(),
    };
    let located = Located {
        origin,
        existing,
        entry,
    };
    Ok((located, pulled))
}

/// The manifest's text, or an empty manifest when there is no file yet.
fn read_manifest(path: &Path) -> CliResult<String> {
    match read_regular_text(path, MAX_MANIFEST_BYTES) {
        Ok(text) => Ok(text),
        Err(e) if matches!(&e.problem, ReadProblem::Io(io) if io.kind() == std::io::ErrorKind::NotFound) => {
            Ok(String::new())
        }
        Err(e) => Err(Failure::config(format!("cannot read manifest {e}"))),
    }
}

/// The directory a manifest's relative paths are resolved against.
fn manifest_dir(manifest: &Path) -> PathBuf {
    let dir = manifest.parent().unwrap_or(Path::new(""));
    if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir.to_path_buf()
    }
}

/// Whether `entry_path` names the file at canonical `component`.
fn same_file(entry_path: &Path, component: &Path) -> bool {
    std::fs::canonicalize(entry_path).is_ok_and(|path| path == component)
}

/// The path to write in the entry: relative to the manifest's folder when
/// the component is inside it, else absolute.
fn entry_path(component: &Path, base_dir: &Path) -> PathBuf {
    std::fs::canonicalize(base_dir)
        .ok()
        .and_then(|base| component.strip_prefix(base).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| component.to_path_buf())
}

/// Asks on the terminal; refuses when there is none to ask on.
fn confirm(name: &str, manifest: &str) -> CliResult<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::config(
            "not added: there is no terminal to confirm on; review the above and pass --yes",
        ));
    }
    eprint!(
        "Trust `{}` and pin it in {manifest}? [y/N] ",
        escape_controls(name)
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    // An answer is a word; a longer line is not read whole.
    (stdin.lock().take(64))
        .read_line(&mut answer)
        .map_err(|e| Failure::config(format!("cannot read the answer: {e}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes"))
}

/// What `add` writes into an entry.
struct Pins<'a> {
    /// `("path", file)` or `("source", oci://…@sha256:…)`: written into a
    /// new entry; a source is also re-pinned in an existing one.
    location: (&'static str, String),
    sha256: &'a str,
    grants_sha256: &'a str,
    /// Grants from `--grant`, added to its `[contributor.grants]`.
    grants: &'a [Grant],
}

/// One `--grant`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Grant {
    /// `cwd=read`.
    CwdRead,
    /// `env=NAME`.
    Env(String),
}

impl Grant {
    /// Adds this grant to `grants` (an env name once).
    fn apply(&self, grants: &mut GrantsEntry) {
        match self {
            Grant::CwdRead => grants.cwd = Some(CwdGrant::Read),
            Grant::Env(name) if !grants.env.contains(name) => grants.env.push(name.clone()),
            Grant::Env(_) => {}
        }
    }

    /// Adds this grant to an entry's `grants` table (a new one, or the one
    /// written, inline or not), as [`Grant::apply`] does to the entry.
    fn write(&self, table: &mut dyn TableLike) {
        match self {
            Grant::CwdRead => {
                table.insert("cwd", value("read"));
            }
            Grant::Env(name) => {
                let names = table
                    .entry("env")
                    .or_insert_with(|| value(toml_edit::Array::new()));
                if let Some(names) = names.as_array_mut()
                    && !names.iter().any(|n| n.as_str() == Some(name))
                {
                    names.push(name.as_str());
                }
            }
        }
    }
}

/// A `--grant` value: `cwd=read` or `env=NAME`, NAME a variable name
/// (letters, digits and `_`, not starting with a digit).
fn parse_grant(text: &str) -> Result<Grant, String> {
    let valid_name = |name: &str| {
        name.chars().next().is_some_and(|c| !c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    match text.split_once('=') {
        Some(("cwd", "read")) => Ok(Grant::CwdRead),
        Some(("cwd", other)) => Err(format!(
            "`cwd={}`: the cwd can only be granted `read`",
            escape_controls(other)
        )),
        Some(("env", name)) if valid_name(name) => Ok(Grant::Env(name.to_string())),
        Some(("env", name)) => Err(format!(
            "`env={}`: a variable name is letters, digits and `_`, not starting with a digit",
            escape_controls(name)
        )),
        _ => Err(format!(
            "`{}`: a grant is `cwd=read` or `env=NAME`",
            escape_controls(text)
        )),
    }
}

/// `text` with entry `existing` (an index into `[[contributor]]`) pinned,
/// or a new pinned entry appended; comments and layout are kept.
fn pin_entry(text: &str, existing: Option<usize>, pins: &Pins<'_>) -> Result<String, String> {
    let mut document: DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| e.to_string())?;
    let contributors = document
        .entry("contributor")
        .or_insert_with(|| Item::ArrayOfTables(ArrayOfTables::new()));
    let table = match (existing, contributors.as_array_of_tables_mut()) {
        (Some(index), Some(array)) => array.get_mut(index),
        (None, Some(array)) => {
            let mut table = Table::new();
            table.insert(pins.location.0, value(&pins.location.1));
            array.push(table);
            array.iter_mut().last()
        }
        (_, None) => None,
    };
    // Inline tables (`contributor = [{ … }]`) parse, but are not edited.
    let table = table.ok_or("its contributors must be written as [[contributor]] tables")?;
    if pins.location.0 == "source" {
        table.insert("source", value(&pins.location.1));
    }
    if !pins.grants.is_empty() {
        let grants = table
            .entry("grants")
            .or_insert_with(|| Item::Table(Table::new()));
        let grants = grants
            .as_table_like_mut()
            .ok_or("its `grants` must be a table")?;
        for grant in pins.grants {
            grant.write(grants);
        }
    }
    table.insert("sha256", value(pins.sha256));
    table.insert("grants_sha256", value(pins.grants_sha256));
    Ok(document.to_string())
}

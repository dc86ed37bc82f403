//! `dsh-env add`: review a contributor (its name, every key it may set, the
//! WASI interfaces it imports, the grants its entry asks for, its digest and
//! its signer), confirm, then pin it in a manifest edited in place.
//!
//! The entry gets `sha256` (the bytes reviewed) and `grants_sha256` (the
//! grants reviewed); loading refuses either change until `add` runs again.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use dsh_env::input::{MAX_MANIFEST_BYTES, ReadProblem, escape_controls, read_regular_text};
use dsh_env::{
    ContributorComponent, ContributorEntry, HostEnv, Manifest, RawDeclaration, Registry,
    atomic_file,
};
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, value};

use crate::setup::{CliResult, Failure, open_home_registry, resolve_home};

/// The arguments of `add`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The component file.
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
        if grants.env.is_empty() && grants.cwd.is_none() && grants.config.is_empty() {
            println!("    (none)");
        }
        if !grants.env.is_empty() {
            let names: Vec<_> = grants.env.iter().map(|n| escape_controls(n)).collect();
            println!("    environment variables: {}", names.join(", "));
        }
        if grants.cwd.is_some() {
            println!("    the agent's cwd, read-only");
        }
        for (key, value) in &grants.config {
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
    let trust = manifest.trust().map_err(Failure::config)?;

    let component_path = std::fs::canonicalize(&args.source).map_err(|e| {
        Failure::config(format!(
            "cannot add {}: {e}",
            escape_controls(&args.source.display().to_string())
        ))
    })?;
    let existing = (manifest.contributors.iter())
        .position(|entry| same_file(&manifest.component_path(entry), &component_path));
    // The entry as it stands (or a new one), re-reviewed: its old pins are
    // what changed, so they are not checked here.
    let mut entry = match existing {
        Some(index) => manifest.contributors[index].clone(),
        None => ContributorEntry {
            path: entry_path(&component_path, &base_dir),
            ..ContributorEntry::default()
        },
    };
    entry.sha256 = None;
    entry.grants_sha256 = None;
    let mut spec = (entry.to_spec(&base_dir, &HostEnv::from_process()))
        .map_err(|e| Failure::config(format!("invalid manifest {manifest_shown}: {e}")))?;
    spec.trust = std::sync::Arc::new(trust);

    let home = resolve_home(args.home.as_deref(), Some(&manifest))?;
    let registry: Registry = open_home_registry(home)?;
    let component = registry.load_spec(&spec).map_err(Failure::config)?;
    let (declaration, problems) = registry.check(&component).await.map_err(Failure::config)?;
    let origin = args.source.display().to_string();
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
        path: &entry.path,
        sha256: component.sha256(),
        grants_sha256: &entry.grants.digest(),
    };
    let edited = pin_entry(&text, existing, &pins)
        .map_err(|e| Failure::config(format!("cannot edit {manifest_shown}: {e}")))?;
    // The edited text must load as written, or nothing is written.
    let check = Manifest::parse_unchecked(&edited, &manifest_shown, base_dir.clone())
        .map_err(Failure::config)?;
    let index = existing.unwrap_or(check.contributors.len().saturating_sub(1));
    if let Some(entry) = check.contributors.get(index) {
        (entry.to_spec(&base_dir, &HostEnv::default()))
            .map_err(|e| Failure::config(format!("invalid manifest {manifest_shown}: {e}")))?;
    }
    atomic_file::write(&args.manifest, edited)
        .map_err(|e| Failure::config(format!("cannot write {manifest_shown}: {e}")))?;
    println!(
        "{} `{}` in {manifest_shown}, pinned to sha256 {}",
        if existing.is_some() {
            "Updated"
        } else {
            "Added"
        },
        escape_controls(&declaration.name),
        component.sha256()
    );
    Ok(ExitCode::SUCCESS)
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
    path: &'a Path,
    sha256: &'a str,
    grants_sha256: &'a str,
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
            table.insert("path", value(pins.path.display().to_string()));
            array.push(table);
            array.iter_mut().last()
        }
        (_, None) => None,
    };
    // Inline tables (`contributor = [{ … }]`) parse, but are not edited.
    let table = table.ok_or("its contributors must be written as [[contributor]] tables")?;
    table.insert("sha256", value(pins.sha256));
    table.insert("grants_sha256", value(pins.grants_sha256));
    Ok(document.to_string())
}

//! What `dsh-env trust` records under the home, and the check against it.
//!
//! An approval belongs to the path where a project manifest was found and
//! covers its bytes and those of every file it names that the host runs as
//! it is ([`Manifest::files_run_as_is`]: its hooks), so a change to any of
//! them needs approving again. That path is the manifest's folder with its
//! symlinks resolved, joined to the manifest's own name, which is not
//! followed: the manifest's relative paths (`hooks`, `home`, a
//! contributor's `path`) resolve against that folder both when the approval
//! is checked and when the manifest is used. So a checkout whose
//! `.dsh/env.toml` links to a manifest approved elsewhere is not approved
//! (next to the link, its relative paths name the checkout's own files),
//! while a folder reached through a symlink is the folder it is.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use dsh_env::{DshHome, Manifest, NamedFile};
use dsh_env_support::atomic_file;
use dsh_env_support::digest::sha256_hex;
use dsh_env_support::input::{MAX_MANIFEST_BYTES, escape_controls, read_regular_text};
use serde::{Deserialize, Serialize};

use crate::failure::{CliResult, Failure};

/// The home's folder of approvals, one file per approved manifest, named
/// by the SHA-256 of the manifest's path.
const APPROVALS: &str = "trusted";

/// The largest approval record read.
const MAX_RECORD_BYTES: u64 = 64 << 10;

/// The record format this dsh-env writes; an earlier one (a digest and a
/// path on one line) covered the manifest alone.
const FORMAT: u32 = 2;

/// A project manifest's path as its approval names it: its folder's real
/// path and its own file name (see the module's documentation).
pub(crate) fn locate(path: &Path) -> CliResult<PathBuf> {
    let cannot =
        |why: String| Failure::config(format!("cannot read manifest {}: {why}", shown(path)));
    let name = (path.file_name()).ok_or_else(|| cannot("it names no file".into()))?;
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    let folder = folder.canonicalize().map_err(|e| cannot(e.to_string()))?;
    Ok(folder.join(name))
}

/// `path` as a line shows it: escaped, since a directory's name is anyone's.
pub(crate) fn shown(path: &Path) -> String {
    escape_controls(&path.display().to_string()).into_owned()
}

/// A project manifest as approved: parsed from the very bytes approved,
/// with the approved text of each file it names that the host runs as is.
pub(crate) struct Approved {
    /// The manifest.
    pub(crate) manifest: Manifest,
    /// Each file of [`Manifest::files_run_as_is`] and its approved text, in
    /// that order.
    pub(crate) files: Vec<(NamedFile, String)>,
}

/// One file an approval covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Covered {
    /// `manifest`, or the manifest field naming it (`hooks`).
    field: String,
    /// Where it is (shown; the record's own name keys the manifest's path).
    path: String,
    /// The SHA-256 of its bytes.
    sha256: String,
}

/// An approval record (`<home>/trusted/<sha256 of the path>`).
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    /// [`FORMAT`].
    format: u32,
    /// The manifest itself.
    manifest: Covered,
    /// Each file of [`Manifest::files_run_as_is`], in that order.
    files: Vec<Covered>,
}

/// What the home holds for a manifest's path.
enum Recorded {
    /// No approval.
    Nothing,
    /// An approval in an earlier format, which did not cover named files.
    Earlier,
    /// An approval.
    Current(Record),
}

/// The record file for the manifest at `located`.
fn record_path(home: &DshHome, located: &Path) -> PathBuf {
    let key = sha256_hex(located.as_os_str().as_bytes());
    home.path().join(APPROVALS).join(key)
}

/// What `home` records for the manifest at `located`. A record that cannot
/// be read or understood approves nothing.
fn recorded(home: &DshHome, located: &Path) -> Recorded {
    let Ok(text) = read_regular_text(&record_path(home, located), MAX_RECORD_BYTES) else {
        return Recorded::Nothing;
    };
    match serde_json::from_str::<Record>(&text) {
        Ok(record) if record.format == FORMAT => Recorded::Current(record),
        _ => Recorded::Earlier,
    }
}

/// The manifest text at `located`.
fn read_manifest(located: &Path) -> CliResult<String> {
    read_regular_text(located, MAX_MANIFEST_BYTES)
        .map_err(|e| Failure::config(format!("cannot read manifest {e}")))
}

/// `text` parsed as the manifest at `located`, its paths resolved against
/// the folder it was found in; `origin` names it in errors.
fn parse(text: &str, located: &Path, origin: &str) -> CliResult<Manifest> {
    let folder = located.parent().map(Path::to_path_buf).unwrap_or_default();
    Manifest::parse(text, origin, folder).map_err(Failure::config)
}

/// Each file `manifest` names that the host runs as is, read, with what
/// an approval records of it.
fn cover(manifest: &Manifest, located: &Path) -> CliResult<Vec<(NamedFile, String, Covered)>> {
    (manifest.files_run_as_is().into_iter())
        .map(|file| {
            let text = read_regular_text(&file.path, file.max_bytes).map_err(|e| {
                Failure::config(format!(
                    "cannot read {} file {e} named by project manifest {}",
                    file.field,
                    shown(located)
                ))
            })?;
            let covered = Covered {
                field: file.field.to_string(),
                path: file.path.display().to_string(),
                sha256: sha256_hex(text.as_bytes()),
            };
            Ok((file, text, covered))
        })
        .collect()
}

/// The project manifest found at `located` (see [`locate`]), as approved in
/// `home`; or, as `Err`, the one line saying what is not approved and that
/// `command` approves it. A file that cannot be read or parsed is a
/// configuration error.
pub(crate) fn check(
    located: &Path,
    home: Option<&DshHome>,
    command: &str,
) -> CliResult<Result<Approved, String>> {
    let text = read_manifest(located)?;
    let manifest_shown = shown(located);
    let refused = |what: String| Ok(Err(format!("{what}: review it, then run `{command}`")));
    let record = match home.map_or(Recorded::Nothing, |home| recorded(home, located)) {
        Recorded::Nothing => {
            return refused(format!(
                "project manifest {manifest_shown} is not approved{}",
                link_note(located)
            ));
        }
        Recorded::Earlier => {
            return refused(format!(
                "project manifest {manifest_shown} was approved by an earlier dsh-env, \
                 whose approval did not cover the files it names (hooks)"
            ));
        }
        Recorded::Current(record) => record,
    };
    if record.manifest.sha256 != sha256_hex(text.as_bytes()) {
        return refused(format!(
            "project manifest {manifest_shown} changed since it was approved"
        ));
    }
    let manifest = parse(&text, located, &located.display().to_string())?;
    let mut files = Vec::new();
    for (index, (file, text, covered)) in cover(&manifest, located)?.into_iter().enumerate() {
        if record.files.get(index) != Some(&covered) {
            return refused(format!(
                "{} file {} of project manifest {manifest_shown} changed since it was approved",
                file.field,
                shown(&file.path)
            ));
        }
        files.push((file, text));
    }
    Ok(Ok(Approved { manifest, files }))
}

/// When the manifest at `located` is a symlink, a note naming what it
/// links to: an approval there does not hold here.
fn link_note(located: &Path) -> String {
    if !located.is_symlink() {
        return String::new();
    }
    match located.canonicalize() {
        Ok(target) => format!(
            " (it links to {}; an approval holds only for the path where a manifest was found)",
            shown(&target)
        ),
        Err(_) => String::new(),
    }
}

/// What [`approve`] approved: the manifest, with its digest, and each file
/// it names that the host runs as is, with its path and digest.
pub(crate) struct NewApproval {
    /// The manifest.
    pub(crate) manifest: Manifest,
    /// The manifest's SHA-256.
    pub(crate) sha256: String,
    /// Each named file: its field, path and SHA-256.
    pub(crate) files: Vec<(NamedFile, String)>,
}

/// Approves, in `home`, the manifest at `located` (see [`locate`]) as it
/// is now, and every file it names that the host runs as is. A manifest
/// that does not parse, or names a file that cannot be read, is refused.
pub(crate) fn approve(located: &Path, home: &DshHome) -> CliResult<NewApproval> {
    let text = read_manifest(located)?;
    // A manifest that cannot load is not worth approving: say why now.
    let manifest = parse(&text, located, &shown(located))?;
    let covered = cover(&manifest, located)?;
    let record = Record {
        format: FORMAT,
        manifest: Covered {
            field: "manifest".into(),
            path: located.display().to_string(),
            sha256: sha256_hex(text.as_bytes()),
        },
        files: covered
            .iter()
            .map(|(_, _, covered)| covered.clone())
            .collect(),
    };
    let json = serde_json::to_string_pretty(&record).map_err(Failure::runtime)?;
    let path = record_path(home, located);
    let written = (path.parent())
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| atomic_file::write(&path, format!("{json}\n")));
    written.map_err(|e| Failure::runtime(format!("cannot write {}: {e}", shown(&path))))?;
    Ok(NewApproval {
        manifest,
        sha256: record.manifest.sha256,
        files: (covered.into_iter())
            .map(|(file, _, covered)| (file, covered.sha256))
            .collect(),
    })
}

/// Withdraws, in `home`, the approval of the manifest at `located`; whether
/// there was one.
pub(crate) fn revoke(located: &Path, home: &DshHome) -> CliResult<bool> {
    let record = record_path(home, located);
    match std::fs::remove_file(&record) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Failure::runtime(format!(
            "cannot remove {}: {e}",
            shown(&record)
        ))),
    }
}

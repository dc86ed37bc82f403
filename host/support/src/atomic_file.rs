//! Whole-file writes that a reader never sees half done, and that survive a
//! crash once they return.

use std::io::Write;
use std::path::Path;

/// Writes `contents` to a fresh temporary file beside `path`, syncs it to
/// disk, then renames it over `path`. Each write has its own temporary file,
/// so concurrent writers of the same path, in this process or another, never
/// share one: whichever rename lands last wins, whole. The sync before the
/// rename means a crash leaves the old file or the new one, never an empty
/// one. A file replaced keeps its permissions.
pub fn write(path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut partial = tempfile::Builder::new()
        .prefix(".partial-")
        .tempfile_in(dir)?;
    if let Ok(existing) = std::fs::metadata(path) {
        partial.as_file().set_permissions(existing.permissions())?;
    }
    partial.write_all(contents.as_ref())?;
    partial.as_file().sync_all()?;
    partial.persist(path).map_err(|e| e.error)?;
    Ok(())
}

//! Whole-file writes that a reader never sees half done.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `contents` to a temporary file beside `path`, then renames it
/// over `path`. The temporary name is unique to this write (process and a
/// counter), so concurrent writers of the same path, in this process or
/// another, never share one: whichever rename lands last wins, whole.
pub(crate) fn write(path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(
        ".partial-{}-{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let partial = Path::new(&partial);
    let written = std::fs::write(partial, contents).and_then(|()| std::fs::rename(partial, path));
    if written.is_err() {
        let _ = std::fs::remove_file(partial);
    }
    written
}

//! What tells one version of a file from another without reading it.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A file's device, inode, length, modification and change times: any
/// write, truncation, replacement or `touch` changes a field. Its text
/// ([`FileVersion::as_str`]) is stable, for records that keep it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileVersion(String);

impl FileVersion {
    /// The version of the file at `path` now (links followed), `None` if
    /// it cannot be read.
    pub fn of(path: &Path) -> Option<FileVersion> {
        let m = fs::metadata(path).ok()?;
        Some(FileVersion(format!(
            "{}:{}:{}:{}.{}:{}.{}",
            m.dev(),
            m.ino(),
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        )))
    }

    /// Its text: `dev:ino:len:mtime.ns:ctime.ns`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

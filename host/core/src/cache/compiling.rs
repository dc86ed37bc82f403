//! One compile of a cache entry at a time in this process: a load that finds
//! another thread compiling the bytes it wants waits for that artifact
//! instead of compiling them again, so a host that registers one component
//! from several threads at once (or several registries sharing a home)
//! compiles it once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, PoisonError};

/// The entries (by artifact path) this process is compiling, and the signal
/// that one of them is done.
struct Compiling {
    entries: Mutex<BTreeSet<PathBuf>>,
    done: Condvar,
}

static COMPILING: Compiling = Compiling {
    entries: Mutex::new(BTreeSet::new()),
    done: Condvar::new(),
};

/// This thread's turn to compile the entry whose artifact is `artifact`,
/// once no other thread of this process has it.
pub(super) fn turn(artifact: &Path) -> Turn {
    let mut entries = (COMPILING.entries.lock()).unwrap_or_else(PoisonError::into_inner);
    while entries.contains(artifact) {
        entries = (COMPILING.done.wait(entries)).unwrap_or_else(PoisonError::into_inner);
    }
    entries.insert(artifact.to_path_buf());
    Turn {
        artifact: artifact.to_path_buf(),
    }
}

/// Held while a thread compiles an entry (and stores it); dropping it wakes
/// the loads waiting for that entry.
pub(super) struct Turn {
    artifact: PathBuf,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut entries = (COMPILING.entries.lock()).unwrap_or_else(PoisonError::into_inner);
        entries.remove(&self.artifact);
        COMPILING.done.notify_all();
    }
}

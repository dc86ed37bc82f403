//! The cache's size cap: what an entry is, when it was last used, and which
//! entries go when the directory outgrows its cap.
//!
//! An entry is everything filed under one component's content for one
//! engine: its artifact, seal and failure record, the aliases naming it and
//! its remembered declarations. Its last use is the newest mtime among its
//! files; mapping its artifact moves the seal's mtime to now, at most once
//! per [`USE_RESOLUTION`], so recording a use costs no system call on most
//! loads. Any other file (from an older layout, or a write a crashed process
//! left behind) is an entry of its own.
//!
//! Eviction removes whole entries, least recently used first, until the
//! directory fits its cap. It runs after each write of an artifact, keeping
//! the entries of components the writing process still holds (the one just
//! written among them, so a cap smaller than one artifact still caches the
//! latest, and components loaded together do not evict each other), and on
//! demand (`ArtifactCache::gc`,
//! `ArtifactCache::clear`). Other processes may be using the same
//! directory, so:
//! - a file is only ever unlinked, and an artifact another process has mapped
//!   stays mapped and unchanged (entries are never rewritten in place);
//! - a process that finds a seal or artifact gone compiles again, and an
//!   alias or declaration left naming an evicted artifact leads only there;
//!   a seal left without its artifact, or an artifact without its seal, is
//!   never trusted (see `ArtifactCache`);
//! - a write in progress (a `.partial-*` file younger than [`PARTIAL_GRACE`])
//!   is never removed;
//! - an entry used after the directory was listed is kept.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::declaration::RawDeclaration;

/// How stale a seal's mtime may be before a load moves it to now: the
/// precision of "least recently used".
pub(super) const USE_RESOLUTION: Duration = Duration::from_secs(60);

/// How long a half-written file is left alone as another writer's, before
/// it counts as a crashed one's and may be removed.
const PARTIAL_GRACE: Duration = Duration::from_secs(3600);

/// Why the cache directory could not be listed or cut back.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The directory is not safe to use (another user can write it).
    #[error("not using the cache {}: {reason}", dir.display())]
    Unusable {
        /// The cache directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
    /// Listing the directory failed.
    #[error("cannot list the cache {}: {source}", dir.display())]
    List {
        /// The cache directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// One entry of the cache directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedEntry {
    /// `<content>-<engine>` for a component's entry, else the file's name.
    pub id: String,
    /// The SHA-256 of the component's bytes, for a component's entry.
    pub content: Option<String>,
    /// The engine configuration's tag, for a component's entry.
    pub engine: Option<String>,
    /// Whether it holds a precompiled artifact (else, say, only a failure
    /// record or remembered declarations).
    pub artifact: bool,
    /// The contributor names its remembered declarations give (guest text:
    /// escape it before showing it).
    pub names: Vec<String>,
    /// How many files it has.
    pub files: usize,
    /// Their total size.
    pub bytes: u64,
    /// When it was last used, to [`USE_RESOLUTION`].
    pub last_used: SystemTime,
}

/// What one eviction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Eviction {
    /// Entries removed.
    pub removed: usize,
    /// Bytes they held.
    pub freed_bytes: u64,
    /// Bytes the directory still holds.
    pub remaining_bytes: u64,
}

/// An entry and its files, as listed.
struct Listed {
    entry: CachedEntry,
    paths: Vec<PathBuf>,
    /// False for a write in progress.
    evictable: bool,
}

/// Every entry of `dir`, least recently used first, with the names its
/// remembered declarations give, as `declared` reads them.
pub(super) fn entries(
    dir: &Path,
    declared: &dyn Fn(&Path) -> Option<RawDeclaration>,
) -> std::io::Result<Vec<CachedEntry>> {
    let mut listed = list(dir)?;
    for one in &mut listed {
        one.entry.names = declared_names(&one.paths, declared);
    }
    Ok(listed.into_iter().map(|one| one.entry).collect())
}

/// Removes the least recently used entries of `dir` but those `keep` names
/// until it holds at most `max_bytes`.
pub(super) fn evict(
    dir: &Path,
    max_bytes: u64,
    keep: &dyn Fn(&str) -> bool,
) -> std::io::Result<Eviction> {
    let listed = list(dir)?;
    let mut remaining: u64 = listed.iter().map(|one| one.entry.bytes).sum();
    let mut eviction = Eviction::default();
    // `list` sorts least recently used first.
    for one in &listed {
        if remaining <= max_bytes {
            break;
        }
        if !one.evictable || keep(&one.entry.id) || used_since(one) {
            continue;
        }
        let freed = remove(&one.paths);
        // A file may have grown since the listing.
        remaining = remaining.saturating_sub(freed);
        eviction.removed += 1;
        eviction.freed_bytes += freed;
    }
    eviction.remaining_bytes = remaining;
    Ok(eviction)
}

/// Whether the entry was used (or rewritten) after it was listed.
fn used_since(one: &Listed) -> bool {
    let mut times = LastUse::default();
    for path in &one.paths {
        if let Ok(modified) = fs::symlink_metadata(path).and_then(|meta| meta.modified()) {
            times.add(path, modified);
        }
    }
    times.get() > one.entry.last_used
}

/// An entry's last use, from its files' mtimes: the newest but the
/// artifact's, whose times are part of its identity (so a load never moves
/// them), unless the artifact is all there is.
#[derive(Default)]
struct LastUse {
    marked: Option<SystemTime>,
    written: Option<SystemTime>,
}

impl LastUse {
    fn add(&mut self, path: &Path, modified: SystemTime) {
        let slot = if path.extension().is_some_and(|e| e == "cwasm") {
            &mut self.written
        } else {
            &mut self.marked
        };
        *slot = (*slot).max(Some(modified));
    }

    fn get(&self) -> SystemTime {
        self.marked
            .or(self.written)
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }
}

/// Unlinks `paths`; the bytes of those now gone (whoever removed them).
fn remove(paths: &[PathBuf]) -> u64 {
    let mut freed = 0;
    for path in paths {
        let Ok(meta) = fs::symlink_metadata(path) else {
            continue;
        };
        match fs::remove_file(path) {
            Ok(()) => freed += meta.len(),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => freed += meta.len(),
            Err(err) => tracing::warn!("cannot remove {} from the cache: {err}", path.display()),
        }
    }
    freed
}

/// The entries of `dir` (none if it does not exist), least recently used first.
fn list(dir: &Path) -> std::io::Result<Vec<Listed>> {
    let reading = match fs::read_dir(dir) {
        Ok(reading) => reading,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let now = SystemTime::now();
    let mut entries: BTreeMap<String, (Listed, LastUse)> = BTreeMap::new();
    for file in reading {
        let file = file?;
        // Not followed: a link is a file of its own here.
        let Ok(meta) = file.metadata() else {
            continue; // Removed since the listing.
        };
        if meta.is_dir() {
            continue;
        }
        let path = file.path();
        let name = file.file_name().to_string_lossy().into_owned();
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        // A partial file from the future is as young as they come.
        let in_progress = name.starts_with(".partial-")
            && now
                .duration_since(modified)
                .map_or(true, |age| age < PARTIAL_GRACE);
        let (id, content, engine) = owner(&name, &path);
        let (one, times) = entries.entry(id.clone()).or_insert_with(|| {
            let listed = Listed {
                entry: CachedEntry {
                    id,
                    content,
                    engine,
                    artifact: false,
                    names: Vec::new(),
                    files: 0,
                    bytes: 0,
                    last_used: SystemTime::UNIX_EPOCH,
                },
                paths: Vec::new(),
                evictable: true,
            };
            (listed, LastUse::default())
        });
        one.entry.artifact |= name.ends_with(".cwasm") && one.entry.content.is_some();
        one.entry.files += 1;
        one.entry.bytes += meta.len();
        times.add(&path, modified);
        one.evictable &= !in_progress;
        one.paths.push(path);
    }
    let mut entries: Vec<Listed> = (entries.into_values())
        .map(|(mut one, times)| {
            one.entry.last_used = times.get();
            one
        })
        .collect();
    entries.sort_by_key(|one| one.entry.last_used);
    Ok(entries)
}

/// The entry a file belongs to: its id, content and engine tag.
fn owner(name: &str, path: &Path) -> (String, Option<String>, Option<String>) {
    let component = |content: &str, tag: &str| {
        (
            format!("{content}-{tag}"),
            Some(content.to_string()),
            Some(tag.to_string()),
        )
    };
    let (stem, extension) = name.rsplit_once('.').unwrap_or((name, ""));
    let parts: Vec<&str> = stem.split('-').collect();
    match (extension, parts.as_slice()) {
        ("cwasm" | "seal" | "failed" | "linked", [content, tag])
            if is_digest(content) && is_tag(tag) =>
        {
            component(content, tag)
        }
        ("declaration", [content, key, tag])
            if is_digest(content) && is_digest(key) && is_tag(tag) =>
        {
            component(content, tag)
        }
        ("alias", [key, tag]) if is_digest(key) && is_tag(tag) => match aliased(path) {
            Some(content) => component(&content, tag),
            None => (name.to_string(), None, None),
        },
        _ => (name.to_string(), None, None),
    }
}

/// The content digest an alias file names, if it names one: its first 64
/// bytes (the record's MAC follows; it is checked only where the alias is
/// followed to load, not to group files for eviction).
fn aliased(path: &Path) -> Option<String> {
    let mut text = String::new();
    let file = fs::File::open(path).ok()?;
    file.take(64).read_to_string(&mut text).ok()?;
    is_digest(&text).then_some(text)
}

/// Whether `text` is a SHA-256 in hex, of either case (a name the cache wrote).
pub(super) fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `text` is an engine tag (see [`crate::engine::engine_tag`]).
fn is_tag(text: &str) -> bool {
    text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The names in the remembered declarations among `paths`, each once.
fn declared_names(
    paths: &[PathBuf],
    declared: &dyn Fn(&Path) -> Option<RawDeclaration>,
) -> Vec<String> {
    let mut names: Vec<String> = paths
        .iter()
        .filter(|path| path.extension().is_some_and(|e| e == "declaration"))
        .filter_map(|path| Some(declared(path)?.name))
        .collect();
    names.sort();
    names.dedup();
    names
}

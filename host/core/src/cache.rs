//! Precompiled components under `$DSH_HOME/cache/`, so each component is
//! compiled once and a later load maps a file instead of reading one.
//!
//! The directory holds, per engine configuration (`<engine>`):
//! - `<content>-<engine>.cwasm`: the artifact `Component::serialize` wrote,
//!   keyed by the SHA-256 of the component's bytes, mapped lazily with
//!   `Component::deserialize_file` (so only the pages a guest uses are
//!   resident, and they are shared with the page cache);
//! - `<content>-<engine>.seal`: the artifact's SHA-256, the file identity
//!   (device, inode, size, mtime, ctime) it was verified at, and the entry
//!   (`<content>-<engine>`) it was filed under, so an artifact copied over
//!   another component's entry, seal and all, is recompiled, never run for it;
//! - `<content>-<engine>.linked`: this host has linked the artifact
//!   against its WASI and contract bindings, so a later load may leave
//!   deserializing it to the first use (see `Opening`);
//! - `<content>-<engine>.failed`: why compiling those bytes ran out of the
//!   compile CPU or memory limit, and the limits, so a later load under the
//!   same (or lower) limits fails at once instead of compiling again;
//! - `<path>-<engine>.alias`: a component file's path and identity, hashed,
//!   naming the `<content>` of its bytes;
//! - `<content>-<inputs>-<engine>.declaration`: what a component declared,
//!   keyed by its content and everything else `declare` can see (config, env
//!   grants, limits), so that registering from a warm cache need not
//!   instantiate the guest. The host checks a remembered declaration by the
//!   same rules as a fresh one.
//!
//! Every file but the artifact is a record that ends in an HMAC-SHA256 of
//! its body and its own name, under a key kept in the user's home (see
//! [`key`], [`CacheKey`]): a record without a valid one is treated as
//! absent, so nothing written by anyone without the key (a checkout that
//! ships a home's cache, say) is loaded as code or trusted as a declaration.
//!
//! A load whose alias and seal match the files' current identities reads
//! neither the component nor the artifact. Any write to either file changes
//! its identity, so its bytes are hashed again: a changed component gets its
//! own entry, and a corrupt or truncated artifact is recompiled, never run.
//! Entries are only ever replaced by rename, never rewritten in place, so a
//! mapped artifact does not change under a running guest.
//!
//! The directory has a size cap ([`ArtifactCache::with_max_bytes`], default
//! [`ArtifactCache::DEFAULT_MAX_BYTES`]); see [`evict`] for how entries are used and evicted.
//!
//! An artifact is native code the host maps and runs, so the directory must
//! be writable by this user alone: it is created with mode 0700, and one (or
//! a parent, the home) that is owned by another user or writable by its
//! group or others is not used at all (with a warning): every load then
//! compiles, maps from memory, and writes nothing there. So it is when its
//! key cannot be read or made.

mod compiling;
mod evict;
mod key;

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::compile::{Bounds, CompileError, limit_field};
use crate::declaration::RawDeclaration;
use crate::engine::engine_tag;
use crate::load_error::LoadErrorKind;
use dsh_env_support::atomic_file;
use dsh_env_support::digest::{self, hex, sha256_hex};
use dsh_env_support::file_version::FileVersion;
use dsh_env_support::input::escape_controls;

use evict::is_digest;
pub use evict::{CacheError, CachedEntry, Eviction};
pub use key::CacheKey;
use key::Secret;

/// A directory of precompiled component artifacts.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    /// Whether `dir` is safe to use, or why not (decided once, on first use).
    usable: Arc<OnceLock<Result<(), String>>>,
    /// Where the key that authenticates its records is.
    key: CacheKey,
    /// That key, or why it cannot be had (read once, on first use).
    secret: Arc<OnceLock<Result<Secret, String>>>,
    /// The size the directory is cut back to after a write that exceeds it.
    max_bytes: u64,
    /// The entries of components this process holds, which its own
    /// evictions keep (see [`Held`]).
    held: Arc<Mutex<HashMap<String, Weak<str>>>>,
}

/// Keeps a cache entry from this process's evictions while a component
/// loaded from it (or being loaded) lives: a registered component's artifact
/// is the one its next process wants, and two components loaded at once
/// must not evict each other.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// Alive while the hold is: the weak map entry upgrades.
    _stem: Arc<str>,
}

/// A loaded component, the SHA-256 of its bytes, and its hold on its entry.
pub(crate) struct Loaded {
    pub(crate) component: Opened,
    pub(crate) content: String,
    pub(crate) held: Held,
    /// Its entry's `.linked` mark, for [`ArtifactCache::mark_linked`] (none
    /// when the cache is not used).
    pub(crate) linked: Option<PathBuf>,
}

/// A component as the cache hands it over.
pub(crate) enum Opened {
    /// Deserialized.
    Now(Component),
    /// The sealed artifact at this path, not deserialized yet (see [`deserialize`]).
    Later(PathBuf),
}

impl Opened {
    /// The component, deserialized now for `engine` if it was left for later.
    pub(crate) fn open(&self, engine: &Engine) -> Result<Component, String> {
        match self {
            Opened::Now(component) => Ok(component.clone()),
            Opened::Later(artifact) => deserialize(engine, artifact),
        }
    }
}

/// One artifact, its seal and its failure record.
struct Entry {
    /// `<content>-<engine>`: what the seal must name.
    stem: String,
    artifact: PathBuf,
    seal: PathBuf,
    failed: PathBuf,
    linked: PathBuf,
}

/// What `<content>-<engine>.failed` holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Failure {
    bounds: Bounds,
    reason: String,
    /// The limit that ran out, by its manifest name (absent in records
    /// written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limit: Option<String>,
}

impl ArtifactCache {
    /// The default size cap of a cache directory: room for a dozen Python or
    /// JavaScript contributors (about 40 MB each) and hundreds of Rust or C ones.
    pub const DEFAULT_MAX_BYTES: u64 = 512 << 20;

    /// A cache kept in `dir` (created, mode 0700, on first use), its records
    /// authenticated with the key of the home it is in, `dir`'s parent: a
    /// home the embedder trusts (else see [`Self::with_key`]).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        let home = (dir.parent())
            .filter(|parent| !parent.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        ArtifactCache {
            key: CacheKey::InHome(home.to_path_buf()),
            dir,
            usable: Arc::default(),
            secret: Arc::default(),
            max_bytes: Self::DEFAULT_MAX_BYTES,
            held: Arc::default(),
        }
    }

    /// The same cache, its records authenticated with `key` instead: the
    /// user's own home's key when `dir` is in a home someone else may fill,
    /// such as one a checkout's manifest names (docs/compiling.md).
    pub fn with_key(mut self, key: CacheKey) -> Self {
        self.key = key;
        self.secret = Arc::default();
        self
    }

    /// The same cache, cut back to `max_bytes` (least recently used entries
    /// first) after each write of an artifact that makes it larger.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// The size cap writes keep the directory within.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Where the artifacts live.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key, if the directory may be used: it is (or is now) a directory
    /// that only this user can write, in a parent others cannot change, and
    /// its key can be read or made. Warns once when not.
    fn usable(&self) -> Option<&Secret> {
        self.checked().as_ref().ok()?;
        (self.decided(&self.secret, || self.key.load()))
            .as_ref()
            .ok()
    }

    /// Whether the directory is safe to use, or why not.
    fn checked(&self) -> &Result<(), String> {
        self.decided(&self.usable, || prepare(&self.dir))
    }

    /// What `decide` said the first time `cell` was asked, warning then
    /// if it refused the directory.
    fn decided<'c, T>(
        &self,
        cell: &'c OnceLock<Result<T, String>>,
        decide: impl FnOnce() -> Result<T, String>,
    ) -> &'c Result<T, String> {
        cell.get_or_init(|| {
            let decided = decide();
            if let Err(why) = &decided {
                tracing::warn!(
                    "not using the compile cache {}: {why}; compiling every time and \
                     writing nothing there",
                    self.dir.display()
                );
            }
            decided
        })
    }

    /// The component in the file at `path`: mapped from a sealed entry when
    /// the file is unchanged since it was aliased (left to the caller to
    /// deserialize if `defer`), else as [`Self::compiled_bytes`] loads its bytes.
    /// Cache trouble only costs a read or a recompile.
    pub(crate) fn compiled_file(
        &self,
        engine: &Engine,
        path: &Path,
        bounds: &Bounds,
        compile: impl FnOnce(&[u8]) -> Result<Vec<u8>, CompileError>,
        defer: bool,
    ) -> Result<Loaded, LoadErrorKind> {
        let tag = engine_tag(engine);
        let (before, alias) = self.alias(path, &tag);
        if let Some(loaded) = alias
            .as_deref()
            .and_then(|a| self.aliased(engine, a, &tag, defer))
        {
            return Ok(loaded);
        }
        let bytes = dsh_env_support::input::read_regular_file(
            path,
            dsh_env_support::input::MAX_COMPONENT_BYTES,
        )
        .map_err(|e| LoadErrorKind::Read(e.problem.into()))?;
        let loaded = self.load_keyed(engine, &bytes, &tag, bounds, compile)?;
        // Alias only a file that did not change while it was read.
        if let Some(alias) = alias
            && FileVersion::of(path) == before
            && let Err(err) = self.write_record(&alias, loaded.content.as_bytes())
        {
            tracing::warn!("cannot store cache alias {}: {err}", alias.display());
        }
        Ok(loaded)
    }

    /// The component in the file at `path`, if the file is unchanged since
    /// it was aliased to a sound entry for `engine`: nothing is read or
    /// compiled otherwise.
    pub(crate) fn lookup_file(&self, engine: &Engine, path: &Path, defer: bool) -> Option<Loaded> {
        let tag = engine_tag(engine);
        let (_, alias) = self.alias(path, &tag);
        self.aliased(engine, &alias?, &tag, defer)
    }

    /// The component for `bytes`, if a sound entry for `engine` holds it.
    pub(crate) fn lookup_bytes(&self, engine: &Engine, bytes: &[u8]) -> Option<Loaded> {
        self.usable()?;
        self.sound(engine, sha256_hex(bytes), &engine_tag(engine), false)
    }

    /// The file's identity now (when the cache is usable), and the alias
    /// that names the content of the file at `path` with that identity.
    fn alias(&self, path: &Path, tag: &str) -> (Option<FileVersion>, Option<PathBuf>) {
        let before = FileVersion::of(path).filter(|_| self.usable().is_some());
        let alias = before.as_ref().and_then(|identity| {
            let path = fs::canonicalize(path).ok()?;
            let key = Sha256::digest(format!("{}\n{}", path.display(), identity.as_str()));
            Some(self.dir.join(format!("{}-{tag}.alias", hex(&key))))
        });
        (before, alias)
    }

    /// The component of the sound entry `alias` names, if any.
    fn aliased(&self, engine: &Engine, alias: &Path, tag: &str, defer: bool) -> Option<Loaded> {
        let content = String::from_utf8(self.read_record(alias)?).ok();
        self.sound(engine, content.filter(|c| is_digest(c))?, tag, defer)
    }

    /// The component of the entry for `content` and `tag`, if it is sound
    /// (see [`Self::open`] for `defer`).
    fn sound(&self, engine: &Engine, content: String, tag: &str, defer: bool) -> Option<Loaded> {
        let entry = self.entry(&content, tag);
        let held = self.hold(&entry);
        let component = self.open(engine, &entry, defer)?;
        Some(Loaded {
            component,
            content,
            held,
            linked: Some(entry.linked),
        })
    }

    /// The component for `bytes`, and the SHA-256 of `bytes`: mapped from a
    /// sound entry when one exists, else compiled with `compile` under
    /// `bounds` and stored, unless those bytes already ran out of limits no
    /// higher than `bounds`.
    pub(crate) fn compiled_bytes(
        &self,
        engine: &Engine,
        bytes: &[u8],
        bounds: &Bounds,
        compile: impl FnOnce(&[u8]) -> Result<Vec<u8>, CompileError>,
    ) -> Result<Loaded, LoadErrorKind> {
        self.load_keyed(engine, bytes, &engine_tag(engine), bounds, compile)
    }

    /// A declaration stored by [`Self::store_declaration`] under `content`
    /// and `key`, if there is a readable one.
    pub(crate) fn declaration(
        &self,
        engine: &Engine,
        content: &str,
        key: &str,
    ) -> Option<RawDeclaration> {
        let path = self.declaration_path(engine, content, key);
        serde_json::from_slice(&self.read_record(&path)?).ok()
    }

    /// Remembers what the component with digest `content` declared under
    /// `key`, which must name everything else the declaration can depend on
    /// (see `ContributorComponent::declaration_key`). Filed under `content`,
    /// it is evicted with that component's artifact.
    pub(crate) fn store_declaration(
        &self,
        engine: &Engine,
        content: &str,
        key: &str,
        raw: &RawDeclaration,
    ) {
        if self.usable().is_none() {
            return;
        }
        let path = self.declaration_path(engine, content, key);
        let written = serde_json::to_vec(raw)
            .map_err(std::io::Error::other)
            .and_then(|json| self.write_record(&path, &json));
        if let Err(err) = written {
            tracing::warn!("cannot store declaration {}: {err}", path.display());
        }
    }

    fn declaration_path(&self, engine: &Engine, content: &str, key: &str) -> PathBuf {
        let tag = engine_tag(engine);
        self.dir.join(format!("{content}-{key}-{tag}.declaration"))
    }

    /// [`Self::compiled_bytes`] for an engine `tag` already computed.
    fn load_keyed(
        &self,
        engine: &Engine,
        bytes: &[u8],
        tag: &str,
        bounds: &Bounds,
        compile: impl FnOnce(&[u8]) -> Result<Vec<u8>, CompileError>,
    ) -> Result<Loaded, LoadErrorKind> {
        let content = sha256_hex(bytes);
        let entry = self.entry(&content, tag);
        let held = self.hold(&entry);
        let usable = self.usable().is_some();
        let loaded = |component| Loaded {
            component,
            content,
            held,
            linked: usable.then_some(entry.linked.clone()),
        };
        if !usable {
            let artifact = compile(bytes)?;
            return in_memory(engine, &artifact)
                .map(Opened::Now)
                .map(loaded)
                .map_err(LoadErrorKind::Cache);
        }
        if let Some(component) = self.open(engine, &entry, false) {
            return Ok(loaded(component));
        }
        // Another thread of this process may be compiling these bytes: its
        // artifact (or its remembered failure) is there once it is done.
        let _turn = compiling::turn(&entry.artifact);
        if let Some(component) = self.open(engine, &entry, false) {
            return Ok(loaded(component));
        }
        if let Some(failure) = self.failure(&entry, bounds) {
            return Err(LoadErrorKind::CompileLimit {
                limit: failure.limit.as_deref().and_then(limit_field),
                reason: format!(
                    "{} (remembered; raise limits.compile_* to retry)",
                    failure.reason
                ),
            });
        }
        let artifact = match compile(bytes) {
            Ok(artifact) => artifact,
            Err(CompileError::Exceeded { limit, reason }) => {
                self.remember_failure(&entry, bounds, limit, &reason);
                return Err(LoadErrorKind::CompileLimit {
                    limit: Some(limit),
                    reason,
                });
            }
            Err(other) => return Err(other.into()),
        };
        // It compiles now (under higher limits): forget an old failure.
        let _ = fs::remove_file(&entry.failed);
        if let Err(err) = self.store(&entry, &artifact) {
            tracing::warn!(
                "cannot store precompiled artifact {}: {err}",
                entry.artifact.display()
            );
        }
        // This process keeps the copy in memory, as when it compiled in
        // process; later ones map the stored file.
        in_memory(engine, &artifact)
            .map(Opened::Now)
            .map(loaded)
            .map_err(LoadErrorKind::Cache)
    }

    /// A hold on `entry` for the component about to be loaded from it.
    fn hold(&self, entry: &Entry) -> Held {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(live) = held.get(&entry.stem).and_then(Weak::upgrade) {
            return Held { _stem: live };
        }
        // Forget the entries of components since dropped, so the map stays
        // as small as what this process holds.
        held.retain(|_, hold| hold.strong_count() > 0);
        let hold: Arc<str> = Arc::from(entry.stem.as_str());
        held.insert(entry.stem.clone(), Arc::downgrade(&hold));
        Held { _stem: hold }
    }

    /// Whether a component this process holds was loaded from entry `stem`.
    fn is_held(&self, stem: &str) -> bool {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(stem).is_some_and(|hold| hold.strong_count() > 0)
    }

    fn entry(&self, content: &str, tag: &str) -> Entry {
        let stem = format!("{content}-{tag}");
        Entry {
            artifact: self.dir.join(format!("{stem}.cwasm")),
            seal: self.dir.join(format!("{stem}.seal")),
            failed: self.dir.join(format!("{stem}.failed")),
            linked: self.dir.join(format!("{stem}.linked")),
            stem,
        }
    }

    /// Why the entry's bytes failed to compile, if they ran out of limits
    /// no higher than `bounds`.
    fn failure(&self, entry: &Entry, bounds: &Bounds) -> Option<Failure> {
        let failure: Failure = serde_json::from_slice(&self.read_record(&entry.failed)?).ok()?;
        (!bounds.exceeds(&failure.bounds)).then_some(failure)
    }

    fn remember_failure(&self, entry: &Entry, bounds: &Bounds, limit: &str, reason: &str) {
        let failure = Failure {
            bounds: *bounds,
            reason: reason.to_string(),
            limit: Some(limit.to_string()),
        };
        let written = serde_json::to_vec(&failure)
            .map_err(std::io::Error::other)
            .and_then(|json| self.write_record(&entry.failed, &json));
        if let Err(err) = written {
            tracing::warn!("cannot record {}: {err}", entry.failed.display());
        }
    }

    /// Records that the artifact of `loaded` links on this host (see
    /// [`Loaded::linked`]), unless that is recorded already.
    pub(crate) fn mark_linked(&self, loaded: Option<&Path>) {
        let Some(mark) = loaded.filter(|mark| !self.is_marked(mark)) else {
            return;
        };
        if let Err(err) = self.write_record(mark, b"") {
            tracing::warn!("cannot store {}: {err}", mark.display());
        }
    }

    /// Whether the `.linked` mark at `mark` is one this home's key made.
    fn is_marked(&self, mark: &Path) -> bool {
        self.read_record(mark).is_some_and(|body| body.is_empty())
    }

    /// The entry's component, if its seal is one this home's key made, it
    /// is sealed as it is now (or its bytes still match the seal's digest)
    /// and this engine accepts it (checked by the caller later if `defer`
    /// and the entry is marked linked). Records the use on the seal (see
    /// [`evict`]).
    fn open(&self, engine: &Engine, entry: &Entry, defer: bool) -> Option<Opened> {
        let secret = self.usable()?;
        let record = read_and_mark_used(&entry.seal)?;
        let Some(seal) = (secret.open(file_name(&entry.seal), &record))
            .and_then(|body| std::str::from_utf8(body).ok())
        else {
            tracing::warn!(
                "precompiled artifact {} has a seal this home's key did not make (from an \
                 older dsh-env, or not from this host); recompiling",
                entry.artifact.display()
            );
            return None;
        };
        let mut fields = seal.splitn(3, ' ');
        let (digest, sealed, filed) = (fields.next()?, fields.next()?, fields.next()?);
        if filed != entry.stem {
            tracing::warn!(
                "precompiled artifact {} is sealed for another entry ({}); recompiling",
                entry.artifact.display(),
                escape_controls(filed)
            );
            return None;
        }
        let identity = FileVersion::of(&entry.artifact)?;
        if identity.as_str() != sealed {
            // Written since it was sealed: trust the bytes only if they match.
            let artifact = fs::read(&entry.artifact).ok()?;
            if digest::verify(&artifact, digest).is_err() {
                tracing::warn!(
                    "corrupt precompiled artifact {}; recompiling",
                    entry.artifact.display()
                );
                return None;
            }
            let resealed = FileVersion::of(&entry.artifact)?;
            let seal = format!("{digest} {} {}", resealed.as_str(), entry.stem);
            if let Err(err) = self.write_record(&entry.seal, seal.as_bytes()) {
                tracing::warn!("cannot reseal {}: {err}", entry.artifact.display());
            }
        }
        if defer && self.is_marked(&entry.linked) {
            return Some(Opened::Later(entry.artifact.clone()));
        }
        match deserialize(engine, &entry.artifact) {
            Ok(component) => Some(Opened::Now(component)),
            Err(err) => {
                tracing::warn!(
                    "unusable precompiled artifact {}: {err}; recompiling",
                    entry.artifact.display()
                );
                None
            }
        }
    }

    fn store(&self, entry: &Entry, artifact: &[u8]) -> std::io::Result<()> {
        atomic_file::write(&entry.artifact, artifact)?;
        evict_from_page_cache(&entry.artifact);
        let identity = FileVersion::of(&entry.artifact)
            .ok_or_else(|| std::io::Error::other("the artifact vanished after writing"))?;
        let digest = sha256_hex(artifact);
        let seal = format!("{digest} {} {}", identity.as_str(), entry.stem);
        self.write_record(&entry.seal, seal.as_bytes())?;
        // Bounded work: one listing of the directory, and removals.
        self.evict_after_write();
        Ok(())
    }

    /// The body of the record at `path`, if this home's key made it for
    /// that file name (see [`key`]).
    fn read_record(&self, path: &Path) -> Option<Vec<u8>> {
        let secret = self.usable()?;
        let record = dsh_env_support::input::read_regular_file(path, MAX_RECORD_BYTES).ok()?;
        secret.open(file_name(path), &record).map(<[u8]>::to_vec)
    }

    /// Writes `body` as the record at `path`, authenticated for that name
    /// with this home's key: written, then renamed into place, so a reader
    /// never sees a partial file.
    fn write_record(&self, path: &Path, body: &[u8]) -> std::io::Result<()> {
        let secret =
            (self.usable()).ok_or_else(|| std::io::Error::other("the cache is not in use"))?;
        atomic_file::write(path, secret.sign(file_name(path), body))
    }
}

/// The largest record read back (a remembered declaration is the largest).
const MAX_RECORD_BYTES: u64 = 4 << 20;

/// The name of a file in the cache directory, which its record's MAC covers.
fn file_name(path: &Path) -> &str {
    path.file_name()
        .and_then(|name| name.to_str())
        .unwrap_or("")
}

/// Drops a just-written artifact's pages from the page cache; the write
/// synced them, so they are clean. Written, they sit in large folios, and a
/// fault maps a large folio whole: a process that ran a few MiB of a
/// component's code held most of it resident (BENCHMARKS.md, RSS after the
/// burst). Read back at first use, the file comes in as the pages guests touch.
/// Advice only: when it fails, nothing else changes.
fn evict_from_page_cache(path: &Path) {
    crate::os::drop_cached_pages(path);
}

/// The seal at `path`, read through one descriptor that also tells its
/// mtime, the entry's last use: moved to now when it is older than
/// [`evict::USE_RESOLUTION`], so a load costs no extra system call but once
/// in that while. The seal's own times are in no identity, so this never
/// invalidates it.
fn read_and_mark_used(path: &Path) -> Option<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    // Neither a FIFO nor a terminal can hold the load.
    let mut file = (fs::OpenOptions::new().read(true))
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok().filter(fs::Metadata::is_file)?;
    let mut text = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).min(1024));
    // A seal is two short lines; anything longer is not one.
    file.by_ref().take(1024).read_to_end(&mut text).ok()?;
    let now = SystemTime::now();
    let stale = meta
        .modified()
        .ok()
        .and_then(|used| now.duration_since(used).ok())
        .is_none_or(|age| age > evict::USE_RESOLUTION);
    if stale && let Err(err) = file.set_modified(now) {
        tracing::debug!("cannot mark {} used: {err}", path.display());
    }
    Some(text)
}

/// The component in `artifact`, an entry [`ArtifactCache`] sealed: mapped,
/// and its metadata deserialized.
pub(crate) fn deserialize(engine: &Engine, artifact: &Path) -> Result<Component, String> {
    // SAFETY: the artifact is one `Component::serialize` wrote (its digest
    // or its sealed identity says so), it is replaced only by rename, and
    // wasmtime itself refuses artifacts from another version or engine
    // configuration.
    unsafe { Component::deserialize_file(engine, artifact) }.map_err(|e| format!("{e:#}"))
}

/// The component in `artifact`, which the compile helper just wrote.
fn in_memory(engine: &Engine, artifact: &[u8]) -> Result<Component, String> {
    // SAFETY: the artifact comes from the compile helper run for this engine
    // (it checked the engine tag), not from a file someone else could write;
    // wasmtime also refuses an artifact from another configuration.
    unsafe { Component::deserialize(engine, artifact) }
        .map_err(|e| format!("the compile helper's artifact is unusable: {e:#}"))
}

/// Creates `dir` (mode 0700) if it is missing, and checks that nobody else
/// can write it or replace it: `dir` must be owned by this user (or root)
/// and writable by nobody else; its parent (the home) likewise, except that
/// a sticky parent such as `/tmp` lets nobody else rename what is ours.
fn prepare(dir: &Path) -> Result<(), String> {
    let mut builder = fs::DirBuilder::new();
    builder.mode(0o700);
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            builder
                .recursive(true)
                .create(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        only_ours(parent, true)?;
    }
    match builder.recursive(false).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create it: {e}")),
    }
    only_ours(dir, false)
}

/// Whether `dir` is a directory that no other user can write.
pub(super) fn only_ours(dir: &Path, sticky_will_do: bool) -> Result<(), String> {
    let meta = fs::metadata(dir).map_err(|e| format!("cannot inspect {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    // SAFETY: geteuid cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!(
            "{} is owned by another user (uid {})",
            dir.display(),
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    let sticky = mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !(sticky_will_do && sticky) {
        return Err(format!(
            "{} is writable by its group or others (mode {mode:o})",
            dir.display()
        ));
    }
    Ok(())
}

impl ArtifactCache {
    /// Every entry of the directory, least recently used first.
    pub fn entries(&self) -> Result<Vec<CachedEntry>, CacheError> {
        self.check_for_maintenance()?;
        // Names only from declarations this home's key vouches for.
        let declared = |path: &Path| -> Option<RawDeclaration> {
            serde_json::from_slice(&self.read_record(path)?).ok()
        };
        evict::entries(&self.dir, &declared).map_err(|source| self.list_error(source))
    }

    /// Removes the least recently used entries until the directory holds at
    /// most `max_bytes` (writes in progress are left alone and count).
    pub fn gc(&self, max_bytes: u64) -> Result<Eviction, CacheError> {
        self.check_for_maintenance()?;
        evict::evict(&self.dir, max_bytes, &|_| false).map_err(|source| self.list_error(source))
    }

    /// Removes every entry (but writes in progress); processes using the
    /// cache compile again what they load next.
    pub fn clear(&self) -> Result<Eviction, CacheError> {
        self.gc(0)
    }

    /// Cuts the directory back to its cap after a write, keeping the
    /// entries of components this process holds (the one just written
    /// among them). Failures only cost space, so they are logged.
    fn evict_after_write(&self) {
        match evict::evict(&self.dir, self.max_bytes, &|id| self.is_held(id)) {
            Ok(eviction) if eviction.removed > 0 => tracing::info!(
                "compile cache {} over its cap of {} bytes: removed {} least recently used \
                 entries ({} bytes)",
                self.dir.display(),
                self.max_bytes,
                eviction.removed,
                eviction.freed_bytes
            ),
            Ok(_) => {}
            Err(err) => tracing::warn!("cannot keep the compile cache within its cap: {err}"),
        }
    }

    /// The directory, if it is one it is safe to remove files from.
    fn check_for_maintenance(&self) -> Result<(), CacheError> {
        self.checked()
            .clone()
            .map_err(|reason| CacheError::Unusable {
                dir: self.dir.clone(),
                reason,
            })
    }

    fn list_error(&self, source: std::io::Error) -> CacheError {
        CacheError::List {
            dir: self.dir.clone(),
            source,
        }
    }
}

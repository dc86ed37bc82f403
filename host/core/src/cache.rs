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
//! - `<content>-<engine>.failed`: why compiling those bytes ran out of the
//!   compile CPU or memory limit, and the limits, so a later load under the
//!   same (or lower) limits fails at once instead of compiling again;
//! - `<path>-<engine>.alias`: a component file's path and identity, hashed,
//!   naming the `<content>` of its bytes;
//! - `<inputs>-<engine>.declaration`: what a component declared, keyed by its
//!   content and everything `declare` can see (config, env grants, limits),
//!   so that registering from a warm cache need not instantiate the guest.
//!   The host checks a remembered declaration by the same rules as a fresh one.
//!
//! A load whose alias and seal match the files' current identities reads
//! neither the component nor the artifact. Any write to either file changes
//! its identity, so its bytes are hashed again: a changed component gets its
//! own entry, and a corrupt or truncated artifact is recompiled, never run.
//! Entries are only ever replaced by rename, never rewritten in place, so a
//! mapped artifact does not change under a running guest.
//!
//! An artifact is native code the host maps and runs, so the directory must
//! be writable by this user alone: it is created with mode 0700, and one (or
//! a parent, the home) that is owned by another user or writable by its
//! group or others is not used at all (with a warning): every load then
//! compiles, maps from memory, and writes nothing there.

use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::atomic_file;
use crate::compile::{Bounds, CompileError};
use crate::declaration::RawDeclaration;

/// Bumped when the directory's layout changes, so old entries are ignored.
const LAYOUT: &str = "v3";

/// A directory of precompiled component artifacts.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    /// Whether `dir` is safe to use (decided once, on first use).
    usable: Arc<OnceLock<bool>>,
}

/// One artifact, its seal and its failure record.
struct Entry {
    /// `<content>-<engine>`: what the seal must name.
    stem: String,
    artifact: PathBuf,
    seal: PathBuf,
    failed: PathBuf,
}

/// What `<content>-<engine>.failed` holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Failure {
    bounds: Bounds,
    reason: String,
}

impl ArtifactCache {
    /// A cache kept in `dir` (created, mode 0700, on first use).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ArtifactCache {
            dir: dir.into(),
            usable: Arc::default(),
        }
    }

    /// Where the artifacts live.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the directory may be used: it is (or is now) a directory
    /// that only this user can write, in a parent others cannot change. Warns
    /// once when it is not.
    fn usable(&self) -> bool {
        *self.usable.get_or_init(|| match prepare(&self.dir) {
            Ok(()) => true,
            Err(why) => {
                tracing::warn!(
                    "not using the compile cache {}: {why}; compiling every time and \
                     writing nothing there",
                    self.dir.display()
                );
                false
            }
        })
    }

    /// The component in the file at `path`: mapped from a sealed entry when
    /// the file is unchanged since it was aliased, else as [`Self::load_bytes`]
    /// loads its bytes. Cache trouble only costs a read or a recompile.
    pub(crate) fn load_file(
        &self,
        engine: &Engine,
        path: &Path,
        bounds: &Bounds,
        compile: impl FnOnce(&[u8]) -> Result<Vec<u8>, CompileError>,
    ) -> Result<(Component, String), String> {
        let tag = engine_tag(engine);
        let before = Identity::of(path).filter(|_| self.usable());
        let alias = before.as_ref().and_then(|identity| {
            let path = fs::canonicalize(path).ok()?;
            let key = Sha256::digest(format!("{}\n{}", path.display(), identity.0));
            Some(self.dir.join(format!("{}-{tag}.alias", hex(&key))))
        });
        if let Some(alias) = &alias
            && let Ok(content) = fs::read_to_string(alias)
            && is_digest(&content)
            && let Some(component) = self.open(engine, &self.entry(&content, &tag))
        {
            return Ok((component, content));
        }
        let bytes = crate::input::read_regular_file(path, crate::input::MAX_COMPONENT_BYTES)
            .map_err(|e| e.problem.to_string())?;
        let (component, content) = self.load_keyed(engine, &bytes, &tag, bounds, compile)?;
        // Alias only a file that did not change while it was read.
        if let Some(alias) = alias
            && Identity::of(path) == before
            && let Err(err) = self.write(&alias, content.as_bytes())
        {
            tracing::warn!("cannot store cache alias {}: {err}", alias.display());
        }
        Ok((component, content))
    }

    /// The component for `bytes`, and the SHA-256 of `bytes`: mapped from a
    /// sound entry when one exists, else compiled with `compile` under
    /// `bounds` and stored, unless those bytes already ran out of limits no
    /// higher than `bounds`.
    pub(crate) fn load_bytes(
        &self,
        engine: &Engine,
        bytes: &[u8],
        bounds: &Bounds,
        compile: impl FnOnce(&[u8]) -> Result<Vec<u8>, CompileError>,
    ) -> Result<(Component, String), String> {
        self.load_keyed(engine, bytes, &engine_tag(engine), bounds, compile)
    }

    /// A declaration stored by [`Self::store_declaration`] under `key`, if
    /// there is a readable one.
    pub(crate) fn declaration(&self, engine: &Engine, key: &str) -> Option<RawDeclaration> {
        if !self.usable() {
            return None;
        }
        let path = self.declaration_path(engine, key);
        serde_json::from_slice(&fs::read(path).ok()?).ok()
    }

    /// Remembers what a component declared under `key`, which must name
    /// everything the declaration can depend on (see
    /// `ContributorComponent::declaration_key`).
    pub(crate) fn store_declaration(&self, engine: &Engine, key: &str, raw: &RawDeclaration) {
        if !self.usable() {
            return;
        }
        let path = self.declaration_path(engine, key);
        let written = serde_json::to_vec(raw)
            .map_err(std::io::Error::other)
            .and_then(|json| self.write(&path, json));
        if let Err(err) = written {
            tracing::warn!("cannot store declaration {}: {err}", path.display());
        }
    }

    fn declaration_path(&self, engine: &Engine, key: &str) -> PathBuf {
        let tag = engine_tag(engine);
        self.dir.join(format!("{key}-{tag}.declaration"))
    }

    /// [`Self::load_bytes`] for an engine `tag` already computed.
    fn load_keyed(
        &self,
        engine: &Engine,
        bytes: &[u8],
        tag: &str,
        bounds: &Bounds,
        compile: impl FnOnce(&[u8]) -> Result<Vec<u8>, CompileError>,
    ) -> Result<(Component, String), String> {
        let content = sha256_hex(bytes);
        if !self.usable() {
            let artifact = compile(bytes).map_err(reason)?;
            return in_memory(engine, &artifact).map(|component| (component, content));
        }
        let entry = self.entry(&content, tag);
        if let Some(component) = self.open(engine, &entry) {
            return Ok((component, content));
        }
        if let Some(reason) = self.failure(&entry, bounds) {
            return Err(format!(
                "{reason} (remembered; raise limits.compile_* to retry)"
            ));
        }
        let artifact = match compile(bytes) {
            Ok(artifact) => artifact,
            Err(CompileError::Exceeded(reason)) => {
                self.remember_failure(&entry, bounds, &reason);
                return Err(reason);
            }
            Err(CompileError::Failed(reason)) => return Err(reason),
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
        in_memory(engine, &artifact).map(|component| (component, content))
    }

    fn entry(&self, content: &str, tag: &str) -> Entry {
        let stem = format!("{content}-{tag}");
        Entry {
            artifact: self.dir.join(format!("{stem}.cwasm")),
            seal: self.dir.join(format!("{stem}.seal")),
            failed: self.dir.join(format!("{stem}.failed")),
            stem,
        }
    }

    /// Why the entry's bytes failed to compile, if they ran out of limits
    /// no higher than `bounds`.
    fn failure(&self, entry: &Entry, bounds: &Bounds) -> Option<String> {
        let failure: Failure = serde_json::from_slice(&fs::read(&entry.failed).ok()?).ok()?;
        (!bounds.exceeds(&failure.bounds)).then_some(failure.reason)
    }

    fn remember_failure(&self, entry: &Entry, bounds: &Bounds, reason: &str) {
        let failure = Failure {
            bounds: *bounds,
            reason: reason.to_string(),
        };
        let written = serde_json::to_vec(&failure)
            .map_err(std::io::Error::other)
            .and_then(|json| self.write(&entry.failed, json));
        if let Err(err) = written {
            tracing::warn!("cannot record {}: {err}", entry.failed.display());
        }
    }

    /// The entry's component, if it is sealed as it is now (or its bytes
    /// still match the seal's digest) and this engine accepts it.
    fn open(&self, engine: &Engine, entry: &Entry) -> Option<Component> {
        let seal = fs::read_to_string(&entry.seal).ok()?;
        let mut fields = seal.splitn(3, ' ');
        let (digest, sealed, filed) = (fields.next()?, fields.next()?, fields.next()?);
        if filed != entry.stem {
            tracing::warn!(
                "precompiled artifact {} is sealed for another entry ({}); recompiling",
                entry.artifact.display(),
                filed.escape_debug()
            );
            return None;
        }
        let identity = Identity::of(&entry.artifact)?;
        if identity.0 != sealed {
            // Written since it was sealed: trust the bytes only if they match.
            let artifact = fs::read(&entry.artifact).ok()?;
            if sha256_hex(&artifact) != digest {
                tracing::warn!(
                    "corrupt precompiled artifact {}; recompiling",
                    entry.artifact.display()
                );
                return None;
            }
            let resealed = Identity::of(&entry.artifact)?;
            let seal = format!("{digest} {} {}", resealed.0, entry.stem);
            if let Err(err) = self.write(&entry.seal, seal) {
                tracing::warn!("cannot reseal {}: {err}", entry.artifact.display());
            }
        }
        // SAFETY: the artifact is one `Component::serialize` wrote (its digest
        // or its sealed identity says so), it is replaced only by rename, and
        // wasmtime itself refuses artifacts from another version or engine
        // configuration.
        match unsafe { Component::deserialize_file(engine, &entry.artifact) } {
            Ok(component) => Some(component),
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
        self.write(&entry.artifact, artifact)?;
        let identity = Identity::of(&entry.artifact)
            .ok_or_else(|| std::io::Error::other("the artifact vanished after writing"))?;
        let digest = sha256_hex(artifact);
        let seal = format!("{digest} {} {}", identity.0, entry.stem);
        self.write(&entry.seal, seal)
    }

    /// Writes `path` then renames it into place, so a reader never sees a
    /// partial file and a mapped file is never changed.
    fn write(&self, path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
        atomic_file::write(path, contents)
    }
}

/// The message of a compile failure.
fn reason(err: CompileError) -> String {
    match err {
        CompileError::Failed(reason) | CompileError::Exceeded(reason) => reason,
    }
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
fn only_ours(dir: &Path, sticky_will_do: bool) -> Result<(), String> {
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

/// What tells one version of a file from another without reading it: any
/// write, truncation, replacement or `touch` changes a field.
#[derive(Debug, PartialEq, Eq)]
struct Identity(String);

impl Identity {
    fn of(path: &Path) -> Option<Identity> {
        let m = fs::metadata(path).ok()?;
        Some(Identity(format!(
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
}

/// The engine's part of an entry's name: this crate's version, the cache
/// layout, and wasmtime's compatibility hash of the engine configuration,
/// through SHA-256 (std's `DefaultHasher` may change with the toolchain,
/// which would silently orphan every artifact).
pub(crate) fn engine_tag(engine: &Engine) -> String {
    let mut hasher = StableHasher(Sha256::new());
    env!("CARGO_PKG_VERSION").hash(&mut hasher);
    LAYOUT.hash(&mut hasher);
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex(&hasher.0.finalize()[..8])
}

/// Feeds what a [`Hash`] implementation writes into SHA-256.
struct StableHasher(Sha256);

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// Unused: the tag is read from the whole digest.
    fn finish(&self) -> u64 {
        0
    }
}

fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The SHA-256 of `bytes`, in lowercase hex: the content digest the cache
/// files a component under, and the digest a manifest entry pins.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

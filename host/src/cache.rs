//! Precompiled components under `$DSH_HOME/cache/`, so each component is
//! compiled once and a later load maps a file instead of reading one.
//!
//! The directory holds, per engine configuration (`<engine>`):
//! - `<content>-<engine>.cwasm`: the artifact `Component::serialize` wrote,
//!   keyed by the SHA-256 of the component's bytes, mapped lazily with
//!   `Component::deserialize_file` (so only the pages a guest uses are
//!   resident, and they are shared with the page cache);
//! - `<content>-<engine>.seal`: the artifact's SHA-256 and the file identity
//!   (device, inode, size, mtime, ctime) it was verified at;
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

use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::atomic_file;
use crate::declaration::RawDeclaration;

/// Bumped when the directory's layout changes, so old entries are ignored.
const LAYOUT: &str = "v2";

/// A directory of precompiled component artifacts.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
}

/// One artifact and its seal.
struct Entry {
    artifact: PathBuf,
    seal: PathBuf,
}

impl ArtifactCache {
    /// A cache kept in `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ArtifactCache { dir: dir.into() }
    }

    /// Where the artifacts live.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The component in the file at `path`: mapped from a sealed entry when
    /// the file is unchanged since it was aliased, else as [`Self::load_bytes`]
    /// loads its bytes. Cache trouble only costs a read or a recompile.
    pub(crate) fn load_file(
        &self,
        engine: &Engine,
        path: &Path,
        compile: impl FnOnce(&[u8]) -> Result<Component, String>,
    ) -> Result<(Component, String), String> {
        let tag = engine_tag(engine);
        let before = Identity::of(path);
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
        let (component, content) = self.load_keyed(engine, &bytes, &tag, compile)?;
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
    /// sound entry when one exists, else compiled with `compile` and stored.
    pub(crate) fn load_bytes(
        &self,
        engine: &Engine,
        bytes: &[u8],
        compile: impl FnOnce(&[u8]) -> Result<Component, String>,
    ) -> Result<(Component, String), String> {
        self.load_keyed(engine, bytes, &engine_tag(engine), compile)
    }

    /// A declaration stored by [`Self::store_declaration`] under `key`, if
    /// there is a readable one.
    pub(crate) fn declaration(&self, engine: &Engine, key: &str) -> Option<RawDeclaration> {
        let path = self.declaration_path(engine, key);
        serde_json::from_slice(&fs::read(path).ok()?).ok()
    }

    /// Remembers what a component declared under `key`, which must name
    /// everything the declaration can depend on (see
    /// `ContributorComponent::declaration_key`).
    pub(crate) fn store_declaration(&self, engine: &Engine, key: &str, raw: &RawDeclaration) {
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
        compile: impl FnOnce(&[u8]) -> Result<Component, String>,
    ) -> Result<(Component, String), String> {
        let content = hex(&Sha256::digest(bytes));
        let entry = self.entry(&content, tag);
        if let Some(component) = self.open(engine, &entry) {
            return Ok((component, content));
        }
        let component = compile(bytes)?;
        if let Err(err) = self.store(&entry, &component) {
            tracing::warn!(
                "cannot store precompiled artifact {}: {err}",
                entry.artifact.display()
            );
        }
        Ok((component, content))
    }

    fn entry(&self, content: &str, tag: &str) -> Entry {
        let stem = format!("{content}-{tag}");
        Entry {
            artifact: self.dir.join(format!("{stem}.cwasm")),
            seal: self.dir.join(format!("{stem}.seal")),
        }
    }

    /// The entry's component, if it is sealed as it is now (or its bytes
    /// still match the seal's digest) and this engine accepts it.
    fn open(&self, engine: &Engine, entry: &Entry) -> Option<Component> {
        let seal = fs::read_to_string(&entry.seal).ok()?;
        let (digest, sealed) = seal.split_once(' ')?;
        let identity = Identity::of(&entry.artifact)?;
        if identity.0 != sealed {
            // Written since it was sealed: trust the bytes only if they match.
            let artifact = fs::read(&entry.artifact).ok()?;
            if hex(&Sha256::digest(&artifact)) != digest {
                tracing::warn!(
                    "corrupt precompiled artifact {}; recompiling",
                    entry.artifact.display()
                );
                return None;
            }
            let resealed = Identity::of(&entry.artifact)?;
            if let Err(err) = self.write(&entry.seal, format!("{digest} {}", resealed.0)) {
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

    fn store(&self, entry: &Entry, component: &Component) -> std::io::Result<()> {
        let artifact = component.serialize().map_err(std::io::Error::other)?;
        self.write(&entry.artifact, &artifact)?;
        let identity = Identity::of(&entry.artifact)
            .ok_or_else(|| std::io::Error::other("the artifact vanished after writing"))?;
        let digest = hex(&Sha256::digest(&artifact));
        self.write(&entry.seal, format!("{digest} {}", identity.0))
    }

    /// Writes `path` then renames it into place, so a reader never sees a
    /// partial file and a mapped file is never changed.
    fn write(&self, path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        atomic_file::write(path, contents)
    }
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
/// layout, and wasmtime's compatibility hash of the engine configuration.
fn engine_tag(engine: &Engine) -> String {
    let mut hasher = DefaultHasher::new();
    env!("CARGO_PKG_VERSION").hash(&mut hasher);
    LAYOUT.hash(&mut hasher);
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

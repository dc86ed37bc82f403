//! Precompiled components under `$DSH_HOME/cache/`, so each component is
//! compiled once. An entry is keyed by the component's SHA-256 and the
//! engine's compatibility hash, and carries its own digest: a changed file,
//! another wasmtime or engine configuration, or a corrupt entry all lead to a
//! clean recompile, never to a stale or broken artifact.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of precompiled component artifacts.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
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

    /// The component for `bytes`: from the cache when a sound entry exists,
    /// else compiled and stored. Cache trouble only costs a recompile.
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        bytes: &[u8],
    ) -> wasmtime::Result<Component> {
        let entry = self.entry_path(engine, bytes);
        if let Some(component) = read_entry(engine, &entry) {
            return Ok(component);
        }
        let component = Component::new(engine, bytes)?;
        if let Err(err) = self.write_entry(&entry, &component) {
            tracing::warn!(
                "cannot store precompiled artifact {}: {err}",
                entry.display()
            );
        }
        Ok(component)
    }

    fn entry_path(&self, engine: &Engine, bytes: &[u8]) -> PathBuf {
        let mut engine_hash = DefaultHasher::new();
        env!("CARGO_PKG_VERSION").hash(&mut engine_hash);
        engine
            .precompile_compatibility_hash()
            .hash(&mut engine_hash);
        let content = hex(&Sha256::digest(bytes));
        self.dir
            .join(format!("{content}-{:016x}.cwasm", engine_hash.finish()))
    }

    fn write_entry(&self, entry: &Path, component: &Component) -> std::io::Result<()> {
        let artifact = component.serialize().map_err(std::io::Error::other)?;
        let mut file = Sha256::digest(&artifact).to_vec();
        file.extend_from_slice(&artifact);
        std::fs::create_dir_all(&self.dir)?;
        // Write then rename, so a reader never sees a partial entry.
        let partial = entry.with_extension(format!("partial-{}", std::process::id()));
        std::fs::write(&partial, &file)?;
        std::fs::rename(&partial, entry)
    }
}

/// The cached component, if the entry exists, is intact, and this engine accepts it.
fn read_entry(engine: &Engine, entry: &Path) -> Option<Component> {
    let file = std::fs::read(entry).ok()?;
    let (digest, artifact) = file.split_at_checked(32)?;
    if Sha256::digest(artifact).as_slice() != digest {
        tracing::warn!(
            "corrupt precompiled artifact {}; recompiling",
            entry.display()
        );
        return None;
    }
    // SAFETY: the artifact was produced by `Component::serialize` in this
    // cache (its digest matches what we wrote), and wasmtime itself refuses
    // artifacts from another version or engine configuration.
    match unsafe { Component::deserialize(engine, artifact) } {
        Ok(component) => Some(component),
        Err(err) => {
            tracing::warn!(
                "unusable precompiled artifact {}: {err}; recompiling",
                entry.display()
            );
            None
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

//! Loading: one [`Loader`] per registry owns its artifact cache, its
//! compiler (the compile helper, and who is told of each compile) and its
//! tiering policy, and turns a component's file or bytes into a
//! [`ContributorComponent`] linked in the sandbox's engines: mapped from the
//! cache, or compiled on a miss by the compiler the tiering chooses.

use std::sync::Arc;

use wasmtime::Engine;

use crate::cache::{ArtifactCache, Loaded, Opened};
use crate::compile::{Bounds, CompileError, Compiler, Urgency};
use crate::engine::{Tiering, engine_tag};
use crate::limits::Limits;
use crate::load_error::{LoadError, LoadErrorKind};
use crate::sandbox::{
    CodeTier, ContributorComponent, Linked, Open, Opening, Sandbox, Source, Tier, is_component,
    not_a_component,
};

/// Loads components for one registry, into the engines of its runtime's
/// sandbox; what it is built with is set once, when the registry is built.
pub(crate) struct Loader {
    /// Whose engines (optimized, and baseline on demand) the code is for.
    sandbox: Arc<Sandbox>,
    /// The precompiled artifacts.
    cache: ArtifactCache,
    /// Runs the compile helper on a miss.
    compiler: Arc<Compiler>,
    /// Which compiler a cache miss is compiled with.
    tiering: Tiering,
}

/// A component loaded from a file whose sealed artifact is opened later.
struct Later<'a> {
    /// The artifact.
    artifact: &'a std::path::Path,
    /// The component's file.
    path: &'a std::path::Path,
    /// The SHA-256 of its bytes when it was loaded.
    content: &'a str,
}

impl Loader {
    /// A loader into `sandbox`'s engines, keeping artifacts in `cache`,
    /// compiling a miss with `compiler` as `tiering` says.
    pub(crate) fn new(
        sandbox: Arc<Sandbox>,
        cache: ArtifactCache,
        compiler: Compiler,
        tiering: Tiering,
    ) -> Self {
        Loader {
            sandbox,
            cache,
            compiler: Arc::new(compiler),
            tiering,
        }
    }

    /// The precompiled-artifact cache.
    pub(crate) fn cache(&self) -> &ArtifactCache {
        &self.cache
    }

    /// Compiles `source` in the compile helper under `limits`' compile
    /// limits, with the compiler `tiering` chooses (or maps it from the
    /// cache), and checks that it targets the contributor world. The
    /// component carries `limits`.
    pub(crate) fn load(
        &self,
        origin: &str,
        source: Source<'_>,
        limits: &Limits,
    ) -> Result<ContributorComponent, LoadError> {
        let (cache, tiering) = (&self.cache, self.tiering);
        let fail = |kind: LoadErrorKind| LoadError::new(origin, kind);
        let bounds = Bounds::of(limits);
        let compile_for = |tier: &Tier, urgency| {
            compiling(
                &self.compiler,
                origin,
                bounds,
                engine_tag(&tier.engine),
                urgency,
            )
        };
        let optimized = self.sandbox.optimized();
        // Optimized code in the cache is used whatever the tiering.
        let found = match tiering {
            Tiering::Optimized => None,
            Tiering::Background | Tiering::Baseline => match source {
                Source::File(path) => cache.lookup_file(&optimized.engine, path, true),
                Source::Bytes(bytes) => cache.lookup_bytes(&optimized.engine, bytes),
            },
        };
        let baseline = match (&found, tiering) {
            (None, Tiering::Background | Tiering::Baseline) => match self.sandbox.baseline() {
                Ok(tier) => Some(tier),
                Err(why) => {
                    tracing::warn!("cannot compile with Winch ({why}); compiling with Cranelift");
                    None
                }
            },
            _ => None,
        };
        let loaded = match (found, baseline) {
            (_, Some(tier)) => {
                let compile = compile_for(tier, Urgency::Now);
                let loaded = load_from(cache, &tier.engine, source, &bounds, compile, false);
                let loaded = loaded.map_err(fail)?;
                let linked = (loaded.component.open(&tier.engine))
                    .map_err(LoadErrorKind::Cache)
                    .and_then(|component| tier.link(&component, CodeTier::Baseline))
                    .map_err(fail)?;
                let tier_up = (tiering == Tiering::Background).then(|| {
                    let kept = match source {
                        Source::File(path) => Kept::File(path.to_path_buf()),
                        Source::Bytes(bytes) => Kept::Bytes(bytes.into()),
                    };
                    let compile = compile_for(optimized, Urgency::Background);
                    let tier_up = self.tier_up(kept, loaded.content.clone(), bounds, compile);
                    // Its warning names the component, as a load error does.
                    let origin = dsh_env_support::input::escape_controls(origin).into_owned();
                    Box::new(move || tier_up().map_err(|e| format!("{origin}: {e}"))) as Open
                });
                (
                    loaded.content,
                    loaded.held,
                    Opening::tiered(linked, tier_up),
                    &tier.engine,
                )
            }
            (found, None) => {
                let loaded = match found {
                    Some(loaded) => loaded,
                    None => {
                        let compile = compile_for(optimized, Urgency::Now);
                        load_from(cache, &optimized.engine, source, &bounds, compile, true)
                            .map_err(fail)?
                    }
                };
                let compile = compile_for(optimized, Urgency::Now);
                let opening = self.opening(&loaded, source, bounds, compile);
                (
                    loaded.content,
                    loaded.held,
                    opening.map_err(fail)?,
                    &optimized.engine,
                )
            }
        };
        let (content, held, linked, engine) = loaded;
        Ok(ContributorComponent::loaded(
            origin, content, linked, limits, held, engine,
        ))
    }

    /// The [`Opening`] of optimized code the cache handed over: linked now
    /// if it was deserialized, else when first needed (see [`Later`]).
    fn opening(
        &self,
        loaded: &Loaded,
        source: Source<'_>,
        bounds: Bounds,
        compile: impl FnOnce(&[u8]) -> Result<Vec<u8>, CompileError> + Send + 'static,
    ) -> Result<Opening, LoadErrorKind> {
        match (&loaded.component, source) {
            (Opened::Later(artifact), Source::File(path)) => {
                let (sandbox, cache) = (Arc::clone(&self.sandbox), self.cache.clone());
                let (artifact, path) = (artifact.clone(), path.to_path_buf());
                let content = loaded.content.clone();
                Ok(Opening::deferred(Box::new(move || {
                    let later = Later {
                        artifact: &artifact,
                        path: &path,
                        content: &content,
                    };
                    open_later(sandbox.optimized(), later, &cache, &bounds, compile)
                })))
            }
            (component, _) => {
                let optimized = self.sandbox.optimized();
                let linked = (component.open(&optimized.engine))
                    .map_err(LoadErrorKind::Cache)
                    .and_then(|component| optimized.link(&component, CodeTier::Optimized))?;
                self.cache.mark_linked(loaded.linked.as_deref());
                Ok(Opening::ready(linked))
            }
        }
    }

    /// Compiles `kept` for the optimized tier (see [`Tiering::Background`])
    /// and links it, for the [`Opening`] of its baseline code. The file
    /// must still hold the bytes loaded then, whose SHA-256 is `content`.
    fn tier_up(
        &self,
        kept: Kept,
        content: String,
        bounds: Bounds,
        compile: impl FnOnce(&[u8]) -> Result<Vec<u8>, CompileError> + Send + 'static,
    ) -> Open {
        let (sandbox, cache) = (Arc::clone(&self.sandbox), self.cache.clone());
        Box::new(move || {
            let optimized = sandbox.optimized();
            let source = match &kept {
                Kept::File(path) => Source::File(path),
                Kept::Bytes(bytes) => Source::Bytes(bytes),
            };
            let loaded = load_from(&cache, &optimized.engine, source, &bounds, compile, false)?;
            if loaded.content != content
                && let Kept::File(path) = &kept
            {
                return Err(changed(path, &content, &loaded.content));
            }
            let component = loaded.component.open(&optimized.engine)?;
            let linked = optimized.link(&component, CodeTier::Optimized)?;
            cache.mark_linked(loaded.linked.as_deref());
            Ok(linked.holding(loaded.held))
        })
    }
}

/// Opens an artifact the cache vouched for at load. If wasmtime refuses
/// it now, the file is loaded again as on a cold cache (recompiled),
/// provided its bytes are still the ones loaded then.
fn open_later(
    optimized: &Tier,
    later: Later<'_>,
    cache: &ArtifactCache,
    bounds: &Bounds,
    compile: impl FnOnce(&[u8]) -> Result<Vec<u8>, CompileError>,
) -> Result<Linked, String> {
    let engine = &optimized.engine;
    let component = match crate::cache::deserialize(engine, later.artifact) {
        Ok(component) => component,
        Err(err) => {
            tracing::warn!(
                "unusable precompiled artifact {}: {err}; loading {} again",
                later.artifact.display(),
                later.path.display()
            );
            let again = cache.compiled_file(engine, later.path, bounds, compile, false)?;
            if again.content != later.content {
                return Err(changed(later.path, later.content, &again.content));
            }
            again.component.open(engine)?
        }
    };
    Ok(optimized.link(&component, CodeTier::Optimized)?)
}

/// A component's bytes, kept for its tier-up.
enum Kept {
    /// Its file, read again then.
    File(std::path::PathBuf),
    /// Its bytes, held until then.
    Bytes(Arc<[u8]>),
}

/// The error for a component file whose bytes changed since its load.
fn changed(path: &std::path::Path, was: &str, now: &str) -> String {
    format!(
        "{} changed since it was loaded: its SHA-256 was {was}, now {now}",
        dsh_env_support::input::escape_controls(&path.display().to_string()),
    )
}

/// `source` from `cache`, compiled with `compile` on a miss (see
/// [`ArtifactCache::compiled_file`] for `defer`).
fn load_from(
    cache: &ArtifactCache,
    engine: &Engine,
    source: Source<'_>,
    bounds: &Bounds,
    compile: impl FnOnce(&[u8]) -> Result<Vec<u8>, CompileError>,
    defer: bool,
) -> Result<Loaded, LoadErrorKind> {
    match source {
        Source::File(path) => cache.compiled_file(engine, path, bounds, compile, defer),
        Source::Bytes(bytes) => cache.compiled_bytes(engine, bytes, bounds, compile),
    }
}

/// Compiles a component's bytes for the engine tagged `tag`, in
/// `compiler`'s helper, under `bounds`.
fn compiling(
    compiler: &Arc<Compiler>,
    origin: &str,
    bounds: Bounds,
    tag: String,
    urgency: Urgency,
) -> impl FnOnce(&[u8]) -> Result<Vec<u8>, CompileError> + Send + 'static {
    let (compiler, origin) = (Arc::clone(compiler), origin.to_string());
    move |bytes: &[u8]| {
        if !is_component(bytes) {
            return Err(CompileError::NotAComponent(not_a_component(bytes)));
        }
        compiler.compile_reported(&origin, bytes, &bounds, &tag, urgency)
    }
}

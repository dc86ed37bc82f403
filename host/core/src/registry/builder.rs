//! How a registry is built, and what it was built with.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use crate::cache::ArtifactCache;
use crate::compile::{CompileProgress, Compiler};
use crate::engine::{EngineError, Tiering};
use crate::home::DshHome;
use crate::loader::Loader;
use crate::shared_engine::SharedEngine;
use crate::signature::Trust;

use super::state::{Inner, Registry};

/// How a [`Registry`] is built: its home, and everything set once for its
/// lifetime (runtime, cache, trust, tiering, compile helper and progress).
/// From [`Registry::builder`].
#[must_use = "a builder does nothing until `build`"]
pub struct RegistryBuilder {
    home: DshHome,
    shared_engine: Option<SharedEngine>,
    cache: Option<ArtifactCache>,
    trust: Trust,
    tiering: Tiering,
    compiler: Option<PathBuf>,
    progress: Option<Arc<dyn CompileProgress>>,
}

impl fmt::Debug for RegistryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryBuilder")
            .field("home", &self.home)
            .field("shared_engine", &self.shared_engine)
            .field("cache", &self.cache)
            .field("trust", &self.trust)
            .field("tiering", &self.tiering)
            .field("compiler", &self.compiler)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl RegistryBuilder {
    /// Runs the contributors in `shared` (an engine and runtime shared with
    /// other registries of the process) instead of one of the registry's own.
    pub fn shared_engine(mut self, shared: &SharedEngine) -> Self {
        self.shared_engine = Some(shared.clone());
        self
    }

    /// Keeps precompiled components in `cache` (e.g. one with a cap, or one
    /// shared by short-lived homes) instead of an uncapped `home/cache`
    /// authenticated with the home's own key. When `home` is not the user's
    /// own (a project manifest named it), give a cache keyed by the user's
    /// home ([`ArtifactCache::with_key`]): a checkout can fill a home it names.
    pub fn cache(mut self, cache: ArtifactCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Registers only what `trust` admits (usually a manifest's `[trust]`,
    /// [`crate::Manifest::trust`]); the default trusts nobody and requires nothing.
    /// It is the one trust rule for every registration, however it is
    /// made: a manifest, a spec, or a component loaded from a
    /// [`crate::LoadFrom::Spec`]. Under a trust with keys, a component loaded
    /// any other way is refused at registration.
    pub fn trust(mut self, trust: Trust) -> Self {
        self.trust = trust;
        self
    }

    /// Compiles each component missing from the cache as `tiering` says
    /// (default [`Tiering::Optimized`]).
    pub fn tiering(mut self, tiering: Tiering) -> Self {
        self.tiering = tiering;
        self
    }

    /// Compiles components with the helper at `path` instead of looking
    /// for `dsh-env-compile` (beside the executable, or on `PATH`).
    pub fn compiler(mut self, path: impl Into<PathBuf>) -> Self {
        self.compiler = Some(path.into());
        self
    }

    /// Tells `progress` about every component the registry compiles (a
    /// cache miss), e.g. to show a line per component on a terminal.
    pub fn compile_progress(mut self, progress: Arc<dyn CompileProgress>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The registry, empty. It fails only when it must make a runtime of
    /// its own and cannot.
    pub fn build(self) -> Result<Registry, EngineError> {
        let runtime = match self.shared_engine {
            Some(runtime) => runtime,
            None => SharedEngine::new()?,
        };
        let cache =
            (self.cache).unwrap_or_else(|| ArtifactCache::new(self.home.path().join("cache")));
        Ok(Registry {
            inner: Arc::new(Inner {
                trust: Arc::new(self.trust),
                loader: Loader::new(
                    Arc::clone(&runtime.sandbox),
                    cache,
                    Compiler::new(self.compiler, self.progress),
                    self.tiering,
                ),
                home: self.home,
                runtime,
                contributors: Mutex::default(),
                next_id: AtomicU64::new(1),
            }),
        })
    }
}

impl Registry {
    /// A builder for a registry whose overlays carry `home` as `DSH_HOME`.
    /// Unless told otherwise it runs in a runtime of its own (an embedder
    /// with more than one registry should share one,
    /// [`RegistryBuilder::shared_engine`]), keeps precompiled components under
    /// `home/cache`, trusts nobody, and compiles with Cranelift.
    pub fn builder(home: DshHome) -> RegistryBuilder {
        RegistryBuilder {
            home,
            shared_engine: None,
            cache: None,
            trust: Trust::default(),
            tiering: Tiering::default(),
            compiler: None,
            progress: None,
        }
    }

    /// Whose signatures this registry trusts, and whether it requires one.
    pub fn trust(&self) -> &Trust {
        &self.inner.trust
    }

    /// The home every overlay carries.
    pub fn home(&self) -> &DshHome {
        &self.inner.home
    }

    /// The engine and runtime this registry runs its contributors in.
    pub fn shared_engine(&self) -> &SharedEngine {
        &self.inner.runtime
    }

    /// The precompiled-artifact cache.
    pub fn cache(&self) -> &ArtifactCache {
        self.inner.loader.cache()
    }
}

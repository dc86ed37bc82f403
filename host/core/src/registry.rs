//! The registry: which contributors exist, which keys each owns, and
//! `collect`, which turns one execution into one overlay.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::cache::ArtifactCache;
use crate::compile::{CompileProgress, Compiler};
use crate::declaration::{
    Declaration, DeclarationError, DeclarationProblem, OutputProblem, RawDeclaration, check_value,
};
use crate::digest;
use crate::engine::RuntimeError;
use crate::engine::Tiering;
use crate::execution::ToolExecution;
use crate::home::DshHome;
use crate::input::{MAX_COMPONENT_BYTES, escape_controls, read_regular_file};
use crate::keys::{BUILTIN_KEYS, BUILTIN_OWNER, DSH_HOME, DSH_SESSION_ID, DSH_SHELL, DshKey};
use crate::limits::{Limits, Phase};
use crate::load_error::{LoadError, LoadErrorKind};
use crate::manifest::{Manifest, ManifestError};
use crate::overlay::Overlay;
use crate::runtime::Runtime;
use crate::sandbox::{
    Call, ContributorComponent, GuestFailure, Opening, Preparation, Prepared, Source,
};
use crate::signature::{SignatureError, Signer, Trust, read_signature};
use crate::spec::{ContributorSource, ContributorSpec, HostEnv, OnError};
use crate::store::{SIGNATURE_ANNOTATION, Store, StoredArtifact};

/// A trusted, in-process contributor: harness facts, or a benchmark baseline.
pub trait NativeContributor: Send + Sync + 'static {
    /// Its name and keys, checked by the same rules as a component's.
    fn declare(&self) -> RawDeclaration;
    /// The pairs for one execution, checked like a component's output.
    fn resolve(&self, execution: &ToolExecution) -> Result<Vec<(String, String)>, String>;
}

/// Why a contributor failed, naming it, the phase, and the cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("contributor `{}`{keys} failed in {phase}: {cause}", escape_controls(.contributor))]
pub struct ContributorError {
    /// The contributor (its declared name, or its origin before it declared).
    pub contributor: String,
    /// `declare` or `resolve`.
    pub phase: Phase,
    /// What went wrong.
    pub cause: FailureCause,
    keys: KeysNote,
}

/// The root cause of a contributor failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FailureCause {
    /// The guest trapped, overran a limit, or returned `err`.
    #[error(transparent)]
    Guest(#[from] GuestFailure),
    /// The guest's output broke a rule.
    #[error(transparent)]
    Output(#[from] OutputProblem),
}

impl FailureCause {
    /// A stable identifier of the kind of failure, for JSON.
    pub fn rule(&self) -> &'static str {
        match self {
            FailureCause::Guest(GuestFailure::Deadline(_)) => "deadline",
            FailureCause::Guest(GuestFailure::ResourceLimit(_)) => "resource-limit",
            FailureCause::Guest(GuestFailure::StackOverflow) => "stack-overflow",
            FailureCause::Guest(GuestFailure::Fuel(_)) => "fuel",
            FailureCause::Guest(GuestFailure::Trap { .. }) => "trap",
            FailureCause::Guest(GuestFailure::GuestError(_)) => "guest-error",
            FailureCause::Guest(GuestFailure::Instantiate(_)) => "instantiate",
            FailureCause::Output(_) => "output",
        }
    }
}

/// The declared keys, so that a failure names what went missing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct KeysNote(String);

impl fmt::Display for KeysNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, " (keys {})", self.0)
        }
    }
}

/// Why a registration was refused. A refused registration changes nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    /// The component could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// `declare` failed.
    #[error(transparent)]
    Contributor(#[from] ContributorError),
    /// The declaration broke a rule.
    #[error(transparent)]
    Declaration(#[from] DeclarationError),
    /// A manifest entry is invalid (shared, so the error stays `Clone`).
    #[error(transparent)]
    Manifest(Arc<ManifestError>),
    /// The component's bytes are not the ones its entry pins.
    #[error(
        "{} changed since it was pinned: its sha256 is {actual}, but its entry pins {pinned}; \
         run `dsh-env add` again to review it",
        escape_controls(.origin)
    )]
    Changed {
        /// The component.
        origin: String,
        /// The digest pinned.
        pinned: String,
        /// The digest of the bytes found.
        actual: String,
    },
    /// Its signature was refused.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// A manifest's `[trust]` is not the one the registry was built with.
    /// (Its wording, which predates [`RegistryBuilder::trust`], is kept as
    /// users have seen it.)
    #[error(
        "manifest {}: its [trust] is not this registry's; open the registry with the \
         manifest's trust (Registry::with_trust)",
        escape_controls(.manifest)
    )]
    TrustMismatch {
        /// The manifest.
        manifest: String,
    },
}

/// Refuses `bytes` unless their SHA-256 is `pin` (lowercase hex).
fn check_pin(origin: &str, bytes: &[u8], pin: &str) -> Result<(), RegistryError> {
    digest::verify(bytes, pin).map_err(|mismatch| RegistryError::Changed {
        origin: origin.to_string(),
        pinned: pin.to_string(),
        actual: mismatch.actual,
    })
}

/// An overlay, and the contributors left out of it under `on_error = "omit"`.
#[derive(Debug, Clone)]
pub struct Collection {
    /// The overlay.
    pub overlay: Overlay,
    /// Failures that were omitted rather than failing the execution.
    pub omitted: Vec<ContributorError>,
}

/// One registered contributor, as [`Registry::contributors`] describes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ContributorListing {
    /// Its declared name.
    pub name: String,
    /// Where its component came from (a path, a label, or `native`).
    pub origin: String,
    /// The SHA-256 of its component's bytes (none for a native contributor).
    pub sha256: Option<String>,
    /// Who signed it.
    pub signer: Signer,
    /// The names of the environment variables granted (never their values).
    pub env_grants: Vec<String>,
    /// Whether the agent's cwd is granted, read-only.
    pub cwd_read: bool,
    /// What its failure does to an execution.
    pub on_error: OnError,
}

/// One row of [`Registry::list`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyListing {
    /// The key.
    pub key: DshKey,
    /// Its owner: a contributor's name, or [`BUILTIN_OWNER`].
    pub owner: String,
    /// What it means.
    pub description: String,
}

enum Resolver {
    Wasm(Box<WasmResolver>),
    Native(Arc<dyn NativeContributor>),
}

impl Resolver {
    /// Where it came from: the component's origin, or `native`.
    fn origin(&self) -> String {
        match self {
            Resolver::Wasm(wasm) => wasm.component.origin().to_string(),
            Resolver::Native(_) => "native".to_string(),
        }
    }
}

/// A registered component, and the instance made ahead of its next call.
struct WasmResolver {
    component: ContributorComponent,
    /// Filled by [`Registry::prepare`], taken by one `collect`.
    ready: Mutex<Option<Prepared>>,
    /// Set when the component cannot be prepared ahead (a cwd grant, or a
    /// failed instantiation), so it is not tried again.
    unsuitable: AtomicBool,
}

impl WasmResolver {
    fn ready(&self) -> std::sync::MutexGuard<'_, Option<Prepared>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Entry {
    id: u64,
    declaration: Declaration,
    resolver: Resolver,
    limits: Limits,
    on_error: OnError,
}

struct Inner {
    runtime: Runtime,
    home: DshHome,
    cache: ArtifactCache,
    compiler: Arc<Compiler>,
    /// Which compiler a cache miss is compiled with.
    tiering: Tiering,
    /// Whose signatures are trusted, and whether one is required: set when
    /// the registry is built, applied to every registration.
    trust: Arc<Trust>,
    /// Replaced whole on every change, so `collect` works on a stable snapshot.
    contributors: Mutex<Arc<BTreeMap<String, Arc<Entry>>>>,
    next_id: AtomicU64,
}

/// Registered contributors, and the engine that runs them. Cheap to clone.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

/// A live registration. Dropping it (or [`Registration::dispose`]) removes the
/// contributor and frees its keys.
#[must_use = "dropping a Registration unregisters the contributor"]
pub struct Registration {
    registry: Weak<Inner>,
    name: String,
    id: u64,
}

impl Registration {
    /// The registered contributor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Removes the contributor now.
    pub fn dispose(self) {}
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(inner) = self.registry.upgrade() {
            inner
                .update(|map| {
                    if map.get(&self.name).is_some_and(|e| e.id == self.id) {
                        map.remove(&self.name);
                    }
                    Ok::<(), ()>(())
                })
                .ok();
        }
    }
}

impl Inner {
    fn snapshot(&self) -> Arc<BTreeMap<String, Arc<Entry>>> {
        self.contributors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Applies `change` to a copy of the map and installs it only on success.
    fn update<E>(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, Arc<Entry>>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut current = self
            .contributors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut next = BTreeMap::clone(&current);
        change(&mut next)?;
        *current = Arc::new(next);
        Ok(())
    }
}

/// How a [`Registry`] is built: its home, and everything set once for its
/// lifetime (runtime, cache, trust, tiering, compile helper and progress).
/// From [`Registry::builder`].
#[must_use = "a builder does nothing until `build`"]
pub struct RegistryBuilder {
    home: DshHome,
    runtime: Option<Runtime>,
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
            .field("runtime", &self.runtime)
            .field("cache", &self.cache)
            .field("trust", &self.trust)
            .field("tiering", &self.tiering)
            .field("compiler", &self.compiler)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl RegistryBuilder {
    /// Runs the contributors in `runtime` (shared with other registries of
    /// the process) instead of a runtime of the registry's own.
    pub fn runtime(mut self, runtime: &Runtime) -> Self {
        self.runtime = Some(runtime.clone());
        self
    }

    /// Keeps precompiled components in `cache` (e.g. one with a cap, or one
    /// shared by short-lived homes) instead of an uncapped `home/cache`.
    pub fn cache(mut self, cache: ArtifactCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Registers only what `trust` admits (usually a manifest's `[trust]`,
    /// [`Manifest::trust`]); the default trusts nobody and requires nothing.
    /// It is the one trust rule for every registration, however it is
    /// made: a manifest, a spec, or a component from
    /// [`Registry::load_spec`]. Under a trust with keys, a component loaded
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
    pub fn build(self) -> Result<Registry, RuntimeError> {
        let runtime = match self.runtime {
            Some(runtime) => runtime,
            None => Runtime::new()?,
        };
        let cache =
            (self.cache).unwrap_or_else(|| ArtifactCache::new(self.home.path().join("cache")));
        Ok(Registry {
            inner: Arc::new(Inner {
                trust: Arc::new(self.trust),
                runtime,
                cache,
                compiler: Arc::new(Compiler::new(self.compiler, self.progress)),
                tiering: self.tiering,
                home: self.home,
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
    /// [`RegistryBuilder::runtime`]), keeps precompiled components under
    /// `home/cache`, trusts nobody, and compiles with Cranelift.
    pub fn builder(home: DshHome) -> RegistryBuilder {
        RegistryBuilder {
            home,
            runtime: None,
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

    /// The runtime this registry runs its contributors in.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// Compiles a component from a file under the default compile limits,
    /// or maps it from the cache when the file is unchanged since it was
    /// compiled.
    pub fn load_file(&self, path: &Path) -> Result<ContributorComponent, LoadError> {
        self.load_file_with(path, &Limits::default())
    }

    /// [`Registry::load_file`] under `limits`' compile limits; the component
    /// carries `limits`.
    pub fn load_file_with(
        &self,
        path: &Path,
        limits: &Limits,
    ) -> Result<ContributorComponent, LoadError> {
        let origin = path.display().to_string();
        self.load(&origin, Source::File(path), limits)
    }

    /// Compiles a component from bytes (or takes it from the cache) under
    /// the default compile limits; `origin` names it in errors.
    pub fn load_bytes(
        &self,
        origin: &str,
        bytes: &[u8],
    ) -> Result<ContributorComponent, LoadError> {
        self.load_bytes_with(origin, bytes, &Limits::default())
    }

    /// [`Registry::load_bytes`] under `limits`' compile limits; the
    /// component carries `limits`.
    pub fn load_bytes_with(
        &self,
        origin: &str,
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<ContributorComponent, LoadError> {
        self.load(origin, Source::Bytes(bytes), limits)
    }

    fn load(
        &self,
        origin: &str,
        source: Source<'_>,
        limits: &Limits,
    ) -> Result<ContributorComponent, LoadError> {
        let inner = &self.inner;
        let sandbox = &inner.runtime.sandbox;
        sandbox.load(
            origin,
            source,
            &inner.cache,
            &inner.compiler,
            limits,
            inner.tiering,
        )
    }

    /// The precompiled-artifact cache.
    pub fn cache(&self) -> &ArtifactCache {
        &self.inner.cache
    }

    /// Registers every contributor of `manifest`, all or nothing: on the
    /// first failure (in manifest order), the ones already registered are
    /// removed again. Components are loaded in parallel, then registered in
    /// order. `grants.env` values come from `host_env` (usually
    /// [`HostEnv::from_process`]). The registry's trust applies to every
    /// entry: a manifest whose `[trust]` says otherwise is refused.
    pub async fn register_manifest(
        &self,
        manifest: &Manifest,
        host_env: &HostEnv,
    ) -> Result<Vec<Registration>, RegistryError> {
        let trust = manifest
            .trust()
            .map_err(|e| RegistryError::Manifest(Arc::new(e)))?;
        // Without a [trust] table the manifest says nothing, and the
        // registry's own trust stands.
        if trust != Trust::default() && trust != *self.inner.trust {
            return Err(RegistryError::TrustMismatch {
                manifest: manifest.origin.clone(),
            });
        }
        let specs = (manifest.specs(host_env)).map_err(|e| RegistryError::Manifest(Arc::new(e)))?;
        let loaded = parallel_map(&specs, |spec| self.load_spec(spec));
        let mut registrations = Vec::with_capacity(loaded.len());
        let mut openings = Vec::with_capacity(loaded.len());
        for component in loaded {
            let component = component?;
            openings.push(component.opening());
            registrations.push(self.register_only(component).await?);
        }
        Opening::in_background(openings);
        Ok(registrations)
    }

    /// Loads the component `spec` describes (see [`Registry::load_file_with`])
    /// with its config, limits, grants and failure policy.
    ///
    /// A pinned (`sha256`) or signed-under-`[trust]` component is read and
    /// checked at every load, and the bytes that passed are the ones
    /// compiled: no cached file identity stands in for the check. The
    /// signature is checked under the registry's trust
    /// ([`RegistryBuilder::trust`]).
    pub fn load_spec(&self, spec: &ContributorSpec) -> Result<ContributorComponent, RegistryError> {
        self.load_spec_from(spec, None)
    }

    /// [`Registry::load_spec`] for a spec whose source is the reference
    /// `pulled` was pulled by, from `pulled` in memory rather than from the
    /// store: `add` reviews a pull this way and stores it only once accepted,
    /// so a refused artifact leaves nothing behind. Any other spec loads as
    /// by [`Registry::load_spec`].
    pub fn load_pulled(
        &self,
        spec: &ContributorSpec,
        pulled: &StoredArtifact,
    ) -> Result<ContributorComponent, RegistryError> {
        self.load_spec_from(spec, Some(pulled))
    }

    fn load_spec_from(
        &self,
        spec: &ContributorSpec,
        pulled: Option<&StoredArtifact>,
    ) -> Result<ContributorComponent, RegistryError> {
        let trust = &self.inner.trust;
        let origin = spec.origin();
        let signature_location = (spec.signature.as_deref())
            .map(|path| path.display().to_string())
            .unwrap_or_else(|| "(no signature file)".into());
        let read_signature = || -> Result<Option<String>, RegistryError> {
            let Some(path) = &spec.signature else {
                return Ok(None);
            };
            read_signature(path).map_err(|problem| {
                RegistryError::Signature(SignatureError::Malformed {
                    origin: origin.clone(),
                    signature: signature_location.clone(),
                    reason: problem.to_string(),
                })
            })
        };
        let checked = |bytes: &[u8]| -> Result<Signer, RegistryError> {
            if let Some(pin) = &spec.sha256 {
                check_pin(&origin, bytes, pin)?;
            }
            let signature = read_signature()?;
            Ok(trust.check(&origin, bytes, signature.as_deref(), &signature_location)?)
        };
        let (component, signer) = match &spec.source {
            ContributorSource::File(path) if spec.sha256.is_none() && !trust.is_active() => {
                // Nothing to check on the bytes: the cache may map the file
                // by its identity. A signature is still reported.
                let signature = read_signature()?;
                let signer =
                    trust.check(&origin, &[], signature.as_deref(), &signature_location)?;
                (self.load_file_with(path, &spec.limits)?, signer)
            }
            ContributorSource::File(path) => {
                let bytes = read_regular_file(path, MAX_COMPONENT_BYTES)
                    .map_err(|e| LoadError::new(&origin, LoadErrorKind::Read(e.problem.into())))?;
                let signer = checked(&bytes)?;
                (self.load_bytes_with(&origin, &bytes, &spec.limits)?, signer)
            }
            ContributorSource::Bytes { bytes, .. } => {
                let signer = checked(bytes)?;
                (self.load_bytes_with(&origin, bytes, &spec.limits)?, signer)
            }
            ContributorSource::Oci(reference) => {
                // From the store, never the network; the signature is the
                // annotation on the image manifest the reference pins.
                let artifact = match pulled.filter(|pulled| &pulled.reference == reference) {
                    Some(pulled) => std::borrow::Cow::Borrowed(pulled),
                    None => std::borrow::Cow::Owned(
                        (Store::in_home(&self.inner.home).load(reference)).map_err(|e| {
                            LoadError::new(&origin, LoadErrorKind::Store(e.problem.into()))
                        })?,
                    ),
                };
                if let Some(pin) = &spec.sha256 {
                    check_pin(&origin, &artifact.wasm, pin)?;
                }
                let location =
                    format!("the {SIGNATURE_ANNOTATION} annotation of its image manifest");
                let signature = artifact.signature.as_deref();
                let signer = trust.check(&origin, &artifact.wasm, signature, &location)?;
                (
                    self.load_bytes_with(&origin, &artifact.wasm, &spec.limits)?,
                    signer,
                )
            }
        };
        Ok(component
            .with_config(spec.config.clone())
            .with_grants(spec.grants.clone())
            .with_on_error(spec.on_error)
            .checked(signer, Arc::clone(trust)))
    }

    /// Loads and registers the contributor `spec` describes.
    pub async fn register_spec(
        &self,
        spec: &ContributorSpec,
    ) -> Result<Registration, RegistryError> {
        self.register(self.load_spec(spec)?).await
    }

    /// Calls `declare` once, in a sandbox (or takes what the same component
    /// with the same config, grants and limits declared before, from the
    /// cache), checks the declaration, and registers the component.
    ///
    /// A component whose artifact the cache vouched for is opened (its
    /// artifact deserialized) on a thread of its own afterwards, or by the
    /// first call that needs it, whichever comes first.
    pub async fn register(
        &self,
        component: ContributorComponent,
    ) -> Result<Registration, RegistryError> {
        let opening = component.opening();
        let registration = self.register_only(component).await?;
        Opening::in_background(vec![opening]);
        Ok(registration)
    }

    /// [`Registry::register`], leaving the component unopened if it can be.
    async fn register_only(
        &self,
        component: ContributorComponent,
    ) -> Result<Registration, RegistryError> {
        self.admit(&component)?;
        let raw = self.remembered_declaration(&component).await?;
        let (limits, on_error) = (component.limits().clone(), component.on_error());
        let resolver = Resolver::Wasm(Box::new(WasmResolver {
            component,
            ready: Mutex::default(),
            unsuitable: AtomicBool::new(false),
        }));
        self.insert(raw, resolver, limits, on_error)
    }

    /// The trust rule at registration: under a trust with keys, only a
    /// component whose signature was checked under this same trust (by
    /// [`Registry::load_spec`]) is registered. A component loaded with
    /// [`Registry::load_file`] or [`Registry::load_bytes`], or under another
    /// registry's trust, was not.
    fn admit(&self, component: &ContributorComponent) -> Result<(), SignatureError> {
        let trust = &self.inner.trust;
        if !trust.is_active() {
            return Ok(());
        }
        match component.checked_under() {
            Some(checked) if Arc::ptr_eq(checked, trust) || **checked == **trust => Ok(()),
            _ => Err(SignatureError::Unchecked {
                origin: component.origin().to_string(),
            }),
        }
    }

    /// Runs `declare` and reports every rule the declaration breaks, alone
    /// and against the registered contributors, without registering it.
    pub async fn check(
        &self,
        component: &ContributorComponent,
    ) -> Result<(RawDeclaration, Vec<DeclarationError>), ContributorError> {
        let raw = self.declare(component).await?;
        let mut problems = Declaration::problems(&raw, component.limits());
        if problems.is_empty() {
            let declaration = Declaration::validate(raw.clone(), component.limits());
            if let Err(conflict) = declaration
                .and_then(|d| check_against(&d, component.origin(), &self.inner.snapshot()))
            {
                problems.push(conflict);
            }
        }
        Ok((raw, problems))
    }

    /// [`Registry::declare`], remembered in the cache.
    async fn remembered_declaration(
        &self,
        component: &ContributorComponent,
    ) -> Result<RawDeclaration, RegistryError> {
        let (cache, engine) = (&self.inner.cache, component.cache_engine());
        let (content, key) = (component.sha256(), component.declaration_key());
        if let Some(raw) = cache.declaration(engine, content, &key) {
            // It was linked and declared before, by this host version.
            return Ok(raw);
        }
        // Opened here, so a component that does not link fails as at load.
        component.open()?;
        let raw = self.declare(component).await?;
        cache.store_declaration(engine, content, &key, &raw);
        Ok(raw)
    }

    async fn declare(
        &self,
        component: &ContributorComponent,
    ) -> Result<RawDeclaration, ContributorError> {
        self.inner
            .runtime
            .sandbox
            .declare(component)
            .await
            .map_err(|failure| ContributorError {
                contributor: component.origin().to_string(),
                phase: Phase::Declare,
                cause: failure.into(),
                keys: KeysNote::default(),
            })
    }

    /// Registers a trusted in-process contributor under the same rules.
    pub fn register_native(
        &self,
        contributor: Arc<dyn NativeContributor>,
    ) -> Result<Registration, RegistryError> {
        let raw = contributor.declare();
        self.insert(
            raw,
            Resolver::Native(contributor),
            Limits::default(),
            OnError::Fail,
        )
    }

    fn insert(
        &self,
        raw: RawDeclaration,
        resolver: Resolver,
        limits: Limits,
        on_error: OnError,
    ) -> Result<Registration, RegistryError> {
        let declaration = Declaration::validate(raw, &limits)?;
        let name = declaration.name().to_string();
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry {
            id,
            declaration,
            resolver,
            limits,
            on_error,
        });
        self.inner.update(|map| {
            check_against(&entry.declaration, &entry.resolver.origin(), map)?;
            map.insert(name.clone(), entry);
            Ok::<(), DeclarationError>(())
        })?;
        Ok(Registration {
            registry: Arc::downgrade(&self.inner),
            name,
            id,
        })
    }

    /// Every registered contributor, sorted by name: where it came from,
    /// its digest, signer, grants and failure policy. Runs no resolver.
    pub fn contributors(&self) -> Vec<ContributorListing> {
        let snapshot = self.inner.snapshot();
        (snapshot.iter())
            .map(|(name, entry)| {
                let component = match &entry.resolver {
                    Resolver::Wasm(wasm) => Some(&wasm.component),
                    Resolver::Native(_) => None,
                };
                let grants = component.map(|c| c.grants().clone()).unwrap_or_default();
                ContributorListing {
                    name: name.clone(),
                    origin: entry.resolver.origin(),
                    sha256: component.map(|c| c.sha256().to_string()),
                    signer: component.map_or(Signer::Unsigned, |c| c.signer().clone()),
                    env_grants: grants.env.into_iter().map(|(name, _)| name).collect(),
                    cwd_read: grants.cwd_read,
                    on_error: entry.on_error,
                }
            })
            .collect()
    }

    /// Every key, built-ins included, sorted, with owner and description. Runs
    /// no resolver.
    pub fn list(&self) -> Vec<KeyListing> {
        let builtin = |key: &str, description: &str| KeyListing {
            key: DshKey::new(key).expect("built-in keys are valid"),
            owner: BUILTIN_OWNER.into(),
            description: description.into(),
        };
        let mut rows: Vec<KeyListing> = (BUILTIN_KEYS.iter())
            .map(|(key, description)| builtin(key, description))
            .collect();
        for entry in self.inner.snapshot().values() {
            rows.extend(
                entry
                    .declaration
                    .keys()
                    .map(|(key, description)| KeyListing {
                        key: key.clone(),
                        owner: entry.declaration.name().to_string(),
                        description: description.to_string(),
                    }),
            );
        }
        rows.sort_by(|a, b| a.key.cmp(&b.key));
        rows
    }

    /// Builds the overlay for one execution: the built-ins, then every
    /// contributor (in name order) resolved in a fresh instance. The set of
    /// contributors is the one registered when the call starts.
    pub async fn collect(&self, execution: &ToolExecution) -> Result<Overlay, ContributorError> {
        Ok(self.collect_report(execution).await?.overlay)
    }

    /// Does the work `collect` leaves for later, so that it is off the
    /// caller's path: drops the instances of finished calls, then makes one
    /// fresh instance of each contributor that has none ready, for its next
    /// call. An instance serves one call and is never reused. The bash tool
    /// runs this while its child starts; without it, `collect` instantiates
    /// at the call and drops each instance at the end of its call.
    pub async fn prepare(&self) {
        self.inner.runtime.sandbox.reclaim();
        for entry in self.inner.snapshot().values() {
            let Resolver::Wasm(wasm) = &entry.resolver else {
                continue;
            };
            if wasm.unsuitable.load(Ordering::Relaxed) || wasm.ready().is_some() {
                continue;
            }
            match self.inner.runtime.sandbox.prepare(&wasm.component).await {
                // A concurrent `prepare` may have filled it meanwhile; then
                // this one is dropped.
                Preparation::Ready(prepared) => {
                    let mut ready = wasm.ready();
                    if ready.is_none() {
                        *ready = Some(prepared);
                    }
                }
                Preparation::Busy => break,
                Preparation::Unsuitable => wasm.unsuitable.store(true, Ordering::Relaxed),
            }
        }
    }

    /// How many contributors have an instance made ahead of their next call.
    pub fn prepared(&self) -> usize {
        let snapshot = self.inner.snapshot();
        let ready = |entry: &&Arc<Entry>| match &entry.resolver {
            Resolver::Wasm(wasm) => wasm.ready().is_some(),
            Resolver::Native(_) => false,
        };
        snapshot.values().filter(ready).count()
    }

    /// Whether [`Registry::prepare`] has nothing to make: every WASM
    /// contributor that can have an instance made ahead has one.
    pub fn is_prepared(&self) -> bool {
        let snapshot = self.inner.snapshot();
        snapshot.values().all(|entry| match &entry.resolver {
            Resolver::Wasm(wasm) => {
                wasm.unsuitable.load(Ordering::Relaxed) || wasm.ready().is_some()
            }
            Resolver::Native(_) => true,
        })
    }

    /// [`Registry::collect`], also reporting the contributors that failed
    /// under `on_error = "omit"` and were left out.
    pub async fn collect_report(
        &self,
        execution: &ToolExecution,
    ) -> Result<Collection, ContributorError> {
        let mut omitted = Vec::new();
        let snapshot = self.inner.snapshot();
        let mut overlay = BTreeMap::new();
        let builtin = |key: &str| DshKey::new(key).expect("built-in keys are valid");
        // `DshHome` refuses control characters when it is made, and `1` is
        // `1`; only the session id comes from the caller, checked by the
        // value rules: a Rust caller can build a `ToolExecution` whose
        // session id holds a newline, or a megabyte.
        overlay.insert(builtin(DSH_HOME), self.inner.home.as_str().to_string());
        overlay.insert(builtin(DSH_SHELL), "1".to_string());
        if let Some(agent) = &execution.agent {
            let max_value_bytes = Limits::default().max_value_bytes;
            check_value(DSH_SESSION_ID, &agent.session_id, max_value_bytes).map_err(|problem| {
                ContributorError {
                    contributor: BUILTIN_OWNER.to_string(),
                    phase: Phase::Resolve,
                    cause: problem.into(),
                    keys: KeysNote::default(),
                }
            })?;
            overlay.insert(builtin(DSH_SESSION_ID), agent.session_id.clone());
        }
        // Converted for the guests once, when the first one needs it.
        let mut call = None;
        for entry in snapshot.values() {
            match self.resolve_entry(entry, execution, &mut call).await {
                Ok(checked) => overlay.extend(checked),
                Err(err) if entry.on_error == OnError::Omit => {
                    tracing::warn!("omitted for call {}: {err}", execution.call_id);
                    omitted.push(err);
                }
                Err(err) => return Err(err),
            }
        }
        Ok(Collection {
            overlay: Overlay::from(overlay),
            omitted,
        })
    }
}

impl Registry {
    /// The contributor `name` alone, for one execution, under its
    /// `on_error` policy: its checked keys (no built-ins) as the overlay, or
    /// its omitted failure. `None` when no contributor has that name. A
    /// registry that resolves contributors one at a time (the reference
    /// harness's `ctx.shellEnv`) calls this for each.
    pub async fn collect_contributor(
        &self,
        name: &str,
        execution: &ToolExecution,
    ) -> Result<Option<Collection>, ContributorError> {
        let snapshot = self.inner.snapshot();
        let Some(entry) = snapshot.get(name) else {
            return Ok(None);
        };
        let (overlay, omitted): (BTreeMap<DshKey, String>, _) =
            match self.resolve_entry(entry, execution, &mut None).await {
                Ok(checked) => (checked.into_iter().collect(), Vec::new()),
                Err(err) if entry.on_error == OnError::Omit => {
                    tracing::warn!("omitted for call {}: {err}", execution.call_id);
                    (BTreeMap::new(), vec![err])
                }
                Err(err) => return Err(err),
            };
        Ok(Some(Collection {
            overlay: Overlay::from(overlay),
            omitted,
        }))
    }

    /// One contributor's checked pairs for `execution`, in a fresh instance
    /// (or the one made ahead); `call` is the execution in the guests' form,
    /// made by the first guest that needs it.
    async fn resolve_entry<'a>(
        &self,
        entry: &Entry,
        execution: &'a ToolExecution,
        call: &mut Option<Call<'a>>,
    ) -> Result<Vec<(DshKey, String)>, ContributorError> {
        let fail = |cause: FailureCause| ContributorError {
            contributor: entry.declaration.name().to_string(),
            phase: Phase::Resolve,
            cause,
            keys: KeysNote(entry.declaration.key_list()),
        };
        let pairs = match &entry.resolver {
            Resolver::Wasm(wasm) => {
                let (name, prepared) = (entry.declaration.name(), wasm.ready().take());
                let call = call.get_or_insert_with(|| Call::new(execution));
                let sandbox = &self.inner.runtime.sandbox;
                sandbox.resolve(&wasm.component, name, call, prepared).await
            }
            Resolver::Native(native) => native.resolve(execution).map_err(GuestFailure::GuestError),
        };
        pairs
            .map_err(FailureCause::from)
            .and_then(|pairs| {
                (entry.declaration)
                    .check_output(pairs, &entry.limits)
                    .map_err(FailureCause::from)
            })
            .map_err(fail)
    }
}

/// `f` over `items` on up to one thread per core, results in `items`' order.
/// Loading is CPU-bound (deserializing a large component's metadata takes
/// milliseconds), so a manifest loads about as fast as its largest component.
fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if workers <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut results: Vec<(usize, R)> = std::thread::scope(|scope| {
        let work = || {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break done };
                done.push((i, f(item)));
            }
        };
        let helpers: Vec<_> = (1..workers).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for helper in helpers {
            // A panic in `f` is a bug in the host, not guest input: pass it on.
            all.extend(
                helper
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p)),
            );
        }
        all
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

/// The rules that need the other contributors: a unique name, unowned keys.
/// `origin` is where the new one comes from.
fn check_against(
    declaration: &Declaration,
    origin: &str,
    registered: &BTreeMap<String, Arc<Entry>>,
) -> Result<(), DeclarationError> {
    let fail = |key: Option<&DshKey>, problem| DeclarationError {
        contributor: declaration.name().to_string(),
        key: key.map(DshKey::to_string),
        problem,
    };
    if let Some(first) = registered.get(declaration.name()) {
        return Err(fail(
            None,
            DeclarationProblem::DuplicateName {
                first: first.resolver.origin(),
                second: origin.to_string(),
            },
        ));
    }
    for (key, _) in declaration.keys() {
        if let Some(owner) = registered
            .values()
            .find(|e| e.declaration.declared(key.as_str()).is_some())
        {
            return Err(fail(
                Some(key),
                DeclarationProblem::KeyOwned {
                    owner: owner.declaration.name().to_string(),
                },
            ));
        }
    }
    Ok(())
}

//! Registration and listing: declaring, checking a declaration against the
//! registered contributors, and what is registered.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::declaration::{Declaration, DeclarationError, DeclarationProblem, RawDeclaration};
use crate::keys::{BUILTIN_KEYS, BUILTIN_OWNER, DshKey};
use crate::limits::{Limits, Phase};
use crate::manifest::Manifest;
use crate::sandbox::{CodeTier, ContributorComponent, Opening};
use crate::signature::{Signer, Trust};
use crate::spec::{ContributorSpec, HostEnv, OnError};
use dsh_env_support::input::escape_controls;
use tracing::Instrument;
use tracing::field::Empty;

use super::admission::{LoadFrom, LoadOptions};
use super::error::{ContributorError, KeysNote, RegistryError};
use super::state::{Entry, NativeContributor, Registration, Registry, Resolver, WasmResolver};

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
    /// Where its manifest entry is, `manifest.toml:LINE`, if it came from one.
    pub declared_at: Option<String>,
}

impl ContributorListing {
    /// Its grants in words: `none`, or e.g. `env GITHUB_REPOSITORY, cwd (read)`
    /// (names escaped).
    pub fn grants_text(&self) -> String {
        let mut grants: Vec<String> = (self.env_grants.iter())
            .map(|name| format!("env {}", escape_controls(name)))
            .collect();
        if self.cwd_read {
            grants.push("cwd (read)".into());
        }
        if grants.is_empty() {
            "none".into()
        } else {
            grants.join(", ")
        }
    }
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

impl Registry {
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
        let options = LoadOptions::new();
        let loaded = parallel_map(&specs, |spec| self.load(LoadFrom::Spec(spec), &options));
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

    /// Loads and registers the contributor `spec` describes.
    pub async fn register_spec(
        &self,
        spec: &ContributorSpec,
    ) -> Result<Registration, RegistryError> {
        let options = LoadOptions::new();
        self.register(self.load(LoadFrom::Spec(spec), &options)?)
            .await
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
        Self::check_grants(&component)?;
        let raw = self.remembered_declaration(&component).await?;
        let (limits, on_error) = (component.limits().clone(), component.on_error());
        let resolver = Resolver::Wasm(Box::new(WasmResolver {
            component,
            ready: Mutex::default(),
            last_cwd: Mutex::default(),
            unsuitable: AtomicBool::new(false),
            cost: Default::default(),
        }));
        self.insert(raw, resolver, limits, on_error)
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
        let (cache, engine) = (self.inner.loader.cache(), component.cache_engine());
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

    /// Runs `declare` in a sandbox, in a `contributor` span (named by the
    /// component's origin: it has not declared its name yet).
    pub(super) async fn declare(
        &self,
        component: &ContributorComponent,
    ) -> Result<RawDeclaration, ContributorError> {
        let span = tracing::info_span!(
            "contributor",
            contributor = component.origin(),
            phase = %Phase::Declare,
            tier = Empty,
            outcome = Empty,
        );
        if !span.is_disabled() {
            span.record("tier", component.tier().map(CodeTier::as_str));
        }
        let result = (self.inner.runtime.sandbox.declare(component))
            .instrument(span.clone())
            .await
            .map_err(|failure| ContributorError {
                contributor: component.origin().to_string(),
                phase: Phase::Declare,
                cause: failure.into(),
                keys: KeysNote::default(),
            });
        match &result {
            Ok(_) => span.record("outcome", "ok"),
            Err(err) => span.record("outcome", err.cause.rule()),
        };
        result
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
                    declared_at: component.and_then(|c| c.declared_at().map(str::to_string)),
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

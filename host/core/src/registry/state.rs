//! What a registry holds: its contributors (a snapshot replaced whole on
//! every change), and what it was built with.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::declaration::{Declaration, RawDeclaration};
use crate::execution::ToolExecution;
use crate::home::DshHome;
use crate::limits::Limits;
use crate::loader::Loader;
use crate::sandbox::{ContributorComponent, Prepared};
use crate::shared_engine::SharedEngine;
use crate::signature::Trust;
use crate::spec::OnError;

/// A trusted, in-process contributor: harness facts, or a benchmark baseline.
pub trait NativeContributor: Send + Sync + 'static {
    /// Its name and keys, checked by the same rules as a component's.
    fn declare(&self) -> RawDeclaration;
    /// The pairs for one execution, checked like a component's output.
    fn resolve(&self, execution: &ToolExecution) -> Result<Vec<(String, String)>, String>;
}

pub(super) enum Resolver {
    Wasm(Box<WasmResolver>),
    Native(Arc<dyn NativeContributor>),
}

impl Resolver {
    /// Where it came from: the component's origin, or `native`.
    pub(super) fn origin(&self) -> String {
        match self {
            Resolver::Wasm(wasm) => wasm.component.origin().to_string(),
            Resolver::Native(_) => "native".to_string(),
        }
    }
}

/// A registered component, and the instance made ahead of its next call.
pub(super) struct WasmResolver {
    pub(super) component: ContributorComponent,
    /// Filled by [`Registry::prepare`], taken by one `collect`.
    pub(super) ready: Mutex<Option<Prepared>>,
    /// With a cwd grant: the cwd of its last call, which the next instance
    /// is made for (none before its first call, or after one without a cwd).
    pub(super) last_cwd: Mutex<Option<String>>,
    /// Set when the component cannot be prepared ahead (a failed
    /// instantiation), so it is not tried again.
    pub(super) unsuitable: AtomicBool,
    /// What its calls took lately, for sharing a collect's work.
    pub(super) cost: CallCost,
}

/// A moving average of one contributor's call times, in nanoseconds: each
/// call weighs a quarter, so a few calls make it follow a change.
#[derive(Default)]
pub(super) struct CallCost(AtomicU64);

impl CallCost {
    /// Adds one call's time.
    pub(super) fn record(&self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        // A lost update between two concurrent calls only loses a sample.
        let before = self.0.load(Ordering::Relaxed);
        let average = match before {
            0 => took,
            _ => before - before / 4 + took / 4,
        };
        self.0.store(average, Ordering::Relaxed);
    }

    /// What its next call is expected to take (zero before its first).
    pub(super) fn expected(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

impl WasmResolver {
    pub(super) fn ready(&self) -> std::sync::MutexGuard<'_, Option<Prepared>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn last_cwd(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.last_cwd.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether [`Registry::prepare`] has nothing to make for it.
    pub(super) fn is_prepared(&self) -> bool {
        self.unsuitable.load(Ordering::Relaxed)
            || self.ready().is_some()
            || (self.component.grants().cwd_read && self.last_cwd().is_none())
    }
}

pub(super) struct Entry {
    pub(super) id: u64,
    pub(super) declaration: Declaration,
    pub(super) resolver: Resolver,
    pub(super) limits: Limits,
    pub(super) on_error: OnError,
}

pub(super) struct Inner {
    pub(super) runtime: SharedEngine,
    pub(super) home: DshHome,
    /// The cache, compiler and tiering its components are loaded with.
    pub(super) loader: Loader,
    /// Whose signatures are trusted, and whether one is required: set when
    /// the registry is built, applied to every registration.
    pub(super) trust: Arc<Trust>,
    /// Replaced whole on every change, so `collect` works on a stable snapshot.
    pub(super) contributors: Mutex<Arc<BTreeMap<String, Arc<Entry>>>>,
    pub(super) next_id: AtomicU64,
}

/// Registered contributors, and the engine that runs them. Cheap to clone.
#[derive(Clone)]
pub struct Registry {
    pub(super) inner: Arc<Inner>,
}

/// A live registration. Dropping it (or [`Registration::dispose`]) removes the
/// contributor and frees its keys.
#[must_use = "dropping a Registration unregisters the contributor"]
pub struct Registration {
    pub(super) registry: Weak<Inner>,
    pub(super) name: String,
    pub(super) id: u64,
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
    pub(super) fn snapshot(&self) -> Arc<BTreeMap<String, Arc<Entry>>> {
        self.contributors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Applies `change` to a copy of the map and installs it only on success.
    pub(super) fn update<E>(
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

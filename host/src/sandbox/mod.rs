//! The sandbox: compiles contributor components and runs each call in a fresh
//! instance with nothing granted (no files, env, args, network or stdio).

use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, Store};

use crate::cache::{ArtifactCache, engine_tag};
use crate::compile::{Bounds, CompileError, Compiler};
use crate::declaration::RawDeclaration;
use crate::engine;
use crate::execution::ToolExecution;
use crate::guest_output::GuestOutput;
use crate::limits::{Limits, bounded};
use crate::manifest::OnError;

mod component;
mod failure;
mod guest;

pub(crate) use component::Source;
pub use component::{ContributorComponent, Grants, LoadError};
pub use failure::{GuestFailure, Phase};

use component::{is_component, not_a_component};
use failure::classify;
use guest::{GuestLimiter, GuestState, arm, arm_deadline, host_deadline, to_wit, wasi_context};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "contributor",
        exports: { default: async },
    });
}

/// One execution, and its WIT form, converted once for every contributor
/// of a `collect`.
pub(crate) struct Call<'a> {
    execution: &'a ToolExecution,
    wit: bindings::Execution,
}

impl<'a> Call<'a> {
    /// The call for `execution`.
    pub(crate) fn new(execution: &'a ToolExecution) -> Self {
        Call {
            execution,
            wit: to_wit(execution),
        }
    }
}

/// A store and what its guest printed.
struct FreshStore {
    store: Store<GuestState>,
    stdout: GuestOutput,
    stderr: GuestOutput,
}

/// An instance made ahead of its call and never used: as fresh as one made
/// at the call, minus the instantiation on the caller's path.
pub(crate) struct Prepared {
    fresh: FreshStore,
    guest: bindings::Contributor,
    slot: OwnedSemaphorePermit,
}

/// What [`Sandbox::prepare`] made.
pub(crate) enum Preparation {
    /// A fresh instance.
    Ready(Prepared),
    /// No pool slot was free; another time, perhaps.
    Busy,
    /// This component is instantiated at its call, always.
    Unsuitable,
}

/// A finished call's store, and the pool slot it holds until it is dropped.
type Retired = (Store<GuestState>, OwnedSemaphorePermit);

/// Pool slots that instances made ahead may hold at most.
pub const MAX_PREPARED: usize = engine::MAX_LIVE_INSTANCES as usize / 2;

/// Finished stores wait at most this many before a call drops them itself.
const MAX_RETIRED: usize = 32;

/// Compiles components and runs their calls, each in a fresh instance.
pub(crate) struct Sandbox {
    engine: Engine,
    linker: Linker<GuestState>,
    /// Bounds live instances to the pool's size, so a burst waits instead of failing.
    slots: Arc<Semaphore>,
    /// Finished stores not dropped yet: dropping one (resetting its pool
    /// slot) costs about a fifth of a call, and need not delay the overlay.
    retired: Mutex<Vec<Retired>>,
}

impl Sandbox {
    /// An engine and a linker that provides WASI (denying everything) and `config`.
    pub(crate) fn new() -> Result<Self, LoadError> {
        let setup = |e: wasmtime::Error| LoadError {
            origin: "dsh-env".into(),
            reason: format!("engine setup failed: {e}"),
        };
        let engine = engine::build_engine().map_err(setup)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(setup)?;
        bindings::Contributor::add_to_linker::<_, HasSelf<GuestState>>(&mut linker, |s| s)
            .map_err(setup)?;
        Ok(Sandbox {
            engine,
            linker,
            slots: Arc::new(Semaphore::new(engine::MAX_LIVE_INSTANCES as usize)),
            retired: Mutex::default(),
        })
    }

    /// The engine every component is compiled for.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compiles `source` in the compile helper under `limits`' compile
    /// limits (or maps it from the cache) and checks that it targets the
    /// contributor world. The component carries `limits`.
    pub(crate) fn load(
        &self,
        origin: &str,
        source: Source<'_>,
        cache: &ArtifactCache,
        compiler: &Compiler,
        limits: &Limits,
    ) -> Result<ContributorComponent, LoadError> {
        let fail = |reason: String| LoadError {
            origin: origin.to_string(),
            reason,
        };
        let bounds = Bounds::of(limits);
        let tag = engine_tag(&self.engine);
        let compile = |bytes: &[u8]| {
            if !is_component(bytes) {
                return Err(CompileError::Failed(not_a_component(bytes).to_string()));
            }
            compiler.compile(bytes, &bounds, &tag)
        };
        let (component, content) = match source {
            Source::File(path) => cache.load_file(&self.engine, path, &bounds, compile),
            Source::Bytes(bytes) => cache.load_bytes(&self.engine, bytes, &bounds, compile),
        }
        .map_err(fail)?;
        let imports = component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| fail(format!("{e:#}")))?;
        let pre = bindings::ContributorPre::new(instance_pre)
            .map_err(|e| fail(format!("not a dsh:env/contributor component: {e:#}")))?;
        Ok(ContributorComponent {
            origin: origin.to_string(),
            content: content.into(),
            pre,
            config: Arc::default(),
            limits: limits.clone(),
            on_error: OnError::default(),
            imports,
            grants: Grants::default(),
        })
    }

    /// Runs `declare` in a fresh instance.
    pub(crate) async fn declare(
        &self,
        component: &ContributorComponent,
    ) -> Result<RawDeclaration, GuestFailure> {
        let declaration = self
            .call(component, component.origin(), None, async |guest, store| {
                guest.call_declare(store).await
            })
            .await?;
        Ok(RawDeclaration {
            name: declaration.name,
            keys: declaration
                .keys
                .into_iter()
                .map(|k| (k.key, k.description))
                .collect(),
        })
    }

    /// Runs `resolve` for `call` in a fresh instance (`prepared`, when one
    /// was made ahead of the call, else one made now); `name` labels its
    /// logs.
    pub(crate) async fn resolve(
        &self,
        component: &ContributorComponent,
        name: &str,
        call: &Call<'_>,
        prepared: Option<Prepared>,
    ) -> Result<Vec<(String, String)>, GuestFailure> {
        let resolve = async |guest: &bindings::Contributor, store: &mut Store<GuestState>| {
            guest.call_resolve(store, &call.wit).await
        };
        let result = match prepared {
            Some(prepared) => self.run(component, name, prepared, resolve).await,
            None => {
                self.call(component, name, Some(call.execution), resolve)
                    .await
            }
        }?;
        result.map_err(|message| {
            GuestFailure::GuestError(bounded(&message, component.limits.max_error_bytes))
        })
    }

    /// Instantiates `component` ahead of a call, if a pool slot is free now
    /// and it instantiates cleanly within its limits.
    pub(crate) async fn prepare(&self, component: &ContributorComponent) -> Preparation {
        // Its WASI context depends on the execution (the cwd preopen).
        if component.grants.cwd_read {
            return Preparation::Unsuitable;
        }
        // Half the pool stays for calls, so instances made ahead can never
        // hold every slot while a call waits for one.
        if self.slots.available_permits() <= MAX_PREPARED {
            return Preparation::Busy;
        }
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            return Preparation::Busy;
        };
        let mut fresh = self.fresh_store(component, None);
        let limits = &component.limits;
        arm(&mut fresh.store, limits);
        let instantiate = component.pre.instantiate_async(&mut fresh.store);
        match tokio::time::timeout(host_deadline(limits), instantiate).await {
            Ok(Ok(guest)) => Preparation::Ready(Prepared { fresh, guest, slot }),
            // The call will instantiate it again and name the failure.
            _ => {
                self.retire(fresh.store, slot);
                Preparation::Unsuitable
            }
        }
    }

    /// Instantiates `component` in a new store and runs `f` under its limits.
    async fn call<R>(
        &self,
        component: &ContributorComponent,
        name: &str,
        execution: Option<&ToolExecution>,
        f: impl AsyncFnOnce(&bindings::Contributor, &mut Store<GuestState>) -> wasmtime::Result<R>,
    ) -> Result<R, GuestFailure> {
        let limits = &component.limits;
        let slot = match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                // Retired stores may be what holds the slots.
                self.reclaim();
                Arc::clone(&self.slots)
                    .acquire_owned()
                    .await
                    .map_err(|e| GuestFailure::Instantiate(e.to_string()))?
            }
        };
        let mut fresh = self.fresh_store(component, execution);
        arm(&mut fresh.store, limits);
        let store = &mut fresh.store;
        let run = async {
            let guest =
                (component.pre.instantiate_async(&mut *store).await).map_err(|e| (e, true))?;
            f(&guest, store).await.map_err(|e| (e, false))
        };
        let outcome = tokio::time::timeout(host_deadline(limits), run).await;
        self.finish(component, name, fresh, slot, outcome)
    }

    /// Runs `f` on an instance made ahead of the call, under a fresh deadline.
    async fn run<R>(
        &self,
        component: &ContributorComponent,
        name: &str,
        prepared: Prepared,
        f: impl AsyncFnOnce(&bindings::Contributor, &mut Store<GuestState>) -> wasmtime::Result<R>,
    ) -> Result<R, GuestFailure> {
        let Prepared {
            mut fresh,
            guest,
            slot,
        } = prepared;
        let limits = &component.limits;
        // Fuel carries over from instantiation, as in `call`; time starts now.
        arm_deadline(&mut fresh.store, limits);
        let run = async { f(&guest, &mut fresh.store).await.map_err(|e| (e, false)) };
        let outcome = tokio::time::timeout(host_deadline(limits), run).await;
        self.finish(component, name, fresh, slot, outcome)
    }

    /// A store for one instance of `component`: its WASI context (with the
    /// grants `execution` allows), limiter and config.
    fn fresh_store(
        &self,
        component: &ContributorComponent,
        execution: Option<&ToolExecution>,
    ) -> FreshStore {
        let limits = &component.limits;
        let (stdout, stderr) = (
            GuestOutput::new(limits.max_log_bytes),
            GuestOutput::new(limits.max_log_bytes),
        );
        let wasi = wasi_context(&component.grants, execution, &stdout, &stderr);
        let mut store = Store::new(
            &self.engine,
            GuestState {
                wasi,
                table: ResourceTable::new(),
                limiter: GuestLimiter {
                    memory_bytes: limits.memory_bytes,
                    table_elements: limits.table_elements,
                    hit: None,
                },
                config: component.config.clone(),
                ticks_left: 0,
            },
        );
        store.limiter(|state| &mut state.limiter);
        FreshStore {
            store,
            stdout,
            stderr,
        }
    }

    /// Logs the guest's output, names a failure, and retires the store.
    fn finish<R>(
        &self,
        component: &ContributorComponent,
        name: &str,
        fresh: FreshStore,
        slot: OwnedSemaphorePermit,
        outcome: Result<Result<R, (wasmtime::Error, bool)>, tokio::time::error::Elapsed>,
    ) -> Result<R, GuestFailure> {
        let limits = &component.limits;
        for (stream, output) in [("stdout", &fresh.stdout), ("stderr", &fresh.stderr)] {
            if let Some(text) = output.text() {
                tracing::info!(contributor = name, "{stream}: {text}");
            }
        }
        let result = match outcome {
            Err(_) => Err(GuestFailure::Deadline(limits.deadline)),
            Ok(Ok(value)) => Ok(value),
            Ok(Err((err, instantiating))) => Err(classify(
                err,
                fresh.store.data().limiter.hit.clone(),
                limits,
                instantiating,
            )),
        };
        self.retire(fresh.store, slot);
        result
    }

    /// Keeps a finished store for [`Sandbox::reclaim`], or drops the waiting
    /// ones now when there are many or a call may be waiting for a slot.
    fn retire(&self, store: Store<GuestState>, slot: OwnedSemaphorePermit) {
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        retired.push((store, slot));
        if retired.len() >= MAX_RETIRED || self.slots.available_permits() == 0 {
            let full = std::mem::take(&mut *retired);
            drop(retired);
            drop(full);
        }
    }

    /// Drops every finished store, freeing its pool slot.
    pub(crate) fn reclaim(&self) {
        let retired = {
            let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::take(&mut *retired)
        };
        drop(retired);
    }
}

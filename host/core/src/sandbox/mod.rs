//! The sandbox: the engines components are compiled for (loading them is
//! the [`crate::loader`]'s), and each call in a fresh instance with nothing
//! granted (no files, env, args, network or stdio).

use std::sync::{Arc, Mutex};

use tokio::runtime::Runtime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store};

use crate::declaration::RawDeclaration;
use crate::engine::{self, Allocator, EngineError};
use crate::execution::ToolExecution;
use crate::guest_output::GuestOutput;
use crate::limits::{self, HostLimits, Phase, bounded};
use crate::load_error::LoadErrorKind;

mod component;
mod contract;
mod failure;
mod files;
mod guest;
mod trace;

pub use component::{CodeTier, ContributorComponent, MAX_OPENING_THREADS};
pub(crate) use component::{Linked, Open, Opening, Source, is_component, not_a_component};
pub use contract::{ContractVersion, supported_contracts};
pub use failure::GuestFailure;
pub use trace::CallTrace;

/// Why `bytes` is not a WebAssembly component, judged by its header alone
/// (e.g. before shipping it), or `None` if it looks like one.
pub fn not_a_component_reason(bytes: &[u8]) -> Option<&'static str> {
    (!is_component(bytes)).then(|| not_a_component(bytes))
}

use contract::{Guest, Pre, WitExecution};
use failure::classify;
use files::{DescriptorLedger, OpenFiles};
use guest::{
    GuestLimiter, GuestState, MemoryBudget, arm, arm_deadline, host_deadline, wasi_context,
    within_host_deadline,
};

/// One execution, and its WIT form, converted once for every contributor
/// of a `collect`; cheap to clone, so that a collect's contributors can run
/// on more than one thread.
#[derive(Clone)]
pub(crate) struct Call {
    wit: Arc<WitExecution>,
}

impl Call {
    /// The call for `execution`.
    pub(crate) fn new(execution: &ToolExecution) -> Self {
        Call {
            wit: Arc::new(WitExecution::new(execution)),
        }
    }

    /// The execution it was made for.
    pub(crate) fn execution(&self) -> &ToolExecution {
        self.wit.execution()
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
    guest: Guest,
    slot: OwnedSemaphorePermit,
    /// Which compiler made the code it was instantiated from.
    tier: CodeTier,
    /// With a cwd grant: the directory preopened for it.
    place: Option<Place>,
}

/// The cwd an instance made ahead was given: its path, and the directory
/// the path named then (none if it could not be opened).
struct Place {
    path: String,
    dir: Option<DirId>,
}

/// A directory's device and inode: which directory a path names now.
type DirId = (u64, u64);

/// What `path` names now, if it can be read.
fn dir_id(path: &str) -> Option<DirId> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino()))
}

impl Prepared {
    /// Which compiler made the code it runs (a tier-up after it was made
    /// does not change it).
    pub(crate) fn tier(&self) -> CodeTier {
        self.tier
    }

    /// Whether it may serve `execution`: always without a cwd grant; with
    /// one, only if the call's cwd is the path it was given and that path
    /// still names the same directory (one deleted and made again is
    /// another: the instance holds the old one open, so its inode is not
    /// reused meanwhile).
    pub(crate) fn fits(&self, execution: &ToolExecution) -> bool {
        let Some(place) = &self.place else {
            return true;
        };
        execution.agent_cwd() == Some(place.path.as_str()) && dir_id(&place.path) == place.dir
    }
}

/// What [`Sandbox::prepare`] made.
pub(crate) enum Preparation {
    /// A fresh instance.
    Ready(Prepared),
    /// No pool slot was free; another time, perhaps.
    Busy,
    /// This component is instantiated at its call, always.
    Unsuitable,
    /// Not this time: the guest I/O runtime was busy, or the cwd named
    /// another directory during the preopen.
    Skipped,
}

/// What becomes of a finished call's store.
enum Teardown {
    /// Kept for [`Sandbox::reclaim`], which the next `prepare` runs beside
    /// the caller's child, off the caller's path: for an instance made
    /// ahead (so the caller prepares), and for one with a cwd grant (made
    /// ahead only for the cwd of its last call).
    Retire,
    /// Dropped at the end of the call. Its instance was made at the call,
    /// so the caller is not (or not only) preparing instances ahead, and
    /// a retired store would keep its pool slot busy until 32 wait: the
    /// next call then takes another slot, and every slot a big guest has
    /// used keeps the pages of its memory image it touched (the start-up
    /// bench's RSS after its burst: BENCHMARKS.md).
    Drop,
}

/// Finished calls' stores, and the pool slots they hold until dropped.
#[derive(Default)]
struct Retired {
    stores: Vec<(Store<GuestState>, OwnedSemaphorePermit)>,
    /// Guest memory the stores hold, as their limiters charged it.
    bytes: usize,
}

/// Pool slots that instances made ahead may hold at most.
pub const MAX_PREPARED: usize = limits::MAX_LIVE_INSTANCES as usize / 2;

/// Finished stores wait at most this many before a call drops them itself.
const MAX_RETIRED: usize = 32;

/// Where calls of contributors with a cwd grant run: a runtime of their
/// own, each call whole on one thread of its small blocking pool, so a guest
/// whose file I/O blocks holds one of these threads, never the caller's
/// runtime or its blocking pool. Its file operations run inline there: one
/// thread hop per call, not one per operation.
struct GuestIo {
    /// `None` only while dropping.
    runtime: Option<Runtime>,
    /// Such calls that may run at once.
    calls: Arc<Semaphore>,
}

impl GuestIo {
    /// Runs `work` on a thread of the blocking pool (see [`GuestIo`]);
    /// `None` while dropping.
    fn spawn<F>(&self, work: F) -> Option<tokio::task::JoinHandle<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let runtime = self.runtime.as_ref()?;
        let handle = runtime.handle().clone();
        Some(runtime.spawn_blocking(move || handle.block_on(work)))
    }
}

impl Drop for GuestIo {
    fn drop(&mut self) {
        // A thread stuck in a blocking read cannot be joined; do not wait for it.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// An engine and the linker that binds its components.
pub(crate) struct Tier {
    /// The engine.
    pub(crate) engine: Engine,
    linker: Linker<GuestState>,
}

impl Tier {
    /// `engine`, and a linker that provides WASI (denying everything, and
    /// opening files without blocking) and the contract's host interfaces.
    fn new(engine: Engine) -> wasmtime::Result<Self> {
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        files::add_to_linker(&mut linker)?;
        trace::add_to_linker(&mut linker)?;
        contract::add_to_linker(&mut linker)?;
        Ok(Tier { engine, linker })
    }

    /// What a call needs from `component`, compiled for this tier's engine:
    /// its imports, and a pre-instance bound to the contract version they
    /// name.
    pub(crate) fn link(
        &self,
        component: &Component,
        tier: CodeTier,
    ) -> Result<Linked, LoadErrorKind> {
        let imports: Arc<[String]> = component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let instance_pre = (self.linker)
            .instantiate_pre(component)
            .map_err(|e| LoadErrorKind::Invalid(format!("{e:#}")))?;
        // The contract version is chosen here, once: calls only instantiate.
        let pre = Pre::new(&imports, instance_pre)?;
        Ok(Linked {
            pre,
            imports,
            tier,
            _held: None,
        })
    }
}

/// The engines components are compiled for, and their calls, each in a
/// fresh instance.
pub(crate) struct Sandbox {
    /// Cranelift's engine (pooling when it can) and linker.
    optimized: Tier,
    /// Pooling, or on demand and why.
    allocator: Allocator,
    /// Winch's, made by the first load that compiles with it (or why not).
    baseline: std::sync::OnceLock<Result<Tier, String>>,
    /// Bounds live instances to the pool's size, so a burst waits instead of failing.
    slots: Arc<Semaphore>,
    /// Finished stores not dropped yet: dropping one (resetting its pool
    /// slot) costs about a fifth of a call, and need not delay the overlay.
    retired: Mutex<Retired>,
    /// Guest memory of every live store, against the host's budget.
    budget: Arc<MemoryBudget>,
    /// Files guests hold open through cwd grants, against the host's cap.
    descriptors: Arc<DescriptorLedger>,
    io: GuestIo,
    host_limits: HostLimits,
}

/// `component`'s pre-instance, its artifact opened first if that was left
/// for later (which may wait for another thread opening it).
fn pre(component: &ContributorComponent) -> Result<&Pre, GuestFailure> {
    (component.linked.get())
        .map(|linked| &linked.pre)
        .map_err(|reason| GuestFailure::Instantiate(format!("cannot open its artifact: {reason}")))
}

impl Sandbox {
    /// An engine and a linker that provides WASI (denying everything, and
    /// opening files without blocking) and `config`, under `host_limits`.
    pub(crate) fn new(host_limits: HostLimits) -> Result<Self, EngineError> {
        let setup = |e: wasmtime::Error| EngineError::Engine(format!("{e:#}"));
        let (engine, allocator) = engine::build_engine().map_err(setup)?;
        let optimized = Tier::new(engine).map_err(setup)?;
        let io_calls = host_limits.io_calls.max(1);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(io_calls)
            .thread_name("dsh-env-guest-io")
            .enable_time()
            .build()
            .map_err(EngineError::Threads)?;
        Ok(Sandbox {
            optimized,
            allocator,
            baseline: std::sync::OnceLock::new(),
            slots: Arc::new(Semaphore::new(limits::MAX_LIVE_INSTANCES as usize)),
            retired: Mutex::default(),
            budget: Arc::new(MemoryBudget::new(host_limits.memory_budget_bytes)),
            descriptors: Arc::new(DescriptorLedger::new(host_limits.guest_descriptors)),
            io: GuestIo {
                runtime: Some(runtime),
                calls: Arc::new(Semaphore::new(io_calls)),
            },
            host_limits,
        })
    }

    /// Guest memory charged by live and retired stores, in bytes.
    pub(crate) fn memory_in_use(&self) -> usize {
        self.budget.used()
    }

    /// Files and directories guests hold open now.
    pub(crate) fn descriptors_open(&self) -> usize {
        self.descriptors.open()
    }

    /// Which contributors hold guest descriptors now, and how many.
    pub(crate) fn descriptor_holders(&self) -> Vec<(String, usize)> {
        self.descriptors.holders()
    }

    /// How the engine allocates instances.
    pub(crate) fn allocator(&self) -> &Allocator {
        &self.allocator
    }

    /// The host-wide budgets in force.
    pub(crate) fn host_limits(&self) -> &HostLimits {
        &self.host_limits
    }

    /// The optimized tier (Cranelift's).
    pub(crate) fn optimized(&self) -> &Tier {
        &self.optimized
    }

    /// The baseline tier, made now if this is its first use.
    pub(crate) fn baseline(&self) -> Result<&Tier, &str> {
        self.baseline
            .get_or_init(|| {
                engine::build_baseline_engine()
                    .and_then(Tier::new)
                    .map_err(|e| format!("{e:#}"))
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// Runs `declare` in a fresh instance.
    pub(crate) async fn declare(
        &self,
        component: &ContributorComponent,
    ) -> Result<RawDeclaration, GuestFailure> {
        self.call(
            component,
            component.origin(),
            Phase::Declare,
            None,
            async |guest, store| guest.declare(store).await,
            None,
        )
        .await
    }

    /// Runs `resolve` for `call` in a fresh instance (`prepared`, when one
    /// was made ahead of the call, else one made now); `name` labels its
    /// logs. When `trace` is given, what the call showed of itself is kept there.
    pub(crate) async fn resolve(
        &self,
        component: &ContributorComponent,
        name: &str,
        call: &Call,
        prepared: Option<Prepared>,
        trace: Option<&mut CallTrace>,
    ) -> Result<Vec<(String, String)>, GuestFailure> {
        let resolve = async |guest: &Guest, store: &mut Store<GuestState>| {
            guest.resolve(store, &call.wit).await
        };
        let result = match prepared {
            // It may touch files the model controls.
            _ if component.grants.cwd_read => {
                (self.resolve_on_io(component, name, call, prepared, trace)).await
            }
            Some(prepared) => self.run(component, name, prepared, resolve, trace).await,
            None => {
                self.call(
                    component,
                    name,
                    Phase::Resolve,
                    Some(call.execution()),
                    resolve,
                    trace,
                )
                .await
            }
        }?;
        result.map_err(|message| {
            GuestFailure::GuestError(bounded(&message, component.limits.max_error_bytes))
        })
    }

    /// Instantiates `component` (whose calls `name` labels) ahead of a
    /// call, if a pool slot is free now and it instantiates cleanly within
    /// its limits; with a cwd grant, for `cwd` (none: never made ahead), its
    /// preopen and instantiation on the guest I/O runtime (see [`GuestIo`]).
    pub(crate) async fn prepare(
        &self,
        component: &ContributorComponent,
        name: &str,
        cwd: Option<&str>,
    ) -> Preparation {
        let cwd = match (component.grants.cwd_read, cwd) {
            (true, None) => return Preparation::Unsuitable,
            (granted, cwd) => cwd.filter(|_| granted),
        };
        // Half the pool stays for calls, so instances made ahead can never
        // hold every slot while a call waits for one.
        if self.slots.available_permits() <= MAX_PREPARED {
            return Preparation::Busy;
        }
        // The call will name why it cannot be opened.
        let Ok(linked) = component.linked.get() else {
            return Preparation::Unsuitable;
        };
        let (pre, tier) = (&linked.pre, linked.tier);
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            return Preparation::Busy;
        };
        let mut fresh = self.fresh_store(pre, component, name, Phase::Resolve, None);
        arm(&mut fresh.store, &component.limits);
        let (fresh, guest, place) = match cwd {
            Some(cwd) => match self.instantiate_in(pre, component, fresh, cwd).await {
                Some((fresh, guest, place)) => (fresh, guest, Some(place)),
                None => return Preparation::Skipped,
            },
            None => {
                let instantiate = pre.instantiate_async(&mut fresh.store);
                let made = within_host_deadline(&component.limits, instantiate).await;
                (fresh, made.ok().and_then(Result::ok), None)
            }
        };
        let Some(guest) = guest else {
            // The call will instantiate it again and name the failure.
            self.retire(fresh.store, slot);
            return Preparation::Unsuitable;
        };
        Preparation::Ready(Prepared {
            fresh,
            guest,
            slot,
            tier,
            place,
        })
    }

    /// `fresh` given `cwd` by `component`'s grant, and instantiated, on the guest I/O
    /// runtime: the preopen opens a path the model chose, which may block.
    /// `None` if that runtime is busy or gone, the path named another
    /// directory after the preopen than before, or the deadline passed.
    async fn instantiate_in(
        &self,
        pre: &Pre,
        component: &ContributorComponent,
        fresh: FreshStore,
        cwd: &str,
    ) -> Option<(FreshStore, Option<Guest>, Place)> {
        let io_call = Arc::clone(&self.io.calls).try_acquire_owned().ok()?;
        let FreshStore {
            mut store,
            stdout,
            stderr,
        } = fresh;
        let (pre, grants) = (pre.clone(), component.grants.clone());
        let (path, out, err) = (cwd.to_string(), stdout.clone(), stderr.clone());
        let task = self.io.spawn(async move {
            // Made without the preopen on the caller's runtime; given it here.
            let before = dir_id(&path);
            store.data_mut().wasi = wasi_context(&grants, Some(&path), &out, &err);
            let dir = dir_id(&path);
            if dir != before {
                return (store, None);
            }
            let _running = crate::epoch::guest_running();
            let guest = pre.instantiate_async(&mut store).await.ok();
            drop(io_call);
            (store, Some((guest, Place { path, dir })))
        })?;
        let abort = task.abort_handle();
        match tokio::time::timeout(host_deadline(&component.limits), task).await {
            Ok(Ok((store, Some((guest, place))))) => {
                let fresh = FreshStore {
                    store,
                    stdout,
                    stderr,
                };
                Some((fresh, guest, place))
            }
            _ => {
                abort.abort();
                None
            }
        }
    }

    /// A pool slot, once one is free.
    async fn slot(&self) -> Result<OwnedSemaphorePermit, GuestFailure> {
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(slot) => Ok(slot),
            Err(_) => {
                // Retired stores may be what holds the slots.
                self.reclaim();
                Arc::clone(&self.slots)
                    .acquire_owned()
                    .await
                    .map_err(|e| GuestFailure::Instantiate(e.to_string()))
            }
        }
    }

    /// `resolve` for a contributor with a cwd grant, on the guest I/O
    /// runtime (see [`GuestIo`]), at most `HostLimits::io_calls` at once, in
    /// `prepared` if given (made ahead for this call's cwd), else in an
    /// instance made now.
    /// At the deadline the call is abandoned: its thread drops its store
    /// and files when the guest stops at the epoch tick past its own
    /// deadline, and a thread stuck in the kernel stays stuck on that
    /// runtime, not on the caller's.
    async fn resolve_on_io(
        &self,
        component: &ContributorComponent,
        name: &str,
        call: &Call,
        prepared: Option<Prepared>,
        trace: Option<&mut CallTrace>,
    ) -> Result<Result<Vec<(String, String)>, String>, GuestFailure> {
        let limits = &component.limits;
        let pre = pre(component)?.clone();
        let (ahead, stdout, stderr) = match prepared {
            Some(Prepared {
                fresh, guest, slot, ..
            }) => (Some((fresh.store, guest, slot)), fresh.stdout, fresh.stderr),
            None => (
                None,
                GuestOutput::new(limits.max_log_bytes),
                GuestOutput::new(limits.max_log_bytes),
            ),
        };
        let started = async {
            let io_call = Arc::clone(&self.io.calls)
                .acquire_owned()
                .await
                .map_err(|e| GuestFailure::Instantiate(e.to_string()))?;
            let (mut store, guest, slot) = match ahead {
                Some((mut store, guest, slot)) => {
                    // Fuel carries over from instantiation, as in `call`.
                    arm_deadline(&mut store, limits);
                    (store, Some(guest), slot)
                }
                None => {
                    let slot = self.slot().await?;
                    let mut store = self.new_store(
                        pre.engine(),
                        component,
                        name,
                        Phase::Resolve,
                        call.execution().agent_cwd(),
                        (&stdout, &stderr),
                    );
                    arm(&mut store, limits);
                    (store, None, slot)
                }
            };
            let wit = Arc::clone(&call.wit);
            let task = self.io.spawn(async move {
                // In the task: an abandoned task's guest runs until its next
                // tick, and needs the tick to stop.
                let _running = crate::epoch::guest_running();
                let outcome = async {
                    let guest = match guest {
                        Some(guest) => guest,
                        None => (pre.instantiate_async(&mut store).await).map_err(|e| (e, true))?,
                    };
                    (guest.resolve(&mut store, &wit).await).map_err(|e| (e, false))
                }
                .await;
                drop(io_call);
                (store, outcome)
            });
            let gone = || GuestFailure::Instantiate("the guest I/O runtime is gone".into());
            Ok::<_, GuestFailure>((task.ok_or_else(gone)?, slot))
        };
        let deadline = tokio::time::Instant::now() + host_deadline(limits);
        let (task, slot) = match tokio::time::timeout_at(deadline, started).await {
            Ok(started) => started?,
            Err(_) => return Err(GuestFailure::Deadline(limits.deadline)),
        };
        let abort = task.abort_handle();
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok((store, outcome))) => {
                let fresh = FreshStore {
                    store,
                    stdout,
                    stderr,
                };
                let outcome = Ok(outcome);
                self.finish(
                    component,
                    name,
                    fresh,
                    slot,
                    outcome,
                    Teardown::Retire,
                    trace,
                )
            }
            Ok(Err(join)) => {
                Err(GuestFailure::trap(join.to_string()).with_last_words(stderr.last_words()))
            }
            Err(_) => {
                abort.abort();
                log_output(name, &stdout, &stderr);
                Err(GuestFailure::Deadline(limits.deadline))
            }
        }
    }

    /// Instantiates `component` in a new store and runs `f` under its limits.
    async fn call<R>(
        &self,
        component: &ContributorComponent,
        name: &str,
        phase: Phase,
        execution: Option<&ToolExecution>,
        f: impl AsyncFnOnce(&Guest, &mut Store<GuestState>) -> wasmtime::Result<R>,
        trace: Option<&mut CallTrace>,
    ) -> Result<R, GuestFailure> {
        let limits = &component.limits;
        let pre = pre(component)?;
        let slot = self.slot().await?;
        let cwd = execution.and_then(ToolExecution::agent_cwd);
        let mut fresh = self.fresh_store(pre, component, name, phase, cwd);
        arm(&mut fresh.store, limits);
        let store = &mut fresh.store;
        let run = async {
            let guest = (pre.instantiate_async(&mut *store).await).map_err(|e| (e, true))?;
            f(&guest, store).await.map_err(|e| (e, false))
        };
        let outcome = within_host_deadline(limits, run).await;
        self.finish(component, name, fresh, slot, outcome, Teardown::Drop, trace)
    }

    /// Runs `f` on an instance made ahead of the call, under a fresh deadline.
    async fn run<R>(
        &self,
        component: &ContributorComponent,
        name: &str,
        prepared: Prepared,
        f: impl AsyncFnOnce(&Guest, &mut Store<GuestState>) -> wasmtime::Result<R>,
        trace: Option<&mut CallTrace>,
    ) -> Result<R, GuestFailure> {
        let Prepared {
            mut fresh,
            guest,
            slot,
            ..
        } = prepared;
        let limits = &component.limits;
        // Fuel carries over from instantiation, as in `call`; time starts now.
        arm_deadline(&mut fresh.store, limits);
        let run = async { f(&guest, &mut fresh.store).await.map_err(|e| (e, false)) };
        let outcome = within_host_deadline(limits, run).await;
        self.finish(
            component,
            name,
            fresh,
            slot,
            outcome,
            Teardown::Retire,
            trace,
        )
    }

    /// A store for one instance of `component` (on `pre`'s engine), given
    /// `cwd` if granted, and what its guest prints.
    fn fresh_store(
        &self,
        pre: &Pre,
        component: &ContributorComponent,
        name: &str,
        phase: Phase,
        cwd: Option<&str>,
    ) -> FreshStore {
        let limits = &component.limits;
        let (stdout, stderr) = (
            GuestOutput::new(limits.max_log_bytes),
            GuestOutput::new(limits.max_log_bytes),
        );
        let store = self.new_store(
            pre.engine(),
            component,
            name,
            phase,
            cwd,
            (&stdout, &stderr),
        );
        FreshStore {
            store,
            stdout,
            stderr,
        }
    }

    /// A store on `engine` (its code's) for one instance of `component`:
    /// its WASI context (with its grants, `cwd` the agent's, printing into
    /// `stdout` and `stderr`), its limiter, handle caps, hostcall budget
    /// and config.
    fn new_store(
        &self,
        engine: &Engine,
        component: &ContributorComponent,
        name: &str,
        phase: Phase,
        cwd: Option<&str>,
        (stdout, stderr): (&GuestOutput, &GuestOutput),
    ) -> Store<GuestState> {
        let limits = &component.limits;
        let wasi = wasi_context(&component.grants, cwd, stdout, stderr);
        let mut table = ResourceTable::new();
        table.set_max_capacity(limits.max_handles);
        let mut store = Store::new(
            engine,
            GuestState {
                wasi,
                table,
                files: (component.grants.cwd_read)
                    .then(|| OpenFiles::new(Arc::clone(&self.descriptors), name)),
                limiter: GuestLimiter::new(limits, Arc::clone(&self.budget)),
                config: component.config.clone(),
                deadline_ticks: 0,
                ticks_met: 0,
                sought: Default::default(),
            },
        );
        store.limiter(|state| &mut state.limiter);
        // What the guest can make the host copy or hold per call follows
        // its own caps, not wasmtime's defaults (128 MiB, 100,000 handles).
        store.set_hostcall_fuel(limits.hostcall_bytes(phase));
        store.set_max_component_handles(limits.max_handles.saturating_mul(2));
        store
    }

    /// Logs the guest's output, names a failure, keeps what the call showed
    /// in `trace` if given, and retires or drops the store.
    #[allow(clippy::too_many_arguments)]
    fn finish<R>(
        &self,
        component: &ContributorComponent,
        name: &str,
        fresh: FreshStore,
        slot: OwnedSemaphorePermit,
        outcome: Result<Result<R, (wasmtime::Error, bool)>, tokio::time::error::Elapsed>,
        teardown: Teardown,
        trace: Option<&mut CallTrace>,
    ) -> Result<R, GuestFailure> {
        let limits = &component.limits;
        log_output(name, &fresh.stdout, &fresh.stderr);
        let mut store = fresh.store;
        if let Some(trace) = trace {
            let sought = store.data().sought;
            *trace = CallTrace {
                stderr_tail: fresh.stderr.last_words(),
                found_no_directories: sought.directories,
                found_no_environment: sought.environment,
                epoch_ticks: store.data().ticks_met,
            };
        }
        if component.grants.cwd_read {
            release_host_resources(store.data_mut());
        }
        let result = match outcome {
            Err(_) => Err(GuestFailure::Deadline(limits.deadline)),
            Ok(Ok(value)) => Ok(value),
            Ok(Err((err, instantiating))) => Err(classify(
                err,
                store.data().limiter.hit.clone(),
                limits,
                instantiating,
                store.hostcall_fuel(),
            )),
        };
        match teardown {
            Teardown::Retire => self.retire(store, slot),
            Teardown::Drop => drop((store, slot)),
        }
        result.map_err(|failure| failure.with_last_words(fresh.stderr.last_words()))
    }

    /// Keeps a finished store for [`Sandbox::reclaim`], or drops it now when
    /// it holds more guest memory than retired stores may; drops the waiting
    /// ones too when there are many, they hold too much, or a call may be
    /// waiting for a slot.
    fn retire(&self, store: Store<GuestState>, slot: OwnedSemaphorePermit) {
        let bytes = store.data().limiter.used_bytes();
        let cap = self.host_limits.retired_bytes;
        if bytes > cap {
            drop((store, slot));
            return;
        }
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        retired.stores.push((store, slot));
        retired.bytes += bytes;
        if retired.stores.len() >= MAX_RETIRED
            || retired.bytes > cap
            || self.slots.available_permits() == 0
        {
            let full = std::mem::take(&mut *retired);
            drop(retired);
            drop(full);
        }
    }

    /// Drops `prepared` off the call's path, unused (it did not fit the
    /// call, see [`Prepared::fits`]), with the directory it holds closed.
    pub(crate) fn discard(&self, prepared: Prepared) {
        let Prepared {
            mut fresh, slot, ..
        } = prepared;
        release_host_resources(fresh.store.data_mut());
        self.retire(fresh.store, slot);
    }

    /// Drops every finished store, freeing its pool slot.
    pub(crate) fn reclaim(&self) {
        let retired = {
            let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::take(&mut *retired)
        };
        drop(retired);
    }

    /// Guest memory that finished stores still hold, in bytes.
    pub(crate) fn retired_bytes(&self) -> usize {
        self.retired.lock().unwrap_or_else(|p| p.into_inner()).bytes
    }
}

/// Logs what a guest printed, with its contributor's name.
fn log_output(name: &str, stdout: &GuestOutput, stderr: &GuestOutput) {
    for (stream, output) in [("stdout", stdout), ("stderr", stderr)] {
        if let Some(text) = output.text() {
            tracing::info!(contributor = name, "{stream}: {text}");
        }
    }
}

/// Closes what a finished guest held open through its grants (files,
/// directories, streams), before the store is retired: a retired store
/// must not keep descriptors the command about to be spawned may need.
fn release_host_resources(state: &mut GuestState) {
    state.table = ResourceTable::new();
    state.wasi = wasmtime_wasi::WasiCtx::builder().build();
    if let Some(files) = &mut state.files {
        files.release();
    }
}

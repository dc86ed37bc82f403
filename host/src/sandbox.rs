//! The sandbox: compiles contributor components and runs each call in a fresh
//! instance with nothing granted (no files, env, args, network or stdio).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};

use crate::cache::ArtifactCache;
use crate::declaration::RawDeclaration;
use crate::engine;
use crate::execution::{self, ToolExecution};
use crate::guest_output::GuestOutput;
use crate::limits::{Limits, bounded};
use crate::manifest::OnError;

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "contributor",
        exports: { default: async },
    });
}

use bindings::dsh::env::types;

/// Which call of a contributor failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `declare`, at registration.
    Declare,
    /// `resolve`, for one execution.
    Resolve,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Declare => "declare",
            Phase::Resolve => "resolve",
        })
    }
}

/// How a guest call failed inside the sandbox. Text that can come from the
/// guest (its error message, names in a trap's backtrace) is shown escaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuestFailure {
    /// The wall-clock deadline passed.
    #[error("deadline of {0:?} exceeded")]
    Deadline(Duration),
    /// Linear memory or a table would have grown past its cap.
    #[error("{0}")]
    ResourceLimit(String),
    /// The wasm stack overflowed.
    #[error("wasm stack overflow")]
    StackOverflow,
    /// The fuel (instruction) budget ran out.
    #[error("fuel budget of {0} exhausted")]
    Fuel(u64),
    /// Any other trap.
    #[error("trap: {}", .0.escape_debug())]
    Trap(String),
    /// `resolve` returned `err(message)`.
    #[error("guest error: {}", .0.escape_debug())]
    GuestError(String),
    /// No instance could be created.
    #[error("cannot instantiate: {}", .0.escape_debug())]
    Instantiate(String),
}

/// A compiled contributor component, ready to be instantiated per call.
#[derive(Clone)]
pub struct ContributorComponent {
    origin: String,
    /// SHA-256 of the component's bytes.
    content: Arc<str>,
    pre: bindings::ContributorPre<GuestState>,
    config: Arc<BTreeMap<String, String>>,
    limits: Limits,
    on_error: OnError,
    imports: Arc<[String]>,
    grants: Grants,
}

/// What a contributor may see beyond its execution and config. Nothing by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Environment variables given to the guest (names and values).
    pub env: Vec<(String, String)>,
    /// Whether the agent's cwd is preopened, read-only, at its own path.
    pub cwd_read: bool,
}

impl fmt::Debug for ContributorComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContributorComponent")
            .field("origin", &self.origin)
            .field("limits", &self.limits)
            .field("on_error", &self.on_error)
            .field("grants", &self.grants)
            .finish_non_exhaustive()
    }
}

impl ContributorComponent {
    /// Where the component came from (a path, or a caller's label).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The names of the interfaces the component imports.
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// The limits its calls run under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The same component with `config` served by the WIT `config.get`.
    pub fn with_config(mut self, config: BTreeMap<String, String>) -> Self {
        self.config = Arc::new(config);
        self
    }

    /// The same component under `limits`.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The same component with `grants`.
    pub fn with_grants(mut self, grants: Grants) -> Self {
        self.grants = grants;
        self
    }

    /// Names everything `declare` can depend on: the component's bytes, its
    /// config, its env grants and its limits (its cwd grant is not in effect
    /// during `declare`, which has no execution).
    pub(crate) fn declaration_key(&self) -> String {
        let inputs = format!(
            "{}\n{:?}\n{:?}\n{:?}",
            self.content, self.config, self.grants.env, self.limits
        );
        Sha256::digest(inputs)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// What a failure of this contributor does to an execution.
    pub fn on_error(&self) -> OnError {
        self.on_error
    }

    /// The same component with failure policy `on_error`.
    pub fn with_on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }
}

/// Where a component's bytes come from.
pub(crate) enum Source<'a> {
    /// A file, which the cache may map without reading.
    File(&'a std::path::Path),
    /// Bytes in memory.
    Bytes(&'a [u8]),
}

/// Why a component could not be loaded.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot load contributor component {origin}: {reason}")]
pub struct LoadError {
    /// The file or label.
    pub origin: String,
    /// What was wrong.
    pub reason: String,
}

/// Per-instance host state: an empty WASI context and the guest's config.
pub(crate) struct GuestState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: GuestLimiter,
    config: Arc<BTreeMap<String, String>>,
    /// Epoch ticks the guest may still run for (see `arm`).
    ticks_left: u64,
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl bindings::dsh::env::config::Host for GuestState {
    fn get(&mut self, key: String) -> Option<String> {
        self.config.get(&key).cloned()
    }
}

impl types::Host for GuestState {}

/// Caps memory and table growth, remembering which cap was hit.
struct GuestLimiter {
    memory_bytes: usize,
    table_elements: usize,
    hit: Option<String>,
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            let message = format!(
                "memory limit of {} bytes exceeded (wanted {desired})",
                self.memory_bytes
            );
            self.hit = Some(message.clone());
            return Err(wasmtime::format_err!(message));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            let message = format!(
                "table limit of {} elements exceeded (wanted {desired})",
                self.table_elements
            );
            self.hit = Some(message.clone());
            return Err(wasmtime::format_err!(message));
        }
        Ok(true)
    }

    // Enough for every real guest seen (componentize-py: 14 core instances).
    fn instances(&self) -> usize {
        64
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        16
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

    /// Compiles `source` (or maps it from the cache) and checks that it
    /// targets the contributor world.
    pub(crate) fn load(
        &self,
        origin: &str,
        source: Source<'_>,
        cache: &ArtifactCache,
    ) -> Result<ContributorComponent, LoadError> {
        let fail = |reason: String| LoadError {
            origin: origin.to_string(),
            reason,
        };
        let compile = |bytes: &[u8]| {
            if !is_component(bytes) {
                return Err(not_a_component(bytes).to_string());
            }
            Component::new(&self.engine, bytes).map_err(|e| format!("{e:#}"))
        };
        let (component, content) = match source {
            Source::File(path) => cache.load_file(&self.engine, path, compile),
            Source::Bytes(bytes) => cache.load_bytes(&self.engine, bytes, compile),
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
            limits: Limits::default(),
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

    /// Runs `resolve` for `execution` in a fresh instance (`prepared`, when
    /// one was made ahead of the call, else one made now); `name` labels its
    /// logs.
    pub(crate) async fn resolve(
        &self,
        component: &ContributorComponent,
        name: &str,
        execution: &ToolExecution,
        prepared: Option<Prepared>,
    ) -> Result<Vec<(String, String)>, GuestFailure> {
        let wit_execution = to_wit(execution);
        let resolve = async |guest: &bindings::Contributor, store: &mut Store<GuestState>| {
            guest.call_resolve(store, &wit_execution).await
        };
        let result = match prepared {
            Some(prepared) => self.run(component, name, prepared, resolve).await,
            None => self.call(component, name, Some(execution), resolve).await,
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
        match tokio::time::timeout(limits.deadline + engine::EPOCH_TICK * 2, instantiate).await {
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
        // The epoch stops running wasm; this timeout also stops a guest that
        // waits in a host call (e.g. a WASI sleep).
        let outcome = tokio::time::timeout(limits.deadline + engine::EPOCH_TICK * 2, run).await;
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
        let outcome = tokio::time::timeout(limits.deadline + engine::EPOCH_TICK * 2, run).await;
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

/// Sets a new store's fuel budget and deadline.
///
/// The guest yields to the async executor at every epoch tick, so a busy
/// guest never holds a worker thread for longer than a tick, and traps once
/// its deadline's ticks are spent.
fn arm(store: &mut Store<GuestState>, limits: &Limits) {
    // Fuel is enabled engine-wide, so setting it cannot fail.
    store.set_fuel(limits.fuel.unwrap_or(u64::MAX)).ok();
    arm_deadline(store, limits);
    store.epoch_deadline_callback(|mut store| {
        let left = &mut store.data_mut().ticks_left;
        if *left == 0 {
            return Ok(UpdateDeadline::Interrupt);
        }
        *left -= 1;
        Ok(UpdateDeadline::Yield(1))
    });
}

/// Starts the deadline's clock: it ends [`engine::deadline_ticks`] ticks from now.
fn arm_deadline(store: &mut Store<GuestState>, limits: &Limits) {
    store.data_mut().ticks_left = engine::deadline_ticks(limits.deadline).saturating_sub(1);
    store.set_epoch_deadline(1);
}

/// Maps a wasmtime error to the failure a user can act on.
fn classify(
    err: wasmtime::Error,
    limit_hit: Option<String>,
    limits: &Limits,
    instantiating: bool,
) -> GuestFailure {
    if let Some(message) = limit_hit {
        return GuestFailure::ResourceLimit(message);
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => GuestFailure::Deadline(limits.deadline),
        Some(Trap::StackOverflow) => GuestFailure::StackOverflow,
        Some(Trap::OutOfFuel) => GuestFailure::Fuel(limits.fuel.unwrap_or(u64::MAX)),
        Some(trap) => GuestFailure::Trap(trap.to_string()),
        None if instantiating => GuestFailure::Instantiate(bounded(&format!("{err:#}"), 1024)),
        None => GuestFailure::Trap(bounded(&format!("{err:#}"), 1024)),
    }
}

/// Whether `bytes` carries the component-model layer in its wasm header.
fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [0x01, 0x00]
}

/// Names what non-component bytes are, for the load error.
fn not_a_component(bytes: &[u8]) -> &'static str {
    if bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [0x01, 0, 0, 0] {
        "this is a core wasm module, not a component (componentize it for dsh:env/contributor)"
    } else {
        "not a WebAssembly component (bad magic header)"
    }
}

/// A WASI context with nothing in it but the grants: no preopens, env, args
/// or network; stdout and stderr captured.
fn wasi_context(
    grants: &Grants,
    execution: Option<&ToolExecution>,
    stdout: &GuestOutput,
    stderr: &GuestOutput,
) -> WasiCtx {
    let mut builder = WasiCtx::builder();
    builder
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    for (name, value) in &grants.env {
        builder.env(name, value);
    }
    let agent_cwd = execution
        .and_then(|e| e.agent.as_ref())
        .map(|a| a.cwd.as_str());
    if let (true, Some(cwd)) = (grants.cwd_read, agent_cwd) {
        // A cwd that cannot be opened is simply not granted: the guest sees no directory.
        if let Err(err) = builder.preopened_dir(cwd, cwd, FsPerms::ReadOnly) {
            tracing::debug!("cwd {cwd} not preopened: {err}");
        }
    }
    builder.build()
}

fn to_wit(execution: &ToolExecution) -> bindings::Execution {
    bindings::Execution {
        call_id: execution.call_id.clone(),
        root_call_id: execution.root_call_id.clone(),
        tool: execution.tool.clone(),
        mode: match execution.mode {
            execution::Mode::Foreground => types::Mode::Foreground,
            execution::Mode::Background => types::Mode::Background,
        },
        agent: execution.agent.as_ref().map(|agent| types::Agent {
            session_id: agent.session_id.clone(),
            cwd: agent.cwd.clone(),
            parent_session_id: agent.parent_session_id.clone(),
            depth: agent.depth,
        }),
    }
}

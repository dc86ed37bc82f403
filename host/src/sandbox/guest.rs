//! What one guest instance sees and is held to: its host state (an empty
//! WASI context plus the grants, and its config), its limiter, and its
//! fuel and deadline.

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};

use super::bindings::{self, dsh::env::types};
use super::component::Grants;
use crate::engine;
use crate::execution::{self, ToolExecution};
use crate::guest_output::GuestOutput;
use crate::limits::Limits;

/// Per-instance host state: an empty WASI context and the guest's config.
pub(crate) struct GuestState {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limiter: GuestLimiter,
    pub(super) config: Arc<BTreeMap<String, String>>,
    /// Epoch ticks the guest may still run for (see `arm`).
    pub(super) ticks_left: u64,
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
pub(super) struct GuestLimiter {
    pub(super) memory_bytes: usize,
    pub(super) table_elements: usize,
    pub(super) hit: Option<String>,
}

impl GuestLimiter {
    /// Allows growth to `desired` up to `limit`; past it, remembers and
    /// returns the named failure (which traps the guest).
    fn allow(
        &mut self,
        what: &str,
        limit: (usize, &str),
        desired: usize,
    ) -> wasmtime::Result<bool> {
        let (limit, unit) = limit;
        if desired > limit {
            let message = format!("{what} limit of {limit} {unit} exceeded (wanted {desired})");
            self.hit = Some(message.clone());
            return Err(wasmtime::format_err!(message));
        }
        Ok(true)
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.allow("memory", (self.memory_bytes, "bytes"), desired)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.allow("table", (self.table_elements, "elements"), desired)
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

/// Sets a new store's fuel budget and deadline.
///
/// The guest yields to the async executor at every epoch tick, so a busy
/// guest never holds a worker thread for longer than a tick, and traps once
/// its deadline's ticks are spent.
pub(super) fn arm(store: &mut Store<GuestState>, limits: &Limits) {
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

/// The host-side bound on a call: the deadline plus two ticks, so that the
/// epoch names a guest that runs too long, and this stops one that waits in
/// a host call (e.g. a WASI sleep).
pub(super) fn host_deadline(limits: &Limits) -> std::time::Duration {
    limits.deadline + engine::EPOCH_TICK * 2
}

/// Starts the deadline's clock: it ends [`engine::deadline_ticks`] ticks from now.
pub(super) fn arm_deadline(store: &mut Store<GuestState>, limits: &Limits) {
    store.data_mut().ticks_left = engine::deadline_ticks(limits.deadline).saturating_sub(1);
    store.set_epoch_deadline(1);
}

/// A WASI context with nothing in it but the grants: no preopens, env, args
/// or network; stdout and stderr captured.
pub(super) fn wasi_context(
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

pub(super) fn to_wit(execution: &ToolExecution) -> bindings::Execution {
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

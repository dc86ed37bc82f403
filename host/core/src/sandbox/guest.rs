//! What one guest instance sees and is held to: its host state (an empty
//! WASI context plus the grants, and its config), its limiter, and its
//! fuel and deadline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};

use super::files::{FileHost, OpenFiles};
use super::trace::{Sought, SoughtHost};
use crate::guest_output::GuestOutput;
use crate::keys::is_managed_name;
use crate::limits::{Limits, TABLE_ELEMENT_BYTES};
use crate::spec::Grants;
use crate::{epoch, limits};

/// Per-instance host state: an empty WASI context and the guest's config.
pub(crate) struct GuestState {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    /// Descriptors opened through the cwd grant, counted process-wide
    /// (`None` without the grant: such a guest can open nothing).
    pub(super) files: Option<OpenFiles>,
    pub(super) limiter: GuestLimiter,
    pub(super) config: Arc<BTreeMap<String, String>>,
    /// Epoch ticks after which the call traps (see `arm`).
    pub(super) deadline_ticks: u64,
    /// Epoch ticks its code has met since the call's deadline was armed,
    /// as the engine reports them to the deadline callback (ticks that pass
    /// while it waits in one host call count as one).
    pub(super) ticks_met: u64,
    /// What it asked for and found empty (see [`super::trace`]).
    pub(super) sought: Sought,
}

impl FileHost for GuestState {
    fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    fn files(&mut self) -> Option<&mut OpenFiles> {
        self.files.as_mut()
    }
}

impl SoughtHost for GuestState {
    fn sought(&mut self) -> &mut Sought {
        &mut self.sought
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl GuestState {
    /// The configured value for `key`: what every version's `config.get` returns.
    pub(super) fn config_value(&self, key: &str) -> Option<String> {
        self.config.get(key).cloned()
    }
}

/// Guest memory that all live instances of a sandbox hold together, against
/// one budget, so that many instances at their own cap cannot add up to an
/// unbounded resident set.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
        }
    }

    /// Takes `bytes` from the budget, if that many are left.
    fn charge(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    /// Gives `bytes` back.
    fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes charged now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// Caps one instance's memories and tables in total (wasmtime asks about
/// each memory on its own, without saying which), charging every growth
/// to the shared [`MemoryBudget`] too, and remembers which cap was hit.
pub(super) struct GuestLimiter {
    memory_bytes: usize,
    table_elements: usize,
    /// Bytes of memory and table storage granted so far, initial sizes
    /// included; never lowered by a failed growth.
    used_bytes: usize,
    used_elements: usize,
    budget: Arc<MemoryBudget>,
    pub(super) hit: Option<String>,
}

impl GuestLimiter {
    /// A limiter for `limits`, charging `budget`.
    pub(super) fn new(limits: &Limits, budget: Arc<MemoryBudget>) -> Self {
        GuestLimiter {
            memory_bytes: limits.memory_bytes,
            table_elements: limits.table_elements,
            used_bytes: 0,
            used_elements: 0,
            budget,
            hit: None,
        }
    }

    /// Bytes this instance holds (what it charges the budget).
    pub(super) fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    /// Remembers `message` as the cap that was hit, and fails the growth
    /// with it (which traps the guest).
    fn refuse(&mut self, message: String) -> wasmtime::Result<bool> {
        self.hit = Some(message.clone());
        Err(wasmtime::format_err!(message))
    }

    /// Grants `bytes` more, if the instance's cap and the shared budget allow.
    fn grow_bytes(&mut self, what: &str, bytes: usize) -> wasmtime::Result<bool> {
        let total = self.used_bytes.saturating_add(bytes);
        if total > self.memory_bytes {
            return self.refuse(format!(
                "memory limit of {} bytes exceeded (wanted {total} across the instance's \
                 memories and tables, by {what} growth)",
                self.memory_bytes
            ));
        }
        if !self.budget.charge(bytes) {
            return self.refuse(format!(
                "host memory budget of {} bytes for all live instances exhausted \
                 ({what} growth of {bytes} bytes refused)",
                self.budget.limit
            ));
        }
        self.used_bytes = total;
        Ok(true)
    }
}

impl Drop for GuestLimiter {
    fn drop(&mut self) {
        self.budget.release(self.used_bytes);
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow_bytes("memory", desired.saturating_sub(current))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let added = desired.saturating_sub(current);
        let elements = self.used_elements.saturating_add(added);
        if elements > self.table_elements {
            return self.refuse(format!(
                "table limit of {} elements exceeded (wanted {elements} across the \
                 instance's tables)",
                self.table_elements
            ));
        }
        let granted = self.grow_bytes("table", added.saturating_mul(TABLE_ELEMENT_BYTES))?;
        self.used_elements = elements;
        Ok(granted)
    }

    fn instances(&self) -> usize {
        limits::MAX_CORE_INSTANCES
    }

    fn tables(&self) -> usize {
        limits::MAX_TABLES
    }

    fn memories(&self) -> usize {
        limits::MAX_MEMORIES
    }
}

/// Sets a new store's fuel budget and deadline.
///
/// The guest yields at every epoch tick from [`epoch::FIRST_YIELD_TICK`]
/// on and traps once its deadline's ticks are spent. [`within_host_deadline`]
/// resumes the first yield within the same poll, so a busy guest holds its
/// worker thread until its third tick (10-15 ms), then hands it back every
/// tick, and a call that meets two ticks or fewer never goes back to the
/// executor's queue. The callback runs at every tick the guest meets, so
/// the call's trace can say how many it met (`CallTrace::epoch_ticks`).
pub(super) fn arm(store: &mut Store<GuestState>, limits: &Limits) {
    // Fuel is enabled engine-wide, so setting it cannot fail.
    store.set_fuel(limits.fuel.unwrap_or(u64::MAX)).ok();
    arm_deadline(store, limits);
    store.epoch_deadline_callback(|mut store| {
        let state = store.data_mut();
        state.ticks_met += 1;
        Ok(if state.ticks_met >= state.deadline_ticks {
            UpdateDeadline::Interrupt
        } else if state.ticks_met < epoch::FIRST_YIELD_TICK {
            UpdateDeadline::Continue(1)
        } else {
            UpdateDeadline::Yield(1)
        })
    });
}

/// The host-side bound on a call: the deadline plus two ticks, so that the
/// epoch names a guest that runs too long, and this stops one that waits in
/// a host call (e.g. a WASI sleep).
pub(super) fn host_deadline(limits: &Limits) -> std::time::Duration {
    limits.deadline + epoch::EPOCH_TICK * 2
}

/// `future` under [`host_deadline`], as `tokio::time::timeout` would run
/// it, except that the timer is armed only when the first poll does not
/// finish: registering a timer with a runtime whose driver sleeps without
/// one wakes a runtime thread, and on 2 cores that wake cost the caller more
/// than a prepared guest's whole call (see BENCHMARKS.md). The deadline
/// still counts from the start. A guest's first yield ends the first poll,
/// and the second one, here, resumes it at once: only its next tick
/// reaches the executor. The epoch advances for as long as it
/// runs (`epoch::guest_running`), since `future` runs guest code.
pub(super) async fn within_host_deadline<F: Future>(
    limits: &Limits,
    future: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    let deadline = tokio::time::Instant::now() + host_deadline(limits);
    let _running = epoch::guest_running();
    let mut future = std::pin::pin!(future);
    let first = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
    match first {
        Poll::Ready(output) => Ok(output),
        Poll::Pending => tokio::time::timeout_at(deadline, future).await,
    }
}

/// Starts the deadline's clock: it ends [`epoch::deadline_ticks`] ticks from
/// now, and the ticks met are counted from now.
pub(super) fn arm_deadline(store: &mut Store<GuestState>, limits: &Limits) {
    let state = store.data_mut();
    state.deadline_ticks = epoch::deadline_ticks(limits.deadline);
    state.ticks_met = 0;
    store.set_epoch_deadline(1);
}

/// A WASI context with nothing in it but the grants (the cwd grant as
/// `cwd`, the agent's): no other preopens, env, args or network; stdout
/// and stderr captured.
pub(super) fn wasi_context(
    grants: &Grants,
    cwd: Option<&str>,
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
    // Registration refuses a DSH_* grant; should one get here by another
    // way, the host's stale value still stays out.
    for (name, value) in grants.env.iter().filter(|(name, _)| !is_managed_name(name)) {
        builder.env(name, value);
    }
    if let (true, Some(cwd)) = (grants.cwd_read, cwd) {
        // Its calls run whole on a thread of the guest I/O runtime's
        // blocking pool (`GuestIo`): its file operations run inline there.
        builder.allow_blocking_current_thread(true);
        // A cwd that cannot be opened is simply not granted: the guest sees no directory.
        if let Err(err) = builder.preopened_dir(cwd, cwd, FsPerms::ReadOnly) {
            tracing::debug!("cwd {cwd} not preopened: {err}");
        }
    }
    builder.build()
}

//! Engine policy, in one place: how guests are compiled, how instances are
//! allocated, and how deadlines are enforced.

use std::time::Duration;

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; deadlines are accurate to about this much.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Instances that may be alive at once (pool slots, and the concurrency cap).
pub const MAX_LIVE_INSTANCES: u32 = 128;

/// Largest linear memory any guest may have; per-contributor limits sit below it.
pub const MAX_MEMORY_BYTES: usize = 512 << 20;

/// Largest table any guest may have (pool slot size); per-contributor limits
/// sit at or below it, so the limiter, not the pool, names an overrun.
pub const MAX_TABLE_ELEMENTS: usize = 20_000;

/// Wasm stack per call; deeper recursion ends as a stack-overflow trap. It is
/// an engine setting, so it is the same for every contributor.
pub const MAX_WASM_STACK: usize = 512 << 10;

/// Bytes of each freed linear memory and table kept resident and reset in
/// place, when the kernel can tell which pages were written: at most this much
/// RSS per pool slot that has been used (a Rust guest writes a few hundred KiB;
/// JS and Python guests gained nothing from more).
const KEEP_RESIDENT_BYTES: usize = 1 << 20;

/// Builds the engine: Cranelift, component model, epoch interruption, and the
/// pooling allocator, falling back to on-demand allocation where the pool's
/// address space cannot be reserved.
pub fn build_engine() -> Result<Engine, wasmtime::Error> {
    let mut config = base_config();
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(MAX_LIVE_INSTANCES)
        // A componentize-py guest instantiates 14 core modules, JS 3, Rust 3,
        // C 2. Capping each component at 32 (a bigger one fails to load) keeps
        // the total enough for every live instance.
        .max_core_instances_per_component(32)
        .total_core_instances(MAX_LIVE_INSTANCES * 32)
        .total_memories(MAX_LIVE_INSTANCES * 2)
        .total_tables(MAX_LIVE_INSTANCES * 8)
        .total_stacks(MAX_LIVE_INSTANCES)
        .max_memory_size(MAX_MEMORY_BYTES)
        .table_elements(MAX_TABLE_ELEMENTS);
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        // Reset a freed slot by copying back only the pages the guest wrote
        // (found with the PAGEMAP_SCAN ioctl, Linux 6.7+) instead of
        // madvise(DONTNEED) over it all: no syscall and no cross-CPU TLB
        // shootdown per memory and table, and no page faults when the next
        // instance touches the same pages. This halves a Rust guest's call
        // (BENCHMARKS.md). Written pages past the bound are decommitted as
        // before. Without the ioctl, keep-resident would `memset` the whole
        // bound on every free, so it stays off.
        pool.pagemap_scan(Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
            .table_keep_resident(KEEP_RESIDENT_BYTES);
    }
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = match Engine::new(&config) {
        Ok(engine) => engine,
        Err(err) => {
            tracing::warn!("pooling allocator unavailable ({err}); using on-demand allocation");
            Engine::new(&base_config())?
        }
    };
    start_epoch_ticker(&engine);
    Ok(engine)
}

/// The engine configuration minus the instance allocator: what the compile
/// helper builds its engine from, so its artifacts fit this engine.
pub(crate) fn base_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // Fuel is metered always (no measurable cost here); a store without a
    // budget gets u64::MAX.
    config.consume_fuel(true);
    config.max_wasm_stack(MAX_WASM_STACK);
    config
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until the engine is dropped.
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("dsh-env-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        });
    if let Err(err) = spawned {
        // Without a ticker, the host-side timeout still bounds every call.
        tracing::warn!("cannot start the epoch ticker: {err}");
    }
}

/// Epoch ticks that cover `deadline`, rounded up, plus one for the partial tick.
pub fn deadline_ticks(deadline: Duration) -> u64 {
    let tick = EPOCH_TICK.as_nanos();
    (deadline.as_nanos().div_ceil(tick) as u64).saturating_add(1)
}

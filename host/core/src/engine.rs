//! Engine policy, in one place: how guests are compiled, how instances are
//! allocated (within the ceilings of [`crate::limits`]), how deadlines are
//! enforced, and the tag that ties a compiled artifact to this engine.

use std::hash::{Hash, Hasher};

use sha2::{Digest, Sha256};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Strategy,
};

use crate::limits::{
    MAX_CORE_INSTANCES, MAX_LIVE_INSTANCES, MAX_MEMORIES, MAX_MEMORY_BYTES, MAX_TABLE_ELEMENTS,
    MAX_TABLES, MAX_WASM_STACK,
};
use dsh_env_support::digest::hex;

/// The wasmtime release this host runs guests on (the workspace pins it
/// exactly, `=48.0.8`; a test checks this against Cargo.lock).
pub const WASMTIME_VERSION: &str = "48.0.8";

/// How the engine allocates guest instances.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Allocator {
    /// From the pre-reserved pool: fast, and bounded by its slots.
    Pooling,
    /// On demand, because the pool could not be reserved (`reason` says
    /// why, e.g. a low `ulimit -v`). Calls still work, about twice as slow.
    OnDemand {
        /// Why the pool could not be set up.
        reason: String,
    },
}

/// Why the [`crate::SharedEngine`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The WebAssembly engine or its linker could not be set up.
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
    /// The threads that run guests' file I/O could not be started.
    #[error("cannot start the guest I/O threads: {0}")]
    Threads(#[source] std::io::Error),
}

/// Which compiler a component missing from the cache is compiled with at
/// load. Cranelift's code runs fastest, but compiles several times slower
/// than Winch, wasmtime's baseline compiler, whose code is good enough for
/// short-lived commands (the figures: BENCHMARKS.md). An artifact of either
/// kind found in the cache is used as it is, the optimized one first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tiering {
    /// Compile with Cranelift at load: the slowest first load, the fastest
    /// calls. For a step that installs or reviews a component.
    #[default]
    Optimized,
    /// Compile with Winch at load, then with Cranelift on a background
    /// thread (one compile at a time, at low CPU priority), and switch to
    /// the optimized code when it is ready. For a long-lived host.
    Background,
    /// Compile with Winch at load, and nothing more. For a short-lived
    /// process, which would only abandon a background compile at its exit.
    Baseline,
}

/// Bytes of each freed linear memory and table kept resident and reset in
/// place, when the kernel can tell which pages were written: at most this much
/// RSS per pool slot that has been used. A Rust guest writes a few hundred
/// KiB; at this bound the Python and JS examples' calls take no page faults,
/// and at 256 KiB they take tens again (BENCHMARKS.md).
const KEEP_RESIDENT_BYTES: usize = 1 << 20;

/// Builds the engine: Cranelift, component model, epoch interruption, and the
/// pooling allocator, falling back to on-demand allocation (and saying why)
/// where the pool's address space cannot be reserved.
pub fn build_engine() -> Result<(Engine, Allocator), wasmtime::Error> {
    let mut config = base_config();
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(MAX_LIVE_INSTANCES)
        // Per-component caps are checked when a component loads, so a
        // component with many memories is refused by name instead of taking
        // the pool's slots from everyone else; the totals give every live
        // instance its full share, so no instance can exhaust the pool.
        .max_core_instances_per_component(MAX_CORE_INSTANCES as u32)
        .total_core_instances(MAX_LIVE_INSTANCES * MAX_CORE_INSTANCES as u32)
        .max_memories_per_component(MAX_MEMORIES as u32)
        .total_memories(MAX_LIVE_INSTANCES * MAX_MEMORIES as u32)
        .max_tables_per_component(MAX_TABLES as u32)
        .total_tables(MAX_LIVE_INSTANCES * MAX_TABLES as u32)
        .total_stacks(MAX_LIVE_INSTANCES)
        .max_memory_size(MAX_MEMORY_BYTES)
        .table_elements(MAX_TABLE_ELEMENTS)
        // A freed slot is reused, least recently used first, before a slot
        // never used is touched: the slots that ever hold resident pages are
        // as many as the instances alive at once, not the whole pool: less
        // RSS after a burst, at the same latency (BENCHMARKS.md).
        .max_unused_warm_slots(0);
    if resets_in_place() {
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
    let (engine, allocator) = match Engine::new(&config) {
        Ok(engine) => (engine, Allocator::Pooling),
        Err(err) => {
            let reason = format!("{err:#}");
            tracing::warn!(
                "the instance pool cannot be reserved ({reason}); allocating instances on \
                 demand, which is slower"
            );
            (Engine::new(&base_config())?, Allocator::OnDemand { reason })
        }
    };
    start_ticking(&engine)?;
    Ok((engine, allocator))
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

/// The baseline tier's engine configuration: [`base_config`] compiled by
/// Winch, which supports the same fuel and epoch checks.
pub(crate) fn baseline_config() -> Config {
    let mut config = base_config();
    config.strategy(Strategy::Winch);
    config
}

/// Builds the baseline tier's engine: Winch, allocating on demand (a second
/// pool would reserve its address space again, for instances that live only
/// until their component's optimized code is ready), whose epoch the same
/// ticker advances, since each engine counts its own epochs.
pub(crate) fn build_baseline_engine() -> Result<Engine, wasmtime::Error> {
    let engine = Engine::new(&baseline_config())?;
    start_ticking(&engine)?;
    Ok(engine)
}

/// Whether the linked wasmtime carries the fixed page-map reset
/// (`vendor/wasmtime`, which this workspace builds through
/// `[patch.crates-io]`), decided at build time; `false` under wasmtime as
/// released, whose reset can leave a swapped-out written page to the slot's
/// next instance, so that a crate built outside this workspace never uses it.
pub const PAGEMAP_RESET: bool = cfg!(dsh_env_fixed_pagemap);

/// Whether a freed instance's memories and tables are reset in place, by
/// finding the pages it wrote (the `PAGEMAP_SCAN` ioctl, Linux 6.7+): the
/// next instance in its pool slot then takes no page faults for them. Only
/// with the fixed reset ([`PAGEMAP_RESET`]); otherwise a freed slot is
/// unmapped (`madvise(DONTNEED)`), which is safe under any wasmtime.
pub fn resets_in_place() -> bool {
    PAGEMAP_RESET && crate::os::pagemap_scan_available()
}

/// The layout of the artifact cache's entries; part of the engine tag, so
/// a new layout orphans the old artifacts instead of misreading them.
const CACHE_LAYOUT: &str = "v3";

/// The engine's part of a cache entry's name: this crate's version, the
/// cache layout, and wasmtime's compatibility hash of the engine
/// configuration, through SHA-256 (std's `DefaultHasher` may change with the
/// toolchain, which would silently orphan every artifact). The compile
/// helper checks its engine against it, the cache files artifacts under it.
pub(crate) fn engine_tag(engine: &Engine) -> String {
    let mut hasher = StableHasher(Sha256::new());
    env!("CARGO_PKG_VERSION").hash(&mut hasher);
    CACHE_LAYOUT.hash(&mut hasher);
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex(&hasher.0.finalize()[..8])
}

/// Feeds what a [`Hash`] implementation writes into SHA-256.
struct StableHasher(Sha256);

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// Unused: the tag is read from the whole digest.
    fn finish(&self) -> u64 {
        0
    }
}

/// [`crate::epoch::start_ticking`], failing the engine's construction when
/// the ticker cannot start: nothing would stop a guest that spins.
fn start_ticking(engine: &Engine) -> Result<(), wasmtime::Error> {
    crate::epoch::start_ticking(engine).map_err(|err| {
        wasmtime::format_err!(
            "cannot start the epoch ticker, which bounds every guest's time: {err}"
        )
    })
}

#[cfg(test)]
mod version_tests {
    /// The stated wasmtime version is the one Cargo.lock resolves.
    #[test]
    fn the_stated_wasmtime_version_is_the_locked_one() {
        let lock = include_str!("../../../Cargo.lock");
        let entry = format!(
            "name = \"wasmtime\"\nversion = \"{}\"",
            super::WASMTIME_VERSION
        );
        assert!(
            lock.contains(&entry),
            "Cargo.lock does not lock wasmtime {}",
            super::WASMTIME_VERSION
        );
    }
}

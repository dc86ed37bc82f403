//! Resource limits: the engine's ceilings, which no contributor's limits
//! may pass, per-contributor limits with defaults that fit real guests (JS
//! and Python contributors need tens of MiB and about a millisecond), and
//! the host-wide budgets.

use std::fmt;
use std::time::Duration;

/// Instances that may be alive at once (pool slots, and the concurrency cap).
pub const MAX_LIVE_INSTANCES: u32 = 128;

/// Largest linear memory any guest may have; per-contributor limits sit below it.
pub const MAX_MEMORY_BYTES: usize = 512 << 20;

/// Largest table any guest may have (pool slot size); per-contributor limits
/// sit at or below it, so the limiter, not the pool, names an overrun.
pub const MAX_TABLE_ELEMENTS: usize = 20_000;

/// Core instances one component may create (a componentize-py guest
/// creates 14, JS 3, Rust 3, C 2); a bigger component fails to load.
pub const MAX_CORE_INSTANCES: usize = 32;

/// Linear memories one component may define, in all its core modules; a
/// bigger component fails to load, naming this limit. Every guest seen
/// (Rust, C, JS, Python) defines one: its core modules share it.
pub const MAX_MEMORIES: usize = 2;

/// Tables one component may define, in all its core modules (the
/// component-model shims add a few to the guest's own).
pub const MAX_TABLES: usize = 16;

/// Wasm stack per call; deeper recursion ends as a stack-overflow trap. It is
/// an engine setting, so it is the same for every contributor.
pub const MAX_WASM_STACK: usize = 512 << 10;

/// Which call of a contributor failed, or which one a limit applies to.
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

/// Caps applied to one contributor's `declare` and each `resolve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock deadline for one `declare` or `resolve` call.
    pub deadline: Duration,
    /// Linear memory and table storage one instance may hold in all, in
    /// bytes: every memory of every core instance, initial sizes included,
    /// plus [`TABLE_ELEMENT_BYTES`] per table element.
    pub memory_bytes: usize,
    /// Table elements one instance may hold across all its tables (each
    /// table at most [`MAX_TABLE_ELEMENTS`], the pool's slot size).
    pub table_elements: usize,
    /// Keys one declaration may hold.
    pub max_keys: usize,
    /// Pairs one `resolve` may return.
    pub max_pairs: usize,
    /// Bytes one value may hold.
    pub max_value_bytes: usize,
    /// Bytes all keys and values of one `resolve` may hold together.
    pub max_output_bytes: usize,
    /// Bytes of an `err(...)` message kept; the rest is cut.
    pub max_error_bytes: usize,
    /// Instructions (wasmtime fuel) one call may use; `None` for no budget.
    pub fuel: Option<u64>,
    /// Bytes of guest stdout and of stderr kept for the log, per call.
    pub max_log_bytes: usize,
    /// Host handles (WASI streams, files, directories, pollables) one
    /// instance may hold at once.
    pub max_handles: usize,
    /// Wall-clock time compiling the component may take (the compile helper
    /// is killed when it is up).
    pub compile_timeout: Duration,
    /// CPU time compiling may use, all compiler threads together (RLIMIT_CPU
    /// in the helper, in whole seconds, rounded up).
    pub compile_cpu: Duration,
    /// Address space the compile helper may map, in bytes (RLIMIT_AS).
    pub compile_memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(2),
            memory_bytes: 128 << 20,
            table_elements: MAX_TABLE_ELEMENTS,
            max_keys: 256,
            max_pairs: 256,
            max_value_bytes: 8 << 10,
            max_output_bytes: 64 << 10,
            max_error_bytes: 1 << 10,
            fuel: None,
            max_log_bytes: 4 << 10,
            max_handles: 64,
            // Measured here (2 cores, loaded): the JS (12 MB) and Python
            // (18 MB) examples took 37-48 s of CPU, 430-510 MiB of address
            // space, and 50-132 s of wall time.
            compile_timeout: Duration::from_secs(300),
            compile_cpu: Duration::from_secs(120),
            compile_memory_bytes: 2 << 30,
        }
    }
}

/// What one table element is charged against [`Limits::memory_bytes`]: a
/// table slot holds one pointer per element.
pub const TABLE_ELEMENT_BYTES: usize = 8;

impl Limits {
    /// Bytes the host may copy out of a guest in one host call or one
    /// result of `phase` (wasmtime's hostcall fuel): the largest thing these
    /// caps let a guest hand over then (a full declaration, or a full
    /// output, an error message, a log write), at least
    /// [`MIN_HOSTCALL_BYTES`]. Past it the lift fails before the host
    /// allocates, so aliased strings (many list entries pointing at the same
    /// guest bytes) cannot make the host copy more.
    pub fn hostcall_bytes(&self, phase: Phase) -> usize {
        // A lifted `(String, String)` or key declaration costs its two
        // strings' bytes plus the host type's size.
        const PAIR: usize = std::mem::size_of::<(String, String)>();
        const MAX_KEY_BYTES: usize = 128;
        let largest = match phase {
            Phase::Declare => MAX_NAME_BYTES.saturating_add(
                (self.max_keys).saturating_mul(PAIR + MAX_KEY_BYTES + MAX_DESCRIPTION_BYTES),
            ),
            Phase::Resolve => (self.max_output_bytes)
                .saturating_add(self.max_pairs.saturating_mul(PAIR))
                .max(self.max_error_bytes),
        };
        largest.max(self.max_log_bytes).max(MIN_HOSTCALL_BYTES)
    }
}

/// Bytes a contributor's name may hold.
pub const MAX_NAME_BYTES: usize = 128;

/// Bytes a key's description may hold.
pub const MAX_DESCRIPTION_BYTES: usize = 1024;

/// The smallest per-lift budget: enough for WASI calls of honest guests
/// (Python and JavaScript runtimes write and pass paths in small pieces).
pub const MIN_HOSTCALL_BYTES: usize = 64 << 10;

/// Bounds shared by every instance of one registry, whatever its contributor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLimits {
    /// Linear memory and table storage all live instances may hold together
    /// (finished stores waiting to be dropped count until they are).
    pub memory_budget_bytes: usize,
    /// Guest memory finished stores may keep before a call drops them itself.
    pub retired_bytes: usize,
    /// Files and directories that guests with a cwd grant may hold open at
    /// once, all calls together.
    pub guest_descriptors: usize,
    /// Calls of contributors with a cwd grant that may run at once; they run
    /// on a runtime of their own with this many blocking threads, so a guest
    /// stuck in file I/O cannot starve the caller's runtime.
    pub io_calls: usize,
}

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits {
            memory_budget_bytes: 2 << 30,
            retired_bytes: 32 << 20,
            guest_descriptors: 256,
            io_calls: 4,
        }
    }
}

/// Cuts `message` to at most `max` bytes on a character boundary, marking the cut.
pub(crate) fn bounded(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes cut)", &message[..end], message.len() - end)
}

#[cfg(test)]
mod tests {
    use super::{Limits, MAX_MEMORY_BYTES, MAX_TABLE_ELEMENTS, bounded};

    #[test]
    fn default_caps_fit_inside_the_pool() {
        // Above the pool's slot size the pool, not the limiter, would refuse
        // the growth, and the error would not name the limit.
        let limits = Limits::default();
        assert!(limits.table_elements <= MAX_TABLE_ELEMENTS);
        assert!(limits.memory_bytes <= MAX_MEMORY_BYTES);
    }

    #[test]
    fn bounded_cuts_on_a_char_boundary() {
        assert_eq!(bounded("short", 10), "short");
        assert_eq!(bounded("ééé", 3), "é… (4 bytes cut)");
    }
}

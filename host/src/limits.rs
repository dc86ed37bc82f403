//! Per-contributor resource limits, with defaults that fit real guests
//! (JS and Python contributors need tens of MiB and about a millisecond).

use std::time::Duration;

/// Caps applied to one contributor's `declare` and each `resolve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock deadline for one `declare` or `resolve` call.
    pub deadline: Duration,
    /// Linear memory one instance may grow to, in bytes.
    pub memory_bytes: usize,
    /// Table elements one table may grow to (at most
    /// [`crate::engine::MAX_TABLE_ELEMENTS`], the pool's slot size).
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
            table_elements: crate::engine::MAX_TABLE_ELEMENTS,
            max_keys: 256,
            max_pairs: 256,
            max_value_bytes: 8 << 10,
            max_output_bytes: 64 << 10,
            max_error_bytes: 1 << 10,
            fuel: None,
            max_log_bytes: 4 << 10,
            // Measured here (2 cores, loaded): the JS (12 MB) and Python
            // (18 MB) examples took 37-48 s of CPU, 430-510 MiB of address
            // space, and 50-132 s of wall time.
            compile_timeout: Duration::from_secs(300),
            compile_cpu: Duration::from_secs(120),
            compile_memory_bytes: 2 << 30,
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
    use super::{Limits, bounded};
    use crate::engine;

    #[test]
    fn default_caps_fit_inside_the_pool() {
        // Above the pool's slot size the pool, not the limiter, would refuse
        // the growth, and the error would not name the limit.
        let limits = Limits::default();
        assert!(limits.table_elements <= engine::MAX_TABLE_ELEMENTS);
        assert!(limits.memory_bytes <= engine::MAX_MEMORY_BYTES);
    }

    #[test]
    fn bounded_cuts_on_a_char_boundary() {
        assert_eq!(bounded("short", 10), "short");
        assert_eq!(bounded("ééé", 3), "é… (4 bytes cut)");
    }
}

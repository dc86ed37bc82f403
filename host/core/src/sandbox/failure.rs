//! How a guest call failed: a failure a user can act on.

use std::fmt;
use std::time::Duration;

use wasmtime::Trap;
use wasmtime::component::ResourceTableError;

use crate::limits::{Limits, bounded};
use dsh_env_support::input::escape_controls;

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
    /// Any other trap (a panic, an uncaught exception), with the end of
    /// what the guest wrote to stderr before it: its own account of why.
    #[error("trap: {}{}", escape_controls(.trap), LastWords(.last_words))]
    Trap {
        /// The trap, as wasmtime names it.
        trap: String,
        /// The end of the guest's stderr, control sequences stripped.
        last_words: Option<String>,
    },
    /// `resolve` returned `err(message)`.
    #[error("guest error: {}", escape_controls(.0))]
    GuestError(String),
    /// No instance could be created.
    #[error("cannot instantiate: {}", escape_controls(.0))]
    Instantiate(String),
}

impl GuestFailure {
    /// A trap without last words.
    pub(super) fn trap(trap: String) -> Self {
        GuestFailure::Trap {
            trap,
            last_words: None,
        }
    }

    /// Gives a trap the guest's `last_words`; other failures stay as they are.
    pub(super) fn with_last_words(mut self, words: Option<String>) -> Self {
        if let GuestFailure::Trap { last_words, .. } = &mut self {
            *last_words = words;
        }
        self
    }
}

/// Shows a trap's last words after it, escaped onto the error's one line.
struct LastWords<'a>(&'a Option<String>);

impl fmt::Display for LastWords<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(words) => write!(f, "; the guest's stderr ended: {}", escape_controls(words)),
            None => Ok(()),
        }
    }
}

/// Maps a wasmtime error to the failure a user can act on.
pub(super) fn classify(
    err: wasmtime::Error,
    limit_hit: Option<String>,
    limits: &Limits,
    instantiating: bool,
    hostcall_bytes: usize,
) -> GuestFailure {
    if let Some(message) = limit_hit {
        return GuestFailure::ResourceLimit(message);
    }
    if let Some(message) = host_limit(&err, limits, hostcall_bytes) {
        return GuestFailure::ResourceLimit(message);
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => GuestFailure::Deadline(limits.deadline),
        Some(Trap::StackOverflow) => GuestFailure::StackOverflow,
        Some(Trap::OutOfFuel) => GuestFailure::Fuel(limits.fuel.unwrap_or(u64::MAX)),
        // "trap: wasm trap: …" would say it twice.
        Some(trap) => GuestFailure::trap(
            (trap.to_string())
                .trim_start_matches("wasm trap: ")
                .to_string(),
        ),
        None if instantiating => GuestFailure::Instantiate(bounded(&format!("{err:#}"), 1024)),
        None => GuestFailure::trap(bounded(&format!("{err:#}"), 1024)),
    }
}

/// Names a limit that wasmtime enforced on the host's side of a call: the
/// bytes a guest may hand the host in one lift (its private error type is
/// known only by its message), or the handles one instance may hold.
fn host_limit(err: &wasmtime::Error, limits: &Limits, hostcall_bytes: usize) -> Option<String> {
    if let Some(ResourceTableError::Full) = err.downcast_ref::<ResourceTableError>() {
        return Some(format!(
            "handle limit of {} exceeded (files, streams and other host handles held at once)",
            limits.max_handles
        ));
    }
    let hostcall = err.chain().any(|cause| {
        cause
            .to_string()
            .contains("fuel allocated for hostcalls has been exhausted")
    });
    hostcall.then(|| {
        format!(
            "host-call data limit of {} bytes exceeded (data copied from the guest in one call \
             or result)",
            hostcall_bytes
        )
    })
}

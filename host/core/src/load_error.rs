//! Why a component did not load, as a kind a caller can match on, with the
//! message users see unchanged: "cannot load contributor component
//! <origin>: <reason>".

use std::sync::Arc;

use dsh_env_store::StoreProblem;
use dsh_env_support::input::{ReadProblem, escape_controls};

/// A component that could not be loaded.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "cannot load contributor component {}: {}",
    escape_controls(.origin),
    escape_controls(&.kind.to_string())
)]
pub struct LoadError {
    /// The file or label.
    pub origin: String,
    /// What was wrong.
    #[source]
    pub kind: LoadErrorKind,
}

impl LoadError {
    /// The component `origin` names could not be loaded, for `kind`.
    pub(crate) fn new(origin: &str, kind: LoadErrorKind) -> Self {
        LoadError {
            origin: origin.to_string(),
            kind,
        }
    }
}

/// What kind of problem stopped a component from loading; its text is the
/// reason a [`LoadError`] shows (guest-chosen text in it is not escaped:
/// the [`LoadError`] escapes it). Sources are shared, so errors clone.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LoadErrorKind {
    /// The bytes are not a WebAssembly component (a core module, or not wasm).
    #[error("{0}")]
    NotAComponent(&'static str),
    /// The component targets no contract version this host serves, or more
    /// than one.
    #[error("{0}")]
    UnsupportedContract(String),
    /// Compiling ran out of a compile limit: `limit` is its manifest name
    /// (`compile_timeout_ms`, `compile_cpu_ms`, `compile_memory_mib`), none
    /// for a failure remembered by an older version.
    #[error("{reason}")]
    CompileLimit {
        /// The limit, by its name in `[contributor.limits]`.
        limit: Option<&'static str>,
        /// The sentence naming it and its value.
        reason: String,
    },
    /// The component's file could not be read.
    #[error(transparent)]
    Read(Arc<ReadProblem>),
    /// The component could not be read from the store.
    #[error(transparent)]
    Store(Arc<StoreProblem>),
    /// A compiled artifact could not be opened (from the cache, or just
    /// compiled).
    #[error("{0}")]
    Cache(String),
    /// The component is invalid, does not fit the contributor world, or the
    /// compile helper failed.
    #[error("{0}")]
    Invalid(String),
}

impl LoadErrorKind {
    /// The limit this kind names, by its manifest name.
    pub fn limit(&self) -> Option<&'static str> {
        match self {
            LoadErrorKind::CompileLimit { limit, .. } => *limit,
            _ => None,
        }
    }
}

/// The reason as text, for the deferred openings that keep only text.
impl From<LoadErrorKind> for String {
    fn from(kind: LoadErrorKind) -> Self {
        kind.to_string()
    }
}

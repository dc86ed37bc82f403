//! Why a contributor failed, and why a registration was refused.

use std::fmt;
use std::sync::Arc;

use crate::declaration::{DeclarationError, OutputProblem};
use crate::limits::Phase;
use crate::load_error::LoadError;
use crate::manifest::ManifestError;
use crate::sandbox::GuestFailure;
use crate::signature::SignatureError;
use crate::spec::SpecError;
use dsh_env_support::input::escape_controls;

/// Why a contributor failed, naming it, the phase, and the cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("contributor `{}`{keys} failed in {phase}: {cause}", escape_controls(.contributor))]
pub struct ContributorError {
    /// The contributor (its declared name, or its origin before it declared).
    pub contributor: String,
    /// `declare` or `resolve`.
    pub phase: Phase,
    /// What went wrong.
    pub cause: FailureCause,
    pub(super) keys: KeysNote,
}

/// The root cause of a contributor failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FailureCause {
    /// The guest trapped, overran a limit, or returned `err`.
    #[error(transparent)]
    Guest(#[from] GuestFailure),
    /// The guest's output broke a rule.
    #[error(transparent)]
    Output(#[from] OutputProblem),
}

impl FailureCause {
    /// A stable identifier of the kind of failure, for JSON.
    pub fn rule(&self) -> &'static str {
        match self {
            FailureCause::Guest(GuestFailure::Deadline(_)) => "deadline",
            FailureCause::Guest(GuestFailure::ResourceLimit(_)) => "resource-limit",
            FailureCause::Guest(GuestFailure::StackOverflow) => "stack-overflow",
            FailureCause::Guest(GuestFailure::Fuel(_)) => "fuel",
            FailureCause::Guest(GuestFailure::Trap { .. }) => "trap",
            FailureCause::Guest(GuestFailure::GuestError(_)) => "guest-error",
            FailureCause::Guest(GuestFailure::Instantiate(_)) => "instantiate",
            FailureCause::Output(_) => "output",
        }
    }
}

/// The declared keys, so that a failure names what went missing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct KeysNote(pub(super) String);

impl fmt::Display for KeysNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, " (keys {})", self.0)
        }
    }
}

/// Why a registration was refused. A refused registration changes nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    /// The component could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// `declare` failed.
    #[error(transparent)]
    Contributor(#[from] ContributorError),
    /// The declaration broke a rule.
    #[error(transparent)]
    Declaration(#[from] DeclarationError),
    /// A manifest entry is invalid (shared, so the error stays `Clone`).
    #[error(transparent)]
    Manifest(Arc<ManifestError>),
    /// The component's bytes are not the ones its entry pins.
    #[error(
        "{} changed since it was pinned: its sha256 is {actual}, but its entry pins {pinned}",
        escape_controls(.origin)
    )]
    Changed {
        /// The component.
        origin: String,
        /// The digest pinned.
        pinned: String,
        /// The digest of the bytes found.
        actual: String,
    },
    /// Its signature was refused.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// A manifest's `[trust]` is not the one the registry was built with.
    #[error(
        "manifest {}: its [trust] is not this registry's; build the registry with the \
         manifest's trust (RegistryBuilder::trust)",
        escape_controls(.manifest)
    )]
    TrustMismatch {
        /// The manifest.
        manifest: String,
    },
    /// The component's description breaks a rule of its spec (a component
    /// built in code, whose grants no [`crate::ContributorEntry`] checked).
    #[error("contributor {}: {source}", escape_controls(.contributor))]
    Spec {
        /// The component.
        contributor: String,
        /// What is wrong.
        source: SpecError,
    },
}

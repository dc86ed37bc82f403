//! What an error names as being at fault (the contributor, key, file and
//! limit) as data, for callers that report errors in a structured form
//! (`dsh-env serve`'s error `data`, bindings) rather than as one line.

use serde::Serialize;

use crate::declaration::{DeclarationError, DeclarationProblem, OutputProblem};
use crate::environment::EnvError;
use crate::load_error::LoadError;
use crate::manifest::ManifestError;
use crate::registry::{ContributorError, FailureCause, RegistryError};
use crate::sandbox::GuestFailure;
use crate::signature::SignatureError;
use crate::spec::SpecError;

/// The parts of an error a program can act on; each is present only where
/// the error names it. Text that came from a guest is given as it was sent:
/// escape it wherever it is shown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Culprit {
    /// The contributor at fault (its declared name, or its origin before it declared).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contributor: Option<String>,
    /// The `DSH_*` key (or env variable name) at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The file that could not be used: a component, or a manifest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The limit that was hit or is invalid, by its manifest name
    /// (`[contributor.limits]`), e.g. `deadline_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<&'static str>,
}

impl Culprit {
    /// Names only `file`.
    fn file(file: &str) -> Self {
        Culprit {
            file: Some(file.to_string()),
            ..Culprit::default()
        }
    }

    /// Nothing named.
    pub fn is_empty(&self) -> bool {
        *self == Culprit::default()
    }
}

impl From<&RegistryError> for Culprit {
    fn from(err: &RegistryError) -> Self {
        match err {
            RegistryError::Load(err) => err.into(),
            RegistryError::Contributor(err) => err.into(),
            RegistryError::Declaration(err) => err.into(),
            RegistryError::Manifest(err) => err.as_ref().into(),
            RegistryError::Changed { origin, .. } => Culprit::file(origin),
            RegistryError::Signature(err) => err.into(),
            RegistryError::TrustMismatch { manifest } => Culprit::file(manifest),
            RegistryError::Spec {
                contributor,
                source,
            } => Culprit {
                contributor: Some(contributor.clone()),
                ..Culprit::from(source)
            },
        }
    }
}

impl From<&LoadError> for Culprit {
    fn from(err: &LoadError) -> Self {
        Culprit {
            limit: err.kind.limit(),
            ..Culprit::file(&err.origin)
        }
    }
}

impl From<&SignatureError> for Culprit {
    fn from(err: &SignatureError) -> Self {
        match err {
            SignatureError::Unsigned { origin, .. }
            | SignatureError::Malformed { origin, .. }
            | SignatureError::UntrustedKey { origin, .. }
            | SignatureError::Invalid { origin, .. }
            | SignatureError::Unchecked { origin } => Culprit::file(origin),
            SignatureError::BadKey { .. } | SignatureError::NoKeys => Culprit::default(),
        }
    }
}

impl From<&ContributorError> for Culprit {
    fn from(err: &ContributorError) -> Self {
        let (key, limit) = match &err.cause {
            FailureCause::Guest(failure) => (None, guest_limit(failure)),
            FailureCause::Output(problem) => output_fault(problem),
        };
        Culprit {
            contributor: Some(err.contributor.clone()),
            key,
            limit,
            ..Culprit::default()
        }
    }
}

impl From<&DeclarationError> for Culprit {
    fn from(err: &DeclarationError) -> Self {
        let limit = match err.problem {
            DeclarationProblem::TooManyKeys { .. } => Some("max_keys"),
            _ => None,
        };
        Culprit {
            contributor: Some(err.contributor.clone()),
            key: err.key.clone(),
            limit,
            ..Culprit::default()
        }
    }
}

impl From<&ManifestError> for Culprit {
    fn from(err: &ManifestError) -> Self {
        let (file, entry) = match err {
            ManifestError::Read(err) => (&err.path, Culprit::default()),
            ManifestError::Parse { path, .. } => (path, Culprit::default()),
            ManifestError::Entry { path, source, .. } => (path, Culprit::from(source)),
            ManifestError::Trust { path, .. } | ManifestError::Environment { path, .. } => {
                (path, Culprit::default())
            }
        };
        Culprit {
            file: Some(file.clone()),
            ..entry
        }
    }
}

impl From<&SpecError> for Culprit {
    fn from(err: &SpecError) -> Self {
        Culprit {
            key: match err {
                SpecError::ManagedEnvGrant(name) => Some(name.clone()),
                _ => None,
            },
            limit: match err {
                SpecError::Limit { field, .. } => Some(field),
                SpecError::ConfigInBoth(_)
                | SpecError::Digest { .. }
                | SpecError::GrantsChanged { .. }
                | SpecError::PathOrSource
                | SpecError::Source(_)
                | SpecError::SourceNotPinned(_)
                | SpecError::SignatureWithSource
                | SpecError::ManagedEnvGrant(_) => None,
            },
            ..Culprit::default()
        }
    }
}

impl From<&EnvError> for Culprit {
    fn from(err: &EnvError) -> Self {
        let (EnvError::ManagedNameInEnv(name)
        | EnvError::InvalidName(name)
        | EnvError::NulInValue(name)) = err;
        Culprit {
            key: Some(name.clone()),
            ..Culprit::default()
        }
    }
}

/// The limit a guest failure ran into, where it is one a manifest sets by
/// name. (Memory, table and handle overruns are named in the message.)
fn guest_limit(failure: &GuestFailure) -> Option<&'static str> {
    match failure {
        GuestFailure::Deadline(_) => Some("deadline_ms"),
        GuestFailure::Fuel(_) => Some("fuel"),
        _ => None,
    }
}

/// The key and the limit an output problem names.
fn output_fault(problem: &OutputProblem) -> (Option<String>, Option<&'static str>) {
    match problem {
        OutputProblem::UndeclaredKey(key)
        | OutputProblem::DuplicateKey(key)
        | OutputProblem::ControlInValue { key, .. } => (Some(key.clone()), None),
        OutputProblem::ValueTooLarge { key, .. } => (Some(key.clone()), Some("max_value_bytes")),
        OutputProblem::TooManyPairs { .. } => (None, Some("max_pairs")),
        OutputProblem::OutputTooLarge { .. } => (None, Some("max_output_bytes")),
    }
}

//! A command's failure and the exit code it maps to, shared by every
//! command; the exit code of each host error ([`Failure::from`]'s one
//! table), and the CLI's remedy for the errors whose fix is a `dsh-env`
//! command: the library says what is wrong, the CLI what to run.

use std::error::Error;

use dsh_env::{LoadErrorKind, RegistryError, SpecError};
use dsh_env_harness::host::{HostError, HostErrorCode, Stage};
use dsh_env_store::{StoreError, StoreProblem};

/// Exit code of a usage or configuration error.
const CONFIG: u8 = 2;

/// Exit code of a runtime failure.
const RUNTIME: u8 = 1;

/// Exit code when a command ran past its timeout (`run`, as `timeout` has it).
pub(crate) const TIMED_OUT: u8 = 124;

/// An error and the exit code it maps to.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    /// A usage or configuration error (exit 2).
    pub(crate) fn config(message: impl std::fmt::Display) -> Self {
        Failure {
            code: CONFIG,
            message: message.to_string(),
        }
    }

    /// A runtime failure (exit 1).
    pub(crate) fn runtime(message: impl std::fmt::Display) -> Self {
        Failure {
            code: RUNTIME,
            message: message.to_string(),
        }
    }

    /// [`Failure::config`] for `err`, with the CLI's remedy for it.
    pub(crate) fn config_error(err: &(dyn Error + 'static)) -> Self {
        Self::config(with_remedy(err))
    }
}

/// The one table from a host error to an exit code: what fails while the
/// host opens (the manifest, the home, the hooks, a contributor's
/// registration) is configuration (2), but for a runtime that cannot start;
/// in a call, an argument or a manifest is configuration, a command's
/// timeout is 124, and the rest is a runtime failure (1). `run` turns 1 and
/// 2 into its own 125.
impl From<HostError> for Failure {
    fn from(err: HostError) -> Self {
        use HostErrorCode::*;
        let code = match (err.stage, err.code) {
            (_, Runtime) => RUNTIME,
            (_, TimedOut) => TIMED_OUT,
            (Stage::Opening, _) => CONFIG,
            (Stage::Calling, InvalidArgument | Manifest | Home) => CONFIG,
            (
                Stage::Calling,
                Load | Contributor | Declaration | Changed | Signature | HookBlocked | Exec
                | Disposed,
            ) => RUNTIME,
        };
        Failure {
            code,
            message: with_remedy(&err),
        }
    }
}

/// `err`'s message, and after it what to run about it, when the CLI has a
/// command for that.
pub(crate) fn with_remedy(err: &(dyn Error + 'static)) -> String {
    match remedy(err) {
        Some(remedy) => format!("{err}; {remedy}"),
        None => err.to_string(),
    }
}

/// The `dsh-env` command that fixes `err` or an error it comes from.
fn remedy(err: &(dyn Error + 'static)) -> Option<String> {
    let mut next = Some(err);
    while let Some(err) = next {
        let problem = (err.downcast_ref::<StoreProblem>())
            .or_else(|| err.downcast_ref::<StoreError>().map(|e| &e.problem))
            .or_else(|| match err.downcast_ref::<LoadErrorKind>() {
                Some(LoadErrorKind::Store(problem)) => Some(problem.as_ref()),
                _ => None,
            });
        let found = match (problem, err.downcast_ref::<SpecError>()) {
            (Some(StoreProblem::NotPinned), _) => {
                Some("run `dsh-env add` to pull it and pin its digest".to_string())
            }
            (Some(StoreProblem::Missing { reference, .. }), _) => Some(format!(
                "run `dsh-env pull --manifest <this manifest>` to fetch what it pins, \
                 or `dsh-env add {reference}` to review it anew"
            )),
            (Some(StoreProblem::Index { .. }), _) => {
                Some("move it aside and run `dsh-env add` or `pull` again".to_string())
            }
            (_, Some(SpecError::GrantsChanged { .. })) => Some(REVIEW_AGAIN.to_string()),
            (_, Some(SpecError::SourceNotPinned(source))) => Some(format!(
                "run `dsh-env add {source}` to pull it and pin its digest"
            )),
            _ => match err.downcast_ref::<RegistryError>() {
                Some(RegistryError::Changed { .. }) => Some(REVIEW_AGAIN.to_string()),
                _ => None,
            },
        };
        if found.is_some() {
            return found;
        }
        next = err.source();
    }
    None
}

/// What to run when what a manifest entry pins changed.
const REVIEW_AGAIN: &str = "run `dsh-env add` again to review it";

/// A command's outcome.
pub(crate) type CliResult<T = ()> = Result<T, Failure>;

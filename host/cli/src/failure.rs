//! A command's failure and the exit code it maps to, shared by every command.

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
            code: 2,
            message: message.to_string(),
        }
    }

    /// A runtime failure (exit 1).
    pub(crate) fn runtime(message: impl std::fmt::Display) -> Self {
        Failure {
            code: 1,
            message: message.to_string(),
        }
    }
}

/// A command's outcome.
pub(crate) type CliResult<T = ()> = Result<T, Failure>;

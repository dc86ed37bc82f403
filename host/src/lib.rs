//! dsh-env: a trusted, per-call `DSH_*` environment for the shell commands an
//! AI coding agent runs, built from sandboxed WebAssembly contributors.
//!
//! The path of one execution: [`Registry::collect`] runs every registered
//! contributor in a fresh sandboxed instance ([`sandbox`]), checks its output
//! against its [`declaration`], and returns one immutable [`Overlay`].

pub mod agent;
mod atomic_file;
pub mod cache;
pub mod compile;
pub mod declaration;
pub mod engine;
pub mod execution;
pub mod executor;
mod guest_output;
pub mod home;
pub mod hooks;
pub mod input;
pub mod key;
pub mod limits;
pub mod manifest;
pub mod overlay;
pub mod registry;
pub mod sandbox;
pub mod session;
pub mod tool;

pub use cache::ArtifactCache;
pub use declaration::{
    Declaration, DeclarationError, DeclarationProblem, OutputProblem, RawDeclaration,
};
pub use execution::{Agent, Mode, ToolExecution};
pub use executor::{ExecError, ExecOutput, LocalExecutor, ScrubPolicy, ShellExecRequest};
pub use home::{DshHome, HomeContext, HomeError, HomeSetting};
pub use key::{DSH_ENV_PREFIX, DshKey, KeyError, RESERVED_KEYS};
pub use limits::{HostLimits, Limits};
pub use manifest::{Manifest, ManifestError, OnError};
pub use overlay::Overlay;
pub use registry::{
    BUILTIN_OWNER, Collection, ContributorError, FailureCause, KeyListing, NativeContributor,
    Registration, Registry, RegistryError,
};
pub use sandbox::{ContributorComponent, GuestFailure, LoadError, Phase};

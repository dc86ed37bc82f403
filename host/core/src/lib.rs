//! dsh-env: a trusted, per-call `DSH_*` environment for the shell commands an
//! AI coding agent runs, built from sandboxed WebAssembly contributors.
//!
//! The path of one execution: [`Registry::collect`] runs every registered
//! contributor in a fresh sandboxed instance ([`sandbox`]), checks its output
//! against its [`declaration`], and returns one immutable [`Overlay`];
//! [`environment::child_environment`] then builds a child's environment from
//! the inherited one, the caller's env and that overlay.
//!
//! The harness around it (executor, bash tool, sessions, hooks, agent loop)
//! is the `dsh-env-harness` crate; the `dsh-env` command is `dsh-env-cli`.

#![deny(missing_docs)]

pub mod atomic_file;
pub mod cache;
pub mod compile;
pub mod culprit;
pub mod declaration;
pub mod engine;
pub mod environment;
mod epoch;
pub mod execution;
mod guest_output;
pub mod home;
pub mod input;
pub mod key;
pub mod limits;
pub mod manifest;
pub mod overlay;
pub mod registry;
pub mod runtime;
pub mod sandbox;
pub mod signature;
pub mod spec;
pub mod store;

pub use cache::ArtifactCache;
pub use compile::CompileProgress;
pub use culprit::Culprit;
pub use declaration::{
    Declaration, DeclarationError, DeclarationProblem, OutputProblem, RawDeclaration,
};
pub use engine::Tiering;
pub use environment::{EnvError, ScrubPolicy, ScrubReason, child_environment};
pub use execution::{Agent, Mode, ToolExecution};
pub use home::{DshHome, HomeContext, HomeError, HomeSetting};
pub use key::{DSH_ENV_PREFIX, DshKey, KeyError, RESERVED_KEYS};
pub use limits::{HostLimits, Limits};
pub use manifest::{Manifest, ManifestError};
pub use overlay::Overlay;
pub use registry::{
    BUILTIN_OWNER, Collection, ContributorError, ContributorListing, FailureCause, KeyListing,
    NativeContributor, Registration, Registry, RegistryError,
};
pub use runtime::{Allocator, Runtime, RuntimeError};
pub use sandbox::{
    CodeTier, ContractVersion, ContributorComponent, GuestFailure, LoadError, Phase,
    supported_contracts,
};
pub use signature::{KeyId, SignatureError, Signer, Trust};
pub use spec::{
    ContributorEntry, ContributorSource, ContributorSpec, Grants, HostEnv, OnError, SpecError,
};
pub use store::{OciReference, ReferenceError, Store, StoreError, StoreProblem, StoredArtifact};

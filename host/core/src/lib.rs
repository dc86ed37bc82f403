//! dsh-env: a trusted, per-call `DSH_*` environment for the shell commands an
//! AI coding agent runs, built from sandboxed WebAssembly contributors.
//!
//! The path of one execution: [`Registry::collect`] runs every registered
//! contributor in a fresh sandboxed instance, checks its output against its
//! [`Declaration`], and returns one immutable [`Overlay`] (in a [`Collection`]);
//! [`child_environment`] then builds a child's environment from
//! the inherited one, the caller's env and that overlay.
//!
//! The harness around it (executor, bash tool, sessions, hooks, agent loop)
//! is the `dsh-env-harness` crate; the `dsh-env` command is `dsh-env-cli`.

#![deny(missing_docs)]

// The modules are private and listed bottom to top: each imports only from
// those above it in this list. The public API is the flat re-export below.

// Support: no wasmtime, no rules of their own (input, digest and
// atomic_file are `dsh-env-support`'s, shared with the store).
mod keys;
// Rules without wasmtime.
mod declaration;
mod environment;
mod execution;
mod guest_output;
mod home;
mod limits;
pub mod os;
mod overlay;
mod signature;
// Configuration (the store of pulled artifacts is `dsh-env-store`).
mod manifest;
mod spec;
// The engine.
mod engine;
mod epoch;
// Artifacts.
mod cache;
mod compile;
mod load_error;
// Instances and calls.
mod sandbox;
mod shared_engine;
// Loading: cache, compiler and tiering.
mod loader;
// Registration and collection.
mod culprit;
mod registry;

pub use cache::{ArtifactCache, CacheError, CacheKey, CachedEntry, Eviction};
pub use compile::CompileProgress;
pub use culprit::Culprit;
pub use declaration::{
    Declaration, DeclarationError, DeclarationProblem, KeyInfo, OutputProblem, RawDeclaration,
};
/// The store's types this crate's own API names (`ContributorSource::Oci`,
/// `SpecError::Source`, `LoadErrorKind::Store`, `LoadFrom::Pulled`); the
/// store itself (`BlobStore`, its gc) is `dsh-env-store`.
pub use dsh_env_store::{
    ImageManifestError, OciReference, ReferenceError, StoreProblem, StoredArtifact,
};
pub use dsh_env_support::input::{FileError, ReadProblem};
pub use engine::{
    Allocator, EngineError, PAGEMAP_RESET, Tiering, WASMTIME_VERSION, resets_in_place,
};
pub use environment::{
    CredentialFamily, EnvError, EnvRule, EnvironmentPolicy, Inherit, NamePattern, PolicyError,
    ScrubPolicy, ScrubReason, child_environment, scrub_reason,
};
pub use execution::{Agent, ExecutionJsonError, Mode, ToolExecution};
pub use home::{DshHome, HomeContext, HomeError, HomeSetting};
pub use keys::{BUILTIN_OWNER, DSH_ENV_PREFIX, DshKey, KeyError, RESERVED_KEYS};
pub use limits::{HostLimits, Limits, Phase};
pub use load_error::{LoadError, LoadErrorKind};
pub use manifest::{
    EnvironmentEntry, HooksSetting, Manifest, ManifestError, NamedFile, TrustEntry,
};
pub use overlay::Overlay;
pub use registry::{
    Absence, CollectAll, CollectEachAlone, CollectOnly, CollectOptions, CollectScope, Collection,
    ContributorError, ContributorListing, FailureCause, KeyListing, LoadFrom, LoadOptions,
    NativeContributor, Registration, Registry, RegistryBuilder, RegistryError,
};
pub use sandbox::{
    CallTrace, CodeTier, ContractVersion, ContributorComponent, GuestFailure, supported_contracts,
};
pub use shared_engine::SharedEngine;
pub use signature::{KeyId, SignatureError, Signer, Trust};
pub use spec::{
    ContributorEntry, ContributorSource, ContributorSpec, CwdGrant, Grants, GrantsEntry, HostEnv,
    LimitsEntry, OnError, SpecError,
};

pub use sandbox::not_a_component_reason;
pub use signature::read_signature;
pub use spec::default_signature_path;

/// The compile helper, the child process that compiles untrusted components
/// under limits. A program that serves as its own helper (the `dsh-env`
/// CLI, an embedder's binary) runs [`helper_main`](compile_helper::helper_main)
/// when started as [`HELPER`](compile_helper::HELPER).
pub mod compile_helper {
    pub use crate::compile::{HELPER, HELPER_ENV, helper_main};
}

/// Ceilings inside the engine that the black-box tests (`tests/`) check
/// from outside. Not API: each may change with the engine. Every front end
/// uses the public API, the store (`dsh-env-store`) or the shared helpers
/// (`dsh-env-support`) instead.
#[doc(hidden)]
pub mod __internal {
    // How many compiles a load runs at once, sized by the cores; a test counts them.
    pub use crate::compile::MAX_COMPILES_AT_ONCE;
    // The execution parser's field names, private to it; its fuzz test feeds each.
    pub use crate::execution::KNOWN_FIELDS;
    // The pool's instance ceiling, not a setting (so not in `HostLimits`); a test fills it.
    pub use crate::limits::MAX_LIVE_INSTANCES;
    // The pool's memories per instance, not a setting; a test grows past it.
    pub use crate::limits::MAX_MEMORIES;
    // The sandbox's component-opening threads, sized by it; a test exhausts them.
    pub use crate::sandbox::MAX_OPENING_THREADS;
    // The sandbox's instances made ahead, sized by it; a test exhausts them.
    pub use crate::sandbox::MAX_PREPARED;
}

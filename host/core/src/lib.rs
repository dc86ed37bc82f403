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

// Support: no wasmtime, no rules of their own.
mod atomic_file;
mod digest;
mod input;
mod keys;
// Rules without wasmtime.
mod declaration;
mod environment;
mod execution;
mod guest_output;
mod home;
mod limits;
mod overlay;
mod signature;
// Configuration.
mod manifest;
mod spec;
mod store;
// The engine.
mod engine;
mod epoch;
// Artifacts.
mod cache;
mod compile;
mod load_error;
// Instances and calls.
mod shared_engine;
mod sandbox;
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
pub use engine::{
    Allocator, PAGEMAP_RESET, EngineError, Tiering, WASMTIME_VERSION, resets_in_place,
};
pub use environment::{
    CredentialFamily, EnvError, EnvRule, EnvironmentPolicy, Inherit, NamePattern, PolicyError,
    ScrubPolicy, ScrubReason, child_environment, scrub_reason,
};
pub use execution::{Agent, ExecutionJsonError, Mode, ToolExecution};
pub use home::{DshHome, HomeContext, HomeError, HomeSetting};
pub use input::{FileError, ReadProblem};
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
pub use shared_engine::SharedEngine;
pub use sandbox::{
    CallTrace, CodeTier, ContractVersion, ContributorComponent, GuestFailure, supported_contracts,
};
pub use signature::{KeyId, SignatureError, Signer, Trust};
pub use spec::{
    ContributorEntry, ContributorSource, ContributorSpec, CwdGrant, Grants, GrantsEntry, HostEnv,
    LimitsEntry, OnError, SpecError,
};
pub use store::{
    Keep, ManifestProblem, OciReference, ReferenceError, Store, StoreError, StoreProblem,
    StoredArtifact, Sweep, SweptBlob,
};

/// What the sibling crates (harness, CLI, Node addon, OCI client, tests)
/// share with this one but users should not build on: input helpers, the
/// engine's ceilings, the store's wire format. No stability promise.
#[doc(hidden)]
pub mod __internal {
    /// Whole-file writes, synced before the rename.
    pub mod atomic_file {
        pub use crate::atomic_file::write;
    }
    pub use crate::cache::DEFAULT_MAX_BYTES;
    pub use crate::compile::helper_main;
    /// The compile helper's name and the variable that overrides its path.
    pub mod compile {
        pub use crate::compile::{HELPER, HELPER_ENV};
    }
    pub use crate::digest::{Mismatch, is_sha256_hex, sha256_hex, verify as verify_sha256};
    pub use crate::epoch::EPOCH_TICK;
    pub use crate::execution::KNOWN_FIELDS;
    pub use crate::input::{
        MAX_COMPONENT_BYTES, MAX_EXECUTION_BYTES, MAX_HOOKS_BYTES, MAX_MANIFEST_BYTES,
        MAX_SESSION_BYTES, block_sigpipe, escape_controls, hidden_from_review, is_executable,
        read_capped, read_regular_file, read_regular_text, unknown_key, utf8,
    };
    pub use crate::limits::{MAX_LIVE_INSTANCES, MAX_MEMORIES};
    pub use crate::sandbox::{MAX_OPENING_THREADS, MAX_PREPARED, not_a_component_reason};
    pub use crate::signature::read_signature;
    pub use crate::spec::default_signature_path;
    pub use crate::store::{
        MAX_INDEX_BYTES, MAX_LAYER_BYTES, MAX_OCI_MANIFEST_BYTES, OCI_INDEX_MEDIA_TYPE,
        OCI_MANIFEST_MEDIA_TYPE, OCI_SCHEME, REF_NAME_ANNOTATION, SIGNATURE_ANNOTATION,
        WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, WasmManifest, is_loopback_host, layout_name,
    };
}

//! A contributor's description, validated once: where its component comes
//! from, its config, limits, grants and failure policy. The manifest's
//! `[[contributor]]` entries, `serve`'s `register` and Rust callers all
//! describe a contributor with a [`ContributorEntry`] (the raw form, as
//! written) and turn it into a [`ContributorSpec`] here, so every rule
//! lives in one place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::keys::is_managed_name;
use crate::limits::Limits;
use dsh_env_store::{OciReference, ReferenceError};
use dsh_env_support::digest::sha256_hex;
use dsh_env_support::input::escape_controls;

/// What happens to an execution when a contributor fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// The collection fails, naming the contributor; the command does not run.
    #[default]
    Fail,
    /// The contributor's keys are left out of this execution, with a warning.
    Omit,
}

/// What a contributor may see beyond its execution and config. Nothing by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Environment variables given to the guest (names and values).
    pub env: Vec<(String, String)>,
    /// Whether the agent's cwd is preopened, read-only, at its own path.
    pub cwd_read: bool,
}

/// The host's environment variables that `grants.env` may copy, passed in
/// (as [`crate::HomeContext`] is for the home) so that the registry never
/// reads the process environment itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostEnv(BTreeMap<String, String>);

impl HostEnv {
    /// This process's environment (variables whose name and value are UTF-8).
    pub fn from_process() -> Self {
        std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect()
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

impl FromIterator<(String, String)> for HostEnv {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Self {
        HostEnv(pairs.into_iter().collect())
    }
}

/// Where a contributor's component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContributorSource {
    /// A component file.
    File(PathBuf),
    /// Component bytes, named by `origin` in messages.
    Bytes {
        /// A label for messages (e.g. where the bytes came from).
        origin: String,
        /// The component.
        bytes: Vec<u8>,
    },
    /// An artifact pulled from an OCI registry, loaded from the home's
    /// store by its digest (never from the network).
    Oci(OciReference),
}

/// One contributor, described and validated: everything
/// [`crate::Registry::register_spec`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContributorSpec {
    /// The component.
    pub source: ContributorSource,
    /// Static configuration, served by `config.get`.
    pub config: BTreeMap<String, String>,
    /// The limits its instances run under.
    pub limits: Limits,
    /// What it may see.
    pub grants: Grants,
    /// What a failure of it does to an execution.
    pub on_error: OnError,
    /// The SHA-256 the component's bytes must have (lowercase hex), if pinned.
    pub sha256: Option<String>,
    /// Where its minisign signature may be (for a file: the file's path
    /// plus `.minisig`). Whose signatures are trusted is not the spec's to
    /// say: that is the registry's ([`crate::RegistryBuilder::trust`]).
    pub signature: Option<PathBuf>,
    /// Where it is written, `manifest.toml:LINE` (its `[[contributor]]`
    /// header), when it comes from a manifest: named by `explain`'s hints.
    pub declared_at: Option<String>,
}

impl ContributorSpec {
    /// The component at `path`, with no config, the default limits, no
    /// grants, and `on_error = "fail"`.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let mut spec = Self::from_source(ContributorSource::File(path.clone()));
        spec.signature = Some(default_signature_path(&path));
        spec
    }

    /// The component `bytes`, named `origin` in messages, with the defaults
    /// of [`ContributorSpec::file`].
    pub fn bytes(origin: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        Self::from_source(ContributorSource::Bytes {
            origin: origin.into(),
            bytes: bytes.into(),
        })
    }

    fn from_source(source: ContributorSource) -> Self {
        ContributorSpec {
            source,
            config: BTreeMap::new(),
            limits: Limits::default(),
            grants: Grants::default(),
            on_error: OnError::default(),
            sha256: None,
            signature: None,
            declared_at: None,
        }
    }

    /// Where the component comes from, for messages.
    pub fn origin(&self) -> String {
        match &self.source {
            ContributorSource::File(path) => path.display().to_string(),
            ContributorSource::Bytes { origin, .. } => origin.clone(),
            ContributorSource::Oci(reference) => reference.to_string(),
        }
    }
}

/// Why a contributor's description cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A limit is out of its range.
    #[error("limits.{field} must be {range}")]
    Limit {
        /// The field, e.g. `deadline_ms`.
        field: &'static str,
        /// What it must be, e.g. `at least 1`.
        range: String,
    },
    /// A config key is set both in `config` and in `grants.config`.
    #[error("config key `{0}` is set in both config and grants.config")]
    ConfigInBoth(String),
    /// `sha256` or `grants_sha256` is not a SHA-256 digest.
    #[error("{field} must be 64 hexadecimal digits, not `{}`", escape_controls(.text))]
    Digest {
        /// `sha256` or `grants_sha256`.
        field: &'static str,
        /// What was written.
        text: String,
    },
    /// The grants or config differ from the ones reviewed by `dsh-env add`.
    #[error(
        "its grants or config changed since it was added (reviewed grants_sha256 {reviewed}, now {actual})"
    )]
    GrantsChanged {
        /// The digest of the grants reviewed.
        reviewed: String,
        /// The digest of the grants written now.
        actual: String,
    },
    /// The entry has both `path` and `source`, or neither.
    #[error("give exactly one of path or source")]
    PathOrSource,
    /// `source` is not an OCI reference.
    #[error("source {0}")]
    Source(ReferenceError),
    /// `source` names a tag, which can move: an entry pins a digest.
    #[error("source {0} is not pinned by digest")]
    SourceNotPinned(String),
    /// `signature` names a file, but an OCI source carries its signature
    /// in its image manifest.
    #[error(
        "signature is for a path entry; an oci:// source carries its signature in its image manifest"
    )]
    SignatureWithSource,
    /// `grants.env` names a `DSH_*` variable: the host sets those for each
    /// call, so the process's own (a stale outer value) reaches no guest.
    #[error(
        "grants.env names `{}`: a DSH_* value is set by dsh-env for each call, never copied from \
         the host's environment into a guest",
        escape_controls(.0)
    )]
    ManagedEnvGrant(String),
}

/// A contributor as written: a manifest's `[[contributor]]` entry, or the
/// params of `serve`'s `register`. Unknown fields are errors.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContributorEntry {
    /// The component file (an entry has this or `source`).
    pub path: Option<PathBuf>,
    /// Where the component was pulled from: `oci://<registry>/<repository>@sha256:<hex>`,
    /// loaded from the store (an entry has this or `path`).
    pub source: Option<String>,
    /// Static configuration, served by `config.get`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Failure policy.
    #[serde(default)]
    pub on_error: OnError,
    /// The SHA-256 (hex) the component's bytes must have; a file that
    /// differs is refused at registration.
    pub sha256: Option<String>,
    /// The component's minisign signature (default: its path plus `.minisig`).
    pub signature: Option<PathBuf>,
    /// The digest of the grants reviewed by `dsh-env add` (see
    /// [`GrantsEntry::digest`]); other grants are refused until added again.
    pub grants_sha256: Option<String>,
    /// Overrides of the default limits.
    #[serde(default)]
    pub limits: LimitsEntry,
    /// What the contributor may see.
    #[serde(default)]
    pub grants: GrantsEntry,
    /// The line of its `[[contributor]]` header, when read from a manifest.
    #[serde(skip)]
    pub line: Option<usize>,
}

/// `[contributor.limits]`: every field optional, defaults from [`Limits`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsEntry {
    /// Deadline per call, in milliseconds.
    pub deadline_ms: Option<u64>,
    /// Linear memory cap, in MiB.
    pub memory_mib: Option<usize>,
    /// Keys per declaration.
    pub max_keys: Option<usize>,
    /// Pairs per resolve.
    pub max_pairs: Option<usize>,
    /// Bytes per value.
    pub max_value_bytes: Option<usize>,
    /// Bytes per resolve, keys and values together.
    pub max_output_bytes: Option<usize>,
    /// Bytes of an `err(...)` message kept.
    pub max_error_bytes: Option<usize>,
    /// Fuel (instruction budget) per call.
    pub fuel: Option<u64>,
    /// Bytes of guest stdout/stderr kept for the log, per stream.
    pub max_log_bytes: Option<usize>,
    /// Host handles (files, streams, pollables) one instance may hold.
    pub max_handles: Option<usize>,
    /// Wall-clock time to compile the component, in milliseconds.
    pub compile_timeout_ms: Option<u64>,
    /// CPU time to compile it, in milliseconds (enforced in whole seconds).
    pub compile_cpu_ms: Option<u64>,
    /// Address space of the process that compiles it, in MiB.
    pub compile_memory_mib: Option<usize>,
}

/// `[contributor.grants]`: what the contributor may see. Nothing by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantsEntry {
    /// Static key/values served by `config.get` (merged with `[contributor.config]`).
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Host environment variables copied (by name) into the guest's environment.
    #[serde(default)]
    pub env: Vec<String>,
    /// `"read"`: the agent's cwd, preopened read-only.
    pub cwd: Option<CwdGrant>,
}

/// How the agent's cwd is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CwdGrant {
    /// Read-only.
    Read,
}

/// The least address space the compile helper may be given, in MiB: the
/// helper alone maps about 150 MiB (a debug build), so nothing compiles below
/// this; a limit a little above it still fails cleanly, naming the limit.
const MIN_COMPILE_MEMORY_MIB: usize = 64;

/// The most address space the compile helper may be given, in MiB (1 TiB:
/// beyond that the limit means nothing).
const MAX_COMPILE_MEMORY_MIB: usize = 1 << 20;

/// The longest `deadline_ms`: an hour (the default is 2 s; a contributor
/// runs on every tool call).
const MAX_DEADLINE_MS: u64 = 60 * 60 * 1000;

/// The longest `compile_timeout_ms` and `compile_cpu_ms`: a day.
const MAX_COMPILE_MS: u64 = 24 * 60 * 60 * 1000;

/// The most `max_keys`, `max_pairs` and `max_handles` may be: past a
/// million, a count bounds nothing. (The byte caps go up to the largest
/// guest memory, `limits::MAX_MEMORY_BYTES`: a guest cannot give more.)
const MAX_COUNT: usize = 1 << 20;

impl ContributorEntry {
    /// The validated spec: `path` is resolved against `base_dir`, and
    /// `grants.env` names are looked up in `host_env` (a name that is not
    /// set is not granted).
    pub fn to_spec(
        &self,
        base_dir: &Path,
        host_env: &HostEnv,
    ) -> Result<ContributorSpec, SpecError> {
        if let Some(name) = managed_env_grant(self.grants.env.iter().map(String::as_str)) {
            return Err(SpecError::ManagedEnvGrant(name.to_string()));
        }
        if let Some(reviewed) = &self.grants_sha256 {
            let reviewed = pinned_digest("grants_sha256", reviewed)?;
            let actual = self.grants_digest()?;
            if reviewed != actual {
                return Err(SpecError::GrantsChanged { reviewed, actual });
            }
        }
        let source = self.source(base_dir)?;
        let signature = match (&source, &self.signature) {
            (ContributorSource::File(path), None) => Some(default_signature_path(path)),
            (ContributorSource::File(_), Some(signature)) => Some(base_dir.join(signature)),
            (_, Some(_)) => return Err(SpecError::SignatureWithSource),
            (_, None) => None,
        };
        Ok(ContributorSpec {
            signature,
            source,
            config: self.config()?,
            limits: self.limits()?,
            grants: Grants {
                env: (self.grants.env.iter())
                    .filter_map(|name| Some((name.clone(), host_env.get(name)?.to_string())))
                    .collect(),
                cwd_read: self.grants.cwd == Some(CwdGrant::Read),
            },
            on_error: self.on_error,
            sha256: (self.sha256.as_deref())
                .map(|text| pinned_digest("sha256", text))
                .transpose()?,
            declared_at: None,
        })
    }

    /// Where the component comes from: `path` resolved against `base_dir`,
    /// or `source`, which must be an `oci://` reference pinned by digest.
    pub fn source(&self, base_dir: &Path) -> Result<ContributorSource, SpecError> {
        match (&self.path, &self.source) {
            (Some(path), None) => Ok(ContributorSource::File(base_dir.join(path))),
            (None, Some(text)) => {
                let reference = OciReference::parse(text).map_err(SpecError::Source)?;
                if !reference.is_pinned() {
                    return Err(SpecError::SourceNotPinned(reference.to_string()));
                }
                Ok(ContributorSource::Oci(reference))
            }
            _ => Err(SpecError::PathOrSource),
        }
    }

    /// What names the entry in messages: its `path` or its `source`, as written.
    pub fn label(&self) -> String {
        match (&self.path, &self.source) {
            (Some(path), _) => escape_controls(&path.display().to_string()).into_owned(),
            (None, Some(source)) => escape_controls(source).into_owned(),
            (None, None) => "(no path or source)".to_string(),
        }
    }

    /// The default limits with this entry's overrides applied.
    pub fn limits(&self) -> Result<Limits, SpecError> {
        self.limits.to_limits()
    }

    /// The SHA-256 (hex) of what the entry gives the contributor beyond its
    /// execution, as `dsh-env add` reviews and pins it in `grants_sha256`:
    /// its grants and its whole config, `[contributor.config]` and
    /// `grants.config` alike (a value a reviewer saw cannot change unseen
    /// under either spelling).
    pub fn grants_digest(&self) -> Result<String, SpecError> {
        Ok(self.grants.digest_with_config(&self.config()?))
    }

    /// The config served by `config.get`: `[contributor.config]` and
    /// `[contributor.grants.config]` together; a key set in both is an error.
    pub fn config(&self) -> Result<BTreeMap<String, String>, SpecError> {
        let mut config = self.config.clone();
        for (key, value) in &self.grants.config {
            if config.insert(key.clone(), value.clone()).is_some() {
                return Err(SpecError::ConfigInBoth(key.clone()));
            }
        }
        Ok(config)
    }
}

/// The first of `names` in the managed `DSH_*` namespace (in any case, as
/// the scrub compares): no env grant may name one.
pub(crate) fn managed_env_grant<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    names.into_iter().find(|name| is_managed_name(name))
}

/// `text` (the value of `field`) as a SHA-256 digest in lowercase hex.
fn pinned_digest(field: &'static str, text: &str) -> Result<String, SpecError> {
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(SpecError::Digest {
            field,
            text: text.to_string(),
        })
    }
}

/// Where a component file's signature is looked for by default: minisign's
/// own convention, the file's path plus `.minisig`.
pub fn default_signature_path(path: &Path) -> PathBuf {
    let mut signature = path.as_os_str().to_owned();
    signature.push(".minisig");
    PathBuf::from(signature)
}

impl GrantsEntry {
    /// The SHA-256 (hex) of these grants (env names, not their values) with
    /// `config` in place of their own, independent of order and layout.
    fn digest_with_config(&self, config: &BTreeMap<String, String>) -> String {
        let mut env = self.env.clone();
        env.sort();
        env.dedup();
        let canonical = serde_json::json!({
            "config": config,
            "cwd": self.cwd.map(|CwdGrant::Read| "read"),
            "env": env,
        });
        sha256_hex(canonical.to_string().as_bytes())
    }
}

impl LimitsEntry {
    /// The default limits with these overrides applied.
    pub fn to_limits(&self) -> Result<Limits, SpecError> {
        let mut limits = Limits::default();
        let at_least_one = |field| SpecError::Limit {
            field,
            range: "at least 1".into(),
        };
        if let Some(ms) = self.deadline_ms {
            if ms == 0 {
                return Err(at_least_one("deadline_ms"));
            }
            if ms > MAX_DEADLINE_MS {
                return Err(SpecError::Limit {
                    field: "deadline_ms",
                    range: format!("from 1 to {MAX_DEADLINE_MS}"),
                });
            }
            limits.deadline = Duration::from_millis(ms);
        }
        if self.fuel == Some(0) {
            return Err(at_least_one("fuel"));
        }
        limits.fuel = self.fuel.or(limits.fuel);
        if let Some(mib) = self.memory_mib {
            let max = crate::limits::MAX_MEMORY_BYTES >> 20;
            if mib == 0 || mib > max {
                return Err(SpecError::Limit {
                    field: "memory_mib",
                    range: format!("from 1 to {max}"),
                });
            }
            limits.memory_bytes = mib << 20;
        }
        let max_bytes = crate::limits::MAX_MEMORY_BYTES;
        let caps = [
            (self.max_keys, "max_keys", MAX_COUNT, &mut limits.max_keys),
            (
                self.max_pairs,
                "max_pairs",
                MAX_COUNT,
                &mut limits.max_pairs,
            ),
            (
                self.max_value_bytes,
                "max_value_bytes",
                max_bytes,
                &mut limits.max_value_bytes,
            ),
            (
                self.max_output_bytes,
                "max_output_bytes",
                max_bytes,
                &mut limits.max_output_bytes,
            ),
            (
                self.max_error_bytes,
                "max_error_bytes",
                max_bytes,
                &mut limits.max_error_bytes,
            ),
            (
                self.max_log_bytes,
                "max_log_bytes",
                max_bytes,
                &mut limits.max_log_bytes,
            ),
            (
                self.max_handles,
                "max_handles",
                MAX_COUNT,
                &mut limits.max_handles,
            ),
        ];
        for (value, field, max, slot) in caps {
            match value {
                Some(value) if value > max => {
                    return Err(SpecError::Limit {
                        field,
                        range: format!("at most {max}"),
                    });
                }
                Some(value) => *slot = value,
                None => {}
            }
        }
        let compile_times = [
            (
                self.compile_timeout_ms,
                "compile_timeout_ms",
                &mut limits.compile_timeout,
            ),
            (
                self.compile_cpu_ms,
                "compile_cpu_ms",
                &mut limits.compile_cpu,
            ),
        ];
        for (ms, field, slot) in compile_times {
            match ms {
                Some(0) => return Err(at_least_one(field)),
                Some(ms) if ms > MAX_COMPILE_MS => {
                    return Err(SpecError::Limit {
                        field,
                        range: format!("from 1 to {MAX_COMPILE_MS}"),
                    });
                }
                Some(ms) => *slot = Duration::from_millis(ms),
                None => {}
            }
        }
        if let Some(mib) = self.compile_memory_mib {
            if !(MIN_COMPILE_MEMORY_MIB..=MAX_COMPILE_MEMORY_MIB).contains(&mib) {
                return Err(SpecError::Limit {
                    field: "compile_memory_mib",
                    range: format!("from {MIN_COMPILE_MEMORY_MIB} to {MAX_COMPILE_MEMORY_MIB}"),
                });
            }
            limits.compile_memory_bytes = mib << 20;
        }
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(json: serde_json::Value) -> ContributorEntry {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn grants_env_comes_from_the_host_env_passed_in() {
        let host_env: HostEnv = [("SET".to_string(), "v".to_string())].into_iter().collect();
        // Set in this process, but not passed in: not granted.
        let path = std::env::var("PATH").unwrap();
        assert!(!path.is_empty());
        let spec = entry(
            serde_json::json!({"path": "c.wasm", "grants": {"env": ["SET", "UNSET", "PATH"]}}),
        )
        .to_spec(Path::new("/base"), &host_env)
        .unwrap();
        assert_eq!(spec.grants.env, [("SET".to_string(), "v".to_string())]);
        assert_eq!(spec.source, ContributorSource::File("/base/c.wasm".into()));
    }

    #[test]
    fn a_bad_entry_names_the_field() {
        let bad = |json| {
            entry(json)
                .to_spec(Path::new(""), &HostEnv::default())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            bad(serde_json::json!({"path": "c.wasm", "limits": {"fuel": 0}})),
            "limits.fuel must be at least 1"
        );
        assert_eq!(
            bad(
                serde_json::json!({"path": "c.wasm", "config": {"k": "1"}, "grants": {"config": {"k": "2"}}})
            ),
            "config key `k` is set in both config and grants.config"
        );
    }

    #[test]
    fn an_entry_has_a_path_or_a_pinned_oci_source() {
        let digest = "ab".repeat(32);
        let pinned = format!("oci://localhost:5000/dsh/lineage@sha256:{digest}");
        let spec = |json| entry(json).to_spec(Path::new("/base"), &HostEnv::default());
        assert_eq!(
            spec(serde_json::json!({"source": pinned})).unwrap().source,
            ContributorSource::Oci(OciReference::parse(&pinned).unwrap())
        );
        let bad = |json| spec(json).unwrap_err().to_string();
        assert_eq!(
            bad(serde_json::json!({"path": "c.wasm", "source": pinned})),
            "give exactly one of path or source"
        );
        assert_eq!(
            bad(serde_json::json!({})),
            "give exactly one of path or source"
        );
        assert_eq!(
            bad(serde_json::json!({"source": "oci://localhost:5000/dsh/lineage:v1"})),
            "source oci://localhost:5000/dsh/lineage:v1 is not pinned by digest"
        );
        assert_eq!(
            bad(serde_json::json!({"source": "https://example.test/c.wasm"})),
            "source `https://example.test/c.wasm` is not an OCI reference: it must start with oci://"
        );
    }
}

//! The manifest: which contributors to register, with their config, limits,
//! grants and failure policy. TOML; unknown fields are errors.
//!
//! ```toml
//! home = "~/.dsh"                 # optional
//!
//! [[contributor]]
//! path = "agent_lineage.wasm"     # relative to this file
//! on_error = "fail"               # or "omit"; default "fail"
//!
//! [contributor.config]            # served by the WIT `config.get`
//! base_url = "https://example.test/sessions"
//!
//! [contributor.limits]
//! deadline_ms = 500
//! memory_mib = 64
//!
//! [contributor.grants]
//! env = ["GITHUB_REPOSITORY"]     # copied from the host, by name
//! cwd = "read"                    # the agent's cwd, read-only
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::input::{FileError, MAX_MANIFEST_BYTES, read_regular_text};
use crate::limits::Limits;

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

/// A parsed manifest.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The harness home, if the manifest sets one.
    pub home: Option<String>,
    /// The contributors, in file order.
    #[serde(default, rename = "contributor")]
    pub contributors: Vec<ContributorEntry>,
    /// The directory relative paths are resolved against.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// The file it was read from (for messages).
    #[serde(skip)]
    pub origin: String,
}

/// One `[[contributor]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContributorEntry {
    /// The component file.
    pub path: PathBuf,
    /// Static configuration, served by `config.get`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Failure policy.
    #[serde(default)]
    pub on_error: OnError,
    /// Overrides of the default limits.
    #[serde(default)]
    pub limits: LimitsEntry,
    /// What the contributor may see.
    #[serde(default)]
    pub grants: GrantsEntry,
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

/// Why a manifest could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read: missing, not a regular file, over
    /// [`MAX_MANIFEST_BYTES`], or not UTF-8.
    #[error("cannot read manifest {0}")]
    Read(#[source] FileError),
    /// The TOML is malformed or has unknown fields.
    #[error("invalid manifest {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What and where (line and column).
        message: String,
    },
    /// An entry has an invalid limit or config.
    #[error("invalid manifest {path}: contributor {path_in_manifest}: {message}")]
    Entry {
        /// The file.
        path: String,
        /// The contributor entry's `path`.
        path_in_manifest: String,
        /// What is wrong.
        message: String,
    },
}

impl Manifest {
    /// Reads and parses the manifest at `path`.
    pub fn from_file(path: &Path) -> Result<Self, ManifestError> {
        let text = read_regular_text(path, MAX_MANIFEST_BYTES).map_err(ManifestError::Read)?;
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(&text, &path.display().to_string(), base_dir)
    }

    /// Parses manifest text; `origin` names it in errors, `base_dir` anchors paths.
    pub fn parse(text: &str, origin: &str, base_dir: PathBuf) -> Result<Self, ManifestError> {
        let mut manifest: Manifest = toml::from_str(text).map_err(|e| ManifestError::Parse {
            path: origin.to_string(),
            message: describe_toml_error(text, &e),
        })?;
        manifest.base_dir = base_dir;
        manifest.origin = origin.to_string();
        for entry in &manifest.contributors {
            entry
                .limits()
                .and(entry.config())
                .map_err(|message| ManifestError::Entry {
                    path: origin.to_string(),
                    path_in_manifest: entry.path.display().to_string(),
                    message,
                })?;
        }
        Ok(manifest)
    }

    /// The absolute (or cwd-relative) path of a contributor's component.
    pub fn component_path(&self, entry: &ContributorEntry) -> PathBuf {
        self.base_dir.join(&entry.path)
    }
}

/// The least address space the compile helper may be given, in MiB: the
/// helper alone maps about 150 MiB (a debug build), so nothing compiles below
/// this; a limit a little above it still fails cleanly, naming the limit.
const MIN_COMPILE_MEMORY_MIB: usize = 64;

/// The most address space the compile helper may be given, in MiB (1 TiB:
/// beyond that the limit means nothing).
const MAX_COMPILE_MEMORY_MIB: usize = 1 << 20;

impl ContributorEntry {
    /// The default limits with this entry's overrides applied.
    pub fn limits(&self) -> Result<Limits, String> {
        let spec = &self.limits;
        let mut limits = Limits::default();
        let invalid = |message: &str| message.to_string();
        if let Some(ms) = spec.deadline_ms {
            if ms == 0 {
                return Err(invalid("limits.deadline_ms must be at least 1"));
            }
            limits.deadline = Duration::from_millis(ms);
        }
        if spec.fuel == Some(0) {
            return Err(invalid("limits.fuel must be at least 1"));
        }
        limits.fuel = spec.fuel.or(limits.fuel);
        if let Some(mib) = spec.memory_mib {
            if mib == 0 || mib > crate::engine::MAX_MEMORY_BYTES >> 20 {
                return Err(invalid(&format!(
                    "limits.memory_mib must be from 1 to {}",
                    crate::engine::MAX_MEMORY_BYTES >> 20
                )));
            }
            limits.memory_bytes = mib << 20;
        }
        let caps = [
            (spec.max_keys, &mut limits.max_keys),
            (spec.max_pairs, &mut limits.max_pairs),
            (spec.max_value_bytes, &mut limits.max_value_bytes),
            (spec.max_output_bytes, &mut limits.max_output_bytes),
            (spec.max_error_bytes, &mut limits.max_error_bytes),
            (spec.max_log_bytes, &mut limits.max_log_bytes),
            (spec.max_handles, &mut limits.max_handles),
        ];
        for (value, slot) in caps {
            if let Some(value) = value {
                *slot = value;
            }
        }
        let compile_times = [
            (
                spec.compile_timeout_ms,
                "compile_timeout_ms",
                &mut limits.compile_timeout,
            ),
            (
                spec.compile_cpu_ms,
                "compile_cpu_ms",
                &mut limits.compile_cpu,
            ),
        ];
        for (ms, field, slot) in compile_times {
            match ms {
                Some(0) => return Err(format!("limits.{field} must be at least 1")),
                Some(ms) => *slot = Duration::from_millis(ms),
                None => {}
            }
        }
        if let Some(mib) = spec.compile_memory_mib {
            if !(MIN_COMPILE_MEMORY_MIB..=MAX_COMPILE_MEMORY_MIB).contains(&mib) {
                return Err(format!(
                    "limits.compile_memory_mib must be from {MIN_COMPILE_MEMORY_MIB} to {MAX_COMPILE_MEMORY_MIB}"
                ));
            }
            limits.compile_memory_bytes = mib << 20;
        }
        Ok(limits)
    }

    /// The config served by `config.get`: `[contributor.config]` and
    /// `[contributor.grants.config]` together; a key set in both is an error.
    pub fn config(&self) -> Result<BTreeMap<String, String>, String> {
        let mut config = self.config.clone();
        for (key, value) in &self.grants.config {
            if config.insert(key.clone(), value.clone()).is_some() {
                return Err(format!(
                    "config key `{key}` is set in both config and grants.config"
                ));
            }
        }
        Ok(config)
    }
}

/// The TOML error with its line and column, on one line.
fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim();
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(text, "m.toml", PathBuf::from("/base"))
    }

    #[test]
    fn parses_a_full_manifest() {
        let manifest = parse(
            r#"
home = "~/h"
[[contributor]]
path = "a.wasm"
on_error = "omit"
[contributor.config]
base_url = "https://x.test"
[contributor.limits]
deadline_ms = 250
memory_mib = 32

[[contributor]]
path = "/abs/b.wasm"
"#,
        )
        .unwrap();
        assert_eq!(manifest.home.as_deref(), Some("~/h"));
        let [a, b] = &manifest.contributors[..] else {
            panic!("two entries")
        };
        assert_eq!(manifest.component_path(a), PathBuf::from("/base/a.wasm"));
        assert_eq!(manifest.component_path(b), PathBuf::from("/abs/b.wasm"));
        assert_eq!(a.on_error, OnError::Omit);
        assert_eq!(b.on_error, OnError::Fail);
        assert_eq!(a.config["base_url"], "https://x.test");
        let limits = a.limits().unwrap();
        assert_eq!(
            (limits.deadline, limits.memory_bytes),
            (Duration::from_millis(250), 32 << 20)
        );
        assert_eq!(b.limits().unwrap(), Limits::default());
    }

    #[test]
    fn unknown_fields_are_errors_with_file_and_line() {
        let err = parse("[[contributor]]\npath = \"a.wasm\"\ncolour = \"blue\"\n").unwrap_err();
        let message = err.to_string();
        assert!(
            message
                .starts_with("invalid manifest m.toml: line 3, column 1: unknown field `colour`"),
            "{message}"
        );
        let err = parse("homes = \"x\"\n").unwrap_err().to_string();
        assert!(
            err.contains("line 1") && err.contains("unknown field `homes`"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_are_errors() {
        let err = parse("[[contributor]]\npath = \"a.wasm\"\non_error = \"ignore\"\n").unwrap_err();
        assert!(err.to_string().contains("line 3"), "{err}");
        let err =
            parse("[[contributor]]\npath = \"a.wasm\"\n[contributor.limits]\nmemory_mib = 0\n")
                .unwrap_err();
        assert!(
            err.to_string()
                .contains("limits.memory_mib must be from 1 to 512"),
            "{err}"
        );
    }

    #[test]
    fn compile_limits_are_read_and_checked() {
        let entry = |limits: &str| {
            parse(&format!(
                "[[contributor]]\npath = \"a.wasm\"\n[contributor.limits]\n{limits}\n"
            ))
            .map(|m| m.contributors[0].limits().unwrap())
        };
        let limits =
            entry("compile_timeout_ms = 1500\ncompile_cpu_ms = 3000\ncompile_memory_mib = 512")
                .unwrap();
        assert_eq!(
            (
                limits.compile_timeout,
                limits.compile_cpu,
                limits.compile_memory_bytes
            ),
            (
                Duration::from_millis(1500),
                Duration::from_secs(3),
                512 << 20
            )
        );
        for (bad, message) in [
            (
                "compile_timeout_ms = 0",
                "limits.compile_timeout_ms must be at least 1",
            ),
            (
                "compile_cpu_ms = 0",
                "limits.compile_cpu_ms must be at least 1",
            ),
            (
                "compile_memory_mib = 1",
                "limits.compile_memory_mib must be from 64 to",
            ),
        ] {
            let err = entry(bad).unwrap_err().to_string();
            assert!(err.contains(message), "{bad}: {err}");
        }
    }
}

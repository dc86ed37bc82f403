//! The manifest: which contributors to register, with their config, limits,
//! grants and failure policy. TOML; an unknown key is an error in every
//! table, named with the known ones, but in the maps whose keys are the
//! user's own (`config`, `grants.config`, `environment.set`).
//!
//! ```toml
//! home = "~/.dsh"                 # optional; relative to this file
//! hooks = "hooks.json"            # optional: for `run` and `serve`; relative to this file
//!
//! [trust]                         # optional: minisign keys trusted to sign
//! keys = ["RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3"]
//! require_signature = false       # true: unsigned components are refused
//!
//! [[contributor]]
//! path = "agent_lineage.wasm"     # relative to this file; or, pulled by `dsh-env add`:
//! # source = "oci://ghcr.io/acme/lineage@sha256:…"
//! sha256 = "…"                    # optional: the bytes it must have
//! signature = "agent_lineage.wasm.minisig"  # the default
//! grants_sha256 = "…"             # optional: the grants reviewed (`dsh-env add`)
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

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::environment::{EnvironmentPolicy, Inherit, PolicyError};
use crate::home::HomeSetting;
use crate::signature::{SignatureError, Trust};
use crate::spec::{ContributorEntry, ContributorSpec, HostEnv, SpecError};
use dsh_env_support::input::{
    FileError, MAX_HOOKS_BYTES, MAX_MANIFEST_BYTES, escape_controls, read_regular_text,
};

/// A parsed manifest.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The harness home, if the manifest sets one.
    pub home: Option<String>,
    /// A hooks.json (Claude Code or Codex format) for the commands that run
    /// a command (`run`, `serve`), relative to this file. The core does not
    /// read it: hooks are the harness's ([`Manifest::hooks_setting`]).
    pub hooks: Option<String>,
    /// Where `hooks` is written: line and column.
    #[serde(skip)]
    hooks_at: Option<(usize, usize)>,
    /// Whose signatures are trusted.
    #[serde(default)]
    pub trust: TrustEntry,
    /// What the commands' children inherit.
    #[serde(default)]
    pub environment: EnvironmentEntry,
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

/// `[trust]`: the minisign keys trusted to sign contributors.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustEntry {
    /// Public keys, each the base64 line of a minisign `.pub` file.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Whether an unsigned contributor is refused.
    #[serde(default)]
    pub require_signature: bool,
}

impl TrustEntry {
    /// The trust these fields describe, checked.
    pub fn trust(&self) -> Result<Trust, SignatureError> {
        Trust::new(&self.keys, self.require_signature)
    }
}

/// `[environment]`: what a command's child inherits, after Codex's
/// `shell_environment_policy`; the scrub always applies after it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentEntry {
    /// `"all"` (default), `"core"` or `"none"`.
    #[serde(default)]
    pub inherit: Inherit,
    /// Inherited names removed, by pattern (`*`, `?`; any case).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Variables every child gets.
    #[serde(default)]
    pub set: std::collections::BTreeMap<String, String>,
    /// When not empty, only names matching one of these are kept.
    #[serde(default)]
    pub include_only: Vec<String>,
}

impl EnvironmentEntry {
    /// The policy these fields describe, checked.
    pub fn policy(&self) -> Result<EnvironmentPolicy, PolicyError> {
        EnvironmentPolicy::new(
            self.inherit,
            &self.exclude,
            self.set.clone(),
            &self.include_only,
        )
    }
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
    /// An entry has an invalid source, limit or config.
    #[error("invalid manifest {path}: contributor {path_in_manifest}: {source}")]
    Entry {
        /// The file.
        path: String,
        /// The contributor entry's `path` or `source`.
        path_in_manifest: String,
        /// What is wrong.
        source: SpecError,
    },
    /// `[environment]` is invalid.
    #[error("invalid manifest {path}: {source}")]
    Environment {
        /// The file.
        path: String,
        /// What is wrong.
        source: PolicyError,
    },
    /// `[trust]` is invalid.
    #[error("invalid manifest {path}: {source}")]
    Trust {
        /// The file.
        path: String,
        /// What is wrong.
        source: SignatureError,
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
        let manifest = Self::parse_unchecked(text, origin, base_dir)?;
        manifest.specs(&HostEnv::default())?;
        manifest.environment()?;
        Ok(manifest)
    }

    /// Parses manifest text without validating its entries (their limits,
    /// digests and reviewed grants): for a tool that fixes an entry, such as
    /// `dsh-env add`, which must read a manifest whose entry changed.
    pub fn parse_unchecked(
        text: &str,
        origin: &str,
        base_dir: PathBuf,
    ) -> Result<Self, ManifestError> {
        let mut manifest: Manifest = toml::from_str(text).map_err(|e| ManifestError::Parse {
            path: origin.to_string(),
            message: describe_toml_error(text, &e),
        })?;
        if manifest.hooks.is_some() {
            // Read again for its place only: errors about the hooks file
            // name the manifest line that named it.
            #[derive(Deserialize)]
            struct HooksOnly {
                hooks: toml::Spanned<String>,
            }
            manifest.hooks_at = toml::from_str::<HooksOnly>(text)
                .ok()
                .map(|only| line_column(text, only.hooks.span().start));
        }
        manifest.base_dir = base_dir;
        manifest.origin = origin.to_string();
        for (entry, line) in manifest.contributors.iter_mut().zip(entry_lines(text)) {
            entry.line = line;
        }
        Ok(manifest)
    }

    /// Every entry as a validated spec, in file order, with `grants.env`
    /// values taken from `host_env`. `[trust]` is checked too, but is not
    /// part of a spec: it is the registry's ([`crate::RegistryBuilder::trust`]).
    pub fn specs(&self, host_env: &HostEnv) -> Result<Vec<ContributorSpec>, ManifestError> {
        self.trust()?;
        (self.contributors.iter())
            .map(|entry| {
                let mut spec = (entry.to_spec(&self.base_dir, host_env)).map_err(|source| {
                    ManifestError::Entry {
                        path: self.origin.clone(),
                        path_in_manifest: entry.label(),
                        source,
                    }
                })?;
                spec.declared_at = entry.line.map(|line| format!("{}:{line}", self.origin));
                Ok(spec)
            })
            .collect()
    }

    /// The validated `[environment]` policy.
    pub fn environment(&self) -> Result<EnvironmentPolicy, ManifestError> {
        (self.environment.policy()).map_err(|source| ManifestError::Environment {
            path: self.origin.clone(),
            source,
        })
    }

    /// The validated `[trust]` table.
    pub fn trust(&self) -> Result<Trust, ManifestError> {
        (self.trust.trust()).map_err(|source| ManifestError::Trust {
            path: self.origin.clone(),
            source,
        })
    }

    /// The manifest's `home` as a setting naming this file: a relative
    /// path is resolved against the manifest's folder, as contributor
    /// paths are (`~` is left for [`crate::DshHome::resolve`] to expand).
    pub fn home_setting(&self) -> Option<HomeSetting> {
        let home = self.home.as_ref()?;
        let path = if home.trim().is_empty() || home.starts_with('~') {
            home.clone()
        } else {
            self.base_dir.join(home).display().to_string()
        };
        Some(HomeSetting {
            origin: self.origin.clone(),
            path,
        })
    }

    /// The manifest's `hooks` file, resolved against the manifest's folder,
    /// named with the manifest line that sets it.
    pub fn hooks_setting(&self) -> Option<HooksSetting> {
        let hooks = self.hooks.as_ref()?;
        let origin = match self.hooks_at {
            Some((line, column)) => format!(
                "`hooks` of manifest {}, line {line}, column {column}",
                self.origin
            ),
            None => format!("`hooks` of manifest {}", self.origin),
        };
        Some(HooksSetting {
            path: self.base_dir.join(hooks),
            origin,
        })
    }

    /// The files this manifest names whose content the host runs or trusts
    /// as it is, each read from the manifest's folder: its `hooks` (their
    /// commands run unsandboxed). Whoever approves the manifest approves
    /// these too. Components are not among them: they run in the sandbox,
    /// and `sha256` pins their bytes.
    pub fn files_run_as_is(&self) -> Vec<NamedFile> {
        (self.hooks_setting().into_iter())
            .map(|hooks| NamedFile {
                field: "hooks",
                path: hooks.path,
                max_bytes: MAX_HOOKS_BYTES,
            })
            .collect()
    }

    /// The absolute (or cwd-relative) path of a contributor's component, if
    /// its entry names a file rather than a `source`.
    pub fn component_path(&self, entry: &ContributorEntry) -> Option<PathBuf> {
        entry.path.as_ref().map(|path| self.base_dir.join(path))
    }
}

/// The line of each `[[contributor]]` header, in file order (`None` for an
/// entry with no header of its own, as in an inline array).
fn entry_lines(text: &str) -> Vec<Option<usize>> {
    /// The entries, each only where it starts: a table's span is its header's.
    #[derive(Deserialize)]
    struct Headers {
        #[serde(default)]
        contributor: Vec<toml::Spanned<serde::de::IgnoredAny>>,
    }
    let Ok(headers) = toml::from_str::<Headers>(text) else {
        return Vec::new();
    };
    (headers.contributor.iter())
        .map(|entry| {
            let start = entry.span().start;
            let before = text.get(..start)?;
            (text[start..].starts_with("[[")).then(|| before.matches('\n').count() + 1)
        })
        .collect()
}

/// A manifest's `hooks` file, and where the manifest names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HooksSetting {
    /// The file, resolved against the manifest's folder.
    pub path: PathBuf,
    /// The manifest's file, line and column, for messages.
    pub origin: String,
}

/// A file a manifest names that the host runs as it is
/// ([`Manifest::files_run_as_is`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedFile {
    /// The manifest field that names it, e.g. `hooks`.
    pub field: &'static str,
    /// The file, resolved against the manifest's folder.
    pub path: PathBuf,
    /// The most bytes it may have.
    pub max_bytes: u64,
}

/// The 1-based line and column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// The TOML error with its line and column, on one line, and a hint when
/// an entry was written as a table instead of an array of tables. The
/// message is escaped: it quotes the file's text (an unknown key's name).
fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = escape_controls(error.message().trim());
    let mut described = match error.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            format!("line {line}, column {column}: {message}")
        }
        None => message.to_string(),
    };
    if text.lines().any(|line| line.trim() == "[contributor]") {
        described.push_str(" (hint: write each entry as `[[contributor]]`, not `[contributor]`)");
    }
    described
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limits::Limits;
    use crate::spec::OnError;

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
        assert_eq!(
            manifest.component_path(a),
            Some(PathBuf::from("/base/a.wasm"))
        );
        assert_eq!(
            manifest.component_path(b),
            Some(PathBuf::from("/abs/b.wasm"))
        );
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
    fn an_unknown_key_in_any_table_is_named_escaped_with_the_known_ones() {
        let top = parse("\"homes\\u001b[2J\" = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            top.contains("unknown field `homes\\u{1b}[2J`, expected one of `home`, `hooks`, "),
            "{top}"
        );
        let entry = "[[contributor]]\npath = \"a.wasm\"\n";
        let (limits, grants) = (
            format!("{entry}[contributor.limits]"),
            format!("{entry}[contributor.grants]"),
        );
        for (table, known) in [
            ("[trust]", "expected `keys` or `require_signature`"),
            (
                "[environment]",
                "expected one of `inherit`, `exclude`, `set`, `include_only`",
            ),
            (
                entry,
                "expected one of `path`, `source`, `config`, `on_error`, ",
            ),
            (
                limits.as_str(),
                "expected one of `deadline_ms`, `memory_mib`, ",
            ),
            (grants.as_str(), "expected one of `config`, `env`, `cwd`"),
        ] {
            let err = parse(&format!("{table}\n\"typo\\u202e\" = 1\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("unknown field `typo\\u{{202e}}`, {known}")),
                "{table}: {err}"
            );
        }
    }

    #[test]
    fn a_single_bracket_entry_gets_a_hint() {
        let err = parse("[contributor]\npath = \"a.wasm\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("(hint: write each entry as `[[contributor]]`, not `[contributor]`)"),
            "{err}"
        );
        let err = parse("[[contributor]]\npath = 1\n")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hint"), "{err}");
    }

    #[test]
    fn a_relative_home_is_resolved_against_the_manifest_folder() {
        let home = |text: &str| parse(text).unwrap().home_setting().map(|s| s.path);
        assert_eq!(home("home = \"h\"\n").as_deref(), Some("/base/h"));
        assert_eq!(home("home = \"../h\"\n").as_deref(), Some("/base/../h"));
        assert_eq!(home("home = \"/abs\"\n").as_deref(), Some("/abs"));
        assert_eq!(home("home = \"~/h\"\n").as_deref(), Some("~/h"));
        assert_eq!(home(""), None);
        let setting = parse("home = \"h\"\n").unwrap().home_setting().unwrap();
        assert_eq!(setting.origin, "m.toml");
    }

    #[test]
    fn hooks_are_resolved_against_the_manifest_folder_naming_their_line() {
        let manifest = parse("home = \"h\"\nhooks = \"hooks/pre.json\"\n").unwrap();
        let setting = manifest.hooks_setting().unwrap();
        assert_eq!(setting.path, PathBuf::from("/base/hooks/pre.json"));
        assert_eq!(
            setting.origin,
            "`hooks` of manifest m.toml, line 2, column 9"
        );
        assert_eq!(
            manifest.files_run_as_is(),
            [NamedFile {
                field: "hooks",
                path: PathBuf::from("/base/hooks/pre.json"),
                max_bytes: MAX_HOOKS_BYTES,
            }]
        );
        assert_eq!(parse("").unwrap().hooks_setting(), None);
        assert_eq!(parse("").unwrap().files_run_as_is(), []);
        let err = parse("hooks = 3\n").unwrap_err().to_string();
        assert!(err.contains("line 1, column 9"), "{err}");
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

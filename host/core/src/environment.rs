//! The environment a command's child gets: a pure function of the inherited
//! environment, the caller's ordinary env and the overlay.
//!
//! The child's environment is built in this order, later entries winning:
//! 1. the inherited environment as the harness author's
//!    [`EnvironmentPolicy`] shapes it (`[environment]` in the manifest:
//!    `inherit`, `exclude`, `set`, `include_only`), then minus every `DSH_*`
//!    name (case-insensitive) and minus credentials, by the table of
//!    [`ScrubPolicy`], which always applies last;
//! 2. the terminal settings for model-driven shells ([`TERMINAL_SETTINGS`]);
//! 3. the caller's ordinary `env` (no `DSH_*` name allowed);
//! 4. the overlay.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fmt;

use serde::Deserialize;

use crate::keys::is_managed_name;
use crate::overlay::Overlay;
use dsh_env_support::input::escape_controls;

/// Settings that keep model-driven shells plain: no colour, no pager.
pub const TERMINAL_SETTINGS: [(&str, &str); 4] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// Whole `_`-separated parts of a name, compared case-insensitively, that
/// make an inherited variable a credential: `API_KEY` and `GH_PAT` go, while
/// `KEYBOARD`, `TOKENIZERS_PARALLELISM` and `SECRETARY` stay.
pub const CREDENTIAL_NAME_PARTS: [&str; 16] = [
    "KEY",
    "APIKEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "PASSPHRASE",
    "PWD",
    "AUTH",
    "CREDENTIAL",
    "CREDENTIALS",
    "JWT",
    "PAT",
    "COOKIE",
    "DSN",
];

/// Whole names (case-insensitive) of credentials that no name part catches
/// (Azure's storage connection string holds the account key).
pub const KNOWN_CREDENTIAL_NAMES: [&str; 3] =
    ["PGPASSWORD", "SSHPASS", "AZURE_STORAGE_CONNECTION_STRING"];

/// A family of config-shaped names a tool reads credentials from, which the
/// name parts miss (`npm_config__authToken`, `GIT_CONFIG_VALUE_0`): a name
/// with this prefix whose rest holds one of the markers, both compared
/// case-insensitively (npm reads its `npm_config_*` names in any case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CredentialFamily {
    /// The tool, as the scrub's reason names it.
    pub tool: &'static str,
    /// The names' prefix.
    pub prefix: &'static str,
    /// Substrings of the rest of the name, one of which makes it a credential.
    pub markers: &'static [&'static str],
}

/// The config-shaped credential families: npm's auth settings, global or
/// per registry (`_auth`, `_authToken`, `_password`, `//host/:_authToken`)
/// and its one-time password; yarn's `npm*Auth*` settings; git's config
/// through the environment (`GIT_CONFIG_COUNT` with `GIT_CONFIG_KEY_n` and
/// `GIT_CONFIG_VALUE_n`, and `GIT_CONFIG_PARAMETERS`), which can carry an
/// `http.extraHeader` or a credential helper, scrubbed whole so that git
/// never sees half a list.
pub const CREDENTIAL_FAMILIES: [CredentialFamily; 3] = [
    CredentialFamily {
        tool: "npm",
        prefix: "NPM_CONFIG_",
        markers: &["_AUTH", "_PASSWORD", "OTP"],
    },
    CredentialFamily {
        tool: "yarn",
        prefix: "YARN_",
        markers: &["AUTH"],
    },
    CredentialFamily {
        tool: "git",
        prefix: "GIT_CONFIG_",
        markers: &["COUNT", "KEY_", "VALUE_", "PARAMETERS"],
    },
];

/// Names of package index URLs (pip's and uv's) whose user info alone is a
/// credential: a private index is often `https://TOKEN@host/simple`, with no
/// password after the token. Scrubbed when the value has user info;
/// kept otherwise, as a plain index URL is no secret and tools need it.
pub const INDEX_URL_NAMES: [&str; 6] = [
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_INDEX",
    "UV_DEFAULT_INDEX",
];

/// Names a name part would catch that hold no secret, kept by default:
/// the shell's own `PWD` and `OLDPWD`; `SSH_AUTH_SOCK`, a capability rather
/// than a secret (the agent's socket lets the child ask for signatures, never
/// read a key, and scrubbing it breaks `git push` over ssh); and `pass(1)`'s
/// settings under `PASSWORD_STORE_` (paths, key ids, options). A
/// [`ScrubPolicy`] can scrub any of them by name.
pub const KEPT_NAMES: [&str; 3] = ["PWD", "OLDPWD", "SSH_AUTH_SOCK"];

/// The name prefix of `pass(1)`'s settings, kept like [`KEPT_NAMES`].
const PASSWORD_STORE_PREFIX: &str = "PASSWORD_STORE_";

/// Why an inherited variable was kept out of the child. Never holds the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrubReason {
    /// In the managed `DSH_*` namespace: only the overlay may set it.
    ManagedNamespace,
    /// The name is not UTF-8, so no rule can read it.
    NonUtf8Name,
    /// Named by the caller's [`ScrubPolicy`].
    Policy,
    /// One of [`KNOWN_CREDENTIAL_NAMES`].
    KnownName,
    /// A whole part of the name is one of [`CREDENTIAL_NAME_PARTS`].
    NamePart(&'static str),
    /// The value holds a URL with a password: `scheme://user:password@host`.
    UrlPassword,
    /// One of the [`CREDENTIAL_FAMILIES`], named by its tool.
    ToolConfig(&'static str),
    /// One of [`INDEX_URL_NAMES`], its URL carrying user info.
    IndexUrlUserinfo,
}

impl ScrubReason {
    /// A stable identifier of the rule, for JSON.
    pub fn rule(&self) -> &'static str {
        match self {
            ScrubReason::ManagedNamespace => "managed-namespace",
            ScrubReason::NonUtf8Name => "non-utf8-name",
            ScrubReason::Policy => "policy",
            ScrubReason::KnownName => "known-name",
            ScrubReason::NamePart(_) => "name-part",
            ScrubReason::UrlPassword => "url-password",
            ScrubReason::ToolConfig(_) => "tool-config",
            ScrubReason::IndexUrlUserinfo => "index-url-userinfo",
        }
    }
}

impl std::fmt::Display for ScrubReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScrubReason::ManagedNamespace => {
                f.write_str("managed DSH_* namespace: only the overlay sets it")
            }
            ScrubReason::NonUtf8Name => f.write_str("name is not UTF-8"),
            ScrubReason::Policy => f.write_str("named in the scrub policy"),
            ScrubReason::KnownName => f.write_str("known credential name"),
            ScrubReason::NamePart(part) => write!(f, "name part `{part}`"),
            ScrubReason::UrlPassword => f.write_str("password in a URL value"),
            ScrubReason::ToolConfig(tool) => write!(f, "{tool} credential setting"),
            ScrubReason::IndexUrlUserinfo => f.write_str("user info in a package index URL"),
        }
    }
}

/// Which inherited variables a child does not get. The default is the
/// documented table: the `DSH_*` namespace, [`KNOWN_CREDENTIAL_NAMES`],
/// [`CREDENTIAL_NAME_PARTS`], [`CREDENTIAL_FAMILIES`], [`INDEX_URL_NAMES`]
/// with user info, and values with a password in a URL, minus
/// [`KEPT_NAMES`]. A caller can scrub more names, or keep some the
/// credential rules would scrub; nothing keeps a `DSH_*` name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrubPolicy {
    /// Also scrubbed, compared case-insensitively (e.g. `SSH_AUTH_SOCK`).
    pub scrub: BTreeSet<String>,
    /// Kept although a credential rule would scrub them, compared exactly.
    pub keep: BTreeSet<String>,
}

impl ScrubPolicy {
    /// The default table, also scrubbing `names`.
    pub fn also_scrubbing<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        ScrubPolicy {
            scrub: names.into_iter().map(Into::into).collect(),
            keep: BTreeSet::new(),
        }
    }

    /// Whether the inherited variable `name=value` is scrubbed, and by which rule.
    pub fn reason(&self, name: &OsStr, value: &OsStr) -> Option<ScrubReason> {
        let Some(name) = name.to_str() else {
            return Some(ScrubReason::NonUtf8Name);
        };
        if is_managed_name(name) {
            return Some(ScrubReason::ManagedNamespace);
        }
        if self.scrub.iter().any(|s| s.eq_ignore_ascii_case(name)) {
            return Some(ScrubReason::Policy);
        }
        if self.keep.contains(name)
            || KEPT_NAMES.contains(&name)
            || name.starts_with(PASSWORD_STORE_PREFIX)
        {
            return None;
        }
        if KNOWN_CREDENTIAL_NAMES
            .iter()
            .any(|known| known.eq_ignore_ascii_case(name))
        {
            return Some(ScrubReason::KnownName);
        }
        for part in name.split('_') {
            if let Some(word) = CREDENTIAL_NAME_PARTS
                .iter()
                .find(|word| word.eq_ignore_ascii_case(part))
            {
                return Some(ScrubReason::NamePart(word));
            }
        }
        let upper = name.to_ascii_uppercase();
        let family = CREDENTIAL_FAMILIES.iter().find(|family| {
            upper
                .strip_prefix(family.prefix)
                .is_some_and(|rest| family.markers.iter().any(|marker| rest.contains(marker)))
        });
        if let Some(family) = family {
            return Some(ScrubReason::ToolConfig(family.tool));
        }
        let value = value.to_string_lossy();
        if INDEX_URL_NAMES.contains(&upper.as_str()) && url_userinfo(&value, false) {
            return Some(ScrubReason::IndexUrlUserinfo);
        }
        url_userinfo(&value, true).then_some(ScrubReason::UrlPassword)
    }
}

/// Whether `value` holds `scheme://user:password@` (a non-empty password)
/// anywhere, e.g. `postgres://app:pw@db/x` but not `http://proxy:3128`; or,
/// without `password`, any `scheme://userinfo@`.
fn url_userinfo(value: &str, password: bool) -> bool {
    value.match_indices("://").any(|(at, _)| {
        let scheme = value[..at]
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || "+.-".contains(c)))
            .next()
            .unwrap_or_default();
        let authority = value[at + 3..]
            .split(|c: char| "/?#".contains(c) || c.is_whitespace())
            .next()
            .unwrap_or_default();
        let userinfo = authority.rsplit_once('@').map(|(userinfo, _)| userinfo);
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && match (userinfo, password) {
                (Some(userinfo), false) => !userinfo.is_empty(),
                (userinfo, _) => userinfo
                    .and_then(|userinfo| userinfo.split_once(':'))
                    .is_some_and(|(_, password)| !password.is_empty()),
            }
    })
}

/// Whether the inherited variable `name=value` is scrubbed under the default
/// [`ScrubPolicy`], and why.
pub fn scrub_reason(name: &OsStr, value: &OsStr) -> Option<ScrubReason> {
    ScrubPolicy::default().reason(name, value)
}
/// Which inherited variables a child starts from (`[environment] inherit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Inherit {
    /// Every inherited variable (then the rest of the policy and the scrub).
    #[default]
    All,
    /// Only [`CORE_NAMES`].
    Core,
    /// None.
    None,
}

/// The variables `inherit = "core"` keeps (Codex's core set).
pub const CORE_NAMES: [&str; 9] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "USER", "USERNAME", "TMPDIR", "TEMP", "TMP",
];

/// A variable-name pattern of `[environment]`: `*` matches any run of
/// characters and `?` one, in any case (`AWS_*`, `*_PROXY`).
#[derive(Debug, Clone)]
pub struct NamePattern {
    text: String,
    regex: regex::Regex,
}

impl NamePattern {
    /// The pattern `text`.
    pub fn new(text: &str) -> Result<Self, PolicyError> {
        let body: String = (text.split_inclusive(['*', '?']))
            .map(|part| match part.strip_suffix(['*', '?']) {
                Some(literal) if part.ends_with('*') => format!("{}.*", regex::escape(literal)),
                Some(literal) => format!("{}.", regex::escape(literal)),
                None => regex::escape(part),
            })
            .collect();
        let regex = regex::RegexBuilder::new(&format!("^(?:{body})$"))
            .case_insensitive(true)
            .build()
            .map_err(|_| PolicyError::Pattern(text.to_string()))?;
        Ok(NamePattern {
            text: text.to_string(),
            regex,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }
}

impl PartialEq for NamePattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for NamePattern {}

/// What a child inherits, as a harness author tunes it: `[environment]` in
/// the manifest, after Codex's `shell_environment_policy`. Applied in the
/// order `inherit`, `exclude`, `set`, `include_only`; the [`ScrubPolicy`]
/// (the `DSH_*` namespace and credentials) always applies after it, to what
/// `set` adds too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvironmentPolicy {
    /// Which inherited variables the child starts from.
    pub inherit: Inherit,
    /// Inherited variables removed, by name pattern.
    pub exclude: Vec<NamePattern>,
    /// Variables every child gets (no `DSH_*` name).
    pub set: BTreeMap<String, String>,
    /// When not empty, only variables matching one of these are kept.
    pub include_only: Vec<NamePattern>,
    /// The credential and `DSH_*` scrub, applied last.
    pub scrub: ScrubPolicy,
}

/// Why an `[environment]` table cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A name pattern that does not compile.
    #[error("environment pattern `{}` is invalid", escape_controls(.0))]
    Pattern(String),
    /// `set` names a variable in the managed namespace.
    #[error("environment.set cannot set `{}`: only the overlay sets DSH_* names", escape_controls(.0))]
    ManagedName(String),
    /// `set` names something that cannot be a variable, or a value with NUL.
    #[error("environment.set `{}` is not a valid variable (empty name, `=` or NUL)", escape_controls(.0))]
    InvalidVariable(String),
}

/// Why a variable is not in the child, or how `set` put it there; never
/// holds a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvRule {
    /// Not inherited under `inherit = "core"` or `"none"`.
    NotInherited(Inherit),
    /// Removed by this `exclude` pattern.
    Excluded(String),
    /// Matched no `include_only` pattern.
    NotIncluded,
    /// Removed by the scrub.
    Scrubbed(ScrubReason),
}

impl EnvRule {
    /// A stable identifier of the rule, for JSON.
    pub fn rule(&self) -> &'static str {
        match self {
            EnvRule::NotInherited(_) => "inherit",
            EnvRule::Excluded(_) => "exclude",
            EnvRule::NotIncluded => "include-only",
            EnvRule::Scrubbed(reason) => reason.rule(),
        }
    }
}

impl fmt::Display for EnvRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvRule::NotInherited(Inherit::Core) => f.write_str("[environment] inherit = \"core\""),
            EnvRule::NotInherited(_) => f.write_str("[environment] inherit = \"none\""),
            EnvRule::Excluded(pattern) => {
                write!(f, "[environment] exclude `{}`", escape_controls(pattern))
            }
            EnvRule::NotIncluded => f.write_str("matches no [environment] include_only pattern"),
            EnvRule::Scrubbed(reason) => reason.fmt(f),
        }
    }
}

impl EnvironmentPolicy {
    /// The policy from `[environment]`'s fields, checked.
    pub fn new(
        inherit: Inherit,
        exclude: &[String],
        set: BTreeMap<String, String>,
        include_only: &[String],
    ) -> Result<Self, PolicyError> {
        let patterns = |texts: &[String]| -> Result<Vec<NamePattern>, PolicyError> {
            texts.iter().map(|t| NamePattern::new(t)).collect()
        };
        for (name, value) in &set {
            if is_managed_name(name) {
                return Err(PolicyError::ManagedName(name.clone()));
            }
            if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
                return Err(PolicyError::InvalidVariable(name.clone()));
            }
        }
        Ok(EnvironmentPolicy {
            inherit,
            exclude: patterns(exclude)?,
            set,
            include_only: patterns(include_only)?,
            scrub: ScrubPolicy::default(),
        })
    }

    /// The rule that keeps the inherited `name=value` out of the child, if any.
    pub fn inherited_rule(&self, name: &OsStr, value: &OsStr) -> Option<EnvRule> {
        if let Some(text) = name.to_str() {
            match self.inherit {
                Inherit::All => {}
                Inherit::Core if CORE_NAMES.contains(&text) => {}
                other => return Some(EnvRule::NotInherited(other)),
            }
            if let Some(pattern) = self.exclude.iter().find(|p| p.matches(text)) {
                return Some(EnvRule::Excluded(pattern.text.clone()));
            }
            if self.set.contains_key(text) {
                // Replaced by `set`, which [`Self::set_rule`] judges.
                return None;
            }
        }
        self.kept_rule(name, value)
    }

    /// The rule that keeps the `set` variable `name=value` out of the child, if any.
    pub fn set_rule(&self, name: &str, value: &str) -> Option<EnvRule> {
        self.kept_rule(OsStr::new(name), OsStr::new(value))
    }

    /// Every variable of this process's environment that a child would not
    /// inherit under this policy, by name (never its value), sorted, with
    /// the rule that removes it: what `explain` shows.
    pub fn scrubbed_from_process(&self) -> Vec<(String, EnvRule)> {
        let mut scrubbed: Vec<(String, EnvRule)> = std::env::vars_os()
            .filter_map(|(name, value)| {
                let rule = self.inherited_rule(&name, &value)?;
                Some((name.to_string_lossy().into_owned(), rule))
            })
            .collect();
        scrubbed.sort_by(|a, b| a.0.cmp(&b.0));
        scrubbed
    }

    /// `include_only`, then the scrub.
    fn kept_rule(&self, name: &OsStr, value: &OsStr) -> Option<EnvRule> {
        let included = self.include_only.is_empty()
            || name
                .to_str()
                .is_some_and(|text| self.include_only.iter().any(|p| p.matches(text)));
        if !included {
            return Some(EnvRule::NotIncluded);
        }
        self.scrub.reason(name, value).map(EnvRule::Scrubbed)
    }

    /// The base of a child's environment: `inherited` and `set`, as the
    /// policy and the scrub leave them.
    fn base(
        &self,
        inherited: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> BTreeMap<OsString, OsString> {
        let mut base: BTreeMap<OsString, OsString> = (inherited.into_iter())
            .filter(|(name, value)| self.inherited_rule(name, value).is_none())
            .collect();
        base.extend(
            (self.set.iter())
                .filter(|(name, value)| self.set_rule(name, value).is_none())
                .map(|(name, value)| (name.into(), value.into())),
        );
        base
    }
}

/// Why the caller's ordinary `env` cannot be given to a child.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// The ordinary `env` held a managed name.
    #[error("env variable `{0}` is in the managed DSH_* namespace; only the overlay may set it")]
    ManagedNameInEnv(String),
    /// An `env` name that cannot be a variable name.
    #[error("env variable name `{0}` is invalid (empty, or holds `=` or NUL)")]
    InvalidName(String),
    /// An `env` value with a NUL byte.
    #[error("env variable `{0}` has a NUL byte in its value")]
    NulInValue(String),
}

/// The child's environment, in spawn order. `inherited` is normally
/// `std::env::vars_os()`, shaped by `policy` (names that are not UTF-8 are
/// always removed).
pub fn child_environment(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    env: &BTreeMap<String, String>,
    dsh_env: &Overlay,
    policy: &EnvironmentPolicy,
) -> Result<BTreeMap<OsString, OsString>, EnvError> {
    for (name, value) in env {
        if is_managed_name(name) {
            return Err(EnvError::ManagedNameInEnv(name.clone()));
        }
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(EnvError::InvalidName(name.clone()));
        }
        if value.contains('\0') {
            return Err(EnvError::NulInValue(name.clone()));
        }
    }
    let mut child = policy.base(inherited);
    child.extend(TERMINAL_SETTINGS.iter().map(|(k, v)| (k.into(), v.into())));
    child.extend(env.iter().map(|(k, v)| (k.into(), v.into())));
    child.extend(dsh_env.iter().map(|(k, v)| (k.as_str().into(), v.into())));
    Ok(child)
}
#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn reason(name: &str, value: &str) -> Option<ScrubReason> {
        scrub_reason(OsStr::new(name), OsStr::new(value))
    }

    #[test]
    fn the_scrub_table_removes_credentials() {
        use ScrubReason::*;
        let removed = [
            ("DSH_STALE", "x", ManagedNamespace),
            ("dsh_lower", "x", ManagedNamespace),
            ("MY_API_TOKEN", "t", NamePart("TOKEN")),
            ("aws_secret_access_key", "k", NamePart("SECRET")),
            ("DB_PASSWORD", "p", NamePart("PASSWORD")),
            ("MYSQL_PWD", "p", NamePart("PWD")),
            ("DB_PASSWD", "p", NamePart("PASSWD")),
            ("SMTP_PASS", "p", NamePart("PASS")),
            ("BORG_PASSPHRASE", "p", NamePart("PASSPHRASE")),
            ("CI_JOB_JWT", "j", NamePart("JWT")),
            ("DOCKER_AUTH_CONFIG", "{}", NamePart("AUTH")),
            ("GH_PAT", "g", NamePart("PAT")),
            ("NPM_AUTH", "n", NamePart("AUTH")),
            (
                "GOOGLE_APPLICATION_CREDENTIALS",
                "/k.json",
                NamePart("CREDENTIALS"),
            ),
            ("GIT_CREDENTIAL", "c", NamePart("CREDENTIAL")),
            ("SESSION_COOKIE", "c", NamePart("COOKIE")),
            ("OPENAI_APIKEY", "k", NamePart("APIKEY")),
            ("SENTRY_DSN", "https://k@o.ingest/1", NamePart("DSN")),
            ("SSH_KEY_PATH", "/k", NamePart("KEY")),
            ("api_key", "k", NamePart("KEY")),
            ("PGPASSWORD", "p", KnownName),
            ("sshpass", "p", KnownName),
            ("DATABASE_URL", "postgres://user:pw@host/db", UrlPassword),
            ("HTTPS_PROXY", "http://user:pw@proxy", UrlPassword),
            ("MIRRORS", "ftp://a, https://u:p@b:8080/x", UrlPassword),
            ("REMOTE", "git+ssh://:tok@host", UrlPassword),
        ];
        for (name, value, expected) in removed {
            assert_eq!(reason(name, value), Some(expected), "{name}={value}");
        }
    }

    #[test]
    fn the_scrub_table_keeps_look_alikes() {
        let kept = [
            ("PATH", "/bin"),
            ("TOKENIZERS_PARALLELISM", "false"),
            ("KEYBOARD", "us"),
            ("SECRETARY", "x"),
            ("PASSWORD_STORE_DIR", "/p"),
            ("PASSWORD_STORE_KEY", "0xABCD"),
            ("PWD", "/w"),
            ("OLDPWD", "/v"),
            ("SSH_AUTH_SOCK", "/run/agent.sock"),
            ("GIT_ASKPASS", "/bin/askpass"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("HTTP_PROXY", "http://user@proxy:3128"),
            ("NO_PROXY", "localhost,127.0.0.1"),
            ("NOTE", "see https://example.test/a:b@c"),
            ("FTP_MIRROR", "ftp://anonymous:@host"),
            ("XAUTHORITY", "/x"),
        ];
        for (name, value) in kept {
            assert_eq!(reason(name, value), None, "{name}={value}");
        }
        assert_eq!(
            ScrubPolicy::default().reason(
                std::os::unix::ffi::OsStrExt::from_bytes(b"BAD\xff"),
                OsStr::new("x")
            ),
            Some(ScrubReason::NonUtf8Name)
        );
    }

    #[test]
    fn a_policy_scrubs_more_or_keeps_a_credential_but_never_dsh() {
        let policy = ScrubPolicy {
            scrub: ["ssh_auth_sock".to_string()].into(),
            keep: ["GH_TOKEN".to_string(), "DSH_X".to_string()].into(),
        };
        let of = |name: &str| policy.reason(OsStr::new(name), OsStr::new("v"));
        assert_eq!(of("SSH_AUTH_SOCK"), Some(ScrubReason::Policy));
        assert_eq!(of("GH_TOKEN"), None);
        assert_eq!(of("gh_token"), Some(ScrubReason::NamePart("TOKEN")));
        assert_eq!(of("DSH_X"), Some(ScrubReason::ManagedNamespace));
        let ssh = EnvironmentPolicy {
            scrub: ScrubPolicy::also_scrubbing(["SSH_AUTH_SOCK"]),
            ..EnvironmentPolicy::default()
        };
        let built = child_environment(
            vars(&[("SSH_AUTH_SOCK", "/s"), ("PATH", "/bin")]),
            &BTreeMap::new(),
            &Overlay::default(),
            &ssh,
        )
        .unwrap();
        assert!(!built.contains_key(OsStr::new("SSH_AUTH_SOCK")));
        assert!(built.contains_key(OsStr::new("PATH")));
    }

    #[test]
    fn reasons_name_the_rule_never_the_value() {
        let shown = [
            (
                ScrubReason::NamePart("TOKEN"),
                "name-part",
                "name part `TOKEN`",
            ),
            (
                ScrubReason::KnownName,
                "known-name",
                "known credential name",
            ),
            (
                ScrubReason::UrlPassword,
                "url-password",
                "password in a URL value",
            ),
            (
                ScrubReason::ManagedNamespace,
                "managed-namespace",
                "managed DSH_* namespace: only the overlay sets it",
            ),
        ];
        for (reason, rule, text) in shown {
            assert_eq!((reason.rule(), reason.to_string().as_str()), (rule, text));
        }
    }

    #[test]
    fn environment_order_is_inherited_terminal_env_overlay() {
        let inherited = vars(&[
            ("PATH", "/bin"),
            ("TERM", "xterm"),
            ("DSH_OLD", "x"),
            ("GH_TOKEN", "t"),
        ]);
        let env = BTreeMap::from([
            ("PAGER".to_string(), "less".to_string()),
            ("GH_TOKEN".to_string(), "explicit".to_string()),
        ]);
        let built = child_environment(
            inherited,
            &env,
            &Overlay::default(),
            &EnvironmentPolicy::default(),
        )
        .unwrap();
        let get = |k: &str| built.get(&OsString::from(k)).map(|v| v.to_str().unwrap());
        assert_eq!(get("PATH"), Some("/bin"));
        assert_eq!(
            get("TERM"),
            Some("dumb"),
            "terminal settings beat inherited"
        );
        assert_eq!(
            get("PAGER"),
            Some("less"),
            "the caller's env beats terminal settings"
        );
        assert_eq!(
            get("GH_TOKEN"),
            Some("explicit"),
            "a deliberately passed credential survives"
        );
        assert_eq!(get("DSH_OLD"), None);
    }

    #[test]
    fn managed_or_malformed_env_is_refused() {
        let refuse = |name: &str, value: &str| {
            let env = BTreeMap::from([(name.to_string(), value.to_string())]);
            child_environment(
                vars(&[]),
                &env,
                &Overlay::default(),
                &EnvironmentPolicy::default(),
            )
            .unwrap_err()
            .to_string()
        };
        assert_eq!(
            refuse("DSH_X", "1"),
            "env variable `DSH_X` is in the managed DSH_* namespace; only the overlay may set it"
        );
        assert!(refuse("dsh_x", "1").contains("`dsh_x` is in the managed"));
        assert!(refuse("A=B", "1").contains("invalid"));
        assert!(refuse("A", "x\0y").contains("NUL"));
    }

    #[test]
    fn the_policy_shapes_what_is_inherited_and_the_scrub_still_applies() {
        let policy = EnvironmentPolicy::new(
            Inherit::All,
            &["aws_*".to_string(), "?_PROXY".to_string()],
            BTreeMap::from([
                ("CI".to_string(), "1".to_string()),
                ("DEPLOY_TOKEN".to_string(), "set".to_string()),
            ]),
            &[
                "PATH".to_string(),
                "HOME".to_string(),
                "C*".to_string(),
                "DEPLOY_*".to_string(),
            ],
        )
        .unwrap();
        let inherited = vars(&[
            ("PATH", "/bin"),
            ("HOME", "/h"),
            ("AWS_REGION", "eu"),
            ("X_PROXY", "p"),
            ("COLUMNS", "80"),
            ("EDITOR", "vi"),
            ("CI", "0"),
        ]);
        let built =
            child_environment(inherited, &BTreeMap::new(), &Overlay::default(), &policy).unwrap();
        let get = |k: &str| built.get(&OsString::from(k)).map(|v| v.to_str().unwrap());
        assert_eq!(
            (get("PATH"), get("HOME"), get("COLUMNS")),
            (Some("/bin"), Some("/h"), Some("80"))
        );
        assert_eq!(get("CI"), Some("1"), "set replaces the inherited value");
        assert_eq!(
            (get("AWS_REGION"), get("X_PROXY"), get("EDITOR")),
            (None, None, None)
        );
        assert_eq!(
            get("DEPLOY_TOKEN"),
            None,
            "the scrub applies to what set adds"
        );
        let rule = |name: &str| policy.inherited_rule(OsStr::new(name), OsStr::new("v"));
        assert_eq!(rule("AWS_REGION"), Some(EnvRule::Excluded("aws_*".into())));
        assert_eq!(rule("EDITOR"), Some(EnvRule::NotIncluded));
        assert_eq!(
            policy.set_rule("DEPLOY_TOKEN", "set"),
            Some(EnvRule::Scrubbed(ScrubReason::NamePart("TOKEN")))
        );

        let core = EnvironmentPolicy::new(Inherit::Core, &[], BTreeMap::new(), &[]).unwrap();
        let of = |name: &str| core.inherited_rule(OsStr::new(name), OsStr::new("v"));
        assert_eq!(of("PATH"), None);
        assert_eq!(of("EDITOR"), Some(EnvRule::NotInherited(Inherit::Core)));
        assert_eq!(
            EnvironmentPolicy::new(
                Inherit::All,
                &[],
                BTreeMap::from([("DSH_X".into(), "1".into())]),
                &[]
            ),
            Err(PolicyError::ManagedName("DSH_X".into()))
        );
    }
}

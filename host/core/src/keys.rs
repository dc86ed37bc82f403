//! The `DSH_*` namespace: the one prefix, dsh-env's built-in keys and their
//! owner, and the validated key type that every managed key passes through.

use std::fmt;

/// The namespace every managed key lives in.
pub const DSH_ENV_PREFIX: &str = "DSH_";

/// Harness home directory; always present, owned by dsh-env.
pub const DSH_HOME: &str = "DSH_HOME";
/// Marks a shell started by dsh-env; always `1`, owned by dsh-env.
pub const DSH_SHELL: &str = "DSH_SHELL";
/// The calling agent's session id; present when the call has an agent.
pub const DSH_SESSION_ID: &str = "DSH_SESSION_ID";

/// The owner shown for dsh-env's built-in keys; no contributor may take the name.
pub const BUILTIN_OWNER: &str = "dsh-env";

/// dsh-env's built-in keys with their descriptions: the one table that the
/// reserved keys and the key listing are read from.
pub(crate) const BUILTIN_KEYS: [(&str, &str); 3] = [
    (DSH_HOME, "The harness home directory (absolute)."),
    (DSH_SHELL, "Always 1: this shell was started by dsh-env."),
    (
        DSH_SESSION_ID,
        "The calling agent's session id; absent for a call with no agent.",
    ),
];

/// Keys that only dsh-env itself may set.
pub const RESERVED_KEYS: [&str; 3] = [BUILTIN_KEYS[0].0, BUILTIN_KEYS[1].0, BUILTIN_KEYS[2].0];

/// Whether an environment variable name is in the managed namespace,
/// compared case-insensitively (so `dsh_x` is scrubbed like `DSH_X`).
pub fn is_managed_name(name: &str) -> bool {
    name.len() >= DSH_ENV_PREFIX.len()
        && name.as_bytes()[..DSH_ENV_PREFIX.len()].eq_ignore_ascii_case(DSH_ENV_PREFIX.as_bytes())
}

/// Why a string is not a valid managed key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The key does not start with `DSH_` (exact case).
    #[error("does not start with `{DSH_ENV_PREFIX}`")]
    MissingPrefix,
    /// The part after `DSH_` does not match `^[A-Z][A-Z0-9_]*$`.
    #[error("the part after `{DSH_ENV_PREFIX}` must match ^[A-Z][A-Z0-9_]*$")]
    BadSuffix,
}

/// A managed key: `DSH_` followed by `[A-Z][A-Z0-9_]*`. It cannot be built
/// without passing those rules.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct DshKey(String);

impl DshKey {
    /// Validates `key` as a managed key.
    pub fn new(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        let suffix = key
            .strip_prefix(DSH_ENV_PREFIX)
            .ok_or(KeyError::MissingPrefix)?;
        let mut chars = suffix.bytes();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_uppercase());
        let rest_ok = chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_');
        if first_ok && rest_ok {
            Ok(DshKey(key))
        } else {
            Err(KeyError::BadSuffix)
        }
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this key belongs to dsh-env's built-ins.
    pub fn is_reserved(&self) -> bool {
        RESERVED_KEYS.contains(&self.0.as_str())
    }
}

impl fmt::Display for DshKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl AsRef<str> for DshKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for DshKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_well_formed_keys() {
        for key in ["DSH_A", "DSH_GIT_BRANCH", "DSH_X9_", "DSH_HOME"] {
            assert_eq!(DshKey::new(key).unwrap().as_str(), key);
        }
    }

    #[test]
    fn rejects_malformed_keys() {
        assert_eq!(DshKey::new("GIT_BRANCH"), Err(KeyError::MissingPrefix));
        assert_eq!(DshKey::new("dsh_branch"), Err(KeyError::MissingPrefix));
        for key in ["DSH_", "DSH_lower", "DSH_9X", "DSH__X", "DSH_A-B", "DSH_É"] {
            assert_eq!(DshKey::new(key), Err(KeyError::BadSuffix), "{key}");
        }
    }

    #[test]
    fn reserved_keys_are_recognised() {
        assert!(DshKey::new("DSH_SESSION_ID").unwrap().is_reserved());
        assert!(!DshKey::new("DSH_SESSION").unwrap().is_reserved());
    }

    #[test]
    fn managed_names_match_case_insensitively() {
        assert!(is_managed_name("DSH_X"));
        assert!(is_managed_name("dsh_x"));
        assert!(is_managed_name("Dsh_"));
        assert!(!is_managed_name("DSH"));
        assert!(!is_managed_name("XDSH_"));
    }
}

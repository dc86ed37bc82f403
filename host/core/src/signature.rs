//! Minisign signatures: the keys a manifest trusts (`[trust]`), and who
//! signed a component. A signature is checked on the bytes that are
//! compiled, like a `sha256` pin.

use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use minisign_verify::{PublicKey, Signature};

use dsh_env_support::input::{ReadProblem, escape_controls, read_regular_text};

/// The largest signature file read: a minisign signature is about 300 bytes,
/// plus its trusted comment.
pub const MAX_SIGNATURE_BYTES: u64 = 8 << 10;

/// A minisign key id, shown as minisign shows it: uppercase hex, without
/// leading zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId([u8; 8]);

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}", u64::from_le_bytes(self.0))
    }
}

impl serde::Serialize for KeyId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The key id inside decoded key or signature bytes (after the 2-byte
/// algorithm), if they are long enough.
fn key_id_at(bytes: &[u8]) -> Option<KeyId> {
    Some(KeyId(bytes.get(2..10)?.try_into().ok()?))
}

/// A public key the manifest trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TrustedKey {
    id: KeyId,
    key: PublicKey,
}

/// Which signers are trusted, and whether a signature is required: the
/// manifest's `[trust]`. The default trusts nobody and checks nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trust {
    keys: Vec<TrustedKey>,
    require_signature: bool,
}

/// Who signed a component.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Signer {
    /// Verified under a trusted key.
    Trusted {
        /// The key that signed it.
        key_id: KeyId,
        /// The signature's trusted comment (signed too; usually a timestamp
        /// and file name).
        trusted_comment: String,
    },
    /// Signed, but no `[trust]` key was given, so nothing was verified.
    Unverified {
        /// The key id the signature names.
        key_id: Option<KeyId>,
    },
    /// No signature, and none is required.
    Unsigned,
}

impl fmt::Display for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Signer::Trusted {
                key_id,
                trusted_comment,
            } => write!(
                f,
                "signed by trusted key {key_id} ({})",
                escape_controls(trusted_comment)
            ),
            Signer::Unverified { key_id: Some(id) } => {
                write!(f, "signed by key {id}, not verified (no [trust] keys)")
            }
            Signer::Unverified { key_id: None } => {
                write!(
                    f,
                    "has a malformed signature, not verified (no [trust] keys)"
                )
            }
            Signer::Unsigned => write!(f, "unsigned"),
        }
    }
}

/// Why a signature or a `[trust]` table was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A `[trust]` key is not a minisign public key.
    #[error("trust.keys[{index}] is not a minisign public key (the base64 line of a .pub file)")]
    BadKey {
        /// Its position in `keys`.
        index: usize,
    },
    /// `require_signature` without a key to verify with.
    #[error("trust.require_signature is true, but trust.keys is empty")]
    NoKeys,
    /// A signature is required and there is none.
    #[error(
        "{} is not signed ({} not found), and the manifest requires a signature",
        escape_controls(.origin),
        escape_controls(.signature)
    )]
    Unsigned {
        /// The component.
        origin: String,
        /// Where its signature was looked for.
        signature: String,
    },
    /// The signature file could not be read or parsed.
    #[error(
        "{}: its signature {} cannot be used: {}",
        escape_controls(.origin),
        escape_controls(.signature),
        escape_controls(.reason)
    )]
    Malformed {
        /// The component.
        origin: String,
        /// The signature's location.
        signature: String,
        /// What is wrong.
        reason: String,
    },
    /// Signed by a key the manifest does not trust.
    #[error(
        "{} is signed by key {key_id}, which is not in [trust] keys",
        escape_controls(.origin)
    )]
    UntrustedKey {
        /// The component.
        origin: String,
        /// The key that signed it.
        key_id: KeyId,
    },
    /// The signature does not match the bytes (under any trusted key with
    /// the id it names).
    #[error(
        "{}: its signature by key {key_id} does not verify: the file is not what was signed",
        escape_controls(.origin)
    )]
    Invalid {
        /// The component.
        origin: String,
        /// The key the signature names.
        key_id: KeyId,
    },
    /// Under a trust with keys, a component whose signature was not checked
    /// under that trust was given to a registry.
    #[error(
        "{} was loaded without this registry's [trust] check; load it from \
         a LoadFrom::Spec (or register_spec) to check its signature",
        escape_controls(.origin)
    )]
    Unchecked {
        /// The component.
        origin: String,
    },
}

impl Trust {
    /// Trusts `keys` (each the base64 line of a minisign `.pub` file).
    pub fn new<S: AsRef<str>>(keys: &[S], require_signature: bool) -> Result<Self, SignatureError> {
        let keys = (keys.iter().enumerate())
            .map(|(index, text)| {
                let text = text.as_ref().trim();
                let bad = || SignatureError::BadKey { index };
                let key = PublicKey::from_base64(text).map_err(|_| bad())?;
                let bytes = STANDARD.decode(text).map_err(|_| bad())?;
                Ok(TrustedKey {
                    id: key_id_at(&bytes).ok_or_else(bad)?,
                    key,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if require_signature && keys.is_empty() {
            return Err(SignatureError::NoKeys);
        }
        Ok(Trust {
            keys,
            require_signature,
        })
    }

    /// Whether signatures are checked at all (some key is trusted).
    pub fn is_active(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Whether an unsigned component is refused.
    pub fn requires_signature(&self) -> bool {
        self.require_signature
    }

    /// The trusted key ids, in manifest order.
    pub fn key_ids(&self) -> impl Iterator<Item = KeyId> + '_ {
        self.keys.iter().map(|k| k.id)
    }

    /// Checks `bytes` (the component named `origin`) against `signature`,
    /// the text of its minisign signature if there is one (`location` names
    /// where it was looked for). Without trusted keys nothing is verified.
    pub fn check(
        &self,
        origin: &str,
        bytes: &[u8],
        signature: Option<&str>,
        location: &str,
    ) -> Result<Signer, SignatureError> {
        let Some(text) = signature else {
            if self.require_signature {
                return Err(SignatureError::Unsigned {
                    origin: origin.to_string(),
                    signature: location.to_string(),
                });
            }
            return Ok(Signer::Unsigned);
        };
        let malformed = |reason: &str| SignatureError::Malformed {
            origin: origin.to_string(),
            signature: location.to_string(),
            reason: reason.to_string(),
        };
        let key_id = signature_key_id(text);
        if !self.is_active() {
            return Ok(Signer::Unverified { key_id });
        }
        let parsed = Signature::decode(text).map_err(|_| malformed("not a minisign signature"))?;
        let key_id = key_id.ok_or_else(|| malformed("not a minisign signature"))?;
        // Whoever makes a key chooses its id, so several trusted keys may
        // share one: each of them is tried, and one that verifies is enough.
        let mut candidates = self.keys.iter().filter(|k| k.id == key_id).peekable();
        if candidates.peek().is_none() {
            return Err(SignatureError::UntrustedKey {
                origin: origin.to_string(),
                key_id,
            });
        }
        // Legacy (non-prehashed) signatures are refused, as minisign 0.11 does.
        if !candidates.any(|trusted| trusted.key.verify(bytes, &parsed, false).is_ok()) {
            return Err(SignatureError::Invalid {
                origin: origin.to_string(),
                key_id,
            });
        }
        Ok(Signer::Trusted {
            key_id,
            trusted_comment: parsed.trusted_comment().to_string(),
        })
    }
}

/// The key id a minisign signature names (its second line), if it parses.
fn signature_key_id(text: &str) -> Option<KeyId> {
    let line = text.lines().nth(1)?;
    key_id_at(&STANDARD.decode(line.trim()).ok()?)
}

/// The signature file at `path`: `Ok(None)` when there is none, its text
/// otherwise (capped at [`MAX_SIGNATURE_BYTES`]).
pub fn read_signature(path: &Path) -> Result<Option<String>, ReadProblem> {
    match read_regular_text(path, MAX_SIGNATURE_BYTES) {
        Ok(text) => Ok(Some(text)),
        Err(e) => match e.problem {
            ReadProblem::Io(io) if io.kind() == std::io::ErrorKind::NotFound => Ok(None),
            problem => Err(problem),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_key_is_named_by_position() {
        let good = "RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3";
        assert_eq!(
            Trust::new(&[good, "nope"], false).unwrap_err(),
            SignatureError::BadKey { index: 1 }
        );
        let trust = Trust::new(&[good], true).unwrap();
        assert_eq!(
            trust.key_ids().next().unwrap().to_string(),
            "E7620F1842B4E81F"
        );
        assert_eq!(
            Trust::new::<&str>(&[], true).unwrap_err(),
            SignatureError::NoKeys
        );
    }
}

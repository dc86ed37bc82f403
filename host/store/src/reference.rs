//! The OCI reference grammar, `oci://<registry>/<repository>(:<tag>|@sha256:<hex>)`,
//! and the loopback rule for plain HTTP.

use std::fmt;

use dsh_env_support::digest::is_sha256_hex;
use dsh_env_support::input::escape_controls;

/// The scheme of an OCI reference in a manifest entry or on the command line.
pub const OCI_SCHEME: &str = "oci://";

/// Registry repositories and tags longer than this are refused (the
/// distribution spec bounds a tag at 128 characters).
const MAX_REPOSITORY_CHARS: usize = 255;
const MAX_TAG_CHARS: usize = 128;

/// A reference to an artifact in an OCI registry:
/// `oci://<registry>/<repository>(:<tag>|@sha256:<hex>)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OciReference {
    registry: String,
    repository: String,
    target: Target,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Target {
    Tag(String),
    /// The manifest's SHA-256, lowercase hex.
    Digest(String),
}

/// Why a text is not an OCI reference. Each names the reference (escaped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// It does not start with `oci://`.
    #[error("`{0}` is not an OCI reference: it must start with oci://")]
    Scheme(String),
    /// The registry part is not a host name, an IPv4 address or `[IPv6]`,
    /// with an optional port.
    #[error(
        "`{0}`: the registry must be a host name, an IPv4 address or [IPv6], with an optional :port"
    )]
    Registry(String),
    /// The repository is empty or not lowercase path components.
    #[error(
        "`{0}`: the repository must be lowercase path components of letters, digits and . _ - (at most 255 characters)"
    )]
    Repository(String),
    /// Neither `:<tag>` nor `@sha256:<hex>` follows the repository.
    #[error("`{0}`: give a :<tag> or an @sha256:<digest> after the repository")]
    NoTarget(String),
    /// The tag has characters or a length the distribution spec refuses.
    #[error("`{0}`: a tag is letters, digits and . _ - (not first), at most 128 characters")]
    Tag(String),
    /// The digest is not `sha256:` and 64 lowercase hex digits.
    #[error("`{0}`: the digest must be sha256: and 64 lowercase hexadecimal digits")]
    Digest(String),
}

impl OciReference {
    /// Parses `oci://<registry>/<repository>(:<tag>|@sha256:<hex>)`.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let shown = || escape_controls(text).into_owned();
        let rest = text
            .strip_prefix(OCI_SCHEME)
            .ok_or_else(|| ReferenceError::Scheme(shown()))?;
        let (registry, rest) = rest
            .split_once('/')
            .ok_or_else(|| ReferenceError::Repository(shown()))?;
        if !is_registry(registry) {
            return Err(ReferenceError::Registry(shown()));
        }
        let (repository, target) = if let Some((repository, digest)) = rest.split_once('@') {
            let hex = (digest.strip_prefix("sha256:"))
                .filter(|hex| is_sha256_hex(hex))
                .ok_or_else(|| ReferenceError::Digest(shown()))?;
            (repository, Target::Digest(hex.to_string()))
        } else if let Some((repository, tag)) = rest.rsplit_once(':') {
            if !is_tag(tag) {
                return Err(ReferenceError::Tag(shown()));
            }
            (repository, Target::Tag(tag.to_string()))
        } else {
            if !is_repository(rest) {
                return Err(ReferenceError::Repository(shown()));
            }
            return Err(ReferenceError::NoTarget(shown()));
        };
        if !is_repository(repository) {
            return Err(ReferenceError::Repository(shown()));
        }
        Ok(OciReference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            target,
        })
    }

    /// The registry, as written (`host`, `host:port`, `[::1]:port`).
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository in the registry.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag, unless the reference is pinned by digest.
    pub fn tag(&self) -> Option<&str> {
        match &self.target {
            Target::Tag(tag) => Some(tag),
            Target::Digest(_) => None,
        }
    }

    /// The manifest's SHA-256 (lowercase hex), if the reference is pinned.
    pub fn digest_hex(&self) -> Option<&str> {
        match &self.target {
            Target::Digest(hex) => Some(hex),
            Target::Tag(_) => None,
        }
    }

    /// Whether the reference names one manifest by its digest.
    pub fn is_pinned(&self) -> bool {
        self.digest_hex().is_some()
    }

    /// The same repository, pinned to the manifest whose SHA-256 is `hex`.
    pub fn pinned(&self, hex: &str) -> OciReference {
        OciReference {
            target: Target::Digest(hex.to_ascii_lowercase()),
            ..self.clone()
        }
    }

    /// The tag or `sha256:<hex>`: what follows the repository in a
    /// registry's manifest URL.
    pub fn target(&self) -> String {
        match &self.target {
            Target::Tag(tag) => tag.clone(),
            Target::Digest(hex) => format!("sha256:{hex}"),
        }
    }

    /// Whether the registry is this machine: `localhost`, 127.0.0.0/8 or
    /// `[::1]`, with any port. Only these may be reached over plain HTTP
    /// without asking.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.strip_prefix('[') {
            Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
            None => self.registry.split(':').next().unwrap_or_default(),
        };
        is_loopback_host(host)
    }
}

impl fmt::Display for OciReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (registry, repository) = (&self.registry, &self.repository);
        match &self.target {
            Target::Tag(tag) => write!(f, "{OCI_SCHEME}{registry}/{repository}:{tag}"),
            Target::Digest(hex) => write!(f, "{OCI_SCHEME}{registry}/{repository}@sha256:{hex}"),
        }
    }
}

impl std::str::FromStr for OciReference {
    type Err = ReferenceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

/// Whether `host` (a name or an address, without port; an IPv6 address
/// with or without brackets) is this machine: `localhost`, 127.0.0.0/8 or
/// `::1`. The rule for plain HTTP, on references and on every URL a registry
/// sends a client to.
pub fn is_loopback_host(host: &str) -> bool {
    let host = (host.strip_prefix('[')).map_or(host, |h| h.strip_suffix(']').unwrap_or(h));
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `host`, `host:port`, `[ipv6]` or `[ipv6]:port`.
fn is_registry(text: &str) -> bool {
    let (host_ok, port) = match text.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((ip, port)) => (ip.parse::<std::net::Ipv6Addr>().is_ok(), port),
            None => return false,
        },
        None => {
            let (host, port) = text.split_at(text.find(':').unwrap_or(text.len()));
            (is_host_name(host), port)
        }
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|digits| {
            digits.bytes().all(|b| b.is_ascii_digit()) && digits.parse::<u16>().is_ok_and(|p| p > 0)
        });
    host_ok && port_ok
}

/// DNS labels (letters, digits, inner `-`) joined by dots; IPv4 addresses too.
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Lowercase path components, each `[a-z0-9]+` joined by `.`, `_`, `__` or `-`s.
fn is_repository(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_REPOSITORY_CHARS
        && text.split('/').all(|component| {
            let bytes = component.as_bytes();
            let is_alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            (bytes.first().is_some_and(is_alnum))
                && (bytes.last().is_some_and(is_alnum))
                && bytes
                    .iter()
                    .all(|b| is_alnum(b) || matches!(b, b'.' | b'_' | b'-'))
                && !component.contains("..")
                && !component.contains("___")
        })
}

/// `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
fn is_tag(text: &str) -> bool {
    let word = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    let bytes = text.as_bytes();
    bytes.first().is_some_and(word)
        && text.len() <= MAX_TAG_CHARS
        && bytes.iter().all(|b| word(b) || matches!(b, b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_parse_and_display_back() {
        for text in [
            "oci://localhost:5000/dsh/agent-lineage:v1",
            "oci://127.0.0.1:5000/a:latest",
            "oci://[::1]:5000/a/b/c:1.0",
            "oci://ghcr.io/org/repo_name.x:v1.2-rc_3",
            &format!("oci://registry.example/a@sha256:{HEX}"),
        ] {
            let reference = OciReference::parse(text).unwrap();
            assert_eq!(reference.to_string(), text);
        }
        let pinned = OciReference::parse(&format!("oci://localhost:5000/a@sha256:{HEX}")).unwrap();
        assert!(pinned.is_pinned() && pinned.tag().is_none());
        let tagged = OciReference::parse("oci://localhost:5000/a/b:v1").unwrap();
        assert_eq!(
            (tagged.registry(), tagged.repository(), tagged.tag()),
            ("localhost:5000", "a/b", Some("v1"))
        );
        assert_eq!(tagged.pinned(HEX), pinned_in(&tagged));
    }

    fn pinned_in(tagged: &OciReference) -> OciReference {
        OciReference::parse(&format!(
            "oci://{}/{}@sha256:{HEX}",
            tagged.registry(),
            tagged.repository()
        ))
        .unwrap()
    }

    #[test]
    fn a_bad_reference_says_what_is_wrong() {
        let error = |text: &str| OciReference::parse(text).unwrap_err();
        let (scheme, registry, repository) = (
            ReferenceError::Scheme(String::new()),
            ReferenceError::Registry(String::new()),
            ReferenceError::Repository(String::new()),
        );
        let (no_target, tag, digest) = (
            ReferenceError::NoTarget(String::new()),
            ReferenceError::Tag(String::new()),
            ReferenceError::Digest(String::new()),
        );
        let sha512 = format!("oci://host/a@sha512:{HEX}");
        for (text, kind) in [
            ("localhost/a:v1", &scheme),
            ("oci://localhost:5000", &repository),
            ("oci://local_host/a:v1", &registry),
            ("oci://host:99999/a:v1", &registry),
            ("oci://[zz]/a:v1", &registry),
            ("oci://host/A:v1", &repository),
            ("oci://host/a/:v1", &repository),
            ("oci://host/a", &no_target),
            ("oci://host/a:-x", &tag),
            ("oci://host/a@sha256:ABC", &digest),
            (&sha512, &digest),
        ] {
            let got = error(text);
            assert_eq!(
                std::mem::discriminant(&got),
                std::mem::discriminant(kind),
                "{text}: {got}"
            );
        }
        assert_eq!(
            error("oci://host/a\n").to_string(),
            "`oci://host/a\\n`: the repository must be lowercase path components \
             of letters, digits and . _ - (at most 255 characters)"
        );
    }

    #[test]
    fn loopback_is_localhost_127_and_ipv6_one() {
        let loopback = |registry: &str| {
            OciReference::parse(&format!("oci://{registry}/a:v1"))
                .unwrap()
                .is_loopback()
        };
        for registry in [
            "localhost",
            "localhost:5000",
            "127.0.0.1:5000",
            "127.1.2.3",
            "[::1]:5000",
            "[::1]",
        ] {
            assert!(loopback(registry), "{registry}");
        }
        for registry in [
            "ghcr.io",
            "10.0.0.1:5000",
            "[::2]:5000",
            "localhost.example",
            "128.0.0.1",
        ] {
            assert!(!loopback(registry), "{registry}");
        }
    }
}

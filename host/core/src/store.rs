//! The content-addressed store of pulled contributors, under
//! `$DSH_HOME/store/`, and what an OCI reference to one is.
//!
//! A contributor shipped over an OCI registry is a CNCF Wasm OCI artifact: an
//! image manifest with one `application/wasm` layer (the component) and an
//! `application/vnd.wasm.config.v0+json` config; its minisign signature, when
//! it has one, is the [`SIGNATURE_ANNOTATION`] on the manifest, so the
//! manifest digest a manifest entry pins also pins the signature.
//!
//! The network side (`dsh-env-oci`) verifies every blob's digest and puts it
//! here with [`Store::put_blob`], then names the manifest with
//! [`Store::record`]; [`Store::load`] then reads an artifact back by its
//! digest-pinned reference, verifying again, without the network.
//! Blobs are files named by their digest (`blobs/sha256/<hex>`), written whole
//! ([`crate::atomic_file`]), so two pulls of the same bytes agree.
//!
//! The store is an OCI image layout, so standard OCI tools (`skopeo copy
//! oci:<store>:<name> …`) read it and can seed it: an `oci-layout` file, and
//! an `index.json` listing each stored manifest under its
//! [`REF_NAME_ANNOTATION`] ([`layout_name`]: the reference without
//! `oci://`). Loading needs only the blobs, so a home from before the layout
//! (bare `blobs/sha256/`) reads as before, and gets the layout files on its
//! next [`Store::record`]. `index.json` is rewritten whole, under a lock on
//! the store's directory, so two processes recording at once both keep
//! their names.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::digest::{self, is_sha256_hex, sha256_hex};
use crate::home::DshHome;
use crate::input::{
    FileError, MAX_COMPONENT_BYTES, ReadProblem, escape_controls, read_regular_file,
};

/// The scheme of an OCI reference in a manifest entry or on the command line.
pub const OCI_SCHEME: &str = "oci://";
/// The media type of the one layer of a Wasm OCI artifact: the component.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The media type of a Wasm OCI artifact's config.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of an OCI image manifest.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The manifest annotation carrying the text of the component's `.minisig`.
pub const SIGNATURE_ANNOTATION: &str = "dev.dsh-env.signature.minisign";
/// The largest image manifest read or pulled. A Wasm artifact's manifest is
/// well under 2 KiB, signature included.
pub const MAX_OCI_MANIFEST_BYTES: u64 = 64 << 10;
/// The largest layer (component) read or pulled: the component file cap.
pub const MAX_LAYER_BYTES: u64 = MAX_COMPONENT_BYTES;
/// The media type of an OCI image index: the store layout's `index.json`.
pub const OCI_INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// The annotation naming a manifest in an OCI image layout's `index.json`:
/// what `skopeo`'s `oci:<dir>:<name>` matches.
pub const REF_NAME_ANNOTATION: &str = "org.opencontainers.image.ref.name";
/// The largest `index.json` read: thousands of entries of about 300 bytes.
pub const MAX_INDEX_BYTES: u64 = 4 << 20;
/// The OCI image layout's marker file, and what it says.
const LAYOUT_FILE: &str = "oci-layout";
const LAYOUT_TEXT: &str = "{\"imageLayoutVersion\":\"1.0.0\"}";
/// The OCI image layout's index of manifests.
const INDEX_FILE: &str = "index.json";

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

/// What an image manifest says about the Wasm component it ships.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WasmManifest {
    /// The layer's SHA-256, lowercase hex.
    pub layer_digest: String,
    /// The layer's size, as the manifest declares it.
    pub layer_size: u64,
    /// The config blob's SHA-256, lowercase hex.
    pub config_digest: String,
    /// The config blob's size, as the manifest declares it.
    pub config_size: u64,
    /// The text of the component's `.minisig`, from [`SIGNATURE_ANNOTATION`].
    pub signature: Option<String>,
}

/// Why an image manifest does not describe a Wasm component this host takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestProblem {
    /// It is not a Wasm OCI artifact: what is off.
    #[error("not a Wasm artifact: {0}")]
    NotWasm(String),
    /// Its layer declares more bytes than [`MAX_LAYER_BYTES`].
    #[error("its layer is {size} bytes, over the {cap}-byte limit")]
    LayerTooLarge {
        /// The size the manifest declares.
        size: u64,
        /// The cap.
        cap: u64,
    },
}

impl WasmManifest {
    /// Checks that `bytes` is an OCI image manifest of a Wasm artifact:
    /// schema 2, the Wasm config media type, exactly one layer, of media
    /// type `application/wasm`, sha256 digests, and a layer no bigger than
    /// [`MAX_LAYER_BYTES`].
    pub fn parse(bytes: &[u8]) -> Result<Self, ManifestProblem> {
        let not_wasm = |what: &str| ManifestProblem::NotWasm(what.to_string());
        let manifest: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|_| not_wasm("the manifest is not JSON"))?;
        if manifest["schemaVersion"] != 2 {
            return Err(not_wasm("the manifest's schemaVersion is not 2"));
        }
        if let Some(media_type) = manifest.get("mediaType")
            && media_type != OCI_MANIFEST_MEDIA_TYPE
        {
            return Err(ManifestProblem::NotWasm(format!(
                "the manifest's media type is {}, not {OCI_MANIFEST_MEDIA_TYPE}",
                shown_json(media_type)
            )));
        }
        let (config_digest, config_size) =
            descriptor(&manifest["config"], WASM_CONFIG_MEDIA_TYPE, "config")?;
        let layers = (manifest["layers"].as_array()).ok_or_else(|| not_wasm("it has no layers"))?;
        let [layer] = layers.as_slice() else {
            return Err(ManifestProblem::NotWasm(format!(
                "it has {} layers, not exactly one",
                layers.len()
            )));
        };
        let (layer_digest, layer_size) = descriptor(layer, WASM_LAYER_MEDIA_TYPE, "layer")?;
        if layer_size > MAX_LAYER_BYTES {
            return Err(ManifestProblem::LayerTooLarge {
                size: layer_size,
                cap: MAX_LAYER_BYTES,
            });
        }
        let signature = match manifest["annotations"].get(SIGNATURE_ANNOTATION) {
            None => None,
            Some(serde_json::Value::String(text)) => Some(text.clone()),
            Some(_) => return Err(not_wasm("its signature annotation is not a string")),
        };
        Ok(WasmManifest {
            layer_digest,
            layer_size,
            config_digest,
            config_size,
            signature,
        })
    }
}

/// A descriptor's sha256 digest (hex) and size, if its media type is `media_type`.
fn descriptor(
    value: &serde_json::Value,
    media_type: &str,
    what: &str,
) -> Result<(String, u64), ManifestProblem> {
    if value["mediaType"] != media_type {
        return Err(ManifestProblem::NotWasm(format!(
            "its {what} media type is {}, not {media_type}",
            shown_json(&value["mediaType"])
        )));
    }
    let digest = (value["digest"].as_str())
        .and_then(|digest| digest.strip_prefix("sha256:"))
        .filter(|hex| is_sha256_hex(hex))
        .ok_or_else(|| ManifestProblem::NotWasm(format!("its {what} digest is not sha256")))?;
    let size = (value["size"].as_u64())
        .ok_or_else(|| ManifestProblem::NotWasm(format!("its {what} has no size")))?;
    Ok((digest.to_string(), size))
}

/// An `index.json` entry for the manifest `hex` of `size` bytes, named `name`.
fn index_entry(hex: &str, size: u64, name: Option<&str>) -> serde_json::Value {
    let mut entry = serde_json::json!({
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "digest": format!("sha256:{hex}"),
        "size": size,
    });
    if let Some(name) = name {
        entry["annotations"] = serde_json::json!({ REF_NAME_ANNOTATION: name });
    }
    entry
}

/// The name an `index.json` entry has, if any.
fn ref_name(entry: &serde_json::Value) -> Option<&str> {
    entry["annotations"][REF_NAME_ANNOTATION].as_str()
}

/// A JSON value from a registry, short and escaped, for a message.
fn shown_json(value: &serde_json::Value) -> String {
    let text = value.to_string();
    let cut: String = text.chars().take(80).collect();
    escape_controls(&cut).into_owned()
}

/// A Wasm artifact read back from the store, every digest verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredArtifact {
    /// The digest-pinned reference it was loaded by.
    pub reference: OciReference,
    /// The component.
    pub wasm: Vec<u8>,
    /// The component's SHA-256, lowercase hex (the layer digest).
    pub wasm_sha256: String,
    /// The text of its `.minisig`, from the manifest annotation.
    pub signature: Option<String>,
}

/// Why the store cannot give an artifact, naming the reference.
#[derive(Debug, thiserror::Error)]
#[error("{reference}: {problem}")]
pub struct StoreError {
    /// The reference asked for (boxed: errors stay small).
    pub reference: Box<OciReference>,
    /// What went wrong.
    pub problem: StoreProblem,
}

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreProblem {
    /// The reference names a tag: only a digest names the same bytes forever.
    #[error("not pinned by digest")]
    NotPinned,
    /// A blob it needs is not in the store.
    #[error("not in the store ({what} {path} is missing)")]
    Missing {
        /// `manifest` or `layer`.
        what: &'static str,
        /// The blob's file.
        path: String,
        /// The reference, for a front end's remedy (the CLI's `dsh-env add`).
        reference: String,
    },
    /// A blob could not be read.
    #[error("cannot read its {what}: {source}")]
    Read {
        /// `manifest` or `layer`.
        what: &'static str,
        /// Why.
        source: FileError,
    },
    /// A blob's bytes do not have the digest it is filed under.
    #[error("the stored {what} has sha256 {actual}, not {expected}")]
    Corrupt {
        /// `manifest` or `layer`.
        what: &'static str,
        /// The digest it is filed under.
        expected: String,
        /// The digest of its bytes.
        actual: String,
    },
    /// The stored manifest is not one of a Wasm artifact this host takes.
    #[error(transparent)]
    Manifest(#[from] ManifestProblem),
    /// The layer's size differs from what the manifest declares.
    #[error("the stored layer is {actual} bytes, but the manifest declares {declared}")]
    LayerSize {
        /// The size the manifest declares.
        declared: u64,
        /// The size of the stored bytes.
        actual: u64,
    },
    /// A blob could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The layout's `index.json` is not an OCI image index.
    #[error("{path} is not an OCI image index ({problem})")]
    Index {
        /// The file.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The store's directory could not be listed, or a blob removed.
    #[error("cannot sweep {path}: {source}")]
    Sweep {
        /// The directory or file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The name of the artifact `reference` names in the store's `index.json`
/// (its [`REF_NAME_ANNOTATION`]): the reference without `oci://`, e.g.
/// `ghcr.io/org/lineage@sha256:<hex>` or `ghcr.io/org/lineage:v1`, which
/// is what `skopeo` takes after `oci:<store>:`.
pub fn layout_name(reference: &OciReference) -> String {
    let text = reference.to_string();
    text.strip_prefix(OCI_SCHEME).unwrap_or(&text).to_string()
}

/// Which artifacts [`Store::sweep`] keeps; every other file goes.
#[derive(Debug, Clone, Copy)]
pub enum Keep<'a> {
    /// Every complete artifact in the store: each image manifest there that
    /// is one of a Wasm artifact, its config and its layer. Only what no
    /// such manifest references goes (e.g. the blobs of a write cut short).
    Stored,
    /// Only the artifacts these references pin (their manifests, configs and
    /// layers): e.g. the `source`s of the manifests of contributors in use.
    /// A reference that is not pinned keeps nothing.
    Pinned(&'a [OciReference]),
}

/// A file [`Store::sweep`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweptBlob {
    /// Its file name: a SHA-256 in lowercase hex, unless it was not a blob
    /// (escaped).
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
}

/// What [`Store::sweep`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sweep {
    /// The files removed, in name order.
    pub removed: Vec<SweptBlob>,
    /// How many blobs are left.
    pub kept: usize,
    /// Their bytes.
    pub kept_bytes: u64,
}

/// The content-addressed store: blobs filed by their SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// The store rooted at `root` (created when something is put).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Store { root: root.into() }
    }

    /// The store of a home: `$DSH_HOME/store`.
    pub fn in_home(home: &DshHome) -> Self {
        Store::new(home.path().join("store"))
    }

    /// The directory it lives in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file of the blob whose SHA-256 is `hex`.
    pub fn blob_path(&self, hex: &str) -> PathBuf {
        self.root.join("blobs").join("sha256").join(hex)
    }

    /// Files `bytes` under their SHA-256 and returns it (hex). Callers that
    /// got the bytes from elsewhere verify them against the digest they
    /// expect first; the store files bytes only under their own digest.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<String, StoreProblem> {
        let hex = sha256_hex(bytes);
        let path = self.blob_path(&hex);
        let failed = |source| StoreProblem::Write {
            path: escape_controls(&path.display().to_string()).into_owned(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        crate::atomic_file::write(&path, bytes).map_err(failed)?;
        Ok(hex)
    }

    /// Lists the stored manifest `hex` in the layout's `index.json` under
    /// each of `names` (see [`layout_name`]; a name another manifest had
    /// moves here), or unnamed if `names` is empty; writes `oci-layout`
    /// first if it is missing. A store without `index.json` (made before
    /// the layout) gets one listing every Wasm artifact it already holds.
    /// Call it once the manifest's blobs are all in.
    pub fn record(&self, hex: &str, names: &[String]) -> Result<(), StoreProblem> {
        let _locked = self.lock_index()?;
        let layout = self.root.join(LAYOUT_FILE);
        if !layout.exists() {
            self.write_whole(&layout, LAYOUT_TEXT.as_bytes())?;
        }
        let mut entries = match self.read_index()? {
            Some(entries) => entries,
            None => (self.blob_names()?.into_iter())
                .filter(|(name, bytes)| *bytes <= MAX_OCI_MANIFEST_BYTES && name != hex)
                .filter(|(name, _)| self.stored_manifest(name).is_some())
                .map(|(name, bytes)| index_entry(&name, bytes, None))
                .collect(),
        };
        let size = std::fs::metadata(self.blob_path(hex)).map_or(0, |m| m.len());
        let digest = format!("sha256:{hex}");
        entries.retain(|entry| match ref_name(entry) {
            Some(name) => !names.iter().any(|given| given == name),
            None => entry["digest"] != digest.as_str(),
        });
        if names.is_empty() {
            if !entries
                .iter()
                .any(|entry| entry["digest"] == digest.as_str())
            {
                entries.push(index_entry(hex, size, None));
            }
        } else {
            entries.extend(names.iter().map(|name| index_entry(hex, size, Some(name))));
        }
        self.write_index(entries)
    }

    /// Holds the store's lock until the handle is dropped: an exclusive
    /// `flock` on its directory, taken around each read and rewrite of
    /// `index.json` (no lock file to leave behind, and a process that dies
    /// releases it).
    fn lock_index(&self) -> Result<std::fs::File, StoreProblem> {
        let failed = |source| StoreProblem::Write {
            path: escape_controls(&self.root.display().to_string()).into_owned(),
            source,
        };
        std::fs::create_dir_all(&self.root).map_err(failed)?;
        let directory = std::fs::File::open(&self.root).map_err(failed)?;
        directory.lock().map_err(failed)?;
        Ok(directory)
    }

    /// The manifests `index.json` lists, if there is one.
    fn read_index(&self) -> Result<Option<Vec<serde_json::Value>>, StoreProblem> {
        let path = self.root.join(INDEX_FILE);
        let problem = |problem: String| StoreProblem::Index {
            path: escape_controls(&path.display().to_string()).into_owned(),
            problem,
        };
        let bytes = match read_regular_file(&path, MAX_INDEX_BYTES) {
            Ok(bytes) => bytes,
            Err(e) if matches!(&e.problem, ReadProblem::Io(io) if io.kind() == std::io::ErrorKind::NotFound) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(problem(e.problem.to_string())),
        };
        let index: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| problem(format!("not JSON: {e}")))?;
        match index.get("manifests").and_then(|m| m.as_array()) {
            Some(manifests) => Ok(Some(manifests.clone())),
            None => Err(problem("it has no `manifests` list".into())),
        }
    }

    /// Writes `index.json` listing `entries`, whole.
    fn write_index(&self, entries: Vec<serde_json::Value>) -> Result<(), StoreProblem> {
        let index = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_INDEX_MEDIA_TYPE,
            "manifests": entries,
        });
        let text = serde_json::to_vec_pretty(&index).expect("a JSON value serializes");
        self.write_whole(&self.root.join(INDEX_FILE), &text)
    }

    /// Writes `bytes` to `path` whole, its directory made if need be.
    fn write_whole(&self, path: &Path, bytes: &[u8]) -> Result<(), StoreProblem> {
        let failed = |source| StoreProblem::Write {
            path: escape_controls(&path.display().to_string()).into_owned(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        crate::atomic_file::write(path, bytes).map_err(failed)
    }

    /// The plain files in the blob directory, (name, size), in name order;
    /// none if there is no directory.
    fn blob_names(&self) -> Result<Vec<(String, u64)>, StoreProblem> {
        let dir = self.root.join("blobs").join("sha256");
        let failed = |path: &Path| {
            let path = escape_controls(&path.display().to_string()).into_owned();
            move |source| StoreProblem::Sweep { path, source }
        };
        let entries = match std::fs::read_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            result => result.map_err(failed(&dir))?,
        };
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(failed(&dir))?;
            let metadata = entry.metadata().map_err(failed(&entry.path()))?;
            if !metadata.is_dir() {
                let name = entry.file_name().to_string_lossy().into_owned();
                files.push((name, metadata.len()));
            }
        }
        files.sort();
        Ok(files)
    }

    /// Removes every file in the store's blob directory that `keep` does
    /// not keep, and says what it removed; `index.json` then lists only
    /// manifests still there. Run it while no `add` is writing
    /// to the same store: a pull's blobs are written before its manifest.
    pub fn sweep(&self, keep: Keep<'_>) -> Result<Sweep, StoreProblem> {
        let dir = self.root.join("blobs").join("sha256");
        let failed = |path: &Path| {
            let path = escape_controls(&path.display().to_string()).into_owned();
            move |source| StoreProblem::Sweep { path, source }
        };
        // Subdirectories are left alone.
        let files = self.blob_names()?;
        let roots: Vec<&str> = match keep {
            Keep::Pinned(references) => references.iter().filter_map(|r| r.digest_hex()).collect(),
            Keep::Stored => (files.iter())
                .filter(|(name, bytes)| is_sha256_hex(name) && *bytes <= MAX_OCI_MANIFEST_BYTES)
                .map(|(name, _)| name.as_str())
                .collect(),
        };
        let mut live = std::collections::HashSet::new();
        for hex in roots {
            if let Some(manifest) = self.stored_manifest(hex) {
                live.extend([
                    hex.to_string(),
                    manifest.config_digest,
                    manifest.layer_digest,
                ]);
            }
        }
        let mut sweep = Sweep::default();
        for (name, bytes) in files {
            if live.contains(&name) {
                sweep.kept += 1;
                sweep.kept_bytes += bytes;
                continue;
            }
            let path = dir.join(&name);
            std::fs::remove_file(&path).map_err(failed(&path))?;
            sweep.removed.push(SweptBlob {
                name: escape_controls(&name).into_owned(),
                bytes,
            });
        }
        let _locked = (!sweep.removed.is_empty())
            .then(|| self.lock_index())
            .transpose()?;
        if !sweep.removed.is_empty()
            && let Some(entries) = self.read_index()?
        {
            let before = entries.len();
            let kept: Vec<_> = (entries.into_iter())
                .filter(|entry| {
                    let hex = entry["digest"]
                        .as_str()
                        .and_then(|d| d.strip_prefix("sha256:"));
                    hex.is_none_or(|hex| live.contains(hex))
                })
                .collect();
            if kept.len() != before {
                self.write_index(kept)?;
            }
        }
        Ok(sweep)
    }

    /// The stored blob `hex`, if it is whole and the manifest of a Wasm artifact.
    fn stored_manifest(&self, hex: &str) -> Option<WasmManifest> {
        let bytes = read_regular_file(&self.blob_path(hex), MAX_OCI_MANIFEST_BYTES).ok()?;
        (digest::verify(&bytes, hex).is_ok())
            .then(|| WasmManifest::parse(&bytes).ok())
            .flatten()
    }

    /// The Wasm artifact `reference` pins, from the store alone: the
    /// manifest by the pinned digest, then its one layer, each verified
    /// against its digest (and the layer against its declared size).
    pub fn load(&self, reference: &OciReference) -> Result<StoredArtifact, StoreError> {
        self.load_artifact(reference).map_err(|problem| StoreError {
            reference: Box::new(reference.clone()),
            problem,
        })
    }

    fn load_artifact(&self, reference: &OciReference) -> Result<StoredArtifact, StoreProblem> {
        let manifest_hex = reference.digest_hex().ok_or(StoreProblem::NotPinned)?;
        let manifest_bytes =
            self.read_verified(reference, "manifest", manifest_hex, MAX_OCI_MANIFEST_BYTES)?;
        let manifest = WasmManifest::parse(&manifest_bytes)?;
        let wasm =
            self.read_verified(reference, "layer", &manifest.layer_digest, MAX_LAYER_BYTES)?;
        if wasm.len() as u64 != manifest.layer_size {
            return Err(StoreProblem::LayerSize {
                declared: manifest.layer_size,
                actual: wasm.len() as u64,
            });
        }
        Ok(StoredArtifact {
            reference: reference.clone(),
            wasm,
            wasm_sha256: manifest.layer_digest,
            signature: manifest.signature,
        })
    }

    /// The blob `hex`, at most `cap` bytes, checked against its digest.
    fn read_verified(
        &self,
        reference: &OciReference,
        what: &'static str,
        hex: &str,
        cap: u64,
    ) -> Result<Vec<u8>, StoreProblem> {
        let path = self.blob_path(hex);
        let bytes = read_regular_file(&path, cap).map_err(|source| match &source.problem {
            ReadProblem::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
                StoreProblem::Missing {
                    what,
                    path: source.path.clone(),
                    reference: reference.to_string(),
                }
            }
            _ => StoreProblem::Read { what, source },
        })?;
        digest::verify(&bytes, hex).map_err(|mismatch| StoreProblem::Corrupt {
            what,
            expected: hex.to_string(),
            actual: mismatch.actual,
        })?;
        Ok(bytes)
    }
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
    fn the_store_is_an_oci_layout_whose_index_follows_records_and_sweeps() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("store"));
        let artifact = |layer: &[u8]| {
            let (layer_hex, config) = (store.put_blob(layer).unwrap(), b"{}");
            let config_hex = store.put_blob(config).unwrap();
            let manifest = serde_json::json!({
                "schemaVersion": 2,
                "config": {"mediaType": WASM_CONFIG_MEDIA_TYPE, "digest": format!("sha256:{config_hex}"), "size": 2},
                "layers": [{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": format!("sha256:{layer_hex}"), "size": layer.len()}],
            });
            store.put_blob(manifest.to_string().as_bytes()).unwrap()
        };
        let index = || {
            let text = std::fs::read_to_string(store.root().join(INDEX_FILE)).unwrap();
            let index: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(index["mediaType"], OCI_INDEX_MEDIA_TYPE);
            let mut entries: Vec<(String, String)> = (index["manifests"].as_array().unwrap())
                .iter()
                .map(|entry| {
                    let digest = entry["digest"].as_str().unwrap();
                    let name = ref_name(entry).unwrap_or("-");
                    (digest.strip_prefix("sha256:").unwrap().into(), name.into())
                })
                .collect();
            entries.sort();
            entries
        };
        // A home from before the layout: bare blobs, no index.
        let old = artifact(b"old");
        assert!(!store.root().join(INDEX_FILE).exists());
        let new = artifact(b"new");
        let (pin, tag) = (
            format!("r.example/a@sha256:{new}"),
            "r.example/a:v1".to_string(),
        );
        store.record(&new, &[pin.clone(), tag.clone()]).unwrap();
        let layout = std::fs::read_to_string(store.root().join(LAYOUT_FILE)).unwrap();
        assert_eq!(layout, r#"{"imageLayoutVersion":"1.0.0"}"#);
        let mut expected = vec![
            (old.clone(), "-".to_string()),
            (new.clone(), pin.clone()),
            (new.clone(), tag.clone()),
        ];
        expected.sort();
        assert_eq!(index(), expected, "the old artifact is listed, unnamed");

        // The tag moves to a newer artifact.
        let newer = artifact(b"newer");
        store.record(&newer, std::slice::from_ref(&tag)).unwrap();
        let mut expected = vec![
            (old.clone(), "-".to_string()),
            (new.clone(), pin.clone()),
            (newer.clone(), tag.clone()),
        ];
        expected.sort();
        assert_eq!(index(), expected);

        // gc keeps only what is pinned, and the index only what is kept.
        let kept = OciReference::parse(&format!("oci://r.example/a@sha256:{newer}")).unwrap();
        let sweep = store
            .sweep(Keep::Pinned(std::slice::from_ref(&kept)))
            .unwrap();
        assert_eq!(sweep.kept, 3, "{sweep:?}");
        assert_eq!(index(), vec![(newer.clone(), tag)]);
        assert!(store.load(&kept).is_ok());

        // An index that is not one is named, not overwritten.
        std::fs::write(store.root().join(INDEX_FILE), "[").unwrap();
        let error = store.record(&newer, &[]).unwrap_err().to_string();
        assert!(
            error.contains("index.json is not an OCI image index"),
            "{error}"
        );
    }

    #[test]
    fn records_made_at_once_by_many_writers_all_keep_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("store"));
        let manifest = |n: usize| {
            let layer_hex = store.put_blob(format!("layer {n}").as_bytes()).unwrap();
            let config_hex = store.put_blob(b"{}").unwrap();
            let manifest = serde_json::json!({
                "schemaVersion": 2,
                "config": {"mediaType": WASM_CONFIG_MEDIA_TYPE, "digest": format!("sha256:{config_hex}"), "size": 2},
                "layers": [{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": format!("sha256:{layer_hex}"), "size": 7}],
            });
            store.put_blob(manifest.to_string().as_bytes()).unwrap()
        };
        const WRITERS: usize = 8;
        let hexes: Vec<String> = (0..WRITERS).map(manifest).collect();
        // Each writer opens the store as another process would; without
        // the lock, a read-modify-write between another's read and write
        // drops that one's name.
        for round in 0..5 {
            let barrier = std::sync::Barrier::new(WRITERS);
            std::thread::scope(|scope| {
                for (n, hex) in hexes.iter().enumerate() {
                    let (barrier, root) = (&barrier, store.root());
                    scope.spawn(move || {
                        barrier.wait();
                        let name = format!("r.example/a{n}:round{round}");
                        Store::new(root).record(hex, &[name]).unwrap();
                    });
                }
            });
            let text = std::fs::read_to_string(store.root().join(INDEX_FILE)).unwrap();
            let index: serde_json::Value = serde_json::from_str(&text).unwrap();
            let names: std::collections::BTreeSet<&str> = (index["manifests"].as_array())
                .unwrap()
                .iter()
                .filter_map(ref_name)
                .collect();
            for n in 0..WRITERS {
                let name = format!("r.example/a{n}:round{round}");
                assert!(names.contains(name.as_str()), "round {round}: {name} lost");
            }
        }
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

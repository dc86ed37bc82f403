//! dsh-env contributors over OCI registries: [`push`] a component (and its
//! minisign signature) as a CNCF Wasm OCI artifact, [`fetch`] one, verified
//! and size-capped, and [`Pulled::commit`] it to the home's [`BlobStore`] once it
//! is accepted ([`pull`] does both).
//!
//! The artifact: an OCI image manifest with exactly one `application/wasm`
//! layer (the component), an `application/vnd.wasm.config.v0+json` config
//! (with the `component` object, [`ComponentWorld`], the CNCF layout asks
//! for with `os: wasip2`), the `org.opencontainers.image.*` annotations
//! ([`Description`]), and the signature, if any, as the
//! [`SIGNATURE_ANNOTATION`] on the manifest, so the manifest digest pins the
//! signature with the code. A commit lists the artifact in the store's OCI
//! image layout ([`BlobStore::record`]).
//!
//! The distribution protocol is spoken here, over one `reqwest` client, so
//! that every byte a registry sends is read under a cap: the manifest under
//! [`MAX_OCI_MANIFEST_BYTES`], a blob under the size its manifest declares
//! (checked against [`dsh_env_store::MAX_LAYER_BYTES`] before anything is
//! downloaded), a token endpoint's answer under [`MAX_TOKEN_BYTES`], and an
//! error answer only up to [`MAX_ERROR_BODY_BYTES`], of which a short,
//! escaped excerpt is quoted. Every digest is computed here (a registry can
//! serve tampered bytes under the original digest header). A whole push or
//! pull, its token request included, has one deadline ([`Options::deadline`]).
//!
//! Plain HTTP goes only to a loopback host, or to the registry itself when
//! [`Options::plain_http`] is set; this holds for every URL the registry
//! sends the client to (redirects, the token realm, upload locations). The
//! token goes only to the registry's own scheme, host and port.
//!
//! Access is as the registry asks on `/v2/`: none; HTTP Basic with
//! [`Options::credential`]; or a bearer token from its realm (with `scope`
//! and `service`), asked for with the credential as Basic auth when there is
//! one, else anonymously. A credential goes only to the registry's own
//! origin and its token realm, never into a message. [`auth`] finds one where
//! the container tools keep them.
//!
//! What a registry says back is quoted only through [`secrets`]: the
//! credential in use and every token received are held there, and blanked
//! out of every excerpt before it is cut and out of every error this crate
//! returns, whatever form the server repeats them in.

#![deny(missing_docs)]

pub mod artifact;
pub mod auth;
pub mod secrets;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use dsh_env_store::{
    BlobStore, ImageManifest, ImageManifestError, OciReference, StoreProblem, StoredArtifact,
};
use dsh_env_store::{
    MAX_OCI_MANIFEST_BYTES, OCI_MANIFEST_MEDIA_TYPE, SIGNATURE_ANNOTATION, WASM_CONFIG_MEDIA_TYPE,
    WASM_LAYER_MEDIA_TYPE, is_loopback_host, layout_name,
};
use dsh_env_support::digest::{sha256_hex, verify as verify_sha256};
use dsh_env_support::input::escape_controls;

pub use artifact::{ComponentWorld, DescribeError, Description};
pub use auth::{AuthError, AuthFiles, Credential};
use futures_util::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderValue, LOCATION, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode, Url};

/// The largest Wasm config blob pulled: the CNCF config is a few hundred
/// bytes (its `component` field lists the component's imports and exports).
pub const MAX_CONFIG_BYTES: u64 = MAX_OCI_MANIFEST_BYTES;
/// The largest answer read from a token endpoint: a token is a few KiB.
pub const MAX_TOKEN_BYTES: u64 = 64 << 10;
/// How much of an error answer (any status but 2xx) is read, for the code
/// or excerpt an error quotes; the rest is never read.
pub const MAX_ERROR_BODY_BYTES: u64 = 4 << 10;
/// How long a whole push or pull may take by default.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);

/// How many characters of a registry's text an error quotes.
const EXCERPT_CHARS: usize = 160;
/// How many redirects one request follows.
const MAX_REDIRECTS: usize = 10;
/// How long connecting to a registry may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a registry may leave a read waiting.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How to reach a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Speak plain HTTP to a registry that is not on this machine. Loopback
    /// registries (`localhost`, 127.0.0.0/8, `[::1]`) get plain HTTP anyway;
    /// every other one gets HTTPS unless this is set. It covers the
    /// registry's own host only: a redirect elsewhere must be HTTPS or loopback.
    pub plain_http: bool,
    /// How long a whole push or pull may take, every request in it (the
    /// token's too) and every byte read; past it, it fails with
    /// [`OciProblem::Deadline`]. Default [`DEFAULT_DEADLINE`].
    pub deadline: Duration,
    /// Host names resolved to these addresses instead of by DNS, as curl's
    /// `--resolve` does (the URL's port is kept). The name, not the address,
    /// is what the plain-HTTP rule and TLS see.
    pub resolve: Vec<(String, IpAddr)>,
    /// The username and password for the registry, if it asks for them
    /// ([`AuthFiles::credential`] finds the stored one). Without it, access
    /// is anonymous.
    pub credential: Option<Credential>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            plain_http: false,
            deadline: DEFAULT_DEADLINE,
            resolve: Vec::new(),
            credential: None,
        }
    }
}

/// A push or pull that failed, naming the reference and what failed.
#[derive(Debug, thiserror::Error)]
#[error("{reference}: {problem}")]
pub struct OciError {
    /// The reference, as given (boxed: errors stay small).
    pub reference: Box<OciReference>,
    /// What failed.
    pub problem: OciProblem,
}

/// What failed in a push or pull.
#[derive(Debug, thiserror::Error)]
pub enum OciProblem {
    /// The registry could not be reached (connection refused, DNS, TLS, timeout).
    #[error("registry unreachable over {scheme}: {detail}{hint}")]
    Unreachable {
        /// `http` or `https`.
        scheme: &'static str,
        /// The transport's error.
        detail: String,
        /// For HTTPS: how plain HTTP is allowed.
        hint: &'static str,
    },
    /// The registry sent the client to plain HTTP on a host that is neither
    /// loopback nor the registry given `--plain-http`.
    #[error(
        "refused plain HTTP to {url}: only a loopback host, or the registry itself with --plain-http, is reached over plain HTTP"
    )]
    PlainHttp {
        /// The URL it was sent to (short, escaped).
        url: String,
    },
    /// The whole push or pull took longer than [`Options::deadline`].
    #[error(
        "not done within the network deadline of {} s (--network-timeout-secs, $DSH_ENV_NETWORK_TIMEOUT_SECS)",
        .0.as_secs_f64()
    )]
    Deadline(Duration),
    /// The registry has no manifest under that tag or digest.
    #[error("unknown {0} in the registry")]
    Unknown(&'static str),
    /// The registry answered with an error status.
    #[error("the registry answered {status} for the {what}{detail}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// `manifest`, `config`, `layer`, `token`, `upload` …
        what: &'static str,
        /// The registry's error code and message, or a short excerpt of
        /// its answer (escaped), if it gave one.
        detail: String,
    },
    /// The registry wants credentials and none were given.
    #[error(
        "the registry {registry} asks for credentials and none are stored for it: run `dsh-env login {registry}`"
    )]
    NeedsCredentials {
        /// The registry (`host[:port]`).
        registry: String,
    },
    /// The registry refused the credentials given.
    #[error(
        "the registry {registry} refused the username `{username}` with the password from {origin}: wrong username or password? run `dsh-env login {registry}` again"
    )]
    Refused {
        /// The registry (`host[:port]`).
        registry: String,
        /// The username tried (escaped).
        username: String,
        /// Where the credential came from.
        origin: String,
    },
    /// The registry asks for an authentication scheme this client does not speak.
    #[error("the registry asks for an authentication this client does not speak ({0})")]
    UnknownChallenge(String),
    /// The registry's token endpoint, or its challenge, is not usable.
    #[error("no token: {0}")]
    Token(String),
    /// The manifest is not a Wasm artifact, or declares a layer over the cap.
    #[error(transparent)]
    Manifest(#[from] ImageManifestError),
    /// A body is bigger than it may be (a cap, or the size the manifest
    /// declares for a blob).
    #[error("the {what} is over {cap} bytes")]
    TooLarge {
        /// `manifest`, `config`, `layer` or `token`.
        what: &'static str,
        /// The cap it passed.
        cap: u64,
    },
    /// A blob is smaller than the manifest declares.
    #[error("the {what} is {actual} bytes, but the manifest declares {declared}")]
    TooSmall {
        /// `config` or `layer`.
        what: &'static str,
        /// The size the manifest declares.
        declared: u64,
        /// The bytes served.
        actual: u64,
    },
    /// A blob's bytes do not have the digest it was asked for by.
    #[error("digest mismatch: the {what} served has sha256 {actual}, not {expected}")]
    DigestMismatch {
        /// `manifest`, `config` or `layer`.
        what: &'static str,
        /// The digest asked for (or the one the registry's header claims).
        expected: String,
        /// The digest of the bytes served.
        actual: String,
    },
    /// A push needs a tag to put the artifact under.
    #[error("push needs a :<tag>, not a digest")]
    PushNeedsTag,
    /// The HTTP client could not be built, or a URL not made.
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
    /// The verified artifact could not be written to the store.
    #[error(transparent)]
    Store(#[from] StoreProblem),
}

impl OciProblem {
    /// The same problem with every secret held ([`secrets`]) blanked out of
    /// each text it carries: the last guard, whatever a server sent and
    /// wherever it went.
    pub fn redacted(self) -> Self {
        let blank = |text: String| secrets::redact(&text).into_owned();
        match self {
            OciProblem::Unreachable {
                scheme,
                detail,
                hint,
            } => OciProblem::Unreachable {
                scheme,
                detail: blank(detail),
                hint,
            },
            OciProblem::PlainHttp { url } => OciProblem::PlainHttp { url: blank(url) },
            OciProblem::Status {
                status,
                what,
                detail,
            } => OciProblem::Status {
                status,
                what,
                detail: blank(detail),
            },
            OciProblem::NeedsCredentials { registry } => OciProblem::NeedsCredentials {
                registry: blank(registry),
            },
            OciProblem::Refused {
                registry,
                username,
                origin,
            } => OciProblem::Refused {
                registry: blank(registry),
                username: blank(username),
                origin: blank(origin),
            },
            OciProblem::UnknownChallenge(text) => OciProblem::UnknownChallenge(blank(text)),
            OciProblem::Token(text) => OciProblem::Token(blank(text)),
            OciProblem::Manifest(ImageManifestError::NotWasm(text)) => {
                OciProblem::Manifest(ImageManifestError::NotWasm(blank(text)))
            }
            OciProblem::DigestMismatch {
                what,
                expected,
                actual,
            } => OciProblem::DigestMismatch {
                what,
                expected: blank(expected),
                actual,
            },
            OciProblem::Client(text) => OciProblem::Client(blank(text)),
            // Numbers, names of this crate's own, or the store's problems
            // (local paths): no server text.
            problem @ (OciProblem::Deadline(_)
            | OciProblem::Unknown(_)
            | OciProblem::Manifest(_)
            | OciProblem::TooLarge { .. }
            | OciProblem::TooSmall { .. }
            | OciProblem::PushNeedsTag
            | OciProblem::Store(_)) => problem,
        }
    }
}

/// A component to push, with what its artifact says about it.
#[derive(Debug, Clone)]
pub struct Artifact<'a> {
    /// The component.
    pub wasm: &'a [u8],
    /// The text of its `.minisig`, if it has one: the [`SIGNATURE_ANNOTATION`].
    pub signature: Option<&'a str>,
    /// The config's `component`; the spec asks for it for `os: wasip2`, so
    /// only bytes that are not a component go without.
    pub component: Option<ComponentWorld>,
    /// The manifest's `org.opencontainers.image.*` annotations.
    pub description: Description,
}

impl<'a> Artifact<'a> {
    /// `wasm` described from itself alone: its world, if it decodes, and
    /// its own metadata, if readable.
    pub fn of(wasm: &'a [u8], signature: Option<&'a str>) -> Self {
        Artifact {
            wasm,
            signature,
            component: ComponentWorld::decode(wasm).ok(),
            description: Description::from_component(wasm).unwrap_or_default(),
        }
    }
}

/// Pushes `wasm` (and `signature`, the text of its `.minisig`) to the tag
/// `reference` names, as a Wasm OCI artifact described from the component
/// alone ([`Artifact::of`]); returns the reference pinned to the manifest's
/// digest.
pub async fn push(
    wasm: &[u8],
    signature: Option<&str>,
    reference: &OciReference,
    options: &Options,
) -> Result<OciReference, OciError> {
    push_artifact(&Artifact::of(wasm, signature), reference, options).await
}

/// Pushes `artifact` to the tag `reference` names: its config (with the
/// `component`), its layer, and its manifest (annotated, the signature
/// too); returns the reference pinned to the manifest's digest. A manifest
/// or config over the caps a pull reads under is refused before anything
/// is sent.
pub async fn push_artifact(
    artifact: &Artifact<'_>,
    reference: &OciReference,
    options: &Options,
) -> Result<OciReference, OciError> {
    let fail = failing(reference);
    let created = now_rfc3339();
    let layer_digest = format!("sha256:{}", sha256_hex(artifact.wasm));
    let mut config = serde_json::json!({
        "created": created,
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    });
    if let Some(component) = &artifact.component {
        config["component"] = serde_json::to_value(component).expect("a world serializes");
    }
    let config = serde_json::to_vec(&config).expect("a JSON value serializes");
    if config.len() as u64 > MAX_CONFIG_BYTES {
        return Err(fail(OciProblem::TooLarge {
            what: "config",
            cap: MAX_CONFIG_BYTES,
        }));
    }
    let config_digest = format!("sha256:{}", sha256_hex(&config));
    let mut annotations = artifact.description.annotations(&created);
    if let Some(signature) = artifact.signature {
        annotations.insert(SIGNATURE_ANNOTATION.to_string(), signature.to_string());
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": WASM_CONFIG_MEDIA_TYPE, "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": layer_digest, "size": artifact.wasm.len()}],
        "annotations": annotations,
    });
    let manifest = serde_json::to_vec(&manifest).expect("a JSON value serializes");
    if manifest.len() as u64 > MAX_OCI_MANIFEST_BYTES {
        return Err(fail(OciProblem::TooLarge {
            what: "manifest",
            cap: MAX_OCI_MANIFEST_BYTES,
        }));
    }
    push_image(reference, &manifest, &[artifact.wasm, &config], options).await
}

/// Pushes any OCI image: each of `blobs` (unless the registry has it
/// already), then `manifest` (an OCI image manifest) under the tag
/// `reference` names; returns the reference pinned to the manifest's digest.
/// [`push`] builds a Wasm artifact's and calls this.
pub async fn push_image(
    reference: &OciReference,
    manifest: &[u8],
    blobs: &[&[u8]],
    options: &Options,
) -> Result<OciReference, OciError> {
    let fail = failing(reference);
    let tag = reference
        .tag()
        .ok_or_else(|| fail(OciProblem::PushNeedsTag))?;
    let mut registry = Registry::new(reference, options).map_err(fail)?;
    within(options.deadline, async {
        registry.authorize("pull,push").await?;
        for blob in blobs {
            registry.upload(blob).await?;
        }
        registry.put_manifest(tag, manifest).await
    })
    .await
    .map_err(fail)?;
    Ok(reference.pinned(&sha256_hex(manifest)))
}

/// Checks that `registry` (`host[:port]`) lets [`Options::credential`] in,
/// as `docker login` does: its challenge on `/v2/` answered with it (a
/// bearer token asked for with no repository scope). A wrong password is
/// [`OciProblem::Refused`]. Nothing is stored.
pub async fn check_login(registry: &str, options: &Options) -> Result<(), OciProblem> {
    let reference = OciReference::parse(&format!("oci://{registry}/dsh-env/login:check"))
        .map_err(|e| OciProblem::Client(e.to_string()))?;
    let mut registry = Registry::new(&reference, options).map_err(OciProblem::redacted)?;
    // No repository: the token asked for carries no scope.
    registry.repository.clear();
    (within(options.deadline, registry.authorize("pull")).await).map_err(OciProblem::redacted)
}

/// A Wasm artifact fetched and verified, held in memory: nothing is in a
/// store until [`Pulled::commit`].
#[derive(Debug, Clone)]
pub struct Pulled {
    artifact: StoredArtifact,
    manifest: Vec<u8>,
    config: Vec<u8>,
    /// The tag it was fetched by, if any, as a reference.
    tagged: Option<OciReference>,
}

impl Pulled {
    /// The artifact, pinned, as the store will give it back once committed.
    pub fn artifact(&self) -> &StoredArtifact {
        &self.artifact
    }

    /// Writes the artifact's blobs to `store` (the manifest last, so a
    /// manifest in the store always finds its blobs), lists it in the
    /// store's `index.json` under its pinned reference (and the tag it was
    /// fetched by), and returns it as the store gives it back.
    pub fn commit(self, store: &BlobStore) -> Result<StoredArtifact, OciError> {
        let reference = &self.artifact.reference;
        let fail = failing(reference);
        let mut manifest_hex = String::new();
        for blob in [&self.artifact.wasm, &self.config, &self.manifest] {
            manifest_hex = store.put_blob(blob).map_err(|e| fail(e.into()))?;
        }
        let names: Vec<String> = std::iter::once(reference)
            .chain(&self.tagged)
            .map(layout_name)
            .collect();
        (store.record(&manifest_hex, &names)).map_err(|e| fail(e.into()))?;
        store.load(reference).map_err(|e| fail(e.problem.into()))
    }
}

/// Fetches the Wasm artifact `reference` names (a tag is resolved to its
/// manifest digest) and verifies every blob, without writing anything.
pub async fn fetch(reference: &OciReference, options: &Options) -> Result<Pulled, OciError> {
    let fail = failing(reference);
    let mut registry = Registry::new(reference, options).map_err(fail)?;
    within(options.deadline, async {
        registry.authorize("pull").await?;
        let (manifest_bytes, manifest_hex) = registry.manifest(reference).await?;
        let manifest = ImageManifest::parse(&manifest_bytes)?;
        if manifest.config_size > MAX_CONFIG_BYTES {
            return Err(OciProblem::TooLarge {
                what: "config",
                cap: MAX_CONFIG_BYTES,
            });
        }
        let config =
            (registry.blob("config", &manifest.config_digest, manifest.config_size)).await?;
        let wasm = (registry.blob("layer", &manifest.layer_digest, manifest.layer_size)).await?;
        Ok(Pulled {
            artifact: StoredArtifact {
                reference: reference.pinned(&manifest_hex),
                wasm,
                wasm_sha256: manifest.layer_digest,
                signature: manifest.signature,
            },
            manifest: manifest_bytes,
            config,
            tagged: reference.tag().map(|_| reference.clone()),
        })
    })
    .await
    .map_err(fail)
}

/// [`fetch`], then [`Pulled::commit`] to `store`: returns the artifact as
/// the store gives it back, pinned. On any failure nothing is written.
pub async fn pull(
    reference: &OciReference,
    store: &BlobStore,
    options: &Options,
) -> Result<StoredArtifact, OciError> {
    fetch(reference, options).await?.commit(store)
}

/// Makes an [`OciError`] naming `reference` from a problem, with every
/// secret held blanked out of it.
fn failing(reference: &OciReference) -> impl Fn(OciProblem) -> OciError + Copy + '_ {
    |problem| OciError {
        reference: Box::new(reference.clone()),
        problem: problem.redacted(),
    }
}

/// `work`, failed with [`OciProblem::Deadline`] if it is not done within `deadline`.
async fn within<T>(
    deadline: Duration,
    work: impl Future<Output = Result<T, OciProblem>>,
) -> Result<T, OciProblem> {
    (tokio::time::timeout(deadline, work).await).unwrap_or(Err(OciProblem::Deadline(deadline)))
}

/// A URL the plain-HTTP rule refuses: carried through reqwest's redirect
/// policy as its error, and recognised on the way out.
#[derive(Debug, thiserror::Error)]
#[error("plain HTTP to {0}")]
struct PlainHttpRefused(String);

/// Whether `url` is plain HTTP on a host that may not have it: one that is
/// not loopback, and not the registry's own `plain_host` (the registry
/// given `--plain-http`).
fn refuse_plain_http(url: &Url, plain_host: Option<&str>) -> Option<PlainHttpRefused> {
    let host = url.host_str().unwrap_or_default();
    let allowed = url.scheme() != "http" || is_loopback_host(host) || plain_host == Some(host);
    (!allowed).then(|| PlainHttpRefused(shown_url(url)))
}

/// A URL from a registry, secrets blanked, short and escaped, for a message.
fn shown_url(url: &Url) -> String {
    let text: String = (secrets::redact(url.as_str()).chars())
        .take(EXCERPT_CHARS)
        .collect();
    escape_controls(&text).into_owned()
}

/// A client for one registry and repository, on the transport its
/// reference allows.
struct Registry {
    http: reqwest::Client,
    /// `<scheme>://<registry>/`.
    origin: Url,
    repository: String,
    scheme: &'static str,
    /// The registry's host, when it was given `--plain-http`.
    plain_host: Option<String>,
    /// `host[:port]`, for messages.
    registry: String,
    /// The credential to answer a challenge with, if any.
    credential: Option<Credential>,
    /// How requests to the registry's own origin are authorized, once its
    /// challenge is answered.
    authorization: Option<Authorization>,
}

/// How a registry's challenge was answered.
enum Authorization {
    /// HTTP Basic, with the credential.
    Basic,
    /// A bearer token from its realm.
    Bearer(String),
}

impl Registry {
    fn new(reference: &OciReference, options: &Options) -> Result<Self, OciProblem> {
        install_crypto_provider();
        if let Some(credential) = &options.credential {
            secrets::hold_credential(credential);
        }
        let plain = options.plain_http || reference.is_loopback();
        let scheme = if plain { "http" } else { "https" };
        let origin = Url::parse(&format!("{scheme}://{}/", reference.registry()))
            .map_err(|e| OciProblem::Client(e.to_string()))?;
        let plain_host = (options.plain_http)
            .then(|| origin.host_str().map(str::to_string))
            .flatten();
        let policy_host = plain_host.clone();
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            match refuse_plain_http(attempt.url(), policy_host.as_deref()) {
                Some(refused) => attempt.error(refused),
                None => attempt.follow(),
            }
        });
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .https_only(!plain)
            .redirect(policy);
        for (name, address) in &options.resolve {
            builder = builder.resolve(name, SocketAddr::new(*address, 0));
        }
        let http = builder
            .build()
            .map_err(|e| OciProblem::Client(e.to_string()))?;
        Ok(Registry {
            http,
            origin,
            repository: reference.repository().to_string(),
            scheme,
            plain_host,
            registry: reference.registry().to_string(),
            credential: options.credential.clone(),
            authorization: None,
        })
    }

    /// `<origin>/v2/<repository>/<path>`.
    fn url(&self, path: &str) -> Result<Url, OciProblem> {
        (self.origin.join(&format!("v2/{}/{path}", self.repository)))
            .map_err(|e| OciProblem::Client(e.to_string()))
    }

    /// A request to `url`, with the token only if `url` is the registry's
    /// own scheme, host and port.
    fn request(&self, method: Method, url: Url) -> reqwest::RequestBuilder {
        let same_origin = url.origin() == self.origin.origin();
        let request = self.http.request(method, url);
        match (&self.authorization, &self.credential) {
            (Some(Authorization::Bearer(token)), _) if same_origin => request.bearer_auth(token),
            (Some(Authorization::Basic), Some(credential)) if same_origin => {
                request.basic_auth(&credential.username, Some(&credential.secret))
            }
            _ => request,
        }
    }

    /// Sends `request`; a transport failure (or a refused redirect) is the
    /// error.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, OciProblem> {
        request.send().await.map_err(|e| self.unreachable(&e))
    }

    /// `response` if its status is 2xx, else the error naming `what` and
    /// quoting the registry.
    async fn success(
        &self,
        response: reqwest::Response,
        what: &'static str,
    ) -> Result<reqwest::Response, OciProblem> {
        if response.status().is_success() {
            Ok(response)
        } else if response.status() == StatusCode::UNAUTHORIZED && self.credential.is_none() {
            // An anonymous token that does not cover this repository.
            Err(self.needs_credentials())
        } else {
            Err(status_error(response, what).await)
        }
    }

    /// [`OciProblem::NeedsCredentials`] for this registry.
    fn needs_credentials(&self) -> OciProblem {
        OciProblem::NeedsCredentials {
            registry: escape_controls(&self.registry).into_owned(),
        }
    }

    /// [`OciProblem::NeedsCredentials`] without a credential, else
    /// [`OciProblem::Refused`] naming the username and where it came from.
    fn refused(&self) -> OciProblem {
        match &self.credential {
            None => self.needs_credentials(),
            Some(credential) => OciProblem::Refused {
                registry: escape_controls(&self.registry).into_owned(),
                username: escape_controls(&credential.username).into_owned(),
                origin: escape_controls(&credential.source).into_owned(),
            },
        }
    }

    /// Answers the registry's challenge on `/v2/`, if it makes one: Basic
    /// with the credential (checked there and then, so a wrong password is
    /// named as such), or a bearer token for `actions` on the repository,
    /// asked for with the credential if there is one. This is also the
    /// first contact, so an unreachable registry fails here.
    async fn authorize(&mut self, actions: &str) -> Result<(), OciProblem> {
        let url = (self.origin.join("v2/")).map_err(|e| OciProblem::Client(e.to_string()))?;
        let response = self.send(self.http.get(url.clone())).await?;
        if response.status() != StatusCode::UNAUTHORIZED {
            self.success(response, "API version check").await?;
            return Ok(());
        }
        let header = (response.headers().get_all(WWW_AUTHENTICATE).iter())
            .filter_map(|value| value.to_str().ok())
            .collect::<Vec<_>>()
            .join(", ");
        let Some((realm, service)) = bearer_challenge(&header) else {
            if !has_challenge(&header, "Basic") {
                return Err(OciProblem::UnknownChallenge(excerpt(
                    header.as_bytes(),
                    false,
                )));
            }
            let credential = self
                .credential
                .as_ref()
                .ok_or_else(|| self.needs_credentials())?;
            let check =
                (self.http.get(url)).basic_auth(&credential.username, Some(&credential.secret));
            let response = self.send(check).await?;
            if response.status() == StatusCode::UNAUTHORIZED {
                return Err(self.refused());
            }
            self.success(response, "API version check").await?;
            self.authorization = Some(Authorization::Basic);
            return Ok(());
        };
        let mut realm = Url::parse(&realm)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or_else(|| {
                OciProblem::Token(format!(
                    "its realm {} is not an HTTP URL",
                    excerpt(realm.as_bytes(), false)
                ))
            })?;
        {
            let mut query = realm.query_pairs_mut();
            if !self.repository.is_empty() {
                query.append_pair(
                    "scope",
                    &format!("repository:{}:{actions}", self.repository),
                );
            }
            if let Some(service) = &service {
                query.append_pair("service", service);
            }
        }
        if let Some(refused) = refuse_plain_http(&realm, self.plain_host.as_deref()) {
            return Err(OciProblem::PlainHttp { url: refused.0 });
        }
        let mut request = self.http.get(realm);
        if let Some(credential) = &self.credential {
            request = request.basic_auth(&credential.username, Some(&credential.secret));
        }
        let response = self.send(request).await?;
        if response.status() == StatusCode::UNAUTHORIZED {
            return Err(self.refused());
        }
        let response = self.success(response, "token").await?;
        let body = read_capped(response, "token", MAX_TOKEN_BYTES).await?;
        let answer: serde_json::Value = serde_json::from_slice(&body).map_err(|_| {
            OciProblem::Token(format!(
                "the token endpoint answered {}, not JSON",
                excerpt(&body, false)
            ))
        })?;
        let token = (answer["token"].as_str())
            .or(answer["access_token"].as_str())
            .filter(|token| HeaderValue::from_str(&format!("Bearer {token}")).is_ok())
            .ok_or_else(|| {
                OciProblem::Token("the token endpoint's answer has no usable token".into())
            })?;
        // Held before anything else is asked: a registry may repeat it.
        secrets::hold(token);
        self.authorization = Some(Authorization::Bearer(token.to_string()));
        Ok(())
    }

    /// Uploads `blob`, unless the registry has it: `HEAD`, then `POST` an
    /// upload and `PUT` the bytes to the location it gives.
    async fn upload(&self, blob: &[u8]) -> Result<(), OciProblem> {
        let digest = format!("sha256:{}", sha256_hex(blob));
        let head = self.request(Method::HEAD, self.url(&format!("blobs/{digest}"))?);
        let head = self.send(head).await?;
        if head.status().is_success() {
            return Ok(());
        }
        if head.status() != StatusCode::NOT_FOUND {
            return Err(status_error(head, "blob check").await);
        }
        let started = self.request(Method::POST, self.url("blobs/uploads/")?);
        let started = self.success(self.send(started).await?, "upload").await?;
        let mut location = (started.headers().get(LOCATION))
            .and_then(|value| value.to_str().ok())
            .and_then(|location| started.url().join(location).ok())
            .ok_or_else(|| OciProblem::Status {
                status: started.status().as_u16(),
                what: "upload",
                detail: ", with no usable Location".into(),
            })?;
        if let Some(refused) = refuse_plain_http(&location, self.plain_host.as_deref()) {
            return Err(OciProblem::PlainHttp { url: refused.0 });
        }
        location.query_pairs_mut().append_pair("digest", &digest);
        let put = (self.request(Method::PUT, location))
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(blob.to_vec());
        self.success(self.send(put).await?, "upload").await?;
        Ok(())
    }

    /// Puts `manifest` under `tag`.
    async fn put_manifest(&self, tag: &str, manifest: &[u8]) -> Result<(), OciProblem> {
        let put = (self.request(Method::PUT, self.url(&format!("manifests/{tag}"))?))
            .header(CONTENT_TYPE, OCI_MANIFEST_MEDIA_TYPE)
            .body(manifest.to_vec());
        self.success(self.send(put).await?, "manifest").await?;
        Ok(())
    }

    /// The manifest `reference` names, at most [`MAX_OCI_MANIFEST_BYTES`],
    /// with its SHA-256 (hex), checked against the pinned digest, or for a
    /// tag against the registry's digest header.
    async fn manifest(&self, reference: &OciReference) -> Result<(Vec<u8>, String), OciProblem> {
        let url = self.url(&format!("manifests/{}", reference.target()))?;
        // distribution answers a manifest request only with an OCI Accept header.
        let request = (self.request(Method::GET, url)).header(ACCEPT, OCI_MANIFEST_MEDIA_TYPE);
        let unknown = if reference.is_pinned() {
            "manifest digest"
        } else {
            "tag"
        };
        let response = self.found(request, "manifest", unknown).await?;
        let claimed = (response.headers().get("docker-content-digest"))
            .and_then(|value| value.to_str().ok())
            .and_then(|digest| digest.strip_prefix("sha256:"))
            .map(str::to_string);
        let bytes = read_capped(response, "manifest", MAX_OCI_MANIFEST_BYTES).await?;
        let actual = match reference.digest_hex().map(str::to_string).or(claimed) {
            Some(expected) => {
                verify_sha256(&bytes, &expected).map_err(|mismatch| {
                    OciProblem::DigestMismatch {
                        what: "manifest",
                        expected: escape_controls(&expected).into_owned(),
                        actual: mismatch.actual,
                    }
                })?;
                expected
            }
            None => sha256_hex(&bytes),
        };
        Ok((bytes, actual))
    }

    /// The blob `hex`: exactly `size` bytes (the manifest's word), whose
    /// SHA-256 is `hex`. Reading stops past `size`.
    async fn blob(&self, what: &'static str, hex: &str, size: u64) -> Result<Vec<u8>, OciProblem> {
        let url = self.url(&format!("blobs/sha256:{hex}"))?;
        let response = self
            .found(self.request(Method::GET, url), what, what)
            .await?;
        let bytes = read_capped(response, what, size).await?;
        if bytes.len() as u64 != size {
            return Err(OciProblem::TooSmall {
                what,
                declared: size,
                actual: bytes.len() as u64,
            });
        }
        verify_sha256(&bytes, hex).map_err(|mismatch| OciProblem::DigestMismatch {
            what,
            expected: hex.to_string(),
            actual: mismatch.actual,
        })?;
        Ok(bytes)
    }

    /// Sends `request`; a 404 is [`OciProblem::Unknown`] naming `unknown`,
    /// any other error status names `what`.
    async fn found(
        &self,
        request: reqwest::RequestBuilder,
        what: &'static str,
        unknown: &'static str,
    ) -> Result<reqwest::Response, OciProblem> {
        let response = self.send(request).await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Err(OciProblem::Unknown(unknown));
        }
        self.success(response, what).await
    }

    /// A transport failure: [`OciProblem::PlainHttp`] if the plain-HTTP rule
    /// stopped a redirect, else [`OciProblem::Unreachable`].
    fn unreachable(&self, error: &reqwest::Error) -> OciProblem {
        let mut detail = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            if let Some(refused) = cause.downcast_ref::<PlainHttpRefused>() {
                return OciProblem::PlainHttp {
                    url: refused.0.clone(),
                };
            }
            detail = format!("{detail}: {cause}");
            source = cause.source();
        }
        OciProblem::Unreachable {
            scheme: self.scheme,
            detail: escape_controls(&detail).into_owned(),
            hint: if self.scheme == "https" {
                " (plain HTTP only for a loopback registry, or with --plain-http)"
            } else {
                ""
            },
        }
    }
}

/// The `realm` and `service` of the first `Bearer` challenge in a
/// `WWW-Authenticate` header's text.
fn bearer_challenge(header: &str) -> Option<(String, Option<String>)> {
    http_auth::ChallengeParser::new(header)
        .filter_map(Result::ok)
        .find(|challenge| challenge.scheme.eq_ignore_ascii_case("Bearer"))
        .and_then(|challenge| {
            let param = |name: &str| {
                (challenge.params.iter())
                    .find(|(key, _)| key.eq_ignore_ascii_case(name))
                    .map(|(_, value)| value.to_unescaped())
            };
            Some((param("realm")?, param("service")))
        })
}

/// Whether a `WWW-Authenticate` header's text has a `scheme` challenge.
fn has_challenge(header: &str, scheme: &str) -> bool {
    http_auth::ChallengeParser::new(header)
        .filter_map(Result::ok)
        .any(|challenge| challenge.scheme.eq_ignore_ascii_case(scheme))
}

/// The error for an answer with status other than 2xx, naming `what` and
/// quoting at most [`MAX_ERROR_BODY_BYTES`] of its body, briefly.
async fn status_error(response: reqwest::Response, what: &'static str) -> OciProblem {
    let status = response.status().as_u16();
    let detail = match read_up_to(response, MAX_ERROR_BODY_BYTES).await {
        Ok((body, cut)) => registry_says(&body, cut),
        Err(_) => String::new(),
    };
    OciProblem::Status {
        status,
        what,
        detail,
    }
}

/// What an error body says, for a message: the distribution spec's first
/// error code and message (` (CODE: message)`), else an excerpt of the text.
fn registry_says(body: &[u8], cut: bool) -> String {
    let json = serde_json::from_slice::<serde_json::Value>(body).ok();
    let first = json.as_ref().map(|json| &json["errors"][0]);
    if let Some(code) = first.and_then(|first| first["code"].as_str()) {
        let text = match first.and_then(|first| first["message"].as_str()) {
            Some(message) if !message.is_empty() => format!("{code}: {message}"),
            _ => code.to_string(),
        };
        return format!(" ({})", excerpt(text.as_bytes(), false));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return String::new();
    }
    format!(": {}", excerpt(body, cut))
}

/// At most [`EXCERPT_CHARS`] characters of a registry's text, every secret
/// held blanked (before the cut, so none is left half), escaped, in
/// backquotes, with `…` when there was more (or `cut`, when reading stopped).
fn excerpt(text: &[u8], cut: bool) -> String {
    let text = String::from_utf8_lossy(text);
    let text = secrets::redact(&text);
    let mut chars = text.trim().chars();
    let shown: String = chars.by_ref().take(EXCERPT_CHARS).collect();
    let more = if cut || chars.next().is_some() {
        "…"
    } else {
        ""
    };
    format!("`{}{more}`", escape_controls(&shown))
}

/// The body of `response`, refused as soon as it passes `cap` bytes (a
/// declared `Content-Length` over it is refused before reading).
async fn read_capped(
    response: reqwest::Response,
    what: &'static str,
    cap: u64,
) -> Result<Vec<u8>, OciProblem> {
    let too_large = || OciProblem::TooLarge { what, cap };
    if response.content_length().is_some_and(|length| length > cap) {
        return Err(too_large());
    }
    let (body, more) = read_up_to(response, cap)
        .await
        .map_err(|e| OciProblem::Status {
            status: 0,
            what,
            detail: format!(
                ": the download broke off: {}",
                escape_controls(&e.to_string())
            ),
        })?;
    if more {
        return Err(too_large());
    }
    Ok(body)
}

/// At most `cap` bytes of `response`'s body, and whether there was more:
/// reading stops at the cap, the rest is never read. Every body this crate
/// reads comes through here.
async fn read_up_to(
    response: reqwest::Response,
    cap: u64,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        let room = cap - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// reqwest is built without a default TLS provider (aws-lc-rs is a long C
/// build); ring serves instead. A provider another part of the process
/// installed first is kept.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Now, in RFC 3339 (UTC), for the config's `created`.
fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

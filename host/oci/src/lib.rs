//! dsh-env contributors over OCI registries: [`push`] a component (and its
//! minisign signature) as a CNCF Wasm OCI artifact, [`pull`] one into the
//! home's [`Store`], verified and size-capped.
//!
//! The artifact: an OCI image manifest with exactly one `application/wasm`
//! layer (the component), an `application/vnd.wasm.config.v0+json` config,
//! and the signature, if any, as the [`SIGNATURE_ANNOTATION`] on the
//! manifest, so the manifest digest pins the signature with the code.
//!
//! `oci-client` does the registry's token dance and the uploads. The reads
//! are this crate's own: the manifest is read under [`MAX_OCI_MANIFEST_BYTES`],
//! the layer's declared size is checked against
//! [`dsh_env::store::MAX_LAYER_BYTES`] before
//! anything is downloaded, blobs are streamed under their declared size, and
//! every digest is computed here (a registry can serve tampered bytes under
//! the original digest header). Nothing reaches the store until every blob of
//! the artifact has been verified.

#![deny(missing_docs)]

use std::time::Duration;

use dsh_env::cache::sha256_hex;
use dsh_env::input::escape_controls;
use dsh_env::store::{
    MAX_OCI_MANIFEST_BYTES, ManifestProblem, OCI_MANIFEST_MEDIA_TYPE, SIGNATURE_ANNOTATION,
    StoreProblem, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, WasmManifest,
};
use dsh_env::{OciReference, Store, StoredArtifact};
use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Reference, RegistryOperation};

/// The largest Wasm config blob pulled: the CNCF config is a few hundred
/// bytes (its `component` field lists the component's imports and exports).
pub const MAX_CONFIG_BYTES: u64 = MAX_OCI_MANIFEST_BYTES;

/// How long connecting to a registry may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a registry may leave a read waiting.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How to reach a registry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Speak plain HTTP to a registry that is not on this machine. Loopback
    /// registries (`localhost`, 127.0.0.0/8, `[::1]`) get plain HTTP anyway;
    /// every other one gets HTTPS unless this is set.
    pub plain_http: bool,
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
    /// The registry has no manifest under that tag or digest.
    #[error("unknown {0} in the registry")]
    Unknown(&'static str),
    /// The registry answered with an error status.
    #[error("the registry answered {status} for the {what}{detail}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// `manifest`, `config`, `layer`, or the operation.
        what: &'static str,
        /// The registry's error code, if it gave one.
        detail: String,
    },
    /// The manifest is not a Wasm artifact, or declares a layer over the cap.
    #[error(transparent)]
    Manifest(#[from] ManifestProblem),
    /// A blob is bigger than it may be (the manifest's cap, or the size the
    /// manifest declares for it).
    #[error("the {what} is over {cap} bytes")]
    TooLarge {
        /// `manifest`, `config` or `layer`.
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
    /// The registry refused or failed a request made through `oci-client`
    /// (a token, an upload).
    #[error("the registry refused the {0}")]
    Push(String),
    /// The HTTP client could not be built.
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
    /// The verified artifact could not be written to the store.
    #[error(transparent)]
    Store(#[from] StoreProblem),
}

/// Pushes `wasm` (and `signature`, the text of its `.minisig`) to the tag
/// `reference` names, as a Wasm OCI artifact; returns the reference pinned
/// to the manifest's digest.
pub async fn push(
    wasm: &[u8],
    signature: Option<&str>,
    reference: &OciReference,
    options: &Options,
) -> Result<OciReference, OciError> {
    let fail = failing(reference);
    let tag = reference
        .tag()
        .ok_or_else(|| fail(OciProblem::PushNeedsTag))?;
    let registry = Registry::new(reference, options).map_err(fail)?;
    let image = Reference::with_tag(
        reference.registry().to_string(),
        reference.repository().to_string(),
        tag.to_string(),
    );
    let layer_digest = format!("sha256:{}", sha256_hex(wasm));
    let config = serde_json::to_vec(&serde_json::json!({
        "created": now_rfc3339(),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    }))
    .expect("a JSON value serializes");
    let config_digest = format!("sha256:{}", sha256_hex(&config));
    let mut manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": WASM_CONFIG_MEDIA_TYPE, "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": layer_digest, "size": wasm.len()}],
    });
    if let Some(signature) = signature {
        manifest["annotations"] = serde_json::json!({ SIGNATURE_ANNOTATION: signature });
    }
    let manifest = serde_json::to_vec(&manifest).expect("a JSON value serializes");
    let mut registry = registry;
    registry
        .authorize(&image, RegistryOperation::Push)
        .await
        .map_err(fail)?;
    let client = &registry.client;
    let uploaded = async {
        client
            .push_blob(&image, wasm.to_vec(), &layer_digest)
            .await?;
        client.push_blob(&image, config, &config_digest).await?;
        let content_type = http_header(OCI_MANIFEST_MEDIA_TYPE);
        client
            .push_manifest_raw(&image, manifest.clone(), content_type)
            .await
    };
    uploaded
        .await
        .map_err(|e| fail(registry.problem(e, "upload")))?;
    Ok(reference.pinned(&sha256_hex(&manifest)))
}

/// Pulls the Wasm artifact `reference` names (a tag is resolved to its
/// manifest digest), verifies every blob, puts them in `store`, and returns
/// it as the store gives it back, pinned. On any failure nothing is written.
pub async fn pull(
    reference: &OciReference,
    store: &Store,
    options: &Options,
) -> Result<StoredArtifact, OciError> {
    let fail = failing(reference);
    let mut registry = Registry::new(reference, options).map_err(fail)?;
    let image = Reference::with_tag(
        reference.registry().to_string(),
        reference.repository().to_string(),
        reference.tag().unwrap_or("latest").to_string(),
    );
    (registry.authorize(&image, RegistryOperation::Pull).await).map_err(fail)?;
    let (manifest_bytes, manifest_hex) = registry.manifest(reference).await.map_err(fail)?;
    let manifest = WasmManifest::parse(&manifest_bytes).map_err(|e| fail(e.into()))?;
    if manifest.config_size > MAX_CONFIG_BYTES {
        return Err(fail(OciProblem::TooLarge {
            what: "config",
            cap: MAX_CONFIG_BYTES,
        }));
    }
    let config = (registry.blob("config", &manifest.config_digest, manifest.config_size))
        .await
        .map_err(fail)?;
    let wasm = (registry.blob("layer", &manifest.layer_digest, manifest.layer_size))
        .await
        .map_err(fail)?;
    // Everything verified: the blobs first, the manifest last, so a manifest
    // in the store always finds its blobs.
    for blob in [&wasm, &config, &manifest_bytes] {
        store.put_blob(blob).map_err(|e| fail(e.into()))?;
    }
    let pinned = reference.pinned(&manifest_hex);
    store.load(&pinned).map_err(|e| fail(e.problem.into()))
}

/// Makes an [`OciError`] naming `reference` from a problem.
fn failing(reference: &OciReference) -> impl Fn(OciProblem) -> OciError + Copy + '_ {
    |problem| OciError {
        reference: Box::new(reference.clone()),
        problem,
    }
}

/// A client for one registry, on the transport its reference allows.
struct Registry {
    client: oci_client::Client,
    http: reqwest::Client,
    /// `<scheme>://<registry>/v2/<repository>`.
    base: String,
    scheme: &'static str,
    /// An anonymous bearer token, if the registry wants one.
    token: Option<String>,
}

impl Registry {
    fn new(reference: &OciReference, options: &Options) -> Result<Self, OciProblem> {
        install_crypto_provider();
        let plain = options.plain_http || reference.is_loopback();
        let scheme = if plain { "http" } else { "https" };
        let config = ClientConfig {
            protocol: if plain {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            ..ClientConfig::default()
        };
        // `Client::new` falls back to a default (HTTPS) client on error; this
        // way a bad configuration is an error.
        let client =
            oci_client::Client::try_from(config).map_err(|e| OciProblem::Client(e.to_string()))?;
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .https_only(!plain)
            .build()
            .map_err(|e| OciProblem::Client(e.to_string()))?;
        Ok(Registry {
            client,
            http,
            base: format!(
                "{scheme}://{}/v2/{}",
                reference.registry(),
                reference.repository()
            ),
            scheme,
            token: None,
        })
    }

    /// Asks the registry for an anonymous token for `operation` on `image`;
    /// this is also the first contact, so an unreachable registry fails here.
    async fn authorize(
        &mut self,
        image: &Reference,
        operation: RegistryOperation,
    ) -> Result<(), OciProblem> {
        self.token = (self.client)
            .auth(image, &RegistryAuth::Anonymous, operation)
            .await
            .map_err(|e| self.problem(e, "token"))?;
        Ok(())
    }

    /// The manifest `reference` names, at most [`MAX_OCI_MANIFEST_BYTES`],
    /// with its SHA-256 (hex), checked against the pinned digest, or for a
    /// tag against the registry's digest header.
    async fn manifest(&self, reference: &OciReference) -> Result<(Vec<u8>, String), OciProblem> {
        let url = format!("{}/manifests/{}", self.base, reference.target());
        // distribution answers a manifest request only with an OCI Accept header.
        let request = (self.http.get(url)).header(reqwest::header::ACCEPT, OCI_MANIFEST_MEDIA_TYPE);
        let unknown = if reference.is_pinned() {
            "manifest digest"
        } else {
            "tag"
        };
        let response = self.send(request, "manifest", unknown).await?;
        let claimed = (response.headers().get("docker-content-digest"))
            .and_then(|value| value.to_str().ok())
            .and_then(|digest| digest.strip_prefix("sha256:"))
            .map(str::to_string);
        let bytes = read_capped(response, "manifest", MAX_OCI_MANIFEST_BYTES).await?;
        let actual = sha256_hex(&bytes);
        if let Some(expected) = reference.digest_hex().map(str::to_string).or(claimed)
            && expected != actual
        {
            return Err(OciProblem::DigestMismatch {
                what: "manifest",
                expected: escape_controls(&expected).into_owned(),
                actual,
            });
        }
        Ok((bytes, actual))
    }

    /// The blob `hex`: exactly `size` bytes (the manifest's word), whose
    /// SHA-256 is `hex`. Reading stops past `size`.
    async fn blob(&self, what: &'static str, hex: &str, size: u64) -> Result<Vec<u8>, OciProblem> {
        let url = format!("{}/blobs/sha256:{hex}", self.base);
        let response = self.send(self.http.get(url), what, what).await?;
        let bytes = read_capped(response, what, size).await?;
        if bytes.len() as u64 != size {
            return Err(OciProblem::TooSmall {
                what,
                declared: size,
                actual: bytes.len() as u64,
            });
        }
        let actual = sha256_hex(&bytes);
        if actual != hex {
            return Err(OciProblem::DigestMismatch {
                what,
                expected: hex.to_string(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Sends `request` with the token; a 404 is [`OciProblem::Unknown`]
    /// naming `unknown`, any other error status names `what`.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        what: &'static str,
        unknown: &'static str,
    ) -> Result<reqwest::Response, OciProblem> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request.send().await.map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(OciProblem::Unknown(unknown));
        }
        if !status.is_success() {
            // The registry's error body is small JSON; read a little of it for its code.
            let body = read_capped(response, what, 4096).await.unwrap_or_default();
            let code = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["errors"][0]["code"].as_str().map(str::to_string))
                .map(|code| format!(" ({})", escape_controls(&code)))
                .unwrap_or_default();
            return Err(OciProblem::Status {
                status: status.as_u16(),
                what,
                detail: code,
            });
        }
        Ok(response)
    }

    fn unreachable(&self, error: &dyn std::error::Error) -> OciProblem {
        let mut detail = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
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

    /// An `oci-client` error: a transport failure is [`OciProblem::Unreachable`],
    /// anything else a failed `what`.
    fn problem(&self, error: OciDistributionError, what: &'static str) -> OciProblem {
        match &error {
            OciDistributionError::RequestError(e) if !e.is_status() => self.unreachable(e),
            _ => OciProblem::Push(format!("{what}: {}", escape_controls(&error.to_string()))),
        }
    }
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
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| OciProblem::Status {
            status: 0,
            what,
            detail: format!(
                ": the download broke off: {}",
                escape_controls(&e.to_string())
            ),
        })?;
        if (body.len() + chunk.len()) as u64 > cap {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// reqwest is built without a default TLS provider (aws-lc-rs is a long C
/// build); ring serves instead. A provider another part of the process
/// installed first is kept.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A header value from a constant that is one.
fn http_header(value: &'static str) -> reqwest::header::HeaderValue {
    reqwest::header::HeaderValue::from_static(value)
}

/// Now, in RFC 3339 (UTC), for the config's `created`.
fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

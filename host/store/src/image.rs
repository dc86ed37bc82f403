//! The image-manifest format of a CNCF Wasm OCI artifact: one
//! `application/wasm` layer (the component), an
//! `application/vnd.wasm.config.v0+json` config, and the component's
//! minisign signature as the [`SIGNATURE_ANNOTATION`], so that the manifest
//! digest a manifest entry pins also pins the signature.

use dsh_env_support::digest::is_sha256_hex;
use dsh_env_support::input::{MAX_COMPONENT_BYTES, escape_controls};

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

/// What an image manifest says about the Wasm component it ships.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageManifest {
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
pub enum ImageManifestError {
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

impl ImageManifest {
    /// Checks that `bytes` is an OCI image manifest of a Wasm artifact:
    /// schema 2, the Wasm config media type, exactly one layer, of media
    /// type `application/wasm`, sha256 digests, and a layer no bigger than
    /// [`MAX_LAYER_BYTES`].
    pub fn parse(bytes: &[u8]) -> Result<Self, ImageManifestError> {
        let not_wasm = |what: &str| ImageManifestError::NotWasm(what.to_string());
        let manifest: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|_| not_wasm("the manifest is not JSON"))?;
        if manifest["schemaVersion"] != 2 {
            return Err(not_wasm("the manifest's schemaVersion is not 2"));
        }
        if let Some(media_type) = manifest.get("mediaType")
            && media_type != OCI_MANIFEST_MEDIA_TYPE
        {
            return Err(ImageManifestError::NotWasm(format!(
                "the manifest's media type is {}, not {OCI_MANIFEST_MEDIA_TYPE}",
                shown_json(media_type)
            )));
        }
        let (config_digest, config_size) =
            descriptor(&manifest["config"], WASM_CONFIG_MEDIA_TYPE, "config")?;
        let layers = (manifest["layers"].as_array()).ok_or_else(|| not_wasm("it has no layers"))?;
        let [layer] = layers.as_slice() else {
            return Err(ImageManifestError::NotWasm(format!(
                "it has {} layers, not exactly one",
                layers.len()
            )));
        };
        let (layer_digest, layer_size) = descriptor(layer, WASM_LAYER_MEDIA_TYPE, "layer")?;
        if layer_size > MAX_LAYER_BYTES {
            return Err(ImageManifestError::LayerTooLarge {
                size: layer_size,
                cap: MAX_LAYER_BYTES,
            });
        }
        let signature = match manifest["annotations"].get(SIGNATURE_ANNOTATION) {
            None => None,
            Some(serde_json::Value::String(text)) => Some(text.clone()),
            Some(_) => return Err(not_wasm("its signature annotation is not a string")),
        };
        Ok(ImageManifest {
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
) -> Result<(String, u64), ImageManifestError> {
    if value["mediaType"] != media_type {
        return Err(ImageManifestError::NotWasm(format!(
            "its {what} media type is {}, not {media_type}",
            shown_json(&value["mediaType"])
        )));
    }
    let digest = (value["digest"].as_str())
        .and_then(|digest| digest.strip_prefix("sha256:"))
        .filter(|hex| is_sha256_hex(hex))
        .ok_or_else(|| ImageManifestError::NotWasm(format!("its {what} digest is not sha256")))?;
    let size = (value["size"].as_u64())
        .ok_or_else(|| ImageManifestError::NotWasm(format!("its {what} has no size")))?;
    Ok((digest.to_string(), size))
}

/// A JSON value from a registry, short and escaped, for a message.
fn shown_json(value: &serde_json::Value) -> String {
    let text = value.to_string();
    let cut: String = text.chars().take(80).collect();
    escape_controls(&cut).into_owned()
}

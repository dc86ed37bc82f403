//! The store of pulled dsh-env contributors, under `$DSH_HOME/store/`, and
//! what an OCI reference to one is.
//!
//! A contributor shipped over an OCI registry is a CNCF Wasm OCI artifact
//! ([`ImageManifest`]: what its image manifest says). The network side
//! (`dsh-env-oci`) verifies every blob's digest and puts it here with
//! [`BlobStore::put_blob`], then names the manifest with
//! [`BlobStore::record`] (the store is an OCI image layout); the core then
//! reads an artifact back with [`BlobStore::load`] by its digest-pinned
//! [`OciReference`], verifying again, without the network.
//! [`BlobStore::sweep`] is its gc.
//!
//! No wasmtime and no network: the core and the OCI client both build on it.

#![deny(missing_docs)]

// The modules are private and listed bottom to top: each imports only from
// those above it. The public API is the flat re-export below.
mod blobs;
mod error;
mod gc;
mod image;
mod layout;
mod reference;

pub use blobs::{BlobStore, StoredArtifact};
pub use error::{StoreError, StoreProblem};
pub use gc::{Keep, Sweep, SweptBlob};
pub use image::{
    ImageManifest, ImageManifestError, MAX_LAYER_BYTES, MAX_OCI_MANIFEST_BYTES,
    OCI_MANIFEST_MEDIA_TYPE, SIGNATURE_ANNOTATION, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE,
};
pub use layout::{MAX_INDEX_BYTES, OCI_INDEX_MEDIA_TYPE, REF_NAME_ANNOTATION, layout_name};
pub use reference::{OCI_SCHEME, OciReference, ReferenceError, is_loopback_host};

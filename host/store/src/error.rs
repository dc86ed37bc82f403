//! What goes wrong in the store, naming the reference.

use dsh_env_support::input::FileError;

use crate::image::ImageManifestError;
use crate::reference::OciReference;

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
    Manifest(#[from] ImageManifestError),
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

//! The content-addressed blob store: files named by their digest
//! (`blobs/sha256/<hex>`), written whole, so two pulls of the same bytes
//! agree; and an artifact read back by its digest-pinned reference,
//! verified again, without the network.

use std::path::{Path, PathBuf};

use dsh_env_support::digest::{self, sha256_hex};
use dsh_env_support::input::{ReadProblem, escape_controls, read_regular_file};

use crate::error::{StoreError, StoreProblem};
use crate::image::{ImageManifest, MAX_LAYER_BYTES, MAX_OCI_MANIFEST_BYTES};
use crate::reference::OciReference;

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

/// The content-addressed store: blobs filed by their SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobStore {
    root: PathBuf,
}

impl BlobStore {
    /// The store rooted at `root` (created when something is put).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        BlobStore { root: root.into() }
    }

    /// The store of the dsh-env home at `home`: `<home>/store`.
    pub fn in_home(home: &Path) -> Self {
        BlobStore::new(home.join("store"))
    }

    /// The directory it lives in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file of the blob whose SHA-256 is `hex`.
    pub fn blob_path(&self, hex: &str) -> PathBuf {
        self.blob_dir().join(hex)
    }

    /// The directory every blob is filed in.
    pub(crate) fn blob_dir(&self) -> PathBuf {
        self.root.join("blobs").join("sha256")
    }

    /// Files `bytes` under their SHA-256 and returns it (hex). Callers that
    /// got the bytes from elsewhere verify them against the digest they
    /// expect first; the store files bytes only under their own digest.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<String, StoreProblem> {
        let hex = sha256_hex(bytes);
        self.write_whole(&self.blob_path(&hex), bytes)?;
        Ok(hex)
    }

    /// Writes `bytes` to `path` whole, its directory made if need be.
    pub(crate) fn write_whole(&self, path: &Path, bytes: &[u8]) -> Result<(), StoreProblem> {
        let failed = |source| StoreProblem::Write {
            path: escape_controls(&path.display().to_string()).into_owned(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        dsh_env_support::atomic_file::write(path, bytes).map_err(failed)
    }

    /// The plain files in the blob directory, (name, size), in name order;
    /// none if there is no directory.
    pub(crate) fn blob_names(&self) -> Result<Vec<(String, u64)>, StoreProblem> {
        let dir = self.blob_dir();
        let entries = match std::fs::read_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            result => result.map_err(sweep_failed(&dir))?,
        };
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(sweep_failed(&dir))?;
            let metadata = entry.metadata().map_err(sweep_failed(&entry.path()))?;
            if !metadata.is_dir() {
                let name = entry.file_name().to_string_lossy().into_owned();
                files.push((name, metadata.len()));
            }
        }
        files.sort();
        Ok(files)
    }

    /// The stored blob `hex`, if it is whole and the manifest of a Wasm artifact.
    pub(crate) fn stored_manifest(&self, hex: &str) -> Option<ImageManifest> {
        let bytes = read_regular_file(&self.blob_path(hex), MAX_OCI_MANIFEST_BYTES).ok()?;
        (digest::verify(&bytes, hex).is_ok())
            .then(|| ImageManifest::parse(&bytes).ok())
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
        let manifest = ImageManifest::parse(&manifest_bytes)?;
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

/// The error for a directory that could not be listed, or a blob that could
/// not be removed, at `path`.
pub(crate) fn sweep_failed(path: &Path) -> impl FnOnce(std::io::Error) -> StoreProblem + use<> {
    let path = escape_controls(&path.display().to_string()).into_owned();
    move |source| StoreProblem::Sweep { path, source }
}

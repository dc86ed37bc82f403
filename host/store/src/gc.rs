//! The store's gc: [`BlobStore::sweep`] removes every blob that no kept
//! artifact references, and then the entries of `index.json` whose
//! manifest is gone.

use std::collections::HashSet;

use dsh_env_support::digest::is_sha256_hex;
use dsh_env_support::input::escape_controls;

use crate::blobs::{BlobStore, sweep_failed};
use crate::error::StoreProblem;
use crate::image::MAX_OCI_MANIFEST_BYTES;
use crate::reference::OciReference;

/// Which artifacts [`BlobStore::sweep`] keeps; every other file goes.
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

/// A file [`BlobStore::sweep`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweptBlob {
    /// Its file name: a SHA-256 in lowercase hex, unless it was not a blob
    /// (escaped).
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
}

/// What [`BlobStore::sweep`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sweep {
    /// The files removed, in name order.
    pub removed: Vec<SweptBlob>,
    /// How many blobs are left.
    pub kept: usize,
    /// Their bytes.
    pub kept_bytes: u64,
}

impl BlobStore {
    /// Removes every file in the store's blob directory that `keep` does
    /// not keep, and says what it removed; `index.json` then lists only
    /// manifests still there. Run it while no `add` is writing
    /// to the same store: a pull's blobs are written before its manifest.
    pub fn sweep(&self, keep: Keep<'_>) -> Result<Sweep, StoreProblem> {
        let dir = self.blob_dir();
        // Subdirectories are left alone.
        let files = self.blob_names()?;
        let roots: Vec<&str> = match keep {
            Keep::Pinned(references) => references.iter().filter_map(|r| r.digest_hex()).collect(),
            Keep::Stored => (files.iter())
                .filter(|(name, bytes)| is_sha256_hex(name) && *bytes <= MAX_OCI_MANIFEST_BYTES)
                .map(|(name, _)| name.as_str())
                .collect(),
        };
        let mut live = HashSet::new();
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
            std::fs::remove_file(&path).map_err(sweep_failed(&path))?;
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::{WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
    use crate::layout::{INDEX_FILE, LAYOUT_FILE, OCI_INDEX_MEDIA_TYPE, ref_name};

    #[test]
    fn the_store_is_an_oci_layout_whose_index_follows_records_and_sweeps() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::new(dir.path().join("store"));
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
}

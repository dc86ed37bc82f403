//! The store as an OCI image layout, so that standard OCI tools (`skopeo
//! copy oci:<store>:<name> …`) read it and can seed it: an `oci-layout`
//! file, and an `index.json` listing each stored manifest under its
//! [`REF_NAME_ANNOTATION`] ([`layout_name`]: the reference without
//! `oci://`). Loading needs only the blobs, so a home from before the layout
//! (bare `blobs/sha256/`) reads as before, and gets the layout files on its
//! next [`BlobStore::record`]. `index.json` is rewritten whole, under a lock
//! on the store's directory, so two processes recording at once both keep
//! their names.

use dsh_env_support::input::{ReadProblem, escape_controls, read_regular_file};

use crate::blobs::BlobStore;
use crate::error::StoreProblem;
use crate::image::{MAX_OCI_MANIFEST_BYTES, OCI_MANIFEST_MEDIA_TYPE};
use crate::reference::{OCI_SCHEME, OciReference};

/// The media type of an OCI image index: the store layout's `index.json`.
pub const OCI_INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// The annotation naming a manifest in an OCI image layout's `index.json`:
/// what `skopeo`'s `oci:<dir>:<name>` matches.
pub const REF_NAME_ANNOTATION: &str = "org.opencontainers.image.ref.name";
/// The largest `index.json` read: thousands of entries of about 300 bytes.
pub const MAX_INDEX_BYTES: u64 = 4 << 20;
/// The OCI image layout's marker file, and what it says.
pub(crate) const LAYOUT_FILE: &str = "oci-layout";
const LAYOUT_TEXT: &str = "{\"imageLayoutVersion\":\"1.0.0\"}";
/// The OCI image layout's index of manifests.
pub(crate) const INDEX_FILE: &str = "index.json";

/// The name of the artifact `reference` names in the store's `index.json`
/// (its [`REF_NAME_ANNOTATION`]): the reference without `oci://`, e.g.
/// `ghcr.io/org/lineage@sha256:<hex>` or `ghcr.io/org/lineage:v1`, which
/// is what `skopeo` takes after `oci:<store>:`.
pub fn layout_name(reference: &OciReference) -> String {
    let text = reference.to_string();
    text.strip_prefix(OCI_SCHEME).unwrap_or(&text).to_string()
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
pub(crate) fn ref_name(entry: &serde_json::Value) -> Option<&str> {
    entry["annotations"][REF_NAME_ANNOTATION].as_str()
}

impl BlobStore {
    /// Lists the stored manifest `hex` in the layout's `index.json` under
    /// each of `names` (see [`layout_name`]; a name another manifest had
    /// moves here), or unnamed if `names` is empty; writes `oci-layout`
    /// first if it is missing. A store without `index.json` (made before
    /// the layout) gets one listing every Wasm artifact it already holds.
    /// Call it once the manifest's blobs are all in.
    pub fn record(&self, hex: &str, names: &[String]) -> Result<(), StoreProblem> {
        let _locked = self.lock_index()?;
        let layout = self.root().join(LAYOUT_FILE);
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
    pub(crate) fn lock_index(&self) -> Result<std::fs::File, StoreProblem> {
        let failed = |source| StoreProblem::Write {
            path: escape_controls(&self.root().display().to_string()).into_owned(),
            source,
        };
        std::fs::create_dir_all(self.root()).map_err(failed)?;
        let directory = std::fs::File::open(self.root()).map_err(failed)?;
        directory.lock().map_err(failed)?;
        Ok(directory)
    }

    /// The manifests `index.json` lists, if there is one.
    pub(crate) fn read_index(&self) -> Result<Option<Vec<serde_json::Value>>, StoreProblem> {
        let path = self.root().join(INDEX_FILE);
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
    pub(crate) fn write_index(&self, entries: Vec<serde_json::Value>) -> Result<(), StoreProblem> {
        let index = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_INDEX_MEDIA_TYPE,
            "manifests": entries,
        });
        let text = serde_json::to_vec_pretty(&index).expect("a JSON value serializes");
        self.write_whole(&self.root().join(INDEX_FILE), &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::{WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};

    #[test]
    fn records_made_at_once_by_many_writers_all_keep_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::new(dir.path().join("store"));
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
                        BlobStore::new(root).record(hex, &[name]).unwrap();
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
}

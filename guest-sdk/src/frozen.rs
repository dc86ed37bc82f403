//! Frozen contract versions never change: every file of every
//! `wit/since_vX.Y.Z` snapshot must match the SHA-256 recorded for it in
//! `wit/frozen.sha256` (the `sha256sum` format), and every recorded file must
//! exist. Contributors built for a version depend on it byte for byte.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

const RULE: &str = "a frozen contract never changes: put the change in a new \
                    wit/since_vX.Y.Z snapshot instead (see wit/README.md)";

fn wit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("wit")
}

/// (path relative to `wit/`, SHA-256 in hex) of each recorded file.
fn recorded() -> BTreeMap<String, String> {
    let list = fs::read_to_string(wit_dir().join("frozen.sha256")).expect("read wit/frozen.sha256");
    list.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (hash, path) = line
                .split_once("  ")
                .unwrap_or_else(|| panic!("not `<sha256>  <path>`: {line:?}"));
            (path.to_string(), hash.to_string())
        })
        .collect()
}

/// Every file under `dir`, relative to `wit/`, with its SHA-256.
fn hash_files(dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("read a snapshot entry").path();
        if path.is_dir() {
            hash_files(&path, out);
            continue;
        }
        let bytes = fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let relative = path.strip_prefix(wit_dir()).expect("under wit/");
        let hash = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        out.insert(relative.to_string_lossy().into_owned(), hash);
    }
}

/// The files of every `since_v*` snapshot, with their SHA-256.
fn snapshots() -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(wit_dir()).expect("read wit/") {
        let path = entry.expect("read a wit/ entry").path();
        let is_snapshot = path
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("since_v"));
        if is_snapshot && path.is_dir() {
            hash_files(&path, &mut files);
        }
    }
    files
}

#[test]
fn frozen_snapshots_match_their_recorded_hashes() {
    let recorded = recorded();
    let actual = snapshots();
    assert!(
        recorded.contains_key("since_v0.1.0/contributor.wit"),
        "dsh:env@0.1.0 must stay recorded; {RULE}"
    );
    for (path, hash) in &recorded {
        match actual.get(path) {
            None => panic!("wit/{path} is recorded as frozen but missing; {RULE}"),
            Some(actual) => assert_eq!(
                actual, hash,
                "wit/{path} differs from its recorded SHA-256; {RULE}"
            ),
        }
    }
    for path in actual.keys() {
        assert!(
            recorded.contains_key(path),
            "wit/{path} is in a frozen snapshot but has no recorded SHA-256: a new \
             snapshot records each file's hash in wit/frozen.sha256 once, when it is \
             frozen; {RULE}"
        );
    }
}

//! One trust rule for every registration made through the Rust API, and
//! trusted keys that share a key id. Signatures are made by the real
//! `minisign`.

use std::path::{Path, PathBuf};

use dsh_env::{ContributorSpec, HostEnv, Manifest, RegistryError, SignatureError, Signer, Trust};
use dsh_env::{LoadFrom, LoadOptions};
use dsh_env_tests::artifacts::minisign::SigningKey;
use dsh_env_tests::{artifacts, registry_trusting};

/// A copy of the agent-lineage example at `dir/name`.
fn lineage_copy(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::copy(artifacts::AGENT_LINEAGE, &path).unwrap();
    path
}

/// A manifest registering `component`, with `trust` (TOML) above it.
fn manifest(component: &Path, trust: &str) -> Manifest {
    let text = format!(
        "{trust}\n[[contributor]]\npath = {:?}\n",
        component.display().to_string()
    );
    Manifest::parse(&text, "m.toml", "/".into()).unwrap()
}

/// `[trust]` requiring a signature by `key`, as TOML.
fn requiring(key: &SigningKey) -> String {
    format!(
        "[trust]\nkeys = [{:?}]\nrequire_signature = true\n",
        key.public
    )
}

fn assert_unsigned(result: Result<impl Sized, RegistryError>) {
    match result {
        Err(RegistryError::Signature(SignatureError::Unsigned { origin, .. })) => {
            assert!(origin.ends_with("lineage.wasm"), "{origin}")
        }
        Err(other) => panic!("expected an unsigned refusal, got {other}"),
        Ok(_) => panic!("an unsigned component was registered"),
    }
}

fn assert_unchecked(result: Result<impl Sized, RegistryError>) {
    match result {
        Err(RegistryError::Signature(SignatureError::Unchecked { origin })) => {
            assert!(origin.ends_with("lineage.wasm"), "{origin}")
        }
        Err(other) => panic!("expected an unchecked refusal, got {other}"),
        Ok(_) => panic!("an unchecked component was registered"),
    }
}

/// Under `require_signature`, the same unsigned component is refused
/// however the Rust API registers it: from a manifest (with or without a
/// `[trust]` of its own), from a spec, or as a component loaded around the
/// registry's trust. Signed, it is registered.
#[tokio::test]
async fn every_registration_path_refuses_an_unsigned_component_under_required_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let author = SigningKey::new(dir.path(), "author");
    let component = lineage_copy(dir.path(), "lineage.wasm");
    let trust = Trust::new(&[&author.public], true).unwrap();
    let registry = registry_trusting(trust);
    let host_env = HostEnv::default();

    let spec = ContributorSpec::file(&component);
    assert_unsigned(registry.register_spec(&spec).await);
    for table in [requiring(&author), String::new()] {
        let manifest = manifest(&component, &table);
        assert_unsigned(registry.register_manifest(&manifest, &host_env).await);
    }
    // A manifest trusting other keys cannot stand in for the registry's.
    let stranger = SigningKey::new(dir.path(), "stranger");
    let other = manifest(
        &component,
        &format!("[trust]\nkeys = [{:?}]\n", stranger.public),
    );
    match registry.register_manifest(&other, &host_env).await {
        Err(RegistryError::TrustMismatch { manifest }) => assert_eq!(manifest, "m.toml"),
        Err(other) => panic!("expected a trust mismatch, got {other}"),
        Ok(_) => panic!("a manifest loosened the registry's trust"),
    }
    // Loaded without the check, or under another registry's trust: refused.
    let loaded = registry
        .load(LoadFrom::File(&component), &LoadOptions::new())
        .unwrap();
    assert_unchecked(registry.register(loaded).await);
    let elsewhere = dsh_env_tests::registry()
        .load(LoadFrom::Spec(&spec), &LoadOptions::new())
        .unwrap();
    assert_unchecked(registry.register(elsewhere).await);
    assert!(registry.contributors().is_empty());

    author.sign(&component);
    let registration = registry.register_spec(&spec).await.unwrap();
    assert_eq!(registration.name(), "agent-lineage");
    drop(registration);
    let loaded = registry
        .load(LoadFrom::Spec(&spec), &LoadOptions::new())
        .unwrap();
    let registration = registry.register(loaded).await.unwrap();
    let listing = &registry.contributors()[0];
    assert!(
        matches!(&listing.signer, Signer::Trusted { key_id, .. } if key_id.to_string() == author.id),
        "{:?}",
        listing.signer
    );
    drop(registration);
    let registrations = (registry.register_manifest(&manifest(&component, ""), &host_env))
        .await
        .unwrap();
    assert_eq!(registrations.len(), 1);
}

/// Two trusted keys with one key id (whoever makes a key chooses its id):
/// each one's signatures verify, whichever is listed first; a key that
/// shares the id but signed nothing does not make a signature verify.
#[tokio::test]
async fn trusted_keys_that_share_a_key_id_are_each_tried() {
    let dir = tempfile::tempdir().unwrap();
    let first = SigningKey::new(dir.path(), "first");
    let second = SigningKey::new(dir.path(), "second").claiming_the_id_of(&first);
    assert_eq!(first.id, second.id);
    let (by_first, by_second) = (
        lineage_copy(dir.path(), "by-first.wasm"),
        lineage_copy(dir.path(), "by-second.wasm"),
    );
    first.sign(&by_first);
    second.sign(&by_second);
    // The real minisign takes the rewritten id: each key verifies its own
    // file, and only its own.
    assert!(first.verifies(&by_first) && second.verifies(&by_second));
    assert!(!first.verifies(&by_second) && !second.verifies(&by_first));

    for keys in [
        [&first.public, &second.public],
        [&second.public, &first.public],
    ] {
        let registry = registry_trusting(Trust::new(&keys, true).unwrap());
        for file in [&by_first, &by_second] {
            let component = registry
                .load(
                    LoadFrom::Spec(&ContributorSpec::file(file)),
                    &LoadOptions::new(),
                )
                .unwrap();
            assert!(
                matches!(component.signer(), Signer::Trusted { key_id, .. } if key_id.to_string() == first.id),
                "{}: {:?}",
                file.display(),
                component.signer()
            );
        }
    }

    // Trusting only the first, the second's signature names a trusted id
    // but does not verify.
    let registry = registry_trusting(Trust::new(&[&first.public], true).unwrap());
    match registry.load(
        LoadFrom::Spec(&ContributorSpec::file(&by_second)),
        &LoadOptions::new(),
    ) {
        Err(RegistryError::Signature(SignatureError::Invalid { key_id, .. })) => {
            assert_eq!(key_id.to_string(), first.id)
        }
        Err(other) => panic!("expected an invalid signature, got {other}"),
        Ok(_) => panic!("a signature by an untrusted key verified"),
    }
    // The default registry checks nothing.
    let component = dsh_env_tests::registry()
        .load(
            LoadFrom::Spec(&ContributorSpec::file(&by_second)),
            &LoadOptions::new(),
        )
        .unwrap();
    assert!(matches!(component.signer(), Signer::Unverified { .. }));
}

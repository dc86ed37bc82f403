//! Push and pull against a real registry (Debian's docker-registry, started
//! per test on 127.0.0.1), with real components.

use dsh_env::store::{ManifestProblem, OCI_MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE};
use dsh_env::{OciReference, Store};
use dsh_env_artifacts::{AGENT_LINEAGE, CALL_TRACE};
use dsh_env_oci::{OciProblem, Options, pull, push};
use dsh_env_test_registry::TestRegistry;

/// Asserts that `error`'s problem matches `pattern`, showing the error if not.
macro_rules! assert_problem {
    ($error:expr, $pattern:pat) => {
        assert!(matches!($error.problem, $pattern), "{}", $error)
    };
}

const SIGNATURE: &str = "untrusted comment: signature from minisign secret key\nRWQ=\n";

fn component(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

fn reference(registry: &TestRegistry, rest: &str) -> OciReference {
    OciReference::parse(&format!("oci://{}/{rest}", registry.host())).unwrap()
}

/// A store in a fresh directory, and the directory.
fn store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (Store::new(dir.path().join("store")), dir)
}

fn is_empty(store: &Store) -> bool {
    !store.root().exists()
}

#[tokio::test]
async fn a_pushed_component_pulls_back_byte_for_byte_with_its_signature() {
    let registry = TestRegistry::start();
    let wasm = component(AGENT_LINEAGE);
    let tagged = reference(&registry, "dsh/agent-lineage:v1");
    let pinned = push(&wasm, Some(SIGNATURE), &tagged, &Options::default())
        .await
        .unwrap();
    assert!(pinned.is_pinned());
    assert_eq!(pinned.repository(), "dsh/agent-lineage");

    let (store, _dir) = store();
    let pulled = pull(&tagged, &store, &Options::default()).await.unwrap();
    assert_eq!(
        pulled.reference, pinned,
        "the tag resolves to the pushed manifest"
    );
    assert_eq!(pulled.wasm, wasm);
    assert_eq!(pulled.signature.as_deref(), Some(SIGNATURE));
    assert_eq!(store.load(&pinned).unwrap(), pulled);

    // Unsigned, and pulled by digest.
    let unsigned = push(
        &wasm,
        None,
        &reference(&registry, "dsh/unsigned:v1"),
        &Options::default(),
    )
    .await
    .unwrap();
    let pulled = pull(&unsigned, &store, &Options::default()).await.unwrap();
    assert_eq!((pulled.wasm, pulled.signature), (wasm, None));
}

#[tokio::test]
async fn a_moved_tag_does_not_change_what_a_pinned_reference_loads() {
    let registry = TestRegistry::start();
    let tagged = reference(&registry, "dsh/moving:stable");
    let options = Options::default();
    let (first, second) = (component(AGENT_LINEAGE), component(CALL_TRACE));
    let (store, _dir) = store();
    let old = push(&first, None, &tagged, &options).await.unwrap();
    pull(&tagged, &store, &options).await.unwrap();

    let new = push(&second, None, &tagged, &options).await.unwrap();
    assert_ne!(old, new);
    assert_eq!(
        store.load(&old).unwrap().wasm,
        first,
        "the store still has the old code"
    );
    let error = store.load(&new).unwrap_err().to_string();
    assert!(
        error.contains("not in the store") && error.contains("dsh-env add"),
        "{error}"
    );

    let moved = pull(&tagged, &store, &options).await.unwrap();
    assert_eq!((moved.reference, moved.wasm), (new, second));
    assert_eq!(store.load(&old).unwrap().wasm, first);
}

#[tokio::test]
async fn a_blob_tampered_in_the_registry_is_refused_and_nothing_is_written() {
    let registry = TestRegistry::start();
    let wasm = component(AGENT_LINEAGE);
    let tagged = reference(&registry, "dsh/tampered:v1");
    push(&wasm, None, &tagged, &Options::default())
        .await
        .unwrap();
    // Same size, one byte flipped: the registry still serves it under the
    // original digest (and Docker-Content-Digest header).
    let layer = registry.blob_file(&dsh_env::cache::sha256_hex(&wasm));
    let mut bytes = std::fs::read(&layer).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&layer, &bytes).unwrap();

    let (store, _dir) = store();
    let error = pull(&tagged, &store, &Options::default())
        .await
        .unwrap_err();
    assert_problem!(error, OciProblem::DigestMismatch { what: "layer", .. });
    assert!(
        error.to_string().starts_with(&tagged.to_string()),
        "{error}"
    );
    assert!(is_empty(&store), "nothing is written on failure");
}

#[tokio::test]
async fn a_pinned_artifact_loads_from_the_store_with_the_registry_stopped() {
    let mut registry = TestRegistry::start();
    let wasm = component(AGENT_LINEAGE);
    let tagged = reference(&registry, "dsh/offline:v1");
    let pinned = push(&wasm, None, &tagged, &Options::default())
        .await
        .unwrap();
    let (store, _dir) = store();
    pull(&pinned, &store, &Options::default()).await.unwrap();
    registry.stop();

    assert_eq!(store.load(&pinned).unwrap().wasm, wasm);
    let error = pull(&tagged, &store, &Options::default())
        .await
        .unwrap_err();
    assert_problem!(error, OciProblem::Unreachable { scheme: "http", .. });
}

#[tokio::test]
async fn an_unknown_tag_or_digest_is_named() {
    let registry = TestRegistry::start();
    let (store, _dir) = store();
    let tagged = reference(&registry, "dsh/nothing:v1");
    let error = pull(&tagged, &store, &Options::default())
        .await
        .unwrap_err();
    assert_problem!(error, OciProblem::Unknown("tag"));
    assert_eq!(
        error.to_string(),
        format!("{tagged}: unknown tag in the registry")
    );
    let pinned = tagged.pinned(&"ab".repeat(32));
    let error = pull(&pinned, &store, &Options::default())
        .await
        .unwrap_err();
    assert_problem!(error, OciProblem::Unknown("manifest digest"));
    assert!(is_empty(&store));
}

/// Pushes, with `oci-client` directly, an image of one config and one
/// layer (media type, bytes), the manifest declaring `layer_size` bytes for
/// the layer whatever its length.
async fn push_image(
    tagged: &OciReference,
    (config_type, config): (&str, &[u8]),
    (layer_type, layer, layer_size): (&str, &[u8], u64),
) {
    // reqwest has no TLS provider of its own here; dsh-env-oci installs ring
    // before it builds a client, and so must a test that builds one first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let image = oci_client::Reference::with_tag(
        tagged.registry().to_string(),
        tagged.repository().to_string(),
        tagged.tag().unwrap().to_string(),
    );
    let descriptor = |media_type: &str, blob: &[u8], size: u64| {
        serde_json::json!({
            "mediaType": media_type,
            "digest": format!("sha256:{}", dsh_env::cache::sha256_hex(blob)),
            "size": size,
        })
    };
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "config": descriptor(config_type, config, config.len() as u64),
        "layers": [descriptor(layer_type, layer, layer_size)],
    });
    for blob in [config, layer] {
        let digest = format!("sha256:{}", dsh_env::cache::sha256_hex(blob));
        client
            .push_blob(&image, blob.to_vec(), &digest)
            .await
            .unwrap();
    }
    let body = serde_json::to_vec(&manifest).unwrap();
    let content_type = reqwest::header::HeaderValue::from_static(OCI_MANIFEST_MEDIA_TYPE);
    client
        .push_manifest_raw(&image, body, content_type)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_image_that_is_not_a_wasm_artifact_is_refused() {
    let registry = TestRegistry::start();
    let (store, _dir) = store();
    let tagged = reference(&registry, "dsh/image:v1");
    let (config, layer) = (b"{}".as_slice(), b"not a tarball".as_slice());
    push_image(
        &tagged,
        ("application/vnd.oci.image.config.v1+json", config),
        ("application/vnd.oci.image.layer.v1.tar", layer, 13),
    )
    .await;
    let error = pull(&tagged, &store, &Options::default())
        .await
        .unwrap_err();
    assert_problem!(error, OciProblem::Manifest(ManifestProblem::NotWasm(_)));
    assert!(error.to_string().contains("not a Wasm artifact"), "{error}");
    assert!(is_empty(&store));
}

#[tokio::test]
async fn a_layer_over_the_cap_is_refused_before_it_is_downloaded() {
    let registry = TestRegistry::start();
    let (store, _dir) = store();
    let wasm = component(AGENT_LINEAGE);
    let config = b"{}".as_slice();
    // The manifest declares 200 MiB for a small blob (the registry only
    // checks that the blob exists): a pull that downloaded it would fail as
    // "smaller than declared", not as over the cap.
    let huge = reference(&registry, "dsh/huge:v1");
    push_image(
        &huge,
        (WASM_CONFIG_MEDIA_TYPE, config),
        ("application/wasm", &wasm, 200 << 20),
    )
    .await;
    let error = pull(&huge, &store, &Options::default()).await.unwrap_err();
    assert_problem!(
        error,
        OciProblem::Manifest(ManifestProblem::LayerTooLarge { .. })
    );

    // A layer declared smaller than it is: reading stops at the declared size.
    let short = reference(&registry, "dsh/short:v1");
    push_image(
        &short,
        (WASM_CONFIG_MEDIA_TYPE, config),
        ("application/wasm", &wasm, 100),
    )
    .await;
    let error = pull(&short, &store, &Options::default()).await.unwrap_err();
    assert_problem!(
        error,
        OciProblem::TooLarge {
            what: "layer",
            cap: 100
        }
    );
    assert!(is_empty(&store));
}

#[tokio::test]
async fn plain_http_to_a_registry_off_loopback_needs_plain_http() {
    let registry = TestRegistry::start();
    let wasm = component(AGENT_LINEAGE);
    // 0.0.0.0 is not a loopback address, but on Linux connecting to it
    // reaches this machine: the registry is there, over plain HTTP only.
    let port = registry.host().rsplit_once(':').unwrap().1.to_string();
    let remote = OciReference::parse(&format!("oci://0.0.0.0:{port}/dsh/remote:v1")).unwrap();
    assert!(!remote.is_loopback());

    let (store, _dir) = store();
    let pushed = push(&wasm, None, &remote, &Options::default()).await;
    let pulled = pull(&remote, &store, &Options::default()).await;
    for error in [pushed.unwrap_err(), pulled.unwrap_err()] {
        assert_problem!(
            error,
            OciProblem::Unreachable {
                scheme: "https",
                ..
            }
        );
        assert!(error.to_string().contains("--plain-http"), "{error}");
    }

    let plain = Options { plain_http: true };
    let pinned = push(&wasm, None, &remote, &plain).await.unwrap();
    assert_eq!(
        pull(&remote, &store, &plain).await.unwrap().reference,
        pinned
    );
}

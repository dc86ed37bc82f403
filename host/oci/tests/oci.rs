//! Push and pull against a real registry (Debian's docker-registry, started
//! per test on 127.0.0.1), with real components; and against a hostile one
//! (a server the test starts on 127.0.0.1 that floods, stalls and redirects).

use dsh_env_artifacts::{AGENT_LINEAGE, CALL_TRACE};
use dsh_env_store::{BlobStore, ImageManifestError, OciReference};
use dsh_env_store::{OCI_MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE};
use dsh_env_support::digest::sha256_hex;
use std::time::Duration;

use dsh_env_oci::{MAX_TOKEN_BYTES, OciProblem, Options, fetch, pull, push};
use dsh_env_test_registry::{Body, HostileServer, Reply, TestRegistry};

/// Asserts that `error`'s problem matches `pattern`, showing the error if not.
macro_rules! assert_problem {
    ($error:expr, $pattern:pat $(if $guard:expr)?) => {
        assert!(matches!($error.problem, $pattern $(if $guard)?), "{}", $error)
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
fn store() -> (BlobStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (BlobStore::new(dir.path().join("store")), dir)
}

fn is_empty(store: &BlobStore) -> bool {
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
    // What to run about it is the front end's to say (the CLI names
    // `dsh-env pull` and `add`), not the store's.
    assert!(
        error.contains("not in the store") && !error.contains("dsh-env"),
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
    let layer = registry.blob_file(&sha256_hex(&wasm));
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

/// Pushes an image of one config and one layer (media type, bytes), the
/// manifest declaring `layer_size` bytes for the layer whatever its length.
async fn push_image(
    tagged: &OciReference,
    (config_type, config): (&str, &[u8]),
    (layer_type, layer, layer_size): (&str, &[u8], u64),
) {
    let descriptor = |media_type: &str, blob: &[u8], size: u64| {
        serde_json::json!({
            "mediaType": media_type,
            "digest": format!("sha256:{}", sha256_hex(blob)),
            "size": size,
        })
    };
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "config": descriptor(config_type, config, config.len() as u64),
        "layers": [descriptor(layer_type, layer, layer_size)],
    });
    let manifest = serde_json::to_vec(&manifest).unwrap();
    dsh_env_oci::push_image(tagged, &manifest, &[config, layer], &Options::default())
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
    assert_problem!(error, OciProblem::Manifest(ImageManifestError::NotWasm(_)));
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
        OciProblem::Manifest(ImageManifestError::LayerTooLarge { .. })
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

    let plain = Options {
        plain_http: true,
        ..Options::default()
    };
    let pinned = push(&wasm, None, &remote, &plain).await.unwrap();
    assert_eq!(
        pull(&remote, &store, &plain).await.unwrap().reference,
        pinned
    );
}

#[tokio::test]
async fn a_fetch_writes_nothing_until_it_is_committed() {
    let registry = TestRegistry::start();
    let wasm = component(AGENT_LINEAGE);
    let tagged = reference(&registry, "dsh/staged:v1");
    let pinned = push(&wasm, Some(SIGNATURE), &tagged, &Options::default())
        .await
        .unwrap();
    let (store, _dir) = store();
    let pulled = fetch(&tagged, &Options::default()).await.unwrap();
    assert_eq!(pulled.artifact().reference, pinned);
    assert_eq!(pulled.artifact().wasm, wasm);
    assert!(is_empty(&store), "fetched, not yet committed");
    let stored = pulled.commit(&store).unwrap();
    assert_eq!(store.load(&pinned).unwrap(), stored);
}

/// A reference to `rest` on the hostile server.
fn hostile(server: &HostileServer, rest: &str) -> OciReference {
    OciReference::parse(&format!("oci://{}/{rest}", server.host())).unwrap()
}

/// `401` asking for an anonymous bearer token from `realm`.
fn challenge(realm: &str) -> Reply {
    Reply::status(401).header(
        "WWW-Authenticate",
        &format!("Bearer realm=\"{realm}\",service=\"hostile\""),
    )
}

/// The longest error message a registry's answer may make: the excerpt is
/// short, whatever the registry sent.
const SHORT: usize = 600;

#[tokio::test]
async fn a_token_endpoint_that_never_stops_talking_is_cut_at_its_cap() {
    let server = HostileServer::start(|request| {
        let realm = format!("http://{}/token", request.header("host").unwrap());
        match request.path() {
            "/v2/" => challenge(&realm),
            "/token" if request.target.contains("refused") => Reply::new(403, Body::Endless),
            "/token" => Reply::new(200, Body::Endless),
            _ => Reply::status(404),
        }
    });
    let (store, _dir) = store();
    let options = Options::default();
    let tagged = hostile(&server, "dsh/endless:v1");
    let pulled = pull(&tagged, &store, &options).await.unwrap_err();
    let pushed = push(b"\0asm", None, &tagged, &options).await.unwrap_err();
    for error in [pulled, pushed] {
        assert_problem!(
            error,
            OciProblem::TooLarge {
                what: "token",
                cap: MAX_TOKEN_BYTES
            }
        );
    }
    let token = (server.requests().into_iter())
        .find(|request| request.path() == "/token")
        .unwrap();
    assert!(
        token
            .target
            .contains("scope=repository%3Adsh%2Fendless%3Apull&service=hostile"),
        "{}",
        token.target
    );

    // Refused, with an endless reason: the error quotes a little of it.
    let error = pull(&hostile(&server, "dsh/refused:v1"), &store, &options)
        .await
        .unwrap_err();
    assert_problem!(
        error,
        OciProblem::Status {
            status: 403,
            what: "token",
            ..
        }
    );
    let message = error.to_string();
    assert!(
        message.len() < SHORT && message.ends_with("xxx…`"),
        "{message}"
    );
    assert!(is_empty(&store));
}

#[tokio::test]
async fn huge_error_answers_on_push_and_pull_are_quoted_in_a_short_excerpt() {
    const HUGE: u64 = 32 << 20;
    let server = HostileServer::start(|request| {
        let (method, path) = (request.method.as_str(), request.path());
        match (method, path) {
            ("GET", "/v2/") => Reply::status(200),
            // The upload of dsh/upload fails; dsh/manifest has every blob
            // already, and its manifest is refused.
            ("HEAD", _) if path.starts_with("/v2/dsh/upload/") => Reply::status(404),
            ("HEAD", _) => Reply::status(200),
            ("POST", _) => Reply::new(500, Body::Sized(HUGE)),
            ("PUT", _) => Reply::new(400, Body::Endless),
            ("GET", _) => Reply::new(502, Body::Sized(HUGE)),
            _ => Reply::status(405),
        }
    });
    let options = Options::default();
    let wasm = component(AGENT_LINEAGE);
    let upload = hostile(&server, "dsh/upload:v1");
    let error = push(&wasm, None, &upload, &options).await.unwrap_err();
    assert_problem!(
        error,
        OciProblem::Status {
            status: 500,
            what: "upload",
            ..
        }
    );
    let manifest = hostile(&server, "dsh/manifest:v1");
    let error2 = push(&wasm, None, &manifest, &options).await.unwrap_err();
    assert_problem!(
        error2,
        OciProblem::Status {
            status: 400,
            what: "manifest",
            ..
        }
    );
    let (store, _dir) = store();
    let pulled = hostile(&server, "dsh/pull:v1");
    let error3 = pull(&pulled, &store, &options).await.unwrap_err();
    assert_problem!(
        error3,
        OciProblem::Status {
            status: 502,
            what: "manifest",
            ..
        }
    );
    for error in [error, error2, error3] {
        let message = error.to_string();
        assert!(
            message.len() < SHORT && message.ends_with("xxx…`"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_registry_that_trickles_its_token_meets_the_deadline() {
    let server = HostileServer::start(|request| match request.path() {
        "/v2/" => challenge(&format!("http://{}/token", request.header("host").unwrap())),
        "/token" => Reply::new(200, Body::Trickle(br#"{"token":"slow"}"#.to_vec())),
        _ => Reply::status(404),
    });
    let (store, _dir) = store();
    let options = Options {
        deadline: Duration::from_secs(2),
        ..Options::default()
    };
    let tagged = hostile(&server, "dsh/slow:v1");
    let pulled = pull(&tagged, &store, &options).await.unwrap_err();
    let pushed = push(b"\0asm", None, &tagged, &options).await.unwrap_err();
    for error in [pulled, pushed] {
        assert_problem!(error, OciProblem::Deadline(deadline) if deadline == Duration::from_secs(2));
        assert!(
            error.to_string().contains("network deadline of 2 s"),
            "{error}"
        );
    }
    assert!(is_empty(&store));
}

/// The name the tests give "another host": mapped to 127.0.0.1 by the
/// client's resolver override, so no traffic leaves this machine.
const ELSEWHERE: &str = "registry.example.test";

#[tokio::test]
async fn a_redirect_never_takes_a_pull_to_plain_http_elsewhere_nor_the_token_with_it() {
    let server = HostileServer::start(|request| {
        let host = request.header("host").unwrap();
        let port = host.rsplit_once(':').unwrap().1;
        let elsewhere = format!("http://{ELSEWHERE}:{port}");
        match request.path() {
            "/v2/" if host.starts_with(ELSEWHERE) => challenge(&format!("{elsewhere}/token")),
            "/v2/" => Reply::status(200),
            "/token" => Reply::text(200, r#"{"token":"sekrit"}"#),
            "/v2/dsh/away/manifests/v1" => {
                Reply::redirect(&format!("{elsewhere}/v2/dsh/away/manifests/v1"))
            }
            "/v2/dsh/home/manifests/v1" if host.starts_with(ELSEWHERE) => {
                Reply::redirect(&format!("http://127.0.0.1:{port}/moved"))
            }
            "/v2/dsh/third/manifests/v1" => {
                Reply::redirect(&format!("http://other.example.test:{port}/moved"))
            }
            _ => Reply::status(404),
        }
    });
    let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
    let options = Options {
        resolve: vec![
            (ELSEWHERE.to_string(), loopback),
            ("other.example.test".to_string(), loopback),
        ],
        ..Options::default()
    };
    let (store, _dir) = store();

    // From a loopback registry to plain HTTP on another name: refused, and
    // never sent.
    let error = pull(&hostile(&server, "dsh/away:v1"), &store, &options)
        .await
        .unwrap_err();
    assert_problem!(error, OciProblem::PlainHttp { ref url } if url.contains(ELSEWHERE));
    assert!(error.to_string().contains("--plain-http"), "{error}");
    let reached_elsewhere = |server: &HostileServer| {
        (server.requests().iter())
            .filter(|request| request.header("host").unwrap().starts_with(ELSEWHERE))
            .count()
    };
    assert_eq!(reached_elsewhere(&server), 0);

    // The registry given --plain-http may be plain HTTP itself (its token
    // realm too), and a redirect to loopback is followed, without the token.
    let port = server.port();
    let named =
        |rest: &str| OciReference::parse(&format!("oci://{ELSEWHERE}:{port}/{rest}")).unwrap();
    let plain = Options {
        plain_http: true,
        ..options.clone()
    };
    let error = pull(&named("dsh/home:v1"), &store, &plain)
        .await
        .unwrap_err();
    assert_problem!(error, OciProblem::Unknown("tag"));
    let requests = server.requests();
    let authorization = |path: &str| {
        let request = requests.iter().find(|r| r.path() == path).unwrap();
        request.header("authorization").map(str::to_string)
    };
    assert_eq!(
        authorization("/v2/dsh/home/manifests/v1").as_deref(),
        Some("Bearer sekrit"),
        "the registry itself gets the token"
    );
    assert_eq!(authorization("/moved"), None, "another host never does");

    // --plain-http names that registry only: a redirect to plain HTTP on a
    // third name is refused.
    let error = pull(&named("dsh/third:v1"), &store, &plain)
        .await
        .unwrap_err();
    assert_problem!(error, OciProblem::PlainHttp { ref url } if url.contains("other.example.test"));
    assert!(is_empty(&store));
}

#[tokio::test]
async fn a_token_realm_on_plain_http_elsewhere_is_refused() {
    let server = HostileServer::start(|request| {
        let port = request
            .header("host")
            .unwrap()
            .rsplit_once(':')
            .unwrap()
            .1
            .to_string();
        match request.path() {
            "/v2/" => challenge(&format!("http://{ELSEWHERE}:{port}/token")),
            _ => Reply::text(200, r#"{"token":"t"}"#),
        }
    });
    let options = Options {
        resolve: vec![(ELSEWHERE.to_string(), [127, 0, 0, 1].into())],
        ..Options::default()
    };
    let (store, _dir) = store();
    let error = pull(&hostile(&server, "dsh/realm:v1"), &store, &options)
        .await
        .unwrap_err();
    assert_problem!(error, OciProblem::PlainHttp { ref url } if url.contains(ELSEWHERE));
    assert_eq!(server.requests().len(), 1, "only /v2/ was asked");
}

#[tokio::test]
async fn what_a_registry_repeats_of_the_credential_is_blanked_before_any_excerpt_is_cut() {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use dsh_env_oci::{Credential, secrets};
    const PASSWORD: &str = "oci-test Pa55/w0rd+";
    const URL_ENCODED: &str = "oci-test%20Pa55%2Fw0rd%2B";
    let basic = STANDARD.encode(format!("fleet:{PASSWORD}"));
    // A registry sends the client, with its credential, to plain HTTP
    // elsewhere, the password in the URL's query after a long path: refused,
    // and the URL quoted short, the password blanked before the cut.
    let path = "p".repeat(110);
    let server = HostileServer::start(move |_| {
        Reply::redirect(&format!(
            "http://elsewhere.invalid/{path}?leak={URL_ENCODED}&again={PASSWORD}"
        ))
    });
    let options = Options {
        credential: Some(Credential {
            username: "fleet".into(),
            secret: PASSWORD.into(),
            source: "a test".into(),
        }),
        ..Options::default()
    };
    let error = fetch(&hostile(&server, "dsh/leak:v1"), &options)
        .await
        .unwrap_err();
    assert_problem!(error, OciProblem::PlainHttp { .. });
    let shown = error.to_string();
    assert!(shown.contains("?leak=<redacted>&again=<r: only"), "{shown}");
    assert!(!shown.contains("oci-test"), "{shown}");

    // Each form a server could repeat it in, wherever it stands in a text;
    // nothing else is touched.
    for form in [
        PASSWORD,
        URL_ENCODED,
        "oci-test+Pa55%2Fw0rd%2B",
        "oci-test%20Pa55%2fw0rd%2b",
        basic.as_str(),
        basic.trim_end_matches('='),
        &STANDARD.encode(PASSWORD),
    ] {
        let text = format!("said: {form}.");
        let blanked = secrets::redact(&text);
        assert!(
            blanked.starts_with("said: <redacted>") && !blanked.contains("w0rd"),
            "{text} -> {blanked}"
        );
    }
    assert_eq!(secrets::redact("oci-test Pa55"), "oci-test Pa55");
}

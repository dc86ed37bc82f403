//! `dsh-env push`, against a real registry on loopback.

use super::*;

/// Pulls `reference` into the store of `f`'s home, as `dsh-env add` does.
fn pull_into_home(f: &Fixture, reference: &str) {
    let reference = dsh_env_store::OciReference::parse(reference).unwrap();
    let store = dsh_env_store::BlobStore::new(f.path("home").join("store"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(dsh_env_oci::pull(&reference, &store, &Default::default()))
        .unwrap();
}

#[test]
fn a_pushed_contributor_pinned_by_source_resolves_from_the_store_with_the_registry_stopped() {
    let f = Fixture::new();
    let mut registry = dsh_env_test_registry::TestRegistry::start();
    let component = f.path("lineage.wasm");
    std::fs::copy(AGENT_LINEAGE, &component).unwrap();
    f.write(
        "lineage.wasm.minisig",
        "untrusted comment: not verified by push\nRWQ=\n",
    );
    let target = format!("{}/dsh/agent-lineage:v1", registry.host());
    let output = push(&f, &component, &target, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("with its signature"),
        "{}",
        stderr(&output)
    );
    let pinned = stdout(&output).trim().to_string();
    let prefix = format!("oci://{}/dsh/agent-lineage@sha256:", registry.host());
    assert!(pinned.starts_with(&prefix), "{pinned}");

    pull_into_home(&f, &pinned);
    registry.stop();
    let manifest = f.write(
        "oci.toml",
        &format!("[[contributor]]\nsource = {pinned:?}\n"),
    );
    let mut args = f.with_setup("resolve", manifest.to_str().unwrap(), "home");
    args.extend(["--execution", "execution.json"]);
    let output = f.run(&args, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("DSH_PARENT_SESSION_ID=parent-1\n"),
        "{}",
        stdout(&output)
    );

    // A pinned source that was never pulled: exit 2, saying how to get it.
    let other = format!("{prefix}{}", "ab".repeat(32));
    let manifest = f.write(
        "missing.toml",
        &format!("[[contributor]]\nsource = {other:?}\n"),
    );
    let output = f.run(
        &f.with_setup("resolve", manifest.to_str().unwrap(), "home"),
        &[],
    );
    assert_config_error(
        &output,
        &[
            &other,
            "not in the store",
            "dsh-env pull --manifest",
            "dsh-env add",
        ],
    );
    // A tag is not a pin.
    let tagged = format!("oci://{target}");
    let manifest = f.write(
        "tagged.toml",
        &format!("[[contributor]]\nsource = {tagged:?}\n"),
    );
    let output = f.run(
        &f.with_setup("resolve", manifest.to_str().unwrap(), "home"),
        &[],
    );
    assert_config_error(&output, &["tagged.toml", &tagged, "not pinned by digest"]);
}

#[test]
fn push_refuses_bad_input_and_plain_http_off_loopback() {
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start();
    let component = Path::new(AGENT_LINEAGE);
    let target = format!("{}/dsh/lineage:v1", registry.host());

    let not_wasm = f.write("notes.wasm", "hello");
    let output = push(&f, &not_wasm, &target, &[]);
    assert_config_error(&output, &["notes.wasm", "not a WebAssembly component"]);
    let output = push(&f, component, &format!("{}/Dsh:v1", registry.host()), &[]);
    assert_config_error(&output, &["Dsh", "repository must be lowercase"]);
    let output = push(
        &f,
        component,
        &format!("{}/dsh/lineage", registry.host()),
        &[],
    );
    assert_config_error(&output, &["give a :<tag>"]);
    let output = push(&f, component, "127.0.0.1:1/dsh/lineage:v1", &[]);
    assert_config_error(
        &output,
        &[
            "oci://127.0.0.1:1/dsh/lineage:v1",
            "registry unreachable over http",
        ],
    );

    // 0.0.0.0 is not loopback, yet reaches this machine (Linux): HTTPS
    // unless --plain-http.
    let port = registry.host().rsplit_once(':').unwrap().1.to_string();
    let remote = format!("0.0.0.0:{port}/dsh/lineage:v1");
    let output = push(&f, component, &remote, &[]);
    assert_config_error(
        &output,
        &["registry unreachable over https", "--plain-http"],
    );
    let output = push(&f, component, &remote, &["--plain-http"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).contains("unsigned"), "{}", stderr(&output));
}

#[test]
fn add_and_push_meet_the_network_deadline_and_quote_little_of_a_flood() {
    use dsh_env_test_registry::{Body, HostileServer, Reply};
    let server = HostileServer::start(|request| {
        match (request.method.as_str(), request.path()) {
            ("GET", "/v2/") => Reply::status(200),
            // A manifest, one byte a second.
            ("GET", _) => Reply::new(200, Body::Trickle(br#"{"schemaVersion":2}"#.to_vec())),
            ("HEAD", _) => Reply::status(404),
            ("POST", path) if path.starts_with("/v2/dsh/slow/") => {
                Reply::new(500, Body::Trickle(b"slow".to_vec()))
            }
            _ => Reply::new(500, Body::Sized(32 << 20)),
        }
    });
    let f = Fixture::new();
    let (m, home) = (f.path("m.toml"), f.home());
    let reference = format!("oci://{}/dsh/slow:v1", server.host());
    let add = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["add", &reference, "--manifest", m.to_str().unwrap()];
        args.extend(["--home", &home, "--yes"]);
        args.extend(extra);
        f.run(&args, env)
    };
    let output = add(&["--network-timeout-secs", "2"], &[]);
    assert_config_error(&output, &[&reference, "network deadline of 2 s"]);
    assert!(!m.exists());
    assert_eq!(stored_blobs(&f), Vec::<String>::new());

    let component = Path::new(AGENT_LINEAGE);
    let slow = format!("{}/dsh/slow:v1", server.host());
    let output = f.run(
        &["push", AGENT_LINEAGE, &slow],
        &[("DSH_ENV_NETWORK_TIMEOUT_SECS", "2")],
    );
    assert_config_error(&output, &["network deadline of 2 s"]);
    let flood = format!("{}/dsh/flood:v1", server.host());
    let output = push(&f, component, &flood, &[]);
    assert_config_error(&output, &["the registry answered 500 for the upload: `xxx"]);
    assert!(stderr(&output).len() < 600, "{}", stderr(&output));

    for (flag, env) in [("0", ""), ("", "soon")] {
        let output = match flag {
            "" => add(&[], &[("DSH_ENV_NETWORK_TIMEOUT_SECS", env)]),
            _ => add(&["--network-timeout-secs", flag], &[]),
        };
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("--network-timeout-secs"),
            "{}",
            stderr(&output)
        );
    }
}

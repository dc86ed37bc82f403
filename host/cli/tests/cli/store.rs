//! `dsh-env store`: what a declined add leaves, and gc.

use super::*;

#[test]
fn a_declined_add_leaves_nothing_in_the_store_and_store_gc_drops_what_no_manifest_pins() {
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start();
    let manifest = f.write("m.toml", "");
    let (m, home) = (manifest.to_str().unwrap(), f.home());
    let tagged = format!("oci://{}/dsh/tool:v1", registry.host());
    let add = || {
        f.run(
            &["add", &tagged, "--manifest", m, "--home", &home, "--yes"],
            &[],
        )
    };
    let lineage = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    let target = format!("{}/dsh/tool:v1", registry.host());
    assert!(push(&f, &lineage, &target, &[]).status.success());
    let declined = f.on_terminal(&["add", &tagged, "--manifest", m, "--home", &home], "n\n");
    assert_eq!(declined.status.code(), Some(1), "{}", stdout(&declined));
    assert_eq!(stored_blobs(&f), Vec::<String>::new());

    // Accepted, then the tag moves and `add` re-pins: the first artifact
    // stays in the store, pinned by nothing.
    assert!(add().status.success());
    let first = stored_blobs(&f);
    assert_eq!(first.len(), 3, "manifest, config, layer: {first:?}");
    let trace = component_copy(&f, CALL_TRACE, "trace.wasm");
    assert!(push(&f, &trace, &target, &[]).status.success());
    assert!(add().status.success());
    assert_eq!(stored_blobs(&f).len(), 6);
    let store = dsh_env_store::BlobStore::new(f.path("home/store"));
    let orphan = store.put_blob(b"a blob no manifest references").unwrap();

    let gc = |extra: &[&str]| {
        let mut args = vec!["store", "gc", "--home", &home];
        args.extend(extra);
        let output = f.run(&args, &[]);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    };
    let swept = gc(&[]);
    assert!(swept.starts_with(&format!("removed {orphan}  ")), "{swept}");
    assert!(swept.contains("removed 1 blobs"), "{swept}");
    assert_eq!(stored_blobs(&f).len(), 6, "every stored artifact is kept");

    let swept = gc(&["--manifest", m]);
    assert!(swept.contains("removed 3 blobs"), "{swept}");
    let lineage_sha = sha256_of(AGENT_LINEAGE);
    assert!(
        swept.contains(&format!("removed {lineage_sha}  ")),
        "{swept}"
    );
    let left = stored_blobs(&f);
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(left.iter().all(|blob| !first.contains(blob)), "{left:?}");
    let mut args = f.with_setup("resolve", m, &home);
    args.extend(["--execution", "execution.json"]);
    let output = f.run(&args, &[]);
    assert!(
        stdout(&output).contains("DSH_TRACEPARENT="),
        "{}",
        stderr(&output)
    );

    // A manifest that cannot be read removes nothing.
    let output = f.run(
        &["store", "gc", "--home", &home, "--manifest", "missing.toml"],
        &[],
    );
    assert_config_error(&output, &["missing.toml"]);
    assert_eq!(stored_blobs(&f), left);
}

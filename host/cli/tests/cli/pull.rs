//! `dsh-env pull --manifest`: a worker fills its store from a reviewed manifest.

use super::*;

#[test]
fn pull_fills_a_fresh_home_from_a_reviewed_manifest_once_and_it_then_loads_offline() {
    let f = Fixture::new();
    let mut registry = dsh_env_test_registry::TestRegistry::start();
    let (author, lineage, trace) = signed_copies(&f);
    let manifest = f.write("m.toml", &requiring(&author));
    let m = manifest.to_str().unwrap();
    // The author's machine: push, then `add` reviews and pins each.
    for (file, repository) in [(&lineage, "dsh/lineage:v1"), (&trace, "dsh/trace:v1")] {
        let target = format!("{}/{repository}", registry.host());
        assert!(push(&f, file, &target, &[]).status.success());
        let tagged = format!("oci://{target}");
        let added = f.run(
            &[
                "add",
                &tagged,
                "--manifest",
                m,
                "--home",
                "author-home",
                "--yes",
            ],
            &[],
        );
        assert!(added.status.success(), "{}", stderr(&added));
    }
    let reviewed = std::fs::read_to_string(&manifest).unwrap();

    // A worker: an empty home, the reviewed manifest, no prompt.
    let worker = f.path("worker").display().to_string();
    let output = pull(&f, m, &worker, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "2 of 2 artifacts in the store (2 pulled, 0 already there)\n"
    );
    assert_eq!(stderr(&output), "", "no progress lines off a terminal");
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), reviewed);

    // The registry stopped: a second pull needs nothing from it, and the
    // manifest loads from the store.
    registry.stop();
    let output = pull(&f, m, &worker, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("(0 pulled, 2 already there)"),
        "{}",
        stdout(&output)
    );
    let mut args = f.with_setup("resolve", m, &worker);
    args.extend(["--execution", "execution.json"]);
    let output = f.run(&args, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let overlay = stdout(&output);
    assert!(
        overlay.contains("DSH_PARENT_SESSION_ID=parent-1\n")
            && overlay.contains("DSH_TRACEPARENT="),
        "{overlay}"
    );

    // On a terminal, a line per artifact; --optimize compiles each with
    // Cranelift into the cache, beside the baseline code the checks made.
    let cached = || {
        let output = f.run(&["cache", "list", "--json", "--home", &worker], &[]);
        let listing: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
        listing["entries"].as_array().unwrap().len()
    };
    let baseline = cached();
    assert_eq!(baseline, 2, "the checks compiled each once");
    let shown = f.on_terminal(
        &["pull", "--manifest", m, "--home", &worker, "--optimize"],
        "",
    );
    let text = stdout(&shown);
    assert!(shown.status.success(), "{text}");
    for needle in [
        "[1/2] oci://127.0.0.1:",
        "[2/2] oci://",
        ": already in the store",
    ] {
        assert!(text.contains(needle), "`{needle}` not in: {text}");
    }
    assert_eq!(cached(), 4, "optimized code beside the baseline's");
}

#[test]
fn pull_names_each_artifact_it_cannot_store_and_stores_none_of_a_refused_one() {
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start();
    let author = SigningKey::new(f.dir.path(), "author");
    let lineage = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    let trace = component_copy(&f, CALL_TRACE, "trace.wasm");
    author.sign(&trace);
    let pushed = |file: &Path, repository: &str| {
        let output = push(&f, file, &format!("{}/{repository}", registry.host()), &[]);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output).trim().to_string()
    };
    let unsigned = pushed(&lineage, "dsh/unsigned:v1");
    let signed = pushed(&trace, "dsh/trace:v1");
    let absent = format!(
        "oci://{}/dsh/absent@sha256:{}",
        registry.host(),
        "ab".repeat(32)
    );
    let mut text = requiring(&author);
    for source in [&unsigned, &signed, &absent] {
        text.push_str(&format!("\n[[contributor]]\nsource = {source:?}\n"));
    }
    let manifest = f.write("m.toml", &text);
    let (m, home) = (manifest.to_str().unwrap(), f.home());

    let output = pull(&f, m, &home, &[]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        stdout(&output).contains("1 of 3 artifacts in the store (1 pulled"),
        "{}",
        stdout(&output)
    );
    for needle in [
        &format!("[1/3] not in the store: {unsigned}"),
        "is not signed",
        &format!("[3/3] not in the store: {absent}: unknown manifest digest"),
        &format!("2 of 3 artifacts pinned by {m} are not in the store: {unsigned}, {absent}"),
    ] {
        assert!(err.contains(needle), "`{needle}` not in: {err}");
    }
    assert!(!err.contains(&signed), "{err}");
    let stored = stored_blobs(&f);
    assert_eq!(stored.len(), 3, "only the signed artifact: {stored:?}");
    assert!(stored.contains(&sha256_of(CALL_TRACE)), "{stored:?}");
    assert!(!stored.contains(&sha256_of(AGENT_LINEAGE)), "{stored:?}");
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), text);

    // A manifest that does not parse is a configuration error: exit 2.
    let broken = f.write(
        "broken.toml",
        "[[contributor]]\nsource = \"oci://x/y:v1\"\n",
    );
    let output = pull(&f, broken.to_str().unwrap(), &home, &[]);
    assert_config_error(&output, &["broken.toml", "not pinned by digest"]);
}

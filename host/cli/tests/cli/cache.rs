//! `dsh-env cache`: the home's compile cache.

use super::*;

#[test]
fn cache_lists_trims_and_clears_the_homes_compile_cache() {
    let fixture = Fixture::new();
    let home = fixture.home();
    let manifest = fixture.path("manifest.toml").display().to_string();
    let cache = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["cache"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--home", &home]);
        let output = fixture.run(&all, env);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        output
    };
    let listed = |env: &[(&str, &str)]| json(&cache(&["list", "--json"], env));
    let names = |listing: &serde_json::Value| -> Vec<String> {
        let entries = listing["entries"].as_array().unwrap();
        let mut names: Vec<String> = entries
            .iter()
            .flat_map(|e| e["names"].as_array().unwrap().clone())
            .map(|n| n.as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    let register = |env: &[(&str, &str)]| {
        let output = fixture.run(&["list", "--manifest", &manifest, "--home", &home], env);
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(stdout(&output).contains("DSH_AGENT_DEPTH"));
    };

    let empty = listed(&[]);
    assert_eq!(empty["format"], 1);
    assert_eq!(empty["entries"], serde_json::json!([]));
    assert_eq!(empty["max_bytes"], 512 << 20);

    // A cap of 0: each write keeps only what its process holds, here the
    // manifest's two components, loaded together.
    let nothing = [("DSH_CACHE_MAX_MIB", "0")];
    register(&nothing);
    let two = listed(&nothing);
    assert_eq!(two["max_bytes"], 0);
    assert_eq!(names(&two), ["agent-lineage", "call-trace"]);
    let entries = two["entries"].as_array().unwrap();
    assert!(entries.iter().all(|e| e["artifact"] == true
        && e["bytes"].as_u64().unwrap() > 0
        && e["content"].as_str().unwrap().len() == 64));
    let text = stdout(&cache(&["list"], &[]));
    assert!(
        text.contains("agent-lineage") && text.contains("call-trace"),
        "{text}"
    );
    assert!(text.contains("2 entries"), "{text}");

    // Another process's write under that cap evicts both.
    let checked = fixture.run(&["check", GIT_CONTEXT, "--home", &home], &nothing);
    assert!(checked.status.success(), "{}", stderr(&checked));
    let one = listed(&[]);
    let entries = one["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{one}");
    assert_eq!(
        entries[0]["content"].as_str().unwrap(),
        sha256_of(GIT_CONTEXT)
    );

    let trimmed = stdout(&cache(&["gc", "--max-mib", "0"], &[]));
    assert!(trimmed.starts_with("removed 1 entries"), "{trimmed}");
    assert_eq!(listed(&[])["entries"], serde_json::json!([]));

    // Cleared while nothing is registered: empty, and it works again.
    register(&[]);
    assert_eq!(names(&listed(&[])), ["agent-lineage", "call-trace"]);
    let cleared = stdout(&cache(&["clear"], &[]));
    assert!(cleared.starts_with("removed 2 entries"), "{cleared}");
    let dir = std::path::Path::new(&home).join("cache");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    register(&[]);
    assert_eq!(names(&listed(&[])), ["agent-lineage", "call-trace"]);

    let bad = fixture.run(
        &["list", "--manifest", &manifest, "--home", &home],
        &[("DSH_CACHE_MAX_MIB", "lots")],
    );
    assert_config_error(&bad, &["$DSH_CACHE_MAX_MIB", "lots"]);
}

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

/// A checkout whose approved manifest puts the home (and so its compile
/// cache) inside the checkout can fill that cache; what it writes there
/// must never run as compiled code. Here it ships another component's
/// (call-trace's) genuine artifact, `.linked` mark and remembered
/// declaration under the pinned component's (agent-lineage's) names, with
/// a seal: one written by hand as the cache once wrote them, and one copied
/// from call-trace's own entry with the entry renamed. Each time the pinned
/// component's own code runs, and its own keys come out.
#[test]
fn a_cache_a_checkout_fills_runs_only_what_this_host_compiled() {
    let f = Fixture::new();
    let checkout = f.path("checkout");
    std::fs::create_dir_all(checkout.join(".dsh")).unwrap();
    let pinned = checkout.join("lineage.wasm");
    std::fs::copy(AGENT_LINEAGE, &pinned).unwrap();
    let (a, b) = (sha256_of(AGENT_LINEAGE), sha256_of(CALL_TRACE));
    std::fs::write(
        checkout.join(".dsh/env.toml"),
        format!("home = \"../dsh-home\"\n\n[[contributor]]\npath = \"../lineage.wasm\"\nsha256 = \"{a}\"\n"),
    )
    .unwrap();
    succeeded("trust", &manifests::run_in(&f, &checkout, &["trust"], &[]));
    let cache = checkout.join("dsh-home/cache");

    // The home's cache holds call-trace, compiled by this host.
    let warm = f.write(
        "warm.toml",
        &format!(
            "home = {:?}\n\n[[contributor]]\npath = {CALL_TRACE:?}\n",
            checkout.join("dsh-home")
        ),
    );
    let out = f.run(&["resolve", "--manifest", warm.to_str().unwrap()], &[]);
    succeeded("warming with call-trace", &out);
    assert!(
        stdout(&out).contains("DSH_TRACEPARENT="),
        "{}",
        stdout(&out)
    );

    let files_of = |content: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.starts_with(&format!("{content}-")))
            .collect();
        names.sort();
        names
    };
    let warmed = files_of(&b);
    let b_artifact = warmed.iter().find(|n| n.ends_with(".cwasm")).unwrap();
    let b_stem = b_artifact.trim_end_matches(".cwasm").to_string();
    let a_stem = b_stem.replacen(&b, &a, 1);
    let b_code = std::fs::read(cache.join(b_artifact)).unwrap();
    let hand_written = format!(
        "{} 0:0:0:0.0:0.0 {a_stem}",
        dsh_env_support::digest::sha256_hex(&b_code)
    );
    let copied = std::fs::read_to_string(cache.join(format!("{b_stem}.seal")))
        .unwrap()
        .replace(&b_stem, &a_stem);
    let forge = |seal: &str| {
        for name in &warmed {
            std::fs::copy(cache.join(name), cache.join(name.replacen(&b, &a, 1))).unwrap();
        }
        std::fs::write(cache.join(format!("{a_stem}.seal")), seal).unwrap();
    };
    let execution = f.path("execution.json");
    for seal in [hand_written, copied] {
        forge(&seal);
        let out = manifests::run_in(&f, &checkout, &["explain", "--json"], &[]);
        succeeded("explain in the checkout", &out);
        let report = json(&out);
        assert_eq!(
            report["contributors"][0]["name"], "agent-lineage",
            "{report}"
        );

        forge(&seal);
        let args = ["resolve", "--execution", execution.to_str().unwrap()];
        let out = manifests::run_in(&f, &checkout, &args, &[]);
        succeeded("resolve in the checkout", &out);
        let overlay = stdout(&out);
        assert!(
            overlay.contains("DSH_AGENT_DEPTH=1\n") && !overlay.contains("DSH_TRACEPARENT"),
            "the forged entry ran (seal {seal:?}):\n{overlay}{}",
            stderr(&out)
        );
        assert_ne!(
            std::fs::read(cache.join(format!("{a_stem}.cwasm"))).unwrap(),
            b_code,
            "the pinned component's entry holds its own code again"
        );
    }
}

//! `dsh-env add` from an OCI source: review, pin, store.

use super::*;

#[test]
fn add_pulls_reviews_and_pins_an_oci_source_which_a_moved_tag_or_a_stopped_registry_leaves_alone() {
    let f = Fixture::new();
    let mut registry = dsh_env_test_registry::TestRegistry::start();
    let (author, lineage, trace) = signed_copies(&f);
    let target = format!("{}/dsh/tool:v1", registry.host());
    assert!(push(&f, &lineage, &target, &[]).status.success());

    let manifest = f.write("m.toml", &requiring(&author));
    let (m, home, tagged) = (
        manifest.to_str().unwrap(),
        f.home(),
        format!("oci://{target}"),
    );
    let add = || {
        f.run(
            &["add", &tagged, "--manifest", m, "--home", &home, "--yes"],
            &[],
        )
    };
    let resolve = || {
        let args = [
            "resolve",
            "--manifest",
            m,
            "--home",
            &home,
            "--execution",
            "execution.json",
        ];
        let output = f.run(&args, &[]);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    };
    let output = add();
    assert!(output.status.success(), "{}", stderr(&output));
    let review = stdout(&output);
    for needle in [
        "Contributor `agent-lineage` from oci://",
        &format!("signed by trusted key {}", author.id),
        "DSH_PARENT_SESSION_ID",
        "Added `agent-lineage`",
    ] {
        assert!(review.contains(needle), "`{needle}` not in: {review}");
    }
    let pinned = std::fs::read_to_string(&manifest).unwrap();
    let source = format!("source = \"oci://{}/dsh/tool@sha256:", registry.host());
    assert!(pinned.starts_with(&requiring(&author)), "{pinned}");
    assert!(pinned.contains(&source), "{pinned}");
    let lineage_sha = dsh_env_support::digest::sha256_hex(&std::fs::read(&lineage).unwrap());
    assert!(
        pinned.contains(&format!("sha256 = \"{lineage_sha}\"")),
        "{pinned}"
    );
    assert!(resolve().contains("DSH_PARENT_SESSION_ID=parent-1\n"));

    // The tag moves to other code: the pinned entry keeps the old code
    // until `add` runs again.
    assert!(push(&f, &trace, &target, &[]).status.success());
    let overlay = resolve();
    assert!(
        overlay.contains("DSH_PARENT_SESSION_ID=") && !overlay.contains("DSH_TRACEPARENT="),
        "{overlay}"
    );
    let output = add();
    assert!(
        stdout(&output).contains("Updated `call-trace`"),
        "{}",
        stdout(&output)
    );
    let repinned = std::fs::read_to_string(&manifest).unwrap();
    assert_ne!(repinned, pinned);
    assert_eq!(repinned.matches("[[contributor]]").count(), 1, "{repinned}");
    assert!(resolve().contains("DSH_TRACEPARENT="));

    // The registry stopped: the pinned entry loads from the store; `add`
    // fails, naming the reference, and changes nothing.
    registry.stop();
    assert!(resolve().contains("DSH_TRACEPARENT="));
    assert_config_error(&add(), &[&tagged, "registry unreachable"]);
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), repinned);
}

#[test]
fn add_refuses_an_unsigned_badly_signed_or_broken_oci_source_and_stores_none_of_it() {
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start();
    let author = SigningKey::new(f.dir.path(), "author");
    let manifest = f.write("m.toml", &requiring(&author));
    let (m, home) = (manifest.to_str().unwrap(), f.home());
    let add = |target: &str| {
        let reference = format!("oci://{}/{target}", registry.host());
        f.run(
            &["add", &reference, "--manifest", m, "--home", &home, "--yes"],
            &[],
        )
    };
    let lineage = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    assert!(
        push(
            &f,
            &lineage,
            &format!("{}/dsh/unsigned:v1", registry.host()),
            &[]
        )
        .status
        .success()
    );
    assert_config_error(
        &add("dsh/unsigned:v1"),
        &[
            "dsh/unsigned@sha256:",
            "is not signed",
            "requires a signature",
        ],
    );

    // A signature by the trusted key, but of other bytes.
    let trace = component_copy(&f, CALL_TRACE, "trace.wasm");
    author.sign(&trace);
    std::fs::copy(f.path("trace.wasm.minisig"), f.path("lineage.wasm.minisig")).unwrap();
    assert!(
        push(
            &f,
            &lineage,
            &format!("{}/dsh/forged:v1", registry.host()),
            &[]
        )
        .status
        .success()
    );
    assert_config_error(
        &add("dsh/forged:v1"),
        &["dsh/forged@sha256:", &author.id, "does not verify"],
    );

    // Not a component (`push` refuses one, the library does not).
    let junk = format!("oci://{}/dsh/junk:v1", registry.host());
    let junk = dsh_env::OciReference::parse(&junk).unwrap();
    let options = dsh_env_oci::Options::default();
    let pushed = dsh_env_oci::push(b"\0asm, and then junk", None, &junk, &options);
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(pushed)
        .unwrap();
    let output = add("dsh/junk:v1");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("dsh/junk@sha256:"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(&manifest).unwrap(),
        requiring(&author)
    );
    assert_eq!(
        stored_blobs(&f),
        Vec::<String>::new(),
        "a refused pull leaves nothing in the store"
    );
}

#[test]
fn add_grants_what_grant_says_shows_it_in_the_review_and_refuses_a_bad_grant_naming_it() {
    let f = Fixture::new();
    component_copy(&f, GIT_CONTEXT, "git.wasm");
    let manifest = f.write("m.toml", "");
    let (m, home) = (manifest.to_str().unwrap(), f.home());
    let add = |grants: &[&str]| {
        let mut args = vec!["add", "git.wasm", "--manifest", m, "--home", &home, "--yes"];
        for grant in grants {
            args.extend(["--grant", grant]);
        }
        f.run(&args, &[])
    };

    for (bad, needle) in [
        (
            "cwd=write",
            "`cwd=write`: the cwd can only be granted `read`",
        ),
        ("env=1X", "`env=1X`: a variable name is letters"),
        ("env=", "`env=`: a variable name"),
        ("net=all", "`net=all`: a grant is `cwd=read` or `env=NAME`"),
    ] {
        let output = add(&[bad]);
        assert_eq!(output.status.code(), Some(2), "{bad}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(needle),
            "{needle:?} not in {}",
            stderr(&output)
        );
        assert_eq!(std::fs::read_to_string(&manifest).unwrap(), "");
    }

    let output = add(&["cwd=read", "env=REGION", "env=REGION"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let review = stdout(&output);
    assert!(
        review.contains(
            "Grants its entry asks for:\n    environment variables: REGION\n    the agent's cwd, read-only\n"
        ),
        "{review}"
    );
    let pinned = std::fs::read_to_string(&manifest).unwrap();
    assert!(
        pinned.contains("[contributor.grants]\ncwd = \"read\"\nenv = [\"REGION\"]\n"),
        "{pinned}"
    );

    // Granted and pinned as reviewed: it loads, and reads the agent's cwd.
    let repo = f.git_repo("granted");
    let execution = f.execution_in(&repo);
    let resolve = [
        "resolve",
        "--manifest",
        m,
        "--home",
        &home,
        "--execution",
        execution.to_str().unwrap(),
    ];
    let output = f.run(&resolve, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("DSH_GIT_BRANCH=granted\n"),
        "{}",
        stdout(&output)
    );

    // Adding again with another grant keeps the ones written.
    let output = add(&["env=TEAM"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let pinned = std::fs::read_to_string(&manifest).unwrap();
    assert!(
        pinned.contains("cwd = \"read\"\nenv = [\"REGION\", \"TEAM\"]\n"),
        "{pinned}"
    );
    assert!(f.run(&resolve, &[]).status.success());
}

//! Manifests found without `--manifest`: `$DSH_ENV_MANIFEST`, the nearest
//! approved `.dsh/env.toml`, the home's `env.toml`; and `dsh-env trust`.

use super::*;

/// `dsh-env <args>` run in `dir`, with `f`'s clean environment plus `env`.
pub(super) fn run_in(f: &Fixture, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = f.command(args, env);
    command.current_dir(dir);
    output_within(command, Stdio::null(), None)
}

/// A project folder `name` in `f` with `.dsh/env.toml` registering
/// agent-lineage, and a folder two levels below it; returns (manifest, nested).
fn project(f: &Fixture, name: &str) -> (PathBuf, PathBuf) {
    let root = f.path(name);
    let nested = root.join("src/deep");
    std::fs::create_dir_all(&nested).unwrap();
    std::fs::create_dir_all(root.join(".dsh")).unwrap();
    let manifest = root.join(".dsh/env.toml");
    std::fs::write(
        &manifest,
        format!("[[contributor]]\npath = {AGENT_LINEAGE:?}\n"),
    )
    .unwrap();
    (manifest.canonicalize().unwrap(), nested)
}

#[test]
fn a_project_manifest_loads_from_below_only_while_its_approved_content_is_unchanged() {
    let f = Fixture::new();
    let (manifest, nested) = project(&f, "app");
    let shown = manifest.display().to_string();
    let approve = format!("dsh-env trust {shown}");

    let out = run_in(&f, &nested, &["list"], &[]);
    assert_config_error(&out, &[&shown, "is not approved", &approve]);

    // `trust` with no path approves the nearest one, from below too.
    let out = run_in(&f, &nested, &["trust"], &[]);
    succeeded("trust", &out);
    assert!(stdout(&out).contains(&shown), "{}", stdout(&out));
    let out = run_in(&f, &nested, &["list"], &[]);
    succeeded("list after trust", &out);
    assert!(stdout(&out).contains("DSH_AGENT_DEPTH"), "{}", stdout(&out));
    let out = run_in(&f, &nested, &["resolve"], &[]);
    succeeded("resolve after trust", &out);

    // A changed byte is a manifest nobody approved.
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, format!("{text}# edited\n")).unwrap();
    for command in ["list", "resolve", "check"] {
        let mut args = vec![command];
        if command == "check" {
            args.push(AGENT_LINEAGE);
        }
        let out = run_in(&f, &nested, &args, &[]);
        assert_config_error(&out, &[&shown, "changed since it was approved", &approve]);
    }
    let out = run_in(&f, &nested, &["trust", &shown], &[]);
    succeeded("trust again", &out);
    succeeded("list", &run_in(&f, &nested, &["list"], &[]));

    let out = run_in(&f, &nested, &["trust", "--revoke"], &[]);
    succeeded("trust --revoke", &out);
    let out = run_in(&f, &nested, &["list"], &[]);
    assert_config_error(&out, &["is not approved", &approve]);

    // Approvals live in the home: another home has none, and the command
    // named says which home.
    let other = f.path("other-home").display().to_string();
    run_in(&f, &nested, &["trust"], &[]);
    let out = run_in(&f, &nested, &["list", "--home", &other], &[]);
    assert_config_error(
        &out,
        &[
            "is not approved",
            &format!("dsh-env trust --home {other} {shown}"),
        ],
    );
}

#[test]
fn the_users_and_the_variables_manifests_need_no_approval_and_explain_says_what_was_used() {
    let f = Fixture::new();
    // The user's manifest: env.toml in the home (~/.dsh by default).
    std::fs::create_dir_all(f.path(".dsh")).unwrap();
    let user = f.write(
        ".dsh/env.toml",
        &format!("[[contributor]]\npath = {CALL_TRACE:?}\n"),
    );
    let explain = |dir: &Path, env: &[(&str, &str)]| {
        let out = run_in(&f, dir, &["explain", "--json"], env);
        succeeded("explain", &out);
        json(&out)
    };
    let listed = run_in(&f, f.dir.path(), &["list"], &[]);
    succeeded("list with the user's manifest", &listed);
    assert!(
        stdout(&listed).contains("DSH_TRACEPARENT"),
        "{}",
        stdout(&listed)
    );
    let report = explain(f.dir.path(), &[]);
    let manifests = report["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1, "{report}");
    assert_eq!(manifests[0]["source"], "user");
    assert_eq!(manifests[0]["used"], true);
    assert_eq!(manifests[0]["path"], user.display().to_string());

    // An unapproved project manifest: explain names it as skipped, with
    // the command that approves it, and uses the user's.
    let (project, nested) = project(&f, "app");
    let report = explain(&nested, &[]);
    let manifests = report["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 2, "{report}");
    assert_eq!(manifests[0]["source"], "project");
    assert_eq!(manifests[0]["used"], false);
    let why = manifests[0]["why"].as_str().unwrap();
    for needle in [
        format!("found by walking up from {}", nested.display()),
        "not approved".into(),
        format!("dsh-env trust {}", project.display()),
    ] {
        assert!(why.contains(&needle), "{needle} not in {why}");
    }
    assert_eq!(manifests[1]["source"], "user");
    assert_eq!(manifests[1]["used"], true);
    let text = run_in(&f, &nested, &["explain"], &[]);
    succeeded("explain", &text);
    let text = stdout(&text);
    assert!(
        text.contains(&format!("skipped {}", project.display()))
            && text.contains(&format!("used    {}", user.display())),
        "{text}"
    );

    // Approved, it comes first, and the user's is skipped.
    succeeded("trust", &run_in(&f, &nested, &["trust"], &[]));
    let report = explain(&nested, &[]);
    assert_eq!(report["manifests"][0]["used"], true, "{report}");
    let why = report["manifests"][1]["why"].as_str().unwrap();
    assert!(why.contains("the project manifest comes first"), "{why}");

    // $DSH_ENV_MANIFEST overrides both, approved or not; --manifest overrides it.
    let chosen = f.path("manifest.toml").display().to_string();
    std::fs::write(&project, "# edited, not approved\n").unwrap();
    let env = [("DSH_ENV_MANIFEST", chosen.as_str())];
    let listed = run_in(&f, &nested, &["list"], &env);
    succeeded("list with $DSH_ENV_MANIFEST", &listed);
    let text = stdout(&listed);
    assert!(
        text.contains("DSH_AGENT_DEPTH") && text.contains("DSH_TRACEPARENT"),
        "{text}"
    );
    let report = explain(&nested, &env);
    let sources: Vec<(&str, bool)> = (report["manifests"].as_array().unwrap().iter())
        .map(|m| (m["source"].as_str().unwrap(), m["used"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        sources,
        [("variable", true), ("project", false), ("user", false)],
        "{report}"
    );
    assert_eq!(report["manifests"][0]["path"], chosen.as_str());
    let out = run_in(
        &f,
        &nested,
        &["explain", "--json", "--manifest", &chosen],
        &env,
    );
    succeeded("explain --manifest", &out);
    let first = &json(&out)["manifests"];
    assert_eq!(first[0]["source"], "flag", "{first}");
    assert!(
        first[1]["why"]
            .as_str()
            .unwrap()
            .contains("--manifest comes first"),
        "{first}"
    );
}

/// A checkout's folder names are anyone's: what `trust` prints, and the
/// refusal before it, show them escaped.
#[test]
fn a_manifests_path_is_shown_escaped() {
    let f = Fixture::new();
    let (_, nested) = project(&f, "a\u{1b}[2Jb\u{202e}c");
    let escaped = "a\\u{1b}[2Jb\\u{202e}c";
    let out = run_in(&f, &nested, &["list"], &[]);
    assert_config_error(&out, &[escaped, "is not approved"]);
    for args in [&["trust"][..], &["trust", "--revoke"]] {
        let out = run_in(&f, &nested, args, &[]);
        let said = stdout(&out);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(said.contains(escaped), "{args:?}: {said:?}");
        assert!(!said.contains(['\u{1b}', '\u{202e}']), "{args:?}: {said:?}");
    }
}

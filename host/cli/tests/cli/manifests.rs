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

/// A checkout `name` in `f` whose `.dsh/` holds a manifest naming its
/// `hooks.json` and its `c.wasm` (a copy of `component`) by relative
/// paths; its hook touches `marker`. Returns the checkout's folder.
fn checkout(f: &Fixture, name: &str, component: &str, marker: &Path) -> PathBuf {
    let root = f.path(name);
    std::fs::create_dir_all(root.join(".dsh")).unwrap();
    std::fs::write(
        root.join(".dsh/env.toml"),
        "hooks = \"hooks.json\"\n\n[[contributor]]\npath = \"c.wasm\"\n",
    )
    .unwrap();
    std::fs::write(root.join(".dsh/hooks.json"), touching(marker)).unwrap();
    std::fs::copy(component, root.join(".dsh/c.wasm")).unwrap();
    root
}

/// A hooks.json whose `PreToolUse` hook touches `marker`.
fn touching(marker: &Path) -> String {
    hooks_json(&format!("touch '{}'", marker.display()), "true")
}

/// A checkout whose `.dsh/env.toml` links to a manifest approved in another
/// is not approved: beside the link, the manifest's relative paths name the
/// checkout's own hooks and component. Approved where it was found, it runs
/// those, as approved there.
#[test]
fn an_approval_belongs_to_the_path_where_the_manifest_was_found() {
    let f = Fixture::new();
    let (a_ran, b_ran) = (f.path("a-hook-ran"), f.path("b-hook-ran"));
    let a = checkout(&f, "a", AGENT_LINEAGE, &a_ran);
    succeeded("trust in a", &run_in(&f, &a, &["trust"], &[]));
    let b = checkout(&f, "b", CALL_TRACE, &b_ran);
    let a_manifest = a.canonicalize().unwrap().join(".dsh/env.toml");
    let b_manifest = b.canonicalize().unwrap().join(".dsh/env.toml");
    std::fs::remove_file(&b_manifest).unwrap();
    std::os::unix::fs::symlink(&a_manifest, &b_manifest).unwrap();

    let (b_shown, a_shown) = (b_manifest.display(), a_manifest.display());
    let refusal = [
        format!("project manifest {b_shown} is not approved"),
        format!("it links to {a_shown}"),
        format!("dsh-env trust {b_shown}"),
    ];
    let refusal: Vec<&str> = refusal.iter().map(String::as_str).collect();
    let out = run_in(&f, &b, &["run", "--", "true"], &[]);
    assert_one_line_error(&out, 125, &refusal);
    assert!(!b_ran.exists(), "the unapproved checkout's hook ran");
    assert_config_error(&run_in(&f, &b, &["list"], &[]), &refusal);

    // A runs its own hooks and component.
    succeeded("run in a", &run_in(&f, &a, &["run", "--", "true"], &[]));
    assert!(a_ran.exists() && !b_ran.exists());
    let out = run_in(&f, &a, &["list"], &[]);
    succeeded("list in a", &out);
    assert!(stdout(&out).contains("DSH_AGENT_DEPTH"), "{}", stdout(&out));

    // Approved in B, B's own hooks and component, beside the link, are used.
    let out = run_in(&f, &b, &["trust"], &[]);
    succeeded("trust in b", &out);
    assert!(
        stdout(&out).contains(&b_shown.to_string()),
        "{}",
        stdout(&out)
    );
    let out = run_in(&f, &b, &["list"], &[]);
    succeeded("list in b", &out);
    let listed = stdout(&out);
    assert!(
        listed.contains("DSH_TRACEPARENT") && !listed.contains("DSH_AGENT_DEPTH"),
        "{listed}"
    );
    succeeded("run in b", &run_in(&f, &b, &["run", "--", "true"], &[]));
    assert!(b_ran.exists());

    // A checkout whose `.dsh` folder links to A's is in A's folder: A's
    // approval holds there, for A's own hooks.
    let c = f.path("c");
    std::fs::create_dir(&c).unwrap();
    std::os::unix::fs::symlink(a.join(".dsh"), c.join(".dsh")).unwrap();
    std::fs::remove_file(&a_ran).unwrap();
    succeeded("run in c", &run_in(&f, &c, &["run", "--", "true"], &[]));
    assert!(a_ran.exists());
}

/// A project manifest's approval covers the hooks file it names: `trust`
/// shows it, and an edit to it after the approval is refused, naming the
/// file, until approved again. An approval recorded by an earlier dsh-env
/// (which covered the manifest alone) asks again, saying so.
#[test]
fn an_approval_covers_the_hooks_file_and_an_edit_to_it_asks_again() {
    let f = Fixture::new();
    let (ran, edited_ran) = (f.path("hook-ran"), f.path("edited-hook-ran"));
    let root = checkout(&f, "app", AGENT_LINEAGE, &ran);
    let folder = root.canonicalize().unwrap().join(".dsh");
    let (manifest, hooks) = (folder.join("env.toml"), folder.join("hooks.json"));
    let out = run_in(&f, &root, &["trust"], &[]);
    succeeded("trust", &out);
    let said = stdout(&out);
    let hooks_digest = sha256_of(hooks.to_str().unwrap());
    for needle in [
        format!("approved {}", manifest.display()),
        format!(
            "approved its hooks file {} (sha256 {hooks_digest})",
            hooks.display()
        ),
        "a change to any of them needs `dsh-env trust` again".into(),
    ] {
        assert!(said.contains(&needle), "`{needle}` not in: {said}");
    }
    succeeded("run", &run_in(&f, &root, &["run", "--", "true"], &[]));
    assert!(ran.exists(), "the approved hook ran");

    // Edited after the approval: nothing runs it until it is approved again.
    std::fs::write(&hooks, touching(&edited_ran)).unwrap();
    let approve = format!("dsh-env trust {}", manifest.display());
    let changed = format!(
        "hooks file {} of project manifest {} changed since it was approved",
        hooks.display(),
        manifest.display()
    );
    let out = run_in(&f, &root, &["run", "--", "true"], &[]);
    assert_one_line_error(&out, 125, &[&changed, &approve]);
    assert!(!edited_ran.exists(), "the edited hook ran");
    assert_config_error(&run_in(&f, &root, &["list"], &[]), &[&changed, &approve]);
    let out = run_in(&f, &root, &["explain", "--json"], &[]);
    succeeded("explain", &out);
    let report = json(&out);
    let why = report["manifests"][0]["why"].as_str().unwrap();
    assert!(why.contains(&changed), "{report}");

    succeeded("trust again", &run_in(&f, &root, &["trust"], &[]));
    succeeded("run", &run_in(&f, &root, &["run", "--", "true"], &[]));
    assert!(edited_ran.exists(), "the hook approved again ran");

    // A record in the earlier format (a digest and a path, for the manifest
    // alone) approves nothing now, and the refusal says why.
    let approvals = f.path(".dsh/trusted");
    let records: Vec<PathBuf> = (std::fs::read_dir(&approvals).unwrap())
        .map(|entry| entry.unwrap().path())
        .collect();
    let [record] = &records[..] else {
        panic!("one approval: {records:?}")
    };
    let earlier = format!(
        "{}  {}\n",
        sha256_of(manifest.to_str().unwrap()),
        manifest.display()
    );
    std::fs::write(record, earlier).unwrap();
    assert_config_error(
        &run_in(&f, &root, &["list"], &[]),
        &["was approved by an earlier dsh-env", "hooks", &approve],
    );
}

/// The host's own `DSH_*` values are an outer call's, stale here: a
/// manifest that grants one to a guest, in any case, is refused, naming the
/// contributor and the name, and `trust` does not approve it.
#[test]
fn an_env_grant_of_a_managed_name_is_refused_naming_the_contributor_and_the_name() {
    let f = Fixture::new();
    let outer = [("DSH_HOME", "/outer/home"), ("dsh_session_id", "outer")];
    for name in ["DSH_HOME", "dsh_session_id"] {
        let manifest = f.write(
            "granted.toml",
            &format!(
                "[[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nname = \"stale\"\n\
                 keys = \"DSH_STALE=s\"\nresolve = \"env\"\n[contributor.grants]\n\
                 env = [\"PATH\", {name:?}]\n"
            ),
        );
        let manifest = manifest.to_str().unwrap();
        let refusal = [
            "granted.toml",
            &format!("contributor {PUPPET}"),
            &format!("grants.env names `{name}`"),
        ];
        let out = f.run(
            &["resolve", "--manifest", manifest, "--home", &f.home()],
            &outer,
        );
        assert_config_error(&out, &refusal);
        let out = f.run(&["trust", manifest, "--home", &f.home()], &outer);
        assert_config_error(&out, &refusal);
    }
}

//! `dsh-env explain`: where each key came from, and what was scrubbed.

use super::*;

#[test]
fn explain_names_scrubbed_variables_but_never_their_values() {
    let f = Fixture::new();
    let (manifest, home, execution) = (f.path("manifest.toml"), f.home(), f.path("execution.json"));
    let mut args = f.with_setup("explain", manifest.to_str().unwrap(), &home);
    args.extend(["--execution", execution.to_str().unwrap()]);
    let output = f.run(
        &args,
        &[
            ("DSH_STALE", "stale-value"),
            ("MY_API_TOKEN", "secret-value"),
            ("MYSQL_PWD", "secret-pwd"),
            ("PGPASSWORD", "secret-pg"),
            ("DATABASE_URL", "postgres://user:secret-url@host/db"),
            ("EVIL\nNAME_TOKEN", "secret-evil"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("SSH_AUTH_SOCK", "/tmp/agent.sock"),
            ("KEYBOARD", "us"),
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("DSH_AGENT_DEPTH=1  (agent-lineage:"),
        "{text}"
    );
    for line in [
        "  DSH_STALE: managed DSH_* namespace: only the overlay sets it\n",
        "  MY_API_TOKEN: name part `TOKEN`\n",
        "  MYSQL_PWD: name part `PWD`\n",
        "  PGPASSWORD: known credential name\n",
        "  DATABASE_URL: password in a URL value\n",
        // A name is shown escaped: it cannot start a line of its own.
        "  EVIL\\nNAME_TOKEN: name part `TOKEN`\n",
    ] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }
    for kept in ["HTTPS_PROXY", "SSH_AUTH_SOCK", "KEYBOARD"] {
        assert!(!text.contains(kept), "{kept} is not scrubbed: {text}");
    }
    assert!(
        !text.contains("secret") && !text.contains("stale-value"),
        "{text}"
    );
    assert!(!text.lines().any(|l| l.starts_with("NAME_TOKEN")), "{text}");
    args.push("--json");
    let report = json(&f.run(&args, &[("MY_API_TOKEN", "secret-value")]));
    assert_eq!(
        report["scrubbed"],
        serde_json::json!([
            {"name": "MY_API_TOKEN", "rule": "name-part", "reason": "name part `TOKEN`"}
        ])
    );
}

#[test]
fn explain_shows_absent_keys_where_the_home_came_from_and_structured_omissions() {
    let f = Fixture::new();
    let manifest = f.write(
        "explain.toml",
        &format!(
            "[[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nname = \"quiet\"\nkeys = \"DSH_QUIET=never set\"\n\n\
             [[contributor]]\npath = {PUPPET:?}\non_error = \"omit\"\n[contributor.config]\nname = \"broken\"\nkeys = \"DSH_BROKEN=b\"\nresolve = \"trap:gone wrong\"\n"
        ),
    );
    let home = f.home();
    let args = f.with_setup("explain", manifest.to_str().unwrap(), &home);
    let output = f.run(&args, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    for line in [
        "Declared but absent for this execution:\n",
        "  DSH_QUIET  (quiet: never set)\n",
        "  DSH_BROKEN  (broken: b)\n",
        "  DSH_SESSION_ID  (dsh-env: ",
        &format!("DSH_HOME: {home} (from --home)\n"),
    ] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }

    let explain = [
        "explain",
        "--manifest",
        manifest.to_str().unwrap(),
        "--json",
    ];
    let report = json(&f.run(&explain, &[("DSH_HOME", &home)]));
    assert_eq!(
        report["home"],
        serde_json::json!({"path": home, "from": "$DSH_HOME"})
    );
    let absent: Vec<&str> = report["absent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["key"].as_str().unwrap())
        .collect();
    assert_eq!(absent, ["DSH_BROKEN", "DSH_QUIET", "DSH_SESSION_ID"]);
    let omitted = &report["omitted"][0];
    assert_eq!(
        (&omitted["name"], &omitted["phase"], &omitted["rule"]),
        (
            &serde_json::json!("broken"),
            &serde_json::json!("resolve"),
            &serde_json::json!("trap")
        )
    );
    assert!(
        omitted["reason"].as_str().unwrap().contains("gone wrong"),
        "{omitted}"
    );
    assert_eq!(report["omitted"].as_array().unwrap().len(), 1);
}

/// A manifest of three contributors that read the agent's cwd or a
/// variable, each granted `grants` (TOML lines under `[contributor.grants]`).
fn reader_manifest(f: &Fixture, repo: &Path, grants: [&str; 3]) -> PathBuf {
    let grants = grants.map(|lines| match lines {
        "" => String::new(),
        lines => format!("[contributor.grants]\n{lines}\n"),
    });
    let team = repo.join("team.txt");
    f.write(
        "readers.toml",
        &format!(
            "[[contributor]]\npath = {GIT_CONTEXT:?}\n{}\n\
             [[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nname = \"team\"\n\
             keys = \"DSH_TEAM=the team\"\nresolve = \"try-read:{}\"\n{}\n\
             [[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nname = \"region\"\n\
             keys = \"DSH_REGION=the region\"\nresolve = \"try-env:REGION\"\n{}\n\
             [[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nname = \"quiet\"\n\
             keys = \"DSH_QUIET=never set\"\n",
            grants[0],
            team.display(),
            grants[1],
            grants[2]
        ),
    )
}

#[test]
fn explain_shows_what_a_contributor_without_its_grant_looked_for_and_the_line_to_grant_it() {
    let f = Fixture::new();
    let repo = f.git_repo("feature-x");
    std::fs::write(repo.join("team.txt"), "platform").unwrap();
    let execution = f.execution_in(&repo);
    let home = f.home();
    let manifest = reader_manifest(&f, &repo, ["", "", ""]);
    let shown = manifest.display().to_string();
    let mut args = f.with_setup("explain", &shown, &home);
    args.extend(["--execution", execution.to_str().unwrap()]);
    let output = f.run(&args, &[("REGION", "eu")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let grant_at = |line: usize| {
        format!("under [contributor.grants] in its [[contributor]] entry at {shown}:{line}")
    };
    for line in [
        format!(
            "  git-context ({shown}:1): grants: none\n    stderr: (nothing)\n    hint: it looked for a directory (to open a path) and has no cwd grant: add `cwd = \"read\"` {}\n",
            grant_at(1)
        ),
        format!(
            "  team ({shown}:4): grants: none\n    stderr, the end:\n      cannot read {}: ",
            repo.join("team.txt").display()
        ),
        format!(
            "    hint: it looked for a directory (to open a path) and has no cwd grant: add `cwd = \"read\"` {}\n",
            grant_at(4)
        ),
        format!(
            "  region ({shown}:11): grants: none\n    stderr, the end:\n      cannot read $REGION: environment variable not found\n    hint: it read its environment, which is empty without an env grant; if it needs a host variable, add `env = [\"NAME\"]` {} (",
            grant_at(11)
        ),
        // A contributor that looked for nothing gets no hint.
        format!("  quiet ({shown}:18): grants: none\n    stderr: (nothing)\n"),
    ] {
        assert!(text.contains(&line), "{line:?} not in {text}");
    }
    assert_eq!(text.matches("hint:").count(), 3, "{text}");

    args.push("--json");
    let report = json(&f.run(&args, &[("REGION", "eu")]));
    let git = &report["why_absent"][0];
    assert_eq!(
        (
            &git["contributor"],
            &git["keys"],
            &git["grants"],
            &git["declared_at"],
            &git["stderr_tail"]
        ),
        (
            &serde_json::json!("git-context"),
            &serde_json::json!(["DSH_GIT_BRANCH"]),
            &serde_json::json!("none"),
            &serde_json::json!(format!("{shown}:1")),
            &serde_json::Value::Null
        )
    );
    assert!(
        git["hints"][0]
            .as_str()
            .unwrap()
            .contains("add `cwd = \"read\"`"),
        "{git}"
    );

    // Granted as the hints say, every key is there, and nothing is hinted.
    reader_manifest(
        &f,
        &repo,
        ["cwd = \"read\"", "cwd = \"read\"", "env = [\"REGION\"]"],
    );
    args.pop();
    let output = f.run(&args, &[("REGION", "eu")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    for line in [
        "  DSH_GIT_BRANCH=feature-x  (",
        "  DSH_TEAM=platform  (",
        "  DSH_REGION=eu  (",
    ] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }
    assert!(!text.contains("hint:"), "{text}");
}

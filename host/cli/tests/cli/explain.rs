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

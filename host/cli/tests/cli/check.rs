//! `dsh-env check`: a component's declaration, its dry run, and text shown escaped.

use super::*;

#[test]
fn check_reports_declaration_imports_and_every_broken_rule() {
    let f = Fixture::new();
    let good = f.run(&["check", AGENT_LINEAGE], &[]);
    assert!(good.status.success(), "{}", stderr(&good));
    let text = stdout(&good);
    assert!(
        text.contains("contributor `agent-lineage`") && text.contains("DSH_AGENT_DEPTH"),
        "{text}"
    );
    assert!(
        text.contains("dsh:env/types@0.2.0") && text.contains("No problems"),
        "{text}"
    );

    let bad = f.run(
        &[
            "check",
            PUPPET,
            "--config",
            "name=bad",
            "--config",
            "keys=lower=x|DSH_HOME=h|DSH_A= ",
            "--json",
        ],
        &[],
    );
    assert_eq!(bad.status.code(), Some(1));
    let report = json(&bad);
    assert_eq!(
        report["problems"],
        serde_json::json!([
            "contributor `bad`, key `lower`: malformed key: does not start with `DSH_`",
            "contributor `bad`, key `DSH_HOME`: the key is reserved for dsh-env",
            "contributor `bad`, key `DSH_A`: the description is blank",
        ])
    );
}

#[test]
fn check_dry_runs_resolve_and_reports_its_keys_or_its_failure() {
    let f = Fixture::new();
    // The sample execution: a top-level agent's call.
    let good = f.run(&["check", AGENT_LINEAGE], &[]);
    assert!(good.status.success(), "{}", stderr(&good));
    let text = stdout(&good);
    assert!(
        text.contains("Dry run (resolve for the sample execution, no grants):\n  DSH_AGENT_DEPTH=0\n  DSH_PARENT_SESSION_ID absent\n"),
        "{text}"
    );
    // An execution of the caller's: a spawned child.
    let child = repository().join("tests/fixtures/executions/child.json");
    let child = child.to_str().unwrap();
    let report = f.run(
        &["check", AGENT_LINEAGE, "--execution", child, "--json"],
        &[],
    );
    assert!(report.status.success(), "{}", stderr(&report));
    assert_eq!(
        json(&report)["dry_run"],
        serde_json::json!({
            "execution": child,
            "overlay": {"DSH_AGENT_DEPTH": "1", "DSH_PARENT_SESSION_ID": "sess-parent"},
            "absent": [],
        })
    );
    // A declaration that can be registered, and a resolve that cannot
    // succeed: each is a problem, named.
    let failing = [
        ("pairs=DSH_A=a|DSH_UNDECLARED=b", "key `DSH_UNDECLARED`"),
        ("resolve=trap:every call panics", "every call panics"),
        ("resolve=err:no team configured", "no team configured"),
    ];
    for (config, reason) in failing {
        let args = [
            "check",
            PUPPET,
            "--config",
            "keys=DSH_A=A key.",
            "--config",
            config,
            "--json",
        ];
        let out = f.run(&args, &[]);
        assert_eq!(out.status.code(), Some(1), "{config}: {}", stdout(&out));
        let report = json(&out);
        let problems = report["problems"].as_array().unwrap();
        assert!(
            problems.len() == 1
                && problems[0]
                    .as_str()
                    .unwrap()
                    .starts_with("its dry run failed: ")
                && problems[0].as_str().unwrap().contains(reason),
            "{config}: {problems:?}"
        );
        assert!(
            report["dry_run"]["error"]
                .as_str()
                .unwrap()
                .contains(reason),
            "{report}"
        );
    }
}

#[test]
fn check_escapes_what_the_guest_declared_and_json_stays_exact() {
    let f = Fixture::new();
    let config = [
        "--config",
        "name=bad\nname",
        "--config",
        "keys=DSH_A=one\rtwo",
    ];
    let mut args = vec!["check", PUPPET];
    args.extend(config);
    let output = f.run(&args, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains(r"contributor `bad\nname`"), "{text}");
    assert!(text.contains(r"DSH_A: one\rtwo"), "{text}");
    assert!(
        !text.contains('\r') && !text.lines().any(|l| l.starts_with("name`")),
        "{text}"
    );
    assert!(
        text.contains(r"the name holds control character `\n` (U+000A)"),
        "{text}"
    );
    assert!(
        text.contains(r"key `DSH_A`: the description holds control character `\r` (U+000D)"),
        "{text}"
    );
    args.push("--json");
    let report = json(&f.run(&args, &[]));
    assert_eq!(report["name"], "bad\nname");
    assert_eq!(report["keys"][0]["description"], "one\rtwo");

    // Registration refuses it for the same reason, not for a length.
    let manifest = f.write(
        "control.toml",
        &format!(
            "[[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nkeys = \"DSH_A=one\\ttwo\"\n"
        ),
    );
    let output = f.run(
        &f.with_setup("list", manifest.to_str().unwrap(), &f.home()),
        &[],
    );
    assert_config_error(
        &output,
        &[r"key `DSH_A`: the description holds control character `\t` (U+0009)"],
    );
}

/// Characters that reorder or hide text on a terminal: a right-to-left
/// override, a left-to-right isolate, a line separator, a zero-width space.
const HIDING: [char; 4] = ['\u{202e}', '\u{2066}', '\u{2028}', '\u{200b}'];

/// `output`'s stdout and stderr hold none of [`HIDING`] raw, and each of
/// `escapes`.
fn assert_shown_escaped(output: &Output, escapes: &[&str]) {
    let both = format!("{}{}", stdout(output), stderr(output));
    for c in HIDING {
        assert!(!both.contains(c), "U+{:04X} raw in: {both:?}", u32::from(c));
    }
    for escape in escapes {
        assert!(both.contains(escape), "`{escape}` not in: {both}");
    }
}

/// What a reviewer reads is what is there: a name, a description, a
/// config value shown back, a trusted comment and a guest's error message
/// that hold bidirectional controls, zero-width characters or separators
/// are shown escaped by `add`, `check` and `resolve`; the name and the
/// description are refused.
#[test]
fn add_and_check_show_text_that_could_reorder_or_hide_itself_escaped() {
    let f = Fixture::new();
    let home = f.home();
    // `dsh-env <args> --manifest <manifest> --home <home>`.
    let run = |args: &[&str], manifest: &Path| {
        let mut all = args.to_vec();
        all.extend(["--manifest", manifest.to_str().unwrap(), "--home", &home]);
        f.run(&all, &[])
    };
    let puppet = component_copy(&f, PUPPET, "puppet.wasm");
    let manifest = f.write(
        "m.toml",
        "[[contributor]]\npath = \"puppet.wasm\"\n[contributor.config]\n\
         name = \"evil\\u202Egnp.exe\"\nkeys = \"DSH_A=one\\u2066two\"\n\
         [contributor.grants.config]\nnote = \"a\\u2028b\\u200Bc\"\n",
    );
    let output = run(&["add", "puppet.wasm", "--yes"], &manifest);
    assert_shown_escaped(
        &output,
        &[
            r"Contributor `evil\u{202e}gnp.exe`",
            r"DSH_A: one\u{2066}two",
            r"config note = a\u{2028}b\u{200b}c",
            r"the name holds format character `\u{202e}` (U+202E)",
            r"key `DSH_A`: the description holds format character `\u{2066}` (U+2066)",
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));

    // A trusted comment, verified, shown by `check` beside the declaration.
    let author = SigningKey::new(f.dir.path(), "author");
    author.sign_with_comment(&puppet, "release \u{202e}1.0\u{2028}");
    let trusted = f.write("trusted.toml", &requiring(&author));
    let config = [
        "--config",
        "name=evil\u{202e}gnp.exe",
        "--config",
        "keys=DSH_A=one\u{200b}two",
    ];
    let output = run(&[&["check", "puppet.wasm"][..], &config].concat(), &trusted);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_shown_escaped(
        &output,
        &[
            &format!(
                r"signed by trusted key {} (release \u{{202e}}1.0\u{{2028}})",
                author.id
            ),
            r"contributor `evil\u{202e}gnp.exe`",
            r"DSH_A: one\u{200b}two",
        ],
    );

    // A guest's error message.
    let failing = f.write(
        "failing.toml",
        "[[contributor]]\npath = \"puppet.wasm\"\n[contributor.config]\n\
         keys = \"DSH_A=a\"\nresolve = \"err:evil\\u202Egnp\\u2066.exe\"\n",
    );
    let output = run(&["resolve"], &failing);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_shown_escaped(&output, &[r"guest error: evil\u{202e}gnp\u{2066}.exe"]);
}

#[test]
fn check_prints_a_pinned_entry_and_a_pin_refuses_other_bytes() {
    let f = Fixture::new();
    let output = f.run(&["check", AGENT_LINEAGE], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    let entry = &out[out.find("[[contributor]]").expect("an entry to paste")..];
    let pin = entry
        .lines()
        .find_map(|line| line.strip_prefix("sha256 = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("a sha256 line");
    assert!(out.contains(&format!("sha256: {pin}\n")), "{out}");
    // Pasted as it is, the entry registers.
    let manifest = f.write("pinned.toml", entry);
    let manifest = manifest.to_str().unwrap();
    let resolve = |manifest: &str| {
        f.run(
            &["resolve", "--home", &f.home(), "--manifest", manifest],
            &[],
        )
    };
    let output = resolve(manifest);
    assert!(output.status.success(), "{}", stderr(&output));
    // The same entry pinning other bytes: refused at registration, naming
    // the file and both digests.
    let other = "0".repeat(64);
    let wrong = f.write("wrong.toml", &entry.replace(pin, &other));
    let output = resolve(wrong.to_str().unwrap());
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains(AGENT_LINEAGE)
            && err.contains(&format!("its sha256 is {pin}, but its entry pins {other}")),
        "{err}"
    );
    // A pin that is no digest is a manifest error naming the field.
    let bad = f.write("bad.toml", &entry.replace(pin, "abc"));
    let output = resolve(bad.to_str().unwrap());
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("sha256 must be 64 hexadecimal digits, not `abc`"),
        "{}",
        stderr(&output)
    );
}

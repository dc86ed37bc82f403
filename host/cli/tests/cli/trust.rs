//! Pins and signatures, through every entry point.

use super::*;

#[test]
fn a_signature_under_a_trusted_key_is_verified_and_shown() {
    let f = Fixture::new();
    let author = SigningKey::new(f.dir.path(), "author");
    let component = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    author.sign(&component);
    let trust = |keys: &[&str], required: bool| {
        format!("[trust]\nkeys = {keys:?}\nrequire_signature = {required}\n\n")
    };
    let manifest = |name: &str, trust: &str| {
        f.write(
            name,
            &format!("{trust}[[contributor]]\npath = \"lineage.wasm\"\n"),
        )
        .display()
        .to_string()
    };
    let trusted = manifest("trusted.toml", &trust(&[&author.public], true));
    let explain = |manifest: &str| {
        f.run(
            &[
                "explain",
                "--home",
                &f.home(),
                "--manifest",
                manifest,
                "--json",
            ],
            &[],
        )
    };
    let output = explain(&trusted);
    assert!(output.status.success(), "{}", stderr(&output));
    let signer = &json(&output)["contributors"][0]["signer"];
    assert_eq!(signer["status"], "trusted", "{signer}");
    assert_eq!(signer["key_id"], author.id.as_str());
    assert!(
        signer["trusted_comment"]
            .as_str()
            .unwrap()
            .contains("release 1.0")
    );
    // check shows the same, verified under the manifest's keys.
    let output = f.run(&["check", "lineage.wasm", "--manifest", &trusted], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains(&format!("signature: signed by trusted key {}", author.id)),
        "{}",
        stdout(&output)
    );

    // Signed by a key the manifest does not trust: refused, naming the key.
    let stranger = SigningKey::new(f.dir.path(), "stranger");
    let only_stranger = manifest("stranger.toml", &trust(&[&stranger.public], false));
    assert_config_error(
        &explain(&only_stranger),
        &["lineage.wasm", &author.id, "not in [trust] keys"],
    );

    // A signature that is not of these bytes: refused, naming file and key.
    let other = component_copy(&f, CALL_TRACE, "other.wasm");
    author.sign(&other);
    std::fs::copy(f.path("other.wasm.minisig"), f.path("lineage.wasm.minisig")).unwrap();
    assert_config_error(
        &explain(&trusted),
        &["lineage.wasm", &author.id, "does not verify"],
    );

    // Unsigned, with a signature required: refused; not required: unsigned.
    std::fs::remove_file(f.path("lineage.wasm.minisig")).unwrap();
    assert_config_error(
        &explain(&trusted),
        &["lineage.wasm", "is not signed", "requires a signature"],
    );
    let optional = manifest("optional.toml", &trust(&[&author.public], false));
    let output = explain(&optional);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        json(&output)["contributors"][0]["signer"]["status"],
        "unsigned"
    );

    // A trusted key that is not a key: the manifest is refused, naming it.
    let broken = manifest("broken.toml", &trust(&["not-a-key"], false));
    assert_config_error(&explain(&broken), &["broken.toml", "trust.keys[0]"]);
}

/// One trust rule through every entry point: under `require_signature`,
/// the same unsigned component is refused by every command and by
/// `serve`'s `register` (under `serve --manifest`'s `[trust]`); signed, it
/// is taken by each.
#[test]
fn every_entry_point_refuses_an_unsigned_component_under_required_signatures() {
    let f = Fixture::new();
    let author = SigningKey::new(f.dir.path(), "author");
    let component = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    let trust_only = f.write("trust.toml", &requiring(&author));
    let with_entry = f.write(
        "m.toml",
        &format!(
            "{}\n[[contributor]]\npath = \"lineage.wasm\"\n",
            requiring(&author)
        ),
    );
    let (trust_only, with_entry) = (trust_only.to_str().unwrap(), with_entry.to_str().unwrap());
    let home = f.home();
    let command = |name: &str| -> Output {
        let mut args = vec![name, "--manifest", with_entry, "--home", &home];
        if name == "run" {
            args.extend(["--", "true"]);
        }
        f.run(&args, &[])
    };
    let check = || {
        f.run(
            &[
                "check",
                "lineage.wasm",
                "--manifest",
                trust_only,
                "--home",
                &home,
            ],
            &[],
        )
    };
    let add = || {
        f.run(
            &[
                "add",
                "lineage.wasm",
                "--manifest",
                trust_only,
                "--home",
                &home,
                "--yes",
            ],
            &[],
        )
    };
    let serve_register = || {
        let request = rpc(1, "register", serde_json::json!({"path": component}));
        let output = output_within(
            f.command(&["serve", "--manifest", trust_only, "--home", &home], &[]),
            Stdio::null(),
            Some(format!("{request}\n").into_bytes()),
        );
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_str::<serde_json::Value>(stdout(&output).trim()).unwrap()
    };
    let unsigned = ["lineage.wasm", "is not signed", "requires a signature"];

    for name in ["list", "resolve", "explain"] {
        assert_config_error(&command(name), &unsigned);
    }
    assert_one_line_error(&command("run"), 125, &unsigned);
    let output = check();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    for needle in unsigned {
        assert!(stdout(&output).contains(needle), "{}", stdout(&output));
    }
    assert_config_error(&add(), &unsigned);
    let answer = serve_register();
    assert_eq!(answer["error"]["code"], -32000, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    for needle in unsigned {
        assert!(message.contains(needle), "{answer}");
    }
    assert!(
        answer["error"]["data"]["file"]
            .as_str()
            .unwrap()
            .ends_with("lineage.wasm"),
        "{answer}"
    );

    // Signed by the trusted key, the same component is taken by each.
    author.sign(&component);
    for name in ["list", "resolve", "explain", "run"] {
        let output = command(name);
        assert!(output.status.success(), "{name}: {}", stderr(&output));
    }
    let output = check();
    assert!(output.status.success(), "{}", stdout(&output));
    let answer = serve_register();
    assert_eq!(answer["result"]["name"], "agent-lineage", "{answer}");
    // Last: it pins the component in trust.toml.
    let output = add();
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn add_reviews_pins_and_refuses_what_changed_until_added_again() {
    let f = Fixture::new();
    let component = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    let layout = "# Contributors for this project.\nhome = \"home\"  # kept as written\n";
    let manifest = f.write("m.toml", layout);
    let manifest_arg = manifest.to_str().unwrap();
    let add = |extra: &[&str]| {
        let mut args = vec!["add", "lineage.wasm", "--manifest", manifest_arg];
        args.extend_from_slice(extra);
        f.run(&args, &[])
    };
    let list = || f.run(&["list", "--manifest", manifest_arg], &[]);

    // Without a terminal and without --yes: the review is shown, nothing written.
    let output = add(&[]);
    assert_config_error(&output, &["no terminal to confirm on", "--yes"]);
    let review = stdout(&output);
    for needle in [
        "Contributor `agent-lineage`",
        "DSH_PARENT_SESSION_ID",
        "wasi:cli/environment",
        "Grants its entry asks for:\n    (none)",
        "signature: unsigned",
    ] {
        assert!(review.contains(needle), "`{needle}` not in: {review}");
    }
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), layout);

    // On a terminal (a real pty, from util-linux `script`), "n" declines and
    // "y" pins; --yes pins without asking.
    let on_terminal =
        |answer: &str| f.on_terminal(&["add", "lineage.wasm", "--manifest", manifest_arg], answer);
    let output = on_terminal("n\n");
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("Trust `agent-lineage` and pin it in"),
        "{}",
        stdout(&output)
    );
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), layout);
    let output = on_terminal("y\n");
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(
        std::fs::read_to_string(&manifest)
            .unwrap()
            .contains("sha256 = ")
    );
    std::fs::write(&manifest, layout).unwrap();

    // With --yes: pinned, comments and layout kept, and it loads.
    let output = add(&["--yes"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let pinned = std::fs::read_to_string(&manifest).unwrap();
    assert!(pinned.starts_with(layout), "{pinned}");
    assert!(pinned.contains("path = \"lineage.wasm\""), "{pinned}");
    assert!(pinned.contains("grants_sha256 = "), "{pinned}");
    let output = list();
    assert!(output.status.success(), "{}", stderr(&output));

    // Other bytes at the same path: refused until added again.
    std::fs::copy(CALL_TRACE, &component).unwrap();
    assert_config_error(
        &list(),
        &[
            "lineage.wasm",
            "changed since it was pinned",
            "run `dsh-env add` again",
        ],
    );
    let output = add(&["--yes"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("Updated `call-trace`"),
        "{}",
        stdout(&output)
    );
    let repinned = std::fs::read_to_string(&manifest).unwrap();
    assert_eq!(repinned.matches("[[contributor]]").count(), 1, "{repinned}");
    assert!(list().status.success());

    // Grants edited by hand: refused until reviewed again by `add`.
    let widened = format!("{repinned}\n[contributor.grants]\ncwd = \"read\"\n");
    std::fs::write(&manifest, &widened).unwrap();
    assert_config_error(
        &list(),
        &[
            "m.toml",
            "grants or config changed since it was added",
            "run `dsh-env add` again",
        ],
    );
    let output = add(&["--yes"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("the agent's cwd, read-only"),
        "{}",
        stdout(&output)
    );
    assert!(list().status.success());

    // Config is reviewed and pinned too, under either spelling: a value
    // changed by hand is refused until added again, and the review shows it.
    let reviewed = std::fs::read_to_string(&manifest).unwrap();
    for table in ["[contributor.config]", "[contributor.grants.config]"] {
        std::fs::write(
            &manifest,
            format!("{reviewed}\n{table}\nteam = \"other\"\n"),
        )
        .unwrap();
        assert_config_error(
            &list(),
            &["m.toml", "grants or config changed since it was added"],
        );
        let output = add(&["--yes"]);
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(
            stdout(&output).contains("config team = other"),
            "{table}: {}",
            stdout(&output)
        );
        assert!(list().status.success(), "{table}");
    }
}

//! One bash call through every door: the Rust `Host` in this process,
//! `dsh-env run`, `dsh-env serve` and the Node addon (through the npm
//! package's own `index.js`), each a thin adapter over the same host.
//!
//! Why here, as a Rust test of the CLI: this binary has the Rust host
//! in-process and already drives `run` and `serve` as real processes; the
//! addon is driven by `node` running `tests/doors_addon.cjs`. The addon is
//! built by `cargo build`, not by `cargo test`, so it comes from
//! `$DSH_ENV_TEST_ADDON` (scripts/test builds it first and sets it); without
//! it the test fails, saying so, rather than pass with a door unchecked.
//!
//! The codes each door must answer are written out in [`ROWS`], not read
//! from the adapters: a row changed in the CLI's exit codes (`run`), in
//! `serve`'s RPC codes, in the `DSH_*` names or in `index.js`'s error
//! classes fails the test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dsh_env::{HomeSetting, Manifest, Tiering, ToolExecution};
use dsh_env_harness::LocalExecutor;
use dsh_env_harness::host::{BashRequest, Captured, Host, HostConfig, HostError, HostErrorCode};
use serde_json::{Value, json};

use super::*;

/// The call every door makes: it prints the command's `DSH_*` variables.
const COMMAND: &str = "env | grep '^DSH_' | LC_ALL=C sort";

/// What every door must answer for one kind of failure, each in its own
/// form: the host's code, `run`'s exit code, `serve`'s RPC code, and the
/// Node package's `code` and error class.
struct Row {
    host: HostErrorCode,
    run: &'static str,
    serve: &'static str,
    node: &'static str,
}

/// The rows the failures below need.
const ROWS: [Row; 3] = [
    Row {
        host: HostErrorCode::Signature,
        run: "125",
        serve: "-32000",
        node: "DSH_SIGNATURE RegistrationError",
    },
    Row {
        host: HostErrorCode::Contributor,
        run: "125",
        serve: "-32000",
        node: "DSH_CONTRIBUTOR ContributorError",
    },
    Row {
        host: HostErrorCode::HookBlocked,
        run: "125",
        serve: "-32001",
        node: "DSH_HOOK_BLOCKED HookBlockedError",
    },
];

/// What a door gave: the call's stdout, or its failure in the door's own
/// form (`code`), its message and what it names (`culprit`: the host's
/// fields, `{}` where the door shows none).
#[derive(Debug)]
enum Answer {
    Ran(String),
    Failed {
        code: String,
        message: String,
        culprit: Value,
    },
}

/// One case: a manifest, and the failure every door must report (none:
/// the call runs, and every door's command sees the same overlay).
struct Case {
    what: &'static str,
    manifest: PathBuf,
    failure: Option<(HostErrorCode, &'static str)>,
}

/// The `[[contributor]]` every case's manifest has: the puppet, playing
/// `door`, with `extra` lines in its config and after it.
fn contributor(extra: &str) -> String {
    format!(
        "[[contributor]]\npath = \"puppet.wasm\"\n[contributor.config]\nname = \"door\"\n\
         keys = \"DSH_DOOR=the door test\"\n{extra}"
    )
}

fn cases(f: &Fixture) -> Vec<Case> {
    let author = SigningKey::new(f.dir.path(), "author");
    component_copy(f, PUPPET, "puppet.wasm");
    let good = "pairs = \"DSH_DOOR={session} {call} {mode} {cwd}\"\n";
    f.write(
        "hooks.json",
        &hooks_json("echo 'no doors today' >&2; exit 2", "true # post"),
    );
    let case = |what, name: &str, text: String, failure| Case {
        what,
        manifest: f.write(name, &text),
        failure,
    };
    vec![
        case("the overlay", "ok.toml", contributor(good), None),
        case(
            "an unsigned component under require_signature",
            "unsigned.toml",
            format!("{}\n{}", requiring(&author), contributor(good)),
            Some((HostErrorCode::Signature, "is not signed")),
        ),
        case(
            "an undeclared key",
            "undeclared.toml",
            contributor("pairs = \"DSH_DOOR=d|DSH_UNDECLARED=u\"\n"),
            Some((HostErrorCode::Contributor, "DSH_UNDECLARED")),
        ),
        case(
            "a blocking PreToolUse hook",
            "hooked.toml",
            format!("hooks = \"hooks.json\"\n\n{}", contributor(good)),
            Some((HostErrorCode::HookBlocked, "no doors today")),
        ),
        case(
            "a deadline",
            "looping.toml",
            contributor("resolve = \"loop\"\n[contributor.limits]\ndeadline_ms = 100\n"),
            Some((HostErrorCode::Contributor, "deadline")),
        ),
    ]
}

/// The Rust door: a host in this process, opened from the manifest with
/// the same home and compile helper, running the call with its output
/// captured.
fn through_rust(f: &Fixture, manifest: &Path) -> Answer {
    let failed = |err: HostError| Answer::Failed {
        code: format!("{:?}", err.code),
        message: err.message.clone(),
        culprit: json!(*err.culprit),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut config = HostConfig::new(
            Some(Manifest::from_file(manifest).unwrap()),
            Tiering::default(),
        );
        config.registry.home = Some(HomeSetting {
            origin: "the test".into(),
            path: f.home(),
        });
        config.registry.compiler = Some(BINARY.into());
        let host = match Host::open(config).await {
            Ok(host) => host,
            Err(err) => return failed(err),
        };
        let text = std::fs::read_to_string(f.path("execution.json")).unwrap();
        let call = BashRequest::new(ToolExecution::from_json(&text).unwrap(), COMMAND);
        match host.run_bash(call, &Captured(LocalExecutor)).await {
            Ok(outcome) => Answer::Ran(outcome.output.stdout),
            Err(err) => failed(err),
        }
    })
}

/// `dsh-env run`: its exit code, and its one line on stderr.
fn through_run(f: &Fixture, manifest: &Path) -> Answer {
    let (execution, home) = (f.path("execution.json"), f.home());
    let mut args = f.with_setup("run", manifest.to_str().unwrap(), &home);
    args.extend(["--execution", execution.to_str().unwrap()]);
    args.extend(["--", "sh", "-c", COMMAND]);
    let output = f.run(&args, &[]);
    match output.status.code() {
        Some(0) => Answer::Ran(stdout(&output)),
        code => Answer::Failed {
            code: format!("{}", code.unwrap_or(-1)),
            message: stderr(&output).trim_end().to_string(),
            culprit: json!({}),
        },
    }
}

/// `dsh-env serve`: an `exec` of the call. Its manifest's contributors are
/// registered before it serves (a refused one ends it with the CLI's exit
/// code), so a registration's failure comes through `register`, of the same
/// entry, under the same `[trust]`.
fn through_serve(f: &Fixture, manifest: &Path, register: bool) -> Answer {
    let home = f.home();
    let request = if register {
        let trust_only = std::fs::read_to_string(manifest).unwrap();
        let trust_only = trust_only.split("[[contributor]]").next().unwrap();
        let served = f.write("trust-only.toml", trust_only);
        let entry = json!({"path": "puppet.wasm",
            "config": {"name": "door", "keys": "DSH_DOOR=the door test"}});
        (served, rpc(1, "register", entry))
    } else {
        let execution: Value =
            serde_json::from_str(&std::fs::read_to_string(f.path("execution.json")).unwrap())
                .unwrap();
        let exec = json!({"execution": execution, "command": COMMAND});
        (manifest.to_path_buf(), rpc(1, "exec", exec))
    };
    let (served, request) = request;
    let command = f.command(&f.with_setup("serve", served.to_str().unwrap(), &home), &[]);
    let output = output_within(
        command,
        Stdio::null(),
        Some(format!("{request}\n").into_bytes()),
    );
    succeeded("serve", &output);
    let answer: Value = serde_json::from_str(stdout(&output).trim())
        .unwrap_or_else(|e| panic!("{e}: {}", stdout(&output)));
    match &answer["error"] {
        Value::Null => Answer::Ran(answer["result"]["stdout"].as_str().unwrap().to_string()),
        error => Answer::Failed {
            code: error["code"].to_string(),
            message: error["message"].as_str().unwrap().to_string(),
            culprit: error.get("data").cloned().unwrap_or_else(|| json!({})),
        },
    }
}

/// The Node package: `Registry.open` with the manifest, `registerManifest`,
/// `exec`, as `tests/doors_addon.cjs` does them; the error's `code` and
/// class.
fn through_node(f: &Fixture, manifest: &Path, addon: &str) -> Answer {
    let dir = f.path("node-door");
    std::fs::create_dir_all(&dir).unwrap();
    let execution: Value =
        serde_json::from_str(&std::fs::read_to_string(f.path("execution.json")).unwrap()).unwrap();
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let job = json!({
        "index": Path::new(env!("CARGO_MANIFEST_DIR")).join("../node/index.js"),
        "addon": addon, "dir": dir, "home": f.home(), "compiler": BINARY,
        "manifest": manifest, "execution": execution, "command": COMMAND,
    });
    let job_file = f.write("node-job.json", &job.to_string());
    let mut node = Command::new("node");
    node.arg(tests.join("doors_addon.cjs"))
        .arg(&job_file)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", f.dir.path())
        .current_dir(f.dir.path());
    let output = output_within(node, Stdio::null(), None);
    succeeded("node", &output);
    let answer: Value = serde_json::from_str(stdout(&output).trim())
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&output), stderr(&output)));
    match &answer["error"] {
        Value::Null => Answer::Ran(answer["stdout"].as_str().unwrap().to_string()),
        error => {
            let mut culprit = error.clone();
            let object = culprit.as_object_mut().unwrap();
            let (code, class, message) = (
                object.remove("code").unwrap(),
                object.remove("class").unwrap(),
                object.remove("message").unwrap(),
            );
            Answer::Failed {
                code: format!("{} {}", code.as_str().unwrap(), class.as_str().unwrap()),
                message: message.as_str().unwrap().to_string(),
                culprit,
            }
        }
    }
}

#[test]
fn every_door_gives_one_call_the_same_overlay_and_each_failure_the_same_code() {
    let addon = std::env::var("DSH_ENV_TEST_ADDON").unwrap_or_else(|_| {
        panic!(
            "DSH_ENV_TEST_ADDON is not set: this test drives the Node addon too. Build it \
             (`cargo build`), then set DSH_ENV_TEST_ADDON=target/debug/libdsh_env_node.so, \
             as scripts/test does"
        )
    });
    let f = Fixture::new();
    for case in cases(&f) {
        let what = case.what;
        let register = case
            .failure
            .is_some_and(|(code, _)| code == HostErrorCode::Signature);
        let answers = [
            ("rust", through_rust(&f, &case.manifest)),
            ("run", through_run(&f, &case.manifest)),
            ("serve", through_serve(&f, &case.manifest, register)),
            ("node", through_node(&f, &case.manifest, &addon)),
        ];
        let Some((host_code, needle)) = case.failure else {
            let overlay = match &answers[0].1 {
                Answer::Ran(overlay) => overlay.clone(),
                failed => panic!("{what}: the Rust host failed: {failed:?}"),
            };
            assert!(
                overlay.contains("DSH_DOOR=child-1 c1 foreground /tmp\n"),
                "{what}: {overlay}"
            );
            for (door, answer) in &answers {
                assert!(
                    matches!(answer, Answer::Ran(seen) if *seen == overlay),
                    "{what}: {door} gave {answer:?}, not {overlay:?}"
                );
            }
            continue;
        };
        let row = ROWS.iter().find(|row| row.host == host_code).unwrap();
        let expected = [
            format!("{:?}", row.host),
            row.run.to_string(),
            row.serve.to_string(),
            row.node.to_string(),
        ];
        for ((door, answer), code) in answers.iter().zip(&expected) {
            let Answer::Failed {
                code: given,
                message,
                ..
            } = answer
            else {
                panic!("{what}: {door} ran the call: {answer:?}");
            };
            assert_eq!(given, code, "{what}: {door}'s code ({message})");
            assert!(message.contains(needle), "{what}: {door}: {message}");
        }
        // A call's failure is the host's one error at every door: the same
        // message (`run` words it on its line) and what it names.
        if !register {
            let Answer::Failed {
                message, culprit, ..
            } = &answers[0].1
            else {
                unreachable!("checked above");
            };
            for (door, answer) in &answers[1..] {
                let Answer::Failed {
                    message: given,
                    culprit: named,
                    ..
                } = answer
                else {
                    unreachable!("checked above");
                };
                assert!(given.contains(message.as_str()), "{what}: {door}: {given}");
                if *door != "run" {
                    assert_eq!(given, message, "{what}: {door}'s message");
                    assert_eq!(named, culprit, "{what}: {door}'s culprit");
                }
            }
        }
    }
}

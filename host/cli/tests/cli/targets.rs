//! The other targets (docs/ci.md, "Other targets"): the arm64 CLI and addon
//! under qemu-user (`scripts/run-arm64`), the static musl CLI alone in an
//! empty tree, and each one's release archive. `scripts/test` builds them
//! (`scripts/build-target`) before `cargo test` and sets
//! `DSH_ENV_TEST_TARGETS`: then every test here runs, and a binary that is
//! missing fails it. Without it (a plain `cargo test`, which builds neither)
//! they pass at once.

use super::archive::{packs_reproducibly, runs_unpacked};
use super::*;

const ARM64: &str = "aarch64-unknown-linux-gnu";
const MUSL: &str = "x86_64-unknown-linux-musl";

/// A hang guard for a binary under emulation: a cold compile of one Rust
/// component there takes tens of seconds of CPU.
const EMULATED: Duration = Duration::from_secs(900);

/// ELF `e_machine` values.
const EM_AARCH64: u16 = 183;
const EM_X86_64: u16 = 62;

/// The cargo target directory this test binary was built in.
fn target_dir() -> PathBuf {
    Path::new(BINARY).ancestors().nth(2).unwrap().to_path_buf()
}

/// `target/<triple>/debug/<name>` when the other targets are tested (and
/// then it must exist); `None` otherwise.
fn built(triple: &str, name: &str) -> Option<PathBuf> {
    std::env::var_os("DSH_ENV_TEST_TARGETS").filter(|v| !v.is_empty())?;
    let path = target_dir().join(triple).join("debug").join(name);
    assert!(
        path.is_file(),
        "{} is not built: scripts/build-target {triple}",
        path.display()
    );
    Some(path)
}

/// The machine an ELF file is for (`e_machine`, little-endian).
fn elf_machine(path: &Path) -> u16 {
    let bytes = std::fs::read(path).unwrap();
    assert!(
        bytes.starts_with(b"\x7fELF"),
        "{} is no ELF",
        path.display()
    );
    u16::from_le_bytes([bytes[18], bytes[19]])
}

fn run_arm64() -> PathBuf {
    repository().join("scripts/run-arm64")
}

/// The arm64 CLI under qemu with `args`, within [`EMULATED`].
fn arm64(cli: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(run_arm64());
    command.arg(cli).args(args);
    output_bounded(command, Stdio::null(), None, EMULATED)
}

/// An execution whose agent's session has a parent, working in `cwd`.
fn execution(cwd: &str) -> String {
    format!(
        r#"{{"callId":"c1","name":"bash","arguments":{{"command":"true"}},
            "agent":{{"session":{{"header":{{"version":1,"id":"child-1","createdAt":0,"cwd":"{cwd}","parentSession":"parent-1","delegationDepth":1}}}}}}}}"#
    )
}

/// A manifest of the examples at `paths` (contributors/examples.toml's,
/// with its grants and config): git-context reads the cwd.
fn examples_manifest(paths: &[&str]) -> String {
    paths
        .iter()
        .map(|path| {
            let extra = if path.ends_with("git_context.wasm") {
                "[contributor.grants]\ncwd = \"read\"\n"
            } else if path.ends_with("session_url.wasm") {
                "[contributor.config]\nbase_url = \"https://agents.example.test/sessions\"\n"
            } else {
                ""
            };
            format!("[[contributor]]\npath = {path:?}\n{extra}\n")
        })
        .collect()
}

/// The examples that compile under emulation: the Rust and C ones. The
/// Python and JavaScript components (interpreters compiled into them) take
/// more than the 120 s compile CPU limit under qemu (docs/ci.md).
const EMULATED_EXAMPLES: [&str; 4] = [AGENT_LINEAGE, CALL_TRACE, GIT_CONTEXT, WORKSPACE_ID];

/// The keys of a `resolve`'s `KEY=value` lines.
fn keys(resolved: &str) -> Vec<&str> {
    resolved
        .lines()
        .filter_map(|line| line.split_once('=').map(|(key, _)| key))
        .collect()
}

/// `list`, `resolve` and `run` by `cli` against the host's own binary, over
/// `manifest` and `execution`: the same declarations and keys, and the
/// parent's id passed on.
fn agrees_with_the_host(
    cli: impl Fn(&[&str]) -> Output,
    host_paths: (&Path, &Path),
    paths: (&str, &str, &str),
) {
    let (manifest, execution, home) = paths;
    let host_home = tempfile::tempdir().unwrap();
    let host = |args: &[&str]| {
        let output = Command::new(BINARY)
            .args(args)
            .arg("--home")
            .arg(host_home.path())
            .output()
            .unwrap();
        succeeded("the host's dsh-env", &output);
        stdout(&output)
    };
    let (host_manifest, host_execution) = (
        host_paths.0.to_str().unwrap(),
        host_paths.1.to_str().unwrap(),
    );

    let listed = cli(&["list", "--manifest", manifest, "--home", home]);
    succeeded("list", &listed);
    assert_eq!(
        stdout(&listed),
        host(&["list", "--manifest", host_manifest])
    );
    assert!(stdout(&listed).contains("DSH_WORKSPACE_ID"));

    let resolved = cli(&[
        "resolve",
        "--manifest",
        manifest,
        "--execution",
        execution,
        "--home",
        home,
    ]);
    succeeded("resolve", &resolved);
    let text = stdout(&resolved);
    let host_text = host(&[
        "resolve",
        "--manifest",
        host_manifest,
        "--execution",
        host_execution,
    ]);
    assert_eq!(keys(&text), keys(&host_text), "{text}");
    assert!(text.contains("DSH_PARENT_SESSION_ID=parent-1\n"), "{text}");

    let ran = cli(&[
        "run",
        "--manifest",
        manifest,
        "--execution",
        execution,
        "--home",
        home,
        "--",
        "/bin/bash",
        "-c",
        "echo \"$DSH_SESSION_ID $DSH_PARENT_SESSION_ID\"",
    ]);
    succeeded("run", &ran);
    assert_eq!(stdout(&ran), "child-1 parent-1\n");
}

#[test]
fn the_arm64_cli_lists_resolves_runs_and_checks_the_examples_under_qemu() {
    let Some(cli) = built(ARM64, "dsh-env") else {
        return;
    };
    assert_eq!(
        elf_machine(&cli),
        EM_AARCH64,
        "{} is not arm64",
        cli.display()
    );
    let f = Fixture::new();
    let manifest = f.write("examples.toml", &examples_manifest(&EMULATED_EXAMPLES));
    let cwd = f.path("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let execution = f.write("execution.json", &execution(cwd.to_str().unwrap()));
    let home = f.home();
    agrees_with_the_host(
        |args| arm64(&cli, args),
        (&manifest, &execution),
        (
            manifest.to_str().unwrap(),
            execution.to_str().unwrap(),
            &home,
        ),
    );
    for example in EMULATED_EXAMPLES {
        let checked = arm64(&cli, &["check", example, "--home", &home]);
        succeeded(example, &checked);
        assert!(
            stdout(&checked).contains("No problems"),
            "{}",
            stdout(&checked)
        );
    }
}

#[test]
fn under_qemu_a_looping_contributor_stops_at_its_deadline_and_a_growing_one_at_its_cap() {
    let Some(cli) = built(ARM64, "dsh-env") else {
        return;
    };
    let f = Fixture::new();
    let home = f.home();
    for (how, limit, failure) in [
        // The default 2 s: `declare` runs under the same deadline, and under
        // qemu on a loaded machine it took more than 500 ms.
        ("loop", "deadline_ms = 2000", "deadline of 2s exceeded"),
        (
            "grow",
            "memory_mib = 32",
            "memory limit of 33554432 bytes exceeded",
        ),
    ] {
        let manifest = f.write(
            &format!("{how}.toml"),
            &format!(
                "[[contributor]]\npath = {PUPPET:?}\n[contributor.config]\nname = \"hostile\"\n\
                 keys = \"DSH_H=h\"\nresolve = \"{how}\"\n[contributor.limits]\n{limit}\n"
            ),
        );
        let resolved = arm64(
            &cli,
            &[
                "resolve",
                "--manifest",
                manifest.to_str().unwrap(),
                "--home",
                &home,
            ],
        );
        assert_eq!(
            resolved.status.code(),
            Some(1),
            "{how}: {}",
            stderr(&resolved)
        );
        let expected = format!("contributor `hostile` (keys DSH_H) failed in resolve: {failure}");
        assert!(
            stderr(&resolved).contains(&expected),
            "{how}: {}",
            stderr(&resolved)
        );
    }
}

#[test]
fn the_arm64_addon_collects_from_arm64_node_through_its_packed_package() {
    let Some(addon) = built(ARM64, "libdsh_env_node.so") else {
        return;
    };
    assert_eq!(elf_machine(&addon), EM_AARCH64);
    let node = target_dir().join("tools/node-arm64/bin/node");
    assert!(
        node.is_file(),
        "{}: run scripts/setup-platforms",
        node.display()
    );
    assert_eq!(elf_machine(&node), EM_AARCH64);

    let dir = tempfile::tempdir().unwrap();
    let packed = dir.path().join("packed");
    let npm_env = [
        ("npm_config_cache", dir.path().join("npm-cache")),
        ("npm_config_update_notifier", PathBuf::from("false")),
    ];
    let packing = Command::new(repository().join("scripts/npm-package"))
        .args(["--profile", "dev", "--target", ARM64])
        .arg(&packed)
        .envs(npm_env.clone())
        .output()
        .unwrap();
    succeeded("scripts/npm-package", &packing);
    let mut tarballs: Vec<String> = std::fs::read_dir(&packed)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    tarballs.sort();
    assert_eq!(
        tarballs,
        [
            "dsh-env-node-0.1.0.tgz",
            "dsh-env-node-linux-arm64-gnu-0.1.0.tgz"
        ]
    );
    let main_manifest = Command::new("tar")
        .arg("xzOf")
        .arg(packed.join(&tarballs[0]))
        .arg("package/package.json")
        .output()
        .unwrap();
    let manifest: serde_json::Value = serde_json::from_slice(&main_manifest.stdout).unwrap();
    assert_eq!(
        manifest["optionalDependencies"],
        serde_json::json!({
            "@dsh-env/node-linux-arm64-gnu": "0.1.0",
            "@dsh-env/node-linux-x64-gnu": "0.1.0",
        })
    );

    // Installed from the tarballs alone by npm on arm64: the system's npm,
    // run by the arm64 Node.js, so that npm checks `os`/`cpu`/`libc`
    // against arm64.
    let npm_cli = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|dir| dir.join("npm"))
        .find(|npm| npm.is_file())
        .and_then(|npm| npm.canonicalize().ok())
        .expect("npm on PATH");
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(
        project.join("package.json"),
        "{ \"name\": \"consumer\", \"private\": true }\n",
    )
    .unwrap();
    let mut installing = Command::new(run_arm64());
    installing
        .arg(&node)
        .arg(npm_cli)
        .args([
            "install",
            "--offline",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ])
        .args(tarballs.iter().map(|t| packed.join(t)))
        .current_dir(&project)
        .envs(npm_env);
    let installed = output_bounded(installing, Stdio::null(), None, EMULATED);
    succeeded("npm install", &installed);
    let platform = project.join("node_modules/@dsh-env/node-linux-arm64-gnu");
    assert_eq!(
        elf_machine(&platform.join("dsh-env-compile")),
        EM_AARCH64,
        "the helper beside the addon"
    );

    std::fs::write(
        project.join("collect.cjs"),
        r#"const { Registry } = require('@dsh-env/node');
const execution = {
  callId: 'c1', name: 'bash', arguments: { command: 'true' },
  agent: { session: { header: { version: 1, id: 'child-1', createdAt: 0, cwd: process.cwd(), parentSession: 'parent-1', delegationDepth: 1 } } },
};
(async () => {
  const registry = Registry.open({ home: process.env.DSH_HOME });
  for (const path of JSON.parse(process.env.EXAMPLES)) {
    await registry.register(path, path.endsWith('git_context.wasm') ? { grants: { cwd: 'read' } } : {});
  }
  const { overlay } = await registry.collect(execution);
  const ran = await registry.exec(execution, 'echo "$DSH_PARENT_SESSION_ID"');
  console.log(JSON.stringify({ arch: process.arch, overlay, stdout: ran.stdout }));
})().catch((error) => { console.error(error); process.exit(1); });
"#,
    )
    .unwrap();
    let mut command = Command::new(run_arm64());
    command
        .arg(&node)
        .arg("collect.cjs")
        .current_dir(&project)
        .env_clear()
        .env("HOME", dir.path())
        .env("PATH", "/usr/bin:/bin")
        .env("DSH_HOME", dir.path().join("dsh-home"))
        .env(
            "EXAMPLES",
            serde_json::to_string(&EMULATED_EXAMPLES).unwrap(),
        );
    let ran = output_bounded(command, Stdio::null(), None, EMULATED);
    succeeded("arm64 node", &ran);
    let report = json(&ran);
    assert_eq!(report["arch"], "arm64");
    for key in [
        "DSH_PARENT_SESSION_ID",
        "DSH_TRACEPARENT",
        "DSH_WORKSPACE_ID",
    ] {
        assert!(report["overlay"][key].is_string(), "{key} in {report}");
    }
    assert_eq!(report["stdout"], "parent-1\n");
}

#[test]
fn the_static_cli_resolves_every_example_alone_in_an_empty_tree() {
    let Some(cli) = built(MUSL, "dsh-env") else {
        return;
    };
    assert_eq!(elf_machine(&cli), EM_X86_64);
    let described = Command::new("file").arg("-b").arg(&cli).output().unwrap();
    let described = stdout(&described);
    assert!(
        described.contains("static-pie linked") || described.contains("statically linked"),
        "{described}"
    );

    // The tree: the binary and a static bash, the examples and the files it
    // reads, an empty home, and /proc (mounted there, as any container has it).
    let tree = tempfile::tempdir().unwrap();
    let root = tree.path();
    for dir in ["bin", "proc", "home", "work/cwd"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::copy(&cli, root.join("bin/dsh-env")).unwrap();
    std::fs::copy("/bin/bash-static", root.join("bin/bash")).unwrap();
    let examples = [
        AGENT_LINEAGE,
        CALL_TRACE,
        GIT_CONTEXT,
        SESSION_URL,
        CALL_CONTEXT,
        WORKSPACE_ID,
    ];
    let mut inside = Vec::new();
    for example in examples {
        let name = Path::new(example).file_name().unwrap().to_str().unwrap();
        std::fs::copy(example, root.join("work").join(name)).unwrap();
        inside.push(format!("/work/{name}"));
    }
    let inside: Vec<&str> = inside.iter().map(String::as_str).collect();
    std::fs::write(root.join("work/examples.toml"), examples_manifest(&inside)).unwrap();
    std::fs::write(root.join("work/execution.json"), execution("/work/cwd")).unwrap();
    // The host's copies, for the host's binary to compare with.
    let f = Fixture::new();
    let host_manifest = f.write("examples.toml", &examples_manifest(&examples));
    let host_cwd = f.path("cwd");
    std::fs::create_dir(&host_cwd).unwrap();
    let host_execution = f.write("execution.json", &execution(host_cwd.to_str().unwrap()));

    let alone = |args: &[&str]| {
        let mut command = Command::new("/usr/bin/env");
        command
            .args([
                "-i",
                "/usr/bin/unshare",
                "--user",
                "--map-root-user",
                "--mount",
            ])
            .args(["--pid", "--fork", "--mount-proc"])
            .arg(format!("--root={}", root.display()))
            .args(["--wd=/work", "/bin/dsh-env"])
            .args(args);
        output_bounded(command, Stdio::null(), None, EMULATED)
    };
    // Nothing else is there to load: no dynamic loader, no libc.
    let shown = alone(&["--version"]);
    succeeded("--version", &shown);
    agrees_with_the_host(
        alone,
        (&host_manifest, &host_execution),
        ("/work/examples.toml", "/work/execution.json", "/home/.dsh"),
    );
}

/// The host's own archive is archive.rs's test.
#[test]
fn each_other_targets_release_archive_packs_reproducibly_and_runs_unpacked() {
    let (Some(arm64), Some(musl)) = (built(ARM64, "dsh-env"), built(MUSL, "dsh-env")) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let runner = run_arm64();
    for (binary, target, runner, bound) in [
        (arm64.as_path(), ARM64, Some(runner.as_path()), EMULATED),
        (musl.as_path(), MUSL, None, BOUND),
    ] {
        let out = work.path().join(target);
        std::fs::create_dir(&out).unwrap();
        let archive = packs_reproducibly(binary, runner, &out);
        runs_unpacked(&archive, target, runner, bound);
    }
}

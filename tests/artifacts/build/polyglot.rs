//! Builds the example contributors written in Python, JavaScript and C, and
//! the WAT test guests `table-grower`, `alias-bomb` and `contract-test` (the
//! last also as the contract versions of the dispatch tests), into components under
//! `<target>/polyglot/`, each only when its inputs changed (componentize-py
//! and componentize-js take tens of seconds).
//!
//! The tools come from `scripts/setup-polyglot`: componentize-py in the venv
//! `target/tools/venv`, componentize-js in `contributors/call-context/node_modules`,
//! and Debian's clang, lld and wasi-libc. The C bindings and the final
//! componentization come from `dsh-env-authoring`, the code behind
//! `dsh-env bindgen c` and `dsh-env componentize`.

use std::fmt::Write as _;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const SETUP: &str = "run scripts/setup-polyglot to install the tools that build the Python, JavaScript and C contributors";

/// The frozen contract these contributors are built for: the snapshot the
/// guest SDK carries, never a live folder.
const CONTRACT: &str = "guest-sdk/wit/since_v0.1.0";

/// The test-only contract version `dsh:env@0.2.0-test`, which the host binds
/// under its `test-contract` feature.
const TEST_CONTRACT: &str = "host/core/wit/test-contract";

/// The build recipe itself, and the authoring code it calls, are inputs of
/// every component.
const RECIPE: &str = concat!(
    include_str!("polyglot.rs"),
    include_str!("../../../host/authoring/src/lib.rs")
);

/// Builds the components; returns (constant name, component path) of each.
pub fn build(workspace: &Path, target_dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let out = target_dir.join("polyglot");
    fs::create_dir_all(&out).unwrap_or_else(|e| panic!("create {}: {e}", out.display()));
    for input in [
        "contributors/session-url/session_url.py",
        "contributors/session-url/requirements.txt",
        "contributors/call-context/call-context.js",
        "contributors/call-context/build.mjs",
        "contributors/call-context/package.json",
        "contributors/call-context/package-lock.json",
        "contributors/workspace-id/workspace_id.c",
        "tests/guests/table-grower/table_grower.wat",
        "tests/guests/alias-bomb/alias_bomb.wat",
        "tests/guests/contract-test/contract_test.wat",
        "tests/artifacts/build/polyglot.rs",
        CONTRACT,
        TEST_CONTRACT,
    ] {
        println!("cargo:rerun-if-changed={}", workspace.join(input).display());
    }
    // The Python and JavaScript builds each keep one core busy for tens of
    // seconds: run them side by side, and the quick C build meanwhile.
    std::thread::scope(|scope| {
        let python = scope.spawn(|| session_url(workspace, &out));
        let javascript = scope.spawn(|| call_context(workspace, &out));
        let c = workspace_id(workspace, &out);
        let wat = |name, contract, version| {
            wat_guest(
                workspace,
                &out,
                name,
                &Contract::new(workspace, contract, version),
            )
        };
        let table_grower = wat("table-grower", CONTRACT, None);
        let alias_bomb = wat("alias-bomb", CONTRACT, None);
        let contract_test = wat("contract-test", TEST_CONTRACT, None);
        // The dispatch tests' versions: one no host binds, and a compatible
        // 0.1.y that the 0.1.0 bindings serve.
        let contract_unsupported = wat("contract-test", TEST_CONTRACT, Some("1.0.0"));
        let contract_compatible = wat("table-grower", CONTRACT, Some("0.1.1"));
        let join = |handle: std::thread::ScopedJoinHandle<'_, PathBuf>| {
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        };
        vec![
            ("SESSION_URL", join(python)),
            ("CALL_CONTEXT", join(javascript)),
            ("WORKSPACE_ID", c),
            ("TABLE_GROWER", table_grower),
            ("ALIAS_BOMB", alias_bomb),
            ("CONTRACT_TEST", contract_test),
            ("CONTRACT_UNSUPPORTED", contract_unsupported),
            ("CONTRACT_COMPATIBLE", contract_compatible),
        ]
    })
}

/// `contributors/session-url`, with componentize-py.
fn session_url(workspace: &Path, out: &Path) -> PathBuf {
    let dir = workspace.join("contributors/session-url");
    let requirements = dir.join("requirements.txt");
    let inputs = [
        vec![dir.join("session_url.py"), requirements.clone()],
        Contract::frozen(workspace).files(),
    ]
    .concat();
    cached(out, "session_url", &inputs, |component| {
        let venv = workspace.join("target/tools/venv");
        let tool = venv.join("bin/componentize-py");
        assert!(tool.exists(), "{} is missing: {SETUP}", tool.display());
        assert!(
            fs::read(venv.join(".requirements.txt")).ok() == fs::read(&requirements).ok(),
            "{} is not installed as pinned: {SETUP}",
            requirements.display()
        );
        // componentize-py writes `__pycache__` beside the module; build a copy
        // so that the source tree stays untouched.
        let source = fresh_dir(&out.join("session_url.src"));
        copy(&dir.join("session_url.py"), &source.join("session_url.py"));
        let mut command = Command::new(&tool);
        command
            .arg("-d")
            .arg(workspace.join(CONTRACT))
            .args(["-w", "contributor", "componentize", "-p"])
            .arg(&source)
            .arg("session_url")
            .arg("-o")
            .arg(component);
        run(&mut command);
    })
}

/// `contributors/call-context`, with componentize-js's JS API (`build.mjs`).
fn call_context(workspace: &Path, out: &Path) -> PathBuf {
    let dir = workspace.join("contributors/call-context");
    let lock = dir.join("package-lock.json");
    let sources = [
        "call-context.js",
        "warm-bindings.js",
        "dsh-env.js",
        "build.mjs",
        "package.json",
    ]
    .map(|f| dir.join(f));
    let inputs = [
        sources.to_vec(),
        vec![lock.clone()],
        Contract::frozen(workspace).files(),
    ]
    .concat();
    cached(out, "call_context", &inputs, |component| {
        let installed = dir.join("node_modules/.setup-polyglot-lock.json");
        assert!(
            fs::read(&installed).ok() == fs::read(&lock).ok(),
            "{} is not installed (npm ci): {SETUP}",
            lock.display()
        );
        let mut command = Command::new("node");
        command
            .current_dir(&dir)
            .arg("build.mjs")
            .arg(component)
            .arg("call-context.js")
            .arg(workspace.join(CONTRACT));
        run(&mut command);
    })
}

/// `contributors/workspace-id`: bindings from wit-bindgen's C generator,
/// clang for wasm32-wasi (a preview1 reactor), then wit-component with the
/// preview1 reactor adapter.
fn workspace_id(workspace: &Path, out: &Path) -> PathBuf {
    let source = workspace.join("contributors/workspace-id/workspace_id.c");
    let inputs = [vec![source.clone()], Contract::frozen(workspace).files()].concat();
    cached(out, "workspace_id", &inputs, |component| {
        assert!(
            Path::new("/usr/include/wasm32-wasi/stdlib.h").exists(),
            "wasi-libc is missing: {SETUP}"
        );
        let generated = fresh_dir(&out.join("workspace_id.gen"));
        let contract = Contract::frozen(workspace).parse();
        let files = contract
            .c_bindings()
            .unwrap_or_else(|e| panic!("generate C bindings: {e}"));
        for (name, contents) in files {
            let path = generated.join(name);
            fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        }

        let module = generated.join("workspace_id.module.wasm");
        let mut clang = Command::new("clang");
        clang
            .args([
                "--target=wasm32-wasi",
                "--sysroot=/usr",
                "-Os",
                "-mexec-model=reactor",
            ])
            .args([
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-Wno-unused-parameter",
            ])
            .arg("-I")
            .arg(&generated)
            .arg(&source)
            .arg(generated.join("contributor.c"))
            .arg(generated.join("contributor_component_type.o"))
            .arg("-o")
            .arg(&module);
        run(&mut clang);

        let module = fs::read(&module).unwrap_or_else(|e| panic!("read {}: {e}", module.display()));
        let bytes = contract
            .componentize(&module)
            .unwrap_or_else(|e| panic!("componentize workspace_id: {e}"));
        fs::write(component, bytes)
            .unwrap_or_else(|e| panic!("write {}: {e}", component.display()));
    })
}

/// `tests/guests/<name>/<name>.wat` (with `_` for `-` in the file name): a
/// core module written in WAT, with the contributor world of `contract`
/// embedded, encoded as a component.
fn wat_guest(workspace: &Path, out: &Path, name: &str, contract: &Contract) -> PathBuf {
    let stem = name.replace('-', "_");
    let source = workspace.join(format!("tests/guests/{name}/{stem}.wat"));
    let inputs = [vec![source.clone()], contract.files()].concat();
    let output = match contract.version {
        Some(version) => format!("{stem}_v{}", version.replace(['.', '-'], "_")),
        None => stem,
    };
    cached(out, &output, &inputs, |component| {
        let module =
            wat::parse_file(&source).unwrap_or_else(|e| panic!("parse {}: {e}", source.display()));
        // It imports nothing, so the reactor adapter goes unused.
        let bytes = contract
            .parse()
            .componentize(&module)
            .unwrap_or_else(|e| panic!("componentize {name}: {e}"));
        fs::write(component, bytes)
            .unwrap_or_else(|e| panic!("write {}: {e}", component.display()));
    })
}

/// The contract a component is built for: a WIT snapshot, or (for the
/// dispatch tests) a one-file snapshot relabelled as another version.
struct Contract {
    dir: PathBuf,
    version: Option<&'static str>,
}

impl Contract {
    /// `dir` (relative to the workspace), as `version` if given.
    fn new(workspace: &Path, dir: &str, version: Option<&'static str>) -> Self {
        Contract {
            dir: workspace.join(dir),
            version,
        }
    }

    /// The frozen contract the example contributors target.
    fn frozen(workspace: &Path) -> Self {
        Contract::new(workspace, CONTRACT, None)
    }

    /// Every file of the snapshot, sorted.
    fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = fs::read_dir(&self.dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", self.dir.display()))
            .map(|entry| entry.expect("read a contract entry").path())
            .collect();
        files.sort();
        files
    }

    /// Its files parsed, as the contract to build against.
    fn parse(&self) -> dsh_env_authoring::Contract {
        let dir = self.dir.display();
        let files: Vec<(String, String)> = self
            .files()
            .iter()
            .map(|file| {
                let text = fs::read_to_string(file)
                    .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
                (file.display().to_string(), text)
            })
            .collect();
        let files = match self.version {
            None => files,
            Some(version) => {
                let [(file, text)] = &files[..] else {
                    panic!("{dir}: only a one-file contract can be relabelled");
                };
                let relabelled: String = text
                    .lines()
                    .map(|line| match line.starts_with("package dsh:env@") {
                        true => format!("package dsh:env@{version};\n"),
                        false => format!("{line}\n"),
                    })
                    .collect();
                vec![(file.clone(), relabelled)]
            }
        };
        dsh_env_authoring::Contract::parse(files.iter().map(|(f, t)| (f.as_str(), t.as_str())))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
    }
}

/// `<out>/<name>.wasm`, built by `build` into the path it is given unless it
/// exists and was built from inputs with the same contents (the fingerprint
/// sits beside it in `<name>.inputs`).
fn cached(out: &Path, name: &str, inputs: &[PathBuf], build: impl FnOnce(&Path)) -> PathBuf {
    let component = out.join(format!("{name}.wasm"));
    let stamp = out.join(format!("{name}.inputs"));
    let fingerprint = fingerprint(inputs);
    if component.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s == fingerprint) {
        return component;
    }
    let _ = fs::remove_file(&stamp);
    let partial = out.join(format!("{name}.wasm.partial"));
    let start = Instant::now();
    build(&partial);
    fs::rename(&partial, &component).unwrap_or_else(|e| panic!("{name}: {e}"));
    fs::write(&stamp, fingerprint).unwrap_or_else(|e| panic!("write {}: {e}", stamp.display()));
    eprintln!("built {} in {:.1?}", component.display(), start.elapsed());
    component
}

/// One line per input (FNV-1a of its contents, then its path), plus the recipe.
fn fingerprint(inputs: &[PathBuf]) -> String {
    let mut lines = format!(
        "{:016x} tests/artifacts/build/polyglot.rs + host/authoring\n",
        fnv1a(RECIPE.as_bytes())
    );
    for input in inputs {
        let contents = fs::read(input).unwrap_or_else(|e| panic!("read {}: {e}", input.display()));
        writeln!(lines, "{:016x} {}", fnv1a(&contents), input.display())
            .expect("write to a String");
    }
    lines
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// An empty directory at `path`.
fn fresh_dir(path: &Path) -> PathBuf {
    let _ = fs::remove_dir_all(path);
    fs::create_dir_all(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    path.to_path_buf()
}

fn copy(from: &Path, to: &Path) {
    fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
}

/// Runs `command`, panicking with its output when it cannot start or fails.
fn run(command: &mut Command) {
    let program = command.get_program().to_string_lossy().into_owned();
    let output = match command.output() {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            panic!("`{program}` is not installed: {SETUP}")
        }
        Err(e) => panic!("cannot run `{program}`: {e}"),
    };
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}\n(if a tool is missing or outdated, {SETUP})",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
}

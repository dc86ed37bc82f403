//! Compiles every guest crate to a component, once, into the shared target
//! directory, and writes their paths into `artifacts.rs` (the pattern of
//! wasmtime's `test-programs/artifacts`).

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build/polyglot.rs"]
mod polyglot;

/// (constant name, package, directory) of every Rust guest.
const GUESTS: &[(&str, &str, &str)] = &[
    (
        "AGENT_LINEAGE",
        "agent-lineage",
        "contributors/agent-lineage",
    ),
    ("CALL_TRACE", "call-trace", "contributors/call-trace"),
    ("GIT_CONTEXT", "git-context", "contributors/git-context"),
    ("PUPPET", "puppet", "tests/guests/puppet"),
    ("ECHO", "echo", "tests/guests/echo"),
];

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest_dir
        .ancestors()
        .nth(2)
        .expect("tests/artifacts/ sits in the workspace");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    let target_dir = root_target_dir(&out_dir);

    let guest_dirs = GUESTS.iter().map(|(_, _, dir)| *dir);
    for input in ["guest-sdk", "Cargo.toml", "Cargo.lock"]
        .into_iter()
        .chain(guest_dirs)
    {
        println!("cargo:rerun-if-changed={}", workspace.join(input).display());
    }

    build_rust_guests(workspace, target_dir);

    let mut artifacts = String::new();
    for (constant, package, _) in GUESTS {
        let path = target_dir
            .join("wasm32-wasip2/guest")
            .join(format!("{}.wasm", package.replace('-', "_")));
        assert!(
            path.exists(),
            "guest {package} was not built at {}",
            path.display()
        );
        writeln!(
            artifacts,
            "/// The `{package}` component.\npub const {constant}: &str = {:?};",
            path.display().to_string()
        )
        .unwrap();
    }
    for (constant, path) in polyglot::build(workspace, target_dir) {
        let name = constant.to_lowercase().replace('_', "-");
        writeln!(
            artifacts,
            "/// The `{name}` component.\npub const {constant}: &str = {:?};",
            path.display().to_string()
        )
        .unwrap();
    }
    std::fs::write(out_dir.join("artifacts.rs"), artifacts).expect("write artifacts.rs");
}

/// The target directory the guests are built into: OUT_DIR's
/// `<target>/<profile>/build/<package>-<hash>/out`, less a `<triple>/` level
/// when the host crates are built for another target (`--target`), so that
/// a cross build (scripts/build-target) finds the host build's guests
/// instead of building every guest again (about 2 minutes of CPU).
fn root_target_dir(out_dir: &Path) -> &Path {
    let dir = out_dir
        .ancestors()
        .nth(4)
        .expect("OUT_DIR is inside the target dir");
    let triple = env::var("TARGET").expect("set by cargo");
    match dir.parent() {
        Some(parent) if dir.ends_with(&triple) => parent,
        _ => dir,
    }
}

/// One cargo invocation for all Rust guests, with the `guest` profile.
fn build_rust_guests(workspace: &Path, target_dir: &Path) {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace)
        .args([
            "build",
            "--profile",
            "guest",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(target_dir);
    for (_, package, _) in GUESTS {
        command.args(["-p", package]);
    }
    // Flags meant for the host build (and clippy's wrapper) must not leak into the guests'.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        command.env_remove(var);
    }
    let status = command.status().expect("run cargo for the guests");
    assert!(status.success(), "building the guests failed: {status}");
}

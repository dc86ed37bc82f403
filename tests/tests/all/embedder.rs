//! A library user's build: `tests/embedder` depends on the `dsh-env` crate
//! by path from outside this workspace, so the root's `[patch.crates-io]`
//! does not reach it and it links wasmtime 48.0.8 as released, without the
//! fixed page-map reset (vendor/README.md). It must get the safe reset, and
//! every execution a fresh instance.

use std::path::Path;
use std::process::Command;

use dsh_env_tests::artifacts;

// Built as a user builds it (scripts/build-embedder): its own target
// directory (under the workspace's, kept between runs but sharing no unit
// with it) and cargo's default profile, so this is a cold build of upstream
// wasmtime and cranelift once per clean checkout, unoptimised, which costs
// the fewest CPU minutes. `scripts/test` runs the same script earlier,
// beside its setup, so this one finds it fresh.
#[test]
fn an_embedder_outside_the_workspace_gets_the_safe_reset_and_fresh_instances() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // This test binary is `<target>/debug/deps/all-<hash>`.
    let exe = std::env::current_exe().unwrap();
    let target_dir = exe.ancestors().nth(3).unwrap();
    let target = target_dir.join("embedder");
    let built = Command::new(root.join("scripts/build-embedder"))
        .arg(target_dir)
        .status()
        .unwrap();
    assert!(built.success(), "the embedder did not build");

    let home = tempfile::tempdir().unwrap();
    let output = Command::new(target.join("debug/dsh-env-embedder"))
        .arg(home.path())
        .arg(artifacts::PUPPET)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{out}{err}");
    assert!(
        out.contains("page-map reset: off (the safe reset)"),
        "{out}"
    );
    assert!(out.contains("resets in place: false"), "{out}");
    assert!(out.contains("fresh instances: 5 of 5"), "{out}");
}

/// Inside the workspace the vendored wasmtime is linked, and says so.
#[test]
fn the_workspace_links_the_fixed_page_map_reset() {
    // A constant the build script decides: read at run time, so that a build
    // without the marker fails this test rather than the build.
    assert!(
        std::hint::black_box(dsh_env::PAGEMAP_RESET),
        "the vendored wasmtime's marker did not reach dsh-env's build script"
    );
}

//! The compile helper that ships with the library, as the library runs it.
//!
//! This is the core crate's one integration binary. Besides its own checks,
//! it makes `cargo test` build `dsh-env-compile` (cargo builds a package's
//! binaries for its integration tests), which every other test process finds
//! in the target directory.

use std::io::Write;
use std::process::{Command, Stdio};

use dsh_env::{DshHome, Registry};
use dsh_env::{LoadFrom, LoadOptions};
use dsh_env_artifacts::ECHO;

const HELPER: &str = env!("CARGO_BIN_EXE_dsh-env-compile");

#[tokio::test]
async fn the_library_compiles_through_this_helper() {
    let dir = tempfile::tempdir().unwrap();
    let home = DshHome::from_absolute(dir.path()).unwrap();
    let registry = Registry::builder(home).compiler(HELPER).build().unwrap();
    let echo = registry
        .load(LoadFrom::File(ECHO.as_ref()), &LoadOptions::new())
        .unwrap();
    let registration = registry.register(echo).await.unwrap();
    assert_eq!(registration.name(), "echo");
}

#[test]
fn a_helper_for_another_engine_refuses_to_compile() {
    let mut child = Command::new(HELPER)
        .args([
            "--memory-bytes",
            "2147483648",
            "--cpu-seconds",
            "60",
            "--engine",
            "0000",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"\0asm").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("compiles for another engine than its caller"),
        "{stderr}"
    );
}

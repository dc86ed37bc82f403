//! The local executor with real processes: environment order, timeouts that
//! kill the whole process group, output caps, stdin, background runs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dsh_env::{EnvError, Overlay, ScrubPolicy};
use dsh_env_harness::{ExecError, LocalExecutor, ShellExecRequest};
use dsh_env_tests::{agent_call, registry};

async fn overlay() -> Overlay {
    registry()
        .collect(&agent_call("c1", "sess-exec"))
        .await
        .unwrap()
}

fn request(command: &str, overlay: Overlay) -> ShellExecRequest {
    ShellExecRequest::new(command, std::env::temp_dir(), overlay)
}

#[tokio::test]
async fn the_overlay_is_applied_last_and_env_in_between() {
    let mut req = request(
        r#"printf "%s|%s|%s|%s" "$DSH_SESSION_ID" "$TERM" "$PAGER" "$EXTRA""#,
        overlay().await,
    );
    req.env = BTreeMap::from([
        ("PAGER".into(), "less".into()),
        ("EXTRA".into(), "e".into()),
    ]);
    let output = LocalExecutor.run(req).await.unwrap();
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "sess-exec|dumb|less|e"
    );
    assert_eq!(output.exit_code, Some(0));
}

#[tokio::test]
async fn a_managed_name_in_env_is_refused_before_spawn() {
    let marker = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    std::fs::remove_file(&marker).unwrap();
    let mut req = request(&format!("touch {}", marker.display()), overlay().await);
    req.env = BTreeMap::from([("Dsh_Session_Id".into(), "forged".into())]);
    let err = LocalExecutor.run(req).await.unwrap_err();
    assert!(
        matches!(err, ExecError::Env(EnvError::ManagedNameInEnv(ref name)) if name == "Dsh_Session_Id"),
        "{err}"
    );
    assert!(!marker.exists());
}

#[tokio::test]
async fn the_request_carries_its_scrub_policy() {
    // HOME is inherited by every test process and matches no credential rule.
    assert!(std::env::var_os("HOME").is_some());
    let command = r#"printf "%s" "${HOME-unset}""#;
    let kept = LocalExecutor
        .run(request(command, overlay().await))
        .await
        .unwrap();
    assert_ne!(kept.stdout, b"unset");
    let mut req = request(command, overlay().await);
    req.environment.scrub = ScrubPolicy::also_scrubbing(["home"]);
    let scrubbed = LocalExecutor.run(req).await.unwrap();
    assert_eq!(String::from_utf8(scrubbed.stdout).unwrap(), "unset");
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let pid_file = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    let mut req = request(
        &format!("sleep 30 & echo $! > {}; wait", pid_file.display()),
        overlay().await,
    );
    // Long enough for bash to start and write the pid even on a loaded
    // machine (at 300 ms it once timed out before the pid was written).
    req.timeout = Duration::from_secs(2);
    let started = Instant::now();
    let output = LocalExecutor.run(req).await.unwrap();
    assert!(output.timed_out);
    assert_eq!(output.exit_code, None, "killed by a signal");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the sleeping grandchild held the call"
    );
    let grandchild = std::fs::read_to_string(&pid_file).unwrap();
    assert!(
        !grandchild.trim().is_empty(),
        "the grandchild never started"
    );
    // SIGKILL is delivered, not finished, when kill(2) returns: on a loaded
    // machine the grandchild can still be in its last scheduling slot when
    // the call returns, so give it a moment (far below the sleep's 30 s).
    let pid = grandchild.trim();
    let zombie_or_gone = || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat.contains(") Z "))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !zombie_or_gone() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let zombie_or_gone = zombie_or_gone();
    assert!(zombie_or_gone, "the background sleep survived the timeout");
}

#[tokio::test]
async fn output_is_capped_and_marked() {
    let mut req = request("head -c 100000 /dev/zero; echo done >&2", overlay().await);
    req.output_cap = 1000;
    let output = LocalExecutor.run(req).await.unwrap();
    assert_eq!(output.stdout.len(), 1000);
    assert!(output.truncated);
    assert_eq!(output.stderr, b"done\n");
}

#[tokio::test]
async fn stdin_reaches_the_command_and_is_closed_without_it() {
    let mut req = request("cat", overlay().await);
    req.stdin = Some(b"from the caller".to_vec());
    let output = LocalExecutor.run(req).await.unwrap();
    assert_eq!(output.stdout, b"from the caller");
    let output = LocalExecutor
        .run(request("cat", overlay().await))
        .await
        .unwrap();
    assert_eq!(output.stdout, b"", "no stdin means an empty, closed stdin");
}

#[tokio::test]
async fn a_background_run_returns_a_handle_at_once() {
    let req = request("sleep 0.2; echo $DSH_SESSION_ID; exit 4", overlay().await);
    let handle = LocalExecutor.spawn_background(req).unwrap();
    assert!(handle.pid.is_some());
    let output = handle.wait().await.unwrap();
    assert_eq!(
        (output.exit_code, output.stdout),
        (Some(4), b"sess-exec\n".to_vec())
    );
}

#[tokio::test]
async fn a_missing_workdir_is_a_spawn_error_naming_it() {
    let req = ShellExecRequest::new("true", "/no/such/dir", overlay().await);
    let err = LocalExecutor.run(req).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("cannot start bash in /no/such/dir:"),
        "{err}"
    );
}

#[tokio::test]
async fn the_shell_is_found_on_the_childs_path_not_ours() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("bin");
    std::fs::create_dir(&fake).unwrap();
    std::fs::write(fake.join("bash"), "#!/bin/sh\necho \"fake bash: $*\"\n").unwrap();
    std::fs::set_permissions(
        fake.join("bash"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();

    // A relative entry counts from the command's workdir, as execvp would see it.
    let mut req = ShellExecRequest::new("echo real", dir.path(), overlay().await);
    req.env = BTreeMap::from([("PATH".into(), "bin:/usr/bin:/bin".into())]);
    let output = LocalExecutor.run(req).await.unwrap();
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "fake bash: -c echo real\n"
    );

    // Without one on the child's PATH, the real shell runs.
    let mut req = ShellExecRequest::new("echo real", dir.path(), overlay().await);
    req.env = BTreeMap::from([("PATH".into(), "/usr/bin:/bin".into())]);
    let output = LocalExecutor.run(req).await.unwrap();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), "real\n");
}

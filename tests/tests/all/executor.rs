//! The local executor with real processes: environment order, timeouts that
//! kill the whole process group, output caps, stdin, background runs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dsh_env::CollectOptions;
use dsh_env::{EnvError, Overlay, ScrubPolicy};
use dsh_env_harness::{ExecError, LocalExecutor, ShellExecRequest};
use dsh_env_tests::{agent_call, registry};

async fn overlay() -> Overlay {
    registry()
        .collect(&agent_call("c1", "sess-exec"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay
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

/// Credentials that package managers and cloud tools read from
/// config-shaped names never reach a child, family by family: npm's (which
/// npm reads in any case), yarn's, pip's and uv's index URLs with user info,
/// cargo's registry tokens, git's config through the environment, the cloud
/// CLIs'. Their look-alikes, which the tools need and which hold no secret,
/// stay.
#[test]
fn config_shaped_credentials_are_scrubbed_family_by_family() {
    let families: [(&str, &[(&str, &str)]); 6] = [
        (
            "npm",
            &[
                ("npm_config__authToken", "t"),
                ("NPM_CONFIG_//registry.npmjs.org/:_authToken", "t"),
                ("npm_config_//npm.test/:_password", "cA=="),
                ("Npm_Config__Auth", "dTpw"),
                ("npm_config_otp", "123456"),
            ],
        ),
        (
            "yarn",
            &[
                ("YARN_NPM_AUTH_TOKEN", "t"),
                ("YARN_NPM_AUTH_IDENT", "u:p"),
                ("YARN_NPMAUTHTOKEN", "t"),
            ],
        ),
        (
            "pip",
            &[
                ("PIP_INDEX_URL", "https://user:pass@pypi.test/simple"),
                ("PIP_EXTRA_INDEX_URL", "https://TOKEN@pkgs.test/simple"),
                ("UV_INDEX_URL", "https://tok@uv.test/simple"),
            ],
        ),
        (
            "cargo",
            &[
                ("CARGO_REGISTRY_TOKEN", "t"),
                ("CARGO_REGISTRIES_MINE_TOKEN", "t"),
            ],
        ),
        (
            "git",
            &[
                ("GIT_CONFIG_COUNT", "1"),
                ("GIT_CONFIG_KEY_0", "http.extraHeader"),
                ("GIT_CONFIG_VALUE_0", "Authorization: Bearer t"),
                ("GIT_CONFIG_PARAMETERS", "'credential.helper'='store'"),
            ],
        ),
        (
            "cloud",
            &[
                ("AWS_ACCESS_KEY_ID", "i"),
                ("AWS_SECRET_ACCESS_KEY", "k"),
                ("AWS_SESSION_TOKEN", "t"),
                ("AZURE_CLIENT_SECRET", "s"),
                (
                    "AZURE_STORAGE_CONNECTION_STRING",
                    "AccountName=a;AccountKey=k",
                ),
                ("GOOGLE_APPLICATION_CREDENTIALS", "/k.json"),
                ("CLOUDSDK_AUTH_ACCESS_TOKEN", "t"),
            ],
        ),
    ];
    let kept = [
        ("npm_config_registry", "https://registry.npmjs.org/"),
        ("NPM_CONFIG_CACHE", "/c"),
        ("YARN_CACHE_FOLDER", "/y"),
        ("UV_DEFAULT_INDEX", "https://pypi.test/simple"),
        ("CARGO_HOME", "/c"),
        ("GIT_CONFIG_GLOBAL", "/g"),
        ("AWS_REGION", "eu-west-1"),
    ];
    let vars = |pairs: &[(&str, &str)]| -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    };
    for (family, credentials) in families {
        let inherited = vars(credentials).into_iter().chain(vars(&kept));
        let child = dsh_env::child_environment(
            inherited,
            &BTreeMap::new(),
            &Overlay::default(),
            &Default::default(),
        )
        .unwrap();
        for (name, _) in credentials {
            assert!(
                !child.contains_key(std::ffi::OsStr::new(name)),
                "{family}: {name} reached the child"
            );
        }
        for (name, value) in kept {
            assert_eq!(
                child.get(std::ffi::OsStr::new(name)),
                Some(&value.into()),
                "{family}: {name} was scrubbed"
            );
        }
    }
}

//! `dsh-env login`: a registry with htpasswd auth.

use super::*;

/// `f.command(args, env)` with `input` on its stdin.
fn run_with_stdin(f: &Fixture, args: &[&str], env: &[(&str, &str)], input: &str) -> Output {
    output_within(
        f.command(args, env),
        Stdio::piped(),
        Some(input.as_bytes().to_vec()),
    )
}

/// Every output a test's commands gave, to check that a secret never shows.
#[derive(Default)]
struct Shown(Vec<String>);

impl Shown {
    /// `output`, kept.
    fn keep(&mut self, output: Output) -> Output {
        self.0
            .push(format!("{}{}", stdout(&output), stderr(&output)));
        output
    }

    /// Panics if any kept output holds `secret`.
    fn assert_never(&self, secret: &str) {
        for text in &self.0 {
            assert!(!text.contains(secret), "a secret shown: {text}");
        }
    }
}

/// `dsh-env login HOST --username fleet --password-stdin`.
fn login_as_fleet(host: &str) -> [&str; 5] {
    ["login", host, "--username", "fleet", "--password-stdin"]
}

#[test]
fn login_lets_push_add_and_pull_through_a_registry_with_htpasswd_auth_and_never_shows_the_password()
{
    use base64::Engine as _;
    const PASSWORD: &str = "s3cret-Pa55word";
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start_with_login("fleet", PASSWORD);
    let host = registry.host();
    let docker = f.path("docker").display().to_string();
    let env = [("DOCKER_CONFIG", docker.as_str())];
    let config = f.path("docker/config.json");
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("fleet:{PASSWORD}"));
    let mut shown = Shown::default();
    let mut keep = |output| shown.keep(output);
    let lineage = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    let target = format!("{host}/dsh/private:v1");
    let push = |env: &[(&str, &str)]| f.run(&["push", lineage.to_str().unwrap(), &target], env);

    // No credentials: refused, naming the registry and what to run.
    let output = keep(push(&env));
    assert_config_error(
        &output,
        &[
            &host,
            "asks for credentials",
            &format!("`dsh-env login {host}`"),
        ],
    );
    // A wrong password is named plainly, and nothing is stored.
    let login = login_as_fleet(&host);
    let output = keep(run_with_stdin(&f, &login, &env, "not-it\n"));
    assert_config_error(
        &output,
        &[
            &host,
            "refused the username `fleet`",
            "wrong username or password",
        ],
    );
    assert!(!config.exists());
    // A password past the cap is refused before any request, naming it.
    let output = keep(run_with_stdin(&f, &login, &env, &"x".repeat(4097)));
    assert_config_error(
        &output,
        &["the password on stdin is over the 4096-byte limit"],
    );
    assert!(!config.exists());

    let output = keep(run_with_stdin(&f, &login, &env, &format!("{PASSWORD}\n")));
    assert!(output.status.success(), "{}", stderr(&output));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&config).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(stored["auths"][&host]["auth"], encoded.as_str());

    // Push, add and pull with the stored login.
    let output = keep(push(&env));
    assert!(output.status.success(), "{}", stderr(&output));
    let manifest = f.write("m.toml", "");
    let m = manifest.to_str().unwrap();
    let tagged = format!("oci://{target}");
    let output = keep(f.run(
        &["add", &tagged, "--manifest", m, "--home", "author", "--yes"],
        &env,
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let pull =
        |home: &str, env: &[(&str, &str)]| f.run(&["pull", "--manifest", m, "--home", home], env);
    let output = keep(pull("worker", &env));
    assert!(output.status.success(), "{}", stderr(&output));

    // A stale password in the file: the pull names the refusal.
    let wrong = base64::engine::general_purpose::STANDARD.encode("fleet:old-password");
    std::fs::write(
        &config,
        format!(r#"{{"auths": {{"{host}": {{"auth": "{wrong}"}}}}}}"#),
    )
    .unwrap();
    let output = keep(pull("worker-2", &env));
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("wrong username or password"),
        "{}",
        stderr(&output)
    );

    // $REGISTRY_AUTH_FILE comes first; its credHelpers entry runs
    // docker-credential-<name> (the registry on its stdin).
    let bin = f.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let helper = bin.join("docker-credential-fleet-test");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\nread server\n[ \"$1\" = get ] && [ \"$server\" = '{host}' ] || exit 1\nprintf '{{\"Username\":\"fleet\",\"Secret\":\"{PASSWORD}\"}}'\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let auth_file = f.write(
        "auth.json",
        &format!(r#"{{"credHelpers": {{"{host}": "fleet-test"}}}}"#),
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let helped = [
        ("DOCKER_CONFIG", docker.as_str()),
        ("REGISTRY_AUTH_FILE", auth_file.to_str().unwrap()),
        ("PATH", path.as_str()),
    ];
    let output = keep(pull("worker-3", &helped));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("(1 pulled, 0 already there)"),
        "{}",
        stdout(&output)
    );

    // A helper that floods its stdout is cut off at the cap and named;
    // nothing it said is shown.
    std::fs::write(&helper, "#!/bin/sh\nexec yes flood-text\n").unwrap();
    let output = keep(pull("worker-4", &helped));
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "credential helper docker-credential-fleet-test: its output is over the 65536-byte limit"
        ),
        "{err}"
    );
    assert!(!err.contains("flood-text"), "{err}");

    shown.assert_never(PASSWORD);
    shown.assert_never(&encoded);
}

#[test]
fn login_answers_a_token_registrys_bearer_challenge_as_ghcr_and_harbor_ask() {
    const PASSWORD: &str = "t0ken-Pa55word";
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start_with_token_auth("fleet", PASSWORD);
    let host = registry.host();
    let docker = f.path("docker").display().to_string();
    let env = [("DOCKER_CONFIG", docker.as_str())];
    let mut shown = Shown::default();
    let mut keep = |output| shown.keep(output);
    let lineage = component_copy(&f, AGENT_LINEAGE, "lineage.wasm");
    let target = format!("{host}/dsh/bearer:v1");
    let push = || f.run(&["push", lineage.to_str().unwrap(), &target], &env);
    let login = login_as_fleet(&host);

    // No login: the token service refuses, and the message says what to run.
    let output = keep(push());
    assert_config_error(&output, &[&host, "asks for credentials"]);
    // A wrong password: the token service's 401 is named as such.
    let output = keep(run_with_stdin(&f, &login, &env, "not-it\n"));
    assert_config_error(&output, &[&host, "refused the username `fleet`"]);

    let output = keep(run_with_stdin(&f, &login, &env, &format!("{PASSWORD}\n")));
    assert!(output.status.success(), "{}", stderr(&output));
    let output = keep(push());
    assert!(output.status.success(), "{}", stderr(&output));
    let manifest = f.write("m.toml", "");
    let m = manifest.to_str().unwrap();
    let tagged = format!("oci://{target}");
    let add = ["add", &tagged, "--manifest", m, "--home", "author", "--yes"];
    let output = keep(f.run(&add, &env));
    assert!(output.status.success(), "{}", stderr(&output));
    let output = keep(f.run(&["pull", "--manifest", m, "--home", "worker"], &env));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("(1 pulled, 0 already there)"),
        "{}",
        stdout(&output)
    );

    // The token service was asked with the login, for the repository's
    // scope: push for the push, pull for the add and the pull.
    let scopes: Vec<String> = (registry.token_requests().iter())
        .filter(|request| request.header("authorization").is_some())
        .map(|request| request.target.clone())
        .collect();
    let scope = |actions: &str| format!("scope=repository%3Adsh%2Fbearer%3A{actions}");
    assert!(
        scopes.iter().any(|t| t.contains(&scope("pull%2Cpush"))),
        "{scopes:?}"
    );
    assert!(
        scopes.iter().any(|t| t.contains(&scope("pull&"))),
        "{scopes:?}"
    );
    shown.assert_never(PASSWORD);
}

/// `m.toml` pinning one `oci://<host>/<repository>@sha256:…` per
/// repository, to digests no registry has: `pull` asks for each.
fn pinning(f: &Fixture, host: &str, repositories: &[&str]) -> PathBuf {
    let digest = "a".repeat(64);
    let entries: String = (repositories.iter())
        .map(|repository| {
            format!(
                "[[contributor]]\nsource = \"oci://{host}/{repository}@sha256:{digest}\"\nsha256 = \"{digest}\"\n\n"
            )
        })
        .collect();
    f.write("m.toml", &entries)
}

#[test]
fn a_registry_that_repeats_the_password_or_its_token_never_gets_either_shown_by_pull_or_login() {
    use base64::Engine as _;
    use dsh_env_test_registry::{HostileServer, Reply};
    const PASSWORD: &str = "Echo p@ss/w0rd+Secret";
    const TOKEN: &str = "issued-token-7f3a9c51";
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("fleet:{PASSWORD}"));
    let url_encoded = "Echo%20p%40ss%2Fw0rd%2BSecret";
    let echoes = format!("password {PASSWORD}, basic {basic}, url {url_encoded}");
    let denied = |message: &str| {
        serde_json::json!({"errors": [{"code": "DENIED", "message": message}]}).to_string()
    };
    // The token endpoint answers each repository's scope in its own way,
    // and `login` (no scope) with a 403 that repeats everything.
    let (echoed, denial) = (echoes.clone(), denied(&echoes));
    let straddling = format!("{}{PASSWORD} {basic}", "x".repeat(150));
    let tokens = HostileServer::start(move |request| {
        let scope = |repository: &str| request.target.contains(&format!("echo%2F{repository}%3A"));
        if scope("json") {
            Reply::text(403, &denial)
        } else if scope("text") {
            // The password straddles the 160 characters an error quotes.
            Reply::text(500, &straddling)
        } else if scope("not-json") {
            Reply::text(200, &format!("<html>{echoed}</html>"))
        } else if scope("token") {
            Reply::text(200, &serde_json::json!({ "token": TOKEN }).to_string())
        } else {
            Reply::text(403, &denial)
        }
    });
    // The registry sends clients to that realm, and answers a request with
    // a token by repeating its Authorization header.
    let realm = format!(
        "Bearer realm=\"http://{}/token\",service=\"echo\"",
        tokens.host()
    );
    let registry = HostileServer::start(move |request| match request.header("authorization") {
        None => Reply::status(401).header("WWW-Authenticate", &realm),
        Some(authorization) => Reply::text(403, &denied(&format!("{authorization} is not enough"))),
    });
    let host = registry.host();

    let f = Fixture::new();
    let docker = f.path("docker");
    std::fs::create_dir(&docker).unwrap();
    std::fs::write(
        docker.join("config.json"),
        format!(r#"{{"auths": {{"{host}": {{"auth": "{basic}"}}}}}}"#),
    )
    .unwrap();
    let env = [("DOCKER_CONFIG", docker.to_str().unwrap())];
    let manifest = pinning(
        &f,
        &host,
        &["echo/json", "echo/text", "echo/not-json", "echo/token"],
    );
    let m = manifest.to_str().unwrap();
    let mut shown = Shown::default();
    for verbose in [None, Some("-vv")] {
        let mut args: Vec<&str> = verbose.into_iter().collect();
        args.extend(["pull", "--manifest", m, "--home", "worker"]);
        let output = shown.keep(f.run(&args, &env));
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{err}");
        for said in [
            "the registry answered 403 for the token (`DENIED: password <redacted>, basic <redacted>, url <redacted>`)",
            &format!(
                "the registry answered 500 for the token: `{}<redacted>…`",
                "x".repeat(150)
            ),
            "the token endpoint answered `<html>password <redacted>, basic <redacted>, url <redacted></html>`, not JSON",
            "the registry answered 403 for the manifest (`DENIED: Bearer <redacted> is not enough`)",
        ] {
            assert!(err.contains(said), "`{said}` not in: {err}");
        }

        let mut args: Vec<&str> = verbose.into_iter().collect();
        args.extend(login_as_fleet(&host));
        let output = shown.keep(run_with_stdin(&f, &args, &env, &format!("{PASSWORD}\n")));
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output)
                .contains("(`DENIED: password <redacted>, basic <redacted>, url <redacted>`)"),
            "{}",
            stderr(&output)
        );
    }
    for secret in [PASSWORD, &PASSWORD[..8], &basic, url_encoded, TOKEN] {
        shown.assert_never(secret);
    }
}

/// Whether process `pid` is running (a zombie, or no such process, is not).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name's closing parenthesis.
        (stat.rsplit_once(") ")).is_some_and(|(_, rest)| !rest.starts_with(['Z', 'X']))
    })
}

#[test]
fn a_credential_helper_that_hangs_is_killed_at_the_network_deadline_with_what_it_started() {
    let f = Fixture::new();
    let bin = f.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let started = f.path("started.pid");
    // It starts a child (as a helper's gpg or pinentry), then hangs.
    let helper = bin.join("docker-credential-hangs");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\nsleep 1000 &\necho $! > '{}'\nexec sleep 1000\n",
            started.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let host = "127.0.0.1:9";
    let auth_file = f.write(
        "auth.json",
        &format!(r#"{{"credHelpers": {{"{host}": "hangs"}}}}"#),
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let manifest = pinning(&f, host, &["dsh/hangs"]);
    let env = [
        ("REGISTRY_AUTH_FILE", auth_file.to_str().unwrap()),
        ("PATH", path.as_str()),
        // The helper's deadline is the network deadline when that is shorter.
        ("DSH_ENV_NETWORK_TIMEOUT_SECS", "1"),
    ];
    let pull = [
        "pull",
        "--manifest",
        manifest.to_str().unwrap(),
        "--home",
        "h",
    ];
    let output = f.run(&pull, &env);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        err.contains("credential helper docker-credential-hangs: no answer within 1 s; killed"),
        "{err}"
    );
    let pid = std::fs::read_to_string(&started).unwrap();
    let pid = pid.trim();
    // SIGKILL lands at once, but the kernel ends a process in its own time.
    let gone = (0..500).any(|_| {
        let gone = !running(pid);
        if !gone {
            std::thread::sleep(Duration::from_millis(20));
        }
        gone
    });
    if !gone {
        // Not left behind by this test either.
        let _ = Command::new("kill").args(["-9", pid]).status();
    }
    assert!(gone, "the helper's child {pid} outlived it");
}

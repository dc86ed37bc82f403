//! A real OCI registry for tests: Debian's `docker-registry` (distribution
//! 2.8, installed by `scripts/setup-registry`), serving plain HTTP on
//! 127.0.0.1 on a free port, with no auth (or htpasswd auth:
//! [`TestRegistry::start_with_login`]; or bearer tokens from a token service
//! beside it: [`TestRegistry::start_with_token_auth`]) and its storage in a
//! temporary directory. [`TestRegistry::start`] waits until `GET /v2/` answers; the
//! process is killed when the value drops.
//!
//! Note: distribution answers manifest requests only with an OCI `Accept`
//! header; clients here send one.
//!
//! [`HostileServer`] is the other kind of peer: a registry that lies, stalls
//! and floods, answering as the test says.

mod hostile;
mod token;

pub use hostile::{Body, HostileServer, Reply, Request};
use token::TokenService;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where `scripts/setup-registry` installs the registry.
pub const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";

/// How long a registry may take to answer `/v2/` after it starts.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// A running registry, killed on drop.
pub struct TestRegistry {
    child: Option<Child>,
    address: SocketAddr,
    tokens: Option<TokenService>,
    dir: tempfile::TempDir,
}

/// How a registry asks clients to log in.
enum Auth<'a> {
    None,
    /// HTTP Basic, checked against an htpasswd file.
    Login(&'a str, &'a str),
    /// Bearer tokens from a token service that checks the login.
    Token(&'a str, &'a str),
}

impl TestRegistry {
    /// Starts a registry on 127.0.0.1 on a free port with an empty storage
    /// directory, and waits until it answers. Panics (this is a test
    /// fixture) naming what failed, e.g. that the binary is missing.
    pub fn start() -> Self {
        Self::start_with_auth(Auth::None)
    }

    /// [`TestRegistry::start`], with htpasswd (HTTP Basic) auth for one
    /// user: every request without that user's password gets 401. The
    /// password file is written by apache2-utils' `htpasswd -B` (bcrypt, the
    /// only hash distribution reads), the password on its stdin.
    pub fn start_with_login(username: &str, password: &str) -> Self {
        Self::start_with_auth(Auth::Login(username, password))
    }

    /// [`TestRegistry::start`], with token auth as the big registries have
    /// it: a request without a bearer token gets 401 with a `Bearer`
    /// challenge, and the token service on another port of 127.0.0.1 gives
    /// tokens only to this user, which the registry verifies by their
    /// signature.
    pub fn start_with_token_auth(username: &str, password: &str) -> Self {
        Self::start_with_auth(Auth::Token(username, password))
    }

    /// Every request the token service was sent (none without token auth).
    pub fn token_requests(&self) -> Vec<Request> {
        (self.tokens.as_ref()).map_or_else(Vec::new, TokenService::requests)
    }

    fn start_with_auth(auth: Auth<'_>) -> Self {
        assert!(
            Path::new(REGISTRY_BINARY).exists(),
            "{REGISTRY_BINARY} is missing: run scripts/setup-registry"
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        // A free port, released just before the registry binds it; a race with
        // another process taking it shows as a registry that never answers.
        let address = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port on 127.0.0.1");
        let storage = dir.path().join("storage");
        let config = dir.path().join("config.yml");
        let mut tokens = None;
        let auth = match auth {
            Auth::Login(username, password) => {
                let file = dir.path().join("htpasswd");
                write_htpasswd(&file, username, password);
                format!(
                    "auth:\n  htpasswd:\n    realm: dsh-env-test\n    path: {}\n",
                    file.display()
                )
            }
            Auth::Token(username, password) => {
                let service = TokenService::start(dir.path(), username, password);
                let auth = format!(
                    "auth:\n  token:\n    realm: {}\n    service: {}\n    issuer: {}\n    rootcertbundle: {}\n",
                    service.realm(),
                    token::SERVICE,
                    token::ISSUER,
                    service.certificate().display()
                );
                tokens = Some(service);
                auth
            }
            Auth::None => String::new(),
        };
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n{auth}",
                storage.display()
            ),
        )
        .expect("the registry's config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("a log file");
        let child = Command::new(REGISTRY_BINARY)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log file"))
            .stderr(log)
            .spawn()
            .expect("docker-registry starts");
        let registry = TestRegistry {
            child: Some(child),
            address,
            tokens,
            dir,
        };
        registry.wait_until_ready();
        registry
    }

    /// `127.0.0.1:<port>`, as a reference's registry part.
    pub fn host(&self) -> String {
        self.address.to_string()
    }

    /// The directory the registry keeps its blobs and repositories in.
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// The file the registry stores the blob `sha256:<hex>` in.
    pub fn blob_file(&self, hex: &str) -> PathBuf {
        self.storage()
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Stops the registry now (it is also stopped on drop).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn wait_until_ready(&self) {
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            // 401: up, and asking for the login it was started with.
            if (self.get_v2())
                .is_some_and(|status| status.contains(" 200 ") || status.contains(" 401 "))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default();
        panic!(
            "the registry on {} did not answer within {READY_WITHIN:?}; its log:\n{log}",
            self.address
        );
    }

    /// The status line of `GET /v2/`, if the registry answers.
    fn get_v2(&self) -> Option<String> {
        let mut stream = TcpStream::connect_timeout(&self.address, Duration::from_secs(1)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let request = format!(
            "GET /v2/ HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.address
        );
        stream.write_all(request.as_bytes()).ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        response.lines().next().map(str::to_string)
    }
}

/// Writes `username`'s bcrypt entry to `file` with `htpasswd -iBn`, the
/// password on its stdin (never in its arguments).
fn write_htpasswd(file: &Path, username: &str, password: &str) {
    let mut child = Command::new("htpasswd")
        .args(["-iBn", username])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("htpasswd (apache2-utils) is missing: run scripts/setup-registry");
    let mut stdin = child.stdin.take().expect("htpasswd's stdin");
    stdin
        .write_all(format!("{password}\n").as_bytes())
        .expect("the password to htpasswd");
    drop(stdin);
    let output = child.wait_with_output().expect("htpasswd runs");
    assert!(output.status.success(), "htpasswd failed");
    std::fs::write(file, output.stdout).expect("the htpasswd file");
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

//! The token service of [`crate::TestRegistry::start_with_token_auth`]: the
//! bearer flow that GHCR, ECR, Harbor and Docker Hub use. The registry
//! (distribution's `token` auth) answers 401 with a `Bearer` challenge
//! naming this realm; the client asks here with its Basic login and the
//! `scope` it needs, and gets a JWT that the registry verifies itself:
//! ES256, signed by `openssl` with a key whose self-signed certificate is
//! the registry's `rootcertbundle` and rides in the token's `x5c` header.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

use crate::hostile::{HostileServer, Reply, Request};

/// The `service` the registry names in its challenge, and each token's `aud`.
pub(crate) const SERVICE: &str = "dsh-env-test-registry";
/// Each token's `iss`, which the registry trusts.
pub(crate) const ISSUER: &str = "dsh-env-test-token-service";
/// How long a token lasts.
const TOKEN_SECONDS: u64 = 300;

/// The running token service, and the certificate the registry trusts.
pub(crate) struct TokenService {
    server: HostileServer,
    certificate: PathBuf,
}

impl TokenService {
    /// Makes a P-256 key and its certificate in `dir`, then serves tokens to
    /// `username` with `password` (anyone else gets 401) on 127.0.0.1.
    pub(crate) fn start(dir: &Path, username: &str, password: &str) -> Self {
        let (key, certificate) = (dir.join("token-key.pem"), dir.join("token-cert.pem"));
        let (key_path, certificate_path) = (path(&key), path(&certificate));
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=dsh-env test token service",
                "-keyout",
                key_path,
                "-out",
                certificate_path,
            ],
            None,
        );
        let der = openssl(&["x509", "-outform", "DER", "-in", certificate_path], None);
        let header =
            serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [STANDARD.encode(der)]});
        let header = URL_SAFE_NO_PAD.encode(header.to_string());
        let login = format!(
            "Basic {}",
            STANDARD.encode(format!("{username}:{password}"))
        );
        let username = username.to_string();
        let server = HostileServer::start(move |request| {
            if request.header("authorization") != Some(login.as_str()) {
                return Reply::text(401, r#"{"details":"wrong username or password"}"#);
            }
            let claims = claims(&username, request);
            let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
            let sign = ["dgst", "-sha256", "-sign", path(&key)];
            let signature = openssl(&sign, Some(signed.as_bytes()));
            let token = format!(
                "{signed}.{}",
                URL_SAFE_NO_PAD.encode(raw_signature(&signature))
            );
            let answer = serde_json::json!({"token": token, "expires_in": TOKEN_SECONDS});
            Reply::text(200, &answer.to_string()).header("Content-Type", "application/json")
        });
        TokenService {
            server,
            certificate,
        }
    }

    /// The realm the registry sends clients to.
    pub(crate) fn realm(&self) -> String {
        format!("http://{}/token", self.server.host())
    }

    /// The certificate whose key signs the tokens.
    pub(crate) fn certificate(&self) -> &Path {
        &self.certificate
    }

    /// Every request the service was sent.
    pub(crate) fn requests(&self) -> Vec<Request> {
        self.server.requests()
    }
}

/// A token's claims for `username`, granting each `scope` of the request
/// (`repository:<name>:<actions>`) in full.
fn claims(username: &str, request: &Request) -> serde_json::Value {
    let query = request
        .target
        .split_once('?')
        .map_or("", |(_, query)| query);
    let access: Vec<_> = form_urlencoded::parse(query.as_bytes())
        .filter(|(name, _)| name == "scope")
        .flat_map(|(_, scopes)| {
            let scopes: Vec<String> = scopes.split(' ').map(str::to_string).collect();
            scopes.into_iter()
        })
        .filter_map(|scope| {
            let (kind, rest) = scope.split_once(':')?;
            let (name, actions) = rest.rsplit_once(':')?;
            let actions: Vec<&str> = actions.split(',').collect();
            Some(serde_json::json!({"type": kind, "name": name, "actions": actions}))
        })
        .collect();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_secs();
    serde_json::json!({
        "iss": ISSUER,
        "sub": username,
        "aud": SERVICE,
        "iat": now,
        "nbf": now - 10,
        "exp": now + TOKEN_SECONDS,
        "jti": format!("{now}-{}", request.target.len()),
        "access": access,
    })
}

/// An ECDSA signature as JWS wants it (`r` then `s`, 32 bytes each), from
/// the DER `SEQUENCE { INTEGER r, INTEGER s }` that `openssl dgst` writes.
fn raw_signature(der: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(64);
    // A P-256 signature's SEQUENCE is under 128 bytes: a one-byte length.
    let mut at = 2;
    for _ in 0..2 {
        assert_eq!(der[at], 0x02, "an INTEGER in openssl's signature");
        let len = usize::from(der[at + 1]);
        let integer = &der[at + 2..at + 2 + len];
        // Big-endian, with a leading zero when the top bit is set.
        let integer = &integer[integer.len().saturating_sub(32)..];
        raw.resize(raw.len() + 32 - integer.len(), 0);
        raw.extend_from_slice(integer);
        at += 2 + len;
    }
    raw
}

/// A temporary file's path, as an argument.
fn path(file: &Path) -> &str {
    file.to_str()
        .expect("a temporary directory's path is UTF-8")
}

/// Runs `openssl` with `args`, `input` on its stdin; its stdout.
fn openssl(args: &[&str], input: Option<&[u8]>) -> Vec<u8> {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl runs");
    let mut stdin = child.stdin.take().expect("openssl's stdin");
    stdin
        .write_all(input.unwrap_or_default())
        .expect("openssl reads its input");
    drop(stdin);
    let output = child.wait_with_output().expect("openssl ends");
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

//! Registry credentials where the container tools keep them: the auth files
//! (`$REGISTRY_AUTH_FILE`, podman's `$XDG_RUNTIME_DIR/containers/auth.json`,
//! Docker's `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`), each a
//! Docker `config.json`: `auths` (base64 `user:password` in `auth`, or
//! `username` and `password`), `credHelpers` and `credsStore`, which name a
//! `docker-credential-<name>` helper.
//!
//! Hand-parsed with serde rather than through the `docker_credential` crate:
//! that crate runs a helper with no output cap and no timeout, and its
//! helper error quotes the helper's output, which may hold the secret.
//! Here a file is read under [`MAX_AUTH_FILE_BYTES`], a helper's answer
//! under [`MAX_HELPER_OUTPUT_BYTES`] within [`AuthFiles::helper_timeout`],
//! and no error quotes a file's or a helper's text. A helper runs in a
//! process group of its own, ended when it exits or is killed, so nothing
//! it started (a gpg, a pinentry) outlives it. Every credential found is
//! held by [`crate::secrets`], to be blanked out of whatever is shown.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use dsh_env_support::input::{
    FileError, ReadProblem, block_sigpipe, escape_controls, read_capped, read_regular_text,
};

/// The largest auth file read: one holds a few entries.
pub const MAX_AUTH_FILE_BYTES: u64 = 1 << 20;
/// The most a credential helper may print for one `get`.
pub const MAX_HELPER_OUTPUT_BYTES: u64 = 64 << 10;
/// How long a credential helper may take by default
/// ([`AuthFiles::helper_timeout`]); past it, it is killed with its group.
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

/// A username and password (or token) for one registry. Its `Debug` shows
/// the username only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The username.
    pub username: String,
    /// The password or token: never shown.
    pub secret: String,
    /// Where it was found (a file, or a helper by name), for messages.
    pub source: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("secret", &"<hidden>")
            .field("source", &self.source)
            .finish()
    }
}

/// Why credentials could not be read or written. No variant holds a
/// secret, or a file's or a helper's text.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// An auth file could not be read, or is not a Docker `config.json`.
    #[error("cannot read the auth file {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why (no quoted content).
        reason: String,
    },
    /// An entry's `auth` is not base64 of `user:password`.
    #[error(
        "the auth file {path} has an unusable `auth` for {registry} (not base64 of user:password)"
    )]
    BadAuth {
        /// The file.
        path: String,
        /// The registry.
        registry: String,
    },
    /// A helper name that is not a plain word (it would name another program).
    #[error("the credential helper name `{0}` is not a plain name")]
    HelperName(String),
    /// A credential helper failed, timed out or answered unusably.
    #[error("credential helper docker-credential-{helper}: {reason}")]
    Helper {
        /// The helper's name.
        helper: String,
        /// What went wrong (no quoted output).
        reason: String,
    },
    /// The auth file could not be written.
    #[error("cannot write the auth file {path}: {reason}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// The auth files, in the order they are read: the first that holds an
/// entry, a `credHelpers` entry or a `credsStore` answers for a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthFiles {
    /// The files, most preferred first; a missing one is skipped.
    pub files: Vec<PathBuf>,
    /// Where `login` writes.
    pub login_file: Option<PathBuf>,
    /// How long a credential helper may take; past it, it and everything
    /// in its process group are killed. Default [`HELPER_TIMEOUT`].
    pub helper_timeout: Duration,
}

impl Default for AuthFiles {
    fn default() -> Self {
        AuthFiles {
            files: Vec::new(),
            login_file: None,
            helper_timeout: HELPER_TIMEOUT,
        }
    }
}

impl AuthFiles {
    /// The files the container tools read, from the process's environment:
    /// `$REGISTRY_AUTH_FILE`, `$XDG_RUNTIME_DIR/containers/auth.json`, then
    /// `$DOCKER_CONFIG/config.json` (else `~/.docker/config.json`). `login`
    /// writes `$REGISTRY_AUTH_FILE` when set (as podman does), else the
    /// Docker file.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
        let docker = (var("DOCKER_CONFIG").map(PathBuf::from))
            .or_else(|| var("HOME").map(|home| Path::new(&home).join(".docker")))
            .map(|dir| dir.join("config.json"));
        let explicit = var("REGISTRY_AUTH_FILE").map(PathBuf::from);
        let podman = var("XDG_RUNTIME_DIR").map(|dir| Path::new(&dir).join("containers/auth.json"));
        let files = [explicit.clone(), podman, docker.clone()]
            .into_iter()
            .flatten()
            .collect();
        AuthFiles {
            files,
            login_file: explicit.or(docker),
            helper_timeout: HELPER_TIMEOUT,
        }
    }

    /// The credential for `registry` (`host[:port]`), if any file has one;
    /// one found is held by [`crate::secrets`] from then on.
    pub fn credential(&self, registry: &str) -> Result<Option<Credential>, AuthError> {
        let found = self.find(registry)?;
        if let Some(credential) = &found {
            crate::secrets::hold_credential(credential);
        }
        Ok(found)
    }

    /// The credential for `registry`: the first file that speaks of it answers.
    fn find(&self, registry: &str) -> Result<Option<Credential>, AuthError> {
        for path in &self.files {
            let Some(config) = read_config(path)? else {
                continue;
            };
            let shown = path.display().to_string();
            if let Some(helper) = config.cred_helpers.get(registry) {
                return self.ask_helper(helper, registry);
            }
            if let Some(entry) = config.entry(registry)
                && let Some(credential) = entry.credential(&shown, registry)?
            {
                return Ok(Some(credential));
            }
            if let Some(store) = &config.creds_store {
                return self.ask_helper(store, registry);
            }
        }
        Ok(None)
    }

    /// Stores `credential` for `registry`: with the helper the login file
    /// names for it (`credHelpers`, then `credsStore`), else as `auths`'s
    /// base64 `auth` in the login file, written whole, mode 0600.
    /// Returns where it went.
    pub fn store(&self, registry: &str, credential: &Credential) -> Result<String, AuthError> {
        let path = self.login_file.as_deref().ok_or_else(|| AuthError::Write {
            path: "(none)".into(),
            reason: "neither $REGISTRY_AUTH_FILE, $DOCKER_CONFIG nor $HOME is set".into(),
        })?;
        let shown = path.display().to_string();
        let write_error = |reason: String| AuthError::Write {
            path: shown.clone(),
            reason,
        };
        let text = match read_regular_text(path, MAX_AUTH_FILE_BYTES) {
            Ok(text) => text,
            Err(e) if is_not_found(&e) => "{}".into(),
            Err(e) => return Err(write_error(e.problem.to_string())),
        };
        let mut document: serde_json::Value = serde_json::from_str(&text)
            .ok()
            .filter(serde_json::Value::is_object)
            .ok_or_else(|| write_error("it is not a JSON object".into()))?;
        let config: DockerConfig = serde_json::from_value(document.clone())
            .map_err(|_| write_error("it is not a Docker config.json".into()))?;
        if let Some(helper) = (config.cred_helpers.get(registry)).or(config.creds_store.as_ref()) {
            self.store_with_helper(helper, registry, credential)?;
            return Ok(format!("docker-credential-{helper}"));
        }
        let auth = STANDARD.encode(format!("{}:{}", credential.username, credential.secret));
        let auths = document
            .as_object_mut()
            .expect("checked: an object")
            .entry("auths")
            .or_insert_with(|| serde_json::json!({}));
        if !auths.is_object() {
            *auths = serde_json::json!({});
        }
        auths[registry] = serde_json::json!({ "auth": auth });
        let text = serde_json::to_string_pretty(&document).expect("a JSON value serializes");
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| write_error(e.to_string()))?;
        }
        dsh_env_support::atomic_file::write(path, text + "\n")
            .map_err(|e| write_error(e.to_string()))?;
        // A file that was readable by others before is not left so.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| write_error(e.to_string()))?;
        Ok(shown)
    }
}

/// The parts of a Docker `config.json` read here (the rest is kept as is
/// when one is written).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
    #[serde(default)]
    creds_store: Option<String>,
}

/// One `auths` entry.
#[derive(Debug, Default, serde::Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

impl DockerConfig {
    /// The `auths` entry for `registry`: by its exact key, or a key that is
    /// a URL of that host (`https://host/v1/`, as old Docker wrote).
    fn entry(&self, registry: &str) -> Option<&AuthEntry> {
        self.auths.get(registry).or_else(|| {
            (self.auths.iter())
                .find(|(key, _)| {
                    let host = key
                        .strip_prefix("https://")
                        .or_else(|| key.strip_prefix("http://"))
                        .unwrap_or(key);
                    host.split('/').next() == Some(registry)
                })
                .map(|(_, entry)| entry)
        })
    }
}

impl AuthEntry {
    /// The entry's credential, if it has one.
    fn credential(&self, path: &str, registry: &str) -> Result<Option<Credential>, AuthError> {
        let source = path.to_string();
        if let Some(auth) = self.auth.as_deref().filter(|auth| !auth.is_empty()) {
            let bad = || AuthError::BadAuth {
                path: source.clone(),
                registry: registry.to_string(),
            };
            let decoded = STANDARD.decode(auth.trim()).map_err(|_| bad())?;
            let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
            let (username, secret) = decoded.split_once(':').ok_or_else(bad)?;
            return Ok(Some(Credential {
                username: username.to_string(),
                secret: secret.to_string(),
                source,
            }));
        }
        Ok(match (&self.username, &self.password) {
            (Some(username), Some(password)) => Some(Credential {
                username: username.clone(),
                secret: password.clone(),
                source,
            }),
            _ => None,
        })
    }
}

/// Whether a read failed because the file is not there.
fn is_not_found(error: &FileError) -> bool {
    matches!(&error.problem, ReadProblem::Io(io) if io.kind() == std::io::ErrorKind::NotFound)
}

/// The Docker config at `path`, or `None` when there is no such file.
fn read_config(path: &Path) -> Result<Option<DockerConfig>, AuthError> {
    let shown = || path.display().to_string();
    let text = match read_regular_text(path, MAX_AUTH_FILE_BYTES) {
        Ok(text) => text,
        Err(e) if is_not_found(&e) => return Ok(None),
        Err(e) => {
            return Err(AuthError::File {
                path: shown(),
                reason: e.problem.to_string(),
            });
        }
    };
    // serde_json's message can quote the text, which may hold a secret: only
    // the place is said.
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| AuthError::File {
            path: shown(),
            reason: format!(
                "not a Docker config.json (line {}, column {})",
                e.line(),
                e.column()
            ),
        })
}

/// A helper's answer to `get`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HelperAnswer {
    username: String,
    secret: String,
}

impl AuthFiles {
    /// Asks `docker-credential-<helper> get` for `registry`; a helper that has
    /// none answers `None`.
    fn ask_helper(&self, helper: &str, registry: &str) -> Result<Option<Credential>, AuthError> {
        let fail = |reason: &str| AuthError::Helper {
            helper: escape_controls(helper).into_owned(),
            reason: reason.to_string(),
        };
        let (success, stdout) = self.run_helper(helper, "get", registry.as_bytes())?;
        if !success {
            // The protocol's "none stored" answer; anything else is a failure.
            if String::from_utf8_lossy(&stdout).contains("credentials not found") {
                return Ok(None);
            }
            return Err(fail("`get` failed"));
        }
        let answer: HelperAnswer = serde_json::from_slice(&stdout)
            .map_err(|_| fail("`get` answered something other than {Username, Secret}"))?;
        if answer.username == "<token>" {
            return Err(fail(
                "it holds an identity token, which dsh-env does not use yet",
            ));
        }
        Ok(Some(Credential {
            username: answer.username,
            secret: answer.secret,
            source: format!("docker-credential-{}", escape_controls(helper)),
        }))
    }

    /// Asks `docker-credential-<helper> store` to keep `credential`.
    fn store_with_helper(
        &self,
        helper: &str,
        registry: &str,
        credential: &Credential,
    ) -> Result<(), AuthError> {
        let input = serde_json::json!({
            "ServerURL": registry,
            "Username": credential.username,
            "Secret": credential.secret,
        });
        let (success, _) = self.run_helper(helper, "store", input.to_string().as_bytes())?;
        if success {
            Ok(())
        } else {
            Err(AuthError::Helper {
                helper: escape_controls(helper).into_owned(),
                reason: "`store` failed".into(),
            })
        }
    }

    /// Runs `docker-credential-<helper> <action>` with `input` on its stdin
    /// (secrets go there, never into arguments): whether it succeeded, and at
    /// most [`MAX_HELPER_OUTPUT_BYTES`] of its stdout. It runs in a process
    /// group of its own, killed whole once it exits or past
    /// [`AuthFiles::helper_timeout`]; its stderr is not read.
    fn run_helper(
        &self,
        helper: &str,
        action: &str,
        input: &[u8],
    ) -> Result<(bool, Vec<u8>), AuthError> {
        let plain = !helper.is_empty()
            && (helper.chars()).all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !plain {
            return Err(AuthError::HelperName(escape_controls(helper).into_owned()));
        }
        let fail = |reason: String| AuthError::Helper {
            helper: helper.to_string(),
            reason,
        };
        let mut child = Command::new(format!("docker-credential-{helper}"))
            .arg(action)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| fail(format!("cannot start it: {e}")))?;
        let mut stdin = child.stdin.take().expect("piped");
        let input = input.to_vec();
        // Written apart, so a helper that does not read cannot block this one.
        let writer = std::thread::spawn(move || {
            block_sigpipe();
            let _ = stdin.write_all(&input);
        });
        let mut stdout = child.stdout.take().expect("piped");
        let (sender, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(read_capped(&mut stdout, MAX_HELPER_OUTPUT_BYTES));
        });
        let deadline = Instant::now() + self.helper_timeout;
        let exited = loop {
            match has_exited(&child) {
                Ok(true) => break Ok(()),
                Ok(false) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(false) => {
                    break Err(fail(format!(
                        "no answer within {} s; killed",
                        self.helper_timeout.as_secs_f64()
                    )));
                }
                Err(e) => break Err(fail(e.to_string())),
            }
        };
        // Not reaped yet, so its pid still names its group alone: whatever it
        // left running (or it, at the deadline) ends here, and nothing else.
        kill_group(&child);
        let status = child.wait().map_err(|e| fail(e.to_string()))?;
        exited?;
        let _ = writer.join();
        // What it left behind is gone, so its stdout ends; still, wait no
        // longer than the deadline (a grandchild may have left the group).
        let left = deadline.saturating_duration_since(Instant::now());
        let stdout = (answer.recv_timeout(left))
            .map_err(|_| fail("its output did not end in time".into()))?
            .map_err(|e| fail(format!("its output {e}")))?;
        Ok((status.success(), stdout))
    }
}

/// Whether `child` has exited, without reaping it (`waitid` with
/// `WNOWAIT`): until it is reaped, its pid cannot be reused, so its process
/// group id names only what it started.
fn has_exited(child: &Child) -> std::io::Result<bool> {
    // SAFETY: siginfo_t is plain data, for which all zeroes is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    // SAFETY: waitid writes only into `info`, which lives across the call.
    let done = unsafe { libc::waitid(libc::P_PID, child.id(), &mut info, flags) };
    if done != 0 {
        let error = std::io::Error::last_os_error();
        return match error.kind() {
            std::io::ErrorKind::Interrupted => Ok(false),
            _ => Err(error),
        };
    }
    // SAFETY: waitid filled `info`; its pid is 0 when the child has not exited.
    Ok(unsafe { info.si_pid() } != 0)
}

/// Kills `child`'s process group (started with `process_group(0)`, so its
/// id is the child's pid).
fn kill_group(child: &Child) {
    if let Ok(group) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) with a negative pid signals that process group; it
        // reads no memory of ours.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
}

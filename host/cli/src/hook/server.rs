//! The hook's kept-alive server. A harness starts `dsh-env hook` afresh for
//! every shell call; opening the host (the manifest, the registry, every
//! contributor loaded) is most of what such a process does. So the first
//! call answers in its own process and starts a server; the next calls ask
//! it over a Unix socket, and it answers with the host it keeps.
//!
//! It answers exactly as the asking process would, or not at all:
//!
//! - Its socket is named by a digest of everything an answer can depend on
//!   that is not a file: this executable, the working directory, the
//!   flags and the environment (but `_`, which shells set to the command
//!   they start). A process that differs in any of them reaches another
//!   server (or none), and the server checks the digest it is sent.
//! - Before each answer it finds the manifest again (approval included) and
//!   stats every component and signature file that manifest names; when
//!   any differs from what its host was opened with, it opens the host
//!   again.
//! - The socket is in a directory of the user's home that only the user
//!   may enter (`run/`, mode 0700), and the server answers only its own
//!   user's processes.
//! - Anything that goes wrong on the way (no server, a socket it cannot
//!   use, an answer that does not come) makes the hook answer in its own
//!   process. `DSH_ENV_HOOK_SERVER=off` makes it always do so.
//!
//! It exits after ten idle minutes, or as soon as its socket is gone or
//! replaced.

use std::fs::{self, DirBuilder};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use dsh_env::{HostEnv, Manifest};
use dsh_env_harness::host::Host;
use dsh_env_support::digest::sha256_hex;
use dsh_env_support::file_version::FileVersion;
use dsh_env_support::input::MAX_HOOKS_BYTES;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use super::{Args, Hosts, Reply, respond};
use crate::failure::CliResult;
use crate::harness::Harness;
use crate::home::resolve_home;
use crate::manifests::Approval;
use crate::serve::MAX_IN_FLIGHT;
use crate::setup::{Setup, Uses};

/// Set to `off`, the hook never asks nor starts a server.
pub(crate) const SERVER_VAR: &str = "DSH_ENV_HOOK_SERVER";
/// How long a server waits for a call before it exits.
const IDLE: Duration = Duration::from_secs(600);
/// How often a server checks its socket and its idle time.
const TICK: Duration = Duration::from_secs(1);
/// How long a hook waits for the server's answer before answering itself
/// (a changed manifest makes the server compile), and a server for a
/// hook's request.
const ANSWER_WAIT: Duration = Duration::from_secs(30);
/// The largest request: the hook input and the rest of the request.
const MAX_REQUEST: u64 = MAX_HOOKS_BYTES + 4096;
/// The largest reply a hook reads: the input rewritten, with an overlay
/// (each contributor's output is capped by its limits) and the scrub.
const MAX_REPLY: u64 = 16 << 20;
/// Hook servers one home runs at once (one per environment, directory and
/// flags a hook is started with); past them, hooks answer themselves.
const MAX_SERVERS: usize = 8;

/// Where a hook process reaches the server that would answer as it does.
pub(super) struct Endpoint {
    /// The socket.
    path: PathBuf,
    /// The digest of what an answer depends on, besides files.
    key: String,
}

/// Why a server did not answer.
#[derive(Debug)]
pub(super) enum Unreached {
    /// There is none: the hook starts one.
    Absent,
    /// There is one that did not answer, or answers for another process.
    Failed,
}

/// One hook's question.
#[derive(Serialize, Deserialize)]
struct Request {
    key: String,
    harness: String,
    input: String,
}

/// The server's answer.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Response {
    /// What the hook prints.
    Reply(Reply),
    /// The request's key is not the server's: the hook answers itself.
    Mismatch,
}

impl Endpoint {
    /// The endpoint for this process with `setup`'s flags; none when the
    /// server is switched off, or there is no home with a private `run/`.
    pub(super) fn for_this_process(setup: &Setup) -> Option<Endpoint> {
        if std::env::var_os(SERVER_VAR).is_some_and(|v| v == "off") {
            return None;
        }
        let home = resolve_home(setup.home_flag(), None).ok()?;
        let dir = home.path().join("run");
        private_dir(&dir)?;
        let key = key(setup)?;
        Some(Endpoint {
            path: dir.join(format!("hook-{}.sock", &key[..24])),
            key,
        })
    }

    /// The server's reply to `input`.
    pub(super) fn ask(&self, harness: Harness, input: &str) -> Result<Reply, Unreached> {
        let mut stream = UnixStream::connect(&self.path).map_err(|e| match e.kind() {
            ErrorKind::NotFound | ErrorKind::ConnectionRefused => Unreached::Absent,
            _ => Unreached::Failed,
        })?;
        let request = Request {
            key: self.key.clone(),
            harness: harness.name().to_string(),
            input: input.to_string(),
        };
        let failed = |_| Unreached::Failed;
        stream.set_read_timeout(Some(ANSWER_WAIT)).map_err(failed)?;
        stream
            .set_write_timeout(Some(ANSWER_WAIT))
            .map_err(failed)?;
        // One write: the server wakes once for the request.
        let request = serde_json::to_vec(&request).map_err(|_| Unreached::Failed)?;
        stream.write_all(&request).map_err(failed)?;
        stream.shutdown(std::net::Shutdown::Write).map_err(failed)?;
        let mut text = Vec::new();
        (stream.take(MAX_REPLY).read_to_end(&mut text)).map_err(failed)?;
        match serde_json::from_slice(&text) {
            Ok(Response::Reply(reply)) => Ok(reply),
            _ => Err(Unreached::Failed),
        }
    }

    /// Starts a server for this endpoint, detached: its own process group,
    /// no stdio; unless the home runs [`MAX_SERVERS`] already. Best effort:
    /// without one, hooks answer themselves. Whether it started one.
    pub(super) fn start(&self, harness: Harness, setup: &Setup) -> bool {
        let Some(dir) = self.path.parent() else {
            return false;
        };
        if live_servers(dir) >= MAX_SERVERS {
            return false;
        }
        let Ok(exe) = dsh_env::os::own_image() else {
            return false;
        };
        Command::new(exe)
            .args(["hook", harness.name(), "--serve"])
            .args(setup.args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .is_ok()
    }
}

/// The hook servers listening in `dir`; the socket of one that is gone (a
/// server killed before it could remove it) is removed. A live one takes
/// the connection as a request with no key (and counts it as activity).
fn live_servers(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let sockets = (entries.flatten())
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sock"));
    let mut live = 0;
    for socket in sockets {
        match UnixStream::connect(&socket) {
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                let _ = fs::remove_file(&socket);
            }
            _ => live += 1,
        }
    }
    live
}

/// `dir`, created if absent (the home too, as the registry would), when it
/// is a directory of this user's that nobody else may enter; else none.
fn private_dir(dir: &Path) -> Option<()> {
    match DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    let meta = fs::symlink_metadata(dir).ok()?;
    (meta.is_dir() && meta.uid() == own_uid() && meta.mode() & 0o077 == 0).then_some(())
}

fn own_uid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The digest of what an answer depends on besides the files the server
/// checks: this executable's file, the version, the working directory,
/// `setup`'s flags and the environment (but `_`), sorted.
fn key(setup: &Setup) -> Option<String> {
    let exe = fs::metadata(dsh_env::os::own_image().ok()?).ok()?;
    let cwd = std::env::current_dir().ok()?;
    let mut parts: Vec<Vec<u8>> = vec![
        env!("CARGO_PKG_VERSION").into(),
        format!(
            "{} {} {} {}",
            exe.dev(),
            exe.ino(),
            exe.size(),
            exe.mtime_nsec() + exe.mtime() * 1_000_000_000
        )
        .into(),
        cwd.as_os_str().as_bytes().to_vec(),
    ];
    parts.extend(setup.args().iter().map(|arg| arg.as_bytes().to_vec()));
    // But `_`, which a shell sets to the command it starts (the hook, or a
    // wrapper around it), and which nothing reads.
    let mut env: Vec<(Vec<u8>, Vec<u8>)> = std::env::vars_os()
        .filter(|(name, _)| name != "_")
        .map(|(name, value)| (name.as_bytes().to_vec(), value.as_bytes().to_vec()))
        .collect();
    env.sort();
    for (name, value) in env {
        parts.extend([name, value]);
    }
    // Each part length-prefixed, so that no two lists give the same bytes.
    let mut bytes = Vec::new();
    for part in parts {
        bytes.extend((part.len() as u64).to_le_bytes());
        bytes.extend(part);
    }
    Some(sha256_hex(&bytes))
}

/// What the server's host was opened with: the manifest found, and the
/// files it names as they were.
#[derive(PartialEq)]
struct Opened {
    manifest: Option<Manifest>,
    files: Vec<(PathBuf, Option<FileVersion>)>,
}

impl Opened {
    /// `manifest`, with the component and signature files it names (under
    /// `host_env`) as they are now.
    fn now(manifest: Option<Manifest>, host_env: &HostEnv) -> Opened {
        let specs = (manifest.as_ref())
            .and_then(|manifest| manifest.specs(host_env).ok())
            .unwrap_or_default();
        let files = (specs.iter())
            .flat_map(|spec| {
                let component = match &spec.source {
                    dsh_env::ContributorSource::File(path) => Some(path.clone()),
                    _ => None,
                };
                component.into_iter().chain(spec.signature.clone())
            })
            .map(|path| {
                let version = FileVersion::of(&path);
                (path, version)
            })
            .collect();
        Opened { manifest, files }
    }
}

/// The server's host, kept while what it was opened with stays the same.
pub(super) struct Kept {
    setup: Setup,
    /// This process's environment, which the key says is the hooks' too.
    host_env: HostEnv,
    current: tokio::sync::Mutex<Option<(Opened, Arc<Host>)>>,
}

impl Kept {
    /// The host for the next answer: the kept one, or one opened again
    /// when the manifest found or a file it names changed.
    pub(super) async fn host(&self) -> CliResult<Arc<Host>> {
        let found = self.setup.find(Approval::Required)?;
        let opened = Opened::now(found.manifest.clone(), &self.host_env);
        let mut current = self.current.lock().await;
        if let Some((was, host)) = current.as_ref()
            && *was == opened
        {
            return Ok(Arc::clone(host));
        }
        // The old host goes before the new one loads.
        *current = None;
        // Compiled as the hook's own process would (`--optimize` for
        // Cranelift): a background tier-up would put a compile on the
        // machine beside the harness at every start.
        let uses = Uses {
            prepare_ahead: true,
            ..Uses::once()
        };
        let host = Arc::new(self.setup.open_found(found, uses).await?.host);
        host.prepare_next();
        *current = Some((opened, Arc::clone(&host)));
        Ok(host)
    }
}

impl Kept {
    /// The host kept now, its files not looked at again.
    async fn current_host(&self) -> Option<Arc<Host>> {
        (self.current.lock().await.as_ref()).map(|(_, host)| Arc::clone(host))
    }
}

/// `dsh-env hook <harness> --serve`: serves hooks with this process's
/// endpoint until idle or its socket is gone. Exits 0 when it cannot
/// serve: a hook then answers itself.
pub(super) async fn serve(args: Args) -> CliResult<ExitCode> {
    let Some(endpoint) = Endpoint::for_this_process(&args.setup) else {
        return Ok(ExitCode::SUCCESS);
    };
    // Bound beside, then renamed into place: a hook never sees a socket
    // that does not listen yet, and of two servers started at once the
    // last one renamed serves (the other finds its socket replaced).
    let beside = endpoint
        .path
        .with_extension(format!("{}.new", std::process::id()));
    let _ = fs::remove_file(&beside);
    let Ok(listener) = tokio::net::UnixListener::bind(&beside) else {
        return Ok(ExitCode::SUCCESS);
    };
    let ours = fs::metadata(&beside).map(|meta| meta.ino());
    if ours.is_err() || fs::rename(&beside, &endpoint.path).is_err() {
        let _ = fs::remove_file(&beside);
        return Ok(ExitCode::SUCCESS);
    }
    let ours = ours.ok();
    let still_ours = || {
        fs::symlink_metadata(&endpoint.path)
            .map(|meta| meta.ino())
            .ok()
            == ours
    };
    let kept = Arc::new(Kept {
        setup: args.setup,
        host_env: HostEnv::from_process(),
        current: tokio::sync::Mutex::new(None),
    });
    let key: Arc<str> = endpoint.key.as_str().into();
    // At most MAX_IN_FLIGHT hooks answered at once, as `serve` has it; the
    // others wait in the socket's backlog (and, after ANSWER_WAIT, answer
    // themselves).
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut last = Instant::now();
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            accepted = async {
                (Arc::clone(&slots).acquire_owned().await, listener.accept().await)
            } => {
                let (Ok(slot), Ok((stream, _))) = accepted else { continue };
                last = Instant::now();
                let (kept, key) = (Arc::clone(&kept), Arc::clone(&key));
                tokio::spawn(async move {
                    answer(stream, &kept, &key).await;
                    drop(slot);
                });
            }
            _ = tick.tick() => {
                if slots.available_permits() < MAX_IN_FLIGHT {
                    last = Instant::now();
                }
                if !still_ours() || last.elapsed() > IDLE {
                    break;
                }
            }
        }
    }
    if still_ours() {
        let _ = fs::remove_file(&endpoint.path);
    }
    Ok(ExitCode::SUCCESS)
}

/// Answers one hook on `stream`: only a process of this user, and only one
/// whose key is this server's.
async fn answer(mut stream: tokio::net::UnixStream, kept: &Kept, key: &str) {
    if stream.peer_cred().map(|cred| cred.uid()).ok() != Some(own_uid()) {
        return;
    }
    let mut text = Vec::new();
    // A hook that sends no end is dropped, not waited for while idle.
    let mut limited = (&mut stream).take(MAX_REQUEST);
    let read = limited.read_to_end(&mut text);
    if !matches!(tokio::time::timeout(ANSWER_WAIT, read).await, Ok(Ok(_))) {
        return;
    }
    let request: Option<Request> = serde_json::from_slice(&text).ok();
    let harness = (request.as_ref())
        .filter(|request| request.key == key)
        .and_then(|request| Harness::from_str(&request.harness, false).ok());
    let (Some(request), Some(harness)) = (request, harness) else {
        if let Ok(bytes) = serde_json::to_vec(&Response::Mismatch) {
            let _ = stream.write_all(&bytes).await;
        }
        return;
    };
    let reply = Response::Reply(respond(harness, &request.input, Hosts::Kept(kept)).await);
    if let Ok(bytes) = serde_json::to_vec(&reply) {
        let _ = stream.write_all(&bytes).await;
    }
    drop(stream);
    // The hook has its answer: make the next call's instances now, while
    // the harness runs this one (as `serve` does).
    if let Some(host) = kept.current_host().await {
        host.prepare_next();
    }
}

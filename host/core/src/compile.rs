//! Compiling an untrusted component, bounded: in a child process (the
//! `dsh-env-compile` helper) that limits its own address space and CPU time,
//! under a wall-clock timeout that the parent enforces by killing it.
//!
//! Cranelift's memory and time grow with a function's shape, not with the
//! component's size: a 40 KB component with thousands of locals across deeply
//! nested loops took a compiling host past 1 GiB. In a child, an address-space
//! limit measures the compiler alone (the engine there has no pooling
//! allocator reserving address space), and a runaway compile ends without
//! touching the host. The child compiles with the host's own engine
//! configuration ([`crate::engine::base_config`]) and checks that its engine
//! tag (which includes wasmtime's compatibility hash) is the caller's, so the
//! artifact it writes is one the host's engine accepts.
//!
//! Protocol: the component's bytes on the helper's stdin, the limits and the
//! caller's engine tag as arguments; the artifact on stdout, a one-line error
//! on stderr, and the exit code says which kind of failure it was.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::limits::Limits;
use crate::load_error::LoadErrorKind;
use dsh_env_support::input::{escape_controls, is_executable};

/// The helper's file name, and the argv[0] it is always started with.
pub const HELPER: &str = "dsh-env-compile";

/// The environment variable that names the helper's path.
pub const HELPER_ENV: &str = "DSH_ENV_COMPILER";

/// The helper compiled the component but the component is invalid.
const EXIT_INVALID: i32 = 1;
/// The helper ran out of memory (its address-space limit) and said so.
const EXIT_OUT_OF_MEMORY: i32 = 2;
/// Bad arguments, or a helper built for another engine.
const EXIT_USAGE: i32 = 3;

/// Bytes of the helper's stderr kept for the error message.
const MAX_DIAGNOSTIC_BYTES: u64 = 16 << 10;

/// The compile limits of one load, as the cache records them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Bounds {
    /// Wall-clock time, in milliseconds.
    pub(crate) timeout_ms: u64,
    /// CPU time of all the compiler's threads, in milliseconds (enforced in
    /// whole seconds, rounded up: RLIMIT_CPU's unit).
    pub(crate) cpu_ms: u64,
    /// Address space, in bytes.
    pub(crate) memory_bytes: u64,
}

impl Bounds {
    /// The compile limits in `limits`.
    pub(crate) fn of(limits: &Limits) -> Bounds {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Bounds {
            timeout_ms: ms(limits.compile_timeout),
            cpu_ms: ms(limits.compile_cpu),
            memory_bytes: limits.compile_memory_bytes as u64,
        }
    }

    /// Whether any limit is higher than in `other`, so a compile that
    /// failed under `other` is worth another try.
    pub(crate) fn exceeds(&self, other: &Bounds) -> bool {
        self.timeout_ms > other.timeout_ms
            || self.cpu_ms > other.cpu_ms
            || self.memory_bytes > other.memory_bytes
    }

    /// RLIMIT_CPU for the helper: whole seconds, at least one.
    fn cpu_seconds(&self) -> u64 {
        self.cpu_ms.div_ceil(1000).max(1)
    }

    /// The sentence naming `limit` and its value.
    fn exceeded(&self, limit: Limit) -> String {
        let (name, value) = match limit {
            Limit::Time => ("time", duration(Duration::from_millis(self.timeout_ms))),
            Limit::Cpu => ("CPU", duration(Duration::from_secs(self.cpu_seconds()))),
            Limit::Memory => ("memory", format!("{} MiB", self.memory_bytes >> 20)),
        };
        let field = limit.field();
        format!("compiling exceeded the compile {name} limit of {value} (limits.{field})")
    }
}

/// `1500 ms`, or `60 s` for whole seconds.
fn duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// Which compile limit ended a compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    Time,
    Cpu,
    Memory,
}

impl Limit {
    /// Its name in `[contributor.limits]`.
    fn field(self) -> &'static str {
        match self {
            Limit::Time => "compile_timeout_ms",
            Limit::Cpu => "compile_cpu_ms",
            Limit::Memory => "compile_memory_mib",
        }
    }
}

/// Why a component did not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CompileError {
    /// The component is invalid or the helper could not run: not
    /// remembered, since finding out again costs little, or the cause may
    /// pass (a fixed install).
    Failed(String),
    /// The bytes are no component: not compiled at all.
    NotAComponent(&'static str),
    /// The wall-clock limit ran out: not remembered, since a less loaded
    /// machine may finish in time.
    TimedOut(String),
    /// The CPU or memory limit ran out: remembered by digest, so the same
    /// bytes are not compiled again under the same limits.
    Exceeded {
        /// The limit, by its manifest name.
        limit: &'static str,
        /// The sentence naming it and its value.
        reason: String,
    },
}

impl From<CompileError> for LoadErrorKind {
    fn from(err: CompileError) -> Self {
        match err {
            CompileError::Failed(reason) => LoadErrorKind::Invalid(reason),
            CompileError::NotAComponent(what) => LoadErrorKind::NotAComponent(what),
            CompileError::TimedOut(reason) => LoadErrorKind::CompileLimit {
                limit: Some(Limit::Time.field()),
                reason,
            },
            CompileError::Exceeded { limit, reason } => LoadErrorKind::CompileLimit {
                limit: Some(limit),
                reason,
            },
        }
    }
}

/// The manifest name of a compile limit named in a remembered failure.
pub(crate) fn limit_field(name: &str) -> Option<&'static str> {
    [Limit::Time, Limit::Cpu, Limit::Memory]
        .into_iter()
        .map(Limit::field)
        .find(|field| *field == name)
}

/// Told about every compile (a cache miss), so that a front end can show
/// progress while the library itself writes nothing to a terminal. Given to
/// [`crate::RegistryBuilder::compile_progress`]; called on the loading thread,
/// possibly from several threads at once (a manifest loads in parallel).
pub trait CompileProgress: Send + Sync {
    /// Compiling the component `origin` names (a file or reference as the
    /// caller gave it, not escaped), `bytes` long, begins.
    fn started(&self, origin: &str, bytes: u64);
    /// That compile ended after `elapsed`; `ok` is false when it failed
    /// (the load's error says why).
    fn finished(&self, origin: &str, bytes: u64, elapsed: Duration, ok: bool);
}

/// Finds and runs the compile helper.
#[derive(Default)]
pub(crate) struct Compiler {
    /// A path set by the embedder, tried first.
    explicit: Option<PathBuf>,
    /// Who is told about each compile, if anyone.
    progress: Option<Arc<dyn CompileProgress>>,
    /// One held while the helper runs a compile a load waits for: up to
    /// [`MAX_COMPILES_AT_ONCE`], one per core. wasmtime compiles a
    /// component's functions on every core already; compiles at once
    /// overlap the helpers' serial parts (start, parsing, writing): the
    /// examples' first run took about 0.78 of the time (docs/compiling.md).
    turns: Turns,
    /// The same for background compiles, which must not make a load wait.
    one_in_background: Mutex<()>,
}

/// Compiles a load waits for that run at once, at most (one per core up to
/// this): each holds a helper's peak memory (docs/compiling.md).
pub const MAX_COMPILES_AT_ONCE: usize = 4;

/// A counting semaphore for blocking threads: `limit` turns.
struct Turns {
    limit: usize,
    taken: Mutex<usize>,
    freed: Condvar,
}

impl Default for Turns {
    /// One turn per core, up to [`MAX_COMPILES_AT_ONCE`].
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Turns {
            limit: cores.min(MAX_COMPILES_AT_ONCE),
            taken: Mutex::new(0),
            freed: Condvar::new(),
        }
    }
}

/// A turn of [`Turns`], given back when dropped.
struct Turn<'a>(&'a Turns);

impl Turns {
    /// A turn, once one is free.
    fn take(&self) -> Turn<'_> {
        let taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        let mut taken = (self.freed)
            .wait_while(taken, |taken| *taken >= self.limit)
            .unwrap_or_else(|p| p.into_inner());
        *taken += 1;
        Turn(self)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *self.0.taken.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        self.0.freed.notify_one();
    }
}

/// Whether a caller waits for a compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Urgency {
    /// A load waits for it: reported, at normal CPU priority.
    Now,
    /// Nobody waits (a tier-up): unreported, at the lowest CPU priority, so
    /// it takes the cores only when the caller's commands leave them idle.
    Background,
}

impl std::fmt::Debug for Compiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiler")
            .field("explicit", &self.explicit)
            .finish_non_exhaustive()
    }
}

impl Compiler {
    /// A compiler that runs the helper at `explicit` (else looks for one,
    /// see [`Self::helper`]) and tells `progress` about every compile.
    pub(crate) fn new(
        explicit: Option<PathBuf>,
        progress: Option<Arc<dyn CompileProgress>>,
    ) -> Self {
        Compiler {
            explicit,
            progress,
            ..Compiler::default()
        }
    }

    /// [`Self::compile`], once a turn is free (one per core, see
    /// [`MAX_COMPILES_AT_ONCE`]; a background compile waits for the one
    /// before it), telling the [`CompileProgress`] set, if any, that the component
    /// `origin` names is compiled. The wait is not part of the compile's
    /// wall-clock limit.
    pub(crate) fn compile_reported(
        &self,
        origin: &str,
        bytes: &[u8],
        bounds: &Bounds,
        engine_tag: &str,
        urgency: Urgency,
    ) -> Result<Vec<u8>, CompileError> {
        if urgency == Urgency::Background {
            let _turn = (self.one_in_background.lock()).unwrap_or_else(|p| p.into_inner());
            return self.compile(bytes, bounds, engine_tag, urgency);
        }
        let _turn = self.turns.take();
        let Some(progress) = &self.progress else {
            return self.compile(bytes, bounds, engine_tag, urgency);
        };
        let size = bytes.len() as u64;
        progress.started(origin, size);
        let start = Instant::now();
        let compiled = self.compile(bytes, bounds, engine_tag, urgency);
        progress.finished(origin, size, start.elapsed(), compiled.is_ok());
        compiled
    }

    /// The helper: the path set on the registry, else `$DSH_ENV_COMPILER`,
    /// else beside the running executable, else in its parent directory
    /// (test binaries live in `target/<profile>/deps`), else on `PATH`.
    pub(crate) fn helper(&self) -> Result<PathBuf, String> {
        if let Some(path) = &self.explicit {
            return usable(path.clone(), "set with RegistryBuilder::compiler");
        }
        if let Some(path) = std::env::var_os(HELPER_ENV).filter(|v| !v.is_empty()) {
            return usable(PathBuf::from(path), &format!("named by ${HELPER_ENV}"));
        }
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Ok(exe) = std::env::current_exe() {
            let beside = exe.parent().map(Path::to_path_buf);
            let above = beside
                .as_deref()
                .and_then(Path::parent)
                .map(Path::to_path_buf);
            dirs.extend(beside.into_iter().chain(above));
        }
        let searched = dirs.len();
        dirs.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        if let Some(found) = dirs
            .iter()
            .map(|dir| dir.join(HELPER))
            .find(|path| is_executable(path))
        {
            return Ok(found);
        }
        let looked: Vec<String> = dirs[..searched]
            .iter()
            .map(|dir| dir.display().to_string())
            .collect();
        Err(format!(
            "cannot find the compile helper `{HELPER}` (looked in {}{}and on PATH); \
             install it beside the dsh-env executable or on PATH, or set ${HELPER_ENV} \
             to its path",
            looked.join(", "),
            if looked.is_empty() { "" } else { " " }
        ))
    }

    /// Compiles `bytes` in the helper under `bounds`, for an engine whose
    /// [`crate::engine::engine_tag`] is `engine_tag`, and returns the artifact.
    pub(crate) fn compile(
        &self,
        bytes: &[u8],
        bounds: &Bounds,
        engine_tag: &str,
        urgency: Urgency,
    ) -> Result<Vec<u8>, CompileError> {
        let helper = self.helper().map_err(CompileError::Failed)?;
        let failed = |what: String| {
            CompileError::Failed(format!(
                "the compile helper {} {what}",
                escape_controls(&helper.display().to_string())
            ))
        };
        let mut command = Command::new(&helper);
        // Named as the helper whatever its file is: a front end that serves
        // as its own helper (the `dsh-env` CLI) dispatches on argv[0].
        command.arg0(HELPER);
        if urgency == Urgency::Background {
            command.arg("--nice").arg("19");
        }
        // The helper dies with the thread that waits for it, so a host
        // that exits mid-compile (a tier-up cut short) leaves no compiler
        // running on.
        // SAFETY: `die_with_parent` is async-signal-safe.
        unsafe { command.pre_exec(crate::os::die_with_parent) };
        let mut child = command
            .arg("--memory-bytes")
            .arg(bounds.memory_bytes.to_string())
            .arg("--cpu-seconds")
            .arg(bounds.cpu_seconds().to_string())
            .arg("--engine")
            .arg(engine_tag)
            // Nothing of the host's environment; at most two malloc arenas,
            // so the address-space limit measures memory, not arena
            // reservations (64 MiB per thread otherwise).
            .env_clear()
            .env("MALLOC_ARENA_MAX", "2")
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| failed(format!("could not start: {e}")))?;
        let pid = child.id() as libc::pid_t;
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        // The artifact cannot be larger than the helper's address space.
        let artifact_cap = bounds.memory_bytes;
        let timeout = Duration::from_millis(bounds.timeout_ms);
        let (ended, artifact, diagnostic) = std::thread::scope(|scope| {
            pipe_thread(scope, move || {
                // A helper that died early closes the pipe: nothing to do,
                // and no SIGPIPE for the process (`block_sigpipe`).
                dsh_env_support::input::block_sigpipe();
                if let Some(mut stdin) = stdin {
                    let _ = stdin.write_all(bytes);
                }
            });
            let artifact = pipe_thread(scope, move || read_capped(stdout, artifact_cap));
            let diagnostic = pipe_thread(scope, move || read_capped(stderr, MAX_DIAGNOSTIC_BYTES));
            let ended = wait_with_timeout(pid, timeout);
            let join = |reader: std::thread::ScopedJoinHandle<'_, Captured>| {
                reader.join().unwrap_or(Captured::Overflow)
            };
            (ended, join(artifact), join(diagnostic))
        });
        // The child is reaped (or lost): the handle must not wait for it.
        drop(child);
        let ended = ended.map_err(|e| failed(format!("could not be waited for: {e}")))?;
        let diagnostic = match diagnostic {
            Captured::Whole(text) | Captured::Cut(text) => {
                escape_controls(String::from_utf8_lossy(&text).trim()).into_owned()
            }
            Captured::Overflow => String::new(),
        };
        let status = ended.status;
        let signal = libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status));
        let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        let cpu_spent = ended.cpu >= Duration::from_secs(bounds.cpu_seconds());
        if ended.killed && signal == Some(libc::SIGKILL) {
            // Not remembered: wall time depends on the machine's load.
            return Err(CompileError::TimedOut(bounds.exceeded(Limit::Time)));
        }
        if signal == Some(libc::SIGXCPU) || (signal == Some(libc::SIGKILL) && cpu_spent) {
            return Err(CompileError::Exceeded {
                limit: Limit::Cpu.field(),
                reason: bounds.exceeded(Limit::Cpu),
            });
        }
        // An invalid component's message is not searched: guest-chosen names
        // can appear in it.
        let crashed = !matches!(code, Some(0) | Some(EXIT_INVALID));
        if code == Some(EXIT_OUT_OF_MEMORY) || (crashed && out_of_memory(&diagnostic)) {
            return Err(CompileError::Exceeded {
                limit: Limit::Memory.field(),
                reason: bounds.exceeded(Limit::Memory),
            });
        }
        match (code, artifact) {
            (Some(0), Captured::Whole(artifact)) if !artifact.is_empty() => Ok(artifact),
            (Some(0), _) => Err(failed("wrote no artifact, or one over its cap".into())),
            (Some(EXIT_INVALID), _) => Err(CompileError::Failed(diagnostic)),
            (Some(code), _) => Err(failed(format!("exited with status {code}: {diagnostic}"))),
            (None, _) => Err(failed(format!(
                "was killed by signal {}: {diagnostic}",
                signal.unwrap_or_default()
            ))),
        }
    }
}

/// Runs `pipe` on a thread of `scope` named for it: unnamed, it would carry
/// the name of the thread compiling (an opening thread's, say) and count
/// as one of those.
fn pipe_thread<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    pipe: impl FnOnce() -> T + Send + 'scope,
) -> std::thread::ScopedJoinHandle<'scope, T> {
    std::thread::Builder::new()
        .name("dsh-env-pipe".into())
        .spawn_scoped(scope, pipe)
        // As `Scope::spawn` does: the process is out of threads.
        .expect("a thread for the compile helper's pipe")
}

/// `path` if it is an executable file, else why not, naming where it came from.
fn usable(path: PathBuf, origin: &str) -> Result<PathBuf, String> {
    if is_executable(&path) {
        Ok(path)
    } else {
        Err(format!(
            "the compile helper {} ({origin}) is not an executable file",
            escape_controls(&path.display().to_string())
        ))
    }
}

/// Whether the helper's last words say it ran out of memory: Rust's
/// allocation-failure abort, or an OS allocation error in a panic.
fn out_of_memory(diagnostic: &str) -> bool {
    [
        "memory allocation of",
        "Cannot allocate memory",
        "out of memory",
    ]
    .iter()
    .any(|needle| diagnostic.contains(needle))
}

/// What a capped read got.
enum Captured {
    /// Everything, up to end of file.
    Whole(Vec<u8>),
    /// The first bytes of more than the cap (for a diagnostic).
    Cut(Vec<u8>),
    /// More than the cap, or a failed read.
    Overflow,
}

/// Reads `pipe` to its end, keeping at most `cap` bytes. Past the cap the
/// pipe is closed, so a helper writing more gets EPIPE instead of blocking.
fn read_capped(pipe: Option<impl Read>, cap: u64) -> Captured {
    let Some(pipe) = pipe else {
        return Captured::Overflow;
    };
    let mut kept = Vec::new();
    match pipe.take(cap.saturating_add(1)).read_to_end(&mut kept) {
        Ok(_) if kept.len() as u64 <= cap => Captured::Whole(kept),
        Ok(_) if cap == MAX_DIAGNOSTIC_BYTES => {
            kept.truncate(cap as usize);
            Captured::Cut(kept)
        }
        _ => Captured::Overflow,
    }
}

/// How the helper ended.
struct Ended {
    /// The `wait4` status.
    status: libc::c_int,
    /// CPU time it used (user and system, all threads).
    cpu: Duration,
    /// Whether it was killed because its time was up.
    killed: bool,
}

/// Waits for `pid`, killing it when `timeout` expires.
fn wait_with_timeout(pid: libc::pid_t, timeout: Duration) -> std::io::Result<Ended> {
    let deadline = Instant::now() + timeout;
    // Short naps first: most compiles take tens of milliseconds.
    let mut nap = Duration::from_millis(1);
    loop {
        if let Some((status, cpu)) = wait4(pid, libc::WNOHANG)? {
            return Ok(Ended {
                status,
                cpu,
                killed: false,
            });
        }
        let now = Instant::now();
        if now >= deadline {
            // SAFETY: `pid` is our child and not yet reaped, so it is still
            // this process's, not a reused id.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            loop {
                if let Some((status, cpu)) = wait4(pid, 0)? {
                    return Ok(Ended {
                        status,
                        cpu,
                        killed: true,
                    });
                }
            }
        }
        std::thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// `wait4(pid, flags)`: its status and CPU time once it has ended.
fn wait4(pid: libc::pid_t, flags: libc::c_int) -> std::io::Result<Option<(libc::c_int, Duration)>> {
    let mut status = 0;
    // SAFETY: rusage is plain data; all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: the pointers are to live locals of the right types.
        let reaped = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if reaped == pid {
            let time = |t: libc::timeval| {
                Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
            };
            return Ok(Some((status, time(usage.ru_utime) + time(usage.ru_stime))));
        }
        if reaped == 0 {
            return Ok(None);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// The `dsh-env-compile` helper: sets its own limits, reads a component on
/// stdin, and writes the precompiled artifact to stdout.
///
/// Arguments: `--memory-bytes N --cpu-seconds N --engine TAG [--nice N]`.
pub fn helper_main() -> ExitCode {
    match helper(std::env::args_os().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            // Bare: an invalid component's message is shown as it is.
            eprintln!("{message}");
            ExitCode::from(code as u8)
        }
    }
}

fn helper(args: Vec<OsString>) -> Result<(), (i32, String)> {
    let usage = |message: String| (EXIT_USAGE, message);
    let mut memory_bytes = None;
    let mut cpu_seconds = None;
    let mut engine_tag = None;
    let mut nice = 0;
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let value = args.next().and_then(|v| v.into_string().ok());
        let value = value.ok_or_else(|| usage(format!("{flag:?} needs a value")))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| usage(format!("{flag:?}: {e}")))
        };
        match flag.to_str() {
            Some("--memory-bytes") => memory_bytes = Some(number()?),
            Some("--cpu-seconds") => cpu_seconds = Some(number()?),
            Some("--engine") => engine_tag = Some(value),
            Some("--nice") => nice = number()?,
            _ => return Err(usage(format!("unknown argument {flag:?}"))),
        }
    }
    let (Some(memory_bytes), Some(cpu_seconds), Some(engine_tag)) =
        (memory_bytes, cpu_seconds, engine_tag)
    else {
        return Err(usage(
            "usage: --memory-bytes N --cpu-seconds N --engine TAG".into(),
        ));
    };
    // Limits first, before anything is allocated on the component's behalf.
    // No core dumps: SIGXCPU and abort would write one.
    set_limit(libc::RLIMIT_CORE, 0, 0).map_err(usage)?;
    set_limit(libc::RLIMIT_AS, memory_bytes, memory_bytes).map_err(usage)?;
    // The soft limit sends SIGXCPU; the hard one, a second later, SIGKILL.
    set_limit(libc::RLIMIT_CPU, cpu_seconds, cpu_seconds.saturating_add(1)).map_err(usage)?;
    if nice > 0 {
        // Before the compiler's threads start: on Linux each thread has its
        // own niceness, and new threads inherit their creator's.
        let nice = libc::c_int::try_from(nice.min(19)).unwrap_or(19);
        // SAFETY: plain system call on this process's calling thread.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    }

    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .map_err(|e| oom_or(EXIT_USAGE, format!("cannot read the component: {e}"), &e))?;
    // Either tier's engine: the caller's tag says which.
    let mut engine = None;
    for config in [
        crate::engine::base_config(),
        crate::engine::baseline_config(),
    ] {
        let candidate = wasmtime::Engine::new(&config)
            .map_err(|e| (EXIT_USAGE, format!("engine setup failed: {e:#}")))?;
        if crate::engine::engine_tag(&candidate) == engine_tag {
            engine = Some(candidate);
            break;
        }
    }
    let Some(engine) = engine else {
        return Err(usage(format!(
            "this helper (dsh-env {}) compiles for another engine than its caller; \
             use the {HELPER} built with the caller",
            env!("CARGO_PKG_VERSION")
        )));
    };
    let artifact = engine.precompile_component(&bytes).map_err(|e| {
        let oom = e.chain().any(|cause| {
            cause.is::<wasmtime::OutOfMemory>()
                || cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.raw_os_error() == Some(libc::ENOMEM))
        });
        (
            if oom {
                EXIT_OUT_OF_MEMORY
            } else {
                EXIT_INVALID
            },
            format!("{e:#}"),
        )
    })?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&artifact)
        .and_then(|()| stdout.flush())
        .map_err(|e| usage(format!("cannot write the artifact: {e}")))
}

/// `(EXIT_OUT_OF_MEMORY, message)` for an allocation failure, else `(code, message)`.
fn oom_or(code: i32, message: String, err: &std::io::Error) -> (i32, String) {
    if err.raw_os_error() == Some(libc::ENOMEM) || err.kind() == std::io::ErrorKind::OutOfMemory {
        (EXIT_OUT_OF_MEMORY, message)
    } else {
        (code, message)
    }
}

/// Lowers `resource` to `soft`/`hard`, never above the current hard limit.
fn set_limit(resource: ResourceKind, soft: u64, hard: u64) -> Result<(), String> {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `current` is a live rlimit.
    if unsafe { libc::getrlimit(resource, &mut current) } != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
    }
    let hard = (hard as libc::rlim_t).min(current.rlim_max);
    let limit = libc::rlimit {
        rlim_cur: (soft as libc::rlim_t).min(hard),
        rlim_max: hard,
    };
    // SAFETY: `limit` is a live rlimit.
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        return Err(format!("setrlimit: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
type ResourceKind = libc::__rlimit_resource_t;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
type ResourceKind = libc::c_int;

#[cfg(test)]
mod tests {
    use std::hash::{DefaultHasher, Hash, Hasher};

    use super::{Bounds, duration};
    use crate::limits::Limits;

    /// The helper compiles without the pooling allocator; the host loads
    /// with it. The artifact is accepted only if both hash the same.
    #[test]
    fn the_helper_engine_is_compatible_with_the_pooling_engine() {
        let hash = |engine: &wasmtime::Engine| {
            let mut hasher = DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut hasher);
            hasher.finish()
        };
        let host = crate::engine::build_engine().unwrap().0;
        let helper = wasmtime::Engine::new(&crate::engine::base_config()).unwrap();
        assert_eq!(hash(&host), hash(&helper));
        assert_eq!(
            crate::engine::engine_tag(&host),
            crate::engine::engine_tag(&helper)
        );
    }

    #[test]
    fn limits_are_named_with_their_values() {
        let bounds = Bounds {
            timeout_ms: 1500,
            cpu_ms: 1200,
            memory_bytes: 256 << 20,
        };
        assert_eq!(
            bounds.exceeded(super::Limit::Cpu),
            "compiling exceeded the compile CPU limit of 2 s (limits.compile_cpu_ms)"
        );
        assert!(bounds.exceeded(super::Limit::Memory).contains("256 MiB"));
        assert_eq!(duration(std::time::Duration::from_secs(60)), "60 s");
        assert!(Bounds::of(&Limits::default()).exceeds(&bounds));
    }
}

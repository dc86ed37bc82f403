//! A compiled contributor component and what it is granted.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use sha2::{Digest, Sha256};

use super::contract::Pre;
use crate::limits::Limits;
use crate::load_error::{LoadError, LoadErrorKind};
use crate::signature::{Signer, Trust};
use crate::spec::{Grants, OnError};

/// A compiled contributor component, ready to be instantiated per call.
#[derive(Clone)]
pub struct ContributorComponent {
    pub(super) origin: String,
    /// SHA-256 of the component's bytes.
    pub(super) content: Arc<str>,
    /// Its imports and pre-instance, made at load or on first use.
    pub(super) linked: Arc<Opening>,
    pub(super) config: Arc<BTreeMap<String, String>>,
    pub(super) limits: Limits,
    pub(super) on_error: OnError,
    pub(super) grants: Grants,
    /// Where its manifest entry is, `manifest.toml:LINE`, if it has one.
    pub(super) declared_at: Option<String>,
    pub(super) signer: Signer,
    /// The trust its signature was checked under, by
    /// [`crate::LoadFrom::Spec`]; `None` when nothing was checked.
    pub(super) checked_under: Option<Arc<Trust>>,
    /// Keeps its cache entry from this process's evictions while it lives.
    pub(super) _held: crate::cache::Held,
    /// The engine of the code it was loaded with, whose cache entry its
    /// remembered declaration is filed with (and evicted with).
    pub(super) engine: wasmtime::Engine,
}

impl fmt::Debug for ContributorComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContributorComponent")
            .field("origin", &self.origin)
            .field("limits", &self.limits)
            .field("on_error", &self.on_error)
            .field("grants", &self.grants)
            .finish_non_exhaustive()
    }
}

impl ContributorComponent {
    /// A component just loaded from `origin`: its bytes' SHA-256 `content`,
    /// its code's `opening` on `engine`, the cache entry it `held`, under
    /// `limits`, with no config, grants, signer or failure policy yet.
    pub(crate) fn loaded(
        origin: &str,
        content: String,
        opening: Opening,
        limits: &Limits,
        held: crate::cache::Held,
        engine: &wasmtime::Engine,
    ) -> Self {
        ContributorComponent {
            origin: origin.to_string(),
            content: content.into(),
            linked: Arc::new(opening),
            config: Arc::default(),
            limits: limits.clone(),
            on_error: OnError::default(),
            grants: Grants::default(),
            declared_at: None,
            signer: Signer::Unsigned,
            checked_under: None,
            _held: held,
            engine: engine.clone(),
        }
    }

    /// Where the component came from (a path, or a caller's label).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Which compiler made the code its calls run now, opening its
    /// compiled artifact first if that was left for later (`None` if it
    /// cannot be opened; a call then names why).
    pub fn tier(&self) -> Option<CodeTier> {
        self.linked.get().ok().map(|linked| linked.tier)
    }

    /// The names of the interfaces the component imports, opening its
    /// compiled artifact first if that was left for later (none if it
    /// cannot be opened; a call then names why).
    pub fn imports(&self) -> &[String] {
        self.linked.get().map_or(&[], |linked| &linked.imports)
    }

    /// Its compiled artifact opened, or why it cannot be: at once when it
    /// was compiled or read at load, else now (see [`Opening`]).
    pub(crate) fn open(&self) -> Result<(), LoadError> {
        match self.linked.get() {
            Ok(_) => Ok(()),
            Err(reason) => Err(LoadError::new(
                &self.origin,
                LoadErrorKind::Cache(reason.to_string()),
            )),
        }
    }

    /// The engine whose cache entry it was loaded from.
    pub(crate) fn cache_engine(&self) -> &wasmtime::Engine {
        &self.engine
    }

    /// The handle a background thread opens it through.
    pub(crate) fn opening(&self) -> Arc<Opening> {
        Arc::clone(&self.linked)
    }

    /// Who signed it, as checked when it was loaded from a spec.
    pub fn signer(&self) -> &Signer {
        &self.signer
    }

    /// What it is granted.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// The same component, recorded as signed by `signer`, as `trust`
    /// found when it checked the component's bytes. Crate-private, so that
    /// no caller can pass off an unchecked component as checked.
    pub(crate) fn checked(mut self, signer: Signer, trust: Arc<Trust>) -> Self {
        self.signer = signer;
        self.checked_under = Some(trust);
        self
    }

    /// The trust its signature was checked under, if it was.
    pub(crate) fn checked_under(&self) -> Option<&Arc<Trust>> {
        self.checked_under.as_ref()
    }

    /// The SHA-256 of its bytes (lowercase hex).
    pub fn sha256(&self) -> &str {
        &self.content
    }

    /// The limits its calls run under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The same component with `config` served by the WIT `config.get`.
    pub fn with_config(mut self, config: BTreeMap<String, String>) -> Self {
        self.config = Arc::new(config);
        self
    }

    /// The same component under `limits`.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The same component with `grants`.
    pub fn with_grants(mut self, grants: Grants) -> Self {
        self.grants = grants;
        self
    }

    /// Where its manifest entry is (`manifest.toml:LINE`), if it came from one.
    pub fn declared_at(&self) -> Option<&str> {
        self.declared_at.as_deref()
    }

    /// The same component, written at `declared_at` (`manifest.toml:LINE`).
    pub fn with_declared_at(mut self, declared_at: Option<String>) -> Self {
        self.declared_at = declared_at;
        self
    }

    /// Names everything `declare` can depend on: the component's bytes, its
    /// config, its env grants and its limits (its cwd grant is not in effect
    /// during `declare`, which has no execution).
    pub(crate) fn declaration_key(&self) -> String {
        let inputs = format!(
            "{}\n{:?}\n{:?}\n{:?}",
            self.content, self.config, self.grants.env, self.limits
        );
        Sha256::digest(inputs)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// What a failure of this contributor does to an execution.
    pub fn on_error(&self) -> OnError {
        self.on_error
    }

    /// The same component with failure policy `on_error`.
    pub fn with_on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }
}

/// Which compiler made a component's code (see [`crate::Tiering`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeTier {
    /// Winch: compiled fast, runs slower.
    Baseline,
    /// Cranelift.
    Optimized,
}

impl CodeTier {
    /// Its name in traces: `baseline` or `optimized`.
    pub fn as_str(self) -> &'static str {
        match self {
            CodeTier::Baseline => "baseline",
            CodeTier::Optimized => "optimized",
        }
    }
}

/// What a call needs from a compiled component.
pub(crate) struct Linked {
    /// Instantiates it through the bindings of the contract version it targets.
    pub(super) pre: Pre,
    /// The names of the interfaces it imports.
    pub(super) imports: Arc<[String]>,
    /// Which compiler made the code.
    pub(super) tier: CodeTier,
    /// Keeps the artifact's cache entry from this process's evictions, when
    /// it is not the entry the component was loaded from (a tier-up's).
    pub(super) _held: Option<crate::cache::Held>,
}

impl Linked {
    /// The same, keeping `held` (a tier-up's cache entry) from evictions.
    pub(crate) fn holding(mut self, held: crate::cache::Held) -> Self {
        self._held = Some(held);
        self
    }
}

/// Makes a component's [`Linked`] parts.
pub(crate) type Open = Box<dyn FnOnce() -> Result<Linked, String> + Send>;

/// Threads [`Opening::in_background`] runs at once, in a process.
pub const MAX_OPENING_THREADS: usize = 4;

/// A component's [`Linked`] parts: made at load, or, for an artifact the
/// cache vouched for by its seal, by the first caller that needs them or by
/// the thread [`Opening::in_background`] starts after registration.
/// Deserializing the artifacts was most of a warm start-up (BENCHMARKS.md),
/// and a harness has seconds before its first call.
pub(crate) struct Opening {
    linked: OnceLock<Result<Linked, String>>,
    open: Mutex<Option<Open>>,
    /// Optimized parts, once a tier-up has made them: used instead of
    /// `linked` from then on.
    optimized: OnceLock<Linked>,
    /// Makes the optimized parts, until the tier-up thread takes it.
    tier_up: Mutex<Option<Open>>,
}

/// Openings whose tier-up waits, oldest first, and whether a thread runs them.
static TIER_UPS: Mutex<(VecDeque<Weak<Opening>>, bool)> = Mutex::new((VecDeque::new(), false));

impl Opening {
    /// Parts made already.
    pub(crate) fn ready(linked: Linked) -> Self {
        Self::tiered(linked, None)
    }

    /// Parts made already, and what makes better ones in the background
    /// ([`Opening::in_background`]), if anything.
    pub(crate) fn tiered(linked: Linked, tier_up: Option<Open>) -> Self {
        Opening {
            linked: OnceLock::from(Ok(linked)),
            open: Mutex::new(None),
            optimized: OnceLock::new(),
            tier_up: Mutex::new(tier_up),
        }
    }

    /// Parts `open` makes when first needed.
    pub(crate) fn deferred(open: Open) -> Self {
        Opening {
            linked: OnceLock::new(),
            open: Mutex::new(Some(open)),
            optimized: OnceLock::new(),
            tier_up: Mutex::new(None),
        }
    }

    /// The parts, or why they cannot be made. A caller that arrives while
    /// another thread makes them waits for that thread (a few milliseconds
    /// for the largest examples).
    pub(super) fn get(&self) -> Result<&Linked, &str> {
        if let Some(optimized) = self.optimized.get() {
            return Ok(optimized);
        }
        self.linked
            .get_or_init(|| {
                let open = self.open.lock().unwrap_or_else(|p| p.into_inner()).take();
                match open {
                    Some(open) => open(),
                    None => Err("opening its artifact failed before".into()),
                }
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// Whether the parts are made (or known not to be makeable).
    fn is_settled(&self) -> bool {
        self.linked.get().is_some()
    }

    /// Whether a tier-up waits to be run.
    fn tier_up_waits(&self) -> bool {
        (self.tier_up.lock())
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Runs the tier-up, if it still waits, and uses its parts from then on.
    fn tier_up(&self) {
        let tier_up = (self.tier_up.lock())
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match tier_up.map(|tier_up| tier_up()) {
            Some(Ok(optimized)) => {
                let _ = self.optimized.set(optimized);
            }
            // The baseline code keeps serving its calls.
            Some(Err(reason)) => tracing::warn!("cannot optimize a contributor: {reason}"),
            None => {}
        }
    }

    /// Runs the tier-ups of `openings` on one thread for the process, one
    /// compile after another, oldest first. A component dropped before its
    /// turn is skipped.
    fn tier_up_in_background(openings: &[Arc<Opening>]) {
        let mut queue = TIER_UPS.lock().unwrap_or_else(|p| p.into_inner());
        let waiting = openings.iter().filter(|o| o.tier_up_waits());
        queue.0.extend(waiting.map(Arc::downgrade));
        if queue.1 || queue.0.is_empty() {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("dsh-env-tier-up".into())
            .spawn(|| {
                loop {
                    let next = {
                        let mut queue = TIER_UPS.lock().unwrap_or_else(|p| p.into_inner());
                        let next = queue.0.pop_front();
                        if next.is_none() {
                            queue.1 = false;
                        }
                        next
                    };
                    let Some(next) = next else { return };
                    if let Some(opening) = next.upgrade() {
                        opening.tier_up();
                    }
                }
            });
        match spawned {
            Ok(_) => queue.1 = true,
            // The baseline code serves every call.
            Err(err) => tracing::warn!("cannot start a thread to optimize contributors: {err}"),
        }
    }

    /// Opens every one of `openings` not opened yet on one thread of its
    /// own, so the first call finds them ready, and queues their tier-ups
    /// (see [`Opening::tiered`]). At most [`MAX_OPENING_THREADS`] opening
    /// threads run at once in a process, however fast registrations come;
    /// past that, each first call opens its component.
    pub(crate) fn in_background(openings: Vec<Arc<Opening>>) {
        // The threads started, joined once finished: a thread that has
        // returned may still exist for a moment, and joining it waits for
        // that, so the bound holds for the threads that exist.
        static RUNNING: Mutex<Vec<std::thread::JoinHandle<()>>> = Mutex::new(Vec::new());
        Self::tier_up_in_background(&openings);
        let pending: Vec<_> = openings.into_iter().filter(|o| !o.is_settled()).collect();
        if pending.is_empty() {
            return;
        }
        let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        let (finished, alive) = std::mem::take(&mut *running)
            .into_iter()
            .partition::<Vec<_>, _>(|thread| thread.is_finished());
        *running = alive;
        for thread in finished {
            let _ = thread.join();
        }
        if running.len() >= MAX_OPENING_THREADS {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("dsh-env-open".into())
            .spawn(move || {
                for opening in pending {
                    let _ = opening.get();
                }
            });
        match spawned {
            Ok(thread) => running.push(thread),
            // The first call that needs each one opens it instead.
            Err(err) => tracing::warn!("cannot start a thread to open artifacts: {err}"),
        }
    }
}

/// Where a component's bytes come from.
#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    /// A file, which the cache may map without reading.
    File(&'a std::path::Path),
    /// Bytes in memory.
    Bytes(&'a [u8]),
}

/// Whether `bytes` carries the component-model layer in its wasm header.
pub(crate) fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [0x01, 0x00]
}

/// Names what non-component bytes are, for the load error.
pub(crate) fn not_a_component(bytes: &[u8]) -> &'static str {
    if bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [0x01, 0, 0, 0] {
        "this is a core wasm module, not a component (componentize it for dsh:env/contributor)"
    } else {
        "not a WebAssembly component (bad magic header)"
    }
}

//! The process's epoch ticker: one thread advances every engine's epoch
//! each [`EPOCH_TICK`] while a guest may run, and sleeps without a timer
//! once none has run for [`IDLE_TICKS`] ticks. An idle embedder (a harness
//! between tool calls) is then never woken by it, where a free-running
//! ticker woke it 200 times a second.
//!
//! Every future that runs guest code holds a [`GuestRunning`] for as long as
//! it lives, so the ticker runs whenever a guest can spin: a busy guest
//! yields from its third tick on and traps when its deadline's ticks are
//! spent (`sandbox::guest::arm`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, LazyLock, Mutex};
use std::time::Duration;

use wasmtime::{Engine, EngineWeak};

/// How often the epoch advances; deadlines are accurate to about this much.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The epoch tick at which a guest first yields (counted from its call's
/// start; the sandbox resumes that yield within the same poll, so the next
/// tick is the one that hands the thread back: 10-15 ms in). A call that a
/// busy machine stretches past 5 ms then still finishes in one poll, rather
/// than letting the callers queued behind it start more instances, each in
/// a pool slot of its own that keeps the pages it touched (the bench's RSS
/// after its burst, against the first yield at the first tick:
/// BENCHMARKS.md).
pub const FIRST_YIELD_TICK: u64 = 2;

/// Epoch ticks that cover `deadline`, rounded up, plus one for the partial tick.
pub fn deadline_ticks(deadline: Duration) -> u64 {
    let tick = EPOCH_TICK.as_nanos();
    (deadline.as_nanos().div_ceil(tick) as u64).saturating_add(1)
}

/// Ticks with no guest running after which the ticker parks: long enough
/// that back-to-back calls never wait for it to wake.
pub const IDLE_TICKS: u32 = 20;

/// The ticker's state, shared by its thread and every guest future.
struct Ticker {
    /// The engines whose epochs advance; dropped engines are pruned.
    engines: Mutex<Vec<EngineWeak>>,
    /// Guest futures alive now.
    running: AtomicUsize,
    /// Set (under `park`) while the thread waits for a guest.
    parked: AtomicBool,
    /// Held while parking and while waking, so no wake-up is lost.
    park: Mutex<()>,
    /// Where the parked thread waits.
    wake: Condvar,
    /// Whether the thread is running.
    started: Mutex<bool>,
}

static TICKER: LazyLock<Ticker> = LazyLock::new(|| Ticker {
    engines: Mutex::new(Vec::new()),
    running: AtomicUsize::new(0),
    parked: AtomicBool::new(false),
    park: Mutex::new(()),
    wake: Condvar::new(),
    started: Mutex::new(false),
});

/// Advances `engine`'s epoch from now on, until the engine is dropped;
/// starts the ticker's thread the first time. Without that thread a guest
/// that spins would never yield nor trap, so an engine must not be used
/// when it cannot start.
pub(crate) fn start_ticking(engine: &Engine) -> std::io::Result<()> {
    let mut started = TICKER.started.lock().unwrap_or_else(|p| p.into_inner());
    if !*started {
        (std::thread::Builder::new().name("dsh-env-epoch".into())).spawn(|| TICKER.run())?;
        *started = true;
    }
    drop(started);
    let mut engines = TICKER.engines.lock().unwrap_or_else(|p| p.into_inner());
    // Pruned here too, so a host that makes engines while idle keeps no more
    // than are alive.
    engines.retain(|weak| weak.upgrade().is_some());
    engines.push(engine.weak());
    Ok(())
}

/// Held by a future that runs guest code: while any is alive, the epoch
/// advances.
#[must_use = "the epoch advances only while this is held"]
pub(crate) struct GuestRunning(());

/// Marks a guest as running, waking the ticker if it has parked.
pub(crate) fn guest_running() -> GuestRunning {
    TICKER.running.fetch_add(1, SeqCst);
    // Dekker with `park`: the ticker sets `parked` before it reads
    // `running`, and this reads `parked` after raising `running`, so one of
    // the two sees the other. Taking the lock waits until the ticker waits.
    if TICKER.parked.load(SeqCst) {
        let _parked = TICKER.park.lock().unwrap_or_else(|p| p.into_inner());
        TICKER.wake.notify_one();
    }
    GuestRunning(())
}

impl Drop for GuestRunning {
    fn drop(&mut self) {
        TICKER.running.fetch_sub(1, SeqCst);
    }
}

impl Ticker {
    fn run(&self) {
        let mut idle = 0;
        loop {
            std::thread::sleep(EPOCH_TICK);
            (self.engines.lock().unwrap_or_else(|p| p.into_inner())).retain(|weak| {
                weak.upgrade()
                    .map(|engine| engine.increment_epoch())
                    .is_some()
            });
            if self.running.load(SeqCst) > 0 {
                idle = 0;
                continue;
            }
            idle += 1;
            if idle >= IDLE_TICKS {
                self.park();
                idle = 0;
            }
        }
    }

    /// Waits, without a timer, until a guest runs.
    fn park(&self) {
        let mut guard = self.park.lock().unwrap_or_else(|p| p.into_inner());
        self.parked.store(true, SeqCst);
        while self.running.load(SeqCst) == 0 {
            guard = self.wake.wait(guard).unwrap_or_else(|p| p.into_inner());
        }
        self.parked.store(false, SeqCst);
    }
}

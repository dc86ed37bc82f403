//! The thread that makes a host's next instances ahead of its calls, at a
//! lower priority than the threads that ask for them. On a runtime worker,
//! the wake-up preempted the thread that asked: with the six examples, a
//! Node.js event loop lost 270 µs at the median each time it asked, and
//! the preparation competed with the command it runs beside for the cores
//! (BENCHMARKS.md, "Instances made below the caller's priority").

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use dsh_env::Registry;

/// How far below its callers the preparing thread runs: Linux's nice value,
/// which is per thread there. At 10 it still gets about a tenth of a core
/// that others keep busy, so a loaded machine slows preparations down
/// rather than stopping them; a call that finds none made makes its own.
#[cfg(target_os = "linux")]
const NICENESS: libc::c_int = 10;

/// One preparation at a time, on a thread of its own, started at the first
/// request and ended when the preparer is dropped.
#[derive(Default)]
pub(crate) struct Preparer {
    state: Arc<Mutex<State>>,
    /// Wakes the thread, set at the first request; `None` if the system
    /// refused a thread then (calls make their own instances).
    wake: OnceLock<Option<Sender<()>>>,
}

/// Whether a preparation runs, and whether a request came while it ran.
#[derive(Default)]
struct State {
    running: bool,
    again: bool,
}

/// The state, locked: two flags are whole after any panic, so a poisoned
/// lock is used as is.
fn locked(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Preparer {
    /// Makes `registry`'s next instances on the preparing thread, unless a
    /// preparation is running: that one then goes round once more when it
    /// ends, since it may have passed the contributor whose instance the
    /// request's call took (a request dropped instead left it with nothing
    /// made and nothing making it; the bench stopped on it).
    pub(crate) fn request(&self, registry: &Registry) {
        {
            let mut state = locked(&self.state);
            if state.running {
                state.again = true;
                return;
            }
            state.running = true;
        }
        let wake = self.wake.get_or_init(|| self.start(registry.clone()));
        let woken = wake.as_ref().is_some_and(|wake| wake.send(()).is_ok());
        if !woken {
            locked(&self.state).running = false;
        }
    }

    /// The preparing thread, with a runtime of its own for the deadlines
    /// (a caller's runtime may be gone before a preparation ends), or
    /// `None` if the system refuses one.
    fn start(&self, registry: Registry) -> Option<Sender<()>> {
        let runtime = (tokio::runtime::Builder::new_current_thread())
            .enable_time()
            .build()
            .ok()?;
        let (wake, woken) = mpsc::channel::<()>();
        let shared = Arc::clone(&self.state);
        let thread = std::thread::Builder::new().name("dsh-env-prepare".to_string());
        let spawned = thread.spawn(move || {
            lower_priority();
            while woken.recv().is_ok() {
                loop {
                    runtime.block_on(registry.prepare());
                    let mut state = locked(&shared);
                    if !std::mem::take(&mut state.again) {
                        state.running = false;
                        break;
                    }
                }
            }
        });
        spawned.ok().map(|_| wake)
    }
}

/// Lowers the calling thread's priority by [`NICENESS`]; where that fails,
/// it runs as its callers do.
#[cfg(target_os = "linux")]
fn lower_priority() {
    // SAFETY: gettid and setpriority take and return plain integers; with
    // `PRIO_PROCESS` and a thread id, Linux sets that thread's nice value.
    unsafe {
        let tid = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, NICENESS);
    }
}

/// Elsewhere the same call would lower the whole process: the thread runs
/// as its callers do.
#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

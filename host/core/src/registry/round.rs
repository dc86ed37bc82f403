//! Resolving contributors for one call: each one's call in its span, and a
//! collect's round of them, resolved in name order by the
//! caller and, when two components' calls lately took long ([`HEAVY`]),
//! by a helper task on another of the runtime's workers. Each takes the
//! next contributor no one has taken, so a helper that starts late takes fewer, and one that never
//! starts (one core, a busy runtime) takes none: the round is never slower
//! than the caller alone by more than the helper's spawn.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::Either;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Notify;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::keys::DshKey;
use crate::limits::Phase;
use crate::sandbox::{Call, CallTrace, CodeTier, GuestFailure, Prepared};
use crate::spec::OnError;

use super::error::{ContributorError, FailureCause, KeysNote};
use super::state::{Entry, Registry, Resolver};

/// A component whose recent calls took this long is worth a helper when
/// another one is too: waking a worker and then waiting for its last
/// contributor cost the caller 15-20 µs on the bench's machine. Spawned by
/// a sum of the calls' times instead (past 100 µs, then 200 µs), a helper
/// made eight Rust contributors of 4-25 µs each slower; the six examples'
/// Python and JavaScript runtimes take 80 µs and more each, and run side by
/// side (BENCHMARKS.md).
const HEAVY: Duration = Duration::from_micros(50);

/// One contributor's checked pairs or failure, and what its call showed
/// of itself when traced.
pub(super) type Outcome = (
    Result<Vec<(DshKey, String)>, ContributorError>,
    Option<CallTrace>,
);

/// Whether a failure ends a round.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// A failure under `on_error = "fail"` ends it: no contributor after it
    /// in name order is started (one overlay, whose first failure fails it).
    AtFailure,
    /// Every contributor runs (each alone: a failure is only its own).
    Never,
}

/// What the caller and the helper share.
struct Round {
    registry: Registry,
    entries: Vec<Arc<Entry>>,
    call: Call,
    traced: bool,
    stop: Stop,
    /// The next contributor to take, by index in name order.
    next: AtomicUsize,
    /// The first contributor whose failure ends the round (`usize::MAX`:
    /// none so far); contributors after it are not started.
    stop_at: AtomicUsize,
    outcomes: Mutex<Vec<Option<Outcome>>>,
    /// Told each time an outcome is put.
    put: Notify,
}

impl Registry {
    /// Resolves `snapshot`'s contributors for `call`, in name order, side by
    /// side on two threads when two components' calls lately took long
    /// and the runtime has workers; then each one's outcome, in name order, up to
    /// and including the first failure under `on_error = "fail"` when `stop`
    /// says so (the ones after it are `None`).
    pub(super) async fn resolve_round(
        &self,
        snapshot: &BTreeMap<String, Arc<Entry>>,
        call: Call,
        traced: bool,
        stop: Stop,
    ) -> Vec<Option<Outcome>> {
        let entries: Vec<Arc<Entry>> = snapshot.values().cloned().collect();
        // The components whose calls lately took long.
        let heavy = (entries.iter())
            .filter(|entry| match &entry.resolver {
                Resolver::Wasm(wasm) => wasm.cost.expected() >= HEAVY,
                Resolver::Native(_) => false,
            })
            .count();
        let round = Arc::new(Round {
            registry: self.clone(),
            outcomes: Mutex::new((0..entries.len()).map(|_| None).collect()),
            entries,
            call,
            traced,
            stop,
            next: AtomicUsize::new(0),
            stop_at: AtomicUsize::new(usize::MAX),
            put: Notify::new(),
        });
        // A current-thread runtime would run the helper only when the caller
        // waits, and a guest's call rarely waits: nothing to gain there.
        let workers = Handle::try_current()
            .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::MultiThread);
        let helped = heavy >= 2 && workers;
        if helped {
            let helper = Arc::clone(&round);
            // Its contributors' spans are children of the caller's.
            let work = async move { helper.work().await };
            tokio::spawn(in_span(Span::current(), work, |_, _| ()));
        }
        round.work().await;
        if helped {
            round.finished().await;
        }
        let mut outcomes = std::mem::take(&mut *round.outcomes());
        for late in outcomes.iter_mut().skip(round.end()) {
            // Taken by the helper after the failure that ended the round.
            *late = None;
        }
        outcomes
    }

    /// One contributor's checked pairs for `call`'s execution, in a fresh
    /// instance (or the one made ahead), in a `contributor` span that names
    /// its call, code tier and outcome; `trace` keeps what the call showed,
    /// if given.
    pub(super) fn resolve_entry<'s>(
        &'s self,
        entry: &'s Entry,
        call: &'s Call,
        trace: Option<&'s mut CallTrace>,
    ) -> impl Future<Output = Result<Vec<(DshKey, String)>, ContributorError>> + 's {
        let execution = call.execution();
        let span = tracing::info_span!(
            "contributor",
            call_id = execution.call_id.as_str(),
            contributor = entry.declaration.name(),
            phase = %Phase::Resolve,
            tier = Empty,
            instance = Empty,
            outcome = Empty,
            failure = Empty,
        );
        let on_error = entry.on_error;
        let resolve = self.resolve_checked(entry, call, trace);
        in_span(span, resolve, move |span, result| {
            let Err(err) = result else {
                span.record("outcome", "ok");
                return;
            };
            let kind = err.cause.rule();
            span.record("failure", kind);
            match on_error {
                OnError::Omit => span.record("outcome", "omitted"),
                OnError::Fail => span.record("outcome", kind),
            };
        })
    }

    /// The work of [`Registry::resolve_entry`], inside its span.
    async fn resolve_checked(
        &self,
        entry: &Entry,
        call: &Call,
        trace: Option<&mut CallTrace>,
    ) -> Result<Vec<(DshKey, String)>, ContributorError> {
        let execution = call.execution();
        let fail = |cause: FailureCause| ContributorError {
            contributor: entry.declaration.name().to_string(),
            phase: Phase::Resolve,
            cause,
            keys: KeysNote(entry.declaration.key_list()),
        };
        // The contributor's span when a subscriber listens to it, else none.
        let span = Span::current();
        let pairs = match &entry.resolver {
            Resolver::Wasm(wasm) => {
                let (name, mut prepared) = (entry.declaration.name(), wasm.ready().take());
                let sandbox = &self.inner.runtime.sandbox;
                if wasm.component.grants().cwd_read {
                    let cwd = execution.agent_cwd();
                    let mut last = wasm.last_cwd();
                    if last.as_deref() != cwd {
                        *last = cwd.map(str::to_string);
                    }
                    drop(last);
                    if let Some(other) = prepared.take_if(|prepared| !prepared.fits(execution)) {
                        sandbox.discard(other);
                    }
                }
                if !span.is_disabled() {
                    // The code the instance was made from; opening the
                    // component's artifact is what the call does first.
                    let tier =
                        (prepared.as_ref().map(Prepared::tier)).or_else(|| wasm.component.tier());
                    span.record("tier", tier.map(CodeTier::as_str));
                    let made = if prepared.is_some() {
                        "ahead"
                    } else {
                        "at-call"
                    };
                    span.record("instance", made);
                }
                (sandbox.resolve(&wasm.component, name, call, prepared, trace)).await
            }
            Resolver::Native(native) => {
                span.record("tier", "native");
                native.resolve(execution).map_err(GuestFailure::GuestError)
            }
        };
        pairs
            .map_err(FailureCause::from)
            .and_then(|pairs| {
                (entry.declaration)
                    .check_output(pairs, &entry.limits)
                    .map_err(FailureCause::from)
            })
            .map_err(fail)
    }
}

impl Round {
    /// Resolves contributors no one has taken, until none is left or a
    /// failure has ended the round.
    async fn work(&self) {
        loop {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            if index >= self.end() {
                return;
            }
            let entry = &self.entries[index];
            let mut trace = trace_for(entry, self.traced);
            let started = Instant::now();
            let resolved = (self.registry)
                .resolve_entry(entry, &self.call, trace.as_mut())
                .await;
            if let Resolver::Wasm(wasm) = &entry.resolver {
                wasm.cost.record(started.elapsed());
            }
            if resolved.is_err() && self.stop == Stop::AtFailure && entry.on_error == OnError::Fail
            {
                self.stop_at.fetch_min(index, Ordering::Relaxed);
            }
            // Gone once the caller has taken them (a contributor the helper
            // took after the failure that ended the round).
            if let Some(slot) = self.outcomes().get_mut(index) {
                *slot = Some((resolved, trace));
            }
            self.put.notify_waiters();
        }
    }

    /// How many contributors, from the first in name order, the round
    /// resolves: all of them, or up to and including the failure that ended it.
    fn end(&self) -> usize {
        let stop_at = self.stop_at.load(Ordering::Relaxed);
        self.entries.len().min(stop_at.saturating_add(1))
    }

    /// Waits until each contributor the round resolves has its outcome (the
    /// helper may still be running one when the caller runs out).
    async fn finished(&self) {
        loop {
            let put = self.put.notified();
            let mut put = std::pin::pin!(put);
            // Registered before the check, so a put in between still wakes it.
            put.as_mut().enable();
            let end = self.end();
            if self.outcomes()[..end].iter().all(Option::is_some) {
                return;
            }
            put.await;
        }
    }

    /// The outcomes, locked: a panic while one was put cannot leave the
    /// vector half-changed, so a poisoned one is used as is.
    fn outcomes(&self) -> std::sync::MutexGuard<'_, Vec<Option<Outcome>>> {
        self.outcomes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A trace to fill for `entry`'s call, when `traced` and it is a WASM
/// contributor (a native one shows nothing of itself).
pub(super) fn trace_for(entry: &Entry, traced: bool) -> Option<CallTrace> {
    (traced && matches!(entry.resolver, Resolver::Wasm(_))).then(CallTrace::default)
}

/// `future` inside `span`, then `record` of its output on the span, when a
/// subscriber listens to it; otherwise `future` as it is, since
/// `instrument` would enter and leave even a disabled span at every poll
/// (the bench's 1-contributor row, BENCHMARKS.md).
pub(super) fn in_span<F: Future>(
    span: Span,
    future: F,
    record: impl FnOnce(&Span, &F::Output),
) -> impl Future<Output = F::Output> {
    if span.is_disabled() {
        return Either::Left(future);
    }
    Either::Right(async move {
        let output = future.instrument(span.clone()).await;
        record(&span, &output);
        output
    })
}

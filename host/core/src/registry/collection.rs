//! Collection: one execution's overlay, from the built-ins and every
//! contributor's checked pairs, and the instances made ahead of calls.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::declaration::check_value;
use crate::execution::ToolExecution;
use crate::keys::{BUILTIN_OWNER, DSH_HOME, DSH_SESSION_ID, DSH_SHELL, DshKey};
use crate::limits::{Limits, Phase};
use crate::overlay::Overlay;
use crate::sandbox::{Call, CallTrace, Preparation};
use crate::spec::OnError;
use tracing::field::Empty;

use super::error::{ContributorError, KeysNote};
use super::round::{Outcome, Stop, in_span, trace_for};
use super::state::{Entry, Registry, Resolver};

/// An overlay, and the contributors left out of it under `on_error = "omit"`.
#[derive(Debug, Clone)]
pub struct Collection {
    /// The overlay.
    pub overlay: Overlay,
    /// Failures that were omitted rather than failing the execution.
    pub omitted: Vec<ContributorError>,
    /// What each WASM contributor's call showed of itself, by name: only a
    /// traced collect ([`CollectOptions::traced`]) fills it.
    pub traces: BTreeMap<String, CallTrace>,
}

/// How [`Registry::collect`] collects: whose `resolve` it runs (the scope
/// `S`, which decides what it returns) and whether it keeps what each call
/// showed of itself. [`CollectOptions::new`] is every contributor, untraced.
#[derive(Debug, Clone)]
#[must_use]
pub struct CollectOptions<S = CollectAll> {
    scope: S,
    traced: bool,
}

impl CollectOptions {
    /// Every contributor, into one overlay with the built-ins, untraced.
    pub fn new() -> Self {
        CollectOptions {
            scope: CollectAll,
            traced: false,
        }
    }
}

impl Default for CollectOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: CollectScope> CollectOptions<S> {
    /// Also keeps what each WASM contributor's call showed of itself (the
    /// end of its stderr, and whether it found no directories or no
    /// environment where it looked), in [`Collection::traces`], for
    /// [`Registry::absences`]. Slower by a copy of each guest's last words:
    /// for `explain`, not for every call.
    pub fn traced(mut self, traced: bool) -> Self {
        self.traced = traced;
        self
    }

    /// The contributor `name` alone, under its `on_error` policy: its
    /// checked keys (no built-ins) as the overlay, or its omitted failure;
    /// `None` when no contributor has that name.
    pub fn only(self, name: impl Into<String>) -> CollectOptions<CollectOnly> {
        CollectOptions {
            scope: CollectOnly(name.into()),
            traced: self.traced,
        }
    }

    /// Every contributor alone, by name, in name order: what
    /// [`CollectOptions::only`] gives each, the execution converted for the
    /// guests once for all of them. A failure is that contributor's result
    /// and does not stop the others. For a registry that resolves
    /// contributors one at a time within one synchronous collect (the
    /// reference harness's `ctx.shellEnv`): it asks once per collect, not
    /// once per contributor.
    pub fn each_alone(self) -> CollectOptions<CollectEachAlone> {
        CollectOptions {
            scope: CollectEachAlone,
            traced: self.traced,
        }
    }
}

/// Whose `resolve` a [`Registry::collect`] runs, and so what it returns:
/// [`CollectAll`], [`CollectOnly`] or [`CollectEachAlone`] (sealed).
pub trait CollectScope: sealed::Sealed + Send + Sync {
    /// What a collect over this scope returns.
    type Output: Send;

    /// The collect itself (called by [`Registry::collect`]).
    #[doc(hidden)]
    fn collect<'a>(
        &'a self,
        registry: &'a Registry,
        execution: &'a ToolExecution,
        traced: bool,
    ) -> impl Future<Output = Self::Output> + Send + 'a;
}

mod sealed {
    /// Keeps [`super::CollectScope`] to this module's scopes.
    pub trait Sealed {}
    impl Sealed for super::CollectAll {}
    impl Sealed for super::CollectOnly {}
    impl Sealed for super::CollectEachAlone {}
}

/// Every contributor, into one overlay with the built-ins (the default scope).
#[derive(Debug, Clone, Copy, Default)]
pub struct CollectAll;

/// One contributor alone, by name ([`CollectOptions::only`]).
#[derive(Debug, Clone)]
pub struct CollectOnly(String);

/// Every contributor alone ([`CollectOptions::each_alone`]).
#[derive(Debug, Clone, Copy)]
pub struct CollectEachAlone;

impl CollectScope for CollectAll {
    /// The overlay; the first failure of a contributor under
    /// `on_error = "fail"` fails it.
    type Output = Result<Collection, ContributorError>;

    fn collect<'a>(
        &'a self,
        registry: &'a Registry,
        execution: &'a ToolExecution,
        traced: bool,
    ) -> impl Future<Output = Self::Output> + Send + 'a {
        registry.collect_all(execution, traced)
    }
}

impl CollectScope for CollectOnly {
    /// That contributor's keys or its omitted failure; `None` when no
    /// contributor has the name.
    type Output = Result<Option<Collection>, ContributorError>;

    fn collect<'a>(
        &'a self,
        registry: &'a Registry,
        execution: &'a ToolExecution,
        traced: bool,
    ) -> impl Future<Output = Self::Output> + Send + 'a {
        registry.collect_only(&self.0, execution, traced)
    }
}

impl CollectScope for CollectEachAlone {
    /// Each contributor's own result, by name, in name order.
    type Output = Vec<(String, Result<Collection, ContributorError>)>;

    fn collect<'a>(
        &'a self,
        registry: &'a Registry,
        execution: &'a ToolExecution,
        traced: bool,
    ) -> impl Future<Output = Self::Output> + Send + 'a {
        registry.collect_every_alone(execution, traced)
    }
}

impl Registry {
    /// Builds the overlay for one execution: the built-ins, then every
    /// contributor (in name order) resolved in a fresh instance, and the
    /// contributors left out under `on_error = "omit"`; or, as `options`
    /// say, one contributor alone or each alone. The set of contributors is
    /// the one registered when the call starts.
    pub async fn collect<S: CollectScope>(
        &self,
        execution: &ToolExecution,
        options: &CollectOptions<S>,
    ) -> S::Output {
        options.scope.collect(self, execution, options.traced).await
    }

    /// Does the work `collect` leaves for later, so that it is off the
    /// caller's path: drops the instances of finished calls, then makes one
    /// fresh instance of each contributor that has none ready, for its next
    /// call; one with a cwd grant, for the cwd of its last call (and none
    /// before its first), which serves the next call only in that same
    /// directory. An instance serves one call and is never reused. The bash tool
    /// runs this while its child starts; without it, `collect` instantiates
    /// at the call and drops each instance at the end of its call.
    pub async fn prepare(&self) {
        self.inner.runtime.sandbox.reclaim();
        for entry in self.inner.snapshot().values() {
            let Resolver::Wasm(wasm) = &entry.resolver else {
                continue;
            };
            if wasm.is_prepared() {
                continue;
            }
            let cwd = wasm.last_cwd().clone();
            let (sandbox, name) = (&self.inner.runtime.sandbox, entry.declaration.name());
            match sandbox.prepare(&wasm.component, name, cwd.as_deref()).await {
                // A concurrent `prepare` may have filled it meanwhile; then
                // this one is dropped.
                Preparation::Ready(prepared) => {
                    let mut ready = wasm.ready();
                    if ready.is_none() {
                        *ready = Some(prepared);
                    }
                }
                Preparation::Busy => break,
                Preparation::Skipped => {}
                Preparation::Unsuitable => wasm.unsuitable.store(true, Ordering::Relaxed),
            }
        }
    }

    /// How many contributors have an instance made ahead of their next call.
    pub fn prepared(&self) -> usize {
        let snapshot = self.inner.snapshot();
        let ready = |entry: &&Arc<Entry>| match &entry.resolver {
            Resolver::Wasm(wasm) => wasm.ready().is_some(),
            Resolver::Native(_) => false,
        };
        snapshot.values().filter(ready).count()
    }

    /// Whether [`Registry::prepare`] has nothing to make: every WASM
    /// contributor that can have an instance made ahead has one.
    pub fn is_prepared(&self) -> bool {
        let snapshot = self.inner.snapshot();
        snapshot.values().all(|entry| match &entry.resolver {
            Resolver::Wasm(wasm) => wasm.is_prepared(),
            Resolver::Native(_) => true,
        })
    }

    /// Every contributor, in a `collect` span, traced if `traced`.
    async fn collect_all(
        &self,
        execution: &ToolExecution,
        traced: bool,
    ) -> Result<Collection, ContributorError> {
        let snapshot = self.inner.snapshot();
        // Values, not formatted text: without a subscriber that listens,
        // the span is a no-op and nothing is formatted or allocated.
        let span = tracing::info_span!(
            "collect",
            call_id = execution.call_id.as_str(),
            contributors = snapshot.len(),
            outcome = Empty,
            omitted = Empty,
            failed = Empty,
        );
        let collect = self.collect_snapshot(&snapshot, execution, traced);
        (in_span(span, collect, |span, result| match result {
            Ok(collection) => {
                span.record("outcome", "ok");
                span.record("omitted", collection.omitted.len());
            }
            Err(err) => {
                span.record("outcome", "failed");
                span.record("failed", err.contributor.as_str());
            }
        }))
        .await
    }

    /// The work of [`Registry::collect_all`], over one snapshot.
    async fn collect_snapshot(
        &self,
        snapshot: &BTreeMap<String, Arc<Entry>>,
        execution: &ToolExecution,
        traced: bool,
    ) -> Result<Collection, ContributorError> {
        let mut omitted = Vec::new();
        let mut traces = BTreeMap::new();
        let mut overlay = BTreeMap::new();
        let builtin = |key: &str| DshKey::new(key).expect("built-in keys are valid");
        // `DshHome` refuses control characters when it is made, and `1` is
        // `1`; only the session id comes from the caller, checked by the
        // value rules: a Rust caller can build a `ToolExecution` whose
        // session id holds a newline, or a megabyte.
        overlay.insert(builtin(DSH_HOME), self.inner.home.as_str().to_string());
        overlay.insert(builtin(DSH_SHELL), "1".to_string());
        if let Some(agent) = &execution.agent {
            let max_value_bytes = Limits::default().max_value_bytes;
            check_value(DSH_SESSION_ID, &agent.session_id, max_value_bytes).map_err(|problem| {
                ContributorError {
                    contributor: BUILTIN_OWNER.to_string(),
                    phase: Phase::Resolve,
                    cause: problem.into(),
                    keys: KeysNote::default(),
                }
            })?;
            overlay.insert(builtin(DSH_SESSION_ID), agent.session_id.clone());
        }
        let outcomes = match snapshot.is_empty() {
            true => Vec::new(),
            false => {
                let call = Call::new(execution);
                (self.resolve_round(snapshot, call, traced, Stop::AtFailure)).await
            }
        };
        // In name order, so the failure reported is the first in name order.
        for (entry, outcome) in snapshot.values().zip(outcomes) {
            let Some((resolved, trace)) = outcome else {
                break;
            };
            if let Some(trace) = trace {
                traces.insert(entry.declaration.name().to_string(), trace);
            }
            match resolved {
                Ok(checked) => overlay.extend(checked),
                Err(err) if entry.on_error == OnError::Omit => {
                    tracing::warn!("omitted for call {}: {err}", execution.call_id);
                    omitted.push(err);
                }
                Err(err) => return Err(err),
            }
        }
        Ok(Collection {
            overlay: Overlay::from(overlay),
            omitted,
            traces,
        })
    }

    /// [`CollectOptions::only`]'s collect.
    async fn collect_only(
        &self,
        name: &str,
        execution: &ToolExecution,
        traced: bool,
    ) -> Result<Option<Collection>, ContributorError> {
        let snapshot = self.inner.snapshot();
        let Some(entry) = snapshot.get(name) else {
            return Ok(None);
        };
        let mut trace = trace_for(entry, traced);
        let call = Call::new(execution);
        let resolved = (self.resolve_entry(entry, &call, trace.as_mut())).await;
        alone(entry, (resolved, trace), execution).map(Some)
    }

    /// [`CollectOptions::each_alone`]'s collect.
    async fn collect_every_alone(
        &self,
        execution: &ToolExecution,
        traced: bool,
    ) -> Vec<(String, Result<Collection, ContributorError>)> {
        let snapshot = self.inner.snapshot();
        if snapshot.is_empty() {
            return Vec::new();
        }
        let call = Call::new(execution);
        let outcomes = (self.resolve_round(&snapshot, call, traced, Stop::Never)).await;
        let each = (snapshot.iter()).zip(outcomes);
        // A round that never stops has every outcome.
        let each = each.filter_map(|((name, entry), outcome)| {
            Some((name.clone(), alone(entry, outcome?, execution)))
        });
        each.collect()
    }
}

/// `entry` alone, from its round's `outcome`, under its `on_error` policy
/// (see [`CollectOptions::only`]).
fn alone(
    entry: &Entry,
    (resolved, trace): Outcome,
    execution: &ToolExecution,
) -> Result<Collection, ContributorError> {
    let traces = (trace.into_iter())
        .map(|trace| (entry.declaration.name().to_string(), trace))
        .collect();
    let (overlay, omitted): (BTreeMap<DshKey, String>, _) = match resolved {
        Ok(checked) => (checked.into_iter().collect(), Vec::new()),
        Err(err) if entry.on_error == OnError::Omit => {
            tracing::warn!("omitted for call {}: {err}", execution.call_id);
            (BTreeMap::new(), vec![err])
        }
        Err(err) => return Err(err),
    };
    Ok(Collection {
        overlay: Overlay::from(overlay),
        omitted,
        traces,
    })
}

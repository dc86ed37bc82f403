//! The spans a collect emits, as a subscriber sees them: one for the
//! collect and one for each contributor's call, with their fields.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use dsh_env::CollectOptions;
use dsh_env::OnError;
use dsh_env_tests::{agent_call, echo, puppet, registry};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span as it closed: its name, its fields as text, its parent's name.
#[derive(Debug, Clone)]
pub(crate) struct Closed {
    name: &'static str,
    fields: BTreeMap<&'static str, String>,
    parent: Option<&'static str>,
}

impl Closed {
    /// The field `name`'s value as text.
    pub(crate) fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// Records every span's fields, and each span when it closes.
#[derive(Clone, Default)]
pub(crate) struct Recorder {
    closed: Arc<Mutex<Vec<Closed>>>,
}

/// A span's fields so far, kept in its extensions.
struct Fields(BTreeMap<&'static str, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields(BTreeMap::new());
        attrs.record(&mut fields);
        let span = ctx.span(id).expect("a new span is in the registry");
        span.extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a recorded span is in the registry");
        if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).expect("a closing span is in the registry");
        let fields = (span.extensions().get::<Fields>())
            .map(|fields| fields.0.clone())
            .unwrap_or_default();
        self.closed.lock().unwrap().push(Closed {
            name: span.name(),
            fields,
            parent: span.parent().map(|parent| parent.name()),
        });
    }
}

impl Recorder {
    /// Records the spans of this thread until the guard drops (a
    /// current-thread runtime polls everything it runs here).
    pub(crate) fn on_this_thread() -> (Self, tracing::subscriber::DefaultGuard) {
        let recorder = Recorder::default();
        let subscriber = tracing_subscriber::registry().with(recorder.clone());
        (recorder, tracing::subscriber::set_default(subscriber))
    }

    /// The spans closed so far named `name`.
    pub(crate) fn named(&self, name: &str) -> Vec<Closed> {
        let closed = self.closed.lock().unwrap();
        closed.iter().filter(|s| s.name == name).cloned().collect()
    }
}

/// Runs a collect for call `call_id` under a recording subscriber
/// (on this thread: the test's runtime polls the collect here).
async fn traced(
    registry: &dsh_env::Registry,
    call_id: &str,
) -> (
    Recorder,
    Result<dsh_env::Collection, dsh_env::ContributorError>,
) {
    let (recorder, guard) = Recorder::on_this_thread();
    let result = registry
        .collect(&agent_call(call_id, "s"), &CollectOptions::new())
        .await;
    drop(guard);
    (recorder, result)
}

#[tokio::test(flavor = "current_thread")]
async fn a_collect_has_a_span_and_each_contributor_one_with_its_outcome_and_tier() {
    let registry = registry();
    let fine = echo(&registry, "traced-fine", "DSH_TRACED_FINE");
    let _fine = registry.register(fine).await.unwrap();
    let failing = puppet(
        &registry,
        &[
            ("name", "traced-omitted"),
            ("keys", "DSH_TRACED_OMITTED=o"),
            ("resolve", "trap"),
        ],
    );
    let failing = failing.with_on_error(OnError::Omit);
    let _failing = registry.register(failing).await.unwrap();

    let (recorder, result) = traced(&registry, "call-traced").await;
    assert_eq!(result.unwrap().omitted.len(), 1);

    let collects = recorder.named("collect");
    assert_eq!(collects.len(), 1, "{collects:?}");
    let collect = &collects[0];
    assert_eq!(collect.field("call_id"), Some("call-traced"));
    assert_eq!(collect.field("contributors"), Some("2"));
    assert_eq!(collect.field("outcome"), Some("ok"));
    assert_eq!(collect.field("omitted"), Some("1"));

    let mut calls = recorder.named("contributor");
    calls.sort_by(|a, b| a.field("contributor").cmp(&b.field("contributor")));
    assert_eq!(calls.len(), 2, "{calls:?}");
    for call in &calls {
        assert_eq!(call.parent, Some("collect"), "{call:?}");
        assert_eq!(call.field("call_id"), Some("call-traced"), "{call:?}");
        assert_eq!(call.field("phase"), Some("resolve"), "{call:?}");
        let tier = call.field("tier");
        assert!(matches!(tier, Some("optimized" | "baseline")), "{call:?}");
    }
    assert_eq!(calls[0].field("contributor"), Some("traced-fine"));
    assert_eq!(calls[0].field("outcome"), Some("ok"));
    assert_eq!(calls[0].field("failure"), None);
    assert_eq!(calls[1].field("contributor"), Some("traced-omitted"));
    assert_eq!(calls[1].field("outcome"), Some("omitted"));
    assert_eq!(calls[1].field("failure"), Some("trap"));
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_collect_names_the_failure_in_its_spans() {
    let registry = registry();
    let failing = puppet(
        &registry,
        &[
            ("name", "traced-failing"),
            ("keys", "DSH_TRACED_FAILING=f"),
            ("resolve", "err:no repository here"),
        ],
    );
    let _failing = registry.register(failing).await.unwrap();

    let (recorder, result) = traced(&registry, "call-failing").await;
    assert!(result.is_err());

    let collects = recorder.named("collect");
    assert_eq!(collects.len(), 1, "{collects:?}");
    assert_eq!(collects[0].field("outcome"), Some("failed"));
    assert_eq!(collects[0].field("failed"), Some("traced-failing"));
    let calls = recorder.named("contributor");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].field("outcome"), Some("guest-error"));
    assert_eq!(calls[0].field("failure"), Some("guest-error"));
}

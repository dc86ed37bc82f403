//! Logs and traces on stderr, and traces over OTLP. The library emits a
//! `collect` span per execution and a `contributor` span per call (see
//! ARCHITECTURE.md); here `-v` prints each as it closes, with its fields
//! and time, and the `otlp` feature exports them when an endpoint is set.
//! Every line on stderr has the credentials the process holds blanked
//! (`dsh_env_oci::secrets`), whatever crate logged it.

use std::io::IsTerminal;

use tracing_subscriber::Layer;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the subscriber: lines on stderr at the level `-v` asks for
/// (`$DSH_ENV_LOG` overrides), in colour only on a terminal and without
/// `$NO_COLOR`, span closes among them; and the OTLP export, if an
/// endpoint is set. Call [`Export::finish`] at exit.
pub fn init(verbose: u8) -> Export {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        // wasmtime's and cranelift's debug lines (one per pool slot, per
        // function) would bury dsh-env's own; -vvv shows them too.
        2 => "debug,wasmtime=info,cranelift=info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("DSH_ENV_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let (otlp, export) = otlp::layer();
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal() && !no_color)
        .with_writer(|| RedactedStderr)
        .with_span_events(FmtSpan::CLOSE)
        .with_filter(filter);
    tracing_subscriber::registry().with(otlp).with(lines).init();
    if let Some(problem) = &export.problem {
        tracing::warn!("cannot export traces over OTLP: {problem}");
    }
    export
}

/// Stderr, through which each log line passes with every credential the
/// process holds blanked. The fmt layer writes a line in one call, so no
/// secret is split between two.
struct RedactedStderr;

impl std::io::Write for RedactedStderr {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(line);
        let text = dsh_env_oci::secrets::redact(&text);
        std::io::stderr().write_all(text.as_bytes())?;
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The OTLP export, if one was set up: flushed by [`Export::finish`].
pub struct Export {
    provider: otlp::Provider,
    problem: Option<String>,
}

impl Export {
    /// Sends the spans not sent yet, waiting for the endpoint's answer at
    /// most the export bound (200 ms, or `$OTEL_EXPORTER_OTLP_TIMEOUT`).
    pub fn finish(self) {
        otlp::finish(self.provider);
    }
}

#[cfg(feature = "otlp")]
mod otlp {
    use std::time::Duration;

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::{
        OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, RetryPolicy,
        WithExportConfig as _, WithHttpConfig as _,
    };
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
    use tracing::level_filters::LevelFilter;
    use tracing_opentelemetry::OpenTelemetryLayer;
    use tracing_subscriber::Layer;
    use tracing_subscriber::Registry;
    use tracing_subscriber::filter::{Filtered, Targets};

    use super::Export;

    /// The variables that name an endpoint; without one, nothing is exported.
    const ENDPOINT_VARIABLES: [&str; 2] = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ];

    type OtlpLayer = Filtered<OpenTelemetryLayer<Registry, SdkTracer>, Targets, Registry>;

    /// How long exporting may hold a command unless the standard variables
    /// say otherwise: each export request (connecting included), and the
    /// last flush at exit. The spec's 10 s would let a collector that
    /// never answers hold every command that long.
    const DEFAULT_BOUND: Duration = Duration::from_millis(200);

    /// What exports the spans, if anything does, and its bound.
    pub(super) type Provider = Option<(SdkTracerProvider, Duration)>;

    /// Flushes what `provider` holds, and stops it, waiting at most its
    /// bound: spans a collector has not taken by then are dropped.
    pub(super) fn finish(provider: Provider) {
        let Some((provider, bound)) = provider else {
            return;
        };
        // The SDK does not report a failed export here (a collector that
        // is down costs no line); only a flush still running at the bound.
        if let Err(err) = provider.shutdown_with_timeout(bound) {
            tracing::warn!(
                "traces not exported over OTLP within {} ms (${OTEL_EXPORTER_OTLP_TIMEOUT}): {err}",
                bound.as_millis()
            );
        }
    }

    /// The export bound: `$OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else
    /// `$OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds, as the spec has them),
    /// else [`DEFAULT_BOUND`].
    fn bound() -> Duration {
        [
            OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
            OTEL_EXPORTER_OTLP_TIMEOUT,
        ]
        .iter()
        .find_map(|name| std::env::var(name).ok()?.trim().parse().ok())
        .map_or(DEFAULT_BOUND, Duration::from_millis)
    }

    /// The layer that exports dsh-env's spans (at info and above, whatever
    /// `-v` says), when an endpoint is set. opentelemetry-otlp reads the
    /// standard variables itself (the endpoint, headers and compression),
    /// all but the timeout: the [`bound`] here. An export that fails is
    /// not tried again, so a collector that is down costs one refused
    /// connection.
    pub(super) fn layer() -> (Option<OtlpLayer>, Export) {
        let set = |name: &&str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        if !ENDPOINT_VARIABLES.iter().any(set) {
            return (None, exported(None, None));
        }
        // reqwest is built without a default TLS provider here (as for
        // dsh-env-oci); ring serves an https endpoint.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let bound = bound();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_timeout(bound)
            .with_retry_policy(RetryPolicy::disabled())
            .build();
        let exporter = match exporter {
            Ok(exporter) => exporter,
            Err(err) => return (None, exported(None, Some(err.to_string()))),
        };
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("dsh-env");
        }
        // The batch processor exports on a thread of its own, off the
        // async runtime and the calls.
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let dsh_env = Targets::new()
            .with_target("dsh_env", LevelFilter::INFO)
            .with_target("dsh_env_harness", LevelFilter::INFO)
            .with_target("dsh_env_cli", LevelFilter::INFO);
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("dsh-env"))
            .with_filter(dsh_env);
        (Some(layer), exported(Some((provider, bound)), None))
    }

    fn exported(provider: Provider, problem: Option<String>) -> Export {
        Export { provider, problem }
    }
}

/// Without the `otlp` feature: no export.
#[cfg(not(feature = "otlp"))]
mod otlp {
    use super::Export;

    /// Nothing exports.
    pub(super) type Provider = ();

    /// Nothing to flush.
    pub(super) fn finish(_: Provider) {}

    /// No layer.
    pub(super) fn layer() -> (Option<tracing_subscriber::layer::Identity>, Export) {
        let export = Export {
            provider: (),
            problem: None,
        };
        (None, export)
    }
}

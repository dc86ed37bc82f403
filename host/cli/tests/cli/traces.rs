//! Traces: the library's spans (a collect, each contributor's call) printed
//! by `-v`, and exported over OTLP/HTTP to the endpoint the standard
//! variables name.

use super::*;

/// `dsh-env resolve` of the fixture's manifest and execution (the two
/// contributors agent-lineage and call-trace, call `c1`), with `extra` and
/// `env`.
fn resolve(f: &Fixture, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let (manifest, home, execution) = (f.path("manifest.toml"), f.home(), f.path("execution.json"));
    let mut args = f.with_setup("resolve", manifest.to_str().unwrap(), &home);
    args.extend(["--execution", execution.to_str().unwrap()]);
    args.extend(extra);
    f.run(&args, env)
}

#[test]
fn verbose_prints_the_collect_and_each_contributor_span_as_it_closes() {
    let f = Fixture::new();
    let quiet = resolve(&f, &[], &[]);
    succeeded("resolve", &quiet);
    assert!(!stderr(&quiet).contains("close"), "{}", stderr(&quiet));

    let output = resolve(&f, &["-v"], &[]);
    succeeded("resolve -v", &output);
    let err = stderr(&output);
    let line = |needles: &[&str]| {
        err.lines()
            .find(|line| needles.iter().all(|needle| line.contains(needle)))
            .unwrap_or_else(|| panic!("no line with {needles:?} in:\n{err}"))
            .to_string()
    };
    for name in ["agent-lineage", "call-trace"] {
        let closed = line(&[
            "contributor{",
            &format!("contributor=\"{name}\""),
            "phase=resolve",
            "close",
        ]);
        for field in ["call_id=\"c1\"", "tier=", "outcome=\"ok\"", "time.busy="] {
            assert!(closed.contains(field), "{field} missing in {closed}");
        }
    }
    let collect = line(&["collect{", "omitted=", "close"]);
    for field in [
        "call_id=\"c1\"",
        "contributors=2",
        "outcome=\"ok\"",
        "omitted=0",
    ] {
        assert!(collect.contains(field), "{field} missing in {collect}");
    }
}

#[cfg(feature = "otlp")]
mod otlp {
    use std::collections::BTreeMap;
    use std::io::{BufRead, BufReader, ErrorKind, Read};
    use std::net::{TcpListener, TcpStream};
    use std::sync::mpsc;

    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::trace::v1::Span;
    use prost::Message;

    use super::*;

    /// One request the receiver got: its path, content type and body.
    struct Received {
        path: String,
        content_type: String,
        body: Vec<u8>,
    }

    /// An empty (valid) protobuf answer.
    const OK: &str =
        "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
    /// What a collector that is down for maintenance answers: an error the
    /// OTLP spec lets an exporter retry.
    const UNAVAILABLE: &str = "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n";

    /// A minimal OTLP/HTTP receiver on 127.0.0.1 that answers every request
    /// 200 with an empty protobuf response.
    fn receiver() -> (String, mpsc::Receiver<Received>) {
        receiver_answering(OK)
    }

    /// An OTLP/HTTP receiver on 127.0.0.1: answers every request with
    /// `answer` (a whole HTTP/1.1 response), and sends what it got down the
    /// channel. Its thread ends with the test process.
    fn receiver_answering(answer: &'static str) -> (String, mpsc::Receiver<Received>) {
        collector(move |stream, mut reader, sender| {
            // Requests on one connection, until it closes.
            while let Some(request) = read_request(&mut reader) {
                // Recorded before it is answered: the exporter waits
                // for the answer before the process exits.
                let _ = sender.send(request);
                if std::io::Write::write_all(&mut &stream, answer.as_bytes()).is_err() {
                    return;
                }
            }
        })
    }

    /// A collector on 127.0.0.1: `serve` runs on a thread of its own for
    /// each connection, with a reader over it and a sender down the channel
    /// returned beside the endpoint. Its threads end with the test process.
    fn collector<T: Send + 'static>(
        serve: impl Fn(TcpStream, BufReader<TcpStream>, mpsc::Sender<T>) + Clone + Send + 'static,
    ) -> (String, mpsc::Receiver<T>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let (sender, received) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (sender, serve) = (sender.clone(), serve.clone());
                std::thread::spawn(move || {
                    let reader = BufReader::new(stream.try_clone().unwrap());
                    serve(stream, reader, sender);
                });
            }
        });
        (endpoint, received)
    }

    /// One HTTP/1.1 request with a `content-length` body, or `None` at the
    /// connection's end.
    fn read_request(reader: &mut impl BufRead) -> Option<Received> {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).ok()? == 0 {
            return None;
        }
        let path = request_line.split_whitespace().nth(1)?.to_string();
        let mut headers = BTreeMap::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).ok()?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':')?;
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
        let length: usize = headers.get("content-length")?.parse().ok()?;
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        Some(Received {
            path,
            content_type: headers.get("content-type").cloned().unwrap_or_default(),
            body,
        })
    }

    fn text(value: &Option<AnyValue>) -> Option<String> {
        match value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(text) => Some(text.clone()),
            any_value::Value::IntValue(n) => Some(n.to_string()),
            other => Some(format!("{other:?}")),
        }
    }

    fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
        (attributes.iter().find(|kv| kv.key == key)).and_then(|kv| text(&kv.value))
    }

    /// How long [`stalling`] holds a request before it answers: under the
    /// 5 s an export used to hold a command, over the 200 ms it may now.
    const STALL: Duration = Duration::from_secs(3);

    /// A collector on 127.0.0.1 that reads each request and answers it
    /// only after [`STALL`], unless the exporter hangs up first; it sends
    /// down the channel, per request, whether the exporter hung up first.
    fn stalling() -> (String, mpsc::Receiver<bool>) {
        collector(|stream, mut reader, sender| {
            if read_request(&mut reader).is_none() {
                return;
            }
            stream.set_read_timeout(Some(STALL)).unwrap();
            let hung_up = match reader.read(&mut [0; 1]) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            };
            if !hung_up {
                let _ = std::io::Write::write_all(&mut &stream, OK.as_bytes());
            }
            let _ = sender.send(hung_up);
        })
    }

    /// A home whose components are compiled, so that a resolve is quick and
    /// its spans leave in one export, at exit.
    fn warm() -> Fixture {
        let f = Fixture::new();
        succeeded("resolve", &resolve(&f, &[], &[]));
        f
    }

    #[test]
    fn a_collector_that_never_answers_is_left_at_the_export_bound_or_the_one_set() {
        let f = warm();
        let (endpoint, abandoned) = stalling();
        let at = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())];
        succeeded("resolve", &resolve(&f, &[], &at));
        // The command ended (and with it the export) before the collector
        // answered: 200 ms by default, well under the stall. (On a machine
        // so busy that no export left within them, it was not held either.)
        let first = abandoned.recv_timeout(STALL * 2).unwrap_or(true);
        assert!(first, "the export waited for a collector that stalls");
        // $OTEL_EXPORTER_OTLP_TIMEOUT (ms) sets the bound: over the stall,
        // the exporter waits for the answer.
        let patient = [at[0], ("OTEL_EXPORTER_OTLP_TIMEOUT", "10000")];
        succeeded("resolve", &resolve(&f, &[], &patient));
        let waited = abandoned
            .recv_timeout(STALL * 2)
            .expect("an export arrived");
        assert!(
            !waited,
            "the export left before $OTEL_EXPORTER_OTLP_TIMEOUT"
        );
    }

    #[test]
    fn a_collector_that_is_down_or_failing_is_tried_once_and_says_nothing() {
        let f = warm();
        // A generous bound, so that what is checked is the retries (what a
        // collector that is down used to cost), not a busy machine's pace.
        let resolve_at = |endpoint: &str| {
            let env = [
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "10000"),
            ];
            resolve(&f, &[], &env)
        };
        // Refused: nothing listens on a port just freed.
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let output = resolve_at(&format!("http://{free}"));
        succeeded("resolve", &output);
        assert_eq!(stderr(&output), "");
        // Failing with an answer the spec lets an exporter retry: each
        // export is sent once, never again.
        let (endpoint, received) = receiver_answering(UNAVAILABLE);
        let output = resolve_at(&endpoint);
        succeeded("resolve", &output);
        let bodies: Vec<Vec<u8>> = received.try_iter().map(|request| request.body).collect();
        assert!(!bodies.is_empty(), "no export arrived");
        for (n, body) in bodies.iter().enumerate() {
            assert!(!bodies[..n].contains(body), "an export was sent again");
        }
    }

    #[test]
    fn resolve_exports_its_spans_to_the_otlp_endpoint() {
        let f = Fixture::new();
        let (endpoint, received) = receiver();
        // A generous bound: a busy machine must not drop the spans.
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10000"),
        ];
        let output = resolve(&f, &[], &env);
        succeeded("resolve", &output);

        // The exporter flushes before the process exits: everything is in.
        let mut spans: Vec<Span> = Vec::new();
        let mut services = Vec::new();
        for request in received.try_iter() {
            assert_eq!(request.path, "/v1/traces");
            assert_eq!(request.content_type, "application/x-protobuf");
            let export = ExportTraceServiceRequest::decode(request.body.as_slice()).unwrap();
            for resource_spans in export.resource_spans {
                let resource = resource_spans.resource.unwrap_or_default();
                services.push(attribute(&resource.attributes, "service.name"));
                for scope in resource_spans.scope_spans {
                    spans.extend(scope.spans);
                }
            }
        }
        assert!(
            !services.is_empty(),
            "no spans arrived; stderr: {}",
            stderr(&output)
        );
        assert!(
            services.iter().all(|s| s.as_deref() == Some("dsh-env")),
            "{services:?}"
        );

        let collects: Vec<&Span> = spans.iter().filter(|s| s.name == "collect").collect();
        assert_eq!(collects.len(), 1, "{spans:?}");
        let collect = collects[0];
        assert_eq!(
            attribute(&collect.attributes, "call_id").as_deref(),
            Some("c1")
        );
        assert_eq!(
            attribute(&collect.attributes, "outcome").as_deref(),
            Some("ok")
        );
        assert_eq!(
            attribute(&collect.attributes, "contributors").as_deref(),
            Some("2")
        );
        assert!(collect.end_time_unix_nano >= collect.start_time_unix_nano);

        let mut calls: Vec<&Span> = (spans.iter())
            .filter(|s| s.name == "contributor")
            .filter(|s| attribute(&s.attributes, "phase").as_deref() == Some("resolve"))
            .collect();
        calls.sort_by_key(|s| attribute(&s.attributes, "contributor"));
        let names: Vec<Option<String>> = (calls.iter())
            .map(|s| attribute(&s.attributes, "contributor"))
            .collect();
        assert_eq!(
            names,
            [Some("agent-lineage".into()), Some("call-trace".into())]
        );
        for call in calls {
            assert_eq!(call.trace_id, collect.trace_id);
            assert_eq!(call.parent_span_id, collect.span_id);
            assert_eq!(
                attribute(&call.attributes, "call_id").as_deref(),
                Some("c1")
            );
            assert_eq!(
                attribute(&call.attributes, "outcome").as_deref(),
                Some("ok")
            );
            let tier = attribute(&call.attributes, "tier");
            assert!(
                matches!(tier.as_deref(), Some("baseline" | "optimized")),
                "{tier:?}"
            );
            assert!(call.start_time_unix_nano >= collect.start_time_unix_nano);
            assert!(call.end_time_unix_nano <= collect.end_time_unix_nano);
        }
    }
}

//! `dsh-env serve`: newline-delimited JSON-RPC 2.0 on stdin/stdout,
//! protocol version [`PROTOCOL_VERSION`]. `PROTOCOL.md` at the repository
//! root documents every method, its params, result and errors;
//! `host/cli/protocol.schema.json` is the JSON Schema of the messages.
//!
//! Requests run concurrently, at most [`MAX_IN_FLIGHT`] at once: past that
//! the reader waits for a slot, so further requests are read later, never
//! refused. Each response is written whole, as one line, by one writer task,
//! and carries its request's id; responses may come out of order.
//! Notifications (no `id` member) are run but never answered; `"id": null`
//! is a request like any other, answered with `"id": null`. A batch (an
//! array) of at most [`MAX_IN_FLIGHT`] requests is answered with one array.
//! A request is one line of at most [`MAX_LINE_BYTES`]: a line that is not
//! UTF-8 gets a parse error, a longer one an invalid-request error (both
//! with id null), and serving goes on. At the end of stdin, the requests in
//! flight are finished and answered, then serving ends.
//!
//! A line is checked as JSON without building anything, then each request's
//! `params` are deserialized straight into its method's typed parameters: a
//! request holds its line until then, and its typed parameters after, never
//! a JSON tree many times the line's size. The request object and every
//! params object are closed (an unknown member is refused, naming it and the
//! known ones), but for what is not dsh-env's to close: an execution is the
//! harness's own (members it does not read, such as `arguments`, are skipped,
//! never kept), and `config` and `env` are maps of the caller's names.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::harness::EnvChanges;
use dsh_env::{Collection, ContributorEntry, Culprit, HostEnv, ToolExecution, supported_contracts};
use dsh_env_harness::hooks::PermissionMode;
use dsh_env_harness::host::{
    BashRequest, Captured, HooksSource, Host, HostError, HostErrorCode, Registered,
};
use dsh_env_harness::{LocalExecutor, TimeoutUnit, checked_timeout};
use dsh_env_support::input::{escape_controls, unknown_key};
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// The version of this protocol, returned by `initialize`: 2 since requests
/// run concurrently and `initialize` exists.
pub(crate) const PROTOCOL_VERSION: u32 = 2;

/// JSON-RPC error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
/// A contributor, component or command failed.
const APPLICATION_ERROR: i64 = -32000;
/// A `PreToolUse` hook kept `exec`'s command from running.
const HOOK_BLOCKED: i64 = -32001;

/// The longest request line read; a longer one is answered with an error
/// and skipped to its newline.
const MAX_LINE_BYTES: usize = 4 << 20;

/// Lines read ahead of the server: with [`MAX_LINE_BYTES`], this bounds
/// what the reader holds.
const LINES_AHEAD: usize = 4;

/// Requests (batch members included) running or waiting to be written at
/// once. Each may hold its line (up to [`MAX_LINE_BYTES`]) and an `exec`'s
/// output (up to 1 MiB per stream), and a `register` a compile process.
pub(crate) const MAX_IN_FLIGHT: usize = 16;

/// Names in `exec`'s `env` at most: each costs a map entry beside its bytes,
/// so this bounds what typing `env` adds to the request's line.
const MAX_EXEC_ENV: usize = 4096;

impl From<HostError> for RpcError {
    fn from(err: HostError) -> Self {
        RpcError::from_host(err)
    }
}

/// A JSON-RPC error, with what it names as `data`.
struct RpcError {
    code: i64,
    message: String,
    data: Culprit,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: Culprit::default(),
        }
    }

    fn params(err: impl std::fmt::Display) -> Self {
        Self::new(INVALID_PARAMS, format!("invalid params: {err}"))
    }

    /// Invalid params, from deserializing them, naming the member at fault;
    /// the position in the params' text is left out, as it is no place in
    /// the line.
    /// It is escaped: serde's message quotes the request's text (an unknown
    /// member's name), and a client may show it on a terminal.
    fn typing(err: &serde_path_to_error::Error<serde_json::Error>) -> Self {
        let (inner, path) = (err.inner(), err.path().to_string());
        let text = inner.to_string();
        let position = format!(" at line {} column {}", inner.line(), inner.column());
        let text = escape_controls(text.strip_suffix(&position).unwrap_or(&text));
        let path = escape_controls(&path);
        match path.as_ref() {
            "." => Self::params(text),
            path => Self::params(format!("{path}: {text}")),
        }
    }

    fn invalid(message: impl std::fmt::Display) -> Self {
        Self::new(INVALID_REQUEST, format!("invalid request: {message}"))
    }

    fn app(err: impl std::fmt::Display) -> Self {
        Self::new(APPLICATION_ERROR, err.to_string())
    }

    /// A host error as this protocol has it, from its code (the one table,
    /// every code named: a new one must be placed): an invalid argument is
    /// invalid params, a blocking hook -32001, and everything else an
    /// application error; what it names is `data`.
    fn from_host(err: HostError) -> Self {
        use HostErrorCode::*;
        let (code, message) = match err.code {
            InvalidArgument => (INVALID_PARAMS, format!("invalid params: {}", err.message)),
            HookBlocked => (HOOK_BLOCKED, err.message),
            Manifest | Load | Contributor | Declaration | Changed | Signature | Exec | Runtime
            | Home | Disposed | TimedOut => (APPLICATION_ERROR, err.message),
        };
        RpcError {
            code,
            message,
            data: *err.culprit,
        }
    }

    /// `self`, naming what `err` names.
    fn naming<'a, E>(mut self, err: &'a E) -> Self
    where
        Culprit: From<&'a E>,
    {
        self.data = Culprit::from(err);
        self
    }

    fn into_response(self, id: Value) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if !self.data.is_empty() {
            error["data"] = json!(self.data);
        }
        json!({"jsonrpc": "2.0", "id": id, "error": error})
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InitializeParams {
    /// A hooks.json file (relative to the server's working directory) or
    /// its document, for every later `exec`.
    hooks: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DisposeParams {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CollectParams {
    /// Typed as it is read: the members it does not know are skipped.
    execution: ToolExecution,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecParams {
    execution: ToolExecution,
    command: String,
    #[serde(default)]
    env: BTreeMap<String, String>,
    stdin: Option<String>,
    /// Any JSON number, checked by [`ExecParams::timeout`] so that the error
    /// names the member.
    timeout_ms: Option<serde_json::Number>,
    /// Sent to hooks as `permission_mode`.
    permission_mode: Option<PermissionMode>,
}

impl ExecParams {
    /// `timeout_ms`, if given: whole milliseconds from 1 to a day.
    fn timeout(&self) -> Result<Option<Duration>, RpcError> {
        let Some(number) = &self.timeout_ms else {
            return Ok(None);
        };
        let value = number.as_f64().unwrap_or(f64::NAN);
        checked_timeout("timeout_ms", value, number, TimeoutUnit::Milliseconds)
            .map(Some)
            .map_err(RpcError::params)
    }
}

/// A method with its parameters, typed.
enum Call {
    Initialize(Box<InitializeParams>),
    Register(Box<dsh_env::ContributorEntry>),
    Dispose(DisposeParams),
    List,
    Collect(Box<CollectParams>),
    Explain(Box<CollectParams>),
    ShellEnv(Box<CollectParams>),
    Exec(Box<ExecParams>),
}

/// `params` (a JSON object's text) as `T`; an error names the member at
/// fault by its path (`limits.deadline_ms`).
fn typed<T: DeserializeOwned>(params: &str) -> Result<T, RpcError> {
    let mut deserializer = serde_json::Deserializer::from_str(params);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|err| RpcError::typing(&err))
}

impl Call {
    /// `method`'s call, its params typed from `params` (an object's text).
    fn read(method: &str, params: &str) -> Result<Call, RpcError> {
        Ok(match method {
            "initialize" => Call::Initialize(typed(params)?),
            "register" => Call::Register(typed(params)?),
            "dispose" => Call::Dispose(typed(params)?),
            "list" => typed::<NoParams>(params).map(|_| Call::List)?,
            "collect" => Call::Collect(typed(params)?),
            "explain" => Call::Explain(typed(params)?),
            "shell_env" => Call::ShellEnv(typed(params)?),
            "exec" => {
                let exec: Box<ExecParams> = typed(params)?;
                if exec.env.len() > MAX_EXEC_ENV {
                    return Err(RpcError::params(format!(
                        "env holds {} names, over the limit of {MAX_EXEC_ENV}",
                        exec.env.len()
                    )));
                }
                Call::Exec(exec)
            }
            other => {
                return Err(RpcError::new(
                    METHOD_NOT_FOUND,
                    format!("method not found: `{}`", escape_controls(other)),
                ));
            }
        })
    }
}

/// A request object's members, borrowed from its line unparsed: the
/// envelope's are checked, `params` is typed by its method. Each member is
/// wrapped in `Some` when present, `null` included.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
}

/// The members of a request object: any other is refused, naming it, as a
/// misspelt `params` would otherwise be a call with none.
const ENVELOPE_MEMBERS: &[&str] = &["jsonrpc", "method", "params", "id"];

/// The first member of the request object `text` that is not one of
/// [`ENVELOPE_MEMBERS`] (read without building its value).
fn unknown_member(text: &str) -> Option<String> {
    let members: BTreeMap<String, IgnoredAny> = serde_json::from_str(text).ok()?;
    (members.into_keys()).find(|member| !ENVELOPE_MEMBERS.contains(&member.as_str()))
}

/// A member that is present, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// One request, read: its id (`None` for a notification) and its call.
struct Request {
    id: Option<Value>,
    call: Result<Call, RpcError>,
}

impl Request {
    /// Reads one request object from its text; an invalid request is
    /// answered at once, with id null.
    fn read(raw: &RawValue) -> Result<Request, RpcError> {
        let text = raw.get();
        let envelope = match serde_json::from_str::<Envelope>(text) {
            Ok(envelope) => envelope,
            Err(_) if !text.starts_with('{') => {
                return Err(RpcError::invalid("a request is a JSON object"));
            }
            Err(err) => return Err(RpcError::invalid(err)),
        };
        // JSON-RPC 2.0: an id is a string, a number or null; without one the
        // request is a notification, run but never answered.
        let id = match envelope.id.map(RawValue::get) {
            None => None,
            Some(id)
                if id.starts_with(|c: char| c == '"' || c == '-' || c.is_ascii_digit())
                    || id == "null" =>
            {
                Some(serde_json::from_str(id).map_err(RpcError::invalid)?)
            }
            Some(_) => return Err(RpcError::invalid("`id` must be a string, a number or null")),
        };
        let string = |raw: Option<&RawValue>| {
            raw.and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        };
        if string(envelope.jsonrpc).as_deref() != Some("2.0") {
            return Err(RpcError::invalid("`jsonrpc` must be \"2.0\""));
        }
        let Some(method) = string(envelope.method) else {
            return Err(RpcError::invalid("`method` must be a string"));
        };
        // Refused with its id, which was read: the client is waiting on it.
        if let Some(member) = unknown_member(text) {
            let call = Err(RpcError::invalid(unknown_key(&member, ENVELOPE_MEMBERS)));
            return Ok(Request { id, call });
        }
        let call = match envelope.params.map(RawValue::get) {
            None => Call::read(&method, "{}"),
            Some(params) if params.starts_with('{') => Call::read(&method, params),
            Some(params) if params.starts_with('[') => Err(RpcError::params(
                "params must be an object (by name), not an array",
            )),
            Some(_) => return Err(RpcError::invalid("`params` must be an object")),
        };
        Ok(Request { id, call })
    }
}

/// What one line holds: a request, or a batch of them (each read, or the
/// error that answers it).
enum Message {
    One(Result<Request, RpcError>),
    Batch(Vec<Result<Request, RpcError>>),
}

impl Message {
    /// Reads a line already checked to be JSON; a batch has 1 to
    /// [`MAX_IN_FLIGHT`] members.
    fn read(line: &str) -> Result<Message, RpcError> {
        let parse = |err| RpcError::new(PARSE_ERROR, format!("parse error: {err}"));
        if line.trim_start().starts_with('[') {
            let members: Vec<&RawValue> = serde_json::from_str(line).map_err(parse)?;
            Ok(Message::Batch(
                members.into_iter().map(Request::read).collect(),
            ))
        } else {
            let raw: &RawValue = serde_json::from_str(line).map_err(parse)?;
            Ok(Message::One(Request::read(raw)))
        }
    }
}

/// How many requests a line holds, once it is checked to be JSON (building
/// nothing: [`IgnoredAny`] and a vector of it hold no memory): a batch's
/// members, or 1.
fn count_requests(line: &str) -> Result<usize, RpcError> {
    let parse = |err| RpcError::new(PARSE_ERROR, format!("parse error: {err}"));
    if line.trim_start().starts_with('[') {
        let members: Vec<IgnoredAny> = serde_json::from_str(line).map_err(parse)?;
        Ok(members.len())
    } else {
        serde_json::from_str::<IgnoredAny>(line).map_err(parse)?;
        Ok(1)
    }
}

struct Server {
    /// The registry, its registrations, the hooks around `exec`'s commands
    /// (`--hooks` or the manifest's, until an `initialize` names others)
    /// and the manifest's `[environment]` for its children.
    host: Host,
    /// What `grants.env` may copy, read once at startup.
    host_env: HostEnv,
}

/// One line of stdin, as the reader thread saw it.
enum Line {
    /// A line of text, without its newline.
    Text(String),
    /// A line that is not UTF-8.
    NotUtf8,
    /// A line over [`MAX_LINE_BYTES`], skipped.
    TooLong,
}

/// A response line for the writer, with the in-flight slots it frees once
/// written (so that unwritten responses count as in flight too).
type Outgoing = (String, OwnedSemaphorePermit);

/// Reads stdin on a plain thread (not tokio's stdin, which would hold a
/// blocking-pool thread the guests need), line by line as bytes, within
/// [`MAX_LINE_BYTES`]. Ends when stdin does or the server is gone.
fn read_lines(mut input: impl std::io::BufRead, lines: mpsc::Sender<std::io::Result<Line>>) {
    loop {
        let line = match read_line(&mut input) {
            Ok(Some(line)) => Ok(line),
            Ok(None) => return,
            Err(err) => Err(err),
        };
        let failed = line.is_err();
        if lines.blocking_send(line).is_err() || failed {
            return;
        }
    }
}

/// The next line of `input`, `None` at its end.
fn read_line(input: &mut impl std::io::BufRead) -> std::io::Result<Option<Line>> {
    let (mut bytes, mut too_long, mut any) = (Vec::new(), false, false);
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        any = true;
        let (part, ended) = match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => (&chunk[..at], true),
            None => (chunk, false),
        };
        if !too_long && bytes.len() + part.len() <= MAX_LINE_BYTES {
            bytes.extend_from_slice(part);
        } else {
            // Keep reading to the newline, but hold nothing more.
            too_long = true;
            bytes = Vec::new();
        }
        let used = part.len() + usize::from(ended);
        input.consume(used);
        if ended {
            break;
        }
    }
    Ok(any.then(|| match (too_long, String::from_utf8(bytes)) {
        (true, _) => Line::TooLong,
        (false, Ok(text)) => Line::Text(text),
        (false, Err(_)) => Line::NotUtf8,
    }))
}

/// Writes each response as one line, flushed, then frees its slots.
async fn write_responses(mut responses: mpsc::UnboundedReceiver<Outgoing>) -> std::io::Result<()> {
    let mut stdout = tokio::io::stdout();
    while let Some((mut text, permit)) = responses.recv().await {
        text.push('\n');
        stdout.write_all(text.as_bytes()).await?;
        stdout.flush().await?;
        drop(permit);
    }
    Ok(())
}

/// Serves requests until stdin closes and every request read is answered.
pub(crate) async fn serve(host: Host) -> std::io::Result<()> {
    let server = Arc::new(Server {
        host,
        host_env: HostEnv::from_process(),
    });
    let (sender, mut lines) = mpsc::channel(LINES_AHEAD);
    std::thread::Builder::new()
        .name("dsh-env-stdin".into())
        .spawn(move || read_lines(std::io::stdin().lock(), sender))?;
    // Unbounded, but every message holds slots of `slots`: at most
    // MAX_IN_FLIGHT responses wait here.
    let (responses, outgoing) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_responses(outgoing));
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    server.host.prepare_next();
    let mut read_error = None;
    while let Some(line) = lines.recv().await {
        let request = match line {
            Ok(Line::Text(line)) if line.trim().is_empty() => continue,
            Ok(Line::Text(line)) => count_requests(&line).map(|members| (line, members)),
            Ok(Line::NotUtf8) => Err(RpcError::new(
                PARSE_ERROR,
                "parse error: the request line is not UTF-8",
            )),
            Ok(Line::TooLong) => Err(RpcError::new(
                INVALID_REQUEST,
                format!("invalid request: the line is over the {MAX_LINE_BYTES}-byte limit"),
            )),
            Err(err) => {
                read_error = Some(err);
                break;
            }
        };
        let members = match &request {
            Ok((_, 0)) => {
                let error = RpcError::invalid("an empty batch");
                answer_now(&slots, &responses, error).await;
                continue;
            }
            Ok((_, members)) if *members > MAX_IN_FLIGHT => {
                let message =
                    format!("a batch of {members} requests is over the limit of {MAX_IN_FLIGHT}");
                answer_now(&slots, &responses, RpcError::invalid(message)).await;
                continue;
            }
            Ok((_, members)) => *members,
            Err(_) => 1,
        };
        let Ok(permit) = slots.clone().acquire_many_owned(members as u32).await else {
            break;
        };
        let (server, responses) = (Arc::clone(&server), responses.clone());
        tokio::spawn(async move {
            // The line is held only until its requests are typed.
            let message = request.and_then(|(line, _)| Message::read(&line));
            let response = match message {
                Ok(message) => Arc::clone(&server).handle_message(message).await,
                Err(err) => Some(err.into_response(Value::Null)),
            };
            if let Some(response) = response {
                // The writer is gone only if stdout failed; serve reports that.
                let _ = responses.send((response.to_string(), permit));
            }
            // The client has its answer: make the next call's instances now.
            server.host.prepare_next();
        });
    }
    // Every slot back: every request read has been answered.
    let _all = slots.acquire_many(MAX_IN_FLIGHT as u32).await;
    drop(responses);
    writer.await.map_err(std::io::Error::other)??;
    read_error.map_or(Ok(()), Err)
}

/// Answers `error` (to no id) in its turn, holding a slot like any response.
async fn answer_now(
    slots: &Arc<Semaphore>,
    responses: &mpsc::UnboundedSender<Outgoing>,
    error: RpcError,
) {
    if let Ok(permit) = slots.clone().acquire_owned().await {
        let _ = responses.send((error.into_response(Value::Null).to_string(), permit));
    }
}

impl Server {
    /// The answer to one message (a request or a batch), `None` when nothing
    /// is owed: a notification, or a batch of them.
    async fn handle_message(self: Arc<Self>, message: Message) -> Option<Value> {
        match message {
            Message::One(request) => self.handle_request(request).await,
            Message::Batch(batch) => {
                // Members run concurrently too, each in a slot of its own.
                let members: Vec<_> = batch
                    .into_iter()
                    .map(|request| {
                        let server = Arc::clone(&self);
                        tokio::spawn(async move { server.handle_request(request).await })
                    })
                    .collect();
                let mut answers = Vec::new();
                for member in members {
                    if let Ok(Some(answer)) = member.await {
                        answers.push(answer);
                    }
                }
                (!answers.is_empty()).then_some(Value::Array(answers))
            }
        }
    }

    /// The answer to one request, `None` for a notification.
    async fn handle_request(&self, request: Result<Request, RpcError>) -> Option<Value> {
        let Request { id, call } = match request {
            Ok(request) => request,
            Err(err) => return Some(err.into_response(Value::Null)),
        };
        let outcome = match call {
            Ok(call) => self.dispatch(call).await,
            Err(err) => Err(err),
        };
        let id = id?;
        Some(match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(err) => err.into_response(id),
        })
    }

    async fn dispatch(&self, call: Call) -> Result<Value, RpcError> {
        let omitted = |collection: &Collection| -> Vec<String> {
            collection.omitted.iter().map(ToString::to_string).collect()
        };
        match call {
            Call::Initialize(params) => {
                if let Some(hooks) = params.hooks {
                    self.set_hooks(&hooks)?;
                }
                Ok(json!({
                    "protocol_version": PROTOCOL_VERSION,
                    "contracts": supported_contracts(),
                    "server": {"name": "dsh-env", "version": env!("CARGO_PKG_VERSION")},
                }))
            }
            Call::Register(entry) => self.register(*entry).await,
            Call::Dispose(params) => {
                self.host.dispose(&params.name)?;
                Ok(json!({"disposed": true}))
            }
            Call::List => Ok(json!(self.host.list())),
            Call::Collect(params) => {
                let collection = self.host.collect(&params.execution).await?;
                Ok(json!({"overlay": collection.overlay.to_map(), "omitted": omitted(&collection)}))
            }
            Call::Explain(params) => {
                let explanation = self.host.explain(&params.execution).await?;
                let collection = &explanation.collection;
                Ok(json!({
                    "overlay": collection.overlay.to_map(),
                    "omitted": omitted(collection),
                    "why_absent": explanation.absences,
                }))
            }
            Call::ShellEnv(params) => {
                // What the client's own shell must change for the call: the
                // client gave this server its environment, as it gives its
                // shell.
                let collection = self.host.collect(&params.execution).await?;
                let changes = EnvChanges::new(
                    std::env::vars_os(),
                    self.host.environment(),
                    &collection.overlay,
                )
                .map_err(RpcError::app)?;
                Ok(
                    json!({"set": changes.set, "unset": changes.unset, "omitted": omitted(&collection)}),
                )
            }
            Call::Exec(params) => self.exec(*params).await,
        }
    }

    /// `register`: the same fields as a manifest's `[[contributor]]`, with
    /// paths relative to the server's working directory.
    async fn register(&self, params: ContributorEntry) -> Result<Value, RpcError> {
        let spec = (params.to_spec(Path::new(""), &self.host_env)).map_err(|err| {
            RpcError::params(format!("contributor {}: {err}", params.label())).naming(&err)
        })?;
        let Registered { name, keys } = self.host.register_spec(&spec).await?;
        Ok(json!({"name": name, "keys": keys}))
    }

    /// `initialize`'s `hooks`: a file's path (relative to the server's
    /// working directory) or a hooks.json document, read and checked, for
    /// every later `exec`.
    fn set_hooks(&self, hooks: &Value) -> Result<(), RpcError> {
        let source = match hooks {
            Value::String(path) => HooksSource::File(path.into()),
            Value::Object(_) => HooksSource::Document(hooks.to_string()),
            _ => {
                return Err(RpcError::params(
                    "hooks: expected a hooks.json file's path or its document (an object)",
                ));
            }
        };
        self.host
            .set_hooks(&source)
            .map_err(|err| err.prefixed("hooks: "))?;
        Ok(())
    }

    /// `exec`: the host's bash call (the overlay, the `PreToolUse` hooks,
    /// the command with its output captured, the `PostToolUse` hooks).
    async fn exec(&self, params: ExecParams) -> Result<Value, RpcError> {
        let timeout = params.timeout()?;
        let mut call = BashRequest::new(params.execution, params.command);
        call.env = params.env;
        call.stdin = params.stdin.map(String::into_bytes);
        call.timeout = timeout;
        call.permission_mode = params.permission_mode;
        let outcome = self.host.run_bash(call, &Captured(LocalExecutor)).await?;
        let mut report = serde_json::to_value(outcome.output).map_err(RpcError::app)?;
        if let Some(notes) = outcome.notes {
            report["hooks"] = json!(notes);
        }
        Ok(report)
    }
}

//! `dsh-env serve`: newline-delimited JSON-RPC 2.0 on stdin/stdout.
//!
//! Methods:
//! - `register {path, config?, on_error?}` → `{name, keys}`
//! - `dispose {name}` → `{disposed: true}`
//! - `list` → `[{key, owner, description}]`
//! - `collect {execution}` → `{overlay, omitted}`
//! - `exec {execution, command, env?, stdin?, timeout_ms?}` →
//!   `{exit_code, stdout, stderr, timed_out, truncated}`
//!
//! A request is one line of at most [`MAX_LINE_BYTES`]. A line that is not
//! UTF-8 gets a parse error, a longer one an invalid-request error (both
//! with id null), and serving goes on.
//!
//! `execution` is the reference harness's JSON shape. `exec` is for a
//! harness, which may pass an ordinary `env` and `stdin`; no `DSH_*` name is
//! accepted in `env`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_env::{ContributorEntry, HostEnv, Registration, Registry, ToolExecution};
use dsh_env_harness::{LocalExecutor, ShellExecRequest};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// JSON-RPC error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
/// A contributor, component or command failed.
const APPLICATION_ERROR: i64 = -32000;

/// The longest request line read; a longer one is answered with an error
/// and skipped to its newline.
const MAX_LINE_BYTES: usize = 4 << 20;

/// Lines read ahead of the server: with [`MAX_LINE_BYTES`], this bounds
/// what the reader holds.
const LINES_AHEAD: usize = 4;

struct RpcError {
    code: i64,
    message: String,
}

impl RpcError {
    fn params(err: impl std::fmt::Display) -> Self {
        RpcError {
            code: INVALID_PARAMS,
            message: format!("invalid params: {err}"),
        }
    }

    fn app(err: impl std::fmt::Display) -> Self {
        RpcError {
            code: APPLICATION_ERROR,
            message: err.to_string(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DisposeParams {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CollectParams {
    execution: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecParams {
    execution: Value,
    command: String,
    #[serde(default)]
    env: BTreeMap<String, String>,
    stdin: Option<String>,
    timeout_ms: Option<u64>,
}

struct Server {
    registry: Registry,
    /// What `grants.env` may copy, read once at startup.
    host_env: HostEnv,
    registrations: HashMap<String, Registration>,
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

/// Serves requests until stdin closes.
pub(crate) async fn serve(registry: Registry, initial: Vec<Registration>) -> std::io::Result<()> {
    let mut server = Server {
        registry,
        host_env: HostEnv::from_process(),
        registrations: initial
            .into_iter()
            .map(|r| (r.name().to_string(), r))
            .collect(),
    };
    let (sender, mut lines) = mpsc::channel(LINES_AHEAD);
    std::thread::Builder::new()
        .name("dsh-env-stdin".into())
        .spawn(move || read_lines(std::io::stdin().lock(), sender))?;
    let mut stdout = tokio::io::stdout();
    server.registry.prepare().await;
    while let Some(line) = lines.recv().await {
        let response = match line? {
            Line::Text(line) if line.trim().is_empty() => continue,
            Line::Text(line) => server.handle_line(&line).await,
            Line::NotUtf8 => error_response(
                Value::Null,
                PARSE_ERROR,
                "parse error: the request line is not UTF-8",
            ),
            Line::TooLong => error_response(
                Value::Null,
                INVALID_REQUEST,
                &format!("invalid request: the line is over the {MAX_LINE_BYTES}-byte limit"),
            ),
        };
        let mut text = response.to_string();
        text.push('\n');
        stdout.write_all(text.as_bytes()).await?;
        stdout.flush().await?;
        // The client has its answer: make the next call's instances now.
        server.registry.prepare().await;
    }
    Ok(())
}

impl Server {
    async fn handle_line(&mut self, line: &str) -> Value {
        let request: Value = match serde_json::from_str(line) {
            Ok(value) => value,
            Err(err) => {
                return error_response(Value::Null, PARSE_ERROR, &format!("parse error: {err}"));
            }
        };
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        let Some(method) = request.get("method").and_then(Value::as_str) else {
            return error_response(id, INVALID_REQUEST, "invalid request: no `method`");
        };
        if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return error_response(
                id,
                INVALID_REQUEST,
                "invalid request: `jsonrpc` must be \"2.0\"",
            );
        }
        let params = request.get("params").cloned().unwrap_or(json!({}));
        match self.dispatch(method, params).await {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(err) => error_response(id, err.code, &err.message),
        }
    }

    async fn dispatch(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "register" => {
                // The same fields as a manifest's `[[contributor]]`, with
                // paths relative to the server's working directory.
                let params: ContributorEntry =
                    serde_json::from_value(params).map_err(RpcError::params)?;
                let spec = params
                    .to_spec(Path::new(""), &self.host_env)
                    .map_err(RpcError::params)?;
                let registration = self
                    .registry
                    .register_spec(&spec)
                    .await
                    .map_err(RpcError::app)?;
                let name = registration.name().to_string();
                self.registrations.insert(name.clone(), registration);
                let keys: Vec<_> = self
                    .registry
                    .list()
                    .into_iter()
                    .filter(|row| row.owner == name)
                    .map(|row| row.key)
                    .collect();
                Ok(json!({"name": name, "keys": keys}))
            }
            "dispose" => {
                let params: DisposeParams =
                    serde_json::from_value(params).map_err(RpcError::params)?;
                match self.registrations.remove(&params.name) {
                    Some(registration) => {
                        registration.dispose();
                        Ok(json!({"disposed": true}))
                    }
                    None => Err(RpcError::app(format!(
                        "no contributor `{}` is registered",
                        params.name
                    ))),
                }
            }
            "list" => Ok(json!(self.registry.list())),
            "collect" => {
                let params: CollectParams =
                    serde_json::from_value(params).map_err(RpcError::params)?;
                let execution = parse_execution(&params.execution)?;
                let collection = self
                    .registry
                    .collect_report(&execution)
                    .await
                    .map_err(RpcError::app)?;
                let omitted: Vec<String> =
                    collection.omitted.iter().map(ToString::to_string).collect();
                Ok(json!({"overlay": collection.overlay.to_map(), "omitted": omitted}))
            }
            "exec" => {
                let params: ExecParams =
                    serde_json::from_value(params).map_err(RpcError::params)?;
                let execution = parse_execution(&params.execution)?;
                let overlay = self
                    .registry
                    .collect(&execution)
                    .await
                    .map_err(RpcError::app)?;
                let workdir = match &execution.agent {
                    Some(agent) => PathBuf::from(&agent.cwd),
                    None => std::env::current_dir().map_err(RpcError::app)?,
                };
                let mut request = ShellExecRequest::new(params.command, workdir, overlay);
                request.env = params.env;
                request.stdin = params.stdin.map(String::into_bytes);
                if let Some(ms) = params.timeout_ms {
                    request.timeout = Duration::from_millis(ms);
                }
                let output = LocalExecutor.run(request).await.map_err(RpcError::app)?;
                Ok(json!({
                    "exit_code": output.exit_code,
                    "stdout": String::from_utf8_lossy(&output.stdout),
                    "stderr": String::from_utf8_lossy(&output.stderr),
                    "timed_out": output.timed_out,
                    "truncated": output.truncated,
                }))
            }
            other => Err(RpcError {
                code: METHOD_NOT_FOUND,
                message: format!("method not found: `{other}`"),
            }),
        }
    }
}

fn parse_execution(value: &Value) -> Result<ToolExecution, RpcError> {
    ToolExecution::from_json(&value.to_string()).map_err(RpcError::params)
}

fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

//! The Node.js addon: dsh-env's registry for a TypeScript harness. Every
//! call that can take time (register compiles, collect runs guests, exec
//! spawns) returns a Promise run on napi's tokio runtime, off the event loop.
//!
//! Errors cross as JSON (`{"dshEnv": {message, code, contributor?, key?,
//! file?, limit?}}`) in the `Error`'s message; `index.js` turns them into
//! `DshEnvError`s. Its API, not this one, is the package's. The fields are
//! the core's [`Culprit`], as `serve` reports them.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};

use dsh_env::{CollectOptions, EnvironmentEntry, TrustEntry};
use dsh_env::{
    ContributorEntry, ContributorError, Culprit, HomeSetting, HostEnv, Manifest, ManifestError,
    Mode, RegistryError, SharedEngine, SpecError, Tiering, ToolExecution,
};
use dsh_env_harness::hooks::{HooksError, PermissionMode};
use dsh_env_harness::host::{
    BashRequest, Captured, HooksSource, Host, HostConfig, HostError, HostErrorCode, Registered,
    RegistryConfig,
};
use dsh_env_harness::{LocalExecutor, TimeoutUnit, checked_timeout};
use dsh_env_support::input::escape_controls;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use serde_json::{Value, json};

/// The one runtime (engine, instance pool, epoch thread) of this process,
/// shared by every registry opened in it.
fn runtime() -> Result<&'static SharedEngine> {
    static RUNTIME: OnceLock<std::result::Result<SharedEngine, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            log_to_stderr();
            SharedEngine::new().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| thrown(HostError::new(HostErrorCode::Runtime, e)))
}

/// Under `$DSH_ENV_LOG` (an `EnvFilter`, e.g. `dsh_env=info`), the
/// library's log lines and spans (each as it closes, with its fields and
/// time) on stderr; without it, or when the process has a `tracing`
/// subscriber already, nothing.
fn log_to_stderr() {
    let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("DSH_ENV_LOG") else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .try_init();
}

/// A host error as JavaScript has it (the one table): `code` is its
/// [`HostErrorCode`]'s `DSH_*` name, the fields are its culprit, and the
/// message is worded for this package's users. It crosses as JSON
/// (`{"dshEnv": {message, code, contributor?, key?, file?, limit?}}`) in the
/// `Error`'s message, which `index.js` turns into a `DshEnvError`.
fn thrown(err: HostError) -> Error {
    Error::from_reason(json!({ "dshEnv": failure_body(&err) }).to_string())
}

/// What [`thrown`] carries: `{message, code, contributor?, key?, file?, limit?}`.
fn failure_body(err: &HostError) -> Value {
    let mut body = serde_json::to_value(&*err.culprit).unwrap_or_else(|_| json!({}));
    body["message"] = Value::String(message(err));
    body["code"] = Value::String(err.code.as_str().to_string());
    body
}

/// `err`'s message for a Node caller: a pin or reviewed grants that no
/// longer match say what this package's user does about it (not only the
/// CLI's `add`), and a hooks file's errors name the `hooks` option.
fn message(err: &HostError) -> String {
    if err.source_as::<HooksError>().is_some() {
        return format!("hooks: {}", escape_controls(&err.message));
    }
    match err.source_as::<RegistryError>() {
        Some(RegistryError::Changed {
            origin,
            pinned,
            actual,
        }) => format!(
            "{} changed since it was pinned: its sha256 is {actual}, but its pin is {pinned}; \
             review the new bytes, then pin them: `sha256: '{actual}'` in register()'s \
             options, or, for a manifest entry, the dsh-env CLI's `dsh-env add <component> \
             --manifest <manifest>` (this package does not edit manifests)",
            escape_controls(origin)
        ),
        Some(RegistryError::Manifest(manifest)) => match manifest.as_ref() {
            ManifestError::Entry {
                path,
                path_in_manifest,
                source: SpecError::GrantsChanged { reviewed, actual },
            } => format!(
                "invalid manifest {path}: contributor {path_in_manifest}: its grants or config \
                 changed since it was added (reviewed grants_sha256 {reviewed}, now {actual}); \
                 review them, then re-pin the entry with the dsh-env CLI: `dsh-env add \
                 <component> --manifest {path}` (this package does not edit manifests)"
            ),
            _ => err.message.clone(),
        },
        _ => err.message.clone(),
    }
}

/// A bad argument.
fn invalid(message: impl std::fmt::Display) -> Error {
    thrown(HostError::invalid(message))
}

/// A bad option, naming the limit it sets, if it is one.
fn invalid_option(message: String, limit: Option<&str>) -> Error {
    let mut body = failure_body(&HostError::invalid(message));
    if let Some(limit) = limit {
        body["limit"] = Value::String(limit.to_string());
    }
    Error::from_reason(json!({ "dshEnv": body }).to_string())
}

/// A contributor that failed an execution.
fn failed(err: ContributorError) -> Error {
    thrown(err.into())
}

/// The execution, as JSON (see `collect`), checked as the CLI checks
/// `--execution`.
fn execution(json: &str) -> Result<ToolExecution> {
    ToolExecution::from_json(json).map_err(|e| invalid(format!("execution: {e}")))
}

/// A registry: contributors registered by path, and the overlay they build
/// for each execution. An adapter over the [`Host`]: it turns napi's
/// arguments into the host's calls and the host's errors into `DSH_*` ones.
#[napi(js_name = "Registry")]
pub struct NodeRegistry {
    host: Arc<Host>,
    /// For each contributor registered here, the id of the handle that
    /// holds it: the host holds the registration, so the garbage collector
    /// never unregisters a contributor, and only that handle's `dispose()`
    /// does (not an older handle of the same name, disposed already).
    handles: Handles,
    next_id: AtomicU64,
    /// Whether a collection had to wait: later ones then start on the
    /// runtime rather than on the caller's thread.
    waited: AtomicBool,
}

/// Handle ids by contributor name.
type Handles = Arc<Mutex<HashMap<String, u64>>>;

#[napi]
impl NodeRegistry {
    /// Opens a registry. `home` is the harness home (default: `$DSH_HOME`,
    /// then `~/.dsh`); `compiler` the `dsh-env-compile` helper (default:
    /// `$DSH_ENV_COMPILER`, then `PATH`); `trust` a manifest's `[trust]`
    /// (`keys`, `require_signature`), which every registration then passes;
    /// `manifest` a manifest whose `[trust]` (and `home`, after the `home`
    /// option, and `hooks`, after the `hooks` option) the registry takes,
    /// so that `register_manifest` can register it; `hooks` a hooks.json
    /// file (relative to the process's cwd) or document, whose `PreToolUse`
    /// and `PostToolUse` hooks run around `exec`'s commands.
    #[napi(factory)]
    pub fn open(
        home: Option<String>,
        compiler: Option<String>,
        environment: Option<Value>,
        trust: Option<Value>,
        manifest: Option<String>,
        hooks: Option<Value>,
    ) -> Result<NodeRegistry> {
        let manifest = manifest.map(|path| read_manifest(&path)).transpose()?;
        let trust = match (trust, &manifest) {
            // The host refuses both, whatever the option says.
            (Some(_), Some(_)) => Some(dsh_env::Trust::default()),
            (Some(value), None) => {
                let entry: TrustEntry = (serde_json::from_value(value))
                    .map_err(|e| invalid(format!("trust: {}", escape_controls(&e.to_string()))))?;
                Some((entry.trust()).map_err(|e| invalid(format!("trust: {e}")))?)
            }
            (None, _) => None,
        };
        // The option's policy, never the manifest's `[environment]`: this
        // package has always taken only the manifest's trust, home and hooks.
        let environment = match environment {
            None => dsh_env::EnvironmentPolicy::default(),
            Some(value) => {
                let entry: EnvironmentEntry = (serde_json::from_value(value)).map_err(|e| {
                    invalid(format!("environment: {}", escape_controls(&e.to_string())))
                })?;
                (entry.policy()).map_err(|e| invalid(format!("environment: {e}")))?
            }
        };
        let hooks = match hooks {
            Some(Value::String(path)) => HooksSource::File(PathBuf::from(path)),
            // The document is the option: no file to name.
            Some(document @ Value::Object(_)) => HooksSource::Document(document.to_string()),
            Some(_) => {
                return Err(invalid(
                    "hooks: expected a hooks.json file's path or its document (an object)",
                ));
            }
            None => HooksSource::Manifest,
        };
        let config = HostConfig {
            manifest,
            // The caller registers it with `register_manifest`.
            register_manifest: false,
            registry: RegistryConfig {
                home: home.map(|path| HomeSetting {
                    origin: "the home option".into(),
                    path,
                }),
                compiler: compiler.map(PathBuf::from),
                // A harness lives for a session: Winch code at once,
                // Cranelift's when it is ready.
                tiering: Tiering::Background,
                shared_engine: Some(runtime()?.clone()),
                ..RegistryConfig::default()
            },
            trust,
            environment: Some(environment),
            hooks,
            host_env: HostEnv::from_process(),
            // A harness makes many calls: the next one's instances are
            // made while each command runs.
            prepare_ahead: true,
        };
        // Nothing in opening waits (the manifest is not registered here).
        let host = run_here(Host::open(config)).map_err(thrown)?;
        Ok(NodeRegistry {
            host: Arc::new(host),
            handles: Handles::default(),
            next_id: AtomicU64::new(0),
            waited: AtomicBool::new(false),
        })
    }

    /// Loads, declares and registers the component at `path` (relative to
    /// the process's cwd), with `options` as a manifest entry's fields
    /// (`config`, `limits`, `grants`, `on_error`, `sha256`).
    #[napi(ts_return_type = "Promise<Registration>")]
    pub async fn register(&self, path: String, options: Option<Value>) -> Result<NodeRegistration> {
        let mut entry = options.unwrap_or_else(|| json!({}));
        let Some(fields) = entry.as_object_mut() else {
            return Err(invalid("register options must be an object"));
        };
        fields.insert("path".into(), Value::String(path));
        // The error names the option at fault by its path (`limits.deadline_ms`),
        // escaped, as serde quotes the caller's text (an unknown key).
        let entry: ContributorEntry = serde_path_to_error::deserialize(entry).map_err(|e| {
            let why = escape_controls(&e.inner().to_string()).into_owned();
            match e.path().to_string().as_str() {
                "." => invalid(format!("register options: {why}")),
                // A limit of the wrong type or sign is named as `e.limit` too.
                path => invalid_option(
                    format!("register options: {}: {why}", escape_controls(path)),
                    path.strip_prefix("limits."),
                ),
            }
        })?;
        let spec = (entry.to_spec(&PathBuf::from("."), &HostEnv::from_process())).map_err(|e| {
            let culprit = Culprit {
                contributor: entry.path.as_ref().map(|path| path.display().to_string()),
                ..Culprit::from(&e)
            };
            thrown(
                HostError::invalid(format!("register options of {}: {e}", entry.label()))
                    .naming(culprit),
            )
        })?;
        let registered = self.host.register_spec(&spec).await.map_err(thrown)?;
        Ok(self.handle(registered))
    }

    /// Registers every contributor of the manifest at `path` (relative to
    /// the process's cwd), all or nothing, by the manifest's rules (its
    /// pins, grants, limits and `[trust]`); the registry's home stays the
    /// one it was opened with.
    #[napi(ts_return_type = "Promise<Array<Registration>>")]
    pub async fn register_manifest(&self, path: String) -> Result<Vec<NodeRegistration>> {
        let manifest = read_manifest(&path)?;
        let host = Arc::clone(&self.host);
        // Loading may compile in a child process: a blocking wait, kept off
        // the runtime's workers; registering runs `declare` in the sandbox.
        let registered = tokio::task::spawn_blocking(move || {
            let host_env = HostEnv::from_process();
            tokio::runtime::Handle::current().block_on(host.register_manifest(&manifest, &host_env))
        })
        .await
        .map_err(|e| invalid(format!("registerManifest: {e}")))?
        .map_err(thrown)?;
        Ok(registered.into_iter().map(|r| self.handle(r)).collect())
    }

    /// Every key, built-ins included, sorted: `[{key, owner, description}]`.
    #[napi(ts_return_type = "Array<{ key: string; owner: string; description: string }>")]
    pub fn list(&self) -> Result<Value> {
        serde_json::to_value(self.host.list()).map_err(invalid)
    }

    /// Every registered contributor: name, origin, sha256, signer, grants,
    /// on_error.
    #[napi(ts_return_type = "Array<Record<string, unknown>>")]
    pub fn contributors(&self) -> Result<Value> {
        serde_json::to_value(self.host.contributors()).map_err(invalid)
    }

    /// The harness home this registry keeps its cache and store in.
    #[napi(getter)]
    pub fn home(&self) -> String {
        self.host.registry().home().as_str().to_string()
    }

    /// Every variable of this process's environment that `exec`'s commands
    /// would not inherit, by name (never its value), sorted:
    /// `[{name, rule, reason}]`, the rule as the CLI's `explain` names it.
    #[napi(ts_return_type = "Array<{ name: string; rule: string; reason: string }>")]
    pub fn scrubbed(&self) -> Value {
        let rows = self.host.environment().scrubbed_from_process().into_iter();
        Value::Array(
            rows.map(|(name, rule)| {
                serde_json::json!({"name": name, "rule": rule.rule(), "reason": rule.to_string()})
            })
            .collect(),
        )
    }

    /// How many contributors have an instance made ahead of their next call.
    #[napi]
    pub fn prepared(&self) -> u32 {
        u32::try_from(self.host.registry().prepared()).unwrap_or(u32::MAX)
    }

    /// The overlay for one execution, `{KEY: value}` sorted by key, and the
    /// contributors omitted under `on_error = "omit"`, as JSON; the
    /// execution comes as JSON too. (Both cross as one string each:
    /// converting objects property by property through N-API cost more than
    /// the collection itself; BENCHMARKS.md.)
    ///
    /// It runs on the calling thread for as long as nothing has to wait: a
    /// Rust contributor with an instance made ahead answers in microseconds,
    /// and a hop to the runtime and back would cost more than the collection.
    /// At its first wait (a busy guest yields from its third epoch tick on,
    /// so within 15 ms; a file opened for a grant; an instance being made) it
    /// moves to the runtime and the result is a Promise; and from then on this registry's
    /// collections start there, and each one starts the next call's
    /// preparation when it ends. A collection that answered at once leaves
    /// that to [`NodeRegistry::prepare_in_background`], which `index.js` calls
    /// once the caller has had its answer: waking the preparing thread costs
    /// the caller's thread microseconds that belong to the command it is
    /// about to start.
    #[napi(ts_return_type = "string | Promise<string>")]
    pub fn collect<'env>(
        &self,
        env: &'env Env,
        execution: String,
    ) -> Result<Either<String, PromiseRaw<'env, String>>> {
        let execution = self::execution(&execution)?;
        let registry = self.host.registry().clone();
        let mut collection = Box::pin(async move {
            let collection = registry.collect(&execution, &CollectOptions::new()).await;
            Ok(collection_json(collection.map_err(failed)?))
        });
        if !self.waited.load(Ordering::Relaxed) {
            // Calls back to back, with no time for the last preparation:
            // this one makes its instances itself, so the wake costs little
            // beside it, and the runtime then also drops finished instances
            // (32 at once on this thread otherwise: the p99).
            let back_to_back = !self.host.registry().is_prepared();
            let mut context = Context::from_waker(Waker::noop());
            let polled = within_runtime_if_available(|| collection.as_mut().poll(&mut context));
            if let Poll::Ready(result) = polled {
                if back_to_back {
                    self.prepare_in_background();
                }
                return result.map(Either::A);
            }
            self.waited.store(true, Ordering::Relaxed);
        }
        let host = Arc::clone(&self.host);
        env.spawn_future(async move {
            let result = collection.await;
            host.prepare_next();
            result
        })
        .map(Either::B)
    }

    /// What `explain` needs for one execution (JSON, as for `collect`):
    /// `collect`'s answer plus `why_absent`, each contributor with declared
    /// keys absent, its grants, manifest line, the end of its stderr during
    /// the call, and hints naming a grant it looked for and lacked.
    #[napi(ts_return_type = "Promise<string>")]
    pub async fn explain(&self, execution: String) -> Result<String> {
        let execution = self::execution(&execution)?;
        let explanation = self.host.explain(&execution).await.map_err(thrown)?;
        let why_absent = serde_json::to_value(explanation.absences).map_err(invalid)?;
        let mut answer = collection_value(explanation.collection);
        answer["why_absent"] = why_absent;
        Ok(answer.to_string())
    }

    /// Starts making the next call's instances on the host's preparing thread,
    /// unless every contributor has one or a preparation is already running.
    #[napi]
    pub fn prepare_in_background(&self) {
        self.host.prepare_next();
    }

    /// Every contributor alone for one execution (JSON, as for `collect`),
    /// synchronously, on the calling thread as `Registration.resolveSync`
    /// runs one (with a helper on the addon's runtime taking contributors
    /// too when two of them lately took 50 µs or more a call, the calling
    /// thread held until both are done), the execution read and converted
    /// once for all of them: by
    /// name, `{"overlay": {KEY: value}, "omitted": [message]}` with its keys
    /// only, or `{"error": {message, code, contributor?, key?}}` (one
    /// contributor's failure does not stop the others). For a registry that
    /// asks each contributor in turn within one synchronous collect (the
    /// reference harness's `ctx.shellEnv`, through the plugin).
    #[napi]
    pub fn resolve_each(&self, execution: String) -> Result<String> {
        let execution = self::execution(&execution)?;
        let each = run_here(
            (self.host.registry()).collect(&execution, &CollectOptions::new().each_alone()),
        );
        let answer: serde_json::Map<String, Value> = (each.into_iter())
            .map(|(name, result)| {
                let value = match result {
                    Ok(collection) => collection_value(collection),
                    Err(err) => json!({ "error": failure_body(&err.into()) }),
                };
                (name, value)
            })
            .collect();
        Ok(Value::Object(answer).to_string())
    }

    /// Collects for `execution` (JSON, as for `collect`), then runs
    /// `command` with `bash -c` in the agent's cwd through the local
    /// executor: the scrubbed inherited environment, then `env`, then the
    /// overlay. The next call's instances are made while it runs.
    /// With hooks, their `PreToolUse` hooks run first (a block is a
    /// `DSH_HOOK_BLOCKED` error) and their `PostToolUse` hooks after, and
    /// the result has what they said as `hooks`.
    #[napi(
        ts_args_type = "execution: string, command: string, env?: Record<string, string>, stdin?: string, timeoutMs?: number, permissionMode?: string",
        ts_return_type = "Promise<{ exit_code: number | null; stdout: string; stderr: string; timed_out: boolean; truncated: boolean; hooks?: { context: string[]; feedback: string[] } }>"
    )]
    pub async fn exec(
        &self,
        execution: String,
        command: String,
        env: Option<HashMap<String, String>>,
        stdin: Option<String>,
        timeout_ms: Option<f64>,
        permission_mode: Option<String>,
    ) -> Result<Value> {
        // A JavaScript number: checked here, as a cast would wrap -1 to 49 days.
        let timeout = timeout_ms
            .map(|ms| checked_timeout("timeoutMs", ms, ms, TimeoutUnit::Milliseconds))
            .transpose()
            .map_err(invalid)?;
        let permission_mode = (permission_mode.as_deref())
            .map(str::parse::<PermissionMode>)
            .transpose()
            .map_err(|e| invalid(format!("permissionMode: {e}")))?;
        let execution = self::execution(&execution)?;
        // The execution's own mode (its `run_in_background`) is what its
        // contributors see, as they did before the host ran the call.
        let background = execution.mode == Mode::Background;
        let mut call = BashRequest::new(execution, command);
        call.env = env.unwrap_or_default().into_iter().collect();
        call.stdin = stdin.map(String::into_bytes);
        call.timeout = timeout;
        call.permission_mode = permission_mode;
        call.background = background;
        let outcome = (self.host.run_bash(call, &Captured(LocalExecutor)).await).map_err(thrown)?;
        let mut report = serde_json::to_value(outcome.output).map_err(invalid)?;
        if let Some(notes) = outcome.notes {
            report["hooks"] = json!(notes);
        }
        Ok(report)
    }
}

impl NodeRegistry {
    /// A new handle for the contributor the host registered as `registered`.
    fn handle(&self, registered: Registered) -> NodeRegistration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let name = registered.name;
        lock(&self.handles).insert(name.clone(), id);
        NodeRegistration {
            name,
            id,
            handles: Arc::clone(&self.handles),
            host: Arc::clone(&self.host),
        }
    }
}

/// A registered contributor; it stays registered until `dispose()`.
#[napi(js_name = "Registration")]
pub struct NodeRegistration {
    name: String,
    id: u64,
    handles: Handles,
    host: Arc<Host>,
}

#[napi]
impl NodeRegistration {
    /// The contributor's declared name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// This contributor alone for one execution (JSON, as for `collect`),
    /// synchronously: `{"overlay": {KEY: value}, "omitted": [message]}`
    /// with its keys only, no built-ins. It holds the calling thread (the
    /// event loop) for the call: microseconds for a Rust contributor with an
    /// instance made ahead, at most the contributor's deadline
    /// (`limits.deadline_ms`) for one that spins, plus its instantiation
    /// when none was made ahead. A registry that asks every contributor in
    /// turn within one collect asks `Registry.resolveEach` once instead.
    #[napi]
    pub fn resolve_sync(&self, execution: String) -> Result<String> {
        let execution = self::execution(&execution)?;
        let (registry, name) = (self.host.registry(), self.name.as_str());
        match run_here(registry.collect(&execution, &CollectOptions::new().only(name))) {
            Ok(Some(collection)) => Ok(collection_value(collection).to_string()),
            Ok(None) => Err(thrown(
                HostError::new(
                    HostErrorCode::Disposed,
                    format!(
                        "contributor `{}` is no longer registered",
                        escape_controls(name)
                    ),
                )
                .naming(Culprit {
                    contributor: Some(name.to_string()),
                    ..Culprit::default()
                }),
            )),
            Err(err) => Err(failed(err)),
        }
    }

    /// Removes the contributor now; executions already collecting keep the
    /// set they started with. Disposing twice does nothing.
    #[napi]
    pub fn dispose(&self) {
        let mine = {
            let mut handles = lock(&self.handles);
            let mine = handles.get(&self.name) == Some(&self.id);
            if mine {
                handles.remove(&self.name);
            }
            mine
        };
        // Unregistered outside the lock; the host holds it, so it is there.
        if mine {
            let _ = self.host.dispose(&self.name);
        }
    }
}

/// The manifest at `path`, or a `DSH_MANIFEST` error naming it.
fn read_manifest(path: &str) -> Result<Manifest> {
    Manifest::from_file(path.as_ref()).map_err(|e| {
        let culprit = Culprit {
            file: Some(path.to_string()),
            ..Culprit::from(&e)
        };
        thrown(HostError::from(e).naming(culprit))
    })
}

/// `mutex`, locked: a panic elsewhere cannot leave a map of ids
/// half-changed, so a poisoned one is used as is.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `future` to its end on the calling thread: polled once within the
/// runtime's context, where a guest with an instance made ahead finishes,
/// then, only if it has to wait, blocked on.
fn run_here<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    match within_runtime_if_available(|| future.as_mut().poll(&mut context)) {
        Poll::Ready(output) => output,
        Poll::Pending => napi::bindgen_prelude::block_on(future),
    }
}

/// A collection as `collect` returns it: `{"overlay": {KEY: value},
/// "omitted": [message]}`.
fn collection_json(collection: dsh_env::Collection) -> String {
    collection_value(collection).to_string()
}

/// [`collection_json`]'s value.
fn collection_value(collection: dsh_env::Collection) -> Value {
    let overlay: serde_json::Map<String, Value> = (collection.overlay.iter())
        .map(|(key, value)| (key.to_string(), Value::String(value.to_string())))
        .collect();
    let omitted: Vec<String> = collection.omitted.iter().map(ToString::to_string).collect();
    json!({ "overlay": overlay, "omitted": omitted })
}

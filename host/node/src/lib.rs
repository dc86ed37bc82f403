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

use dsh_env::__internal::escape_controls;
use dsh_env::EnvironmentPolicy;
use dsh_env::{
    ArtifactCache, CacheKey, ContributorEntry, ContributorError, Culprit, DshHome, HomeContext,
    HomeSetting, HostEnv, Manifest, ManifestError, RegistryError, Runtime, SpecError,
    ToolExecution,
};
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};
use dsh_env::{EnvironmentEntry, TrustEntry};
use dsh_env_harness::hooks::{BashCall, HookDialect, Hooks, PermissionMode};
use dsh_env_harness::{
    ExecError, ExecReport, LocalExecutor, ShellExecRequest, TimeoutUnit, checked_timeout,
};
use napi::bindgen_prelude::*;
use napi_derive::napi;
use serde_json::{Value, json};

/// The one runtime (engine, instance pool, epoch thread) of this process,
/// shared by every registry opened in it.
fn runtime() -> Result<&'static Runtime> {
    static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            log_to_stderr();
            Runtime::new().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| failure(e, "DSH_RUNTIME", Culprit::default()))
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

/// An `Error` carrying `message`, a stable `code` and what `culprit` names,
/// as JSON for `index.js`.
fn failure(message: impl std::fmt::Display, code: &str, culprit: Culprit) -> Error {
    Error::from_reason(json!({ "dshEnv": failure_body(message, code, culprit) }).to_string())
}

/// What [`failure`] carries: `{message, code, contributor?, key?, file?, limit?}`.
fn failure_body(message: impl std::fmt::Display, code: &str, culprit: Culprit) -> Value {
    let mut body = serde_json::to_value(&culprit).unwrap_or_else(|_| json!({}));
    body["message"] = Value::String(message.to_string());
    body["code"] = Value::String(code.to_string());
    body
}

/// A bad argument.
fn invalid(message: impl std::fmt::Display) -> Error {
    failure(message, "DSH_INVALID_ARGUMENT", Culprit::default())
}

/// A bad option, naming the limit it sets, if it is one.
fn invalid_option(message: String, limit: Option<&str>) -> Error {
    let mut body = json!({"message": message, "code": "DSH_INVALID_ARGUMENT"});
    if let Some(limit) = limit {
        body["limit"] = Value::String(limit.to_string());
    }
    Error::from_reason(json!({ "dshEnv": body }).to_string())
}

/// A refused registration, with a code for its kind. A pin that no longer
/// matches says what a Node caller does about it, not only the CLI's `add`.
fn refused(err: &RegistryError) -> Error {
    let message = match err {
        RegistryError::Changed {
            origin,
            pinned,
            actual,
        } => format!(
            "{} changed since it was pinned: its sha256 is {actual}, but its pin is {pinned}; \
             review the new bytes, then pin them: `sha256: '{actual}'` in register()'s \
             options, or, for a manifest entry, the dsh-env CLI's `dsh-env add <component> \
             --manifest <manifest>` (this package does not edit manifests)",
            escape_controls(origin)
        ),
        RegistryError::Manifest(manifest) => match manifest.as_ref() {
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
            _ => err.to_string(),
        },
        _ => err.to_string(),
    };
    let code = match err {
        RegistryError::Load(_) => "DSH_LOAD",
        RegistryError::Contributor(_) => "DSH_CONTRIBUTOR",
        RegistryError::Declaration(_) => "DSH_DECLARATION",
        RegistryError::Manifest(_) | RegistryError::TrustMismatch { .. } => "DSH_MANIFEST",
        RegistryError::Spec { .. } => "DSH_INVALID_ARGUMENT",
        RegistryError::Changed { .. } => "DSH_CHANGED",
        RegistryError::Signature(_) => "DSH_SIGNATURE",
    };
    failure(message, code, err.into())
}

/// A contributor that failed an execution.
fn failed(err: &ContributorError) -> Error {
    failure(err, "DSH_CONTRIBUTOR", err.into())
}

/// A command that could not be run.
fn exec_failed(err: &ExecError) -> Error {
    let culprit = match err {
        ExecError::Env(env) => env.into(),
        _ => Culprit::default(),
    };
    failure(err, "DSH_EXEC", culprit)
}

/// The execution, as JSON (see `collect`), checked as the CLI checks
/// `--execution`.
fn execution(json: &str) -> Result<ToolExecution> {
    ToolExecution::from_json(json).map_err(|e| invalid(format!("execution: {e}")))
}

/// A registry: contributors registered by path, and the overlay they build
/// for each execution.
#[napi]
pub struct Registry {
    inner: dsh_env::Registry,
    /// The registrations, held here rather than by their JavaScript handles,
    /// so that the garbage collector never unregisters a contributor: only
    /// `dispose()` does.
    held: Held,
    next_id: AtomicU64,
    /// Whether a collection had to wait: later ones then start on the
    /// runtime rather than on the caller's thread.
    waited: AtomicBool,
    /// Whether a preparation started by a collection is still running.
    preparing: Arc<Mutex<Preparing>>,
    /// What `exec`'s commands inherit.
    environment: EnvironmentPolicy,
    /// The hooks around `exec`'s commands.
    hooks: Option<Hooks>,
}

/// Registrations by handle id.
type Held = Arc<Mutex<HashMap<u64, dsh_env::Registration>>>;

#[napi]
impl Registry {
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
    ) -> Result<Registry> {
        let manifest = manifest.map(|path| read_manifest(&path)).transpose()?;
        let trust = match (trust, &manifest) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "trust: give it in the manifest's [trust] or as the trust option, not both",
                ));
            }
            (None, Some(manifest)) => manifest
                .trust()
                .map_err(|e| failure(&e, "DSH_MANIFEST", Culprit::default()))?,
            (None, None) => dsh_env::Trust::default(),
            (Some(value), None) => {
                let entry: TrustEntry = (serde_json::from_value(value))
                    .map_err(|e| invalid(format!("trust: {}", escape_controls(&e.to_string()))))?;
                (entry.trust()).map_err(|e| invalid(format!("trust: {e}")))?
            }
        };
        let environment = match environment {
            None => EnvironmentPolicy::default(),
            Some(value) => {
                let entry: EnvironmentEntry = (serde_json::from_value(value)).map_err(|e| {
                    invalid(format!("environment: {}", escape_controls(&e.to_string())))
                })?;
                (entry.policy()).map_err(|e| invalid(format!("environment: {e}")))?
            }
        };
        let mut explicit: Vec<HomeSetting> = (home.into_iter())
            .map(|path| HomeSetting {
                origin: "the home option".into(),
                path,
            })
            .collect();
        // The cache's key lives in the embedder's own home (the option,
        // $DSH_HOME, ~/.dsh), never in one the manifest names: the manifest
        // may be a checkout's, and a checkout can fill a home it names.
        let context = HomeContext::from_process();
        let key = DshHome::resolve(&explicit, &context)
            .map_or(CacheKey::Absent, |home| CacheKey::in_home(&home));
        explicit.extend(manifest.as_ref().and_then(Manifest::home_setting));
        let home = DshHome::resolve(&explicit, &context)
            .map_err(|e| failure(&e, "DSH_HOME", Culprit::default()))?;
        let cache = ArtifactCache::new(home.path().join("cache")).with_key(key);
        // A harness lives for a session: Winch code at once, Cranelift's
        // when it is ready.
        let mut builder = dsh_env::Registry::builder(home)
            .runtime(runtime()?)
            .cache(cache)
            .trust(trust)
            .tiering(dsh_env::Tiering::Background);
        if let Some(path) = compiler {
            builder = builder.compiler(path);
        }
        let inner = (builder.build()).map_err(|e| failure(e, "DSH_RUNTIME", Culprit::default()))?;
        let hooks = read_hooks(hooks, manifest.as_ref())?;
        Ok(Registry {
            inner,
            held: Held::default(),
            next_id: AtomicU64::new(0),
            waited: AtomicBool::new(false),
            preparing: Arc::default(),
            environment,
            hooks,
        })
    }

    /// Loads, declares and registers the component at `path` (relative to
    /// the process's cwd), with `options` as a manifest entry's fields
    /// (`config`, `limits`, `grants`, `on_error`, `sha256`).
    #[napi(ts_return_type = "Promise<Registration>")]
    pub async fn register(&self, path: String, options: Option<Value>) -> Result<Registration> {
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
            failure(
                format!("register options of {}: {e}", entry.label()),
                "DSH_INVALID_ARGUMENT",
                Culprit {
                    contributor: entry.path.as_ref().map(|path| path.display().to_string()),
                    ..Culprit::from(&e)
                },
            )
        })?;
        let registry = self.inner.clone();
        // Loading may compile in a child process: a blocking wait, kept off
        // the runtime's workers.
        let component = tokio::task::spawn_blocking(move || {
            registry.load(LoadFrom::Spec(&spec), &LoadOptions::new())
        })
        .await
        .map_err(|e| invalid(format!("register: {e}")))?
        .map_err(|e| refused(&e))?;
        let registration = (self.inner.register(component).await).map_err(|e| refused(&e))?;
        Ok(self.hold(registration))
    }

    /// Registers every contributor of the manifest at `path` (relative to
    /// the process's cwd), all or nothing, by the manifest's rules (its
    /// pins, grants, limits and `[trust]`); the registry's home stays the
    /// one it was opened with.
    #[napi(ts_return_type = "Promise<Array<Registration>>")]
    pub async fn register_manifest(&self, path: String) -> Result<Vec<Registration>> {
        let manifest = read_manifest(&path)?;
        let registry = self.inner.clone();
        // Loading may compile in a child process: a blocking wait, kept off
        // the runtime's workers; registering runs `declare` in the sandbox.
        let registrations = tokio::task::spawn_blocking(move || {
            let host_env = HostEnv::from_process();
            tokio::runtime::Handle::current()
                .block_on(registry.register_manifest(&manifest, &host_env))
        })
        .await
        .map_err(|e| invalid(format!("registerManifest: {e}")))?
        .map_err(|e| refused(&e))?;
        Ok(registrations.into_iter().map(|r| self.hold(r)).collect())
    }

    /// Every key, built-ins included, sorted: `[{key, owner, description}]`.
    #[napi(ts_return_type = "Array<{ key: string; owner: string; description: string }>")]
    pub fn list(&self) -> Result<Value> {
        serde_json::to_value(self.inner.list()).map_err(invalid)
    }

    /// Every registered contributor: name, origin, sha256, signer, grants,
    /// on_error.
    #[napi(ts_return_type = "Array<Record<string, unknown>>")]
    pub fn contributors(&self) -> Result<Value> {
        serde_json::to_value(self.inner.contributors()).map_err(invalid)
    }

    /// The harness home this registry keeps its cache and store in.
    #[napi(getter)]
    pub fn home(&self) -> String {
        self.inner.home().as_str().to_string()
    }

    /// Every variable of this process's environment that `exec`'s commands
    /// would not inherit, by name (never its value), sorted:
    /// `[{name, rule, reason}]`, the rule as the CLI's `explain` names it.
    #[napi(ts_return_type = "Array<{ name: string; rule: string; reason: string }>")]
    pub fn scrubbed(&self) -> Value {
        let rows = self.environment.scrubbed_from_process().into_iter();
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
        u32::try_from(self.inner.prepared()).unwrap_or(u32::MAX)
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
    /// that to [`Registry::prepare_in_background`], which `index.js` calls
    /// once the caller has had its answer: waking a runtime thread costs the
    /// caller's thread microseconds that belong to the command it is about
    /// to start.
    #[napi(ts_return_type = "string | Promise<string>")]
    pub fn collect<'env>(
        &self,
        env: &'env Env,
        execution: String,
    ) -> Result<Either<String, PromiseRaw<'env, String>>> {
        let execution = self::execution(&execution)?;
        let registry = self.inner.clone();
        let mut collection = Box::pin(async move {
            let collection = registry.collect(&execution, &CollectOptions::new()).await;
            Ok(collection_json(collection.map_err(|e| failed(&e))?))
        });
        if !self.waited.load(Ordering::Relaxed) {
            // Calls back to back, with no time for the last preparation:
            // this one makes its instances itself, so the wake costs little
            // beside it, and the runtime then also drops finished instances
            // (32 at once on this thread otherwise: the p99).
            let back_to_back = !self.inner.is_prepared();
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
        let (registry, preparing) = (self.inner.clone(), Arc::clone(&self.preparing));
        env.spawn_future(async move {
            let result = collection.await;
            prepare_in_background(registry, preparing);
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
        let collection = (self
            .inner
            .collect(&execution, &CollectOptions::new().traced(true))
            .await)
            .map_err(|e| failed(&e))?;
        let why_absent = serde_json::to_value(self.inner.absences(&collection)).map_err(invalid)?;
        let mut answer = collection_value(collection);
        answer["why_absent"] = why_absent;
        Ok(answer.to_string())
    }

    /// Starts making the next call's instances on the runtime, unless every
    /// contributor has one or a preparation is already running.
    #[napi]
    pub fn prepare_in_background(&self) {
        prepare_in_background(self.inner.clone(), Arc::clone(&self.preparing));
    }

    /// Every contributor alone for one execution (JSON, as for `collect`),
    /// synchronously, on the calling thread as `Registration.resolveSync`
    /// runs one, the execution read and converted once for all of them: by
    /// name, `{"overlay": {KEY: value}, "omitted": [message]}` with its keys
    /// only, or `{"error": {message, code, contributor?, key?}}` (one
    /// contributor's failure does not stop the others). For a registry that
    /// asks each contributor in turn within one synchronous collect (the
    /// reference harness's `ctx.shellEnv`, through the plugin).
    #[napi]
    pub fn resolve_each(&self, execution: String) -> Result<String> {
        let execution = self::execution(&execution)?;
        let each = run_here(
            self.inner
                .collect(&execution, &CollectOptions::new().each_alone()),
        );
        let answer: serde_json::Map<String, Value> = (each.into_iter())
            .map(|(name, result)| {
                let value = match result {
                    Ok(collection) => collection_value(collection),
                    Err(err) => {
                        json!({ "error": failure_body(&err, "DSH_CONTRIBUTOR", (&err).into()) })
                    }
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
        let overlay = (self.inner.collect(&execution, &CollectOptions::new()).await)
            .map_err(|e| failed(&e))?
            .overlay;
        self.prepare_in_background();
        let around = match &self.hooks {
            Some(hooks) => {
                let call = BashCall::new(&execution, &command, timeout, permission_mode)
                    .map_err(|e| failure(e, "DSH_EXEC", Culprit::default()))?;
                let notes = (hooks.before_bash(&call, &overlay).await)
                    .map_err(|blocked| failure(blocked, "DSH_HOOK_BLOCKED", Culprit::default()))?;
                Some((hooks, call, notes))
            }
            None => None,
        };
        let mut request = ShellExecRequest::for_execution(command, &execution, overlay.clone())
            .map_err(|e| failure(e, "DSH_EXEC", Culprit::default()))?;
        request.env = env.unwrap_or_default().into_iter().collect();
        request.environment = self.environment.clone();
        request.stdin = stdin.map(String::into_bytes);
        if let Some(timeout) = timeout {
            request.timeout = timeout;
        }
        let output = (LocalExecutor.run(request).await).map_err(|e| exec_failed(&e))?;
        let mut report = serde_json::to_value(ExecReport::from(output)).map_err(invalid)?;
        if let Some((hooks, call, mut notes)) = around {
            (hooks.after_bash(&call, &overlay, report.clone(), &mut notes)).await;
            report["hooks"] = json!(notes);
        }
        Ok(report)
    }
}

impl Registry {
    /// Keeps `registration` until its handle's `dispose()`.
    fn hold(&self, registration: dsh_env::Registration) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let name = registration.name().to_string();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.insert(id, registration);
        Registration {
            name,
            id,
            held: Arc::clone(&self.held),
            registry: self.inner.clone(),
        }
    }
}

/// A registered contributor; it stays registered until `dispose()`.
#[napi]
pub struct Registration {
    name: String,
    id: u64,
    held: Held,
    registry: dsh_env::Registry,
}

#[napi]
impl Registration {
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
        let (registry, name) = (&self.registry, self.name.as_str());
        match run_here(registry.collect(&execution, &CollectOptions::new().only(name))) {
            Ok(Some(collection)) => Ok(collection_value(collection).to_string()),
            Ok(None) => Err(failure(
                format!(
                    "contributor `{}` is no longer registered",
                    escape_controls(name)
                ),
                "DSH_DISPOSED",
                Culprit {
                    contributor: Some(name.to_string()),
                    ..Culprit::default()
                },
            )),
            Err(err) => Err(failed(&err)),
        }
    }

    /// Removes the contributor now; executions already collecting keep the
    /// set they started with. Disposing twice does nothing.
    #[napi]
    pub fn dispose(&self) {
        let taken = (self.held.lock().unwrap_or_else(|p| p.into_inner())).remove(&self.id);
        // Unregistered here, outside the lock.
        drop(taken);
    }
}

/// The hooks of the `hooks` option (a file's path or a hooks.json
/// document), else of the manifest's `hooks`, read and checked.
fn read_hooks(option: Option<Value>, manifest: Option<&Manifest>) -> Result<Option<Hooks>> {
    let dialect = HookDialect::ClaudeCode;
    let read = match (option, manifest.and_then(Manifest::hooks_setting)) {
        (Some(Value::String(path)), _) => {
            Hooks::from_file(path.as_ref(), dialect).map_err(|e| e.to_string())
        }
        // The document is the option: no file to name.
        (Some(document @ Value::Object(_)), _) => {
            Hooks::parse(&document.to_string(), "hooks", dialect).map_err(|e| e.message)
        }
        (Some(_), _) => {
            Err("expected a hooks.json file's path or its document (an object)".to_string())
        }
        (None, Some(setting)) => Hooks::from_file(&setting.path, dialect)
            .map_err(|e| format!("hooks file {} ({}): {}", e.path, setting.origin, e.message)),
        (None, None) => return Ok(None),
    };
    read.map(Some)
        .map_err(|e| invalid(format!("hooks: {}", escape_controls(&e))))
}

/// The manifest at `path`, or a `DSH_MANIFEST` error naming it.
fn read_manifest(path: &str) -> Result<Manifest> {
    Manifest::from_file(path.as_ref()).map_err(|e| {
        let culprit = Culprit {
            file: Some(path.to_string()),
            ..Culprit::from(&e)
        };
        failure(&e, "DSH_MANIFEST", culprit)
    })
}

/// A registry's background preparation: whether one runs, and whether a
/// collection asked for another while it ran.
#[derive(Default)]
struct Preparing {
    running: bool,
    again: bool,
}

/// Makes the next call's instances on the runtime, one preparation at a time
/// however many collections end at once, and only when one is missing. A
/// request that comes while one runs makes it go round once more when it
/// ends: that one may have passed the contributor whose instance the
/// request's collection took, and dropping the request left it with
/// nothing made and nothing making it (the bench stopped on it).
fn prepare_in_background(registry: dsh_env::Registry, preparing: Arc<Mutex<Preparing>>) {
    if registry.is_prepared() {
        return;
    }
    {
        let mut state = preparing.lock().unwrap_or_else(|p| p.into_inner());
        if state.running {
            state.again = true;
            return;
        }
        state.running = true;
    }
    // On a runtime thread rather than the caller's, even when it would not
    // wait: tried, that made the next call slower (BENCHMARKS.md).
    napi::bindgen_prelude::spawn(async move {
        loop {
            registry.prepare().await;
            let mut state = preparing.lock().unwrap_or_else(|p| p.into_inner());
            if !std::mem::take(&mut state.again) {
                state.running = false;
                return;
            }
        }
    });
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

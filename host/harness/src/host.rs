//! The host: what every front end (`dsh-env run`, `resolve`, `explain`,
//! `serve`, `hook`, the Node addon, the harness's own bash tool) does with a
//! registry, written once. A front end turns its arguments into a
//! [`HostConfig`], opens a [`Host`] with it, and turns what it asks into the
//! host's calls: [`Host::collect`], [`Host::explain`] and [`Host::run_bash`],
//! one bash call run whole (hooks before, one collect, the command, hooks
//! after). How the command runs is the front end's own ([`BashRunner`]).
//!
//! Failures are one type, [`HostError`], with a stable [`HostErrorCode`] and
//! what is at fault as data ([`Culprit`]); its message says what went wrong
//! and never what to run about it: each front end words its own remedy, and
//! maps the code to its exit code, RPC code or JavaScript error from one
//! table.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use dsh_env::{
    Absence, ArtifactCache, CacheKey, CompileProgress, ContributorError, ContributorListing,
    ContributorSpec, Culprit, DshHome, DshKey, EngineError, EnvironmentPolicy, HomeContext,
    HomeError, HomeSetting, HooksSetting, HostEnv, KeyListing, Manifest, ManifestError, Mode,
    Overlay, Registration, Registry, RegistryError, SharedEngine, Tiering, ToolExecution, Trust,
};
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};
use dsh_env_support::input::escape_controls;
use serde_json::Value;

use crate::executor::{ExecError, LocalExecutor, ShellExecRequest, ShellExecutor};
use crate::hooks::{
    BashCall, HookBlocked, HookDialect, HookNotes, Hooks, HooksError, PermissionMode,
};
use crate::preparer::Preparer;

pub use dsh_env::Collection;

/// A stable name for the kind of a [`HostError`], which front ends map to
/// their own vocabulary (exit codes, RPC codes, JavaScript codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostErrorCode {
    /// An argument or option given by the caller is invalid (a hooks file
    /// included).
    InvalidArgument,
    /// A manifest could not be read or is invalid, or its `[trust]` is not
    /// the registry's.
    Manifest,
    /// A component could not be loaded.
    Load,
    /// A contributor failed: its `declare` at registration, or a call.
    Contributor,
    /// A declaration broke a rule.
    Declaration,
    /// A component's bytes are not the ones its entry pins.
    Changed,
    /// A component's signature was refused.
    Signature,
    /// A `PreToolUse` hook kept the command from running.
    HookBlocked,
    /// The command could not be run.
    Exec,
    /// The runtime (engine, instance pool) could not be started.
    Runtime,
    /// No home could be decided.
    Home,
    /// The contributor named is not registered (any more).
    Disposed,
    /// The command ran past its timeout.
    TimedOut,
}

impl HostErrorCode {
    /// Its name: the Node addon's `code` (`DSH_*`), public in the npm package.
    pub fn as_str(self) -> &'static str {
        match self {
            HostErrorCode::InvalidArgument => "DSH_INVALID_ARGUMENT",
            HostErrorCode::Manifest => "DSH_MANIFEST",
            HostErrorCode::Load => "DSH_LOAD",
            HostErrorCode::Contributor => "DSH_CONTRIBUTOR",
            HostErrorCode::Declaration => "DSH_DECLARATION",
            HostErrorCode::Changed => "DSH_CHANGED",
            HostErrorCode::Signature => "DSH_SIGNATURE",
            HostErrorCode::HookBlocked => "DSH_HOOK_BLOCKED",
            HostErrorCode::Exec => "DSH_EXEC",
            HostErrorCode::Runtime => "DSH_RUNTIME",
            HostErrorCode::Home => "DSH_HOME",
            HostErrorCode::Disposed => "DSH_DISPOSED",
            HostErrorCode::TimedOut => "DSH_TIMED_OUT",
        }
    }
}

impl std::fmt::Display for HostErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When a [`HostError`] happened: while the host was opened from its
/// configuration (the CLI's configuration errors), or during a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// [`Host::open`] (or [`Host::set_hooks`]): the configuration is at fault.
    Opening,
    /// A call on an open host.
    Calling,
}

/// Why the host could not do what it was asked: a stable code, what is at
/// fault as data, and a message with no remedy (a front end adds its own).
/// The error it comes from is its [`std::error::Error::source`], for a front
/// end that words a remedy by variant.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct HostError {
    /// The kind of failure.
    pub code: HostErrorCode,
    /// When it happened.
    pub stage: Stage,
    /// What is at fault: contributor, key, file, limit (boxed: a `Result`
    /// with this error stays small).
    pub culprit: Box<Culprit>,
    /// What went wrong, in one line; guest and user text escaped.
    pub message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl HostError {
    /// An error of `code`, saying `message`, naming nothing.
    pub fn new(code: HostErrorCode, message: impl std::fmt::Display) -> Self {
        HostError {
            code,
            stage: Stage::Calling,
            culprit: Box::default(),
            message: message.to_string(),
            source: None,
        }
    }

    /// An invalid argument, saying `message`.
    pub fn invalid(message: impl std::fmt::Display) -> Self {
        Self::new(HostErrorCode::InvalidArgument, message)
    }

    /// `source` as an error of `code`, naming `culprit`.
    fn from_source<E>(code: HostErrorCode, culprit: Culprit, source: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        HostError {
            code,
            stage: Stage::Calling,
            culprit: Box::new(culprit),
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }

    /// The same error, naming `culprit`.
    pub fn naming(mut self, culprit: Culprit) -> Self {
        self.culprit = Box::new(culprit);
        self
    }

    /// The same error, with `prefix` before its message.
    pub fn prefixed(mut self, prefix: impl std::fmt::Display) -> Self {
        self.message = format!("{prefix}{}", self.message);
        self
    }

    /// The same error, as one of opening the host.
    fn opening(mut self) -> Self {
        self.stage = Stage::Opening;
        self
    }

    /// The error it comes from, if it is an `E`.
    pub fn source_as<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.source.as_deref()?.downcast_ref::<E>()
    }

    /// The error it comes from, if it is an `E`; else the error itself.
    pub fn into_source<E: std::error::Error + 'static>(mut self) -> Result<E, HostError> {
        match self.source.take().map(|source| source.downcast::<E>()) {
            Some(Ok(source)) => Ok(*source),
            Some(Err(source)) => {
                self.source = Some(source);
                Err(self)
            }
            None => Err(self),
        }
    }
}

impl From<RegistryError> for HostError {
    fn from(err: RegistryError) -> Self {
        let code = match &err {
            RegistryError::Load(_) => HostErrorCode::Load,
            RegistryError::Contributor(_) => HostErrorCode::Contributor,
            RegistryError::Declaration(_) => HostErrorCode::Declaration,
            RegistryError::Manifest(_) | RegistryError::TrustMismatch { .. } => {
                HostErrorCode::Manifest
            }
            RegistryError::Spec { .. } => HostErrorCode::InvalidArgument,
            RegistryError::Changed { .. } => HostErrorCode::Changed,
            RegistryError::Signature(_) => HostErrorCode::Signature,
        };
        Self::from_source(code, Culprit::from(&err), err)
    }
}

impl From<ContributorError> for HostError {
    fn from(err: ContributorError) -> Self {
        Self::from_source(HostErrorCode::Contributor, Culprit::from(&err), err)
    }
}

impl From<ManifestError> for HostError {
    fn from(err: ManifestError) -> Self {
        Self::from_source(HostErrorCode::Manifest, Culprit::default(), err)
    }
}

impl From<HomeError> for HostError {
    fn from(err: HomeError) -> Self {
        Self::from_source(HostErrorCode::Home, Culprit::default(), err)
    }
}

impl From<EngineError> for HostError {
    fn from(err: EngineError) -> Self {
        Self::from_source(HostErrorCode::Runtime, Culprit::default(), err)
    }
}

impl From<ExecError> for HostError {
    fn from(err: ExecError) -> Self {
        let culprit = match &err {
            ExecError::Env(env) => Culprit::from(env),
            _ => Culprit::default(),
        };
        Self::from_source(HostErrorCode::Exec, culprit, err)
    }
}

impl From<HookBlocked> for HostError {
    fn from(err: HookBlocked) -> Self {
        Self::from_source(HostErrorCode::HookBlocked, Culprit::default(), err)
    }
}

/// A `Result` with a [`HostError`].
pub type HostResult<T> = Result<T, HostError>;

/// How a registry is built: its home, compile cache, compiler, tiering and
/// runtime. [`Host::open`] uses it; a front end that needs a registry and no
/// host (the CLI's `add`, `check`, `pull`) builds one with it too.
#[derive(Clone, Default)]
pub struct RegistryConfig {
    /// The front end's own home setting (`--home`, the addon's `home`
    /// option): before the manifest's `home`, `$DSH_HOME` and `~/.dsh`.
    pub home: Option<HomeSetting>,
    /// The compile cache's size cap (default: the cache's own).
    pub cache_max_bytes: Option<u64>,
    /// The compile helper (default: `$DSH_ENV_COMPILER`, then `PATH`).
    pub compiler: Option<PathBuf>,
    /// How a component missing from the cache is compiled.
    pub tiering: Tiering,
    /// An engine and runtime shared with other registries of the process
    /// (default: one of the registry's own).
    pub shared_engine: Option<SharedEngine>,
    /// Told of each compile, e.g. to show progress on a terminal.
    pub compile_progress: Option<Arc<dyn CompileProgress>>,
}

impl RegistryConfig {
    /// The home: [`RegistryConfig::home`], then `manifest`'s `home`, then
    /// `$DSH_HOME`, then `~/.dsh`; and where it came from.
    pub fn home(&self, manifest: Option<&Manifest>) -> HostResult<(DshHome, String)> {
        let mut explicit: Vec<HomeSetting> = self.home.iter().cloned().collect();
        explicit.extend(manifest.and_then(Manifest::home_setting));
        Ok(DshHome::resolve_explained(
            &explicit,
            &HomeContext::from_process(),
        )?)
    }

    /// The key that authenticates the compile cache: the one in the user's
    /// own home ([`RegistryConfig::home`], `$DSH_HOME`, `~/.dsh`), never in
    /// a home a manifest names, which a checkout can fill with files of its
    /// own (docs/compiling.md). Without a user home, none: the cache is not
    /// used.
    pub fn cache_key(&self) -> CacheKey {
        let explicit: Vec<HomeSetting> = self.home.iter().cloned().collect();
        DshHome::resolve(&explicit, &HomeContext::from_process())
            .map_or(CacheKey::Absent, |home| CacheKey::in_home(&home))
    }

    /// The compile cache in `home`, authenticated with
    /// [`RegistryConfig::cache_key`], capped as configured.
    pub fn cache(&self, home: &DshHome) -> ArtifactCache {
        let cache = ArtifactCache::new(home.path().join("cache")).with_key(self.cache_key());
        match self.cache_max_bytes {
            Some(max) => cache.with_max_bytes(max),
            None => cache,
        }
    }

    /// A registry for `home` that registers only what `trust` admits,
    /// keeping compiled components in its [`RegistryConfig::cache`].
    pub fn build(&self, home: DshHome, trust: Trust) -> HostResult<Registry> {
        let cache = self.cache(&home);
        self.build_with_cache(home, cache, trust)
    }

    /// [`RegistryConfig::build`], keeping compiled components in `cache`.
    pub fn build_with_cache(
        &self,
        home: DshHome,
        cache: ArtifactCache,
        trust: Trust,
    ) -> HostResult<Registry> {
        let mut builder = Registry::builder(home)
            .cache(cache)
            .trust(trust)
            .tiering(self.tiering);
        if let Some(shared) = &self.shared_engine {
            builder = builder.shared_engine(shared);
        }
        if let Some(compiler) = &self.compiler {
            builder = builder.compiler(compiler);
        }
        if let Some(progress) = &self.compile_progress {
            builder = builder.compile_progress(Arc::clone(progress));
        }
        Ok(builder.build()?)
    }
}

/// Where the hooks around [`Host::run_bash`]'s commands come from.
#[derive(Debug, Clone, Default)]
pub enum HooksSource {
    /// No hooks.
    None,
    /// The manifest's `hooks` file, read when the host opens (none when the
    /// manifest names none).
    #[default]
    Manifest,
    /// A hooks.json file (relative to the process's working directory).
    File(PathBuf),
    /// A hooks.json document given as is (no file to name).
    Document(String),
    /// The text of the manifest's hooks file as it was approved with the
    /// manifest: what runs, never read again.
    Approved {
        /// The file, and where the manifest names it.
        setting: HooksSetting,
        /// Its approved text.
        text: String,
    },
}

/// Everything a [`Host`] is opened with.
#[derive(Clone)]
pub struct HostConfig {
    /// The manifest, already found (and approved) by the front end: its
    /// `[trust]`, `home`, `[environment]` and `hooks` apply unless given
    /// here, and its contributors are registered when
    /// [`HostConfig::register_manifest`] says so.
    pub manifest: Option<Manifest>,
    /// Whether [`Host::open`] registers the manifest's contributors (the
    /// CLI), or only takes its settings (the Node addon, whose caller then
    /// calls [`Host::register_manifest`]).
    pub register_manifest: bool,
    /// How the registry is built.
    pub registry: RegistryConfig,
    /// The trust every registration passes, instead of the manifest's
    /// `[trust]` (giving both is an invalid argument); without either,
    /// trust in nobody.
    pub trust: Option<Trust>,
    /// What commands inherit, instead of the manifest's `[environment]`;
    /// without either, the default.
    pub environment: Option<EnvironmentPolicy>,
    /// The hooks around [`Host::run_bash`]'s commands.
    pub hooks: HooksSource,
    /// What `grants.env` may copy.
    pub host_env: HostEnv,
    /// Whether the host makes the next call's instances ahead (a harness or
    /// a server, which serve many calls), or not (a command that makes one).
    pub prepare_ahead: bool,
}

impl HostConfig {
    /// A configuration with `manifest` (registered when the host opens), its
    /// settings, no hooks of the caller's own, and `tiering`.
    pub fn new(manifest: Option<Manifest>, tiering: Tiering) -> Self {
        HostConfig {
            manifest,
            register_manifest: true,
            registry: RegistryConfig {
                tiering,
                ..RegistryConfig::default()
            },
            trust: None,
            environment: None,
            hooks: HooksSource::Manifest,
            host_env: HostEnv::from_process(),
            prepare_ahead: false,
        }
    }
}

/// One bash call, as every front end can describe it.
#[derive(Debug, Clone)]
pub struct BashRequest {
    /// The call: its id, agent and cwd (its mode is set from `background`).
    pub execution: ToolExecution,
    /// The command line, run as `bash -c`.
    pub command: String,
    /// Ordinary variables for the command (no `DSH_*` names).
    pub env: BTreeMap<String, String>,
    /// Bytes for its stdin, for a runner that gives it some.
    pub stdin: Option<Vec<u8>>,
    /// Kill it after this long (shown to hooks as `timeout` when given and
    /// not in the background); without it the runner's default.
    pub timeout: Option<Duration>,
    /// Sent to hooks as `permission_mode`.
    pub permission_mode: Option<PermissionMode>,
    /// Started in the background: the execution's mode is `background`.
    pub background: bool,
    /// What the hooks see as `tool_input` when the front end has the tool's
    /// own arguments (the agent loop: the model's); without it, `command`,
    /// `timeout` and `run_in_background`, as Claude Code's Bash tool has it.
    pub tool_input: Option<Value>,
    /// Where the command and its hooks run when the execution's agent has
    /// no cwd (the bash tool's default directory); without it, this
    /// process's working directory.
    pub default_workdir: Option<PathBuf>,
}

impl BashRequest {
    /// `command` for `execution`, with nothing else set.
    pub fn new(execution: ToolExecution, command: impl Into<String>) -> Self {
        BashRequest {
            execution,
            command: command.into(),
            env: BTreeMap::new(),
            stdin: None,
            timeout: None,
            permission_mode: None,
            background: false,
            tool_input: None,
            default_workdir: None,
        }
    }
}

/// What a [`BashRunner`] gives back: what the `PostToolUse` hooks see as
/// `tool_response`, and the front end's own result.
#[derive(Debug)]
pub struct Ran<T> {
    /// The `PostToolUse` payload's `tool_response`.
    pub tool_response: Value,
    /// The front end's result (captured output, an exit status, a handle).
    pub output: T,
}

/// How a front end runs a bash call's command: capturing its output
/// ([`Captured`]), on a terminal (`dsh-env run`), or through the harness's
/// executor. The request has the overlay, environment policy, env, stdin
/// and timeout set; `mode` says whether the call is a background one.
pub trait BashRunner: Send + Sync {
    /// The front end's result.
    type Output: Send;
    /// Runs `request` (or starts it, in the background).
    fn run(
        &self,
        request: ShellExecRequest,
        mode: Mode,
    ) -> impl Future<Output = Result<Ran<Self::Output>, ExecError>> + Send;
}

/// A runner that captures the command's output through an executor, in
/// the foreground (`serve`'s and the addon's `exec`): the `tool_response`
/// is the [`crate::ExecReport`], which is also the output.
#[derive(Debug, Clone, Default)]
pub struct Captured<E = LocalExecutor>(pub E);

impl<E: ShellExecutor> BashRunner for Captured<E> {
    type Output = crate::ExecReport;

    async fn run(
        &self,
        request: ShellExecRequest,
        _mode: Mode,
    ) -> Result<Ran<Self::Output>, ExecError> {
        let report = crate::ExecReport::from(self.0.run(request).await?);
        let tool_response = serde_json::to_value(&report).unwrap_or(Value::Null);
        Ok(Ran {
            tool_response,
            output: report,
        })
    }
}

/// A bash call that ran: the runner's result, and what the hooks said
/// (`None` when the host has no hooks).
#[derive(Debug)]
pub struct BashOutcome<T> {
    /// The runner's result.
    pub output: T,
    /// What the `PreToolUse` and `PostToolUse` hooks said.
    pub notes: Option<HookNotes>,
    /// The contributors left out of the overlay under `on_error = "omit"`.
    pub omitted: Vec<ContributorError>,
}

/// [`Host::explain`]'s answer: a traced collection, and for each
/// contributor with declared keys absent, what its call showed.
#[derive(Debug)]
pub struct Explanation {
    /// The overlay, the omitted contributors and each call's trace.
    pub collection: Collection,
    /// Why declared keys are absent, as far as the calls showed.
    pub absences: Vec<Absence>,
}

/// A contributor registered through [`Host::register_spec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    /// Its declared name.
    pub name: String,
    /// The keys it declared.
    pub keys: Vec<DshKey>,
}

/// When a host makes the next call's instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Preparation {
    /// Only when [`Host::prepare_next`] is called (a command that makes one
    /// call).
    Asked,
    /// Also once each bash call's overlay is collected, on the host's
    /// preparing thread (`serve`, the Node addon).
    Spawned,
    /// Beside each bash call's command, in the call's own task, so that it
    /// is done when the call returns (the harness's own bash tool: a
    /// separate task can still be running when the next call starts;
    /// BENCHMARKS.md).
    BesideCommand,
}

/// A registry opened from one configuration, with the contributors it
/// registered, the hooks around bash calls (run with `E`), and when the
/// next call's instances are made.
pub struct Host<E = LocalExecutor> {
    registry: Registry,
    /// By name; a contributor stays registered while its registration is held.
    registrations: Mutex<HashMap<String, Registration>>,
    environment: EnvironmentPolicy,
    home_origin: String,
    /// Replaced whole by [`Host::set_hooks`]; held only to clone the `Arc`.
    hooks: Mutex<Option<Arc<Hooks<E>>>>,
    hooks_executor: E,
    host_env: HostEnv,
    preparation: Preparation,
    preparer: Preparer,
}

impl Host {
    /// Opens a host: decides the home, builds the registry with the cache
    /// key of the user's own home, takes the trust and environment policy,
    /// registers the manifest's contributors (when the configuration says
    /// so) and reads the hooks. Every error is of [`Stage::Opening`].
    pub async fn open(config: HostConfig) -> HostResult<Host> {
        Self::open_inner(config).await.map_err(HostError::opening)
    }

    async fn open_inner(config: HostConfig) -> HostResult<Host> {
        let manifest = config.manifest.as_ref();
        let trust = match (config.trust, manifest) {
            (Some(_), Some(_)) => {
                return Err(HostError::invalid(
                    "trust: give it in the manifest's [trust] or as the trust option, not both",
                ));
            }
            (Some(trust), None) => trust,
            (None, Some(manifest)) => manifest.trust()?,
            (None, None) => Trust::default(),
        };
        let (home, home_origin) = config.registry.home(manifest)?;
        let registry = config.registry.build(home, trust)?;
        let registrations = match manifest {
            Some(manifest) if config.register_manifest => {
                (registry.register_manifest(manifest, &config.host_env).await)?
            }
            _ => Vec::new(),
        };
        let environment = match (config.environment, manifest) {
            (Some(policy), _) => policy,
            (None, Some(manifest)) => manifest.environment()?,
            (None, None) => EnvironmentPolicy::default(),
        };
        let hooks = read_hooks(&config.hooks, manifest)?;
        Ok(Host {
            registry,
            registrations: Mutex::new(
                (registrations.into_iter())
                    .map(|r| (r.name().to_string(), r))
                    .collect(),
            ),
            environment,
            home_origin,
            hooks: Mutex::new(hooks.map(Arc::new)),
            hooks_executor: LocalExecutor,
            host_env: config.host_env,
            preparation: if config.prepare_ahead {
                Preparation::Spawned
            } else {
                Preparation::Asked
            },
            preparer: Preparer::default(),
        })
    }
}

impl<E: ShellExecutor + Clone> Host<E> {
    /// A host over `registry`, which its caller built and registers
    /// contributors in (the harness's own bash tool and agent loop): with
    /// `hooks` around its bash calls, `executor` to run hooks set later,
    /// the default environment policy, and the next call's instances made
    /// beside each command.
    pub fn over(registry: Registry, hooks: Option<Hooks<E>>, executor: E) -> Self {
        Host {
            registry,
            registrations: Mutex::default(),
            environment: EnvironmentPolicy::default(),
            home_origin: "the registry's".to_string(),
            hooks: Mutex::new(hooks.map(Arc::new)),
            hooks_executor: executor,
            host_env: HostEnv::default(),
            preparation: Preparation::BesideCommand,
            preparer: Preparer::default(),
        }
    }

    /// The same host, its hooks run by `executor` instead.
    pub fn with_hooks_executor<F: ShellExecutor + Clone>(self, executor: F) -> Host<F> {
        let hooks = lock(&self.hooks).take();
        let hooks = hooks.map(|hooks| {
            let hooks = Arc::try_unwrap(hooks).unwrap_or_else(|shared| (*shared).clone());
            Arc::new(hooks.with_executor(executor.clone()))
        });
        Host {
            registry: self.registry,
            registrations: self.registrations,
            environment: self.environment,
            home_origin: self.home_origin,
            hooks: Mutex::new(hooks),
            hooks_executor: executor,
            host_env: self.host_env,
            preparation: self.preparation,
            preparer: self.preparer,
        }
    }

    /// Replaces the hooks with those of `source` (`serve`'s `initialize`);
    /// [`HooksSource::Manifest`] has none here (the manifest was read when
    /// the host opened). A bad file is an error of [`Stage::Opening`].
    pub fn set_hooks(&self, source: &HooksSource) -> HostResult<()> {
        let hooks = read_hooks(source, None).map_err(HostError::opening)?;
        let hooks = hooks.map(|hooks| Arc::new(hooks.with_executor(self.hooks_executor.clone())));
        *lock(&self.hooks) = hooks;
        Ok(())
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// What commands inherit: the configuration's policy, the manifest's
    /// `[environment]`, or the default.
    pub fn environment(&self) -> &EnvironmentPolicy {
        &self.environment
    }

    /// Where the home came from: the front end's setting, the manifest,
    /// `$DSH_HOME` or the default.
    pub fn home_origin(&self) -> &str {
        &self.home_origin
    }

    /// The hooks around bash calls, if any.
    pub fn hooks(&self) -> Option<Arc<Hooks<E>>> {
        lock(&self.hooks).clone()
    }

    /// The executor the hooks run with.
    pub fn hooks_executor(&self) -> &E {
        &self.hooks_executor
    }

    /// The overlay for `execution`, and the contributors omitted from it.
    pub async fn collect(&self, execution: &ToolExecution) -> HostResult<Collection> {
        Ok(self
            .registry
            .collect(execution, &CollectOptions::new())
            .await?)
    }

    /// A traced collection for `execution`, and why declared keys are
    /// absent from it.
    pub async fn explain(&self, execution: &ToolExecution) -> HostResult<Explanation> {
        let collection = self
            .registry
            .collect(execution, &CollectOptions::new().traced(true))
            .await?;
        let absences = self.registry.absences(&collection);
        Ok(Explanation {
            collection,
            absences,
        })
    }

    /// One bash call, run whole: the overlay collected once for it, the
    /// `PreToolUse` hooks with it (a block is a [`HostErrorCode::HookBlocked`]
    /// error, and no command runs), the command through `runner`, then the
    /// `PostToolUse` hooks with the runner's `tool_response`. When the host
    /// prepares ahead, the next call's instances are made while the
    /// command runs.
    pub async fn run_bash<R: BashRunner>(
        &self,
        call: BashRequest,
        runner: &R,
    ) -> HostResult<BashOutcome<R::Output>> {
        let mode = if call.background {
            Mode::Background
        } else {
            Mode::Foreground
        };
        let execution = call.execution.with_mode(mode);
        let collection = self.collect(&execution).await?;
        if self.preparation == Preparation::Spawned {
            self.prepare_next();
        }
        let mut request = ShellExecRequest::for_execution(
            call.command,
            &execution,
            collection.overlay.clone(),
            call.default_workdir,
        )
        .map_err(io_failure)?;
        let hooks = self.hooks();
        let around = match &hooks {
            Some(hooks) => {
                let shown_timeout = call.timeout.filter(|_| !call.background);
                let mut bash = BashCall::new(
                    &execution,
                    &request.command,
                    shown_timeout,
                    call.permission_mode,
                )
                .map_err(io_failure)?;
                // The hooks run where the command does.
                bash.context.cwd = request.workdir.display().to_string();
                if let Some(input) = call.tool_input {
                    bash.tool_input = input;
                }
                let notes = hooks.before_bash(&bash, &collection.overlay).await?;
                Some((hooks, bash, notes))
            }
            None => None,
        };
        request.env = call.env;
        request.environment = self.environment.clone();
        request.stdin = call.stdin;
        if let Some(timeout) = call.timeout {
            request.timeout = timeout;
        }
        let ran = if self.preparation == Preparation::BesideCommand {
            // Biased: `run` is polled first and spawns the child; the work
            // `collect` left for later then runs while it starts.
            let (ran, ()) =
                tokio::join!(biased; runner.run(request, mode), self.registry.prepare());
            ran?
        } else {
            runner.run(request, mode).await?
        };
        let notes = match around {
            Some((hooks, bash, mut notes)) => {
                let overlay: &Overlay = &collection.overlay;
                hooks
                    .after_bash(&bash, overlay, ran.tool_response, &mut notes)
                    .await;
                Some(notes)
            }
            None => None,
        };
        Ok(BashOutcome {
            output: ran.output,
            notes,
            omitted: collection.omitted,
        })
    }

    /// Starts making the next call's instances on the host's preparing
    /// thread, below its callers' priority, unless every contributor has
    /// one: one preparation at a time however many calls end at once, and
    /// a request that comes while one runs makes it go round once more. It
    /// returns at once.
    pub fn prepare_next(&self) {
        if !self.registry.is_prepared() {
            self.preparer.request(&self.registry);
        }
    }

    /// Registers every contributor of `manifest`, all or nothing, by its
    /// rules, its `grants.env` copied from `host_env` (the process's
    /// environment as it is now: a long-lived embedder may have changed it
    /// since the host opened); the host's home and trust stay the ones it
    /// was opened with.
    pub async fn register_manifest(
        &self,
        manifest: &Manifest,
        host_env: &HostEnv,
    ) -> HostResult<Vec<Registered>> {
        let registrations = (self.registry)
            .register_manifest(manifest, host_env)
            .await?;
        Ok(registrations
            .into_iter()
            .map(|registration| self.hold(registration))
            .collect())
    }

    /// Loads, declares and registers the contributor `spec` describes; it
    /// stays registered until [`Host::dispose`]. Loading may compile in a
    /// child process: a blocking wait, kept off the runtime's workers.
    pub async fn register_spec(&self, spec: &ContributorSpec) -> HostResult<Registered> {
        let (registry, spec) = (self.registry.clone(), spec.clone());
        let component = tokio::task::spawn_blocking(move || {
            registry.load(LoadFrom::Spec(&spec), &LoadOptions::new())
        })
        .await
        .map_err(|e| HostError::new(HostErrorCode::Runtime, format!("register: {e}")))??;
        let registration = self.registry.register(component).await?;
        Ok(self.hold(registration))
    }

    /// Keeps `registration` until [`Host::dispose`]; its name and keys.
    fn hold(&self, registration: Registration) -> Registered {
        let name = registration.name().to_string();
        let keys = (self.registry.list().into_iter())
            .filter(|row| row.owner == name)
            .map(|row| row.key)
            .collect();
        lock(&self.registrations).insert(name.clone(), registration);
        Registered { name, keys }
    }

    /// Removes the contributor `name` now; calls already collecting keep
    /// the set they started with. One not registered through this host is
    /// a [`HostErrorCode::Disposed`] error.
    pub fn dispose(&self, name: &str) -> HostResult<()> {
        let removed = lock(&self.registrations).remove(name);
        match removed {
            // Unregistered here, outside the lock.
            Some(registration) => {
                registration.dispose();
                Ok(())
            }
            None => Err(HostError::new(
                HostErrorCode::Disposed,
                format!("no contributor `{}` is registered", escape_controls(name)),
            )
            .naming(Culprit {
                contributor: Some(name.to_string()),
                ..Culprit::default()
            })),
        }
    }

    /// Every key, built-ins included, sorted, with owner and description.
    pub fn list(&self) -> Vec<KeyListing> {
        self.registry.list()
    }

    /// Every registered contributor, sorted by name.
    pub fn contributors(&self) -> Vec<ContributorListing> {
        self.registry.contributors()
    }
}

/// The hooks `source` names (the manifest's from `manifest`), read and
/// checked; a bad file is an invalid argument naming it.
fn read_hooks(source: &HooksSource, manifest: Option<&Manifest>) -> HostResult<Option<Hooks>> {
    let dialect = HookDialect::ClaudeCode;
    // An invalid argument saying `message`, the `HooksError` kept as its
    // source: a front end may word a hooks file's errors as its own (the
    // Node addon's `hooks:`).
    let invalid = |err: HooksError, message: String| {
        let mut err =
            HostError::from_source(HostErrorCode::InvalidArgument, Culprit::default(), err);
        err.message = message;
        err
    };
    // The file, and the manifest line that names it, for the message.
    let named = |err: HooksError, origin: Option<&str>| {
        let path = escape_controls(&err.path);
        let message = match origin {
            Some(origin) => format!("hooks file {path} ({origin}): {}", err.message),
            None => format!("hooks file {path}: {}", err.message),
        };
        invalid(err, message)
    };
    let hooks = match source {
        HooksSource::None => return Ok(None),
        HooksSource::Manifest => match manifest.and_then(Manifest::hooks_setting) {
            Some(setting) => Hooks::from_file(&setting.path, dialect)
                .map_err(|err| named(err, Some(&setting.origin)))?,
            None => return Ok(None),
        },
        HooksSource::File(path) => {
            Hooks::from_file(path, dialect).map_err(|err| named(err, None))?
        }
        // The document is the caller's: no file to name.
        HooksSource::Document(text) => Hooks::parse(text, "hooks", dialect).map_err(|err| {
            let message = err.message.clone();
            invalid(err, message)
        })?,
        HooksSource::Approved { setting, text } => {
            Hooks::parse(text, &setting.path.display().to_string(), dialect)
                .map_err(|err| named(err, Some(&setting.origin)))?
        }
    };
    Ok(Some(hooks))
}

/// A bash call that cannot be described: this process has no working
/// directory to run it in.
fn io_failure(err: std::io::Error) -> HostError {
    HostError::from_source(HostErrorCode::Exec, Culprit::default(), err)
}

/// `mutex`, locked: a panic elsewhere cannot leave what it holds (a map, an
/// `Arc`) half-changed, so a poisoned one is used as is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

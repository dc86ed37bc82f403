//! What the commands that run contributors share: opening a registry from
//! `--manifest`/`--home` (with compile progress on a terminal) and reading
//! `--execution`.

mod progress;

use std::path::{Path, PathBuf};

use clap::Args;
use dsh_env::__internal::{
    MAX_EXECUTION_BYTES, compile, escape_controls, read_capped, read_regular_text, utf8,
};
use dsh_env::CollectOptions;
use dsh_env::EnvironmentPolicy;
use dsh_env::{
    ArtifactCache, Collection, DshHome, HostEnv, Manifest, Mode, Registration, Registry, Tiering,
    ToolExecution, Trust,
};
use dsh_env_harness::hooks::{HookDialect, Hooks};

use crate::failure::{CliResult, Failure};
use crate::home::{home_cache, resolve_home_explained, user_cache_key};
use crate::manifests::{self, Approval, Considered, Found, ManifestHooks};

/// This process's own executable image (Linux), started as its compile helper.
const OWN_IMAGE: &str = "/proc/self/exe";

/// A registry, the registrations that keep its contributors registered, and
/// what the manifest says about children and the home.
pub(crate) struct Registered {
    /// The registry.
    pub(crate) registry: Registry,
    /// Its contributors stay registered while these live.
    pub(crate) registrations: Vec<Registration>,
    /// The manifest's `[environment]` (the default without a manifest).
    pub(crate) environment: EnvironmentPolicy,
    /// Where the home came from: `--home`, the manifest, `$DSH_HOME` or the default.
    pub(crate) home_origin: String,
    /// Every manifest considered, the one used and those skipped.
    pub(crate) manifests: Vec<Considered>,
    /// The manifest's `hooks` file, if it names one.
    pub(crate) hooks: Option<ManifestHooks>,
}

/// `--hooks`, for the commands that run a command (`run`, `serve`).
#[derive(Args)]
pub(crate) struct HooksArg {
    /// A hooks.json (Claude Code's format) whose PreToolUse and PostToolUse
    /// hooks run around the command; instead of the manifest's `hooks`.
    #[arg(long, value_name = "FILE")]
    hooks: Option<PathBuf>,
}

impl HooksArg {
    /// The hooks of `--hooks`, else of the manifest's `hooks`, read and
    /// checked (a bad file is a configuration error naming it); their
    /// hooks collect their own overlays from `registered`'s registry.
    pub(crate) fn load(&self, registered: &Registered) -> CliResult<Option<Hooks>> {
        let registry = registered.registry.clone();
        let dialect = HookDialect::ClaudeCode;
        let (hooks, origin) = match (&self.hooks, &registered.hooks) {
            (Some(path), _) => (Hooks::from_file(path, dialect, registry), None),
            (None, Some(hooks)) => {
                let (path, origin) = (&hooks.setting.path, hooks.setting.origin.as_str());
                // Approved with a project manifest: the text approved runs.
                let hooks = match &hooks.approved {
                    Some(text) => {
                        Hooks::parse(text, &path.display().to_string(), dialect, registry)
                    }
                    None => Hooks::from_file(path, dialect, registry),
                };
                (hooks, Some(origin))
            }
            (None, None) => return Ok(None),
        };
        hooks.map(Some).map_err(|err| {
            let path = escape_controls(&err.path);
            Failure::config(match origin {
                Some(origin) => format!("hooks file {path} ({origin}): {}", err.message),
                None => format!("hooks file {path}: {}", err.message),
            })
        })
    }
}

/// `--manifest`, `--home` and `--optimize`.
#[derive(Args)]
pub(crate) struct Setup {
    /// A manifest of contributors to register (default: $DSH_ENV_MANIFEST,
    /// then the nearest .dsh/env.toml approved by `dsh-env trust`, then the
    /// home's env.toml).
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// The harness home (default: the manifest's `home`, then $DSH_HOME, then ~/.dsh).
    #[arg(long, value_name = "DIR")]
    home: Option<String>,
    /// Compile a contributor missing from the cache with Cranelift now (slow
    /// the first time, the fastest calls), not with Winch (seconds).
    #[arg(long)]
    optimize: bool,
}

/// `--execution`.
#[derive(Args)]
struct ExecutionArg {
    /// The execution as JSON (reference harness shape), from a file or `-` for
    /// stdin. Without it: a call with no agent.
    #[arg(long, value_name = "FILE|-")]
    execution: Option<String>,
}

/// One execution against a registry: `--manifest`, `--home` and `--execution`.
#[derive(Args)]
pub(crate) struct Call {
    #[command(flatten)]
    setup: Setup,
    #[command(flatten)]
    execution: ExecutionArg,
}

impl Call {
    /// Loads the execution (as a background call when `background`), opens
    /// the registry and collects for it.
    pub(crate) async fn collect(
        &self,
        background: bool,
    ) -> CliResult<(ToolExecution, Registered, Collection)> {
        self.collect_as(background, Approval::Required).await
    }

    /// [`Call::collect`], an unapproved project manifest skipped as
    /// `approval` says.
    pub(crate) async fn collect_as(
        &self,
        background: bool,
        approval: Approval,
    ) -> CliResult<(ToolExecution, Registered, Collection)> {
        let (execution, registered) = self.open_as(background, approval).await?;
        let collection = collect(&registered, &execution).await?;
        Ok((execution, registered, collection))
    }

    /// Loads the execution (as a background call when `background`) and
    /// opens the registry, collecting nothing yet.
    pub(crate) async fn open(&self, background: bool) -> CliResult<(ToolExecution, Registered)> {
        self.open_as(background, Approval::Required).await
    }

    /// [`Call::open`], an unapproved project manifest skipped as `approval`
    /// says.
    async fn open_as(
        &self,
        background: bool,
        approval: Approval,
    ) -> CliResult<(ToolExecution, Registered)> {
        let mut execution = self.execution.load()?;
        if background {
            execution = execution.with_mode(Mode::Background);
        }
        let registered = self.setup.open_as(Tiering::Baseline, approval).await?;
        Ok((execution, registered))
    }

    /// Opens the registry (an unapproved project manifest skipped as
    /// `approval` says) and collects for the execution, keeping what each
    /// call showed of itself ([`CollectOptions::traced`]).
    pub(crate) async fn collect_with_traces(
        &self,
        approval: Approval,
    ) -> CliResult<(Registered, Collection)> {
        let execution = self.execution.load()?;
        let registered = self.setup.open_as(Tiering::Baseline, approval).await?;
        let collection = (registered.registry)
            .collect(&execution, &CollectOptions::new().traced(true))
            .await
            .map_err(Failure::runtime)?;
        Ok((registered, collection))
    }
}

/// The overlay for `execution`; a contributor's failure is a runtime error.
pub(crate) async fn collect(
    registered: &Registered,
    execution: &ToolExecution,
) -> CliResult<Collection> {
    (registered.registry)
        .collect(execution, &CollectOptions::new())
        .await
        .map_err(Failure::runtime)
}

/// A registry for `home` in a new runtime, keeping compiled components in
/// `cache`, compiling a cache miss as `tiering` says, and registering only
/// what `trust` admits. (When the instance pool cannot be reserved, the
/// runtime logs a warning naming why, which the default log level shows.)
pub(crate) fn open_registry(
    home: DshHome,
    cache: ArtifactCache,
    tiering: Tiering,
    trust: Trust,
) -> CliResult<Registry> {
    let mut builder = Registry::builder(home)
        .cache(cache)
        .trust(trust)
        .tiering(tiering);
    // The CLI is its own compile helper (main dispatches on argv[0]), unless
    // $DSH_ENV_COMPILER names another. /proc/self/exe, not the path: it is
    // this very image even after an upgrade replaced the file, so its engine
    // always matches this process's.
    if std::env::var_os(compile::HELPER_ENV).is_none_or(|v| v.is_empty()) {
        builder = builder.compiler(OWN_IMAGE);
    }
    // A cold cache can take seconds per component: say which, on a terminal.
    if let Some(progress) = progress::TerminalProgress::for_stderr() {
        builder = builder.compile_progress(progress);
    }
    builder.build().map_err(Failure::runtime)
}

/// A registry for `home`, keeping compiled components in its `cache`
/// (capped as `dsh-env cache` says, authenticated with the key of the
/// user's own home, `--home` as `home_flag`), compiling a cache miss as
/// `tiering` says, under `manifest`'s `[trust]` (none without a manifest).
pub(crate) fn open_home_registry(
    home: DshHome,
    home_flag: Option<&str>,
    tiering: Tiering,
    manifest: Option<&Manifest>,
) -> CliResult<Registry> {
    let cache = home_cache(home.path(), user_cache_key(home_flag))?;
    open_registry(home, cache, tiering, manifest_trust(manifest)?)
}

/// `manifest`'s `[trust]`, checked; without a manifest, trust in nobody.
pub(crate) fn manifest_trust(manifest: Option<&Manifest>) -> CliResult<Trust> {
    manifest.map_or(Ok(Trust::default()), |manifest| {
        manifest.trust().map_err(Failure::config)
    })
}

impl Setup {
    /// Resolves the home, opens a registry, and registers the manifest's
    /// contributors, compiling each cache miss as `tiering` says. A
    /// contributor failure while collecting later is a runtime error (exit 1).
    pub(crate) async fn open(&self, tiering: Tiering) -> CliResult<Registered> {
        self.open_as(tiering, Approval::Required).await
    }

    /// [`Setup::open`], an unapproved project manifest skipped as
    /// `approval` says.
    pub(crate) async fn open_as(
        &self,
        tiering: Tiering,
        approval: Approval,
    ) -> CliResult<Registered> {
        let tiering = if self.optimize {
            Tiering::Optimized
        } else {
            tiering
        };
        let Found {
            manifest,
            considered,
            hooks,
        } = manifests::find(self.manifest.as_deref(), self.home.as_deref(), approval)?;
        let (home, home_origin) = resolve_home_explained(self.home.as_deref(), manifest.as_ref())?;
        let registry = open_home_registry(home, self.home.as_deref(), tiering, manifest.as_ref())?;
        let (registrations, environment) = match &manifest {
            Some(manifest) => (
                (registry
                    .register_manifest(manifest, &HostEnv::from_process())
                    .await)
                    .map_err(Failure::config)?,
                manifest.environment().map_err(Failure::config)?,
            ),
            None => (Vec::new(), EnvironmentPolicy::default()),
        };
        Ok(Registered {
            registry,
            registrations,
            environment,
            home_origin,
            manifests: considered,
            hooks,
        })
    }
}

impl ExecutionArg {
    /// The execution named by `--execution`, or a call with no agent.
    fn load(&self) -> CliResult<ToolExecution> {
        match &self.execution {
            Some(source) => read_execution(source),
            None => Ok(ToolExecution::new("cli", "bash")),
        }
    }
}

/// The execution JSON in the file `source`, or stdin for `-`; an unknown
/// field is warned about, by name.
pub(crate) fn read_execution(source: &str) -> CliResult<ToolExecution> {
    let text = if source == "-" {
        read_capped(std::io::stdin().lock(), MAX_EXECUTION_BYTES)
            .and_then(utf8)
            .map_err(|e| Failure::config(format!("cannot read the execution from stdin: {e}")))?
    } else {
        read_regular_text(Path::new(source), MAX_EXECUTION_BYTES)
            .map_err(|e| Failure::config(format!("cannot read execution {e}")))?
    };
    let shown = escape_controls(source);
    let (execution, unknown) = ToolExecution::from_json_noting_unknown(&text)
        .map_err(|e| Failure::config(format!("execution {shown}: {e}")))?;
    for field in unknown {
        // A typo'd field would be dropped in silence: name it.
        eprintln!(
            "dsh-env: warning: execution {shown}: unknown field `{}` ignored",
            escape_controls(&field)
        );
    }
    Ok(execution)
}

/// Parses `NAME=VALUE`.
pub(crate) fn parse_env_pair(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))
}

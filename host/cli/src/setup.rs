//! What the commands that run contributors share: their arguments
//! (`--manifest`, `--home`, `--optimize`, `--hooks`, `--execution`) as the
//! host's configuration, with compile progress on a terminal.

mod progress;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use dsh_env::compile_helper;
use dsh_env::{DshHome, Manifest, Registry, Tiering, ToolExecution, Trust};
use dsh_env_harness::host::{HooksSource, Host, HostConfig, RegistryConfig};
use dsh_env_support::input::{
    MAX_EXECUTION_BYTES, escape_controls, read_capped, read_regular_text, utf8,
};

use crate::failure::{CliResult, Failure};
use crate::home::{cache_max_bytes, home_setting};
use crate::manifests::{self, Approval, Considered, Found, ManifestHooks};

/// A host opened from the command line, and every manifest considered for
/// it (for `explain`).
pub(crate) struct Opened {
    /// The host.
    pub(crate) host: Host,
    /// Every manifest considered, the one used and those skipped.
    pub(crate) manifests: Vec<Considered>,
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
    /// The hooks of `--hooks`, else of the manifest's `hooks` (`manifest`:
    /// the text approved with a project manifest, which is what runs).
    fn source(&self, manifest: Option<ManifestHooks>) -> HooksSource {
        match (&self.hooks, manifest) {
            (Some(path), _) => HooksSource::File(path.clone()),
            (None, Some(ManifestHooks { setting, approved })) => match approved {
                Some(text) => HooksSource::Approved { setting, text },
                None => HooksSource::Manifest,
            },
            (None, None) => HooksSource::None,
        }
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
    pub(crate) setup: Setup,
    #[command(flatten)]
    execution: ExecutionArg,
}

impl Call {
    /// The execution (a call with no agent without `--execution`).
    pub(crate) fn execution(&self) -> CliResult<ToolExecution> {
        self.execution.load()
    }
}

/// How a command uses its host.
pub(crate) struct Uses<'a> {
    /// How a cache miss is compiled (`--optimize` makes it `Optimized`).
    pub(crate) tiering: Tiering,
    /// Whether an unapproved project manifest stops the command.
    pub(crate) approval: Approval,
    /// The hooks around commands: `--hooks` or the manifest's; none for
    /// a command that runs none.
    pub(crate) hooks: Option<&'a HooksArg>,
    /// Whether the next call's instances are made ahead (`serve`).
    pub(crate) prepare_ahead: bool,
}

impl Uses<'_> {
    /// A command that makes one call with a baseline compile and no hooks,
    /// under an approved manifest.
    pub(crate) fn once() -> Self {
        Uses {
            tiering: Tiering::Baseline,
            approval: Approval::Required,
            hooks: None,
            prepare_ahead: false,
        }
    }
}

/// How the CLI builds a registry: the home of `--home` (`home_flag`), the
/// cache capped as `dsh-env cache` says, itself as its compile helper
/// (unless $DSH_ENV_COMPILER names another) and compile progress on a
/// terminal.
pub(crate) fn registry_config(
    home_flag: Option<&str>,
    tiering: Tiering,
) -> CliResult<RegistryConfig> {
    // Its own image (`/proc/self/exe` on Linux), not its path: that stays
    // this very image even after an upgrade replaced the file, so its engine
    // always matches this process's. Where it cannot tell, the library looks
    // beside the executable and on PATH.
    let compiler = std::env::var_os(compile_helper::HELPER_ENV)
        .is_none_or(|v| v.is_empty())
        .then(dsh_env::os::own_image)
        .and_then(Result::ok);
    // A cold cache can take seconds per component: say which, on a terminal.
    let compile_progress = progress::TerminalProgress::for_stderr()
        .map(|progress| progress as Arc<dyn dsh_env::CompileProgress>);
    Ok(RegistryConfig {
        home: home_setting(home_flag),
        cache_max_bytes: Some(cache_max_bytes()?),
        compiler,
        tiering,
        shared_engine: None,
        compile_progress,
    })
}

/// A registry for `home` (`--home` as `home_flag`), compiling a cache miss
/// as `tiering` says, under `manifest`'s `[trust]` (none without a manifest).
pub(crate) fn open_home_registry(
    home: DshHome,
    home_flag: Option<&str>,
    tiering: Tiering,
    manifest: Option<&Manifest>,
) -> CliResult<Registry> {
    let trust = manifest_trust(manifest)?;
    Ok(registry_config(home_flag, tiering)?.build(home, trust)?)
}

/// `manifest`'s `[trust]`, checked; without a manifest, trust in nobody.
pub(crate) fn manifest_trust(manifest: Option<&Manifest>) -> CliResult<Trust> {
    manifest.map_or(Ok(Trust::default()), |manifest| {
        manifest.trust().map_err(Failure::config)
    })
}

impl Setup {
    /// Opens the host as `uses` says: the manifest found (an unapproved
    /// project manifest skipped as its approval says), the home, the
    /// contributors registered, the hooks read. What fails is a
    /// configuration error (exit 2), but for a runtime that cannot start.
    pub(crate) async fn open(&self, uses: Uses<'_>) -> CliResult<Opened> {
        let found = self.find(uses.approval)?;
        self.open_found(found, uses).await
    }

    /// The manifest these flags and the working directory lead to, as
    /// [`manifests::find`] finds it.
    pub(crate) fn find(&self, approval: Approval) -> CliResult<Found> {
        manifests::find(self.manifest.as_deref(), self.home.as_deref(), approval)
    }

    /// [`Setup::open`] with the manifest already found.
    pub(crate) async fn open_found(&self, found: Found, uses: Uses<'_>) -> CliResult<Opened> {
        let tiering = if self.optimize {
            Tiering::Optimized
        } else {
            uses.tiering
        };
        let Found {
            manifest,
            considered,
            hooks,
        } = found;
        let mut config = HostConfig::new(manifest, tiering);
        config.registry = registry_config(self.home.as_deref(), tiering)?;
        config.hooks = uses
            .hooks
            .map_or(HooksSource::None, |arg| arg.source(hooks));
        config.prepare_ahead = uses.prepare_ahead;
        Ok(Opened {
            host: Host::open(config).await?,
            manifests: considered,
        })
    }

    /// `--home`, as given.
    pub(crate) fn home_flag(&self) -> Option<&str> {
        self.home.as_deref()
    }

    /// These flags as arguments, to start another `dsh-env` with them.
    pub(crate) fn args(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        if let Some(manifest) = &self.manifest {
            args.extend([OsString::from("--manifest"), manifest.clone().into()]);
        }
        if let Some(home) = &self.home {
            args.extend([OsString::from("--home"), home.into()]);
        }
        if self.optimize {
            args.push("--optimize".into());
        }
        args
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

//! Arguments, dispatch and exit codes of the `dsh-env` command.
//!
//! Exit codes: 0 success; 1 the command or a contributor failed at runtime;
//! 2 usage or configuration error. Every error is one line naming the file,
//! contributor, key or limit at fault.

mod demo;
mod serve;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use dsh_env::environment::{ScrubReason, scrub_reason};
use dsh_env::input::{MAX_EXECUTION_BYTES, escape_controls, read_capped, read_regular_text, utf8};
use dsh_env::{
    Allocator, ArtifactCache, Collection, DshHome, HomeContext, HomeSetting, HostEnv, Manifest,
    Mode, Registration, Registry, Runtime, ToolExecution,
};
use dsh_env_harness::{ExecError, LocalExecutor, ShellExecRequest};
use serde_json::json;

/// Per-call DSH_* environments from sandboxed WebAssembly contributors.
#[derive(Parser)]
#[command(name = "dsh-env", version)]
struct Cli {
    /// Log what happens to stderr (-v info, -vv debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every key with its owner and description; runs no resolver.
    List {
        #[command(flatten)]
        setup: Setup,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the overlay for one execution.
    Resolve {
        #[command(flatten)]
        setup: Setup,
        #[command(flatten)]
        execution: ExecutionArg,
        /// Print a sorted JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run a command through the local executor, with the overlay.
    Run {
        #[command(flatten)]
        setup: Setup,
        #[command(flatten)]
        execution: ExecutionArg,
        /// An ordinary variable for the command, NAME=VALUE (repeatable; no DSH_* names).
        #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env_pair)]
        env: Vec<(String, String)>,
        /// Run as a background call (contributors see mode=background).
        #[arg(long)]
        background: bool,
        /// Kill the command's process group after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout_secs: u64,
        /// The command and its arguments.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Load a component and report its declaration, imports and every rule it breaks.
    Check {
        /// The component file.
        file: PathBuf,
        /// A config value to serve to the component, NAME=VALUE (repeatable).
        #[arg(long = "config", value_name = "NAME=VALUE", value_parser = parse_env_pair)]
        config: Vec<(String, String)>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Explain the overlay: each key's owner and description, and which
    /// inherited variables the scrub removes (names only) and why.
    Explain {
        #[command(flatten)]
        setup: Setup,
        #[command(flatten)]
        execution: ExecutionArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a scripted parent and child agent in a temporary home and show
    /// what each shell and each hook saw.
    Demo {
        /// The contributors to register (default: contributors/examples.toml, if present).
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
    },
    /// Serve newline-delimited JSON-RPC 2.0 on stdin/stdout, for harnesses
    /// not written in Rust.
    Serve {
        #[command(flatten)]
        setup: Setup,
    },
}

#[derive(Args)]
struct Setup {
    /// A manifest of contributors to register.
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// The harness home (default: the manifest's `home`, then $DSH_HOME, then ~/.dsh).
    #[arg(long, value_name = "DIR")]
    home: Option<String>,
}

#[derive(Args)]
struct ExecutionArg {
    /// The execution as JSON (reference harness shape), from a file or `-` for
    /// stdin. Without it: a call with no agent.
    #[arg(long, value_name = "FILE|-")]
    execution: Option<String>,
}

/// An error and the exit code it maps to.
pub(crate) struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// A usage or configuration error (exit 2).
    pub(crate) fn config(message: impl std::fmt::Display) -> Self {
        Failure {
            code: 2,
            message: message.to_string(),
        }
    }

    /// A runtime failure (exit 1).
    pub(crate) fn runtime(message: impl std::fmt::Display) -> Self {
        Failure {
            code: 1,
            message: message.to_string(),
        }
    }
}

type CliResult<T = ()> = Result<T, Failure>;

/// A registry and the registrations that keep its contributors registered.
type Registered = (Registry, Vec<Registration>);

/// Parses arguments, runs the command, and maps the outcome to an exit code.
fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("dsh-env: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(run(cli.command));
    // A guest's file operation can be stuck in a blocking-pool thread that
    // nothing can cancel (an `open` of a FIFO, say); dropping the runtime
    // would wait for it forever. The answer is known: do not wait.
    runtime.shutdown_background();
    match outcome {
        Ok(code) => code,
        Err(failure) => {
            // One line: line breaks become spaces, other controls are escaped.
            let message = failure.message.replace('\n', " ");
            eprintln!("dsh-env: {}", escape_controls(&message));
            ExitCode::from(failure.code)
        }
    }
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("DSH_ENV_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

async fn run(command: Command) -> CliResult<ExitCode> {
    match command {
        Command::List { setup, json } => {
            let (registry, _registrations) = setup.open().await?;
            let rows = registry.list();
            if json {
                print_json(&rows);
            } else {
                let width = rows.iter().map(|r| r.key.as_str().len()).max().unwrap_or(0);
                let owner_width = rows.iter().map(|r| r.owner.len()).max().unwrap_or(0);
                for row in rows {
                    println!(
                        "{:<width$}  {:<owner_width$}  {}",
                        row.key,
                        escape_controls(&row.owner),
                        escape_controls(&row.description)
                    );
                }
            }
        }
        Command::Resolve {
            setup,
            execution,
            json,
        } => {
            let execution = execution.load()?;
            let (_registered, collection) = setup.collect(&execution).await?;
            let overlay = collection.overlay;
            if json {
                print_json(&overlay.to_map());
            } else {
                for (key, value) in overlay.iter() {
                    println!("{key}={value}");
                }
            }
        }
        Command::Run {
            setup,
            execution,
            env,
            background,
            timeout_secs,
            command,
        } => {
            let mut execution = execution.load()?;
            if background {
                execution = execution.with_mode(Mode::Background);
            }
            let (_registered, collection) = setup.collect(&execution).await?;
            let overlay = collection.overlay;
            let workdir = match &execution.agent {
                Some(agent) => PathBuf::from(&agent.cwd),
                None => std::env::current_dir().map_err(Failure::runtime)?,
            };
            let mut request = ShellExecRequest::new(shell_command(&command), workdir, overlay);
            request.env = env.into_iter().collect();
            request.timeout = std::time::Duration::from_secs(timeout_secs);
            let executor = LocalExecutor;
            let output = if background {
                let handle = executor.spawn_background(request).map_err(exec_failure)?;
                if let Some(pid) = handle.pid {
                    eprintln!("dsh-env: started in the background as pid {pid}");
                }
                handle.wait().await
            } else {
                executor.run(request).await
            }
            .map_err(exec_failure)?;
            use std::io::Write;
            let _ = std::io::stdout().write_all(&output.stdout);
            let _ = std::io::stderr().write_all(&output.stderr);
            if output.timed_out {
                return Err(Failure::runtime(format!(
                    "the command timed out after {timeout_secs} s"
                )));
            }
            return Ok(ExitCode::from(
                output.exit_code.map_or(1, |c| c.clamp(0, 255) as u8),
            ));
        }
        Command::Check { file, config, json } => {
            return check(&file, config.into_iter().collect(), json).await;
        }
        Command::Explain {
            setup,
            execution,
            json,
        } => {
            let execution = execution.load()?;
            let ((registry, _registrations), collection) = setup.collect(&execution).await?;
            let listing: BTreeMap<String, (String, String)> = registry
                .list()
                .into_iter()
                .map(|row| (row.key.to_string(), (row.owner, row.description)))
                .collect();
            let keys: Vec<_> = collection
                .overlay
                .iter()
                .map(|(key, value)| {
                    let (owner, description) =
                        listing.get(key.as_str()).cloned().unwrap_or_default();
                    json!({"key": key, "value": value, "owner": owner, "description": description})
                })
                .collect();
            let mut scrubbed: Vec<(String, ScrubReason)> = std::env::vars_os()
                .filter_map(|(name, value)| {
                    let reason = scrub_reason(&name, &value)?;
                    Some((name.to_string_lossy().into_owned(), reason))
                })
                .collect();
            scrubbed.sort_by(|a, b| a.0.cmp(&b.0));
            let omitted: Vec<String> = collection.omitted.iter().map(ToString::to_string).collect();
            if json {
                let scrubbed: Vec<_> = scrubbed
                    .iter()
                    .map(|(name, reason)| {
                        json!({"name": name, "rule": reason.rule(), "reason": reason.to_string()})
                    })
                    .collect();
                print_json(&json!({"keys": keys, "scrubbed": scrubbed, "omitted": omitted}));
            } else {
                println!("Overlay:");
                for key in &keys {
                    let field =
                        |name: &str| escape_controls(key[name].as_str().unwrap_or_default());
                    println!(
                        "  {}={}  ({}: {})",
                        field("key"),
                        field("value"),
                        field("owner"),
                        field("description")
                    );
                }
                println!("Removed from the inherited environment:");
                if scrubbed.is_empty() {
                    println!("  (nothing)");
                }
                for (name, reason) in &scrubbed {
                    println!("  {}: {reason}", escape_controls(name));
                }
                for warning in &omitted {
                    println!("Omitted: {}", escape_controls(warning));
                }
            }
        }
        Command::Demo { manifest } => demo::demo(manifest.as_deref()).await?,
        Command::Serve { setup } => {
            let (registry, registrations) = setup.open().await?;
            serve::serve(registry, registrations)
                .await
                .map_err(Failure::runtime)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A registry for `home` in a new runtime, keeping compiled components in
/// `cache`. Says so on stderr when the instance pool cannot be reserved.
pub(crate) fn open_registry(home: DshHome, cache: ArtifactCache) -> CliResult<Registry> {
    let runtime = Runtime::new().map_err(Failure::runtime)?;
    if let Allocator::OnDemand { reason } = runtime.allocator() {
        eprintln!(
            "dsh-env: warning: the instance pool cannot be reserved ({}); allocating \
             instances on demand, which is slower",
            escape_controls(reason)
        );
    }
    Ok(Registry::with_runtime(&runtime, home, cache))
}

impl Setup {
    /// Opens the registry and collects for `execution`; a contributor
    /// failure is a runtime error (exit 1).
    async fn collect(&self, execution: &ToolExecution) -> CliResult<(Registered, Collection)> {
        let (registry, registrations) = self.open().await?;
        let collection = registry
            .collect_report(execution)
            .await
            .map_err(Failure::runtime)?;
        Ok(((registry, registrations), collection))
    }

    /// Resolves the home, opens a registry, and registers the manifest's contributors.
    async fn open(&self) -> CliResult<Registered> {
        let manifest = self
            .manifest
            .as_deref()
            .map(Manifest::from_file)
            .transpose()
            .map_err(Failure::config)?;
        let mut explicit = Vec::new();
        if let Some(path) = &self.home {
            explicit.push(HomeSetting {
                origin: "--home".into(),
                path: path.clone(),
            });
        }
        if let Some(path) = manifest.as_ref().and_then(|m| m.home.clone()) {
            let origin = manifest
                .as_ref()
                .map(|m| m.origin.clone())
                .unwrap_or_default();
            explicit.push(HomeSetting { origin, path });
        }
        let home =
            DshHome::resolve(&explicit, &HomeContext::from_process()).map_err(Failure::config)?;
        let cache = ArtifactCache::new(home.path().join("cache"));
        let registry = open_registry(home, cache)?;
        let registrations = match &manifest {
            Some(manifest) => registry
                .register_manifest(manifest, &HostEnv::from_process())
                .await
                .map_err(Failure::config)?,
            None => Vec::new(),
        };
        Ok((registry, registrations))
    }
}

impl ExecutionArg {
    fn load(&self) -> CliResult<ToolExecution> {
        let Some(source) = &self.execution else {
            return Ok(ToolExecution::new("cli", "bash"));
        };
        let text = if source == "-" {
            read_capped(std::io::stdin().lock(), MAX_EXECUTION_BYTES)
                .and_then(utf8)
                .map_err(|e| {
                    Failure::config(format!("cannot read the execution from stdin: {e}"))
                })?
        } else {
            read_regular_text(Path::new(source), MAX_EXECUTION_BYTES)
                .map_err(|e| Failure::config(format!("cannot read execution {e}")))?
        };
        let shown = escape_controls(source);
        ToolExecution::from_json(&text)
            .map_err(|e| Failure::config(format!("execution {shown}: {e}")))
    }
}

async fn check(file: &Path, config: BTreeMap<String, String>, json: bool) -> CliResult<ExitCode> {
    let home = DshHome::resolve(&[], &HomeContext::from_process()).map_err(Failure::config)?;
    let cache = ArtifactCache::new(home.path().join("cache"));
    let registry = open_registry(home, cache)?;
    let component = registry
        .load_file(file)
        .map_err(Failure::config)?
        .with_config(config);
    let (declaration, problems) = registry.check(&component).await.map_err(Failure::runtime)?;
    let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
    if json {
        let keys: Vec<_> = declaration
            .keys
            .iter()
            .map(|(key, description)| json!({"key": key, "description": description}))
            .collect();
        print_json(&json!({
            "file": file.display().to_string(),
            "name": declaration.name,
            "keys": keys,
            "imports": component.imports(),
            "problems": problems,
        }));
    } else {
        // The declaration is the guest's, unchecked: shown escaped.
        println!(
            "{}: contributor `{}`",
            escape_controls(&file.display().to_string()),
            escape_controls(&declaration.name)
        );
        println!("Keys:");
        for (key, description) in &declaration.keys {
            println!(
                "  {}: {}",
                escape_controls(key),
                escape_controls(description)
            );
        }
        println!("Imports:");
        for import in component.imports() {
            println!("  {}", escape_controls(import));
        }
        if problems.is_empty() {
            println!("No problems: it can be registered.");
        } else {
            println!("Problems:");
            for problem in &problems {
                println!("  {}", escape_controls(problem));
            }
        }
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A request the executor refused before spawning (a `DSH_*` or malformed
/// `--env`) is a usage error; anything after the spawn is a runtime failure.
fn exec_failure(err: ExecError) -> Failure {
    match err {
        ExecError::Env(_) => Failure::config(err),
        other => Failure::runtime(other),
    }
}

fn parse_env_pair(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))
}

/// Joins argv into one `bash -c` string, quoting every word.
fn shell_command(words: &[String]) -> String {
    words
        .iter()
        .map(|word| {
            if !word.is_empty()
                && word
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
            {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(err) => eprintln!("dsh-env: cannot print JSON: {err}"),
    }
}

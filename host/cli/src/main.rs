//! The `dsh-env` command: arguments, dispatch and exit codes, one module per
//! command over the `dsh-env` and `dsh-env-harness` libraries.
//!
//! Exit codes: 0 success; 1 the command or a contributor failed at runtime;
//! 2 usage or configuration error; `run` passes its command's code through
//! and keeps 124 and 125 for its own (see `run`). Every error is one line
//! naming the file, contributor, key or limit at fault.

mod add;
mod approvals;
mod authoring;
mod cache;
mod check;
mod completions;
mod configure;
mod demo;
mod explain;
mod failure;
mod harness;
mod home;
mod hook;
mod jsontext;
mod list;
mod login;
mod man;
mod manifests;
mod network;
mod new;
mod output;
mod pull;
mod push;
mod resolve;
mod run;
mod serve;
mod setup;
mod store;
mod traces;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use dsh_env::compile_helper;
use dsh_env_support::input::escape_controls;

use failure::{CliResult, Failure};
use setup::Setup;

/// Per-call DSH_* environments from sandboxed WebAssembly contributors.
#[derive(Parser)]
#[command(name = "dsh-env", version)]
struct Cli {
    /// Log what happens to stderr (-v info, -vv debug, -vvv wasmtime's debug too).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every key with its owner and description; runs no resolver.
    #[command(
        after_help = "Examples:\n  dsh-env list --manifest contributors/examples.toml\n  dsh-env list --manifest dsh-env.toml --optimize   # compile with Cranelift now"
    )]
    List(list::Args),
    /// Print the overlay for one execution.
    #[command(
        after_help = "Examples:\n  dsh-env resolve --manifest dsh-env.toml --execution call.json\n  dsh-env resolve --manifest dsh-env.toml --json"
    )]
    Resolve(resolve::Args),
    /// Run a command through the local executor, with the overlay.
    #[command(
        after_help = "Exit codes: the command's own; 128+n when signal n killed it; \
                            124 when it timed out; 125 when dsh-env or a contributor failed, \
                            or a PreToolUse hook blocked it, and the command did not run.\n\n\
                      Examples:\n  \
                      dsh-env run --manifest dsh-env.toml --execution call.json -- make test\n  \
                      dsh-env run --manifest dsh-env.toml --background -- ./long-job.sh"
    )]
    Run(run::Args),
    /// Review a contributor, confirm, and pin it (digest and grants) in a manifest.
    #[command(
        after_help = "Examples:\n  dsh-env add my_contributor.wasm --manifest dsh-env.toml\n  dsh-env add oci://ghcr.io/acme/lineage:v1 --manifest dsh-env.toml --yes"
    )]
    Add(add::Args),
    /// Load a component and report its declaration, imports and every rule it breaks.
    #[command(
        after_help = "Examples:\n  dsh-env check contributor.wasm\n  dsh-env check contributor.wasm --execution call.json --manifest dsh-env.toml"
    )]
    Check(check::Args),
    /// Explain the overlay: each key's owner and description, and which
    /// inherited variables the scrub removes (names only) and why.
    #[command(
        after_help = "Examples:\n  dsh-env explain --manifest dsh-env.toml --execution call.json\n  dsh-env explain --manifest dsh-env.toml --json"
    )]
    Explain(explain::Args),
    /// Push a component (and `<file>.minisig`, if present) to an OCI
    /// registry as a Wasm artifact; prints the digest-pinned reference.
    #[command(
        after_help = "Examples:\n  dsh-env push contributor.wasm ghcr.io/acme/lineage:v1\n  dsh-env push contributor.wasm localhost:5000/dsh/lineage:v1"
    )]
    Push(push::Args),
    /// Fill the home's store with every `oci://…@sha256:…` artifact a
    /// reviewed manifest pins (no prompt, no manifest change); exit 1 naming
    /// each one that is not there after.
    #[command(
        after_help = "Examples:\n  dsh-env pull --manifest dsh-env.toml\n  dsh-env pull --manifest dsh-env.toml --optimize   # warm the cache too"
    )]
    Pull(pull::Args),
    /// Check a registry's username and password (read from stdin) and store
    /// them in the Docker config (or its credential helper) for push, add
    /// and pull.
    #[command(
        after_help = "Examples:\n  dsh-env login ghcr.io --username me --password-stdin   # the token on stdin"
    )]
    Login(login::Args),
    /// Run a scripted parent and child agent in a temporary home and show
    /// what each shell and each hook saw.
    #[command(
        after_help = "Examples:\n  dsh-env demo\n  dsh-env demo --manifest contributors/examples.toml"
    )]
    Demo {
        /// The contributors to register (default: contributors/examples.toml, if present).
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
    },
    /// Serve newline-delimited JSON-RPC 2.0 on stdin/stdout, for harnesses
    /// not written in Rust.
    #[command(
        after_help = "Examples:\n  dsh-env serve --manifest dsh-env.toml   # then one JSON-RPC request a line (PROTOCOL.md)"
    )]
    Serve {
        #[command(flatten)]
        setup: Setup,
        #[command(flatten)]
        hooks: setup::HooksArg,
    },
    /// Wire dsh-env into an agent harness's own configuration (Claude
    /// Code's or Gemini CLI's settings, Codex's hooks.json and its trust,
    /// an OpenCode plugin); `--remove` takes it out again.
    #[command(
        after_help = "Examples:\n  dsh-env setup claude-code --manifest ~/dsh-env.toml\n  \
                      dsh-env setup codex --manifest dsh-env.toml --dry-run\n  \
                      dsh-env setup gemini --project . --manifest .dsh/env.toml\n  \
                      dsh-env setup opencode --remove"
    )]
    Setup(configure::Args),
    /// The hook a harness runs before each shell call (`setup` writes it):
    /// reads the harness's hook input on stdin, answers with the command
    /// rewritten to get the overlay, or the reason it is blocked.
    #[command(
        after_help = "Examples:\n  echo \"$HOOK_INPUT\" | dsh-env hook claude-code --manifest dsh-env.toml"
    )]
    Hook(hook::Args),
    /// Approve a project manifest (`.dsh/env.toml`) for commands run
    /// without `--manifest`, where it was found: its exact content and that
    /// of the hooks file it names, by SHA-256; a changed file needs
    /// approving again.
    #[command(
        after_help = "Examples:\n  dsh-env trust                        # the nearest .dsh/env.toml\n  dsh-env trust ~/src/app/.dsh/env.toml\n  dsh-env trust --revoke"
    )]
    Trust(manifests::TrustArgs),
    /// Show, trim or empty the home's compile cache (capped at
    /// $DSH_CACHE_MAX_MIB, default 512 MiB, least recently used out first).
    #[command(after_help = "Examples:\n  dsh-env cache list\n  dsh-env cache gc")]
    Cache(cache::Args),
    /// Remove from the home's store of pulled contributors what no manifest
    /// references (`gc`), listing each blob removed.
    #[command(after_help = "Examples:\n  dsh-env store gc --manifest dsh-env.toml")]
    Store(store::Args),
    /// Create a contributor project in a new directory: `make` in it builds
    /// contributor.wasm.
    #[command(
        after_help = "Examples:\n  dsh-env new my-tool --lang rust\n  dsh-env new my-tool --lang js --name my-tool"
    )]
    New(new::Args),
    /// Write the bindings for the contract (dsh:env@0.1.0, world contributor).
    #[command(after_help = "Examples:\n  dsh-env bindgen c gen")]
    Bindgen(authoring::BindgenArgs),
    /// Make a core WebAssembly module a contributor component: embed the
    /// world if it lacks it, adapt WASI preview1 (reactor), validate.
    #[command(after_help = "Examples:\n  dsh-env componentize core.wasm --output contributor.wasm")]
    Componentize(authoring::ComponentizeArgs),
    /// Print a completion script for a shell, e.g.
    /// `dsh-env completions bash > ~/.local/share/bash-completion/completions/dsh-env`.
    #[command(after_help = "Examples:\n  dsh-env completions bash\n  dsh-env completions zsh")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages (`dsh-env.1` and one per command) into a
    /// directory; for packagers (`scripts/release-archive`).
    #[command(hide = true)]
    Man {
        /// The directory (created if absent).
        dir: PathBuf,
    },
}

/// `--version`'s text: this version, the contract versions it loads and
/// the wasmtime release it runs them on.
fn long_version() -> String {
    let contracts: Vec<String> = (dsh_env::supported_contracts().iter())
        .map(|c| format!("{} (components targeting {})", c.version, c.accepts))
        .collect();
    format!(
        "{}\ncontracts: dsh:env {}\nwasmtime: {}",
        env!("CARGO_PKG_VERSION"),
        contracts.join(", "),
        dsh_env::WASMTIME_VERSION
    )
}

/// Parses arguments, runs the command, and maps the outcome to an exit code;
/// started as `dsh-env-compile`, it is the compile helper instead.
fn main() -> ExitCode {
    if invoked_as_compile_helper() {
        return compile_helper::helper_main();
    }
    let parsed = Cli::command()
        // Once per process: clap keeps a &'static str.
        .long_version(long_version().leak() as &str)
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) if err.use_stderr() && invoked_as_run() => {
            // `run`'s usage errors must not look like its command's exit 2.
            let _ = err.print();
            return ExitCode::from(run::OWN_FAILURE);
        }
        Err(err) => err.exit(),
    };
    if !matches!(cli.command, Command::Run(_) | Command::Serve { .. }) {
        default_sigpipe();
    }
    let traces = traces::init(cli.verbose);
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
    let outcome = runtime.block_on(dispatch(cli.command));
    // A guest's file operation can be stuck in a blocking-pool thread that
    // nothing can cancel (an `open` of a FIFO, say); dropping the runtime
    // would wait for it forever. The answer is known: do not wait.
    runtime.shutdown_background();
    traces.finish();
    match outcome {
        Ok(code) => code,
        Err(failure) => {
            // One line: line breaks become spaces, other controls are
            // escaped, and no credential the process holds is shown.
            let message = failure.message.replace('\n', " ");
            let message = dsh_env_oci::secrets::redact(&message);
            eprintln!("dsh-env: {}", escape_controls(&message));
            ExitCode::from(failure.code)
        }
    }
}

/// Gives SIGPIPE its default action, as C tools have it: a command that
/// prints (`resolve --json | head -c 1`) then ends quietly when its reader
/// goes away, instead of panicking in `println!` on EPIPE. Not for `run`,
/// whose exit code must stay its command's (its command gets the default
/// action from std's spawn either way), nor `serve`, which reports a closed
/// stdout as exit 1.
fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL, before any thread
    // is started, touches no memory.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Whether the subcommand is `run` (its first word that is not a flag).
/// Whether argv[0] names the compile helper: the library starts every
/// helper so, and the CLI names itself as its helper (`setup::registry_config`),
/// so that installing the CLI installs one binary.
fn invoked_as_compile_helper() -> bool {
    std::env::args_os().next().is_some_and(|arg0| {
        Path::new(&arg0).file_name() == Some(OsStr::new(compile_helper::HELPER))
    })
}

fn invoked_as_run() -> bool {
    std::env::args_os()
        .skip(1)
        .find(|arg| !arg.to_string_lossy().starts_with('-'))
        .is_some_and(|arg| arg == "run")
}

async fn dispatch(command: Command) -> CliResult<ExitCode> {
    match command {
        Command::List(args) => list::run(args).await,
        Command::Resolve(args) => resolve::run(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Add(args) => add::run(args).await,
        Command::Check(args) => check::run(args).await,
        Command::Explain(args) => explain::run(args).await,
        Command::Push(args) => push::run(args).await,
        Command::Pull(args) => pull::run(args).await,
        Command::Login(args) => login::run(args).await,
        Command::Demo { manifest } => {
            demo::demo(manifest.as_deref()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Trust(args) => manifests::trust(args),
        Command::Setup(args) => configure::run(args),
        Command::Hook(args) => hook::run(args).await,
        Command::Cache(args) => cache::run(args),
        Command::Store(args) => store::run(args),
        Command::New(args) => new::run(args),
        Command::Bindgen(args) => authoring::bindgen(args),
        Command::Componentize(args) => authoring::componentize(args),
        Command::Completions { shell } => {
            completions::print(shell, Cli::command()).map_err(Failure::runtime)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { dir } => {
            man::write(&dir, Cli::command()).map_err(|e| {
                Failure::runtime(format!(
                    "cannot write the man pages into {}: {e}",
                    escape_controls(&dir.display().to_string())
                ))
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve { setup, hooks } => {
            // Long-lived: optimized code replaces the baseline when ready.
            let uses = setup::Uses {
                tiering: dsh_env::Tiering::Background,
                hooks: Some(&hooks),
                prepare_ahead: true,
                ..setup::Uses::once()
            };
            serve::serve(setup.open(uses).await?.host)
                .await
                .map_err(Failure::runtime)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

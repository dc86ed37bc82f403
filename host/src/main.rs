//! The `dsh-env` command: a thin layer over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use dsh_env::{Agent, DshHome, HomeContext, HomeSetting, Registration, Registry, ToolExecution};

/// Per-call DSH_* environments from sandboxed WebAssembly contributors.
#[derive(Parser)]
#[command(version)]
struct Cli {
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
        /// The calling agent's session id (no agent when absent).
        #[arg(long)]
        session: Option<String>,
        /// The parent agent's session id.
        #[arg(long, requires = "session")]
        parent: Option<String>,
        /// Print a sorted JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct Setup {
    /// A contributor component to register (repeatable).
    #[arg(long = "contributor", value_name = "FILE.wasm")]
    contributors: Vec<PathBuf>,
    /// The harness home (default: $DSH_HOME, then ~/.dsh).
    #[arg(long)]
    home: Option<String>,
}

impl Setup {
    async fn registry(&self) -> anyhow::Result<(Registry, Vec<Registration>)> {
        let explicit: Vec<HomeSetting> = self
            .home
            .iter()
            .map(|path| HomeSetting {
                origin: "--home".into(),
                path: path.clone(),
            })
            .collect();
        let home = DshHome::resolve(&explicit, &HomeContext::from_process())?;
        let registry = Registry::new(home)?;
        let mut registrations = Vec::new();
        for path in &self.contributors {
            let component = registry.load_file(path)?;
            let registration = registry
                .register(component)
                .await
                .with_context(|| format!("registering {}", path.display()))?;
            registrations.push(registration);
        }
        Ok((registry, registrations))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("dsh-env: {err:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::List { setup, json } => {
            let (registry, _registrations) = setup.registry().await?;
            let rows = registry.list();
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for row in rows {
                    println!("{:<24} {:<16} {}", row.key, row.owner, row.description);
                }
            }
        }
        Command::Resolve {
            setup,
            session,
            parent,
            json,
        } => {
            let (registry, _registrations) = setup.registry().await?;
            let mut execution = ToolExecution::new("cli", "bash");
            if let Some(session_id) = session {
                let cwd = std::env::current_dir()?.display().to_string();
                execution = execution.with_agent(Agent {
                    session_id,
                    cwd,
                    depth: u32::from(parent.is_some()),
                    parent_session_id: parent,
                });
            }
            let overlay = registry.collect(&execution).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&overlay.to_map())?);
            } else {
                for (key, value) in overlay.iter() {
                    println!("{key}={value}");
                }
            }
        }
    }
    Ok(())
}

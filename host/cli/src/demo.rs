//! `dsh-env demo`: a scripted session with a parent agent and a spawned
//! child running at once, the example contributors registered and hooks
//! configured, all in a temporary home. Shows what each shell saw, what the
//! hooks received, and where the session files are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dsh_env::{CacheKey, DshHome, HomeContext, HostEnv, Manifest};
use dsh_env_harness::LocalExecutor;
use dsh_env_harness::agent::{AgentLoop, CallRecord, ScriptedModel};
use dsh_env_harness::hooks::{HookDialect, Hooks};
use dsh_env_harness::session::{Session, SessionStore};
use dsh_env_harness::tool::BashTool;
use serde_json::json;

use crate::failure::{CliResult, Failure};
use crate::home::home_cache;
use crate::setup::{manifest_trust, registry_config};

/// What every scripted shell runs: print the managed environment.
const SHOW_ENV: &str = "env | grep '^DSH_' | sort";

pub(crate) async fn demo(manifest: Option<&Path>) -> CliResult {
    // One home, replaced by each run: its session files and hook log stay
    // to be read after the demo, and runs do not pile up in the temp dir.
    let home_dir = std::env::temp_dir().join("dsh-env-demo");
    match std::fs::remove_dir_all(&home_dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Failure::runtime(e)),
        _ => {}
    }
    std::fs::create_dir_all(&home_dir).map_err(Failure::runtime)?;
    let home = DshHome::from_absolute(&home_dir).map_err(Failure::config)?;
    // The home is new each run; the compiled components are kept in the
    // user's own cache ($DSH_HOME or ~/.dsh), so only the first run compiles.
    let cache = match DshHome::resolve(&[], &HomeContext::from_process()) {
        Ok(user_home) => home_cache(user_home.path(), CacheKey::in_home(&user_home))?,
        Err(_) => home_cache(&home_dir, CacheKey::in_home(&home))?,
    };
    let default_manifest = PathBuf::from("contributors/examples.toml");
    let manifest = manifest.or_else(|| {
        default_manifest
            .exists()
            .then_some(default_manifest.as_path())
    });
    let manifest =
        (manifest.map(Manifest::from_file).transpose()).map_err(|e| Failure::config_error(&e))?;
    let trust = manifest_trust(manifest.as_ref())?;
    let registry =
        registry_config(None, dsh_env::Tiering::Baseline)?.build_with_cache(home, cache, trust)?;
    let _registrations = match &manifest {
        Some(manifest) => registry
            .register_manifest(manifest, &HostEnv::from_process())
            .await
            .map_err(Failure::config)?,
        None => Vec::new(),
    };

    let hooks_path = home_dir.join("hooks.json");
    let log = home_dir.join("hooks.log");
    // One line, appended in one write: the two agents' hooks run at once.
    let record = format!(
        "line=\"$DSH_SESSION_ID $(cat)\"; printf '%s\\n' \"$line\" >> '{}'",
        log.display()
    );
    let hooks_json = json!({"hooks": {
        "SessionStart": [{"hooks": [{"type": "command", "command": record}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": record}]}],
    }});
    std::fs::write(&hooks_path, hooks_json.to_string()).map_err(Failure::runtime)?;
    let hooks = Hooks::from_file(&hooks_path, HookDialect::ClaudeCode).map_err(Failure::config)?;

    let cwd = std::env::current_dir()
        .map_err(Failure::runtime)?
        .display()
        .to_string();
    let store = SessionStore::new(home_dir.join("sessions"));
    let parent = Session::new(cwd.clone());
    let child = parent.spawn(cwd);
    let agent = |session: Session| {
        let tool = BashTool::new(registry.clone(), LocalExecutor, "/");
        let model = ScriptedModel::bash_turn(&[SHOW_ENV], "done");
        AgentLoop::new(session, model, tool, hooks.clone(), store.clone())
    };
    let (mut parent_agent, mut child_agent) = (agent(parent), agent(child));
    let run = async |agent: &mut AgentLoop<ScriptedModel>| -> CliResult<Vec<CallRecord>> {
        agent.start("startup").await;
        agent
            .run_turn("Show me the DSH environment.")
            .await
            .map_err(Failure::runtime)
    };
    let (parent_calls, child_calls) = tokio::join!(run(&mut parent_agent), run(&mut child_agent));
    let (parent_calls, child_calls) = (parent_calls?, child_calls?);

    println!("dsh-env demo: a parent agent and a spawned child ran `{SHOW_ENV}` at the same time.");
    println!("DSH_HOME = {}\n", home_dir.display());
    print_table(&parent_calls, &child_calls);

    println!(
        "\nWhat the hooks received (DSH_SESSION_ID in the hook's environment, then its stdin):"
    );
    let received = std::fs::read_to_string(&log).unwrap_or_default();
    for line in received.lines().filter(|l| !l.trim().is_empty()) {
        println!("  {line}");
    }
    println!(
        "\nSession files (JSONL, written at the end of each turn), kept in {} until the next demo replaces it:",
        home_dir.display()
    );
    for agent in [&parent_agent, &child_agent] {
        let path = store.path(agent.session().id()).map_err(Failure::runtime)?;
        println!("  {}", path.display());
    }
    Ok(())
}

fn vars(calls: &[CallRecord]) -> BTreeMap<String, String> {
    calls
        .iter()
        .flat_map(|call| call.output.lines())
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn print_table(parent: &[CallRecord], child: &[CallRecord]) {
    let (parent, child) = (vars(parent), vars(child));
    let keys: Vec<&String> = parent
        .keys()
        .chain(child.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let cell = |map: &BTreeMap<String, String>, key: &str| {
        map.get(key).cloned().unwrap_or_else(|| "(absent)".into())
    };
    let width = keys.iter().map(|k| k.len()).max().unwrap_or(0).max(3);
    let column = keys
        .iter()
        .map(|k| cell(&parent, k).len())
        .max()
        .unwrap_or(0)
        .max(12);
    println!(
        "{:<width$}  {:<column$}  child shell",
        "key", "parent shell"
    );
    println!(
        "{:<width$}  {:<column$}  {}",
        "-".repeat(width),
        "-".repeat(column),
        "-".repeat(12)
    );
    for key in keys {
        println!(
            "{key:<width$}  {:<column$}  {}",
            cell(&parent, key),
            cell(&child, key)
        );
    }
}

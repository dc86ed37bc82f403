//! `dsh-env-embedder <home> <puppet.wasm>`: embeds the `dsh-env` crate as a
//! library user does, built outside the workspace and so on wasmtime as
//! released. Prints which reset of a freed instance's memory it got, then
//! checks that each execution's instance starts fresh: the puppet guest
//! counts its calls in a static, a page it writes, and a next instance in
//! the same pool slot must count from zero again. It is its own compile
//! helper, as the `dsh-env` CLI is, so that components are compiled by the
//! same wasmtime.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use dsh_env::{Agent, DshHome, Registry, SharedEngine, ToolExecution};
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};

const CALLS: usize = 5;

fn main() -> ExitCode {
    let arg0 = std::env::args_os().next().unwrap_or_default();
    if Path::new(&arg0).file_name() == Some(OsStr::new(dsh_env::compile_helper::HELPER)) {
        return dsh_env::compile_helper::helper_main();
    }
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [home, puppet] = &args[..] else {
        eprintln!("usage: dsh-env-embedder <home> <puppet.wasm>");
        return ExitCode::from(2);
    };
    let executor = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match executor.block_on(run(home, puppet)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dsh-env-embedder: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(home: &Path, puppet: &Path) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "page-map reset: {}",
        if dsh_env::PAGEMAP_RESET {
            "fixed"
        } else {
            "off (the safe reset)"
        }
    );
    println!("resets in place: {}", dsh_env::resets_in_place());
    let runtime = SharedEngine::new()?;
    let registry = Registry::builder(DshHome::from_absolute(home)?)
        .shared_engine(&runtime)
        .compiler(std::env::current_exe()?)
        .build()?;
    let config = BTreeMap::from([
        ("name".to_string(), "counter".to_string()),
        (
            "keys".to_string(),
            "DSH_COUNT=calls this instance served".to_string(),
        ),
        ("pairs".to_string(), "DSH_COUNT={count}".to_string()),
    ]);
    let component = registry.load(LoadFrom::File(puppet), &LoadOptions::new())?.with_config(config);
    let _registration = registry.register(component).await?;
    for call in 0..CALLS {
        let execution = ToolExecution::new(format!("call-{call}"), "bash").with_agent(Agent {
            session_id: "session-1".into(),
            cwd: None,
            parent_session_id: None,
            depth: 0,
        });
        let overlay = registry.collect(&execution, &CollectOptions::new()).await?.overlay;
        let count = overlay.get("DSH_COUNT").unwrap_or("none");
        if count != "1" {
            return Err(format!("call {call}: the instance had served {count} calls").into());
        }
    }
    println!("fresh instances: {CALLS} of {CALLS}");
    Ok(())
}

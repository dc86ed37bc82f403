//! The keyless full loop: a scripted model calls the real bash tool, which
//! collects from real WASM contributors and runs real processes, while the
//! harness process itself carries a stale `DSH_*` variable. Plus resume,
//! fork, spawn, and fifty concurrent agents.
//!
//! This file holds one test, so it is the only thread of its process when it
//! sets the stale variable.

use std::path::Path;
use std::sync::Arc;

use dsh_env::{DshHome, Registration, Registry};
use dsh_env::{LoadFrom, LoadOptions};
use dsh_env_harness::LocalExecutor;
use dsh_env_harness::agent::{AgentLoop, ScriptedModel};
use dsh_env_harness::hooks::Hooks;
use dsh_env_harness::session::{Relation, Session, SessionStore};
use dsh_env_harness::tool::BashTool;
use dsh_env_tests::artifacts;

const PRINT: &str = r#"printf '%s\n' "$DSH_HOME" "$DSH_SHELL" "$DSH_SESSION_ID" "${DSH_STALE_PARENT-unset}"; test -e "$DSH_HOME/sessions/$DSH_SESSION_ID.jsonl" && echo exists || echo absent"#;
const LINEAGE: &str = r#"printf '%s|%s|%s' "$DSH_SESSION_ID" "${DSH_PARENT_SESSION_ID-none}" "${DSH_AGENT_DEPTH-none}""#;

struct Harness {
    registry: Registry,
    store: SessionStore,
    _registrations: Vec<Registration>,
}

impl Harness {
    async fn new(home: &Path) -> Self {
        let registry = Registry::builder(DshHome::from_absolute(home).unwrap())
            .build()
            .unwrap();
        let mut registrations = Vec::new();
        for path in [artifacts::AGENT_LINEAGE, artifacts::CALL_TRACE] {
            let component = registry
                .load(LoadFrom::File(path.as_ref()), &LoadOptions::new())
                .unwrap();
            registrations.push(registry.register(component).await.unwrap());
        }
        Harness {
            store: SessionStore::new(home.join("sessions")),
            registry,
            _registrations: registrations,
        }
    }

    fn agent(&self, session: Session, commands: &[&str]) -> AgentLoop<ScriptedModel> {
        let tool = BashTool::new(self.registry.clone(), LocalExecutor, "/");
        let model = ScriptedModel::bash_turn(commands, "done");
        AgentLoop::new(session, model, tool, Hooks::none(), self.store.clone())
    }

    async fn one_call(
        &self,
        session: Session,
        command: &str,
    ) -> (AgentLoop<ScriptedModel>, String) {
        let mut agent = self.agent(session, &[command]);
        let records = agent.run_turn("go").await.unwrap();
        let [record] = &records[..] else {
            panic!("one call")
        };
        assert!(!record.is_error, "{}", record.output);
        let output = record.output.clone();
        (agent, output)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_full_loop_with_resume_fork_spawn_and_concurrent_agents() {
    // SAFETY: this is the only test in this process and no other thread has
    // started yet, so nothing reads the environment concurrently.
    unsafe { std::env::set_var("DSH_STALE_PARENT", "stale") };

    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let harness = Harness::new(home.path()).await;

    // A fresh session has its id before its first turn; no file yet.
    let session = Session::new(cwd.path().display().to_string());
    let id = session.id().to_string();
    assert!(!harness.store.path(&id).unwrap().exists());
    let (agent, output) = harness.one_call(session, PRINT).await;
    let lines: Vec<&str> = output.lines().collect();
    let home_str = home.path().display().to_string();
    assert_eq!(
        lines,
        [home_str.as_str(), "1", id.as_str(), "unset", "absent"]
    );

    // After the turn, the file exists with the right header.
    let path = harness.store.path(&id).unwrap();
    let first_line = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let header: serde_json::Value = serde_json::from_str(&first_line).unwrap();
    assert_eq!(
        (header["type"].as_str(), header["id"].as_str()),
        (Some("session"), Some(id.as_str()))
    );
    assert_eq!(header["cwd"].as_str(), Some(cwd.path().to_str().unwrap()));

    // Resume: same id, history kept.
    let resumed = harness.store.load(&id).unwrap();
    assert_eq!(resumed.id(), id);
    assert_eq!(resumed.events, agent.session().events);
    let (resumed_agent, output) = harness.one_call(resumed, LINEAGE).await;
    assert_eq!(output, format!("{id}|none|0"));
    assert!(resumed_agent.session().events.len() > agent.session().events.len());

    // Fork: new id, parent's history, lineage names the parent.
    let fork = resumed_agent.session().fork();
    let fork_id = fork.id().to_string();
    assert_ne!(fork_id, id);
    assert_eq!(
        fork.header.parent.as_ref().unwrap().relation,
        Relation::Fork
    );
    let (_, output) = harness.one_call(fork, LINEAGE).await;
    assert_eq!(output, format!("{fork_id}|{id}|0"));

    // Spawn: new id, depth + 1, lineage names the parent.
    let child = resumed_agent
        .session()
        .spawn(cwd.path().display().to_string());
    let child_id = child.id().to_string();
    let (_, output) = harness.one_call(child, LINEAGE).await;
    assert_eq!(output, format!("{child_id}|{id}|1"));
    let child_file = harness.store.load(&child_id).unwrap();
    assert_eq!(child_file.header.parent.unwrap().session_id, id);

    // Fifty agents, parents and their spawned children, running bash at once.
    let harness = Arc::new(harness);
    let tasks: Vec<_> = (0..25)
        .flat_map(|_| {
            let parent = Session::new(cwd.path().display().to_string());
            let child = parent.spawn(cwd.path().display().to_string());
            [parent, child]
        })
        .map(|session| {
            let harness = harness.clone();
            tokio::spawn(async move {
                let expected = format!(
                    "{}|{}|{}",
                    session.id(),
                    session
                        .header
                        .parent
                        .as_ref()
                        .map_or("none", |p| p.session_id.as_str()),
                    session.header.depth
                );
                let (_, output) = harness.one_call(session, LINEAGE).await;
                assert_eq!(output, expected);
            })
        })
        .collect();
    assert_eq!(tasks.len(), 50);
    for task in tasks {
        task.await.unwrap();
    }
}

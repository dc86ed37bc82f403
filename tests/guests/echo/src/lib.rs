//! `echo`: the leanest useful contributor, for benchmarks. It declares one
//! key, both named by its config (`name`, `key`), and returns the calling
//! agent's session id under it. Unlike the puppet, it uses nothing of std's
//! I/O, so it imports what `agent-lineage` imports.

use dsh_env_guest::{Contributor, Declaration, Execution, config, export_contributor};

struct Echo;

fn key() -> String {
    config("key").unwrap_or_else(|| "DSH_ECHO".into())
}

impl Contributor for Echo {
    fn declare() -> Declaration {
        let name = config("name").unwrap_or_else(|| "echo".into());
        Declaration::new(name).key(key(), "The calling agent's session id, echoed.")
    }

    fn resolve(execution: Execution) -> Result<Vec<(String, String)>, String> {
        Ok(execution
            .agent
            .map(|agent| (key(), agent.session_id))
            .into_iter()
            .collect())
    }
}

export_contributor!(Echo);

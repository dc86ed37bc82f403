//! `agent-lineage`: where the calling agent sits in its family of agents.

use dsh_env_guest::{Contributor, Declaration, Execution, export_contributor};

struct Lineage;

impl Contributor for Lineage {
    fn declare() -> Declaration {
        Declaration::new("agent-lineage")
            .key(
                "DSH_PARENT_SESSION_ID",
                "Session id of the agent that spawned or forked this one.",
            )
            .key(
                "DSH_AGENT_DEPTH",
                "How deep the calling agent is nested: 0 for a top-level agent.",
            )
    }

    fn resolve(execution: Execution) -> Result<Vec<(String, String)>, String> {
        let Some(agent) = execution.agent else {
            return Ok(Vec::new());
        };
        let mut pairs = vec![("DSH_AGENT_DEPTH".to_string(), agent.depth.to_string())];
        if let Some(parent) = agent.parent_session_id {
            pairs.push(("DSH_PARENT_SESSION_ID".to_string(), parent));
        }
        Ok(pairs)
    }
}

export_contributor!(Lineage);

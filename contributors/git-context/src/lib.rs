//! `git-context`: the branch checked out in the agent's working directory.
//!
//! Needs the `cwd = "read"` grant, which preopens the agent's cwd read-only.
//! The key is absent when there is no agent, no grant, no repository, or a
//! detached HEAD.

use dsh_env_guest::{Contributor, Declaration, Execution, export_contributor};

struct GitContext;

impl Contributor for GitContext {
    fn declare() -> Declaration {
        Declaration::new("git-context").key(
            "DSH_GIT_BRANCH",
            "The git branch checked out in the agent's working directory.",
        )
    }

    fn resolve(execution: Execution) -> Result<Vec<(String, String)>, String> {
        let Some(cwd) = execution.agent.and_then(|agent| agent.cwd) else {
            return Ok(Vec::new());
        };
        let head = std::fs::read_to_string(format!("{}/.git/HEAD", cwd.trim_end_matches('/')));
        Ok(head
            .ok()
            .and_then(|head| Some(head.trim().strip_prefix("ref: refs/heads/")?.to_string()))
            .filter(|branch| !branch.is_empty())
            .map(|branch| ("DSH_GIT_BRANCH".to_string(), branch))
            .into_iter()
            .collect())
    }
}

export_contributor!(GitContext);

//! `{{name}}`: a dsh-env contributor. `declare` names every key it may set;
//! `resolve` returns their values for one tool call, in a fresh sandboxed
//! instance each time.

use dsh_env_guest::{Contributor, Declaration, Execution, export_contributor};

const KEY: &str = "{{key}}";

struct Guest;

impl Contributor for Guest {
    fn declare() -> Declaration {
        Declaration::new("{{name}}").key(KEY, "The tool this call runs, e.g. bash.")
    }

    fn resolve(execution: Execution) -> Result<Vec<(String, String)>, String> {
        // `Err` fails the call with its message; a key left out is absent.
        Ok(vec![(KEY.to_string(), execution.tool)])
    }
}

export_contributor!(Guest);

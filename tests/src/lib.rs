//! Shared pieces of the black-box tests: the built guest components, and
//! helpers to register them.

use std::collections::BTreeMap;

use dsh_env::{Agent, ContributorComponent, DshHome, Registry, ToolExecution};

/// Paths of the guest components.
pub use dsh_env_artifacts as artifacts;

/// A registry with the fixed home `/tmp/dsh-test-home`.
pub fn registry() -> Registry {
    Registry::new(DshHome::from_absolute("/tmp/dsh-test-home".as_ref()).unwrap()).unwrap()
}

/// The puppet guest, configured by `config` (see tests/guests/puppet).
pub fn puppet(registry: &Registry, config: &[(&str, &str)]) -> ContributorComponent {
    let config: BTreeMap<String, String> = config
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    registry
        .load_file(artifacts::PUPPET.as_ref())
        .unwrap()
        .with_config(config)
}

/// A foreground bash call `call_id` made by agent `session_id`.
pub fn agent_call(call_id: &str, session_id: &str) -> ToolExecution {
    ToolExecution::new(call_id, "bash").with_agent(Agent {
        session_id: session_id.into(),
        cwd: "/work".into(),
        parent_session_id: None,
        depth: 0,
    })
}

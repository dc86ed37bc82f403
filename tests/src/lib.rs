//! Shared pieces of the black-box tests: the built guest components, and
//! helpers to register them.

use std::collections::BTreeMap;

use dsh_env::{Agent, ContributorComponent, DshHome, Registry, ToolExecution};

pub mod rules;

/// Paths of the guest components.
pub use dsh_env_artifacts as artifacts;

/// A registry with the fixed home `/tmp/dsh-test-home`.
pub fn registry() -> Registry {
    Registry::new(DshHome::from_absolute("/tmp/dsh-test-home".as_ref()).unwrap()).unwrap()
}

/// The puppet guest, configured by `config` (see tests/guests/puppet).
pub fn puppet(registry: &Registry, config: &[(&str, &str)]) -> ContributorComponent {
    configured(registry, artifacts::PUPPET, config)
}

/// The echo guest, named `name`, echoing the session id under `key` (see
/// tests/guests/echo).
pub fn echo(registry: &Registry, name: &str, key: &str) -> ContributorComponent {
    configured(registry, artifacts::ECHO, &[("name", name), ("key", key)])
}

fn configured(registry: &Registry, path: &str, config: &[(&str, &str)]) -> ContributorComponent {
    let config: BTreeMap<String, String> = config
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    registry
        .load_file(path.as_ref())
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

/// The workload of the leak test and bench: three contributors per cycle.
pub mod leak {
    use dsh_env::{OnError, Registration, Registry};

    use super::{artifacts, puppet};

    /// The resident set of this process, in KiB (`VmRSS` of /proc/self/status).
    pub fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/self/status")
    }

    /// Registers a real component, an echoing puppet, and a puppet that always
    /// fails under `on_error = "omit"`, so every cycle exercises an instance,
    /// a store and an error.
    pub async fn contributors(registry: &Registry) -> Vec<Registration> {
        let lineage = registry
            .load_file(artifacts::AGENT_LINEAGE.as_ref())
            .unwrap();
        let echo = puppet(
            registry,
            &[
                ("name", "echo"),
                ("keys", "DSH_ECHO_SESSION=s|DSH_ECHO_CALL=c"),
                ("pairs", "DSH_ECHO_SESSION={session}|DSH_ECHO_CALL={call}"),
            ],
        );
        let failing = puppet(
            registry,
            &[
                ("name", "failing"),
                ("keys", "DSH_FAILING=f"),
                ("resolve", "err:always fails"),
            ],
        )
        .with_on_error(OnError::Omit);
        let mut registrations = Vec::new();
        for component in [lineage, echo, failing] {
            registrations.push(registry.register(component).await.unwrap());
        }
        registrations
    }
}

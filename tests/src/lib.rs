//! Shared pieces of the black-box tests: the built guest components, and
//! helpers to register them.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use dsh_env::{
    Agent, ContributorComponent, DshHome, HostLimits, LoadError, Registry, RegistryError,
    SharedEngine, ToolExecution, Trust,
};
use dsh_env::{LoadFrom, LoadOptions};

pub mod rules;

/// Paths of the guest components.
pub use dsh_env_artifacts as artifacts;

/// The fixed home of the tests' registries (its cache is shared).
const HOME: &str = "/tmp/dsh-test-home";

/// The runtime that every [`registry`] of a test process shares, as an
/// embedder's registries would.
pub fn runtime() -> &'static SharedEngine {
    static SHARED: OnceLock<SharedEngine> = OnceLock::new();
    SHARED.get_or_init(|| SharedEngine::new().unwrap())
}

/// A registry with the fixed home `/tmp/dsh-test-home`, in the shared
/// [`runtime`].
pub fn registry() -> Registry {
    let home = DshHome::from_absolute(HOME.as_ref()).unwrap();
    builder(home).build().unwrap()
}

/// A builder of a registry with `home`, in the shared [`runtime`], for a
/// test that sets what the registry is built with (tiering, compiler,
/// progress).
pub fn builder(home: DshHome) -> dsh_env::RegistryBuilder {
    Registry::builder(home).shared_engine(runtime())
}

/// A registry like [`registry`] that registers only what `trust` admits.
pub fn registry_trusting(trust: Trust) -> Registry {
    let home = DshHome::from_absolute(HOME.as_ref()).unwrap();
    builder(home).trust(trust).build().unwrap()
}

/// A registry with `home` (absolute), in the shared [`runtime`].
pub fn registry_at(home: impl AsRef<std::path::Path>) -> Registry {
    let home = DshHome::from_absolute(home.as_ref()).unwrap();
    builder(home).build().unwrap()
}

/// A registry like [`registry`] in a runtime of its own, whose instances
/// stay within `host_limits`: for a test that reads the runtime's budgets,
/// which other tests' calls would move in the shared one.
pub fn registry_with(host_limits: HostLimits) -> Registry {
    let home = DshHome::from_absolute(HOME.as_ref()).unwrap();
    let runtime = SharedEngine::with_host_limits(host_limits).unwrap();
    Registry::builder(home)
        .shared_engine(&runtime)
        .build()
        .unwrap()
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
        .load(LoadFrom::File(path.as_ref()), &LoadOptions::new())
        .unwrap()
        .with_config(config)
}

/// The load failure `err` is, as a load from a file or bytes fails.
pub fn load_error(err: RegistryError) -> LoadError {
    match err {
        RegistryError::Load(err) => err,
        other => panic!("not a load failure: {other}"),
    }
}

/// A foreground bash call `call_id` made by agent `session_id`.
pub fn agent_call(call_id: &str, session_id: &str) -> ToolExecution {
    agent_call_in(call_id, session_id, "/work")
}

/// A foreground bash call `call_id` made by agent `session_id` working in `cwd`.
pub fn agent_call_in(call_id: &str, session_id: &str, cwd: &str) -> ToolExecution {
    ToolExecution::new(call_id, "bash").with_agent(Agent {
        session_id: session_id.into(),
        cwd: Some(cwd.into()),
        parent_session_id: None,
        depth: 0,
    })
}

/// The workload of the leak test and bench: three contributors per cycle.
pub mod leak {
    use dsh_env::{LoadFrom, LoadOptions, OnError, Registration, Registry};

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
            .load(
                LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
                &LoadOptions::new(),
            )
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

/// Hostile components made from real ones: what a malicious author could
/// ship, built at test time.
pub mod surgery {
    /// `component` with `copies` more core modules `module` appended, each
    /// instantiated (running its start function) when the component is.
    pub fn with_core_modules(component: &[u8], module: &[u8], copies: u32) -> Vec<u8> {
        let existing = top_level_sections(component)
            .filter(|&(id, _)| id == CORE_MODULE)
            .count() as u32;
        let mut out = component.to_vec();
        for _ in 0..copies {
            section(&mut out, CORE_MODULE, module);
        }
        // Instantiate each new module, with no imports.
        let mut instances = leb(copies);
        for index in existing..existing + copies {
            instances.push(0x00);
            instances.extend(leb(index));
            instances.extend(leb(0));
        }
        section(&mut out, CORE_INSTANCE, &instances);
        out
    }

    const CORE_MODULE: u8 = 1;
    const CORE_INSTANCE: u8 = 2;

    /// The (id, contents) of each section of a component, after its header.
    fn top_level_sections(bytes: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
        let mut at = 8;
        std::iter::from_fn(move || {
            let id = *bytes.get(at)?;
            let (size, width) = read_leb(&bytes[at + 1..]);
            let start = at + 1 + width;
            at = start + size as usize;
            Some((id, &bytes[start..at]))
        })
    }

    fn section(out: &mut Vec<u8>, id: u8, contents: &[u8]) {
        out.push(id);
        out.extend(leb(contents.len() as u32));
        out.extend_from_slice(contents);
    }

    fn leb(mut value: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                bytes.push(byte);
                return bytes;
            }
            bytes.push(byte | 0x80);
        }
    }

    fn read_leb(bytes: &[u8]) -> (u32, usize) {
        let mut value = 0u32;
        for (i, byte) in bytes.iter().enumerate().take(5) {
            value |= u32::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return (value, i + 1);
            }
        }
        panic!("malformed LEB128 in a component")
    }
}

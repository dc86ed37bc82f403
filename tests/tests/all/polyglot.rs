//! The example contributors written in Python (`session-url`), JavaScript
//! (`call-context`) and C (`workspace-id`), through the registry. Compiling a
//! Python or JavaScript component takes seconds, so each test loads each
//! component once and registers clones of it.

use std::collections::BTreeMap;

use dsh_env::{Agent, ContributorComponent, Limits, Mode, Registry, ToolExecution};
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};
use dsh_env_tests::{agent_call, artifacts, registry};

fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn load(registry: &Registry, path: &str) -> ContributorComponent {
    registry
        .load(LoadFrom::File(path.as_ref()), &LoadOptions::new())
        .unwrap()
}

/// A call by agent `session_id` working in `cwd`.
fn call_in(call_id: &str, session_id: &str, cwd: &str) -> ToolExecution {
    ToolExecution::new(call_id, "bash").with_agent(Agent {
        session_id: session_id.into(),
        cwd: Some(cwd.into()),
        parent_session_id: None,
        depth: 0,
    })
}

/// A background call nested in `root_call_id`, without an agent.
fn nested_background_call(call_id: &str, root_call_id: &str) -> ToolExecution {
    let mut execution = ToolExecution::new(call_id, "bash").with_mode(Mode::Background);
    execution.root_call_id = root_call_id.into();
    execution
}

/// Minor page faults this thread has taken so far.
fn thread_page_faults() -> u64 {
    // SAFETY: `getrusage` only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut usage), 0);
        usage
    };
    usage.ru_minflt as u64
}

fn owners(registry: &Registry) -> Vec<(String, String)> {
    registry
        .list()
        .into_iter()
        .filter(|row| row.owner != dsh_env::BUILTIN_OWNER)
        .map(|row| (row.key.to_string(), row.owner))
        .collect()
}

/// `call-context.js` imports `warm-bindings.js`, which runs at build time
/// what componentize-js's bindings would otherwise set up in every call's
/// fresh instance. A call, its instantiation included, then executes 528,125
/// units of fuel; without the import, 1,349,333, and `declare` alone is over
/// the budget, which sits between the two.
#[tokio::test]
async fn javascript_calls_find_their_bindings_warmed_at_build_time() {
    const BUDGET: u64 = 800_000;
    let registry = registry();
    let limits = Limits {
        fuel: Some(BUDGET),
        ..Limits::default()
    };
    let component = load(&registry, artifacts::CALL_CONTEXT).with_limits(limits);
    let _registration = (registry.register(component).await)
        .unwrap_or_else(|e| panic!("declared within {BUDGET} units of fuel: {e}"));
    for call_id in ["call-1", "call-2"] {
        let report = (registry
            .collect(&agent_call(call_id, "s1"), &CollectOptions::new())
            .await)
            .unwrap();
        assert!(report.omitted.is_empty(), "{:?}", report.omitted);
        assert_eq!(report.overlay.get("DSH_ROOT_CALL_ID"), Some(call_id));
    }
}

#[tokio::test]
async fn python_session_url_joins_base_url_and_session_id() {
    let registry = registry();
    let component = load(&registry, artifacts::SESSION_URL);
    let no_agent = ToolExecution::new("c1", "bash");

    for (base_url, expected) in [
        (
            "https://agents.example.com/sessions/",
            "https://agents.example.com/sessions/sess-42",
        ),
        (
            "https://agents.example.com/s",
            "https://agents.example.com/s/sess-42",
        ),
    ] {
        let registration = registry
            .register(
                component
                    .clone()
                    .with_config(config(&[("base_url", base_url)])),
            )
            .await
            .unwrap();
        assert_eq!(registration.name(), "session-url");
        assert_eq!(
            owners(&registry),
            [("DSH_SESSION_URL".to_string(), "session-url".to_string())]
        );
        let overlay = registry
            .collect(&agent_call("c1", "sess-42"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay;
        assert_eq!(
            overlay.get("DSH_SESSION_URL"),
            Some(expected),
            "base_url {base_url}"
        );
        let overlay = registry
            .collect(&no_agent, &CollectOptions::new())
            .await
            .unwrap()
            .overlay;
        assert_eq!(overlay.get("DSH_SESSION_URL"), None, "no agent");
    }

    let _unconfigured = registry
        .register(component.with_config(config(&[("other", "x")])))
        .await
        .unwrap();
    let overlay = registry
        .collect(&agent_call("c1", "sess-42"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_SESSION_URL"), None, "no base_url");
    assert_eq!(overlay.get("DSH_SESSION_ID"), Some("sess-42"));
}

#[tokio::test]
async fn javascript_call_context_reports_mode_and_root_call() {
    let registry = registry();
    let registration = registry
        .register(load(&registry, artifacts::CALL_CONTEXT))
        .await
        .unwrap();
    assert_eq!(registration.name(), "call-context");
    assert_eq!(
        owners(&registry),
        [
            ("DSH_CALL_MODE".to_string(), "call-context".to_string()),
            ("DSH_ROOT_CALL_ID".to_string(), "call-context".to_string()),
        ]
    );

    let overlay = registry
        .collect(&agent_call("call-1", "s1"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_CALL_MODE"), Some("foreground"));
    assert_eq!(
        overlay.get("DSH_ROOT_CALL_ID"),
        Some("call-1"),
        "not nested: its own id"
    );

    let overlay = registry
        .collect(
            &nested_background_call("call-2", "call-1"),
            &CollectOptions::new(),
        )
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_CALL_MODE"), Some("background"));
    assert_eq!(overlay.get("DSH_ROOT_CALL_ID"), Some("call-1"));

    let with_agent = agent_call("call-3", "s1").with_mode(Mode::Background);
    let overlay = registry
        .collect(&with_agent, &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_CALL_MODE"), Some("background"));
    assert_eq!(overlay.get("DSH_ROOT_CALL_ID"), Some("call-3"));
}

#[tokio::test]
async fn c_workspace_id_hashes_the_agents_cwd() {
    let registry = registry();
    let registration = registry
        .register(load(&registry, artifacts::WORKSPACE_ID))
        .await
        .unwrap();
    assert_eq!(registration.name(), "workspace-id");
    assert_eq!(
        owners(&registry),
        [("DSH_WORKSPACE_ID".to_string(), "workspace-id".to_string())]
    );

    // The first 12 hex digits of FNV-1a-64, computed independently (Python).
    for (cwd, expected) in [
        ("/work", "1f92008dc875"),
        ("/work/child", "c5e43826cb03"),
        ("/home/zoë/проект", "7d13f3893545"),
        ("/srv/w37500", "00c31eadf878"),
        ("", "cbf29ce48422"),
    ] {
        assert_eq!(
            &format!("{:016x}", fnv1a(cwd.as_bytes()))[..12],
            expected,
            "{cwd:?}"
        );
        for session in ["s1", "s2"] {
            let overlay = registry
                .collect(&call_in("c1", session, cwd), &CollectOptions::new())
                .await
                .unwrap()
                .overlay;
            assert_eq!(
                overlay.get("DSH_WORKSPACE_ID"),
                Some(expected),
                "{cwd:?} for {session}"
            );
        }
    }

    let overlay = registry
        .collect(&ToolExecution::new("c1", "bash"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_WORKSPACE_ID"), None, "no agent");
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_language_together_in_one_overlay() {
    let registry = registry();
    let mut registrations = Vec::new();
    for (path, config_pairs) in [
        (artifacts::AGENT_LINEAGE, &[][..]),
        (artifacts::CALL_TRACE, &[]),
        (
            artifacts::SESSION_URL,
            &[("base_url", "https://ui.example/s/")],
        ),
        (artifacts::CALL_CONTEXT, &[]),
        (artifacts::WORKSPACE_ID, &[]),
    ] {
        let component = load(&registry, path).with_config(config(config_pairs));
        registrations.push(registry.register(component).await.unwrap());
    }
    let names: Vec<&str> = registrations.iter().map(|r| r.name()).collect();
    assert_eq!(
        names,
        [
            "agent-lineage",
            "call-trace",
            "session-url",
            "call-context",
            "workspace-id"
        ]
    );

    let execution = ToolExecution::new("call-9", "bash")
        .with_mode(Mode::Background)
        .with_agent(Agent {
            session_id: "child".into(),
            cwd: Some("/work/child".into()),
            parent_session_id: Some("parent".into()),
            depth: 1,
        });
    // Several at once, so that the pool holds instances of every language together.
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (registry, execution) = (registry.clone(), execution.clone());
            tokio::spawn(async move {
                registry
                    .collect(&execution, &CollectOptions::new())
                    .await
                    .unwrap()
                    .overlay
            })
        })
        .collect();
    for task in tasks {
        let overlay = task.await.unwrap();
        let keys: Vec<&str> = overlay.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "DSH_AGENT_DEPTH",
                "DSH_CALL_MODE",
                "DSH_HOME",
                "DSH_PARENT_SESSION_ID",
                "DSH_ROOT_CALL_ID",
                "DSH_SESSION_ID",
                "DSH_SESSION_URL",
                "DSH_SHELL",
                "DSH_TRACEPARENT",
                "DSH_WORKSPACE_ID",
            ]
        );
        assert_eq!(overlay.get("DSH_AGENT_DEPTH"), Some("1"));
        assert_eq!(overlay.get("DSH_PARENT_SESSION_ID"), Some("parent"));
        assert_eq!(
            overlay.get("DSH_SESSION_URL"),
            Some("https://ui.example/s/child")
        );
        assert_eq!(overlay.get("DSH_CALL_MODE"), Some("background"));
        assert_eq!(overlay.get("DSH_ROOT_CALL_ID"), Some("call-9"));
        assert_eq!(overlay.get("DSH_WORKSPACE_ID"), Some("c5e43826cb03"));
        assert!(overlay.get("DSH_TRACEPARENT").unwrap().starts_with("00-"));
    }
}

/// An interpreter's heap dirties hundreds of disjoint runs of pages. When its
/// instance is freed, the pool resets those pages in place, so the next
/// instance in the slot finds them resident; wasmtime 48 as released stopped
/// after 32 runs and unmapped the rest, and every call then took 79 (Python)
/// or 38 (JavaScript) page faults (see vendor/README.md).
#[tokio::test]
async fn an_interpreter_guests_pages_stay_resident_from_call_to_call() {
    if !dsh_env::resets_in_place() {
        eprintln!("skipped: this kernel has no PAGEMAP_SCAN, so freed memory is unmapped");
        return;
    }
    const CALLS: u64 = 20;
    let call = agent_call("c1", "sess-42");
    for (path, settings) in [
        (
            artifacts::SESSION_URL,
            &[("base_url", "https://a.example/")][..],
        ),
        (artifacts::CALL_CONTEXT, &[][..]),
    ] {
        // A runtime of its own: in the shared one, other tests' instances
        // take the slot between calls and leave their own pages in it.
        let registry = dsh_env_tests::registry_with(dsh_env::HostLimits::default());
        let component = load(&registry, path).with_config(config(settings));
        let _registration = registry.register(component).await.unwrap();
        // The first calls give the slot this module's image and pages.
        for _ in 0..3 {
            registry.prepare().await;
            registry
                .collect(&call, &CollectOptions::new())
                .await
                .unwrap();
        }
        let mut faults = 0;
        for _ in 0..CALLS {
            // As the bash tool does: the instance is made ahead of the call.
            registry.prepare().await;
            let before = thread_page_faults();
            let overlay = registry
                .collect(&call, &CollectOptions::new())
                .await
                .unwrap()
                .overlay;
            faults += thread_page_faults() - before;
            assert!(overlay.len() > 3, "{path} set nothing: {overlay:?}");
        }
        assert!(
            faults / CALLS < 8,
            "{path}: {faults} page faults in {CALLS} calls, each on an instance made ahead"
        );
    }
}

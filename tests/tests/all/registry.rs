//! The registry through its public interface, with real components: the
//! example contributors and the configurable `puppet` guest.

use std::sync::{Arc, Mutex};

use dsh_env::{
    Agent, DeclarationProblem, FailureCause, GuestFailure, KeyError, Mode, NativeContributor,
    OutputProblem, Phase, RawDeclaration, Registration, Registry, RegistryError, ToolExecution,
};
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};
use dsh_env_tests::{agent_call, artifacts, echo, load_error, puppet, registry};

fn child_call(call_id: &str, session_id: &str, parent: &str) -> ToolExecution {
    ToolExecution::new(call_id, "bash").with_agent(Agent {
        session_id: session_id.into(),
        cwd: Some("/work/child".into()),
        parent_session_id: Some(parent.into()),
        depth: 1,
    })
}

async fn register_examples(registry: &Registry) -> Vec<Registration> {
    let mut registrations = Vec::new();
    for path in [artifacts::AGENT_LINEAGE, artifacts::CALL_TRACE] {
        let component = registry
            .load(LoadFrom::File(path.as_ref()), &LoadOptions::new())
            .unwrap();
        registrations.push(registry.register(component).await.unwrap());
    }
    registrations
}

async fn declaration_error(config: &[(&str, &str)]) -> dsh_env::DeclarationError {
    let registry = registry();
    match registry.register(puppet(&registry, config)).await {
        Err(RegistryError::Declaration(err)) => err,
        Err(other) => panic!("expected a declaration error, got {other}"),
        Ok(_) => panic!("registration should fail for {config:?}"),
    }
}

async fn resolve_error(config: &[(&str, &str)]) -> dsh_env::ContributorError {
    let registry = registry();
    let _puppet = registry.register(puppet(&registry, config)).await.unwrap();
    registry
        .collect(&agent_call("c1", "s1"), &CollectOptions::new())
        .await
        .unwrap_err()
}

#[tokio::test]
async fn builtins_without_an_agent() {
    let overlay = registry()
        .collect(&ToolExecution::new("c1", "bash"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(
        overlay.to_map().into_iter().collect::<Vec<_>>(),
        [
            ("DSH_HOME".to_string(), "/tmp/dsh-test-home".to_string()),
            ("DSH_SHELL".to_string(), "1".to_string()),
        ]
    );
}

#[tokio::test]
async fn builtins_with_an_agent_add_the_session_id() {
    let overlay = registry()
        .collect(&agent_call("c1", "sess-1"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_SESSION_ID"), Some("sess-1"));
    assert_eq!(overlay.get("DSH_SHELL"), Some("1"));
    assert_eq!(overlay.len(), 3);
}

#[tokio::test]
async fn example_contributors_resolve_for_a_child_agent() {
    let registry = registry();
    let _examples = register_examples(&registry).await;
    let overlay = registry
        .collect(
            &child_call("call-7", "child", "parent"),
            &CollectOptions::new(),
        )
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_PARENT_SESSION_ID"), Some("parent"));
    assert_eq!(overlay.get("DSH_AGENT_DEPTH"), Some("1"));
    assert_eq!(overlay.get("DSH_SESSION_ID"), Some("child"));
    let traceparent = overlay.get("DSH_TRACEPARENT").unwrap();
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!((parts[0], parts[3]), ("00", "01"));
    assert_eq!((parts[1].len(), parts[2].len()), (32, 16));
    assert!(
        parts[1]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    let keys: Vec<&str> = overlay.iter().map(|(k, _)| k.as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "the overlay is sorted");
}

#[tokio::test]
async fn traceparent_shares_the_trace_within_a_session_and_not_across() {
    let registry = registry();
    let _examples = register_examples(&registry).await;
    let trace = |overlay: &dsh_env::Overlay| overlay.get("DSH_TRACEPARENT").unwrap().to_string();
    let a1 = trace(
        &registry
            .collect(&agent_call("c1", "s-a"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay,
    );
    let a1_again = trace(
        &registry
            .collect(&agent_call("c1", "s-a"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay,
    );
    let a2 = trace(
        &registry
            .collect(&agent_call("c2", "s-a"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay,
    );
    let b1 = trace(
        &registry
            .collect(&agent_call("c1", "s-b"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay,
    );
    assert_eq!(a1, a1_again, "deterministic");
    assert_eq!(a1[3..35], a2[3..35], "same session, same trace id");
    assert_ne!(
        a1[36..52],
        a2[36..52],
        "different calls, different span ids"
    );
    assert_ne!(a1[3..35], b1[3..35], "different sessions, different traces");
}

#[tokio::test]
async fn example_contributors_without_an_agent() {
    let registry = registry();
    let _examples = register_examples(&registry).await;
    let overlay = registry
        .collect(&ToolExecution::new("c1", "bash"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_PARENT_SESSION_ID"), None);
    assert_eq!(overlay.get("DSH_AGENT_DEPTH"), None);
    assert_eq!(overlay.get("DSH_SESSION_ID"), None);
    assert!(overlay.get("DSH_TRACEPARENT").is_some());
}

#[tokio::test]
async fn list_shows_builtins_and_contributor_keys_sorted() {
    let registry = registry();
    let _examples = register_examples(&registry).await;
    let rows: Vec<(String, String)> = registry
        .list()
        .into_iter()
        .map(|row| (row.key.to_string(), row.owner))
        .collect();
    let expected = [
        ("DSH_AGENT_DEPTH", "agent-lineage"),
        ("DSH_HOME", "dsh-env"),
        ("DSH_PARENT_SESSION_ID", "agent-lineage"),
        ("DSH_SESSION_ID", "dsh-env"),
        ("DSH_SHELL", "dsh-env"),
        ("DSH_TRACEPARENT", "call-trace"),
    ];
    assert_eq!(rows, expected.map(|(k, o)| (k.to_string(), o.to_string())));
}

#[tokio::test]
async fn rejects_a_blank_name() {
    let err = declaration_error(&[("name", "  "), ("keys", "DSH_A=a")]).await;
    assert_eq!(err.problem, DeclarationProblem::BlankName);
}

#[tokio::test]
async fn rejects_a_key_without_the_prefix() {
    let err = declaration_error(&[("name", "p"), ("keys", "GIT_BRANCH=branch")]).await;
    assert_eq!(
        err.problem,
        DeclarationProblem::MalformedKey(KeyError::MissingPrefix)
    );
    assert_eq!(
        err.to_string(),
        "contributor `p`, key `GIT_BRANCH`: malformed key: does not start with `DSH_`"
    );
}

#[tokio::test]
async fn rejects_a_key_with_a_bad_suffix() {
    for key in ["DSH_lower", "DSH_1X", "DSH_", "DSH_A-B"] {
        let err = declaration_error(&[("name", "p"), ("keys", &format!("{key}=d"))]).await;
        assert_eq!(
            err.problem,
            DeclarationProblem::MalformedKey(KeyError::BadSuffix),
            "{key}"
        );
        assert_eq!(err.key.as_deref(), Some(key));
    }
}

#[tokio::test]
async fn rejects_reserved_keys() {
    for key in ["DSH_HOME", "DSH_SHELL", "DSH_SESSION_ID"] {
        let err =
            declaration_error(&[("name", "p"), ("keys", &format!("DSH_OK=fine|{key}=mine"))]).await;
        assert_eq!(err.problem, DeclarationProblem::ReservedKey);
        assert_eq!(
            err.to_string(),
            format!("contributor `p`, key `{key}`: the key is reserved for dsh-env")
        );
    }
}

#[tokio::test]
async fn rejects_a_blank_description() {
    let err = declaration_error(&[("name", "p"), ("keys", "DSH_A= ")]).await;
    assert_eq!(err.problem, DeclarationProblem::BlankDescription);
    assert_eq!(err.key.as_deref(), Some("DSH_A"));
}

#[tokio::test]
async fn rejects_a_key_declared_twice() {
    let err = declaration_error(&[("name", "p"), ("keys", "DSH_A=one|DSH_A=two")]).await;
    assert_eq!(err.problem, DeclarationProblem::DuplicateKey);
}

#[tokio::test]
async fn rejects_a_duplicate_name_and_changes_nothing() {
    let registry = registry();
    let _first = registry
        .register(puppet(&registry, &[("name", "dup"), ("keys", "DSH_A=a")]))
        .await
        .unwrap();
    let before = registry.list();
    let err = registry
        .register(puppet(&registry, &[("name", "dup"), ("keys", "DSH_B=b")]))
        .await
        .err()
        .unwrap();
    let puppet_path = artifacts::PUPPET;
    assert_eq!(
        err.to_string(),
        format!(
            "contributor `dup`: a contributor with this name is already registered, from \
             {puppet_path}; this one is from {puppet_path}"
        )
    );
    assert_eq!(registry.list(), before);
}

#[tokio::test]
async fn rejects_a_key_owned_by_another_contributor_naming_both() {
    let registry = registry();
    let _examples = register_examples(&registry).await;
    let before = registry.list();
    let err = registry
        .register(puppet(
            &registry,
            &[
                ("name", "thief"),
                ("keys", "DSH_NEW=n|DSH_AGENT_DEPTH=mine"),
            ],
        ))
        .await
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "contributor `thief`, key `DSH_AGENT_DEPTH`: the key is already owned by `agent-lineage`"
    );
    assert_eq!(
        registry.list(),
        before,
        "a rejected registration changes nothing"
    );
    assert!(
        registry
            .collect(&agent_call("c", "s"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay
            .get("DSH_NEW")
            .is_none()
    );
}

#[tokio::test]
async fn dropping_or_disposing_a_registration_frees_its_keys() {
    let registry = registry();
    let first = registry
        .register(puppet(
            &registry,
            &[
                ("name", "a"),
                ("keys", "DSH_X=x"),
                ("pairs", "DSH_X=from-a"),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(
        registry
            .collect(&agent_call("c", "s"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay
            .get("DSH_X"),
        Some("from-a")
    );
    first.dispose();
    assert_eq!(
        registry
            .collect(&agent_call("c", "s"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay
            .get("DSH_X"),
        None
    );

    let second = registry
        .register(puppet(
            &registry,
            &[
                ("name", "b"),
                ("keys", "DSH_X=x"),
                ("pairs", "DSH_X=from-b"),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(second.name(), "b");
    assert_eq!(
        registry
            .collect(&agent_call("c", "s"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay
            .get("DSH_X"),
        Some("from-b")
    );
    drop(second);
    assert!(
        registry
            .list()
            .iter()
            .all(|row| row.key.as_str() != "DSH_X")
    );
}

#[tokio::test]
async fn rejects_an_undeclared_key_naming_contributor_and_key() {
    let err = resolve_error(&[
        ("name", "p"),
        ("keys", "DSH_A=a"),
        ("pairs", "DSH_A=1|DSH_SNEAKY=2"),
    ])
    .await;
    assert_eq!(
        err.cause,
        FailureCause::Output(OutputProblem::UndeclaredKey("DSH_SNEAKY".into()))
    );
    assert_eq!(
        err.to_string(),
        "contributor `p` (keys DSH_A) failed in resolve: returned undeclared key `DSH_SNEAKY`"
    );
}

#[tokio::test]
async fn rejects_a_reserved_key_at_runtime() {
    let err = resolve_error(&[
        ("name", "p"),
        ("keys", "DSH_A=a"),
        ("pairs", "DSH_SESSION_ID=forged"),
    ])
    .await;
    assert_eq!(
        err.cause,
        FailureCause::Output(OutputProblem::UndeclaredKey("DSH_SESSION_ID".into()))
    );
}

#[tokio::test]
async fn rejects_a_key_returned_twice() {
    let err = resolve_error(&[
        ("name", "p"),
        ("keys", "DSH_A=a"),
        ("pairs", "DSH_A=1|DSH_A=2"),
    ])
    .await;
    assert_eq!(
        err.cause,
        FailureCause::Output(OutputProblem::DuplicateKey("DSH_A".into()))
    );
}

#[tokio::test]
async fn rejects_a_nul_in_a_value() {
    let err = resolve_error(&[("name", "p"), ("keys", "DSH_A=a"), ("pairs", "DSH_A=x\\0y")]).await;
    assert_eq!(
        err.cause,
        FailureCause::Output(OutputProblem::ControlInValue {
            key: "DSH_A".into(),
            character: '\0'
        })
    );
}

#[tokio::test]
async fn a_builtin_value_with_a_control_character_is_an_error_naming_the_key() {
    let registry = registry();
    let forged = ToolExecution::new("c1", "bash").with_agent(Agent {
        session_id: "s1\nDSH_HOME=/evil".into(),
        cwd: Some("/work".into()),
        parent_session_id: None,
        depth: 0,
    });
    let err = registry
        .collect(&forged, &CollectOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.contributor, "dsh-env");
    assert_eq!(
        err.cause,
        FailureCause::Output(OutputProblem::ControlInValue {
            key: "DSH_SESSION_ID".into(),
            character: '\n'
        })
    );
    assert_eq!(err.to_string().lines().count(), 1, "{err}");
    // And the size rule: a session id is a value like any other.
    let huge = agent_call("c1", &"s".repeat(9000));
    let err = registry
        .collect(&huge, &CollectOptions::new())
        .await
        .unwrap_err();
    assert_eq!(
        err.cause,
        FailureCause::Output(OutputProblem::ValueTooLarge {
            key: "DSH_SESSION_ID".into(),
            len: 9000,
            cap: 8 << 10
        })
    );
    // The registry still serves a sound call.
    let overlay = registry
        .collect(&agent_call("c2", "s2"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_SESSION_ID"), Some("s2"));
}

#[tokio::test]
async fn the_name_dsh_env_is_reserved() {
    for name in ["dsh-env", "DSH-ENV ", " Dsh-Env"] {
        let err = declaration_error(&[("name", name), ("keys", "DSH_FAKE=f")]).await;
        assert_eq!(err.problem, DeclarationProblem::ReservedName, "{name:?}");
        assert_eq!(err.key, None);
        assert!(
            err.to_string()
                .contains("is reserved for dsh-env's built-in keys"),
            "{err}"
        );
    }
    // A name that merely contains it is an ordinary name.
    let registry = registry();
    let _ok = registry
        .register(puppet(
            &registry,
            &[("name", "dsh-env-helper"), ("keys", "DSH_FAKE=f")],
        ))
        .await
        .unwrap();
    let owners: Vec<_> = registry
        .list()
        .into_iter()
        .map(|row| (row.key.to_string(), row.owner))
        .collect();
    assert!(owners.contains(&("DSH_FAKE".to_string(), "dsh-env-helper".to_string())));
}

#[tokio::test]
async fn rejects_a_value_over_the_cap() {
    let big = format!("DSH_A={}", "v".repeat(9000));
    let err = resolve_error(&[("name", "p"), ("keys", "DSH_A=a"), ("pairs", &big)]).await;
    assert_eq!(
        err.cause,
        FailureCause::Output(OutputProblem::ValueTooLarge {
            key: "DSH_A".into(),
            len: 9000,
            cap: 8192
        })
    );
}

#[tokio::test]
async fn passes_a_guest_error_through_bounded() {
    let err = resolve_error(&[
        ("name", "p"),
        ("keys", "DSH_A=a"),
        ("resolve", "err:no repository here"),
    ])
    .await;
    assert_eq!(
        err.cause,
        FailureCause::Guest(GuestFailure::GuestError("no repository here".into()))
    );
    let long = format!("err:{}", "x".repeat(5000));
    let err = resolve_error(&[("name", "p"), ("keys", "DSH_A=a"), ("resolve", &long)]).await;
    let FailureCause::Guest(GuestFailure::GuestError(message)) = err.cause else {
        panic!("expected a guest error")
    };
    assert!(
        message.starts_with(&"x".repeat(1024)) && message.ends_with("(3976 bytes cut)"),
        "{message}"
    );
}

#[tokio::test]
async fn reports_a_trap_in_resolve_naming_contributor_and_keys() {
    let err = resolve_error(&[
        ("name", "p"),
        ("keys", "DSH_A=a|DSH_B=b"),
        ("resolve", "trap"),
    ])
    .await;
    assert_eq!((err.contributor.as_str(), err.phase), ("p", Phase::Resolve));
    assert!(
        matches!(err.cause, FailureCause::Guest(GuestFailure::Trap { .. })),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("contributor `p` (keys DSH_A, DSH_B) failed in resolve: trap:"),
        "{err}"
    );
}

#[tokio::test]
async fn stops_an_endless_resolve_at_the_deadline() {
    let err = resolve_error(&[("name", "p"), ("keys", "DSH_A=a"), ("resolve", "loop")]).await;
    assert!(
        matches!(err.cause, FailureCause::Guest(GuestFailure::Deadline(_))),
        "{err}"
    );
}

#[tokio::test]
async fn stops_a_memory_bomb_at_the_memory_cap() {
    let err = resolve_error(&[("name", "p"), ("keys", "DSH_A=a"), ("resolve", "grow")]).await;
    let FailureCause::Guest(GuestFailure::ResourceLimit(message)) = &err.cause else {
        panic!("expected a resource limit, got {err}")
    };
    assert!(
        message.starts_with("memory limit of 134217728 bytes exceeded"),
        "{message}"
    );
}

#[tokio::test]
async fn reports_failures_in_declare_by_origin() {
    let registry = registry();
    for (how, check) in [
        (
            "trap",
            (|f: &GuestFailure| matches!(f, GuestFailure::Trap { .. }))
                as fn(&GuestFailure) -> bool,
        ),
        ("loop", |f| matches!(f, GuestFailure::Deadline(_))),
    ] {
        let err = registry
            .register(puppet(&registry, &[("declare", how)]))
            .await
            .err()
            .unwrap();
        let RegistryError::Contributor(err) = err else {
            panic!("expected a contributor error")
        };
        assert_eq!(err.phase, Phase::Declare);
        assert_eq!(err.contributor, artifacts::PUPPET);
        let FailureCause::Guest(failure) = &err.cause else {
            panic!("expected a guest failure")
        };
        assert!(check(failure), "{how}: {err}");
    }
    assert_eq!(registry.list().len(), 3, "only the built-ins");
}

#[tokio::test]
async fn a_healthy_execution_follows_a_failed_one() {
    let registry = registry();
    let bad = registry
        .register(puppet(
            &registry,
            &[("name", "bad"), ("keys", "DSH_A=a"), ("resolve", "trap")],
        ))
        .await
        .unwrap();
    assert!(
        registry
            .collect(&agent_call("c1", "s"), &CollectOptions::new())
            .await
            .is_err()
    );
    drop(bad);
    let _good = registry
        .register(puppet(
            &registry,
            &[
                ("name", "good"),
                ("keys", "DSH_A=a"),
                ("pairs", "DSH_A={call}"),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(
        registry
            .collect(&agent_call("c2", "s"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay
            .get("DSH_A"),
        Some("c2")
    );
}

#[tokio::test]
async fn every_execution_gets_a_fresh_instance() {
    let registry = registry();
    let _counter = registry
        .register(puppet(
            &registry,
            &[
                ("name", "p"),
                ("keys", "DSH_COUNT=c"),
                ("pairs", "DSH_COUNT={count}"),
            ],
        ))
        .await
        .unwrap();
    for i in 0..5 {
        let overlay = registry
            .collect(&agent_call(&format!("c{i}"), "s"), &CollectOptions::new())
            .await
            .unwrap()
            .overlay;
        assert_eq!(
            overlay.get("DSH_COUNT"),
            Some("1"),
            "state leaked between executions"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_agents_never_see_each_others_values() {
    let registry = registry();
    let _examples = register_examples(&registry).await;
    let _echo = registry
        .register(puppet(
            &registry,
            &[
                ("name", "echo"),
                ("keys", "DSH_ECHO=e"),
                ("pairs", "DSH_ECHO={session}/{call}"),
            ],
        ))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let registry = registry.clone();
            tokio::spawn(async move {
                let (session, parent) = (format!("s{i}"), format!("p{}", i / 2));
                let execution = match i % 2 {
                    0 => agent_call(&format!("c{i}"), &session),
                    _ => {
                        child_call(&format!("c{i}"), &session, &parent).with_mode(Mode::Background)
                    }
                };
                let overlay = registry
                    .collect(&execution, &CollectOptions::new())
                    .await
                    .unwrap()
                    .overlay;
                assert_eq!(overlay.get("DSH_SESSION_ID"), Some(session.as_str()));
                assert_eq!(
                    overlay.get("DSH_ECHO"),
                    Some(format!("{session}/c{i}").as_str())
                );
                let parent_seen = overlay.get("DSH_PARENT_SESSION_ID");
                assert_eq!(parent_seen, (i % 2 == 1).then_some(parent.as_str()));
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Registers or disposes contributors while a collection is under way.
struct Meddler {
    registry: Registry,
    keep: Mutex<Vec<Registration>>,
}

impl NativeContributor for Meddler {
    fn declare(&self) -> RawDeclaration {
        RawDeclaration {
            name: "a-meddler".into(),
            keys: vec![("DSH_MEDDLER".into(), "Runs first, by name.".into())],
        }
    }

    fn resolve(&self, _: &ToolExecution) -> Result<Vec<(String, String)>, String> {
        let mut keep = self.keep.lock().unwrap();
        if keep.is_empty() {
            keep.push(
                self.registry
                    .register_native(Arc::new(Late))
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(Vec::new())
    }
}

struct Late;

impl NativeContributor for Late {
    fn declare(&self) -> RawDeclaration {
        RawDeclaration {
            name: "z-late".into(),
            keys: vec![("DSH_LATE".into(), "Registered mid-collection.".into())],
        }
    }

    fn resolve(&self, _: &ToolExecution) -> Result<Vec<(String, String)>, String> {
        Ok(vec![("DSH_LATE".into(), "here".into())])
    }
}

#[tokio::test]
async fn a_registration_during_a_collection_affects_only_later_ones() {
    let registry = registry();
    let meddler = Arc::new(Meddler {
        registry: registry.clone(),
        keep: Mutex::default(),
    });
    let _meddler = registry.register_native(meddler.clone()).unwrap();
    let first = registry
        .collect(&agent_call("c1", "s"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(
        first.get("DSH_LATE"),
        None,
        "registered during this collection"
    );
    let second = registry
        .collect(&agent_call("c2", "s"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(second.get("DSH_LATE"), Some("here"));
    meddler.keep.lock().unwrap().clear();
    let third = registry
        .collect(&agent_call("c3", "s"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(third.get("DSH_LATE"), None, "disposed");
}

#[tokio::test]
async fn refuses_bytes_that_are_not_a_contributor_component() {
    let registry = registry();
    let cases: [(&str, &[u8], &str); 3] = [
        (
            "junk",
            b"hello, world",
            "not a WebAssembly component (bad magic header)",
        ),
        (
            "core",
            b"\0asm\x01\0\0\0",
            "this is a core wasm module, not a component",
        ),
        (
            "empty-component",
            b"\0asm\x0d\0\x01\0",
            "not a dsh:env/contributor component",
        ),
    ];
    for (origin, bytes, expected) in cases {
        let err = load_error(
            registry
                .load(LoadFrom::Bytes { origin, bytes }, &LoadOptions::new())
                .unwrap_err(),
        );
        assert_eq!(err.origin, origin);
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("cannot load contributor component {origin}: ")),
            "{message}"
        );
        assert!(message.contains(expected), "{message}");
    }
    let missing = load_error(
        registry
            .load(
                LoadFrom::File("/no/such/contributor.wasm".as_ref()),
                &LoadOptions::new(),
            )
            .unwrap_err(),
    );
    assert_eq!(missing.origin, "/no/such/contributor.wasm");
}

#[tokio::test]
async fn the_echo_guest_echoes_the_session_under_its_configured_key() {
    let registry = registry();
    let component = echo(&registry, "echo-test", "DSH_ECHO_TEST");
    let _registration = registry.register(component).await.unwrap();
    let listed: Vec<_> = registry.list().into_iter().map(|row| row.owner).collect();
    assert!(
        listed.iter().any(|owner| owner == "echo-test"),
        "{listed:?}"
    );
    let overlay = registry
        .collect(&agent_call("c", "s-echo"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_ECHO_TEST"), Some("s-echo"));
    let no_agent = ToolExecution::new("c", "bash");
    let overlay = registry
        .collect(&no_agent, &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_ECHO_TEST"), None);
}

/// One contributor alone, or each alone, gives that contributor's keys and
/// no built-ins; traced, each keeps what its call showed; a name nobody
/// has is `None`.
#[tokio::test]
async fn a_collect_of_one_contributor_or_each_alone_has_its_keys_and_traces() {
    let registry = registry();
    let _a = (registry
        .register(echo(&registry, "echo-a", "DSH_ECHO_A"))
        .await)
        .unwrap();
    let _b = (registry
        .register(echo(&registry, "echo-b", "DSH_ECHO_B"))
        .await)
        .unwrap();
    let call = agent_call("c", "s-alone");
    let traced = CollectOptions::new().traced(true);
    let one = registry
        .collect(&call, &traced.clone().only("echo-a"))
        .await;
    let one = one.unwrap().expect("echo-a is registered");
    let pairs: Vec<_> = (one.overlay.iter())
        .map(|(key, value)| (key.as_str(), value))
        .collect();
    assert_eq!(pairs, [("DSH_ECHO_A", "s-alone")]);
    assert_eq!(one.traces.keys().collect::<Vec<_>>(), ["echo-a"]);
    let untraced = registry
        .collect(&call, &CollectOptions::new().only("echo-a"))
        .await;
    assert!(untraced.unwrap().unwrap().traces.is_empty());
    let nobody = registry
        .collect(&call, &CollectOptions::new().only("nobody"))
        .await;
    assert!(nobody.unwrap().is_none());

    let each = registry.collect(&call, &traced.each_alone()).await;
    let names: Vec<_> = each.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["echo-a", "echo-b"]);
    for (name, result) in each {
        let collection = result.unwrap();
        assert_eq!(collection.overlay.len(), 1, "{name}");
        assert!(collection.traces.contains_key(&name), "{name}");
    }
}

/// A load carries the spec's own limits, or those its options give, for a
/// spec as for a file.
#[test]
fn a_load_has_the_specs_limits_unless_its_options_give_others() {
    let registry = registry();
    let mut spec = dsh_env::ContributorSpec::file(artifacts::PUPPET);
    spec.limits.deadline = std::time::Duration::from_millis(700);
    let own = registry.load(LoadFrom::Spec(&spec), &LoadOptions::new());
    assert_eq!(own.unwrap().limits(), &spec.limits);
    let given = dsh_env::Limits {
        deadline: std::time::Duration::from_millis(900),
        ..dsh_env::Limits::default()
    };
    let options = LoadOptions::new().limits(given.clone());
    let from_spec = registry.load(LoadFrom::Spec(&spec), &options).unwrap();
    assert_eq!(from_spec.limits(), &given);
    let from_file = registry.load(LoadFrom::File(artifacts::PUPPET.as_ref()), &options);
    assert_eq!(from_file.unwrap().limits(), &given);
}

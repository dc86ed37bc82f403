//! The hostile-guest suite: each guest is written to break the sandbox, and
//! each must end within a bound with its own named error, leaving the host
//! alive and the next execution correct.

use std::time::{Duration, Instant};

use dsh_env::{
    ContributorError, DeclarationProblem, FailureCause, GuestFailure, Limits, OnError,
    OutputProblem, Overlay, Phase, Registry, RegistryError,
};
use dsh_env_tests::{agent_call, artifacts, puppet, registry};

/// Every hostile call must end well within this.
const BOUND: Duration = Duration::from_secs(15);

/// Short deadlines keep the suite quick; the bound still proves containment.
fn quick() -> Limits {
    Limits {
        deadline: Duration::from_millis(300),
        ..Limits::default()
    }
}

/// The host still works: a healthy contributor registers and resolves.
async fn assert_healthy(registry: &Registry) {
    let healthy = puppet(
        registry,
        &[
            ("name", "healthy"),
            ("keys", "DSH_OK=ok"),
            ("pairs", "DSH_OK={call}"),
        ],
    );
    let _healthy = registry.register(healthy).await.unwrap();
    let overlay = registry.collect(&agent_call("after", "s")).await.unwrap();
    assert_eq!(overlay.get("DSH_OK"), Some("after"));
}

/// Registers a puppet playing `resolve` under `limits`, collects once, and
/// checks the host afterwards.
async fn hostile_resolve(how: &str, limits: Limits) -> Result<Overlay, ContributorError> {
    let registry = registry();
    let component = puppet(
        &registry,
        &[("name", "hostile"), ("keys", "DSH_OUT=o"), ("resolve", how)],
    );
    let registration = registry
        .register(component.with_limits(limits))
        .await
        .unwrap();
    let started = Instant::now();
    let result = registry.collect(&agent_call("c1", "s")).await;
    assert!(
        started.elapsed() < BOUND,
        "{how} took {:?}",
        started.elapsed()
    );
    drop(registration);
    assert_healthy(&registry).await;
    result
}

async fn guest_failure(how: &str, limits: Limits) -> GuestFailure {
    let err = hostile_resolve(how, limits).await.unwrap_err();
    assert_eq!(
        (err.contributor.as_str(), err.phase),
        ("hostile", Phase::Resolve)
    );
    match err.cause {
        FailureCause::Guest(failure) => failure,
        other => panic!("{how}: expected a guest failure, got {other}"),
    }
}

async fn output_problem(how: &str) -> OutputProblem {
    match hostile_resolve(how, quick()).await.unwrap_err().cause {
        FailureCause::Output(problem) => problem,
        other => panic!("{how}: expected an output problem, got {other}"),
    }
}

async fn hostile_declare(config: &[(&str, &str)]) -> RegistryError {
    let registry = registry();
    let started = Instant::now();
    let component = puppet(&registry, config).with_limits(quick());
    let err = registry
        .register(component)
        .await
        .err()
        .expect("registration must fail");
    assert!(started.elapsed() < BOUND);
    assert_eq!(registry.list().len(), 3, "nothing was registered");
    assert_healthy(&registry).await;
    err
}

fn declare_failure(err: RegistryError) -> GuestFailure {
    match err {
        RegistryError::Contributor(ContributorError {
            phase: Phase::Declare,
            cause: FailureCause::Guest(failure),
            ..
        }) => failure,
        other => panic!("expected a declare failure, got {other}"),
    }
}

#[tokio::test]
async fn infinite_loop_in_resolve_hits_the_deadline() {
    assert_eq!(
        guest_failure("loop", quick()).await,
        GuestFailure::Deadline(Duration::from_millis(300))
    );
}

/// On a one-thread runtime, a looping guest would starve every other task
/// until its deadline if it never yielded; it yields at every epoch tick.
#[tokio::test(flavor = "current_thread")]
async fn a_busy_guest_does_not_hold_the_thread() {
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = ticks.clone();
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let failure = guest_failure("loop", quick()).await;
    ticker.abort();
    assert_eq!(failure, GuestFailure::Deadline(Duration::from_millis(300)));
    let ticks = ticks.load(std::sync::atomic::Ordering::Relaxed);
    // About 30 in 300 ms; none at all if the guest held the thread.
    assert!(ticks >= 5, "the other task ran {ticks} times");
}

/// The WAT guest `table-grower` grows a table to 30,000 elements: past the
/// default limit and the pool's table slot, or a lower limit of its own.
/// Either way the limit is named, not an unnamed failure in the pool.
#[tokio::test]
async fn a_table_grown_past_its_limit_is_named() {
    for (limit, expected) in [(None, 20_000), (Some(1_000), 1_000)] {
        let registry = registry();
        let mut limits = quick();
        if let Some(limit) = limit {
            limits.table_elements = limit;
        }
        let component = registry
            .load_file(artifacts::TABLE_GROWER.as_ref())
            .unwrap()
            .with_limits(limits);
        let registration = registry.register(component).await.unwrap();
        let err = registry.collect(&agent_call("c", "s")).await.unwrap_err();
        assert_eq!(
            (err.contributor.as_str(), err.phase),
            ("table-grower", Phase::Resolve)
        );
        let FailureCause::Guest(GuestFailure::ResourceLimit(message)) = err.cause else {
            panic!("expected a named table limit, got {err}");
        };
        assert_eq!(
            message,
            format!("table limit of {expected} elements exceeded (wanted 30000)")
        );
        drop(registration);
        assert_healthy(&registry).await;
    }
}

#[tokio::test]
async fn infinite_loop_in_declare_hits_the_deadline() {
    let failure = declare_failure(hostile_declare(&[("declare", "loop")]).await);
    assert_eq!(failure, GuestFailure::Deadline(Duration::from_millis(300)));
}

#[tokio::test]
async fn sleeping_past_the_deadline_via_wasi_clocks_is_stopped() {
    assert_eq!(
        guest_failure("sleep:60000", quick()).await,
        GuestFailure::Deadline(Duration::from_millis(300))
    );
}

#[tokio::test]
async fn an_exhausted_fuel_budget_is_named() {
    let limits = Limits {
        fuel: Some(5_000_000),
        ..Limits::default()
    };
    assert_eq!(
        guest_failure("loop", limits).await,
        GuestFailure::Fuel(5_000_000)
    );
}

#[tokio::test]
async fn a_memory_bomb_hits_the_memory_cap() {
    let limits = Limits {
        memory_bytes: 32 << 20,
        ..quick()
    };
    let GuestFailure::ResourceLimit(message) = guest_failure("grow", limits).await else {
        panic!("expected a resource limit")
    };
    assert!(
        message.starts_with("memory limit of 33554432 bytes exceeded"),
        "{message}"
    );
}

#[tokio::test]
async fn deep_recursion_is_a_stack_overflow() {
    assert_eq!(
        guest_failure("recurse", quick()).await,
        GuestFailure::StackOverflow
    );
}

#[tokio::test]
async fn a_trap_in_resolve_is_named() {
    assert!(matches!(
        guest_failure("trap", quick()).await,
        GuestFailure::Trap(_)
    ));
}

#[tokio::test]
async fn a_panic_in_declare_is_named() {
    let failure = declare_failure(hostile_declare(&[("declare", "trap")]).await);
    assert!(matches!(failure, GuestFailure::Trap(_)), "{failure}");
}

#[tokio::test]
async fn a_10_mb_value_is_refused() {
    let problem = output_problem("big:10485760").await;
    assert_eq!(
        problem,
        OutputProblem::ValueTooLarge {
            key: "DSH_OUT".into(),
            len: 10 << 20,
            cap: 8 << 10
        }
    );
}

#[tokio::test]
async fn a_hundred_thousand_pairs_are_refused() {
    assert_eq!(
        output_problem("many:100000").await,
        OutputProblem::TooManyPairs {
            count: 100_000,
            cap: 256
        }
    );
}

#[tokio::test]
async fn undeclared_reserved_and_lowercase_keys_at_runtime_are_refused() {
    for (key, value) in [
        ("DSH_OTHER", "x"),
        ("DSH_SESSION_ID", "forged"),
        ("dsh_out", "x"),
    ] {
        let registry = registry();
        let config = [
            ("name", "hostile"),
            ("keys", "DSH_OUT=o"),
            ("pairs", &format!("{key}={value}") as &str),
        ];
        let _hostile = registry.register(puppet(&registry, &config)).await.unwrap();
        let err = registry.collect(&agent_call("c1", "s")).await.unwrap_err();
        assert_eq!(
            err.cause,
            FailureCause::Output(OutputProblem::UndeclaredKey(key.into()))
        );
    }
}

#[tokio::test]
async fn a_control_character_in_a_value_is_refused_naming_key_and_character() {
    let registry = registry();
    // `\n` could forge a `DSH_HOME=/evil` line in `dsh-env resolve`; `\r`
    // could overwrite one on a terminal; `\0` would cut the environment string.
    for (value, character) in [
        ("x\\nDSH_HOME=/evil", '\n'),
        ("x\\rDSH_HOME=/evil", '\r'),
        ("a\\0b", '\0'),
    ] {
        let pairs = format!("DSH_OUT={value}");
        let config = [
            ("name", "hostile"),
            ("keys", "DSH_OUT=o"),
            ("pairs", &pairs),
        ];
        let hostile = registry.register(puppet(&registry, &config)).await.unwrap();
        let err = registry.collect(&agent_call("c1", "s")).await.unwrap_err();
        assert_eq!(
            err.cause,
            FailureCause::Output(OutputProblem::ControlInValue {
                key: "DSH_OUT".into(),
                character
            })
        );
        let message = err.to_string();
        assert!(
            message.contains("contributor `hostile`") && message.contains("value of `DSH_OUT`"),
            "{message}"
        );
        assert_eq!(message.lines().count(), 1, "{message}");
        drop(hostile);
    }
    // A TAB breaks no line: it is kept.
    let config = [
        ("name", "tabs"),
        ("keys", "DSH_OUT=o"),
        ("pairs", "DSH_OUT=a\\tb"),
    ];
    let _tabs = registry.register(puppet(&registry, &config)).await.unwrap();
    let overlay = registry.collect(&agent_call("c2", "s")).await.unwrap();
    assert_eq!(overlay.get("DSH_OUT"), Some("a\tb"));
}

#[tokio::test]
async fn a_declaration_with_ten_thousand_keys_is_refused() {
    let keys: Vec<String> = (0..10_000).map(|i| format!("DSH_K{i}=key {i}")).collect();
    let err = hostile_declare(&[("name", "hostile"), ("keys", &keys.join("|"))]).await;
    let RegistryError::Declaration(err) = err else {
        panic!("expected a declaration error, got {err}")
    };
    assert_eq!(
        err.problem,
        DeclarationProblem::TooManyKeys {
            count: 10_000,
            cap: 256
        }
    );
}

#[tokio::test]
async fn the_host_filesystem_is_invisible() {
    for probe in ["read:/etc/passwd", "list:/", "read:/proc/self/environ"] {
        let GuestFailure::GuestError(message) = guest_failure(probe, quick()).await else {
            panic!("{probe}: expected the guest's own error")
        };
        assert!(!message.contains("root:"), "{probe}: {message}");
    }
}

#[tokio::test]
async fn the_host_environment_is_invisible() {
    assert!(
        std::env::var_os("PATH").is_some(),
        "the host has an environment to leak"
    );
    let overlay = hostile_resolve("env", quick()).await.unwrap();
    assert_eq!(
        overlay.get("DSH_OUT"),
        Some(""),
        "the guest saw host variables"
    );
}

#[tokio::test]
async fn opening_a_socket_fails_inside_the_guest() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let failure = guest_failure(&format!("connect:{address}"), quick()).await;
    assert!(matches!(failure, GuestFailure::GuestError(_)), "{failure}");
}

#[tokio::test]
async fn a_chatty_guest_is_captured_not_failed() {
    let overlay = hostile_resolve("print:200000", quick()).await.unwrap();
    assert_eq!(overlay.get("DSH_SHELL"), Some("1"));
}

#[tokio::test]
async fn components_the_host_cannot_use_are_refused_at_load() {
    let registry = registry();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "not-wasm",
            b"\x7fELF not a component".to_vec(),
            "bad magic header",
        ),
        (
            "core-module",
            wat::parse_str("(module)").unwrap(),
            "core wasm module",
        ),
        (
            "other-world",
            wat::parse_str(
                r#"(component
                    (core module $m (func (export "f")))
                    (core instance $i (instantiate $m))
                    (func (export "something-else") (canon lift (core func $i "f"))))"#,
            )
            .unwrap(),
            "not a dsh:env/contributor component",
        ),
        (
            "unknown-import",
            wat::parse_str(
                r#"(component (import "acme:secrets/vault" (instance (export "open" (func)))))"#,
            )
            .unwrap(),
            "acme:secrets/vault",
        ),
    ];
    for (origin, bytes, expected) in cases {
        let err = registry.load_bytes(origin, &bytes).unwrap_err();
        assert!(err.to_string().contains(expected), "{origin}: {err}");
    }
    assert_healthy(&registry).await;
}

#[tokio::test]
async fn one_failing_contributor_under_both_policies() {
    for policy in [OnError::Fail, OnError::Omit] {
        let registry = registry();
        let lineage = registry
            .load_file(artifacts::AGENT_LINEAGE.as_ref())
            .unwrap();
        let _lineage = registry.register(lineage).await.unwrap();
        let bad = puppet(
            &registry,
            &[("name", "bad"), ("keys", "DSH_BAD=b"), ("resolve", "trap")],
        );
        let _bad = registry.register(bad.with_on_error(policy)).await.unwrap();
        let result = registry.collect_report(&agent_call("c1", "s")).await;
        match policy {
            OnError::Fail => {
                let err = result.unwrap_err();
                assert_eq!(
                    (err.contributor.as_str(), err.phase),
                    ("bad", Phase::Resolve)
                );
            }
            OnError::Omit => {
                let collection = result.unwrap();
                assert_eq!(
                    collection.overlay.get("DSH_AGENT_DEPTH"),
                    Some("0"),
                    "others still contribute"
                );
                assert_eq!(collection.overlay.get("DSH_BAD"), None);
                let [omitted] = &collection.omitted[..] else {
                    panic!("one omission")
                };
                assert_eq!(omitted.contributor, "bad");
            }
        }
    }
}

#[tokio::test]
async fn a_thousand_traps_then_a_healthy_execution() {
    let registry = registry();
    let bad = puppet(
        &registry,
        &[("name", "bad"), ("keys", "DSH_BAD=b"), ("resolve", "trap")],
    );
    let bad = registry.register(bad).await.unwrap();
    for i in 0..1000 {
        let err = registry
            .collect(&agent_call(&format!("c{i}"), "s"))
            .await
            .unwrap_err();
        assert!(
            matches!(err.cause, FailureCause::Guest(GuestFailure::Trap(_))),
            "{i}: {err}"
        );
    }
    drop(bad);
    assert_healthy(&registry).await;
}

#[tokio::test]
async fn guest_text_in_error_messages_cannot_carry_terminal_controls() {
    let hostile_key = "DSH_A\x1b[2J\x1b]0;pwned\x07";
    let registry = registry();
    let pairs = format!("{hostile_key}=v");
    let config = [
        ("name", "hostile"),
        ("keys", "DSH_OUT=o"),
        ("pairs", pairs.as_str()),
    ];
    let _key = registry.register(puppet(&registry, &config)).await.unwrap();
    let err = registry.collect(&agent_call("c1", "s")).await.unwrap_err();
    assert_eq!(
        err.cause,
        FailureCause::Output(OutputProblem::UndeclaredKey(hostile_key.into()))
    );
    let shown = err.to_string();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    assert!(shown.contains(r"DSH_A\u{1b}[2J"), "{shown}");

    let message = "\x1b[31mred\r\nFAKE LOG LINE";
    let failure = guest_failure(&format!("err:{message}"), quick()).await;
    assert_eq!(
        failure,
        GuestFailure::GuestError(message.into()),
        "the data is kept as sent"
    );
    let shown = failure.to_string();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    assert_eq!(shown, r"guest error: \u{1b}[31mred\r\nFAKE LOG LINE");
}

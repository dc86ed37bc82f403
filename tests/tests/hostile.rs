//! The hostile-guest suite: each guest is written to break the sandbox, and
//! each must end within a bound with its own named error, leaving the host
//! alive and the next execution correct.

use std::time::{Duration, Instant};

use dsh_env::{
    ContributorError, DeclarationProblem, DshHome, FailureCause, GuestFailure, Limits, OnError,
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
async fn a_nul_in_a_value_is_refused() {
    let registry = registry();
    let config = [
        ("name", "hostile"),
        ("keys", "DSH_OUT=o"),
        ("pairs", "DSH_OUT=a\\0b"),
    ];
    let _hostile = registry.register(puppet(&registry, &config)).await.unwrap();
    let err = registry.collect(&agent_call("c1", "s")).await.unwrap_err();
    assert_eq!(
        err.cause,
        FailureCause::Output(OutputProblem::NulInValue("DSH_OUT".into()))
    );
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

/// A component whose one core function keeps `locals` i64 locals live across
/// `depth` nested loops: 40-odd KB to write, while Cranelift's register
/// allocation of it takes seconds and a growing amount of memory.
fn compile_bomb(locals: usize, depth: usize) -> Vec<u8> {
    let mut body = "(loop ".repeat(depth);
    for i in 0..locals {
        let next = (i + 1) % locals;
        body += &format!("(local.set {i} (i64.add (local.get {i}) (local.get {next})))");
    }
    for level in 0..depth {
        body += &format!("(br_if 0 (i64.eqz (local.get {})))) ", level % locals);
    }
    let declared = " i64".repeat(locals);
    wat::parse_str(format!(
        "(component (core module (func (local{declared}) {body})))"
    ))
    .unwrap()
}

/// Compiling is bounded in memory, CPU and wall time: each limit ends the
/// compile helper and is named; a memory or CPU failure is remembered by
/// digest, so the same bytes fail at once under the same limits (no helper
/// runs), and are compiled again under higher ones.
#[tokio::test]
async fn a_component_that_is_costly_to_compile_is_stopped_and_remembered() {
    let (home, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let new_registry = || Registry::new(DshHome::from_absolute(home.path()).unwrap()).unwrap();
    let registry = new_registry();
    let path = dir.path().join("bomb.wasm");
    let bytes = compile_bomb(3000, 1000);
    std::fs::write(&path, &bytes).unwrap();
    let load = |registry: &Registry, limits: &Limits| {
        let started = Instant::now();
        let err = registry.load_file_with(&path, limits).unwrap_err();
        assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
        assert_eq!(err.origin, path.display().to_string());
        err.to_string()
    };
    let markers = || {
        std::fs::read_dir(registry.cache().dir())
            .unwrap()
            .filter(|e| {
                let path = e.as_ref().unwrap().path();
                path.extension().is_some_and(|e| e == "failed")
            })
            .count()
    };

    let small = Limits {
        compile_memory_bytes: 256 << 20,
        ..Limits::default()
    };
    let message = load(&registry, &small);
    let reason = "compiling exceeded the compile memory limit of 256 MiB \
                  (limits.compile_memory_mib)";
    assert!(message.ends_with(reason), "{message}");
    assert_eq!(markers(), 1);

    // Remembered, across registries: no helper runs (this one has none).
    let remembering = new_registry();
    remembering.set_compiler("/nonexistent/dsh-env-compile");
    let message = load(&remembering, &small);
    assert!(
        message.ends_with(&format!(
            "{reason} (remembered; raise limits.compile_* to retry)"
        )),
        "{message}"
    );

    // Other bytes must be compiled, and this registry's helper is missing.
    let err = remembering
        .load_bytes("other", &compile_bomb(10, 1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("compile helper /nonexistent/dsh-env-compile") && err.contains("executable"),
        "{err}"
    );

    // Higher limits compile it again, until another limit ends it. Running
    // out of wall time is not remembered (it depends on the machine's load).
    let short = Limits {
        compile_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let frugal = Limits {
        compile_cpu: Duration::from_millis(1000),
        ..Limits::default()
    };
    for (limits, expected, remembered) in [
        (
            short,
            "compile time limit of 1 s (limits.compile_timeout_ms)",
            false,
        ),
        (
            frugal,
            "compile CPU limit of 1 s (limits.compile_cpu_ms)",
            true,
        ),
    ] {
        let message = load(&registry, &limits);
        assert!(message.ends_with(expected), "{message}");
        let again = load(&registry, &limits);
        let said = again.ends_with("(remembered; raise limits.compile_* to retry)");
        assert_eq!(said, remembered, "{again}");
    }
    assert_eq!(markers(), 1, "one record per component");

    // The host is fine, and healthy components still compile and run.
    assert_healthy(&new_registry()).await;
}

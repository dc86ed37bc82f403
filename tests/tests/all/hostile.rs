//! The hostile-guest suite: each guest is written to break the sandbox, and
//! each must end within a bound with its own named error, leaving the host
//! alive and the next execution correct.

use std::time::{Duration, Instant};

use dsh_env::Grants;
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};
use dsh_env::{
    ContributorError, DeclarationProblem, FailureCause, GuestFailure, HostLimits, Limits, OnError,
    OutputProblem, Overlay, Phase, Registry, RegistryError,
};
use dsh_env_harness::{LocalExecutor, ShellExecRequest};
use dsh_env_tests::{
    agent_call, agent_call_in, artifacts, load_error, puppet, registry, registry_with,
};

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
    let overlay = registry
        .collect(&agent_call("after", "s"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
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
    let result = registry
        .collect(&agent_call("c1", "s"), &CollectOptions::new())
        .await
        .map(|c| c.overlay);
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
/// until its deadline if it never yielded; it yields from its third epoch
/// tick on.
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

/// A call whose guest meets two epoch ticks or fewer finishes in the poll
/// that started it, whatever the ticks' phase: its first yield comes at its
/// second tick (`epoch::FIRST_YIELD_TICK`), and `within_host_deadline`
/// resumes that one within the poll. A yield to the executor would put the
/// call back in its queue and let another caller start another instance,
/// in another pool slot. The ticks are the ones the engine counted for the
/// call (`CallTrace::epoch_ticks`), not the wall clock's, so a busy machine
/// that stretches a call changes which calls are judged, never the verdict.
/// Of 100 calls of 7 ms, 38 yielded with the first yield at the first tick;
/// with the first yield handed to the executor, 21 of 100 calls of 1 ms did.
#[tokio::test(flavor = "current_thread")]
async fn a_call_that_meets_two_ticks_or_fewer_never_yields() {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    let registry = registry();
    let component = puppet(
        &registry,
        &[
            ("name", "busy"),
            ("keys", "DSH_OUT=o"),
            // Most such calls meet exactly two ticks, the case the rule is about.
            ("resolve", "spin:9"),
        ],
    );
    let _registration = registry.register(component).await.unwrap();
    let polls = std::sync::Arc::new(AtomicU32::new(0));
    let counter = polls.clone();
    // Runs only when the test's own task yields, which it does only when
    // the guest does.
    let other = tokio::spawn(async move {
        loop {
            counter.fetch_add(1, Relaxed);
            tokio::task::yield_now().await;
        }
    });
    tokio::task::yield_now().await;
    // Calls that met more ticks (a loaded machine's) are not judged: more
    // calls are made until 100 are.
    let (mut judged, mut at_two, mut yielded) = (0, 0, Vec::new());
    for call in 0..1000 {
        if judged == 100 {
            break;
        }
        let before = polls.load(Relaxed);
        let collection = registry
            .collect(
                &agent_call(&format!("c{call}"), "s"),
                &CollectOptions::new().traced(true),
            )
            .await;
        let went_back = polls.load(Relaxed) != before;
        let collection = collection.unwrap();
        let ticks = collection.traces["busy"].epoch_ticks;
        if ticks <= 2 {
            judged += 1;
            at_two += usize::from(ticks == 2);
            if went_back {
                yielded.push((call, ticks));
            }
        }
    }
    other.abort();
    assert_eq!(
        judged, 100,
        "fewer than 100 of 1000 calls met two ticks or fewer"
    );
    assert!(at_two > 0, "no call met exactly two ticks");
    assert!(
        yielded.is_empty(),
        "calls that met two ticks or fewer yielded (call, ticks): {yielded:?}"
    );
}

/// Set in the process the next test re-runs itself in.
const IDLE_TICKER_CHILD: &str = "DSH_ENV_TEST_IDLE_TICKER_CHILD";

/// The epoch ticker sleeps once no guest has run for a while, so an idle
/// host is not woken 200 times a second; and a guest that spins after that
/// still ends at its deadline, because running it wakes the ticker. The
/// ticker is the process's and the suite's other tests keep it busy, so
/// this runs in a process of its own: this binary, re-run on this test.
#[test]
fn an_idle_host_is_not_woken_and_a_guest_after_idle_still_ends() {
    if std::env::var_os(IDLE_TICKER_CHILD).is_none() {
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "hostile::an_idle_host_is_not_woken_and_a_guest_after_idle_still_ends",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(IDLE_TICKER_CHILD, "1")
            .output()
            .unwrap();
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "{report}");
        assert!(report.contains("1 passed"), "{report}");
        return;
    }
    // A ticker that never woke would leave the looping guest spinning.
    std::thread::spawn(|| {
        std::thread::sleep(BOUND * 4);
        eprintln!("the looping guest did not end: the epoch did not advance");
        std::process::exit(3);
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let registry = registry();
        assert_healthy(&registry).await;
        // It parks after 20 ticks of 5 ms without a guest; a loaded machine
        // may stretch those, so each window of 500 ms is a new chance.
        let mut woken = Vec::new();
        for _ in 0..6 {
            let before = ticker_switches();
            tokio::time::sleep(Duration::from_millis(500)).await;
            woken.push(ticker_switches() - before);
            if woken.last() <= Some(&1) {
                break;
            }
        }
        assert!(
            woken.last() <= Some(&1),
            "the idle ticker kept waking: {woken:?} times in each 500 ms"
        );
        assert_eq!(
            guest_failure("loop", quick()).await,
            GuestFailure::Deadline(Duration::from_millis(300))
        );
    });
}

/// Context switches so far of this process's one `dsh-env-epoch` thread.
/// A thread takes its name once it first runs, so on a loaded machine it
/// may be listed under its creator's name for a moment: this waits for it.
fn ticker_switches() -> u64 {
    let started = Instant::now();
    let ticker = loop {
        let tasks: Vec<(std::path::PathBuf, String)> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| {
                let task = task.ok()?.path();
                let comm = std::fs::read_to_string(task.join("comm")).ok()?;
                Some((task, comm.trim().to_string()))
            })
            .collect();
        let tickers: Vec<_> = tasks.iter().filter(|(_, c)| c == "dsh-env-epoch").collect();
        if let [(ticker, _)] = tickers[..] {
            break ticker.clone();
        }
        assert!(
            started.elapsed() < BOUND,
            "not one ticker thread but {}: {tasks:?}",
            tickers.len()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let status = std::fs::read_to_string(ticker.join("status")).unwrap();
    (status.lines())
        .filter(|line| line.contains("ctxt_switches:"))
        .map(|line| {
            line.split_whitespace()
                .last()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum()
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
            .load(
                LoadFrom::File(artifacts::TABLE_GROWER.as_ref()),
                &LoadOptions::new(),
            )
            .unwrap()
            .with_limits(limits);
        let registration = registry.register(component).await.unwrap();
        let err = registry
            .collect(&agent_call("c", "s"), &CollectOptions::new())
            .await
            .unwrap_err();
        assert_eq!(
            (err.contributor.as_str(), err.phase),
            ("table-grower", Phase::Resolve)
        );
        let FailureCause::Guest(GuestFailure::ResourceLimit(message)) = err.cause else {
            panic!("expected a named table limit, got {err}");
        };
        // The guest's own table holds 1 element and grows by 29,999; the
        // limit counts every table of the instance.
        assert!(
            message.starts_with(&format!(
                "table limit of {expected} elements exceeded (wanted 3"
            )),
            "{message}"
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

/// A trap's last words, or a failure naming what it got instead.
fn last_words(failure: &GuestFailure) -> &str {
    match failure {
        GuestFailure::Trap {
            last_words: Some(words),
            ..
        } => words,
        other => panic!("expected a trap with last words, got {other:?}"),
    }
}

#[tokio::test]
async fn a_trap_in_resolve_is_named_with_the_panic_message() {
    let failure = guest_failure("trap", quick()).await;
    assert!(
        last_words(&failure).contains("puppet was told to trap"),
        "{failure:?}"
    );
    let shown = failure.to_string();
    assert!(
        shown.starts_with(
            "trap: wasm `unreachable` instruction executed; the guest's stderr ended: \
             thread '<unnamed>'"
        ),
        "{shown}"
    );
    assert!(shown.contains("puppet was told to trap"), "{shown}");
    assert!(!shown.contains('\n'), "one line: {shown}");
}

#[tokio::test]
async fn a_panic_in_declare_is_named_with_the_panic_message() {
    let failure = declare_failure(hostile_declare(&[("declare", "trap:declare broke")]).await);
    assert!(last_words(&failure).contains("declare broke"), "{failure}");
}

#[tokio::test]
async fn last_words_are_the_end_of_a_flood_stripped_and_escaped() {
    let failure = guest_failure(
        "print:20000+trap:first\x1b[31m red\x07\nsecond line",
        quick(),
    )
    .await;
    let words = last_words(&failure);
    assert!(words.ends_with("first red\nsecond line"), "{words:?}");
    assert!(words.len() <= 512, "{} bytes", words.len());
    assert!(
        words.starts_with("red and a bell"),
        "starts at a whole line: {words:?}"
    );
    assert!(
        !words.contains(|c: char| c.is_control() && c != '\n'),
        "{words:?}"
    );
    let shown = failure.to_string();
    assert!(shown.contains("first red\\nsecond line"), "{shown}");
    assert!(!shown.contains(['\n', '\u{1b}']), "{shown}");

    // Within the log cap, however small.
    let tiny = Limits {
        max_log_bytes: 16,
        ..quick()
    };
    let failure = guest_failure("trap:0123456789abcdefghijklmnopqrstuvwxyz", tiny).await;
    let words = last_words(&failure);
    assert!(words.len() <= 16 + '…'.len_utf8(), "{words:?}");
}

#[tokio::test]
async fn a_value_over_its_cap_is_refused() {
    let problem = output_problem("big:10000").await;
    assert_eq!(
        problem,
        OutputProblem::ValueTooLarge {
            key: "DSH_OUT".into(),
            len: 10_000,
            cap: 8 << 10
        }
    );
}

/// `failure` is the per-call data limit of `phase` under `limits`, named.
fn assert_hostcall_limit(failure: GuestFailure, phase: Phase, limits: &Limits) {
    let GuestFailure::ResourceLimit(message) = failure else {
        panic!("expected the host-call data limit, got {failure}")
    };
    let limit = limits.hostcall_bytes(phase);
    assert!(
        message.starts_with(&format!("host-call data limit of {limit} bytes exceeded")),
        "{message}"
    );
}

/// Output far over the caps is not even copied into the host: the lift
/// stops at the per-call data limit the caps imply.
#[tokio::test]
async fn a_10_mb_value_stops_at_the_host_call_data_limit() {
    let failure = guest_failure("big:10485760", quick()).await;
    assert_hostcall_limit(failure, Phase::Resolve, &quick());
}

#[tokio::test]
async fn too_many_pairs_are_refused() {
    assert_eq!(
        output_problem("many:300").await,
        OutputProblem::TooManyPairs {
            count: 300,
            cap: 256
        }
    );
    let failure = guest_failure("many:100000", quick()).await;
    assert_hostcall_limit(failure, Phase::Resolve, &quick());
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
        let err = registry
            .collect(&agent_call("c1", "s"), &CollectOptions::new())
            .await
            .unwrap_err();
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
        let err = registry
            .collect(&agent_call("c1", "s"), &CollectOptions::new())
            .await
            .unwrap_err();
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
    let overlay = registry
        .collect(&agent_call("c2", "s"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_OUT"), Some("a\tb"));
}

#[tokio::test]
async fn a_declaration_with_too_many_keys_is_refused() {
    let keys = |n: usize| {
        let keys: Vec<String> = (0..n).map(|i| format!("DSH_K{i}=key {i}")).collect();
        keys.join("|")
    };
    let err = hostile_declare(&[("name", "hostile"), ("keys", &keys(300))]).await;
    let RegistryError::Declaration(err) = err else {
        panic!("expected a declaration error, got {err}")
    };
    assert_eq!(
        err.problem,
        DeclarationProblem::TooManyKeys {
            count: 300,
            cap: 256
        }
    );
    // Ten thousand keys are not even copied into the host.
    let failure = declare_failure(hostile_declare(&[("name", "h"), ("keys", &keys(10_000))]).await);
    assert_hostcall_limit(failure, Phase::Declare, &quick());
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
        let err = registry
            .load(
                LoadFrom::Bytes {
                    origin,
                    bytes: &bytes,
                },
                &LoadOptions::new(),
            )
            .unwrap_err();
        assert!(err.to_string().contains(expected), "{origin}: {err}");
    }
    assert_healthy(&registry).await;
}

#[tokio::test]
async fn one_failing_contributor_under_both_policies() {
    for policy in [OnError::Fail, OnError::Omit] {
        let registry = registry();
        let lineage = registry
            .load(
                LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
                &LoadOptions::new(),
            )
            .unwrap();
        let _lineage = registry.register(lineage).await.unwrap();
        let bad = puppet(
            &registry,
            &[("name", "bad"), ("keys", "DSH_BAD=b"), ("resolve", "trap")],
        );
        let _bad = registry.register(bad.with_on_error(policy)).await.unwrap();
        let result = registry
            .collect(&agent_call("c1", "s"), &CollectOptions::new())
            .await;
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
            .collect(&agent_call(&format!("c{i}"), "s"), &CollectOptions::new())
            .await
            .unwrap_err();
        assert!(
            matches!(err.cause, FailureCause::Guest(GuestFailure::Trap { .. })),
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
    let err = registry
        .collect(&agent_call("c1", "s"), &CollectOptions::new())
        .await
        .unwrap_err();
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

// Bounds on what a guest can make the host hold: memory summed over an
// instance and over all instances, finished stores, data copied out of a
// guest, handles and descriptors, and files the model controls.

/// A core module whose one memory starts at `pages` pages and whose start
/// function writes to every page, so the memory is really resident.
fn memory_hog(pages: u32) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
             (memory {pages})
             (func $touch (local $at i32)
               (loop $page
                 (i32.store8 (local.get $at) (i32.const 1))
                 (local.set $at (i32.add (local.get $at) (i32.const 65536)))
                 (br_if $page (i32.lt_u (local.get $at) (i32.const {bytes})))))
             (start $touch))"#,
        bytes = u64::from(pages) * 65536
    ))
    .unwrap()
}

/// The table-grower contributor (one 1-page memory) with `copies` memory
/// hogs of `pages` pages each appended as core instances of its own.
pub(crate) fn with_hogs(pages: u32, copies: u32) -> Vec<u8> {
    let guest = std::fs::read(artifacts::TABLE_GROWER).unwrap();
    dsh_env_tests::surgery::with_core_modules(&guest, &memory_hog(pages), copies)
}

/// Each memory alone is within the cap (the guest's 1 page, a hog of
/// exactly the cap), but the instance's memories together are not.
#[tokio::test]
async fn an_instances_memories_count_against_its_limit_together() {
    let registry = registry_with(HostLimits::default());
    let limits = Limits {
        memory_bytes: 32 << 20,
        ..quick()
    };
    let component = registry
        .load(
            LoadFrom::Bytes {
                origin: "two-memories",
                bytes: &with_hogs(512, 1),
            },
            &LoadOptions::new(),
        )
        .unwrap()
        .with_limits(limits);
    let failure = declare_failure(registry.register(component).await.err().unwrap());
    let GuestFailure::ResourceLimit(message) = failure else {
        panic!("expected a resource limit, got {failure}")
    };
    // 1 + 512 pages, and the guest's one-element table at 8 bytes.
    assert!(
        message.starts_with("memory limit of 33554432 bytes exceeded (wanted 33619976 "),
        "{message}"
    );
    registry.prepare().await; // drops finished stores
    assert_eq!(
        registry.shared_engine().guest_memory(),
        0,
        "a failed instance keeps nothing"
    );
    assert_healthy(&registry).await;
}

/// A component with many memories cannot take the pool's memory slots from
/// every other contributor: it is refused when it loads, by name.
#[tokio::test]
async fn a_component_with_many_memories_is_refused_at_load() {
    let registry = registry();
    let err = load_error(
        registry
            .load(
                LoadFrom::Bytes {
                    origin: "sixteen-hogs",
                    bytes: &with_hogs(1, 16),
                },
                &LoadOptions::new(),
            )
            .unwrap_err(),
    );
    let reason = err.kind.to_string();
    assert!(
        reason.contains("17 Wasm linear memories")
            && reason.contains(&format!(
                "maximum of {} in the pooling allocator",
                dsh_env::__internal::MAX_MEMORIES
            )),
        "{err}"
    );
    assert_healthy(&registry).await;
}

/// Instances at their own cap cannot add up without bound: they share one
/// budget, and the growth that would pass it is refused by name.
#[tokio::test]
async fn all_live_instances_share_one_memory_budget() {
    let registry = registry_with(HostLimits {
        memory_budget_bytes: 96 << 20,
        retired_bytes: 0,
        ..HostLimits::default()
    });
    let limits = Limits {
        deadline: Duration::from_secs(5),
        ..Limits::default()
    };
    let holder = puppet(
        &registry,
        &[
            ("name", "holder"),
            ("keys", "DSH_OUT=o"),
            ("resolve", "hold:40:500"),
        ],
    );
    let _holder = registry.register(holder.with_limits(limits)).await.unwrap();
    let (call, options) = (agent_call("c", "s"), CollectOptions::new());
    let results = tokio::join!(
        registry.collect(&call, &options),
        registry.collect(&call, &options),
        registry.collect(&call, &options),
        registry.collect(&call, &options),
    );
    let results = [results.0, results.1, results.2, results.3];
    let refused = results
        .iter()
        .filter(|result| {
            matches!(result, Err(ContributorError {
                cause: FailureCause::Guest(GuestFailure::ResourceLimit(message)), ..
            }) if message.starts_with("host memory budget of 100663296 bytes for all live instances exhausted"))
        })
        .count();
    let served = results.iter().filter(|result| result.is_ok()).count();
    assert!(refused >= 1 && served >= 1, "{results:?}");
    assert_eq!(refused + served, 4, "{results:?}");
    assert_eq!(
        registry.shared_engine().guest_memory(),
        0,
        "every store gave its memory back"
    );
    drop(_holder);
    assert_healthy(&registry).await;
}

/// Finished stores wait to be dropped off the caller's path, but what they
/// hold is bounded in bytes: a guest using ~100 MiB is dropped at once,
/// while small ones still wait.
#[tokio::test]
async fn finished_stores_hold_a_bounded_amount_of_memory() {
    let registry = registry_with(HostLimits::default());
    let cap = HostLimits::default().retired_bytes;
    let big = puppet(
        &registry,
        &[
            ("name", "big"),
            ("keys", "DSH_BIG=b"),
            ("resolve", "hold:100:0"),
        ],
    );
    let big = registry.register(big).await.unwrap();
    for call in 0..12 {
        registry
            .collect(
                &agent_call(&format!("c{call}"), "s"),
                &CollectOptions::new(),
            )
            .await
            .unwrap();
        assert!(
            registry.shared_engine().retired_memory() <= cap,
            "call {call}"
        );
        assert!(
            registry.shared_engine().guest_memory() <= cap,
            "call {call}"
        );
    }
    drop(big);
    let small = puppet(&registry, &[("name", "small"), ("keys", "DSH_SMALL=s")]);
    let _small = registry.register(small).await.unwrap();
    registry.prepare().await;
    registry
        .collect(&agent_call("small", "s"), &CollectOptions::new())
        .await
        .unwrap();
    assert!(
        registry.shared_engine().retired_memory() > 0,
        "a small finished store still waits to be dropped off the caller's path"
    );
}

/// 1,000 pairs whose values alias the same 64 KiB of guest memory: about 64
/// MiB for the host to copy. The copy stops at the per-call data limit.
#[tokio::test]
async fn aliased_strings_stop_at_the_host_call_data_limit() {
    let registry = registry();
    let component = registry
        .load(
            LoadFrom::File(artifacts::ALIAS_BOMB.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap()
        .with_limits(quick());
    let _bomb = registry.register(component).await.unwrap();
    let err = registry
        .collect(&agent_call("c", "s"), &CollectOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.contributor, "alias-bomb");
    let FailureCause::Guest(failure) = err.cause else {
        panic!("expected a guest failure, got {err}")
    };
    assert_hostcall_limit(failure, Phase::Resolve, &quick());
    drop(_bomb);
    assert_healthy(&registry).await;
}

/// A puppet with the cwd grant, acting out `resolve` in the agent's cwd.
async fn in_cwd(
    registry: &Registry,
    cwd: &std::path::Path,
    resolve: &str,
    limits: Limits,
) -> Result<Overlay, ContributorError> {
    let component = puppet(
        registry,
        &[
            ("name", "in-cwd"),
            ("keys", "DSH_OUT=o"),
            ("resolve", resolve),
        ],
    )
    .with_limits(limits)
    .with_grants(Grants {
        cwd_read: true,
        ..Grants::default()
    });
    let registration = registry.register(component).await.unwrap();
    let cwd = cwd.to_str().unwrap();
    let started = Instant::now();
    let result = registry
        .collect(&agent_call_in("c", "s", cwd), &CollectOptions::new())
        .await
        .map(|c| c.overlay);
    assert!(
        started.elapsed() < BOUND,
        "{resolve} took {:?}",
        started.elapsed()
    );
    drop(registration);
    result
}

/// A guest that opens a file again and again runs into its handle limit,
/// by name; its files are closed when its call ends, so the next command
/// can still be spawned.
#[tokio::test]
async fn a_guest_cannot_hoard_descriptors() {
    let registry = registry_with(HostLimits::default());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), "x").unwrap();
    let hoard = format!("hoard:{}/f:100000", dir.path().display());
    let err = in_cwd(&registry, dir.path(), &hoard, quick())
        .await
        .unwrap_err();
    let FailureCause::Guest(GuestFailure::ResourceLimit(message)) = err.cause else {
        panic!("expected a resource limit, got {err}")
    };
    let cap = Limits::default().max_handles;
    assert!(
        message.starts_with(&format!("handle limit of {cap} exceeded")),
        "{message}"
    );
    assert_eq!(registry.shared_engine().guest_descriptors(), 0);
    let spawned = LocalExecutor
        .run(ShellExecRequest::new(
            "true",
            dir.path(),
            Overlay::default(),
        ))
        .await
        .unwrap();
    assert_eq!(spawned.exit_code, Some(0));
    assert_healthy(&registry).await;
}

/// Guests together hold at most the host's descriptor cap, whatever their
/// own handle limits; past it, opens fail inside the guest.
#[tokio::test]
async fn guests_share_one_descriptor_cap() {
    let registry = registry_with(HostLimits {
        guest_descriptors: 10,
        ..HostLimits::default()
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), "x").unwrap();
    let hoard = format!("hoard:{}/f:100", dir.path().display());
    let limits = Limits {
        max_handles: 1000,
        ..quick()
    };
    let err = in_cwd(&registry, dir.path(), &hoard, limits)
        .await
        .unwrap_err();
    let FailureCause::Guest(GuestFailure::GuestError(message)) = err.cause else {
        panic!("expected the guest's own error, got {err}")
    };
    assert!(message.starts_with("opened 10, then"), "{message}");
    assert_eq!(registry.shared_engine().guest_descriptors(), 0);
    assert_healthy(&registry).await;
}

/// The model controls the agent's cwd. A FIFO, a socket or a kernel file
/// there is refused at once inside the guest (no open that blocks, with a
/// deadline far away), while a regular file still reads.
#[tokio::test]
async fn files_the_model_controls_cannot_block_a_guest() {
    let registry = registry_with(HostLimits::default());
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    let made = std::process::Command::new("mkfifo")
        .arg(path("fifo"))
        .status()
        .unwrap();
    assert!(made.success());
    let _socket = std::os::unix::net::UnixListener::bind(path("socket")).unwrap();
    std::fs::write(path("plain"), "plain text").unwrap();
    let patient = Limits {
        deadline: Duration::from_secs(60),
        ..Limits::default()
    };
    // A FIFO opens (non-blocking) and is refused as not a regular file; a
    // socket cannot be opened at all. Either way the guest sees an error.
    for (name, error) in [("fifo", "ermission denied"), ("socket", "os error")] {
        let read = format!("read:{}", path(name));
        let err = in_cwd(&registry, dir.path(), &read, patient.clone())
            .await
            .unwrap_err();
        assert!(
            matches!(&err.cause, FailureCause::Guest(GuestFailure::GuestError(m)) if m.contains(error)),
            "{name}: {err}"
        );
    }
    // The cwd itself a FIFO: it is not a directory, so it is not granted.
    let fifo = dir.path().join("fifo");
    let err = in_cwd(&registry, &fifo, "list:.", patient.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(&err.cause, FailureCause::Guest(GuestFailure::GuestError(_))),
        "a FIFO cwd: {err}"
    );
    let proc_self = std::path::Path::new("/proc/self");
    let err = in_cwd(
        &registry,
        proc_self,
        "read:/proc/self/status",
        patient.clone(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err.cause, FailureCause::Guest(GuestFailure::GuestError(m)) if m.contains("ermission denied")),
        "/proc: {err}"
    );
    let read = format!("read:{}", path("plain"));
    let overlay = in_cwd(&registry, dir.path(), &read, patient).await.unwrap();
    assert_eq!(overlay.get("DSH_OUT"), Some("plain text"));
    assert_eq!(registry.shared_engine().guest_descriptors(), 0);
}

/// The git-context example, with `.git/HEAD` made a FIFO by the model:
/// the branch is simply absent, at once.
#[tokio::test]
async fn git_context_with_a_fifo_head_does_not_hang() {
    let registry = registry();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(dir.path().join(".git/HEAD"))
        .status()
        .unwrap();
    assert!(made.success());
    let component = registry
        .load(
            LoadFrom::File(artifacts::GIT_CONTEXT.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap()
        .with_grants(Grants {
            cwd_read: true,
            ..Grants::default()
        });
    let _git = registry.register(component).await.unwrap();
    let started = Instant::now();
    let cwd = dir.path().to_str().unwrap();
    let overlay = registry
        .collect(&agent_call_in("c", "s", cwd), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert!(started.elapsed() < BOUND);
    assert_eq!(overlay.get("DSH_GIT_BRANCH"), None);
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
    let new_registry = || dsh_env_tests::registry_at(home.path());
    let registry = new_registry();
    let path = dir.path().join("bomb.wasm");
    let bytes = compile_bomb(3000, 1000);
    std::fs::write(&path, &bytes).unwrap();
    let load = |registry: &Registry, limits: &Limits| {
        let started = Instant::now();
        let err = load_error(
            registry
                .load(
                    LoadFrom::File(&path),
                    &LoadOptions::new().limits(limits.clone()),
                )
                .unwrap_err(),
        );
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
    let remembering_home = dsh_env::DshHome::from_absolute(home.path()).unwrap();
    let remembering = (dsh_env_tests::builder(remembering_home))
        .compiler("/nonexistent/dsh-env-compile")
        .build()
        .unwrap();
    let message = load(&remembering, &small);
    assert!(
        message.ends_with(&format!(
            "{reason} (remembered; raise limits.compile_* to retry)"
        )),
        "{message}"
    );

    // Other bytes must be compiled, and this registry's helper is missing.
    let err = remembering
        .load(
            LoadFrom::Bytes {
                origin: "other",
                bytes: &compile_bomb(10, 1),
            },
            &LoadOptions::new(),
        )
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

/// Threads named `dsh-env-open` alive in this process now.
fn opening_threads() -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").expect("Linux /proc");
    let named = |task: std::fs::DirEntry| std::fs::read_to_string(task.path().join("comm")).ok();
    (tasks.filter_map(Result::ok).filter_map(named))
        .filter(|comm| comm.trim_end() == "dsh-env-open")
        .count()
}

/// Each registration from a warm cache leaves its artifact to a thread of
/// its own; a caller registering as fast as it can (`serve`'s `register`,
/// in a loop) starts at most `MAX_OPENING_THREADS` of them at once, and
/// its first calls open the rest.
#[tokio::test]
async fn a_flood_of_registrations_starts_a_bounded_number_of_opening_threads() {
    use dsh_env::__internal::MAX_OPENING_THREADS;
    let registry = registry();
    // Compiled, linked and declared once, so later loads are deferred.
    let warm = registry
        .load(
            LoadFrom::File(artifacts::CALL_CONTEXT.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap();
    drop(registry.register(warm).await.unwrap());

    // Counted on this thread for 2 ms after each registration: a thread
    // started by it spends milliseconds opening the JS artifact, but it is
    // listed under its creator's name until it first runs, and a loaded
    // machine may run it late (one look right after each registration
    // once saw none in 40).
    let mut most = 0;
    for _ in 0..40 {
        let component = registry
            .load(
                LoadFrom::File(artifacts::CALL_CONTEXT.as_ref()),
                &LoadOptions::new(),
            )
            .unwrap();
        drop(registry.register(component).await.unwrap());
        let looking = Instant::now();
        while looking.elapsed() < Duration::from_millis(2) {
            most = most.max(opening_threads());
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while opening_threads() > 0 && Instant::now() < deadline {
        most = most.max(opening_threads());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        (1..=MAX_OPENING_THREADS).contains(&most),
        "{most} opening threads at once"
    );
    // The last ones registered, and a component whose opening was left to
    // its first call, still serve calls.
    let component = registry
        .load(
            LoadFrom::File(artifacts::CALL_CONTEXT.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap();
    let _registration = registry.register(component).await.unwrap();
    let overlay = registry
        .collect(&agent_call("c", "s"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert!(overlay.get("DSH_CALL_MODE").is_some(), "{overlay:?}");
}

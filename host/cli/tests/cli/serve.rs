//! `dsh-env serve`: JSON-RPC over stdio, its bounds and its tier-up helper.

use super::*;

#[test]
fn serve_speaks_json_rpc_to_a_node_client() {
    let f = Fixture::new();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve_client.mjs");
    let output = Command::new("node")
        .arg(script)
        .args([BINARY, &f.home(), AGENT_LINEAGE])
        .output()
        .expect("node is installed");
    assert!(
        output.status.success(),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(stdout(&output).contains("all checks passed"));
}

#[test]
fn serve_answers_bad_lines_and_keeps_serving() {
    let f = Fixture::new();
    let fifo = f.fifo("fifo");
    let mut input = Vec::new();
    input.extend_from_slice(b"\xff\xfe{\"jsonrpc\":\"2.0\"}\n");
    input.extend(std::iter::repeat_n(b'x', (4 << 20) + 1));
    input.push(b'\n');
    input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"list\"}\n");
    let register = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "register",
        "params": {"path": fifo}});
    input.extend_from_slice(format!("{register}\n").as_bytes());
    input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"list\"}\n");
    let output = output_within(
        f.command(&["serve", "--home", &f.home()], &[]),
        Stdio::null(),
        Some(input),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let answers: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(answers.len(), 5, "{answers:?}");
    // Responses may come out of order: find each by its id, or its message.
    let unnamed: Vec<&serde_json::Value> = answers.iter().filter(|a| a["id"].is_null()).collect();
    let message =
        |answer: &serde_json::Value| answer["error"]["message"].as_str().unwrap().to_string();
    let answer = |id: u64| answers.iter().find(|a| a["id"] == id).unwrap();
    assert_eq!(unnamed.len(), 2, "{answers:?}");
    let not_utf8 = unnamed
        .iter()
        .find(|a| message(a).contains("not UTF-8"))
        .unwrap();
    assert_eq!(not_utf8["error"]["code"], -32700);
    assert!(
        unnamed
            .iter()
            .any(|a| message(a).contains("over the 4194304-byte limit")),
        "{unnamed:?}"
    );
    assert!(answer(1)["result"].as_array().unwrap().len() >= 3);
    let refused = message(answer(2));
    assert!(
        refused.contains("is a FIFO") && refused.contains(fifo.to_str().unwrap()),
        "{refused}"
    );
    assert!(answer(3)["result"].is_array());
}

/// A running `dsh-env serve`, spoken to line by line; killed if dropped.
struct ServeClient {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ServeClient {
    fn start(f: &Fixture, env: &[(&str, &str)]) -> Self {
        let mut child = f
            .command(&["serve", "--home", &f.home()], env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        ServeClient {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// Writes one line.
    fn send(&mut self, message: &serde_json::Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line the server writes, as JSON; `None` at its end.
    fn next(&self) -> Option<serde_json::Value> {
        match self.lines.recv_timeout(BOUND) {
            Ok(line) => Some(serde_json::from_str(&line).unwrap()),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("no answer within {BOUND:?}")
            }
        }
    }

    /// Sends request `id` and waits for its answer, which must be the next line.
    fn call(&mut self, id: u64, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        let answer = self.next().expect("an answer");
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }

    /// Closes stdin; the lines written after that, once the server has exited 0.
    fn finish(mut self) -> Vec<serde_json::Value> {
        drop(self.stdin.take());
        let rest: Vec<_> = std::iter::from_fn(|| self.next()).collect();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
        rest
    }
}

impl Drop for ServeClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `dsh-env serve` with `requests`, each sent once the one before is
/// answered; their answers.
fn serve_answers(
    f: &Fixture,
    env: &[(&str, &str)],
    requests: &[serde_json::Value],
) -> Vec<serde_json::Value> {
    let mut client = ServeClient::start(f, env);
    let answers = requests
        .iter()
        .map(|request| {
            client.send(request);
            client.next().expect("an answer")
        })
        .collect();
    assert_eq!(client.finish(), Vec::<serde_json::Value>::new());
    answers
}

#[test]
fn serve_registers_with_grants_and_limits_like_a_manifest_entry() {
    let f = Fixture::new();
    let request = |id: u64, method: &str, params: serde_json::Value| serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let answers = serve_answers(
        &f,
        &[("GRANTED_VAR", "granted"), ("OTHER_VAR", "hidden")],
        &[
            request(
                1,
                "register",
                serde_json::json!({
                    "path": PUPPET,
                    "config": {"name": "env-probe", "keys": "DSH_PROBE=p", "resolve": "env"},
                    "grants": {"env": ["GRANTED_VAR", "UNSET_VAR"]},
                    "limits": {"deadline_ms": 5000, "max_value_bytes": 4096},
                    "on_error": "fail",
                }),
            ),
            request(
                2,
                "collect",
                serde_json::json!({"execution": {"callId": "c1", "name": "bash"}}),
            ),
            request(
                3,
                "register",
                serde_json::json!({
                    "path": PUPPET, "limits": {"deadline_ms": 0},
                }),
            ),
            request(
                4,
                "register",
                serde_json::json!({
                    "path": PUPPET, "grants": {"network": true},
                }),
            ),
            request(
                5,
                "register",
                serde_json::json!({
                    "path": PUPPET, "grants": {"env": ["GRANTED_VAR", "DSH_HOME"]},
                }),
            ),
        ],
    );
    assert_eq!(answers[0]["result"]["name"], "env-probe", "{}", answers[0]);
    assert_eq!(
        answers[1]["result"]["overlay"]["DSH_PROBE"], "GRANTED_VAR=granted",
        "only the granted, set variable reaches the guest: {}",
        answers[1]
    );
    assert_eq!(answers[2]["error"]["code"], -32602);
    assert_eq!(
        answers[2]["error"]["message"],
        format!("invalid params: contributor {PUPPET}: limits.deadline_ms must be at least 1")
    );
    assert_eq!(answers[3]["error"]["code"], -32602);
    assert!(
        answers[3]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `network`"),
        "{}",
        answers[3]
    );
    // The host's own DSH_* values are stale outer ones: no grant copies one.
    let refused = &answers[4]["error"];
    assert_eq!(refused["code"], -32602, "{refused}");
    let message = refused["message"].as_str().unwrap();
    for needle in [PUPPET, "grants.env names `DSH_HOME`"] {
        assert!(message.contains(needle), "`{needle}` not in {refused}");
    }
    assert_eq!(refused["data"]["key"], "DSH_HOME", "{refused}");
}

/// A member nobody reads is refused, naming it (escaped) and the known ones,
/// in the request object (a misspelt `params` would be a call with none: an
/// `initialize` without its hooks), in a method's params, and in the hooks
/// document `initialize` names; the request is answered with its id. An
/// execution is the harness's own, and stays open.
#[test]
fn serve_refuses_unknown_members_naming_them_and_the_known_ones() {
    let f = Fixture::new();
    let hooks = serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "Bash",
        "hooks": [{"type": "command", "command": "exit 2"}]}]}});
    let execution = serde_json::json!({"callId": "c-1", "name": "bash", "token": {},
        "agent": {"session": {"header": {"id": "s-1", "cwd": "/tmp", "origin": "subagent"}}}});
    let answers = serve_answers(
        &f,
        &[],
        &[
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "parmas": {"hooks": hooks}}),
            rpc(2, "list", serde_json::json!({"verbose\u{1b}[2J": true})),
            rpc(
                3,
                "collect",
                serde_json::json!({"execution": execution, "executoin": {}}),
            ),
            rpc(
                4,
                "register",
                serde_json::json!({"path": PUPPET, "limits": {"deadline": 5}}),
            ),
            rpc(
                5,
                "initialize",
                serde_json::json!({"hooks": {"hooks": {"PreToolUse": [{"matcher": "Bash",
                    "hooks": [{"type": "command", "command": "exit 2", "timout": 5}]}]}}}),
            ),
            rpc(6, "collect", serde_json::json!({"execution": execution})),
        ],
    );
    let error = |index: usize, code: i64| {
        let answer = &answers[index];
        assert_eq!(answer["id"], index + 1, "{answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        answer["error"]["message"].as_str().unwrap().to_string()
    };
    assert_eq!(
        error(0, -32600),
        "invalid request: unknown field `parmas`, expected one of `jsonrpc`, `method`, \
         `params`, `id`"
    );
    // Where, then what: the path of the member at fault, and why.
    assert_eq!(
        error(1, -32602),
        "invalid params: verbose\\u{1b}[2J: unknown field `verbose\\u{1b}[2J`, there are no fields"
    );
    assert_eq!(
        error(2, -32602),
        "invalid params: executoin: unknown field `executoin`, expected `execution`"
    );
    let limits = error(3, -32602);
    assert!(
        limits.starts_with(
            "invalid params: limits.deadline: unknown field `deadline`, \
             expected one of `deadline_ms`, "
        ),
        "{limits}"
    );
    let hooks = error(4, -32602);
    assert!(
        hooks.contains("hook `exit 2`: unknown field `timout`, expected one of `type`, "),
        "{hooks}"
    );
    // The execution's own members (`token`, the header's `origin`) pass.
    assert!(
        answers[5]["result"]["overlay"].is_object(),
        "{}",
        answers[5]
    );
}

#[test]
fn serve_answers_a_list_while_a_slow_register_and_exec_run_then_finishes_them_at_eof() {
    let f = Fixture::new();
    let mut client = ServeClient::start(&f, &[]);
    let slow_declare = serde_json::json!({
        "path": PUPPET,
        "config": {"name": "slow", "keys": "DSH_SLOW=slow", "declare": "sleep:1500"},
    });
    client.send(&rpc(1, "register", slow_declare));
    let sleeper = serde_json::json!({
        "execution": {"callId": "c1", "name": "bash"}, "command": "sleep 2; echo slept",
    });
    client.send(&rpc(2, "exec", sleeper));
    client.send(&rpc(3, "list", serde_json::json!({})));
    // End of input with two requests still running: both are answered.
    let answers = client.finish();
    let ids: Vec<_> = answers.iter().map(|a| a["id"].clone()).collect();
    assert_eq!(ids.len(), 3, "{answers:?}");
    assert_eq!(ids[0], 3, "the list waits for nothing: {answers:?}");
    let answer = |id: u64| answers.iter().find(|a| a["id"] == id).unwrap();
    assert_eq!(answer(1)["result"]["name"], "slow", "{}", answer(1));
    assert_eq!(answer(2)["result"]["stdout"], "slept\n", "{}", answer(2));
}

/// The 17th request waits for a slot: with 16 slow `exec`s in flight, a
/// `list` is read, and so answered, only after one of them is.
#[test]
fn serve_holds_at_most_16_requests_in_flight() {
    let f = Fixture::new();
    let mut client = ServeClient::start(&f, &[]);
    let sleeper = serde_json::json!({
        "execution": {"callId": "c1", "name": "bash"}, "command": "sleep 1",
    });
    for id in 1..=16 {
        client.send(&rpc(id, "exec", sleeper.clone()));
    }
    client.send(&rpc(17, "list", serde_json::json!({})));
    let answers = client.finish();
    assert_eq!(answers.len(), 17, "{answers:?}");
    assert_ne!(
        answers[0]["id"], 17,
        "the list waited for a slot: {answers:?}"
    );
}

/// The most resident memory `serve` may reach under the flood below: its
/// own (some 40 MiB) and what PROTOCOL.md bounds for requests (91 MiB),
/// with room for the allocator's slack.
const FLOOD_PEAK_BOUND_MIB: u64 = 256;

/// What a client can make `serve` hold: 16 `exec`s in flight, each a line
/// of nearly 4 MiB, all but a few bytes of it an `arguments` member of small
/// numbers (which nothing reads). Kept as a JSON tree (16 times its line)
/// for each command, they took serve's peak resident memory past 1 GiB;
/// with params typed as they are read, it stays under the bound.
#[test]
fn serve_holds_what_a_flood_sent_not_a_multiple_of_it() {
    let f = Fixture::new();
    let (started, go) = (f.path("started"), f.path("go"));
    std::fs::create_dir(&started).unwrap();
    let mut client = ServeClient::start(&f, &[]);
    for id in 0..16 {
        // Each command says it started, then waits for the test's go.
        let command = format!(
            "touch {}/{id}; while [ ! -e {} ]; do sleep 0.05; done; echo done",
            started.display(),
            go.display()
        );
        let params = serde_json::json!({"command": command,
            "execution": {"callId": "c", "name": "bash", "arguments": "ARGUMENTS"}});
        let line = rpc(id, "exec", params).to_string();
        let numbers = ((4 << 20) - line.len()) / 2;
        let arguments = format!("[{}0]", "1,".repeat(numbers - 1));
        let line = line.replacen("\"ARGUMENTS\"", &arguments, 1);
        assert!(line.len() <= 4 << 20, "{}", line.len());
        let stdin = client.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
    }
    client.stdin.as_mut().unwrap().flush().unwrap();
    let deadline = std::time::Instant::now() + BOUND * 4;
    while std::fs::read_dir(&started).unwrap().count() < 16 {
        assert!(
            std::time::Instant::now() < deadline,
            "16 commands did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", client.child.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().strip_suffix("kB"))
        .map(|kib| kib.trim().parse().unwrap())
        .expect("VmHWM in /proc/<pid>/status");
    eprintln!("serve's peak resident memory: {} MiB", peak_kib >> 10);
    std::fs::write(&go, "").unwrap();
    let answers = client.finish();
    assert_eq!(answers.len(), 16, "{answers:?}");
    for answer in &answers {
        assert_eq!(answer["result"]["stdout"], "done\n", "{answer}");
    }
    assert!(
        peak_kib < FLOOD_PEAK_BOUND_MIB << 10,
        "serve's peak resident memory was {} MiB",
        peak_kib >> 10
    );
}

/// Every number a client gives `serve` is checked, and an error names it:
/// `exec`'s `timeout_ms` (negative, fractional, 0, past a day: a negative
/// one was a 49-day wait in the Node addon) and `register`'s limits.
#[test]
fn serve_refuses_numbers_out_of_range_naming_them() {
    let f = Fixture::new();
    let execution = serde_json::json!({"callId": "c1", "name": "bash"});
    let timeouts = [
        serde_json::json!(-1),
        serde_json::json!(1.5),
        serde_json::json!(0),
        serde_json::json!(86_400_001),
        serde_json::json!(1e300),
    ];
    let limits = [
        (
            serde_json::json!({"deadline_ms": -1}),
            "limits.deadline_ms: invalid value: integer `-1`",
        ),
        (
            serde_json::json!({"deadline_ms": 2.5}),
            "limits.deadline_ms: invalid type: floating point `2.5`",
        ),
        (
            serde_json::json!({"deadline_ms": 3_600_001}),
            "limits.deadline_ms must be from 1 to 3600000",
        ),
        (
            serde_json::json!({"max_pairs": 1u64 << 40}),
            "limits.max_pairs must be at most 1048576",
        ),
        (
            serde_json::json!({"max_value_bytes": 1u64 << 40}),
            "limits.max_value_bytes must be at most 536870912",
        ),
        (
            serde_json::json!({"compile_cpu_ms": 1e20}),
            "limits.compile_cpu_ms: invalid type: floating point",
        ),
    ];
    let mut requests: Vec<serde_json::Value> = timeouts
        .iter()
        .enumerate()
        .map(|(id, timeout)| {
            rpc(
                id,
                "exec",
                serde_json::json!({"execution": execution, "command": "true",
                "timeout_ms": timeout}),
            )
        })
        .collect();
    requests.extend(limits.iter().enumerate().map(|(id, (limits, _))| {
        rpc(
            100 + id,
            "register",
            serde_json::json!({"path": PUPPET, "limits": limits}),
        )
    }));
    // Each name in `env` costs a map entry beside its bytes: 4096 at most.
    let env: serde_json::Map<String, serde_json::Value> = (0..4097)
        .map(|i| (format!("V{i}"), serde_json::json!("")))
        .collect();
    requests.push(rpc(
        200,
        "exec",
        serde_json::json!({"execution": execution,
        "command": "true", "env": env}),
    ));
    let answers = serve_answers(&f, &[], &requests);
    assert_eq!(
        answers.last().unwrap()["error"]["message"],
        "invalid params: env holds 4097 names, over the limit of 4096"
    );
    for (answer, timeout) in answers.iter().zip(&timeouts) {
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert_eq!(
            answer["error"]["message"],
            format!(
                "invalid params: timeout_ms must be a whole number of milliseconds from 1 to \
                 86400000, not {timeout}"
            )
        );
    }
    for (answer, (_, needle)) in answers[timeouts.len()..].iter().zip(&limits) {
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "`{needle}` not in {message}");
        assert!(!message.contains(" at line "), "{message}");
    }
}

#[test]
fn serve_never_answers_notifications_and_echoes_every_kind_of_id() {
    let f = Fixture::new();
    let mut client = ServeClient::start(&f, &[]);
    // Notifications: a good one, an unknown method, bad params. No answer.
    client.send(&serde_json::json!({"jsonrpc": "2.0", "method": "list"}));
    client.send(&serde_json::json!({"jsonrpc": "2.0", "method": "nope"}));
    client.send(&serde_json::json!({"jsonrpc": "2.0", "method": "collect", "params": {}}));
    // Each request is answered before the next is sent, so nothing above
    // can have been answered later than this.
    assert_eq!(client.call(1, "list", serde_json::json!({}))["id"], 1);
    for id in [
        serde_json::json!("text-id"),
        serde_json::json!(-7),
        serde_json::Value::Null,
    ] {
        client.send(&rpc(id.clone(), "list", serde_json::json!({})));
        let answer = client.next().unwrap();
        assert_eq!(answer["id"], id, "{answer}");
        assert!(answer["result"].is_array(), "{answer}");
    }
    // An id that is neither a string, a number nor null is no request.
    client.send(&rpc(
        serde_json::json!({"a": 1}),
        "list",
        serde_json::json!({}),
    ));
    let answer = client.next().unwrap();
    assert_eq!(answer["id"], serde_json::Value::Null);
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    // A batch: one array, with no answer for its notification.
    client.send(&serde_json::json!([
        rpc(2, "list", serde_json::json!({})),
        {"jsonrpc": "2.0", "method": "list"},
        rpc(3, "nope", serde_json::json!({})),
    ]));
    let batch = client.next().unwrap();
    let batch = batch.as_array().unwrap();
    assert_eq!(batch.len(), 2, "{batch:?}");
    assert_eq!(batch[0]["id"], 2);
    assert_eq!(batch[1]["error"]["code"], -32601);
    assert_eq!(client.finish(), Vec::<serde_json::Value>::new());
}

#[test]
fn serve_initialize_gives_the_protocol_contract_and_server_versions() {
    let f = Fixture::new();
    let answers = serve_answers(&f, &[], &[rpc(1, "initialize", serde_json::json!({}))]);
    let result = &answers[0]["result"];
    assert_eq!(result["protocol_version"], 2, "{result}");
    assert_eq!(result["server"]["name"], "dsh-env");
    assert_eq!(result["server"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(
        result["contracts"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!({"version": "0.1.0", "accepts": "0.1.x"})),
        "{result}"
    );
}

#[test]
fn serve_errors_name_the_contributor_key_file_and_limit() {
    let f = Fixture::new();
    let execution = serde_json::json!({"callId": "c1", "name": "bash"});
    let answers = serve_answers(
        &f,
        &[],
        &[
            rpc(
                1,
                "register",
                serde_json::json!({
                    "path": PUPPET,
                    "config": {"name": "liar", "keys": "DSH_DECLARED=d", "pairs": "DSH_OTHER=x"},
                }),
            ),
            rpc(2, "collect", serde_json::json!({"execution": execution})),
            rpc(3, "register", serde_json::json!({"path": "/no/such.wasm"})),
            rpc(
                4,
                "register",
                serde_json::json!({"path": PUPPET, "limits": {"fuel": 0}}),
            ),
            rpc(5, "dispose", serde_json::json!({"name": "liar"})),
            rpc(
                6,
                "exec",
                serde_json::json!({
                    "execution": execution, "command": "true", "env": {"DSH_FORGED": "1"},
                }),
            ),
        ],
    );
    assert!(answers[0]["result"].is_object(), "{}", answers[0]);
    let data = |answer: &serde_json::Value| answer["error"]["data"].clone();
    assert_eq!(
        data(&answers[1]),
        serde_json::json!({"contributor": "liar", "key": "DSH_OTHER"})
    );
    assert_eq!(
        data(&answers[2]),
        serde_json::json!({"file": "/no/such.wasm"})
    );
    assert_eq!(answers[3]["error"]["code"], -32602);
    assert_eq!(data(&answers[3]), serde_json::json!({"limit": "fuel"}));
    assert_eq!(answers[4]["result"]["disposed"], true);
    assert_eq!(data(&answers[5]), serde_json::json!({"key": "DSH_FORGED"}));
}

/// The fields of `/proc/<pid>/stat` after the command name, from the
/// state (field 3) on, or none once the process is gone.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    Some(rest.split(' ').map(str::to_string).collect())
}

/// The processes whose parent is `parent`, with their command lines.
fn children_of(parent: u32) -> Vec<(u32, String)> {
    let entries = std::fs::read_dir("/proc").unwrap().flatten();
    let pids = entries.filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
    pids.filter(|pid| stat_fields(*pid).is_some_and(|f| f[1] == parent.to_string()))
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            (pid, String::from_utf8_lossy(&cmdline).replace('\0', " "))
        })
        .collect()
}

/// `serve` on a cold cache answers with Winch's code, and compiles
/// Cranelift's in a helper at the lowest CPU priority; a `serve` killed
/// meanwhile takes that helper with it, instead of leaving a compiler
/// running for its whole CPU limit.
#[test]
fn serve_tiers_up_in_a_low_priority_helper_that_dies_with_it() {
    let f = Fixture::new();
    let manifest = f.write(
        "python.toml",
        &format!("[[contributor]]\npath = {SESSION_URL:?}\n"),
    );
    let args = ["serve", "--manifest", manifest.to_str().unwrap()];
    let mut serve = f.command(&[&args[..], &["--home", &f.home()]].concat(), &[]);
    let mut serve = serve
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let helper = loop {
        let children = children_of(serve.id());
        if let Some((pid, _)) = children.iter().find(|(_, cmd)| cmd.contains("--nice 19")) {
            break *pid;
        }
        if started.elapsed() > Duration::from_secs(300) {
            let _ = serve.kill();
            panic!("no tier-up helper; children: {children:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Compiling, not still reading the component (which a dying parent
    // would cut short): it has used a second of CPU (fields 14 and 15, in
    // clock ticks of 10 ms).
    let cpu_ticks = |fields: &[String]| -> u64 {
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    while stat_fields(helper).is_some_and(|f| cpu_ticks(&f) < 100) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its niceness (field 19), set before it compiles, is the lowest.
    let niceness = stat_fields(helper).map(|f| f[16].clone());
    assert_eq!(niceness.as_deref(), Some("19"), "the helper ended early?");
    serve.kill().unwrap();
    serve.wait().unwrap();
    let killed = std::time::Instant::now();
    // Gone, or a zombie that its new parent has not reaped yet.
    while stat_fields(helper).is_some_and(|f| f[0] != "Z") {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the tier-up helper outlived serve"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn serve_explain_says_what_a_contributor_without_its_grant_looked_for() {
    let f = Fixture::new();
    let repo = f.git_repo("served");
    let execution = serde_json::json!({"callId": "c1", "name": "bash",
        "agent": {"session": {"header": {"id": "s1", "cwd": repo}}}});
    let answers = serve_answers(
        &f,
        &[],
        &[
            rpc(1, "register", serde_json::json!({"path": GIT_CONTEXT})),
            rpc(
                2,
                "register",
                serde_json::json!({"path": PUPPET, "config": {"name": "team",
                    "keys": "DSH_TEAM=t", "resolve": "try-read:/nowhere/team.txt"}}),
            ),
            rpc(3, "explain", serde_json::json!({"execution": execution})),
        ],
    );
    let result = &answers[2]["result"];
    assert_eq!(result["overlay"]["DSH_SESSION_ID"], "s1", "{result}");
    let why = result["why_absent"].as_array().unwrap();
    assert_eq!(why.len(), 2, "{result}");
    assert_eq!(
        (
            &why[0]["contributor"],
            &why[0]["grants"],
            &why[0]["declared_at"]
        ),
        (
            &serde_json::json!("git-context"),
            &serde_json::json!("none"),
            &serde_json::Value::Null
        )
    );
    assert!(
        why[0]["hints"][0]
            .as_str()
            .unwrap()
            .contains("no cwd grant: add `cwd = \"read\"`"),
        "{result}"
    );
    assert_eq!(why[1]["contributor"], "team");
    assert!(
        why[1]["stderr_tail"]
            .as_str()
            .unwrap()
            .starts_with("cannot read /nowhere/team.txt: "),
        "{result}"
    );
}

#[test]
fn serve_runs_the_hooks_initialize_names_around_exec() {
    let f = Fixture::new();
    let record = f.path("payload.json");
    let marker = f.path("touched");
    // One hook: appends the payload, one a line, and blocks a command
    // naming `touched`.
    let hook = format!(
        "payload=$(cat); printf '%s\\n' \"$payload\" >> {record}; \
         case \"$payload\" in *touched*) echo 'not here' >&2; exit 2;; esac",
        record = record.display()
    );
    let hooks = serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "Bash",
        "hooks": [{"type": "command", "command": hook}]}]}});
    let hooks_file = f.write("hooks.json", &hooks.to_string());
    let execution = serde_json::json!({"callId": "call-7", "name": "bash",
        "agent": {"session": {"header": {"id": "s-1", "cwd": "/tmp"}}}});
    let answers = serve_answers(
        &f,
        &[],
        &[
            // Without hooks, exec's result has no `hooks`.
            rpc(
                1,
                "exec",
                serde_json::json!({"execution": execution, "command": "true"}),
            ),
            rpc(2, "initialize", serde_json::json!({"hooks": hooks_file})),
            rpc(
                3,
                "exec",
                serde_json::json!({"execution": execution, "command": "echo ran",
                    "timeout_ms": 5000, "permission_mode": "acceptEdits"}),
            ),
            rpc(
                4,
                "exec",
                serde_json::json!({"execution": execution,
                    "command": format!("touch {}", marker.display())}),
            ),
            rpc(
                5,
                "initialize",
                serde_json::json!({"hooks": {"PreToolUse": []}}),
            ),
            rpc(
                6,
                "exec",
                serde_json::json!({"execution": execution, "command": "true",
                "permission_mode": "auto"}),
            ),
        ],
    );
    assert!(
        answers[0]["result"].get("hooks").is_none(),
        "{}",
        answers[0]
    );
    assert_eq!(answers[2]["result"]["stdout"], "ran\n", "{}", answers[2]);
    assert_eq!(
        answers[2]["result"]["hooks"],
        serde_json::json!({"context": [], "feedback": []})
    );
    let payloads = std::fs::read_to_string(&record).unwrap();
    assert_eq!(payloads.lines().count(), 2, "exec 3 and exec 4: {payloads}");
    let payload: serde_json::Value =
        serde_json::from_str(payloads.lines().next().unwrap()).unwrap();
    assert_eq!(
        payload,
        serde_json::json!({"session_id": "s-1", "transcript_path": "", "cwd": "/tmp",
            "permission_mode": "acceptEdits", "hook_event_name": "PreToolUse",
            "tool_name": "Bash", "tool_input": {"command": "echo ran", "timeout": 5000},
            "tool_use_id": "call-7"})
    );
    assert_eq!(answers[3]["error"]["code"], -32001, "{}", answers[3]);
    assert_eq!(
        answers[3]["error"]["message"],
        "blocked by a PreToolUse hook: not here"
    );
    assert!(!marker.exists(), "the command must not have run");
    // Events outside `hooks` are refused, not taken as no hooks; so is a
    // permission mode Claude Code does not have.
    assert_eq!(answers[4]["error"]["code"], -32602, "{}", answers[4]);
    let message = answers[4]["error"]["message"].as_str().unwrap();
    assert!(message.contains("unknown field `PreToolUse`"), "{message}");
    assert_eq!(answers[5]["error"]["code"], -32602, "{}", answers[5]);
    let message = answers[5]["error"]["message"].as_str().unwrap();
    assert!(message.contains("permission_mode"), "{message}");
}

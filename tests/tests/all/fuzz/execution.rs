//! Target 3: the execution JSON parser (the agent's tool call, as the host
//! hands it over).

use std::time::Instant;

use dsh_env::__internal::KNOWN_FIELDS;
use dsh_env::ToolExecution;
use dsh_env_tests::rules::text_is_clean;

use super::case::{CaseGuard, each_case};
use super::inputs::text;
use super::mutate::mutate_text;
use super::rng::Rng;

/// A JSON document and, when it is well-formed, what it must parse to.
struct ExecutionCase {
    text: String,
    expected: Option<ToolExecution>,
}

/// A JSON string holding `s` exactly.
fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A JSON value of the wrong kind for any of the fields (or an odd right one).
fn json_junk(rng: &mut Rng, depth: usize) -> String {
    match rng.below(if depth > 4 { 8 } else { 10 }) {
        0 => "null".into(),
        1 => rng.pick(&["true", "false"]).to_string(),
        2 => rng
            .pick(&[
                "0",
                "-1",
                "4294967295",
                "4294967296",
                "18446744073709551616",
                "1e400",
                "-0",
                "1.0",
                "0.5e-999",
                "123456789012345678901234567890",
            ])
            .to_string(),
        3..=5 => json_string(&text(rng, 100)),
        6 => rng
            .pick(&[
                "\"\\ud800\"",
                "\"\\udc00\\ud800\"",
                "\"\\ud83e\\udd80\"",
                "\"\\u0000\"",
                "\"\\x41\"",
                "\"tab\there\"",
                "'single'",
                "NaN",
                "Infinity",
                "undefined",
            ])
            .to_string(),
        7 => {
            let depth = rng.range(1, 300);
            format!("{}{}", "[".repeat(depth), "]".repeat(depth))
        }
        8 => {
            let items: Vec<String> = (0..rng.len(4)).map(|_| json_junk(rng, depth + 1)).collect();
            format!("[{}]", items.join(","))
        }
        _ => {
            let items: Vec<String> = (0..rng.len(4))
                .map(|_| {
                    format!(
                        "{}:{}",
                        json_string(&text(rng, 20)),
                        json_junk(rng, depth + 1)
                    )
                })
                .collect();
            format!("{{{}}}", items.join(","))
        }
    }
}

/// Whether `junk` is a JSON value serde_json accepts `levels` deep in a document.
fn json_ok_at(junk: &str, levels: usize) -> bool {
    let wrapped = format!("{}{junk}{}", "[".repeat(levels), "]".repeat(levels));
    serde_json::from_str::<serde_json::Value>(&wrapped).is_ok()
}

/// How a field is written: left out, of a wrong kind, twice, or as it should be.
fn push_field(rng: &mut Rng, fields: &mut Vec<String>, name: &str, good: &str) -> bool {
    let name = json_string(name);
    match rng.below(12) {
        0 => false,
        1 => {
            fields.push(format!("{name}:{}", json_junk(rng, 0)));
            false
        }
        2 => {
            fields.push(format!("{name}:{good}"));
            fields.push(format!("{name}:{good}"));
            false
        }
        _ => {
            fields.push(format!("{name}:{good}"));
            true
        }
    }
}

/// A document with each field left out, written wrongly, twice, or well.
fn execution_case(rng: &mut Rng) -> ExecutionCase {
    let mut fields: Vec<String> = Vec::new();
    let call_id = text(rng, 60);
    let tool = text(rng, 30);
    let background = rng.one_in(2);
    let mut clean = push_field(rng, &mut fields, "callId", &json_string(&call_id));
    clean &= push_field(rng, &mut fields, "name", &json_string(&tool));
    let mut root_call_id = call_id.clone();
    if rng.one_in(2) {
        let root = text(rng, 60);
        let before = fields.len();
        if push_field(rng, &mut fields, "rootCallId", &json_string(&root)) {
            root_call_id = root;
        } else if fields.len() != before {
            // Written wrongly (not merely left out).
            clean = false;
        }
    }
    if rng.one_in(2) {
        let junk = json_junk(rng, 0);
        clean &= json_ok_at(&junk, 1);
        fields.push(format!("\"arguments\":{junk}"));
    }
    if background || rng.one_in(2) {
        fields.push(format!("\"background\":{background}"));
    }
    let agent = rng.one_in(2).then(|| dsh_env::Agent {
        session_id: text(rng, 40),
        // Mostly absolute: a relative cwd is refused; it may be absent.
        cwd: match rng.below(5) {
            0 => None,
            1 => Some(text(rng, 60)),
            _ => Some(format!("/{}", text(rng, 60))),
        },
        parent_session_id: rng.one_in(2).then(|| text(rng, 40)),
        depth: *rng.pick(&[0, 1, 7, u32::MAX]),
    });
    if let Some(agent) = &agent {
        clean &= agent.cwd.as_ref().is_none_or(|cwd| cwd.starts_with('/'));
        let cwd = match &agent.cwd {
            Some(cwd) => format!(",\"cwd\":{}", json_string(cwd)),
            None => rng.pick(&["", ",\"cwd\":null"]).to_string(),
        };
        let parent = match &agent.parent_session_id {
            Some(p) => format!(",\"parentSession\":{}", json_string(p)),
            None => rng.pick(&["", ",\"parentSession\":null"]).to_string(),
        };
        let depth = match agent.depth {
            0 => rng.pick(&["", ",\"delegationDepth\":0"]).to_string(),
            d => format!(",\"delegationDepth\":{d}"),
        };
        let extra = if rng.one_in(3) {
            let junk = json_junk(rng, 0);
            clean &= json_ok_at(&junk, 3);
            format!(",\"extra\":{junk}")
        } else {
            String::new()
        };
        fields.push(format!(
            "\"agent\":{{\"session\":{{\"header\":{{\"id\":{}{cwd}{parent}{depth}}}{extra}}}}}",
            json_string(&agent.session_id),
        ));
    } else if rng.one_in(3) {
        fields.push("\"agent\":null".into());
    }
    if rng.one_in(3) {
        let (name, junk) = (text(rng, 20), json_junk(rng, 0));
        clean &= json_ok_at(&junk, 1) && !KNOWN_FIELDS.contains(&name.as_str());
        fields.push(format!("{}:{junk}", json_string(&name)));
    }
    let turn = rng.below(fields.len().max(1));
    fields.rotate_left(turn);
    let ws = *rng.pick(&["", " ", "\n\t "]);
    let doc = format!("{ws}{{{ws}{}{ws}}}{ws}", fields.join(&format!(",{ws}")));
    // Text fields with a control character (but TAB) are refused.
    let texts = [&call_id, &root_call_id, &tool];
    let agent_texts = agent.iter().flat_map(|a| {
        [
            Some(&a.session_id),
            a.cwd.as_ref(),
            a.parent_session_id.as_ref(),
        ]
        .into_iter()
        .flatten()
    });
    clean &= texts
        .into_iter()
        .chain(agent_texts)
        .all(|t| text_is_clean(t));
    let expected = clean.then_some(ToolExecution {
        call_id,
        root_call_id,
        tool,
        mode: if background {
            dsh_env::Mode::Background
        } else {
            dsh_env::Mode::Foreground
        },
        agent,
    });
    ExecutionCase {
        text: doc,
        expected,
    }
}

/// The canonical JSON of `execution`, which must parse back to it.
fn execution_json(execution: &ToolExecution) -> String {
    let agent = execution.agent.as_ref().map(|agent| {
        serde_json::json!({
            "session": {"header": {
                "id": agent.session_id,
                "cwd": agent.cwd,
                "parentSession": agent.parent_session_id,
                "delegationDepth": agent.depth,
            }},
        })
    });
    serde_json::json!({
        "callId": execution.call_id,
        "rootCallId": execution.root_call_id,
        "name": execution.tool,
        "background": execution.mode == dsh_env::Mode::Background,
        "agent": agent,
    })
    .to_string()
}

/// Checks what the parser makes of `text`; returns whether it accepted it.
fn check_execution(text: &str, expected: Option<&ToolExecution>) -> bool {
    let parsed = ToolExecution::from_json(text);
    let accepted = parsed.is_ok();
    match parsed {
        Ok(execution) => {
            if let Some(expected) = expected {
                assert_eq!(&execution, expected);
            }
            let round_trip = ToolExecution::from_json(&execution_json(&execution)).unwrap();
            assert_eq!(round_trip, execution, "round trip");
        }
        Err(err) => {
            let message = err.to_string();
            assert!(message.starts_with("invalid execution JSON"), "{message}");
            assert!(expected.is_none(), "well-formed JSON refused: {message}");
        }
    }
    accepted
}

#[test]
fn fuzz_execution_json() {
    let start = Instant::now();
    let (mut accepted, mut total) = (0, 0);
    let reference = r#"{"callId":"c2","rootCallId":"c1","name":"bash","arguments":{"command":"env","env":{"DSH_X":"1"},"stdin":"secret"},"background":true,"agent":{"session":{"header":{"id":"s1","cwd":"/w","parentId":"s0"}},"depth":1}}"#;
    for (case, mut rng) in each_case("execution", 4000) {
        let generated = execution_case(&mut rng);
        let (doc, expected) = match rng.below(5) {
            0 | 1 => (generated.text, generated.expected),
            2 => (
                mutate_text(&mut rng, &generated.text, reference.as_bytes()),
                None,
            ),
            3 => (
                mutate_text(&mut rng, reference, generated.text.as_bytes()),
                None,
            ),
            _ => (json_junk(&mut rng, 0), None),
        };
        let _guard = CaseGuard::new("execution", case, &doc).with_raw(doc.as_bytes());
        accepted += usize::from(check_execution(&doc, expected.as_ref()));
        total += 1;
    }
    for depth in [127, 128, 129, 10_000, 1_000_000] {
        for text in [
            format!(
                r#"{{"callId":"c","name":"b","arguments":{}{}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            ),
            format!(
                r#"{{"callId":"c","name":"b","arguments":{}"#,
                "{\"a\":".repeat(depth)
            ),
        ] {
            let _guard = CaseGuard::new("execution-nesting", depth as u64, &text);
            check_execution(&text, None);
        }
    }
    println!(
        "execution: {total} cases, {accepted} accepted, in {:?}",
        start.elapsed()
    );
}

//! The execution JSON parser: any text must give `Ok` or `Err`, never a
//! panic, and what it accepts must survive a round trip through the
//! canonical shape.

#![no_main]

use dsh_env::{Agent, Mode, ToolExecution};
use libfuzzer_sys::fuzz_target;

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn canonical(execution: &ToolExecution) -> String {
    let agent = match &execution.agent {
        None => "null".to_string(),
        Some(Agent {
            session_id,
            cwd,
            parent_session_id,
            depth,
        }) => format!(
            r#"{{"session":{{"header":{{"id":{},"cwd":{},"parentSession":{},"delegationDepth":{depth}}}}}}}"#,
            json_string(session_id),
            cwd.as_deref().map_or("null".to_string(), json_string),
            parent_session_id
                .as_deref()
                .map_or("null".to_string(), json_string),
        ),
    };
    format!(
        r#"{{"callId":{},"rootCallId":{},"name":{},"background":{},"agent":{agent}}}"#,
        json_string(&execution.call_id),
        json_string(&execution.root_call_id),
        json_string(&execution.tool),
        execution.mode == Mode::Background,
    )
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match ToolExecution::from_json(text) {
        Ok(execution) => {
            let again = ToolExecution::from_json(&canonical(&execution))
                .expect("the canonical form parses");
            assert_eq!(again, execution);
        }
        Err(err) => assert!(err.to_string().starts_with("invalid execution JSON")),
    }
});

//! `call-trace`: a W3C `traceparent` for the call, so that a tool's spans join
//! the agent's trace.
//!
//! The trace id is derived from the session id (the root call id when there is
//! no agent) and the parent span id from the call id, so the same call always
//! gets the same value and every call of one session shares one trace.

use dsh_env_guest::{Contributor, Declaration, Execution, export_contributor};

struct CallTrace;

impl Contributor for CallTrace {
    fn declare() -> Declaration {
        Declaration::new("call-trace").key(
            "DSH_TRACEPARENT",
            "W3C traceparent of this tool call: trace from the session, span from the call.",
        )
    }

    fn resolve(execution: Execution) -> Result<Vec<(String, String)>, String> {
        let trace_seed = match &execution.agent {
            Some(agent) => agent.session_id.as_str(),
            None => execution.root_call_id.as_str(),
        };
        Ok(vec![(
            "DSH_TRACEPARENT".to_string(),
            traceparent(trace_seed, &execution.call_id),
        )])
    }
}

/// `00-<32 hex trace id>-<16 hex span id>-01`.
fn traceparent(trace_seed: &str, call_id: &str) -> String {
    let trace_id =
        (u128::from(nonzero(fnv1a(trace_seed, 0))) << 64) | u128::from(fnv1a(trace_seed, 1));
    let span_id = nonzero(fnv1a(call_id, 2));
    format!("00-{trace_id:032x}-{span_id:016x}-01")
}

/// 64-bit FNV-1a, salted so that one input gives independent words.
fn fnv1a(input: &str, salt: u8) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in std::iter::once(salt).chain(input.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// All-zero ids are invalid in W3C trace context.
fn nonzero(word: u64) -> u64 {
    if word == 0 { 1 } else { word }
}

export_contributor!(CallTrace);

//! `puppet`: a test contributor whose declaration and behaviour come from its
//! host-granted config, so that one real component can play every role a test
//! needs (good, malformed, failing, hostile).
//!
//! Config keys:
//! - `name`: the declared name (default `puppet`);
//! - `keys`: declared keys, `KEY=description` entries separated by `|`;
//! - `declare`: `trap` or `loop` to misbehave in `declare`;
//! - `resolve`: `trap`, `loop`, `grow` (allocate without bound) or
//!   `err:<message>`; anything else returns `pairs`;
//! - `pairs`: returned pairs, `KEY=value` entries separated by `|`. In a value,
//!   `{session}` becomes the agent's session id (or `none`), `{call}` the call
//!   id, `{mode}` `foreground` or `background`, `{count}` how many times this
//!   instance has resolved, and `\0` a NUL.

use std::sync::atomic::{AtomicU32, Ordering};

use dsh_env_guest::{Contributor, Declaration, Execution, Mode, config, export_contributor};

struct Puppet;

/// Resolutions served by this instance: always 1 when every call gets a fresh one.
static RESOLVED: AtomicU32 = AtomicU32::new(0);

fn entries(list: &str) -> impl Iterator<Item = (&str, &str)> {
    list.split('|')
        .filter(|entry| !entry.is_empty())
        .map(|entry| entry.split_once('=').unwrap_or((entry, "")))
}

fn misbehave(how: &str) {
    match how {
        "trap" => panic!("puppet was told to trap"),
        "loop" =>
        {
            #[allow(clippy::empty_loop)]
            loop {}
        }
        "grow" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1; 1 << 20]);
            }
        }
        _ => {}
    }
}

impl Contributor for Puppet {
    fn declare() -> Declaration {
        misbehave(&config("declare").unwrap_or_default());
        let mut declaration = Declaration::new(config("name").unwrap_or_else(|| "puppet".into()));
        for (key, description) in entries(&config("keys").unwrap_or_default()) {
            declaration = declaration.key(key, description);
        }
        declaration
    }

    fn resolve(execution: Execution) -> Result<Vec<(String, String)>, String> {
        let count = RESOLVED.fetch_add(1, Ordering::SeqCst) + 1;
        let behaviour = config("resolve").unwrap_or_default();
        if let Some(message) = behaviour.strip_prefix("err:") {
            return Err(message.to_string());
        }
        misbehave(&behaviour);
        let session = execution
            .agent
            .as_ref()
            .map_or("none", |agent| agent.session_id.as_str());
        let mode = match execution.mode {
            Mode::Foreground => "foreground",
            Mode::Background => "background",
        };
        Ok(entries(&config("pairs").unwrap_or_default())
            .map(|(key, value)| {
                let value = value
                    .replace("{session}", session)
                    .replace("{call}", &execution.call_id)
                    .replace("{mode}", mode)
                    .replace("{count}", &count.to_string())
                    .replace("\\0", "\0");
                (key.to_string(), value)
            })
            .collect())
    }
}

export_contributor!(Puppet);

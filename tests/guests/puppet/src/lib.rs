//! `puppet`: a test contributor whose declaration and behaviour come from its
//! host-granted config, so that one real component can play every role a test
//! needs: good, malformed, failing and hostile.
//!
//! Config keys:
//! - `name`: the declared name (default `puppet`);
//! - `keys`: declared keys, `KEY=description` entries separated by `|`;
//! - `declare`: a misbehaviour (below) to act out in `declare`;
//! - `resolve`: a misbehaviour, or `err:<message>`; otherwise `pairs` is returned;
//! - `pairs`: returned pairs, `KEY=value` entries separated by `|`. In a value,
//!   `{session}` becomes the agent's session id (or `none`), `{call}` the call
//!   id, `{mode}` `foreground` or `background`, `{count}` how many times this
//!   instance has resolved, `{cwd}` the agent's cwd (`none` when it has none), and `\0`, `\n`, `\r`,
//!   `\t` a NUL, newline, carriage return, tab.
//!
//! Misbehaviours (several joined by `+` are acted out in turn, until one
//! decides the result): `trap` or `trap:<message>` (panic), `loop`, `grow` (allocate without bound),
//! `recurse` (unbounded recursion), `spin:<ms>` (busy on the clock, never waiting), `sleep:<ms>` (a WASI clock sleep),
//! `big:<bytes>` (one huge value for the first key), `many:<n>` (n pairs),
//! `print:<bytes>` (write to stdout and stderr, with terminal escapes, then
//! go on), `hold:<MiB>:<ms>` (fill that much memory, wait that long in a
//! WASI sleep, then go on), `hoard:<path>:<n>[:<ms>]` (open `path` n times
//! and keep every file open, for `ms` more if given; returns how many
//! opened, or `err` with the count and the error), `try-read:<path>` and `try-env:<name>`
//! (read a file or a variable as the first key's value; when that fails, say
//! so on stderr and return no pairs, as a contributor that degrades quietly
//! does), and the probes `read:<path>`, `write:<path>`, `list:<path>`, `env`,
//! `connect:<addr>`, whose result (or error) is returned as the first key's
//! value, or as `err` when the probe fails; `clock` returns the wall clock,
//! in nanoseconds since the epoch, as the first key's value (the monotonic
//! clock starts anew in each instance, the wall clock does not).

use std::sync::atomic::{AtomicU32, Ordering};

use dsh_env_guest::{Contributor, Declaration, Execution, Mode, config, export_contributor};

struct Puppet;

/// Resolutions served by this instance: always 1 when every call gets a fresh one.
static RESOLVED: AtomicU32 = AtomicU32::new(0);

type Pairs = Vec<(String, String)>;

fn entries(list: &str) -> impl Iterator<Item = (&str, &str)> {
    list.split('|')
        .filter(|entry| !entry.is_empty())
        .map(|entry| entry.split_once('=').unwrap_or((entry, "")))
}

fn first_key() -> String {
    entries(&config("keys").unwrap_or_default())
        .next()
        .map_or_else(|| "DSH_OUT".to_string(), |(key, _)| key.to_string())
}

/// A little CPU work between clock reads.
fn busy_work() -> u64 {
    (0..1000u64).fold(0, |sum, i| sum.wrapping_add(std::hint::black_box(i)))
}

#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    // black_box keeps the frame from being optimised into a loop.
    std::hint::black_box(recurse(std::hint::black_box(depth + 1))) + 1
}

/// Acts out each of `how`'s `+`-joined misbehaviours in turn. Returns `Some`
/// when one decides the result.
fn misbehave(how: &str) -> Option<Result<Pairs, String>> {
    how.split('+').find_map(misbehave_once)
}

/// Acts out one misbehaviour. Returns `Some` when it decides the result.
fn misbehave_once(how: &str) -> Option<Result<Pairs, String>> {
    let (verb, argument) = how.split_once(':').unwrap_or((how, ""));
    let number = || argument.parse::<usize>().unwrap_or(0);
    let probe = |result: std::io::Result<String>| {
        Some(
            result
                .map(|value| vec![(first_key(), value)])
                .map_err(|e| e.to_string()),
        )
    };
    match verb {
        "trap" if argument.is_empty() => panic!("puppet was told to trap"),
        "trap" => panic!("{argument}"),
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
        "recurse" => Some(Ok(vec![(first_key(), recurse(0).to_string())])),
        "spin" => {
            // Busy for `number` ms of the monotonic clock, never waiting.
            let until =
                std::time::Instant::now() + std::time::Duration::from_millis(number() as u64);
            while std::time::Instant::now() < until {
                std::hint::black_box(busy_work());
            }
            None
        }
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_millis(number() as u64));
            None
        }
        "err" => Some(Err(argument.to_string())),
        "big" => Some(Ok(vec![(first_key(), "x".repeat(number()))])),
        "many" => Some(Ok((0..number())
            .map(|i| (format!("DSH_MANY_{i}"), String::new()))
            .collect())),
        "print" => {
            let line = "\x1b[31mred\x1b[0m and a bell\x07\n";
            let text = line.repeat(number() / line.len() + 1);
            print!("{text}");
            eprint!("{text}");
            None
        }
        "hold" => {
            let (mib, ms) = argument.split_once(':').unwrap_or((argument, "0"));
            let mib = mib.parse::<usize>().unwrap_or(0);
            let held = std::hint::black_box(vec![1u8; mib << 20]);
            std::thread::sleep(std::time::Duration::from_millis(ms.parse().unwrap_or(0)));
            drop(held);
            None
        }
        "hoard" => {
            let mut parts = argument.splitn(3, ':');
            let (path, n) = (parts.next().unwrap_or(""), parts.next().unwrap_or("0"));
            let ms = parts.next().and_then(|ms| ms.parse().ok()).unwrap_or(0);
            let mut files = Vec::new();
            for _ in 0..n.parse::<usize>().unwrap_or(0) {
                match std::fs::File::open(path) {
                    Ok(file) => files.push(file),
                    Err(e) => return Some(Err(format!("opened {}, then: {e}", files.len()))),
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(ms));
            Some(Ok(vec![(first_key(), files.len().to_string())]))
        }
        "try-read" => Some(Ok(match std::fs::read_to_string(argument) {
            Ok(value) => vec![(first_key(), value)],
            Err(e) => {
                eprintln!("cannot read {argument}: {e}");
                Vec::new()
            }
        })),
        "try-env" => Some(Ok(match std::env::var(argument) {
            Ok(value) => vec![(first_key(), value)],
            Err(e) => {
                eprintln!("cannot read ${argument}: {e}");
                Vec::new()
            }
        })),
        "read" => probe(std::fs::read_to_string(argument)),
        "write" => probe(std::fs::write(argument, "written").map(|()| "written".to_string())),
        "list" => probe(std::fs::read_dir(argument).map(|dir| {
            let names: Vec<String> = dir
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.join(",")
        })),
        "env" => probe(Ok(std::env::vars()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","))),
        "connect" => probe(std::net::TcpStream::connect(argument).map(|_| "connected".to_string())),
        "clock" => probe(Ok(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos())
            .to_string())),
        _ => None,
    }
}

impl Contributor for Puppet {
    fn declare() -> Declaration {
        if let Some(Err(message)) = misbehave(&config("declare").unwrap_or_default()) {
            panic!("{message}");
        }
        let mut declaration = Declaration::new(config("name").unwrap_or_else(|| "puppet".into()));
        for (key, description) in entries(&config("keys").unwrap_or_default()) {
            declaration = declaration.key(key, description);
        }
        declaration
    }

    fn resolve(execution: Execution) -> Result<Pairs, String> {
        let count = RESOLVED.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(result) = misbehave(&config("resolve").unwrap_or_default()) {
            return result;
        }
        let (session, cwd) = execution.agent.as_ref().map_or(("none", ""), |agent| {
            (
                agent.session_id.as_str(),
                agent.cwd.as_deref().unwrap_or("none"),
            )
        });
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
                    .replace("{cwd}", cwd)
                    .replace("{count}", &count.to_string())
                    .replace("\\0", "\0")
                    .replace("\\n", "\n")
                    .replace("\\r", "\r")
                    .replace("\\t", "\t");
                (key.to_string(), value)
            })
            .collect())
    }
}

export_contributor!(Puppet);

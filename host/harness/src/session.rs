//! Agent sessions and their JSONL files.
//!
//! A session gets its id when it is created, before any turn. Resume loads the
//! header (same id); fork copies the history under a new id; spawn starts a
//! child agent with a new id, an empty history and depth + 1.
//!
//! One file per session, `<root>/<id>.jsonl`: the header line
//! (`{"type":"session","id":...}`), then one event per line. It is written at
//! turn-end checkpoints, by writing a temporary file and renaming it, so the
//! file may not exist during the first turn and a crash never leaves a file
//! that fails to load.

use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use dsh_env::execution::Agent;

/// How a session came from its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Relation {
    /// A copy of the parent's history under a new id.
    Fork,
    /// A child agent started by the parent.
    Spawn,
}

/// The session this one came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentLink {
    /// The parent's session id.
    pub session_id: String,
    /// Fork or spawn.
    pub relation: Relation,
}

/// The first line of a session file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionHeader {
    /// The session id, fixed at creation.
    pub id: String,
    /// When the session was created (RFC 3339, UTC).
    pub created_at: String,
    /// The agent's working directory.
    pub cwd: String,
    /// Where it came from, if anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// 0 for a top-level agent.
    #[serde(default)]
    pub depth: u32,
}

/// One line after the header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Event {
    /// A message from the user or the model.
    #[serde(rename = "message")]
    Message {
        /// `user` or `assistant`.
        role: String,
        /// The text.
        text: String,
    },
    /// The model called a tool.
    #[serde(rename = "tool/call", rename_all = "camelCase")]
    ToolCall {
        /// The call id.
        call_id: String,
        /// The tool.
        name: String,
        /// The model's arguments.
        arguments: serde_json::Value,
    },
    /// What the tool returned to the model.
    #[serde(rename = "tool/result", rename_all = "camelCase")]
    ToolResult {
        /// The call id.
        call_id: String,
        /// The text the model sees.
        output: String,
        /// Whether the call failed or was blocked.
        is_error: bool,
    },
}

/// A session: its header and its history.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// The header.
    pub header: SessionHeader,
    /// The history, oldest first.
    pub events: Vec<Event>,
}

/// `#[serde(tag = "type")]` for the header line.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename = "session")]
struct HeaderLine {
    #[serde(flatten)]
    header: SessionHeader,
}

impl Session {
    /// A new top-level session in `cwd`, with a fresh id.
    pub fn new(cwd: impl Into<String>) -> Self {
        Session {
            header: SessionHeader {
                id: new_session_id(),
                created_at: now_rfc3339(),
                cwd: cwd.into(),
                parent: None,
                depth: 0,
            },
            events: Vec::new(),
        }
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.header.id
    }

    /// A copy of this session's history under a new id.
    pub fn fork(&self) -> Self {
        Session {
            header: SessionHeader {
                id: new_session_id(),
                created_at: now_rfc3339(),
                cwd: self.header.cwd.clone(),
                parent: Some(ParentLink {
                    session_id: self.header.id.clone(),
                    relation: Relation::Fork,
                }),
                depth: self.header.depth,
            },
            events: self.events.clone(),
        }
    }

    /// A child agent of this session, in `cwd`, with a new id and depth + 1.
    pub fn spawn(&self, cwd: impl Into<String>) -> Self {
        Session {
            header: SessionHeader {
                id: new_session_id(),
                created_at: now_rfc3339(),
                cwd: cwd.into(),
                parent: Some(ParentLink {
                    session_id: self.header.id.clone(),
                    relation: Relation::Spawn,
                }),
                depth: self.header.depth + 1,
            },
            events: Vec::new(),
        }
    }

    /// The agent that this session's tool calls carry.
    pub fn agent(&self) -> Agent {
        Agent {
            session_id: self.header.id.clone(),
            cwd: self.header.cwd.clone(),
            parent_session_id: self.header.parent.as_ref().map(|p| p.session_id.clone()),
            depth: self.header.depth,
        }
    }
}

/// Why a session file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// An I/O error, with the file.
    #[error("session file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file could not be read: missing, not a regular file, over the
    /// size limit, or not UTF-8.
    #[error("session file {path}: {problem}")]
    Read {
        /// The file.
        path: String,
        /// What is wrong.
        problem: dsh_env::input::ReadProblem,
    },
    /// The file's header is missing or malformed.
    #[error("session file {path}: line {line}: {message}")]
    Malformed {
        /// The file.
        path: String,
        /// The 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// Where session files live (by default `$DSH_HOME/sessions/`).
#[derive(Debug, Clone)]
pub struct SessionStore {
    root: PathBuf,
}

impl SessionStore {
    /// A store rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SessionStore { root: root.into() }
    }

    /// The file of session `id`.
    pub fn path(&self, id: &str) -> PathBuf {
        self.root.join(format!("{id}.jsonl"))
    }

    /// Writes the whole session atomically (write, then rename).
    pub fn checkpoint(&self, session: &Session) -> Result<PathBuf, SessionError> {
        let path = self.path(session.id());
        let io = |source| SessionError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut text = line(&HeaderLine {
            header: session.header.clone(),
        });
        for event in &session.events {
            text.push_str(&line(event));
        }
        std::fs::create_dir_all(&self.root).map_err(io)?;
        dsh_env::atomic_file::write(&path, text).map_err(io)?;
        Ok(path)
    }

    /// Loads session `id` (resume keeps its id). A final line that does not
    /// parse (a torn append by another writer) is dropped, not fatal.
    pub fn load(&self, id: &str) -> Result<Session, SessionError> {
        load_file(&self.path(id))
    }
}

fn load_file(path: &Path) -> Result<Session, SessionError> {
    let shown = path.display().to_string();
    // The model can run commands under the home: a session file may have
    // become a FIFO, or grown without end.
    let text = dsh_env::input::read_regular_text(path, dsh_env::input::MAX_SESSION_BYTES).map_err(
        |e| SessionError::Read {
            path: shown.clone(),
            problem: e.problem,
        },
    )?;
    let malformed = |line: usize, message: String| SessionError::Malformed {
        path: shown.clone(),
        line,
        message,
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let first = lines
        .first()
        .ok_or_else(|| malformed(1, "empty file".into()))?;
    let header: HeaderLine =
        serde_json::from_str(first).map_err(|e| malformed(1, e.to_string()))?;
    let mut events = Vec::new();
    for (index, text) in lines.iter().enumerate().skip(1) {
        match serde_json::from_str(text) {
            Ok(event) => events.push(event),
            Err(_) if index == lines.len() - 1 => break,
            Err(e) => return Err(malformed(index + 1, e.to_string())),
        }
    }
    Ok(Session {
        header: header.header,
        events,
    })
}

fn line(value: &impl Serialize) -> String {
    // Serializing these plain types cannot fail.
    let mut text = serde_json::to_string(value).unwrap_or_default();
    text.push('\n');
    text
}

/// A random, UUID-shaped session id.
pub fn new_session_id() -> String {
    // RandomState is seeded from the OS's randomness; two hashers give 128 bits.
    let word = || {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    let (a, b) = (word(), word());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

/// The current time as RFC 3339, UTC, to the second.
fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_fresh_and_uuid_shaped() {
        let (a, b) = (new_session_id(), new_session_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let now = now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.starts_with("20") && now.ends_with('Z'), "{now}");
    }

    #[test]
    fn fork_and_spawn_link_to_the_parent() {
        let mut parent = Session::new("/w");
        parent.events.push(Event::Message {
            role: "user".into(),
            text: "hi".into(),
        });
        let fork = parent.fork();
        assert_ne!(fork.id(), parent.id());
        assert_eq!(fork.events, parent.events);
        assert_eq!(fork.header.depth, 0);
        assert_eq!(fork.agent().parent_session_id.as_deref(), Some(parent.id()));
        let child = parent.spawn("/w/sub");
        assert_ne!(child.id(), parent.id());
        assert!(child.events.is_empty());
        assert_eq!((child.header.depth, child.agent().depth), (1, 1));
        assert_eq!(
            child.header.parent.as_ref().unwrap().relation,
            Relation::Spawn
        );
    }

    /// The model can run `mkfifo` in the home: loading a session must not
    /// block on it.
    #[test]
    fn a_session_file_that_became_a_fifo_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let path = store.path("s1");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        let err = store.load("s1").unwrap_err().to_string();
        assert!(err.contains("is a FIFO, not a regular file"), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
    }

    #[test]
    fn checkpoint_and_load_round_trip_and_tolerate_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path().join("sessions"));
        let mut session = Session::new("/w").spawn("/w");
        session.events.push(Event::ToolCall {
            call_id: "c1".into(),
            name: "bash".into(),
            arguments: serde_json::json!({"command": "ls"}),
        });
        let path = store.checkpoint(&session).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with(&format!(
                "{{\"type\":\"session\",\"id\":\"{}\"",
                session.id()
            )),
            "{text}"
        );
        assert_eq!(store.load(session.id()).unwrap(), session);

        std::fs::write(&path, format!("{text}{{\"type\":\"tool/res")).unwrap();
        assert_eq!(
            store.load(session.id()).unwrap(),
            session,
            "torn tail dropped"
        );
        std::fs::write(&path, "not json\n").unwrap();
        let err = store.load(session.id()).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }
}

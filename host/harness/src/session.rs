//! Agent sessions and their JSONL files.
//!
//! A session gets its id when it is created, before any turn. Resume loads the
//! header (same id); fork copies the history under a new id; spawn starts a
//! child agent with a new id, an empty history and depth + 1.
//!
//! One file per session, `<root>/<id>.jsonl`: the header line
//! (`{"type":"session","id":...}`), then one event per line. It is written at
//! turn-end checkpoints ([`dsh_env_support::atomic_file::write`]: a temporary file,
//! synced, then renamed), so the file may not exist during the first turn
//! and a crash never leaves a file that fails to load.
//!
//! A session id is a UUID in its canonical text: 36 characters, lowercase
//! hex and hyphens ([`is_valid_session_id`]). New ids are UUIDv7, so they
//! sort by creation time; ids of any UUID version are accepted, so files
//! written with the earlier random (v4-shaped) ids still load. The store
//! builds a path only from a valid id, so no id can name a file outside it.

use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use dsh_env::Agent;
use dsh_env_support::input::escape_controls;

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
    /// When the session was created (RFC 3339 in the file, UTC, to the second).
    pub created_at: Timestamp,
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
        /// `user` or `assistant`; `system` for context from SessionStart hooks.
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
                created_at: now(),
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
                created_at: now(),
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
                created_at: now(),
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
            cwd: Some(self.header.cwd.clone()),
            parent_session_id: self.header.parent.as_ref().map(|p| p.session_id.clone()),
            depth: self.header.depth,
        }
    }
}

/// Why a session file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The id is not a session id, so the store names no file for it.
    #[error(
        "invalid session id `{}`: a session id is a lowercase, hyphenated UUID",
        escape_controls(id)
    )]
    InvalidId {
        /// The id, as given.
        id: String,
    },
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
        problem: dsh_env::ReadProblem,
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

    /// The file of session `id`; an invalid id names no file.
    pub fn path(&self, id: &str) -> Result<PathBuf, SessionError> {
        if !is_valid_session_id(id) {
            return Err(SessionError::InvalidId { id: id.to_string() });
        }
        Ok(self.root.join(format!("{id}.jsonl")))
    }

    /// Writes the whole session atomically (write, sync, then rename).
    pub fn checkpoint(&self, session: &Session) -> Result<PathBuf, SessionError> {
        let path = self.path(session.id())?;
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
        dsh_env_support::atomic_file::write(&path, text).map_err(io)?;
        Ok(path)
    }

    /// Loads session `id` (resume keeps its id). A final line that does not
    /// parse (a torn append by another writer) is dropped, not fatal.
    pub fn load(&self, id: &str) -> Result<Session, SessionError> {
        read_session_file(&self.path(id)?, id)
    }
}

fn read_session_file(path: &Path, id: &str) -> Result<Session, SessionError> {
    let shown = path.display().to_string();
    // The model can run commands under the home: a session file may have
    // become a FIFO, or grown without end.
    let text =
        dsh_env_support::input::read_regular_text(path, dsh_env_support::input::MAX_SESSION_BYTES)
            .map_err(|e| SessionError::Read {
                path: shown.clone(),
                problem: e.problem,
            })?;
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
    // The model can write files under the home: a header naming another id
    // would make the next checkpoint write another session's file.
    if header.header.id != id {
        return Err(malformed(
            1,
            format!(
                "the header's id `{}` is not the file's",
                escape_controls(&header.header.id)
            ),
        ));
    }
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

/// A fresh session id: a UUIDv7 (time-ordered), in its canonical text.
pub fn new_session_id() -> String {
    Uuid::now_v7().hyphenated().to_string()
}

/// Whether the store accepts `id`: a UUID of any version in its canonical
/// text (lowercase, hyphenated), so it holds no `/`, `.` or control
/// character and each session has exactly one spelling, hence one file.
pub fn is_valid_session_id(id: &str) -> bool {
    Uuid::try_parse(id)
        .is_ok_and(|uuid| uuid.hyphenated().encode_lower(&mut Uuid::encode_buffer()) == id)
}

/// Now, to the second (as the header has always been written).
fn now() -> Timestamp {
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_unique_valid_and_time_ordered() {
        let ids: Vec<String> = (0..1000).map(|_| new_session_id()).collect();
        let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        for id in &ids {
            assert!(is_valid_session_id(id), "{id}");
            assert_eq!(Uuid::try_parse(id).unwrap().get_version_num(), 7, "{id}");
        }
        assert!(ids.is_sorted(), "v7 ids sort in creation order");
    }

    #[test]
    fn an_invalid_id_names_no_file_and_is_refused_by_path_load_and_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path().join("a/sessions"));
        let absolute = dir.path().join("abs").display().to_string();
        // Each id with the start of its error's text (escaped).
        let bad = [
            ("../x", "`../x`".to_string()),
            ("../../x", "`../../x`".to_string()),
            (&absolute, format!("`{absolute}`")),
            ("a/0191d5a0-0000-7000-8000-000000000000", "`a/0191".into()),
            ("", "``".into()),
            ("x\n", "`x\\n`".into()),
            ("0191D5A0-0000-7000-8000-000000000000", "`0191D5A0".into()),
            (
                "{0191d5a0-0000-7000-8000-000000000000}",
                "`{0191d5a0".into(),
            ),
            (
                "0191d5a0000070008000000000000000",
                "`0191d5a0000070008".into(),
            ),
        ];
        for (id, shown) in bad {
            let refused = |err: SessionError| {
                assert!(matches!(&err, SessionError::InvalidId { id: given } if given == id));
                let text = err.to_string();
                assert!(
                    text.starts_with(&format!("invalid session id {shown}")),
                    "{text}"
                );
                assert!(!text.contains('\n'), "escaped: {text}");
            };
            refused(store.path(id).unwrap_err());
            refused(store.load(id).unwrap_err());
            let mut session = Session::new("/w");
            session.header.id = id.to_string();
            refused(store.checkpoint(&session).unwrap_err());
        }
        for outside in ["a/x.jsonl", "x.jsonl", "abs.jsonl", "a/sessions"] {
            assert!(!dir.path().join(outside).exists(), "{outside} written");
        }
    }

    /// A file whose header names another session is refused: resuming it
    /// would checkpoint over that other session's file.
    #[test]
    fn a_header_naming_another_id_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let (a, b) = (Session::new("/w"), Session::new("/w"));
        let written = store.checkpoint(&a).unwrap();
        std::fs::rename(written, store.path(b.id()).unwrap()).unwrap();
        let err = store.load(b.id()).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "line 1: the header's id `{}` is not the file's",
                a.id()
            )),
            "{err}"
        );
    }

    /// Files written before ids were UUIDv7 (random v4-shaped ids, times to
    /// the second) load unchanged, and are written back the same way.
    #[test]
    fn an_older_session_file_still_loads() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let id = "5f0c6b1e-93a2-4d7e-a1b0-6c2f9e8d7a41";
        let text = format!(
            "{{\"type\":\"session\",\"id\":\"{id}\",\"createdAt\":\"2026-11-30T23:59:07Z\",\"cwd\":\"/w\",\"depth\":0}}\n\
             {{\"type\":\"message\",\"role\":\"user\",\"text\":\"hi\"}}\n"
        );
        std::fs::write(store.path(id).unwrap(), &text).unwrap();
        let session = store.load(id).unwrap();
        assert_eq!(session.id(), id);
        assert_eq!(
            session.header.created_at.to_string(),
            "2026-11-30T23:59:07Z"
        );
        assert_eq!(session.events.len(), 1);
        store.checkpoint(&session).unwrap();
        assert_eq!(
            std::fs::read_to_string(store.path(id).unwrap()).unwrap(),
            text
        );
    }

    #[test]
    fn created_at_is_rfc3339_utc_to_the_second() {
        let before = Timestamp::now().as_second();
        let header = serde_json::to_value(&Session::new("/w").header).unwrap();
        let text = header["createdAt"].as_str().unwrap();
        assert_eq!(text.len(), 20, "{text}");
        assert!(text.ends_with('Z'), "{text}");
        let parsed: Timestamp = text.parse().unwrap();
        assert!(
            (before..=before + 1).contains(&parsed.as_second()),
            "{text}"
        );
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
        let id = new_session_id();
        let path = store.path(&id).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        let err = store.load(&id).unwrap_err().to_string();
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

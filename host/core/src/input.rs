//! Input the host did not make: files a user names, and text that ends up in
//! an environment or on an output line.
//!
//! Files: a manifest, an execution file or a component path may name a FIFO,
//! a device or a huge file. [`read_regular_file`] opens without blocking,
//! refuses anything but a regular file, and reads at most a cap, so a bad
//! path fails at once with an error naming the file.
//!
//! Text: [`control_character`] is the one rule for values that reach an
//! environment or a `KEY=value` line: no control character except TAB, i.e.
//! none of C0 but HT, no DEL, no C1 (`char::is_control`). Without line breaks
//! or NULs a value cannot forge an output line or cut an environment string;
//! TAB is kept because it breaks neither.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The largest manifest read.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// The largest execution JSON read (from a file or stdin).
pub const MAX_EXECUTION_BYTES: u64 = 1 << 20;
/// The largest component file read.
pub const MAX_COMPONENT_BYTES: u64 = 128 << 20;
/// The largest hooks.json read.
pub const MAX_HOOKS_BYTES: u64 = 1 << 20;
/// The largest session file read (a session's JSONL grows with its turns).
pub const MAX_SESSION_BYTES: u64 = 64 << 20;

/// Why a file a user named could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadProblem {
    /// Opening, inspecting or reading it failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is not a regular file.
    #[error("is {0}, not a regular file")]
    NotRegular(&'static str),
    /// It holds more than the cap.
    #[error("is over the {0}-byte limit")]
    TooLarge(u64),
    /// Text was expected, and it is not UTF-8.
    #[error("is not UTF-8 (at byte {0})")]
    NotUtf8(usize),
}

/// A file a user named that could not be read, naming it.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct FileError {
    /// The file, as given (escaped for display).
    pub path: String,
    /// What is wrong.
    pub problem: ReadProblem,
}

/// Reads the regular file at `path`, at most `max_bytes` of it. Opens with
/// `O_NONBLOCK | O_NOCTTY`, so neither a FIFO without a writer nor a terminal
/// can hold the call, then checks the type of what was opened (not of what a
/// path named a moment before, which could be swapped).
pub fn read_regular_file(path: &Path, max_bytes: u64) -> Result<Vec<u8>, FileError> {
    let fail = |problem| FileError {
        path: escape_controls(&path.display().to_string()).into_owned(),
        problem,
    };
    let file = open_regular(path).map_err(fail)?;
    read_capped(file, max_bytes).map_err(fail)
}

/// [`read_regular_file`], for a file that must be UTF-8 text.
pub fn read_regular_text(path: &Path, max_bytes: u64) -> Result<String, FileError> {
    let bytes = read_regular_file(path, max_bytes)?;
    utf8(bytes).map_err(|problem| FileError {
        path: escape_controls(&path.display().to_string()).into_owned(),
        problem,
    })
}

/// `bytes` as text, or where it stops being UTF-8.
pub fn utf8(bytes: Vec<u8>) -> Result<String, ReadProblem> {
    String::from_utf8(bytes).map_err(|e| ReadProblem::NotUtf8(e.utf8_error().valid_up_to()))
}

fn open_regular(path: &Path) -> Result<File, ReadProblem> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(ReadProblem::NotRegular(kind_name(&kind)));
    }
    Ok(file)
}

/// Reads `reader` to its end, refusing more than `max_bytes`. Reads one byte
/// past the cap at most, so an endless source (`/dev/zero` on stdin) stops.
pub fn read_capped(reader: impl Read, max_bytes: u64) -> Result<Vec<u8>, ReadProblem> {
    let mut bytes = Vec::new();
    reader
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(ReadProblem::TooLarge(max_bytes));
    }
    Ok(bytes)
}

fn kind_name(kind: &std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "an unknown kind of file"
    }
}

/// Whether `path` is a file someone may execute (a program found on a
/// `PATH`).
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The first character of `text` that the value rule refuses: any control
/// character but TAB.
pub fn control_character(text: &str) -> Option<char> {
    text.chars().find(|&c| c.is_control() && c != '\t')
}

/// A control character, shown so that it cannot act: `\n (U+000A)`.
pub fn describe_control(c: char) -> String {
    format!("`{}` (U+{:04X})", c.escape_debug(), u32::from(c))
}

/// `text` with every control character (TAB too) escaped as Rust escapes it
/// (`\n`, `\u{1b}`), the rest unchanged: for text from a guest or a user on
/// a line of human-readable output. `--json` output is exact instead.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_rule_refuses_every_control_but_tab() {
        for bad in [
            "a\nb",
            "\r",
            "\0",
            "x\u{7f}",
            "\u{85}",
            "\u{1b}[31m",
            "\u{9b}",
        ] {
            assert!(control_character(bad).is_some(), "{bad:?}");
        }
        for good in ["", "plain", "tab\there", "ünïcödé ✓", "a=b;c"] {
            assert_eq!(control_character(good), None, "{good:?}");
        }
        assert_eq!(control_character("ok\r\n"), Some('\r'));
        assert_eq!(describe_control('\n'), "`\\n` (U+000A)");
        assert_eq!(describe_control('\0'), "`\\0` (U+0000)");
    }

    #[test]
    fn escaping_leaves_clean_text_alone() {
        assert!(matches!(
            escape_controls("a b'c\"d"),
            Cow::Borrowed("a b'c\"d")
        ));
        assert_eq!(
            escape_controls("x\nDSH_HOME=/evil\t\u{1b}"),
            "x\\nDSH_HOME=/evil\\t\\u{1b}"
        );
    }

    #[test]
    fn reads_a_regular_file_within_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_regular_file(&path, 5).unwrap(), b"12345");
        let err = read_regular_file(&path, 4).unwrap_err();
        assert!(matches!(err.problem, ReadProblem::TooLarge(4)), "{err}");
        assert!(
            err.to_string().ends_with("f: is over the 4-byte limit"),
            "{err}"
        );
    }

    #[test]
    fn refuses_what_is_not_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) reads the NUL-terminated path and nothing else.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        for (path, kind) in [
            (fifo.as_path(), "is a FIFO"),
            (Path::new("/dev/zero"), "is a character device"),
            (dir.path(), "is a directory"),
        ] {
            let err = read_regular_file(path, 1 << 20).unwrap_err();
            assert!(err.to_string().contains(kind), "{err}");
            assert!(err.to_string().starts_with(&path.display().to_string()));
        }
        let err = read_regular_file(&dir.path().join("absent"), 10).unwrap_err();
        assert!(matches!(err.problem, ReadProblem::Io(_)), "{err}");
    }

    #[test]
    fn an_endless_reader_stops_at_the_cap() {
        let err = read_capped(std::io::repeat(0), 1000).unwrap_err();
        assert!(matches!(err, ReadProblem::TooLarge(1000)));
    }
}

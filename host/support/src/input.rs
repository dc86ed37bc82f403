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
//!
//! Display: [`escape_controls`] is the one function through which text from a
//! guest, a registry, a signer or a user reaches a human-readable line. It
//! escapes every character [`hidden_from_review`] names: control characters
//! (Unicode category Cc), format characters (Cf: the bidirectional controls
//! U+202A-U+202E and U+2066-U+2069, U+061C, zero-width characters such as
//! U+200B-U+200F, U+FEFF, U+180E), and the line and paragraph separators
//! (Zl, Zp: U+2028, U+2029). Each of these can move, hide or break the text
//! around it on a terminal, so that a reviewer would read something else
//! than what is there. A contributor's name and key descriptions refuse them
//! outright ([`hidden_character`]).

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use icu_properties::CodePointMapData;
use icu_properties::props::GeneralCategory;

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

/// Blocks SIGPIPE in the calling thread, for a thread that writes to a
/// child's stdin. The CLI gives SIGPIPE its default action (so that
/// `… | head` ends it quietly), and then a write to a child that exited
/// without reading would kill the whole process. The signal goes to the
/// thread that writes; blocked there, the write fails with EPIPE instead,
/// and the signal is dropped when the thread ends.
pub fn block_sigpipe() {
    // SAFETY: sigemptyset/sigaddset fill a zeroed set on this stack, and
    // pthread_sigmask changes only this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
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

/// Whether `c` could reorder, hide or break what a reviewer reads on a
/// terminal: a control character (Cc), a format character (Cf, among them
/// the bidirectional controls and the zero-width characters), or a line or
/// paragraph separator (Zl, Zp). The one rule for text on a human-readable
/// line: such a character is escaped ([`escape_controls`]) or refused
/// ([`hidden_character`]).
pub fn hidden_from_review(c: char) -> bool {
    // ASCII other than the C0 controls and DEL is always shown as it is.
    if (' '..='~').contains(&c) {
        return false;
    }
    matches!(
        CodePointMapData::<GeneralCategory>::new().get(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

/// The first character of `text` that [`hidden_from_review`] names: for a
/// name or a description, which refuses them.
pub fn hidden_character(text: &str) -> Option<char> {
    text.chars().find(|&c| hidden_from_review(c))
}

/// A character the display rule escapes, shown so that it cannot act:
/// `` `\n` (U+000A) ``, `` `\u{202e}` (U+202E) ``.
pub fn describe_control(c: char) -> String {
    let mut shown = String::new();
    push_escaped(&mut shown, c);
    format!("`{shown}` (U+{:04X})", u32::from(c))
}

/// A character [`hidden_from_review`] names, with its kind, for an error
/// refusing it: `` control character `\n` (U+000A) ``, `` format character
/// `\u{202e}` (U+202E) ``.
pub fn describe_hidden(c: char) -> String {
    let kind = match CodePointMapData::<GeneralCategory>::new().get(c) {
        GeneralCategory::Format => "format character",
        GeneralCategory::LineSeparator => "line separator",
        GeneralCategory::ParagraphSeparator => "paragraph separator",
        _ => "control character",
    };
    format!("{kind} {}", describe_control(c))
}

/// `text` with every character [`hidden_from_review`] names escaped (TAB
/// too): a control character as Rust escapes it (`\n`, `\u{1b}`), any
/// other as `\u{202e}`; the rest unchanged. For text from a guest, a
/// registry, a signer or a user on a line of human-readable output;
/// `--json` output is exact instead.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hidden_from_review) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// Why a configuration key is refused, in serde's words for a struct that
/// denies unknown fields (as a manifest entry does), the key escaped:
/// ``unknown field `colour`, expected one of `path`, `source` ``. For a
/// boundary checked by hand, so that every one words it the same way.
pub fn unknown_key(key: &str, known: &'static [&'static str]) -> String {
    let key = escape_controls(key);
    <serde::de::value::Error as serde::de::Error>::unknown_field(&key, known).to_string()
}

/// Pushes `c` onto `out`, escaped if [`hidden_from_review`] names it.
pub fn push_escaped(out: &mut String, c: char) {
    if !hidden_from_review(c) {
        out.push(c);
    } else if c.is_control() {
        out.extend(c.escape_debug());
    } else {
        out.extend(c.escape_unicode());
    }
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
        assert!(matches!(escape_controls("ünïcödé ✓ é"), Cow::Borrowed(_)));
    }

    #[test]
    fn what_can_reorder_or_hide_text_is_escaped_and_named() {
        let hidden = [
            '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200b}', '\u{200c}', '\u{200d}', '\u{200e}', '\u{200f}',
            '\u{feff}', '\u{061c}', '\u{180e}', '\u{00ad}', '\u{2028}', '\u{2029}', '\u{85}', '\n',
            '\t',
        ];
        for c in hidden {
            assert!(hidden_from_review(c), "U+{:04X}", u32::from(c));
            let text = format!("a{c}b");
            let shown = escape_controls(&text);
            assert!(!shown.contains(c), "{shown:?}");
            assert_eq!(hidden_character(&text), Some(c));
        }
        assert_eq!(
            escape_controls("evil\u{202e}gnp.exe"),
            "evil\\u{202e}gnp.exe"
        );
        assert_eq!(escape_controls("a\u{2028}b"), "a\\u{2028}b");
        assert_eq!(describe_control('\u{2066}'), "`\\u{2066}` (U+2066)");
        assert_eq!(
            describe_hidden('\u{202e}'),
            "format character `\\u{202e}` (U+202E)"
        );
        assert_eq!(describe_hidden('\n'), "control character `\\n` (U+000A)");
        for shown in ['a', ' ', '~', 'é', '\u{0301}', '\u{00a0}', '✓', '中'] {
            assert!(!hidden_from_review(shown), "U+{:04X}", u32::from(shown));
        }
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

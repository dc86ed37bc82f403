//! What a guest writes to stdout and stderr: kept up to a cap, the rest
//! dropped (never an error the guest sees), and shown with terminal control
//! sequences stripped, so a guest cannot paint on an operator's terminal.
//! The last bytes are kept as well, for a failure's "last words".

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

use dsh_env_support::input::push_escaped;

/// Bytes at the end of a stream kept as its last words (at most the log cap):
/// room for a panic message or a traceback's last lines.
pub(crate) const LAST_WORDS_BYTES: usize = 512;

/// A capped, shared buffer for one guest stream.
#[derive(Clone, Debug)]
pub(crate) struct GuestOutput {
    captured: Arc<Mutex<Captured>>,
    cap: usize,
}

/// The first `cap` bytes written, and the last few.
#[derive(Debug, Default)]
struct Captured {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    /// Whether bytes before `tail` were dropped from it.
    tail_cut: bool,
}

impl GuestOutput {
    /// A buffer that keeps at most `cap` bytes, plus the last
    /// [`LAST_WORDS_BYTES`] (or `cap`, if smaller).
    pub(crate) fn new(cap: usize) -> Self {
        GuestOutput {
            captured: Arc::default(),
            cap,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Captured> {
        self.captured.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, bytes: &[u8]) {
        let tail_cap = self.cap.min(LAST_WORDS_BYTES);
        let mut captured = self.lock();
        let room = self.cap.saturating_sub(captured.head.len());
        captured
            .head
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
        // Only the end of a large write can stay in the tail.
        let end = &bytes[bytes.len().saturating_sub(tail_cap)..];
        captured.tail_cut |= end.len() < bytes.len();
        captured.tail.extend(end);
        let excess = captured.tail.len().saturating_sub(tail_cap);
        captured.tail_cut |= excess > 0;
        captured.tail.drain(..excess);
    }

    /// The captured text, with control sequences stripped; `None` if empty.
    pub(crate) fn text(&self) -> Option<String> {
        let text = strip_controls(&String::from_utf8_lossy(&self.lock().head));
        (!text.trim().is_empty()).then_some(text)
    }

    /// The end of what was written, control sequences stripped, starting at
    /// a line where it can, trimmed; `None` if blank. A cut first line
    /// starts with `…`.
    pub(crate) fn last_words(&self) -> Option<String> {
        let (bytes, cut) = {
            let captured = self.lock();
            let bytes: Vec<u8> = captured.tail.iter().copied().collect();
            (bytes, captured.tail_cut)
        };
        let text = strip_controls(&String::from_utf8_lossy(&bytes));
        let mut text = text.as_str();
        let mut partial = cut;
        if cut {
            // Begin at a whole line when there is one after the cut.
            if let Some((_, rest)) = text.split_once('\n')
                && !rest.trim().is_empty()
            {
                text = rest;
                partial = false;
            }
        }
        let mut text = text.trim();
        // Rust's panic hook advises a variable the sandbox never passes in.
        if let Some((before, note)) = text.rsplit_once('\n')
            && note.starts_with("note: run with `RUST_BACKTRACE=1`")
        {
            text = before.trim_end();
        }
        if text.is_empty() {
            return None;
        }
        Some(if partial {
            format!("…{text}")
        } else {
            text.to_string()
        })
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        // Always writable: output past the cap is dropped, not refused.
        Ok(64 << 10)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(bytes);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Removes ANSI escape sequences and every control character but newline and
/// tab; escapes the other characters the display rule names (format
/// characters, line and paragraph separators: see [`dsh_env_support::input::hidden_from_review`]).
pub(crate) fn strip_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                match chars.next() {
                    // CSI: `ESC [` parameters, then a final byte.
                    Some('[') => {
                        while chars
                            .next()
                            .is_some_and(|c| !('\u{40}'..='\u{7e}').contains(&c))
                        {
                        }
                    }
                    // OSC: `ESC ]` text, ended by BEL or `ESC \`.
                    Some(']') => {
                        while chars.next().is_some_and(|c| c != '\u{7}' && c != '\u{1b}') {}
                    }
                    // Any other escape is two characters long.
                    _ => {}
                }
            }
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            c => push_escaped(&mut out, c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_escapes_and_controls() {
        assert_eq!(
            strip_controls("\x1b[31mred\x1b[0m ok\x07\r\n\tx\u{9b}"),
            "red ok\n\tx"
        );
        assert_eq!(strip_controls("\x1b]0;title\x07plain"), "plain");
        assert_eq!(
            strip_controls("evil\u{202e}gnp\u{2028}x"),
            "evil\\u{202e}gnp\\u{2028}x"
        );
    }

    #[test]
    fn last_words_are_the_end_from_a_whole_line() {
        let output = GuestOutput::new(4096);
        output.push(&b"noise line\n".repeat(100));
        output.push(b"thread panicked at src/lib.rs:1:1:\n\x1b[31mboom\x1b[0m\n");
        output.push(
            b"note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n",
        );
        let words = output.last_words().unwrap();
        assert!(words.starts_with("noise line\n"), "{words:?}");
        assert!(words.ends_with("src/lib.rs:1:1:\nboom"), "{words:?}");
        assert!(words.len() <= LAST_WORDS_BYTES, "{}", words.len());
        // The log keeps the start instead.
        assert!(output.text().unwrap().starts_with("noise line\n"));

        let short = GuestOutput::new(4096);
        short.push(b"  just this \n");
        assert_eq!(short.last_words().as_deref(), Some("just this"));
        assert_eq!(GuestOutput::new(4096).last_words(), None);

        let one_line = GuestOutput::new(8);
        one_line.push(b"0123456789abcdef");
        assert_eq!(one_line.last_words().as_deref(), Some("…89abcdef"));
    }

    #[test]
    fn keeps_at_most_the_cap() {
        let output = GuestOutput::new(5);
        output.push(b"abc");
        output.push(b"defgh");
        assert_eq!(output.text().as_deref(), Some("abcde"));
        assert_eq!(GuestOutput::new(5).text(), None);
    }
}

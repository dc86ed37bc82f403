//! What a guest writes to stdout and stderr: kept up to a cap, the rest
//! dropped (never an error the guest sees), and shown with terminal control
//! sequences stripped, so a guest cannot paint on an operator's terminal.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// A capped, shared buffer for one guest stream.
#[derive(Clone, Debug)]
pub(crate) struct GuestOutput {
    buffer: Arc<Mutex<Vec<u8>>>,
    cap: usize,
}

impl GuestOutput {
    /// A buffer that keeps at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> Self {
        GuestOutput {
            buffer: Arc::default(),
            cap,
        }
    }

    fn push(&self, bytes: &[u8]) {
        let mut buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
        let room = self.cap.saturating_sub(buffer.len());
        buffer.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The captured text, with control sequences stripped; `None` if empty.
    pub(crate) fn text(&self) -> Option<String> {
        let buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
        let text = strip_controls(&String::from_utf8_lossy(&buffer));
        (!text.trim().is_empty()).then_some(text)
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

/// Removes ANSI escape sequences and every control character but newline and tab.
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
            c => out.push(c),
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

//! Compile progress on a terminal: one line per compiled component, saying
//! which, how large and how long it took, and while compiles run a status
//! line that is rewritten in place (as cargo's is). Nothing when stderr is
//! not a terminal, so pipes and logs stay clean. No escape sequences (a
//! carriage return and spaces redraw the status line), so `NO_COLOR`
//! terminals and logs that keep raw bytes see plain text.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_env::CompileProgress;
use dsh_env_support::input::escape_controls;

use crate::output::size;

/// The status line is cut to this many characters, so it never wraps on a
/// usual terminal (clearing it clears one row only).
const STATUS_WIDTH: usize = 78;

/// [`CompileProgress`] for the CLI: writes to stderr, which is a terminal.
pub(crate) struct TerminalProgress {
    state: Mutex<State>,
    /// Whether to draw the status line: not when log lines (`-v`) could
    /// land on it.
    status: bool,
}

/// What is on the terminal now.
#[derive(Default)]
struct State {
    /// The components being compiled, as shown, in the order they began.
    running: Vec<String>,
    /// The characters of the status line now shown (0: none).
    drawn: usize,
}

impl TerminalProgress {
    /// Progress for stderr, if stderr is a terminal.
    pub(crate) fn for_stderr() -> Option<Arc<TerminalProgress>> {
        std::io::stderr().is_terminal().then(|| {
            Arc::new(TerminalProgress {
                state: Mutex::default(),
                status: !tracing::enabled!(tracing::Level::INFO),
            })
        })
    }

    /// Replaces the status line with one naming what is compiling now (none
    /// when nothing is), with `line` (a finished compile) above it.
    fn redraw(&self, state: &mut State, line: Option<String>) {
        let mut text = String::new();
        if state.drawn > 0 {
            text = format!("\r{:width$}\r", "", width = state.drawn);
            state.drawn = 0;
        }
        if let Some(line) = line {
            text.push_str(&line);
            text.push('\n');
        }
        if let Some(last) = state.running.last().filter(|_| self.status) {
            let more = match state.running.len() - 1 {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            let status: String =
                cut(&format!("dsh-env: compiling {last}{more}…"), STATUS_WIDTH).collect();
            state.drawn = status.chars().count();
            text.push_str(&status);
        }
        // Progress is best effort: a closed stderr must not fail a load.
        let mut stderr = std::io::stderr().lock();
        let _ = stderr.write_all(text.as_bytes());
        let _ = stderr.flush();
    }
}

impl CompileProgress for TerminalProgress {
    fn started(&self, origin: &str, _bytes: u64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.running.push(escape_controls(origin).into_owned());
        self.redraw(&mut state, None);
    }

    fn finished(&self, origin: &str, bytes: u64, elapsed: Duration, ok: bool) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let shown = escape_controls(origin).into_owned();
        if let Some(at) = state.running.iter().position(|name| *name == shown) {
            state.running.remove(at);
        }
        let (size, time) = (size(bytes), seconds(elapsed));
        let line = if ok {
            format!("dsh-env: compiled {shown} ({size}) in {time}")
        } else {
            format!("dsh-env: compiling {shown} ({size}) failed after {time}")
        };
        self.redraw(&mut state, Some(line));
    }
}

/// The first `width` characters of `text`, with `…` when it was longer.
fn cut(text: &str, width: usize) -> impl Iterator<Item = char> + '_ {
    let long = text.chars().count() > width;
    let kept = if long { width - 1 } else { width };
    text.chars().take(kept).chain(long.then_some('…'))
}

/// `elapsed` as milliseconds under a second, else seconds to a tenth.
fn seconds(elapsed: Duration) -> String {
    if elapsed < Duration::from_secs(1) {
        format!("{} ms", elapsed.as_millis())
    } else {
        format!("{:.1} s", elapsed.as_secs_f64())
    }
}

//! An agent harness around [`dsh_env`]: what a coding agent needs beside the
//! overlay to run shell commands with it.
//!
//! - [`executor`]: spawns a command with exactly the promised environment.
//! - [`tool`]: the model-facing bash tool; a model's arguments never reach
//!   the `DSH_*` namespace.
//! - [`session`]: sessions and their JSONL files (resume, fork, spawn).
//! - [`hooks`]: Claude Code and Codex style hook commands.
//! - [`host`]: what every front end does with a registry, once: open it from
//!   one configuration, collect, explain, and run a bash call whole.
//! - [`agent`]: the loop that ties a model, the tool, hooks and a session.

#![deny(missing_docs)]

pub mod agent;
pub mod executor;
pub mod hooks;
pub mod host;
mod preparer;
pub mod session;
pub mod tool;

/// The README's Rust examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

pub use executor::{
    BackgroundHandle, ExecError, ExecOutput, ExecReport, LocalExecutor, MAX_TIMEOUT,
    ShellExecRequest, ShellExecutor, TimeoutError, TimeoutUnit, checked_timeout,
};

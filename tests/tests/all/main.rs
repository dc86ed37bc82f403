//! Every black-box test that can share a process, in one binary (the
//! pattern of wasmtime's `tests/all`): linking wasmtime once, and sharing
//! one [`dsh_env::SharedEngine`] (see `dsh_env_tests::registry`).
//!
//! Two suites keep binaries of their own, for the process they need alone:
//! `leak.rs` measures the whole process (RSS, threads, descriptors) and
//! lowers `RLIMIT_NOFILE`; `full_loop.rs` sets a process environment
//! variable, which is unsound while other tests' threads read it.

mod bash_tool;
mod cache;
mod contract;
mod embedder;
mod executions;
mod executor;
mod fuzz;
mod grants;
mod hooks;
mod hostile;
mod polyglot;
mod prepared;
mod recorder;
mod registry;
mod rounds;
mod tiering;
mod traces;
mod trust;

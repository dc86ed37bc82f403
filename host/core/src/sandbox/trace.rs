//! What one call showed of itself, for `explain`: the end of what the guest
//! wrote to stderr, whether it asked for the filesystem or its environment
//! and found them empty, and how many epoch ticks it met.
//!
//! Imports say nothing here (every Rust and Python guest imports
//! `wasi:filesystem/preopens`), so the host notes the calls instead: it
//! shadows `get-directories` and `get-environment`, which a guest's libc
//! makes the first time it opens a path or reads a variable.

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::cli::WasiCliView;
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::cli::environment;
use wasmtime_wasi::p2::bindings::filesystem::preopens;

/// A store's state as this module sees it: WASI's filesystem and cli views
/// and a place to note what was sought. (The guest's state implements it, so
/// this module needs nothing from the one that builds that state.)
pub(super) trait SoughtHost: WasiFilesystemView + WasiCliView + Send + 'static {
    /// Where the call's findings are noted.
    fn sought(&mut self) -> &mut Sought;
}

/// The interfaces whose getters are noted; guests importing any 0.2.x
/// version link to them.
const PREOPENS: &str = "wasi:filesystem/preopens@0.2.12";
const ENVIRONMENT: &str = "wasi:cli/environment@0.2.12";

/// What a `resolve` call showed of itself (see [`crate::CollectOptions::traced`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CallTrace {
    /// The end of what the guest wrote to stderr during the call, control
    /// sequences stripped (at most 512 bytes); `None` if it wrote nothing.
    pub stderr_tail: Option<String>,
    /// It asked for its preopened directories (to open a path) and was
    /// given none.
    pub found_no_directories: bool,
    /// It asked for its environment (to read a variable) and found it empty.
    pub found_no_environment: bool,
    /// The epoch ticks (5 ms apart) its code met during the call, as the engine counted them (ticks that passed
    /// while it waited in one host call count as one): the count that
    /// decides when it yields and when it traps.
    pub epoch_ticks: u64,
}

/// What a guest asked for and found empty, noted as it happens.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sought {
    pub(super) directories: bool,
    pub(super) environment: bool,
}

/// Replaces wasmtime-wasi's `get-directories` and `get-environment` in
/// `linker` with the same getters that also note an empty answer.
pub(super) fn add_to_linker<T: SoughtHost>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let defined = define(linker);
    linker.allow_shadowing(false);
    defined
}

fn define<T: SoughtHost>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.instance(PREOPENS)?.func_wrap(
        "get-directories",
        |mut store: StoreContextMut<'_, T>, (): ()| {
            let state = store.data_mut();
            let directories: Vec<(Resource<Descriptor>, String)> =
                preopens::Host::get_directories(&mut state.filesystem())?;
            state.sought().directories |= directories.is_empty();
            Ok((directories,))
        },
    )?;
    linker.instance(ENVIRONMENT)?.func_wrap(
        "get-environment",
        |mut store: StoreContextMut<'_, T>, (): ()| {
            let state = store.data_mut();
            let variables = environment::Host::get_environment(&mut state.cli())?;
            state.sought().environment |= variables.is_empty();
            Ok((variables,))
        },
    )?;
    Ok(())
}

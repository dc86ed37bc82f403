//! `dsh-env bindgen c` and `dsh-env componentize`: what a C contributor's
//! build needs beyond clang, from the contract embedded in this binary (the
//! code is `dsh-env-authoring`'s, which also builds the repository's examples).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use dsh_env_authoring::Contract;
use dsh_env_support::atomic_file;
use dsh_env_support::input::{MAX_COMPONENT_BYTES, escape_controls, read_regular_file};

use crate::failure::{CliResult, Failure};

/// The languages `bindgen` writes bindings for.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum BindingsLang {
    /// `contributor.h`, `contributor.c` and `contributor_component_type.o`
    /// (wit-bindgen's C generator).
    C,
}

/// The arguments of `bindgen`.
#[derive(clap::Args)]
pub(crate) struct BindgenArgs {
    /// The language.
    #[arg(value_enum)]
    lang: BindingsLang,
    /// The directory to write them into (created if missing; files in it
    /// with the same names are replaced).
    out_dir: PathBuf,
}

/// The arguments of `componentize`.
#[derive(clap::Args)]
pub(crate) struct ComponentizeArgs {
    /// The core WebAssembly module, e.g. from clang for wasm32-wasi.
    module: PathBuf,
    /// Where to write the component (replaced whole, never half written).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
}

/// The frozen contract this binary carries.
fn contract() -> CliResult<Contract> {
    // It is embedded and tested: a failure here is a broken build.
    Contract::frozen().map_err(Failure::runtime)
}

/// Writes `path` whole; a new file is readable by all (0644), as a
/// compiler's output is, not private as a temporary file starts.
fn write_output(path: &Path, contents: Vec<u8>) -> std::io::Result<()> {
    let existed = path.exists();
    atomic_file::write(path, contents)?;
    if !existed {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

/// Writes the bindings and prints each file's path.
pub(crate) fn bindgen(BindgenArgs { lang, out_dir }: BindgenArgs) -> CliResult<ExitCode> {
    let BindingsLang::C = lang;
    let files = contract()?.c_bindings().map_err(Failure::runtime)?;
    let shown = |path: &Path| escape_controls(&path.display().to_string()).into_owned();
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| Failure::config(format!("cannot create {}: {e}", shown(&out_dir))))?;
    for (name, contents) in files {
        let path = out_dir.join(name);
        write_output(&path, contents)
            .map_err(|e| Failure::runtime(format!("cannot write {}: {e}", shown(&path))))?;
        println!("{}", shown(&path));
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the component; exit 1 when the module cannot be one.
pub(crate) fn componentize(
    ComponentizeArgs { module, output }: ComponentizeArgs,
) -> CliResult<ExitCode> {
    let bytes = read_regular_file(&module, MAX_COMPONENT_BYTES)
        .map_err(|e| Failure::config(format!("cannot read module {e}")))?;
    let shown = escape_controls(&module.display().to_string()).into_owned();
    let component = contract()?
        .componentize(&bytes)
        .map_err(|e| Failure::runtime(format!("{shown}: {e}")))?;
    write_output(&output, component).map_err(|e| {
        let output = escape_controls(&output.display().to_string()).into_owned();
        Failure::runtime(format!("cannot write {output}: {e}"))
    })?;
    Ok(ExitCode::SUCCESS)
}

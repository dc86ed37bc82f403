//! `dsh-env-compile`: compiles one untrusted component under the limits it is
//! given, in its own process, for the `dsh-env` library (see
//! `dsh_env::compile`).

fn main() -> std::process::ExitCode {
    dsh_env::compile::helper_main()
}

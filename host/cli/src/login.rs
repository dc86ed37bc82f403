//! `dsh-env login REGISTRY --username U --password-stdin`: check a
//! registry's credentials and store them where the container tools read
//! them (a Docker `config.json`, or its credential helper), for `push`,
//! `add` and `pull`.
//!
//! The password is read from stdin only: never from an argument, which any
//! user of the machine can read in the process list.

use std::process::ExitCode;

use dsh_env_oci::Credential;
use dsh_env_support::input::{escape_controls, read_capped, utf8};

use crate::failure::{CliResult, Failure};
use crate::network::NetworkArgs;

/// The longest password read from stdin.
const MAX_PASSWORD_BYTES: u64 = 4 << 10;

/// The arguments of `login`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The registry: `host` or `host:port` (as in its references).
    registry: String,
    /// The username.
    #[arg(long, short = 'u')]
    username: String,
    /// Read the password (or token) from stdin; the only way to give one.
    #[arg(long, required = true)]
    password_stdin: bool,
    #[command(flatten)]
    network: NetworkArgs,
}

/// Checks the credential against the registry, then stores it.
pub(crate) async fn run(args: Args) -> CliResult<ExitCode> {
    let registry = args
        .registry
        .strip_prefix("oci://")
        .unwrap_or(&args.registry)
        .trim_end_matches('/')
        .to_string();
    let shown = escape_controls(&registry).into_owned();
    let mut password = read_capped(std::io::stdin().lock(), MAX_PASSWORD_BYTES)
        .and_then(utf8)
        .map_err(|e| Failure::config(format!("the password on stdin {e}")))?;
    // `echo secret | dsh-env login` ends it with a line break, not part of it.
    let kept = password.trim_end_matches(['\n', '\r']).len();
    password.truncate(kept);
    if password.is_empty() || args.username.is_empty() {
        return Err(Failure::config("login needs a username and a password"));
    }
    let credential = Credential {
        username: args.username.clone(),
        secret: password,
        source: "--password-stdin".into(),
    };
    // Held from here on: whatever the registry answers, no line shows it.
    dsh_env_oci::secrets::hold_credential(&credential);
    let options = dsh_env_oci::Options {
        credential: Some(credential.clone()),
        ..args.network.anonymous()
    };
    dsh_env_oci::check_login(&registry, &options)
        .await
        .map_err(|e| Failure::config(format!("login to {shown}: {e}")))?;
    let stored = (args.network.auth_files())
        .store(&registry, &credential)
        .map_err(|e| Failure::config(format!("login to {shown}: {e}")))?;
    println!(
        "Login succeeded: the credentials of `{}` for {shown} are in {}",
        escape_controls(&args.username),
        escape_controls(&stored)
    );
    Ok(ExitCode::SUCCESS)
}

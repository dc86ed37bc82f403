//! How `add`, `pull`, `push` and `login` reach a registry: `--plain-http`,
//! the deadline of the whole pull or push, and the stored credential.

use std::time::Duration;

use dsh_env::OciReference;
use dsh_env_oci::AuthFiles;

use crate::failure::{CliResult, Failure};

/// The variable that sets the network deadline when the flag is not given.
pub(crate) const NETWORK_TIMEOUT_VAR: &str = "DSH_ENV_NETWORK_TIMEOUT_SECS";

/// `--plain-http` and `--network-timeout-secs`.
#[derive(clap::Args)]
pub(crate) struct NetworkArgs {
    /// Speak plain HTTP to a registry that is not loopback (loopback
    /// registries get plain HTTP anyway). It covers that registry's host
    /// only: a redirect elsewhere must be HTTPS or loopback.
    #[arg(long)]
    plain_http: bool,
    /// Give up when the whole pull or push (every request, the token's too)
    /// takes longer than this many seconds, 1 to 86400.
    #[arg(
        long,
        value_name = "SECS",
        env = NETWORK_TIMEOUT_VAR,
        default_value_t = dsh_env_oci::DEFAULT_DEADLINE.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=86_400),
    )]
    network_timeout_secs: u64,
}

impl NetworkArgs {
    /// The options these flags ask for, with no credential.
    pub(crate) fn anonymous(&self) -> dsh_env_oci::Options {
        dsh_env_oci::Options {
            plain_http: self.plain_http,
            deadline: Duration::from_secs(self.network_timeout_secs),
            ..dsh_env_oci::Options::default()
        }
    }

    /// The options these flags ask for, with the credential stored for
    /// `reference`'s registry where the container tools keep them (see
    /// `dsh_env_oci::AuthFiles::from_env`), if there is one.
    pub(crate) fn options(&self, reference: &OciReference) -> CliResult<dsh_env_oci::Options> {
        let credential = (AuthFiles::from_env().credential(reference.registry()))
            .map_err(|e| Failure::config(format!("{reference}: {e}")))?;
        Ok(dsh_env_oci::Options {
            credential,
            ..self.anonymous()
        })
    }
}

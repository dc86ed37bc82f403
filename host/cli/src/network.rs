//! How `add`, `pull`, `push` and `login` reach a registry: `--plain-http`,
//! the deadline of the whole pull or push, and the stored credential (whose
//! credential helper gets no longer than that deadline either).

use std::time::Duration;

use dsh_env_oci::AuthFiles;
use dsh_env_oci::auth::HELPER_TIMEOUT;
use dsh_env_store::OciReference;

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
    /// takes longer than this many seconds, 1 to 86400; a credential helper
    /// is killed past it too, if it is under the helper's 30 s.
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
            deadline: self.deadline(),
            ..dsh_env_oci::Options::default()
        }
    }

    fn deadline(&self) -> Duration {
        Duration::from_secs(self.network_timeout_secs)
    }

    /// The auth files the container tools read (see
    /// `dsh_env_oci::AuthFiles::from_env`), their credential helpers given
    /// the network deadline when it is the shorter.
    pub(crate) fn auth_files(&self) -> AuthFiles {
        AuthFiles {
            helper_timeout: HELPER_TIMEOUT.min(self.deadline()),
            ..AuthFiles::from_env()
        }
    }

    /// The options these flags ask for, with the credential stored for
    /// `reference`'s registry in the [`NetworkArgs::auth_files`], if any.
    pub(crate) fn options(&self, reference: &OciReference) -> CliResult<dsh_env_oci::Options> {
        let credential = (self.auth_files().credential(reference.registry()))
            .map_err(|e| Failure::config(format!("{reference}: {e}")))?;
        Ok(dsh_env_oci::Options {
            credential,
            ..self.anonymous()
        })
    }
}

//! How `add`, `pull` and `push` reach a registry: `--plain-http` and the deadline
//! of the whole pull or push.

use std::time::Duration;

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
    /// The options these flags ask for.
    pub(crate) fn options(&self) -> dsh_env_oci::Options {
        dsh_env_oci::Options {
            plain_http: self.plain_http,
            deadline: Duration::from_secs(self.network_timeout_secs),
            ..dsh_env_oci::Options::default()
        }
    }
}

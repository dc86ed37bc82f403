//! `dsh-env-artifacts`: prints where the example contributors are. Building
//! it runs the crate's build script, which builds every guest: `scripts/demo`
//! builds this binary and the CLI's, and not the test crates.

fn main() {
    for path in [
        dsh_env_artifacts::AGENT_LINEAGE,
        dsh_env_artifacts::CALL_TRACE,
        dsh_env_artifacts::GIT_CONTEXT,
        dsh_env_artifacts::SESSION_URL,
        dsh_env_artifacts::CALL_CONTEXT,
        dsh_env_artifacts::WORKSPACE_ID,
    ] {
        println!("{path}");
    }
}

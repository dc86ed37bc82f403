//! `dsh-env man <dir>` (hidden: for packagers, `scripts/release-archive`):
//! the man pages, made by clap_mangen from the same clap definitions as
//! `--help`, so they cannot drift from the binary.

use std::path::Path;

/// Writes `dsh-env.1` and a `dsh-env-<command>.1` per subcommand of
/// `command` (main hands it in) into `dir`, creating it if absent.
pub(crate) fn write(dir: &Path, command: clap::Command) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(command, dir)
}

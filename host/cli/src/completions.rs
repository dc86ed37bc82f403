//! `dsh-env completions <shell>`: clap_complete's scripts, with its bash
//! script mended for a hyphenated binary name.

use std::io::Write;

/// The script for `shell`, as clap_complete writes it for `dsh-env`'s
/// `command` (main hands it in: this module stays below the CLI's root).
fn script(shell: clap_complete::Shell, mut command: clap::Command) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "dsh-env", &mut script);
    if shell != clap_complete::Shell::Bash {
        return script;
    }
    // clap_complete 4.6 names each subcommand's state from the binary name
    // with `-` made `__` (`dsh__env__subcmd__new`), but labels its cases
    // with `-` made `__subcmd__` (`dsh__subcmd__env__subcmd__new`): no case
    // ever matched, so nothing completed after the subcommand.
    String::from_utf8_lossy(&script)
        .replace("dsh__subcmd__env", "dsh__env")
        .into_bytes()
}

/// Prints the script for `shell` and `command`.
pub(crate) fn print(shell: clap_complete::Shell, command: clap::Command) -> std::io::Result<()> {
    std::io::stdout().write_all(&script(shell, command))
}

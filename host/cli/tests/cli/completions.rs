//! `dsh-env completions`, driven by a real bash.

use super::*;

/// What bash's completion offers for the words typed so far (the last one
/// being completed), through the script `dsh-env completions bash` prints,
/// sourced into a real bash.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let script = Command::new(BINARY)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(script.status.success());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dsh-env.bash");
    std::fs::write(&path, &script.stdout).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let driver = format!(
        "source {path:?}\nCOMP_WORDS=({words})\nCOMP_CWORD={cword}\n\
         _dsh__env dsh-env '{cur}' '{prev}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        words = quoted.join(" "),
        cword = words.len() - 1,
        cur = words[words.len() - 1],
        prev = words[words.len() - 2],
    );
    let output = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &driver])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output).lines().map(str::to_string).collect()
}

#[test]
fn bash_completes_after_the_subcommand() {
    let langs = bash_completes(&["dsh-env", "new", "x", "--lang", ""]);
    for lang in ["rust", "python", "js", "c"] {
        assert!(langs.iter().any(|l| l == lang), "--lang offers {langs:?}");
    }
    let flags = bash_completes(&["dsh-env", "resolve", "--ma"]);
    assert_eq!(flags, ["--manifest"]);
    let commands = bash_completes(&["dsh-env", "exp"]);
    assert_eq!(commands, ["explain"]);
}

#[test]
fn completions_are_printed_for_each_shell() {
    for (shell, marker) in [
        ("bash", "_dsh__env()"),
        ("zsh", "#compdef dsh-env"),
        ("fish", "complete -c dsh-env"),
    ] {
        let output = Command::new(BINARY)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(output.status.success(), "{shell}");
        let script = stdout(&output);
        assert!(
            script.contains(marker),
            "{shell}: {}",
            &script[..script.len().min(200)]
        );
        assert!(script.contains("explain"), "{shell}");
    }
    let output = Command::new(BINARY)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

//! `dsh-env demo`.

use super::*;

#[test]
fn the_demo_shows_both_shells_and_whole_hook_lines_from_both_agents() {
    let f = Fixture::new();
    let manifest = f.path("manifest.toml");
    // The demo's home is one directory under the temporary directory,
    // replaced by each run rather than left beside the last.
    let tmp = f.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let demo = || {
        f.run(
            &["demo", "--manifest", manifest.to_str().unwrap()],
            &[("TMPDIR", tmp.to_str().unwrap())],
        )
    };
    assert!(demo().status.success());
    let output = demo();
    assert!(output.status.success(), "{}", stderr(&output));
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["dsh-env-demo"], "two runs leave one home");
    let text = stdout(&output);
    let row = |key: &str| -> Vec<String> {
        let line = text.lines().find(|l| l.starts_with(key));
        let line = line.unwrap_or_else(|| panic!("no {key} row: {text}"));
        line.split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect()
    };
    // The child's parent is the parent's session.
    let sessions = row("DSH_SESSION_ID");
    assert_eq!(
        row("DSH_PARENT_SESSION_ID"),
        ["(absent)", &sessions[0]],
        "{text}"
    );
    // Both agents' SessionStart and PreToolUse hooks ran at once; each line
    // is whole: the hook's DSH_SESSION_ID, then the payload naming the same
    // session.
    let hooks: Vec<&str> = (text.lines())
        .skip_while(|l| !l.starts_with("What the hooks received"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(hooks.len(), 4, "{text}");
    for line in hooks {
        let (session, payload) = line.trim().split_once(' ').unwrap();
        let payload: serde_json::Value =
            serde_json::from_str(payload).unwrap_or_else(|e| panic!("{e}: a broken line: {line}"));
        assert_eq!(payload["session_id"], session, "{line}");
        assert!(sessions.iter().any(|s| s == session), "{line}");
    }
}

//! The reference harness's execution shape through the Rust API: the
//! fixtures its own types make (`tests/fixtures/executions/`, checked against
//! them by the Node tests), parsed by `ToolExecution::from_json` and
//! collected, give what the CLI, `serve` and the addon give for them.

use dsh_env::{CollectOptions, LoadFrom, LoadOptions};
use dsh_env::{Mode, ToolExecution};
use dsh_env_tests::{artifacts, puppet, registry};

/// A fixture, parsed, with the fields it did not know.
fn fixture(name: &str) -> (ToolExecution, Vec<String>) {
    let path = format!(
        "{}/fixtures/executions/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    ToolExecution::from_json_noting_unknown(&text).unwrap()
}

/// A fixture's name, its mode, and facts its overlay must hold.
type Case = (&'static str, Mode, &'static [(&'static str, &'static str)]);

#[tokio::test]
async fn the_reference_fixtures_give_the_facts_they_carry() {
    let registry = registry();
    let lineage = registry
        .load(
            LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap();
    let _lineage = registry.register(lineage).await.unwrap();
    let shape = puppet(
        &registry,
        &[
            ("name", "shape"),
            ("keys", "DSH_MODE=the mode|DSH_CWD=the cwd"),
            ("pairs", "DSH_MODE={mode}|DSH_CWD={cwd}"),
        ],
    );
    let _shape = registry.register(shape).await.unwrap();
    let cases: [Case; 3] = [
        (
            "top-level",
            Mode::Foreground,
            &[
                ("DSH_SESSION_ID", "sess-parent"),
                ("DSH_AGENT_DEPTH", "0"),
                ("DSH_CWD", "/tmp"),
            ],
        ),
        (
            "child",
            Mode::Background,
            &[
                ("DSH_SESSION_ID", "sess-child"),
                ("DSH_PARENT_SESSION_ID", "sess-parent"),
                ("DSH_AGENT_DEPTH", "1"),
                ("DSH_CWD", "/tmp"),
            ],
        ),
        // A contract 0.2 guest sees the absent cwd as absent (the puppet
        // shows `none`).
        (
            "no-cwd",
            Mode::Foreground,
            &[
                ("DSH_SESSION_ID", "sess-nowhere"),
                ("DSH_AGENT_DEPTH", "0"),
                ("DSH_CWD", "none"),
            ],
        ),
    ];
    for (name, mode, facts) in cases {
        let (execution, unknown) = fixture(name);
        assert!(unknown.is_empty(), "{name}: {unknown:?}");
        assert_eq!(execution.mode, mode, "{name}");
        let overlay = registry
            .collect(&execution, &CollectOptions::new())
            .await
            .unwrap()
            .overlay;
        for (key, value) in facts {
            assert_eq!(overlay.get(key), Some(*value), "{name}: {key}");
        }
        let parent = overlay.get("DSH_PARENT_SESSION_ID");
        assert_eq!(parent.is_some(), name == "child", "{name}: {parent:?}");
    }
}

//! Grants, through the manifest: nothing by default; host env variables by
//! name; the agent's cwd read-only, with no way out of it.

use std::path::Path;

use dsh_env::CollectOptions;
use dsh_env::{Agent, ContributorSpec, Culprit, Manifest, Overlay, Registry, ToolExecution};
use dsh_env_tests::{artifacts, registry};

fn call_in(cwd: &Path) -> ToolExecution {
    ToolExecution::new("c1", "bash").with_agent(Agent {
        session_id: "s".into(),
        cwd: Some(cwd.display().to_string()),
        parent_session_id: None,
        depth: 0,
    })
}

/// Registers the contributors of a manifest written from `text`.
async fn with_manifest(registry: &Registry, text: &str) -> Vec<dsh_env::Registration> {
    let manifest = Manifest::parse(text, "grants.toml", std::env::temp_dir()).unwrap();
    registry
        .register_manifest(&manifest, &dsh_env::HostEnv::from_process())
        .await
        .unwrap()
}

/// A puppet that runs `probe` and reports it as DSH_OUT, with `grants` (TOML lines).
async fn probe(probe: &str, grants: &str, cwd: &Path) -> Result<Overlay, String> {
    let registry = registry();
    let text = format!(
        "[[contributor]]\npath = {:?}\n[contributor.config]\nname = \"probe\"\nkeys = \"DSH_OUT=o\"\nresolve = {probe:?}\n[contributor.grants]\n{grants}\n",
        artifacts::PUPPET
    );
    let _r = with_manifest(&registry, &text).await;
    // On an instance made ahead of the call, as the bash tool runs it (a cwd
    // grant makes it instantiate at the call instead).
    registry.prepare().await;
    registry
        .collect(&call_in(cwd), &CollectOptions::new())
        .await
        .map(|collection| collection.overlay)
        .map_err(|e| e.to_string())
}

fn repository(head: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    std::fs::write(dir.path().join(".git/HEAD"), head).unwrap();
    dir
}

async fn branch(grants: &str, execution: &ToolExecution) -> Option<String> {
    let registry = registry();
    let text = format!(
        "[[contributor]]\npath = {:?}\n[contributor.grants]\n{grants}\n",
        artifacts::GIT_CONTEXT
    );
    let _r = with_manifest(&registry, &text).await;
    registry.prepare().await;
    // With the cwd grant, its WASI context depends on the execution, so it is
    // instantiated at the call.
    let granted = grants.contains("cwd");
    assert_eq!(registry.prepared(), usize::from(!granted));
    // Nothing is left to make ahead either way: a cwd-granted instance never is.
    assert!(registry.is_prepared());
    let overlay = registry
        .collect(execution, &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    overlay.get("DSH_GIT_BRANCH").map(str::to_string)
}

#[tokio::test]
async fn git_context_reads_the_branch_only_with_the_cwd_grant() {
    let repo = repository("ref: refs/heads/feature/x\n");
    assert_eq!(
        branch("cwd = \"read\"", &call_in(repo.path()))
            .await
            .as_deref(),
        Some("feature/x")
    );
    assert_eq!(
        branch("", &call_in(repo.path())).await,
        None,
        "no grant, no files"
    );
    let detached = repository("4b825dc642cb6eb9a060e54bf8d69288fbee4904\n");
    assert_eq!(
        branch("cwd = \"read\"", &call_in(detached.path())).await,
        None
    );
    let plain = tempfile::tempdir().unwrap();
    assert_eq!(
        branch("cwd = \"read\"", &call_in(plain.path())).await,
        None,
        "no repository"
    );
    assert_eq!(
        branch("cwd = \"read\"", &ToolExecution::new("c", "bash")).await,
        None,
        "no agent"
    );
}

#[tokio::test]
async fn the_cwd_grant_is_read_only_and_cannot_be_escaped() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "top secret").unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("visible"), "fine").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), cwd.path().join("link")).unwrap();
    let inside = |name: &str| format!("{}/{name}", cwd.path().display());
    let grant = "cwd = \"read\"";

    let read = probe(&format!("read:{}", inside("visible")), grant, cwd.path())
        .await
        .unwrap();
    assert_eq!(read.get("DSH_OUT"), Some("fine"));
    let listed = probe(&format!("list:{}", cwd.path().display()), grant, cwd.path())
        .await
        .unwrap();
    let mut names: Vec<&str> = listed.get("DSH_OUT").unwrap().split(',').collect();
    names.sort();
    assert_eq!(names, ["link", "visible"]);

    let escapes = [
        format!("read:{}", inside("link")),
        format!("read:{}", inside("../secret")),
        format!("read:{}/secret", outside.path().display()),
        format!("write:{}", inside("new-file")),
        format!("write:{}", inside("visible")),
    ];
    for escape in escapes {
        let err = probe(&escape, grant, cwd.path()).await.unwrap_err();
        assert!(
            err.contains("failed in resolve: guest error"),
            "{escape}: {err}"
        );
        assert!(!err.contains("top secret"), "{escape}: {err}");
    }
    assert!(!cwd.path().join("new-file").exists());
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("visible")).unwrap(),
        "fine"
    );
}

#[tokio::test]
async fn env_grants_copy_only_the_named_host_variables() {
    let home = std::env::var("HOME").expect("the test process has HOME");
    let cwd = tempfile::tempdir().unwrap();
    let granted = probe(
        "env",
        "env = [\"HOME\", \"GRANT_TEST_UNSET_VARIABLE\"]",
        cwd.path(),
    )
    .await
    .unwrap();
    assert_eq!(
        granted.get("DSH_OUT"),
        Some(format!("HOME={home}").as_str())
    );
    let none = probe("env", "", cwd.path()).await.unwrap();
    assert_eq!(none.get("DSH_OUT"), Some(""));
}

#[tokio::test]
async fn grants_config_is_served_and_may_not_repeat_a_config_key() {
    let registry = registry();
    let text = format!(
        "[[contributor]]\npath = {:?}\n[contributor.config]\nname = \"cfg\"\nkeys = \"DSH_OUT=o\"\n[contributor.grants.config]\npairs = \"DSH_OUT=from-grants\"\n",
        artifacts::PUPPET
    );
    let _r = with_manifest(&registry, &text).await;
    let overlay = registry
        .collect(&ToolExecution::new("c", "bash"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_OUT"), Some("from-grants"));

    let clash = format!(
        "[[contributor]]\npath = {:?}\n[contributor.config]\nname = \"a\"\n[contributor.grants.config]\nname = \"b\"\n",
        artifacts::PUPPET
    );
    let err = Manifest::parse(&clash, "clash.toml", std::env::temp_dir()).unwrap_err();
    assert!(
        err.to_string()
            .contains("config key `name` is set in both config and grants.config"),
        "{err}"
    );
}

/// A component described in code, not by an entry, with an env grant of a
/// `DSH_*` name: refused at registration, naming it and the name, before it
/// runs at all; the host's own `DSH_*` values are an outer call's.
#[tokio::test]
async fn a_managed_env_grant_is_refused_at_registration_however_it_was_described() {
    let registry = registry();
    let mut spec = ContributorSpec::file(artifacts::PUPPET);
    spec.config = [
        ("name", "stale"),
        ("keys", "DSH_STALE=s"),
        ("resolve", "env"),
    ]
    .map(|(key, value)| (key.to_string(), value.to_string()))
    .into();
    spec.grants.env = vec![
        ("PATH".into(), "/bin".into()),
        ("dsh_home".into(), "/outer/home".into()),
    ];
    let Err(err) = registry.register_spec(&spec).await else {
        panic!("a DSH_* env grant was registered");
    };
    assert_eq!(
        err.to_string(),
        format!(
            "contributor {}: grants.env names `dsh_home`: a DSH_* value is set by dsh-env for \
             each call, never copied from the host's environment into a guest",
            artifacts::PUPPET
        )
    );
    let culprit = Culprit::from(&err);
    assert_eq!(culprit.contributor.as_deref(), Some(artifacts::PUPPET));
    assert_eq!(culprit.key.as_deref(), Some("dsh_home"));
    assert!(registry.contributors().is_empty());
}

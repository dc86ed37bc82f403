//! The host binds each contract version it supports and serves every
//! component through the bindings of the version it targets. The test-only
//! version `dsh:env@0.2.0-test` (bound under dsh-env's `test-contract`
//! feature) has one more field in `execution`: its guest `contract-test`
//! returns that field, so only its own bindings can give the right values.

use dsh_env::Grants;
use dsh_env::{Agent, ContributorComponent, Registry, ToolExecution};
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};
use dsh_env_tests::{agent_call, agent_call_in, artifacts, echo, load_error, puppet, registry};

/// The component at `path`, which imports `dsh:env/types@{version}`.
fn load_targeting(registry: &Registry, path: &str, version: &str) -> ContributorComponent {
    let component = registry
        .load(LoadFrom::File(path.as_ref()), &LoadOptions::new())
        .unwrap();
    let types = format!("dsh:env/types@{version}");
    let imports = component.imports();
    assert!(imports.contains(&types), "{types} not in {imports:?}");
    component
}

/// What `contract-test` returns for `execution`.
async fn resolved(registry: &Registry, execution: &ToolExecution) -> (String, String) {
    let overlay = registry
        .collect(execution, &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    let value = |key| overlay.get(key).unwrap_or("<absent>").to_string();
    (value("DSH_CONTRACT_NESTED"), value("DSH_CONTRACT_TOOL"))
}

#[tokio::test]
async fn a_guest_of_another_version_declares_and_resolves_through_its_own_bindings() {
    let registry = registry();
    let component = load_targeting(&registry, artifacts::CONTRACT_TEST, "0.2.0-test");
    let registration = registry.register(component.clone()).await.unwrap();
    assert_eq!(registration.name(), "contract-test");
    let keys: Vec<_> = registry.list().into_iter().map(|row| row.key).collect();
    assert!(keys.iter().any(|k| k.as_str() == "DSH_CONTRACT_NESTED"));

    let plain = agent_call("c1", "s1");
    let mut nested = ToolExecution::new("c2", "python");
    nested.root_call_id = "c1".into();
    assert_eq!(
        resolved(&registry, &plain).await,
        ("no".into(), "bash".into())
    );
    assert_eq!(
        resolved(&registry, &nested).await,
        ("yes".into(), "python".into())
    );

    // An instance made ahead of the call, through the same bindings.
    registry.prepare().await;
    assert_eq!(registry.prepared(), 1);
    assert_eq!(
        resolved(&registry, &nested).await,
        ("yes".into(), "python".into())
    );
    drop(registration);

    // A cwd grant runs the call on the guest I/O runtime, also through them.
    let granted = component.with_grants(Grants {
        cwd_read: true,
        ..Grants::default()
    });
    let _granted = registry.register(granted).await.unwrap();
    let in_tmp = agent_call_in("c3", "s1", "/tmp");
    assert_eq!(
        resolved(&registry, &in_tmp).await,
        ("no".into(), "bash".into())
    );
}

#[test]
fn a_guest_of_an_unsupported_version_fails_to_load_naming_it_and_the_supported_range() {
    let registry = registry();
    let origin = artifacts::CONTRACT_UNSUPPORTED;
    let err = load_error(
        registry
            .load(LoadFrom::File(origin.as_ref()), &LoadOptions::new())
            .unwrap_err(),
    );
    assert_eq!(err.origin, origin);
    assert_eq!(
        err.to_string(),
        format!(
            "cannot load contributor component {origin}: it targets dsh:env@1.0.0; \
             this host supports dsh:env 0.1.x, 0.2.x, 0.2.0-test"
        )
    );
}

#[tokio::test]
async fn a_compatible_0_1_y_guest_is_served_by_the_0_1_0_bindings() {
    let registry = registry();
    let component = load_targeting(&registry, artifacts::CONTRACT_COMPATIBLE, "0.1.1");
    let registration = registry.register(component).await.unwrap();
    assert_eq!(registration.name(), "table-grower");
}

/// 0.2.0 made the agent's cwd optional (the reference harness's sessions
/// need not have one): a 0.2 guest is told it is absent, a 0.1 guest, whose
/// cwd is a string, is told "".
#[tokio::test]
async fn an_absent_cwd_reaches_each_version_in_its_own_form() {
    let registry = registry();
    let v0_2 = puppet(
        &registry,
        &[
            ("name", "cwd-0-2"),
            ("keys", "DSH_CWD=the cwd"),
            ("pairs", "DSH_CWD=[{cwd}]"),
        ],
    );
    assert!(
        v0_2.imports().iter().any(|i| i == "dsh:env/types@0.2.0"),
        "{:?}",
        v0_2.imports()
    );
    let _v0_2 = registry.register(v0_2).await.unwrap();
    // The C example hashes its cwd: FNV-1a 64 of no bytes is cbf29ce484222325.
    let v0_1 = load_targeting(&registry, artifacts::WORKSPACE_ID, "0.1.0");
    let _v0_1 = registry.register(v0_1).await.unwrap();
    let nowhere = ToolExecution::new("c1", "bash").with_agent(Agent {
        session_id: "s1".into(),
        cwd: None,
        parent_session_id: None,
        depth: 0,
    });
    let overlay = registry
        .collect(&nowhere, &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_CWD"), Some("[none]"));
    assert_eq!(overlay.get("DSH_WORKSPACE_ID"), Some("cbf29ce48422"));
    let overlay = registry
        .collect(&agent_call_in("c2", "s1", "/tmp"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_CWD"), Some("[/tmp]"));
    assert_ne!(overlay.get("DSH_WORKSPACE_ID"), Some("cbf29ce48422"));
}

#[tokio::test]
async fn an_ordinary_guest_is_unaffected_beside_another_version() {
    let registry = registry();
    let test_version = load_targeting(&registry, artifacts::CONTRACT_TEST, "0.2.0-test");
    let _test_version = registry.register(test_version).await.unwrap();
    let _echo = registry
        .register(echo(&registry, "echo-contract", "DSH_ECHO_CONTRACT"))
        .await
        .unwrap();
    let overlay = registry
        .collect(&agent_call("c1", "s-42"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_ECHO_CONTRACT"), Some("s-42"));
    assert_eq!(overlay.get("DSH_CONTRACT_NESTED"), Some("no"));
}

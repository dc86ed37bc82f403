//! The versions of the `dsh:env` contract this host binds, one `bindgen!` per
//! snapshot in `wit/` (the frozen ones link to the guest SDK's
//! `wit/since_vX.Y.Z`), and the choice among them: made once per component,
//! at load, from its `dsh:env/types@X.Y.Z` import, which every contributor
//! has because its exports use those types.
//!
//! Versions match the way wasmtime matches imports: the same major version
//! from 1.0, the same minor below it (0.1.y), and a pre-release only itself.
//! Within a match only host functions may be added (`declare` and `resolve`
//! are exports, checked structurally, and records cannot grow), so every
//! change to what they exchange is a new version with its own bindings here
//! (see the guest SDK's `wit/README.md`).

use semver::Version;
use wasmtime::component::{HasSelf, InstancePre, Linker};
use wasmtime::{Engine, Store};

use super::guest::GuestState;
use crate::declaration::RawDeclaration;
use crate::execution::{self, ToolExecution};
use crate::load_error::LoadErrorKind;

/// `dsh:env@0.1.0`, frozen.
mod v0_1 {
    wasmtime::component::bindgen!({
        path: "wit/since_v0.1.0",
        world: "contributor",
        exports: { default: async },
    });
}

/// `dsh:env@0.2.0`, frozen: the agent's `cwd` is optional.
mod v0_2 {
    wasmtime::component::bindgen!({
        path: "wit/since_v0.2.0",
        world: "contributor",
        exports: { default: async },
    });
}

/// `dsh:env@0.2.0-test`: `execution` has one more field. Test hosts only.
#[cfg(feature = "test-contract")]
mod test {
    wasmtime::component::bindgen!({
        path: "wit/test-contract",
        world: "contributor",
        exports: { default: async },
    });
}

/// The interface whose version names the contract a component targets.
const TYPES: &str = "dsh:env/types";

/// A version this host binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    V0_1,
    V0_2,
    #[cfg(feature = "test-contract")]
    Test,
}

/// Each bound version, its snapshot's version, and the range it accepts as shown.
const BOUND: &[(Bound, &str, &str)] = &[
    (Bound::V0_1, "0.1.0", "0.1.x"),
    (Bound::V0_2, "0.2.0", "0.2.x"),
    #[cfg(feature = "test-contract")]
    (Bound::Test, "0.2.0-test", "0.2.0-test"),
];

/// A contract version this host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ContractVersion {
    /// The `dsh:env` snapshot it is bound from, e.g. `0.1.0`.
    pub version: &'static str,
    /// The versions a component may target to be served by it, e.g. `0.1.x`.
    pub accepts: &'static str,
}

/// Every contract version this host runs, oldest first.
pub fn supported_contracts() -> Vec<ContractVersion> {
    BOUND
        .iter()
        .map(|(_, version, accepts)| ContractVersion { version, accepts })
        .collect()
}

/// A component's bindings, ready to instantiate: one variant per version.
#[derive(Clone)]
pub(crate) enum Pre {
    /// `dsh:env@0.1.x`.
    V0_1(v0_1::ContributorPre<GuestState>),
    /// `dsh:env@0.2.x`.
    V0_2(v0_2::ContributorPre<GuestState>),
    /// `dsh:env@0.2.0-test`.
    #[cfg(feature = "test-contract")]
    Test(test::ContributorPre<GuestState>),
}

/// One instance, through the bindings of its version.
pub(crate) enum Guest {
    /// `dsh:env@0.1.x`.
    V0_1(v0_1::Contributor),
    /// `dsh:env@0.2.x`.
    V0_2(v0_2::Contributor),
    /// `dsh:env@0.2.0-test`.
    #[cfg(feature = "test-contract")]
    Test(test::Contributor),
}

/// One execution in the WIT form of the bound versions, converted once per
/// `collect`, each at the first call that needs it.
#[derive(Clone)]
pub(crate) struct WitExecution {
    execution: ToolExecution,
    v0_1: std::sync::OnceLock<v0_1::Execution>,
    v0_2: std::sync::OnceLock<v0_2::Execution>,
    /// Made from `v0_1` at the first call that needs it, so that the
    /// benchmarks, which build with this feature, measure what production does.
    #[cfg(feature = "test-contract")]
    test: std::sync::OnceLock<test::Execution>,
}

/// Adds every bound version's host interfaces to `linker`.
pub(super) fn add_to_linker(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    v0_1::Contributor::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    v0_2::Contributor::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    #[cfg(feature = "test-contract")]
    test::Contributor::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    Ok(())
}

impl Pre {
    /// The bindings for `instance_pre`, of the version its `imports` name.
    /// A component that imports no `dsh:env/types` is tried as 0.1.x, whose
    /// bindings then say what it lacks.
    pub(super) fn new(
        imports: &[String],
        instance_pre: InstancePre<GuestState>,
    ) -> Result<Self, LoadErrorKind> {
        let not_contributor = |e: wasmtime::Error| {
            LoadErrorKind::Invalid(format!("not a dsh:env/contributor component: {e:#}"))
        };
        let requested = target(imports).map_err(LoadErrorKind::UnsupportedContract)?;
        let bound = match requested {
            Some(requested) => {
                bound_version(requested).map_err(LoadErrorKind::UnsupportedContract)?
            }
            None => Bound::V0_1,
        };
        match bound {
            Bound::V0_1 => v0_1::ContributorPre::new(instance_pre)
                .map(Pre::V0_1)
                .map_err(not_contributor),
            Bound::V0_2 => v0_2::ContributorPre::new(instance_pre)
                .map(Pre::V0_2)
                .map_err(not_contributor),
            #[cfg(feature = "test-contract")]
            Bound::Test => test::ContributorPre::new(instance_pre)
                .map(Pre::Test)
                .map_err(not_contributor),
        }
    }

    /// The engine its code was compiled for, which its stores must use.
    pub(super) fn engine(&self) -> &Engine {
        match self {
            Pre::V0_1(pre) => pre.engine(),
            Pre::V0_2(pre) => pre.engine(),
            #[cfg(feature = "test-contract")]
            Pre::Test(pre) => pre.engine(),
        }
    }

    /// A new instance in `store`.
    pub(super) async fn instantiate_async(
        &self,
        store: &mut Store<GuestState>,
    ) -> wasmtime::Result<Guest> {
        Ok(match self {
            Pre::V0_1(pre) => Guest::V0_1(pre.instantiate_async(store).await?),
            Pre::V0_2(pre) => Guest::V0_2(pre.instantiate_async(store).await?),
            #[cfg(feature = "test-contract")]
            Pre::Test(pre) => Guest::Test(pre.instantiate_async(store).await?),
        })
    }
}

/// The version of `dsh:env/types` that `imports` name, if any; more than
/// one is an error (a contributor's exports use one version's types).
fn target(imports: &[String]) -> Result<Option<&str>, String> {
    let mut versions = imports.iter().filter_map(|name| {
        match name.strip_prefix(TYPES)? {
            // `dsh:env/types` without a version targets no version at all.
            "" => Some(""),
            rest => rest.strip_prefix('@'),
        }
    });
    let first = versions.next();
    match versions.find(|&other| Some(other) != first) {
        Some(other) => Err(format!(
            "it imports {TYPES} at two versions ({} and {other}); a contributor targets one",
            first.unwrap_or_default()
        )),
        None => Ok(first),
    }
}

/// The bound snapshot version that serves `requested`, or why none does.
fn bound_version(requested: &str) -> Result<Bound, String> {
    let wanted = track(requested);
    BOUND
        .iter()
        .find(|(_, snapshot, _)| wanted.is_some() && track(snapshot) == wanted)
        .map(|(bound, _, _)| *bound)
        .ok_or_else(|| {
            let supported: Vec<&str> = BOUND.iter().map(|(_, _, range)| *range).collect();
            let asked = match requested {
                "" => "an unversioned dsh:env".to_string(),
                version => format!("dsh:env@{version}"),
            };
            format!(
                "it targets {asked}; this host supports dsh:env {}",
                supported.join(", ")
            )
        })
}

/// The versions `version` is compatible with, named by what they share (as
/// wasmtime's import matching): the major from 1.0, `0.minor` below it, the
/// whole version for a pre-release or a 0.0.z; `None` if it is not semver.
fn track(version: &str) -> Option<String> {
    let parsed = Version::parse(version).ok()?;
    Some(if !parsed.pre.is_empty() {
        version.to_string()
    } else if parsed.major != 0 {
        parsed.major.to_string()
    } else if parsed.minor != 0 {
        format!("0.{}", parsed.minor)
    } else {
        format!("0.0.{}", parsed.patch)
    })
}

/// A declaration in any version's bindings, as the host validates it.
macro_rules! raw_declaration {
    ($declaration:expr) => {{
        let declaration = $declaration;
        RawDeclaration {
            name: declaration.name,
            keys: (declaration.keys.into_iter())
                .map(|k| (k.key, k.description))
                .collect(),
        }
    }};
}

/// `$execution` (whose mode is a `$mode`) as the `execution` record of the
/// version whose types are `$types`, its agent's cwd made by `$cwd`, with
/// `$field`s that version adds.
macro_rules! wit_execution {
    ($types:path, $execution:expr, $mode:path, $cwd:expr $(, $field:ident: $value:expr)*) => {{
        use $mode as Mode;
        use $types as types;
        let execution = $execution;
        types::Execution {
            call_id: execution.call_id.clone(),
            root_call_id: execution.root_call_id.clone(),
            tool: execution.tool.clone(),
            mode: match execution.mode {
                Mode::Foreground => types::Mode::Foreground,
                Mode::Background => types::Mode::Background,
            },
            agent: execution.agent.as_ref().map(|agent| types::Agent {
                session_id: agent.session_id.clone(),
                cwd: $cwd(&agent.cwd),
                parent_session_id: agent.parent_session_id.clone(),
                depth: agent.depth,
            }),
            $($field: $value,)*
        }
    }};
}

impl Guest {
    /// Runs `declare`.
    pub(super) async fn declare(
        &self,
        store: &mut Store<GuestState>,
    ) -> wasmtime::Result<RawDeclaration> {
        Ok(match self {
            Guest::V0_1(guest) => raw_declaration!(guest.call_declare(store).await?),
            Guest::V0_2(guest) => raw_declaration!(guest.call_declare(store).await?),
            #[cfg(feature = "test-contract")]
            Guest::Test(guest) => raw_declaration!(guest.call_declare(store).await?),
        })
    }

    /// Runs `resolve` for `execution`.
    pub(super) async fn resolve(
        &self,
        store: &mut Store<GuestState>,
        execution: &WitExecution,
    ) -> wasmtime::Result<Result<Vec<(String, String)>, String>> {
        match self {
            Guest::V0_1(guest) => guest.call_resolve(store, execution.v0_1()).await,
            Guest::V0_2(guest) => guest.call_resolve(store, execution.v0_2()).await,
            #[cfg(feature = "test-contract")]
            Guest::Test(guest) => {
                let from = execution.v0_1();
                let wit = execution.test.get_or_init(|| {
                    wit_execution!(
                        test::dsh::env::types,
                        from,
                        v0_1::dsh::env::types::Mode,
                        String::clone,
                        nested: from.call_id != from.root_call_id
                    )
                });
                guest.call_resolve(store, wit).await
            }
        }
    }
}

impl WitExecution {
    /// `execution`, to be made into the bound versions' forms as guests need them.
    pub(super) fn new(execution: &ToolExecution) -> Self {
        WitExecution {
            execution: execution.clone(),
            v0_1: std::sync::OnceLock::new(),
            v0_2: std::sync::OnceLock::new(),
            #[cfg(feature = "test-contract")]
            test: std::sync::OnceLock::new(),
        }
    }

    /// The execution its forms are made from.
    pub(super) fn execution(&self) -> &ToolExecution {
        &self.execution
    }

    /// The `dsh:env@0.1.x` form: an absent cwd is "", the only string that
    /// is never an absolute path.
    fn v0_1(&self) -> &v0_1::Execution {
        let cwd = |cwd: &Option<String>| cwd.clone().unwrap_or_default();
        (self.v0_1).get_or_init(|| {
            wit_execution!(v0_1::dsh::env::types, &self.execution, execution::Mode, cwd)
        })
    }

    /// The `dsh:env@0.2.x` form.
    fn v0_2(&self) -> &v0_2::Execution {
        (self.v0_2).get_or_init(|| {
            wit_execution!(
                v0_2::dsh::env::types,
                &self.execution,
                execution::Mode,
                Option::clone
            )
        })
    }
}

impl v0_1::dsh::env::config::Host for GuestState {
    fn get(&mut self, key: String) -> Option<String> {
        self.config_value(&key)
    }
}

impl v0_1::dsh::env::types::Host for GuestState {}

impl v0_2::dsh::env::config::Host for GuestState {
    fn get(&mut self, key: String) -> Option<String> {
        self.config_value(&key)
    }
}

impl v0_2::dsh::env::types::Host for GuestState {}

#[cfg(feature = "test-contract")]
impl test::dsh::env::config::Host for GuestState {
    fn get(&mut self, key: String) -> Option<String> {
        self.config_value(&key)
    }
}

#[cfg(feature = "test-contract")]
impl test::dsh::env::types::Host for GuestState {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The snapshots bound here are the guest SDK's frozen ones, byte for
    /// byte (`wit/since_vX.Y.Z` links there; a copy must not drift).
    #[test]
    fn the_bound_snapshots_have_their_frozen_hashes() {
        use sha2::{Digest, Sha256};
        let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let sdk_wit = crate_dir.join("../../guest-sdk/wit");
        let recorded = std::fs::read_to_string(sdk_wit.join("frozen.sha256")).unwrap();
        let mut checked = 0;
        for line in recorded
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (hash, path) = line.split_once("  ").unwrap();
            let Ok(bytes) = std::fs::read(crate_dir.join("wit").join(path)) else {
                continue; // a frozen version this host does not bind
            };
            let actual: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(actual, hash, "wit/{path} is not the frozen snapshot");
            checked += 1;
        }
        assert!(checked >= 2, "wit/since_v0.1.0 or since_v0.2.0 is missing");
    }

    #[test]
    fn versions_match_as_wasmtime_matches_imports() {
        for (version, track_of) in [
            ("0.1.0", Some("0.1")),
            ("0.1.7", Some("0.1")),
            ("0.2.0", Some("0.2")),
            ("1.4.2+build", Some("1")),
            ("0.0.3", Some("0.0.3")),
            ("0.2.0-test", Some("0.2.0-test")),
            ("", None),
            ("one", None),
        ] {
            assert_eq!(track(version).as_deref(), track_of, "{version}");
        }
    }

    #[test]
    fn a_version_is_served_by_its_track_or_named_with_the_supported_range() {
        assert_eq!(bound_version("0.1.0"), Ok(Bound::V0_1));
        assert_eq!(bound_version("0.1.9"), Ok(Bound::V0_1));
        assert_eq!(bound_version("0.2.0"), Ok(Bound::V0_2));
        assert_eq!(bound_version("0.2.3"), Ok(Bound::V0_2));
        let refused = bound_version("0.3.0").unwrap_err();
        assert!(
            refused
                .starts_with("it targets dsh:env@0.3.0; this host supports dsh:env 0.1.x, 0.2.x"),
            "{refused}"
        );
        let unversioned = bound_version("").unwrap_err();
        assert!(
            unversioned.contains("an unversioned dsh:env"),
            "{unversioned}"
        );
    }

    #[test]
    fn the_target_is_the_one_version_of_the_types_import() {
        let imports = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(target(&imports(&["wasi:io/streams@0.2.6"])), Ok(None));
        assert_eq!(
            target(&imports(&["dsh:env/config@0.1.0", "dsh:env/types@0.1.0"])),
            Ok(Some("0.1.0"))
        );
        assert_eq!(target(&imports(&["dsh:env/types"])), Ok(Some("")));
        assert_eq!(target(&imports(&["dsh:env/typesetter@1.0.0"])), Ok(None));
        let two = imports(&["dsh:env/types@0.1.0", "dsh:env/types@1.0.0"]);
        assert!(target(&two).unwrap_err().contains("two versions"));
    }
}

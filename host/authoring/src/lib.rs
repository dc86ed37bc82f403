//! Authoring dsh-env contributors without the repository: the frozen
//! contract embedded in the binary, C bindings for it (wit-bindgen's C
//! generator), and a core module turned into a contributor component
//! (wit-component with the WASI preview1 reactor adapter).
//!
//! `dsh-env bindgen c`, `dsh-env componentize`, `dsh-env new` and the test
//! artifacts' build (`tests/artifacts/build/polyglot.rs`) all use it, so the
//! examples are built exactly as a contributor's own project is.

use std::path::Path;

use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_parser::{Resolve, WorldId};

/// The world every contributor targets.
pub const WORLD: &str = "contributor";

/// The frozen contract's WIT files, (file name, text): the snapshot
/// `guest-sdk/wit/since_v0.1.0`, embedded so that the binary needs no
/// repository (`wit/since_v0.1.0` links to it, as in the host core).
pub const FROZEN_CONTRACT: &[(&str, &str)] = &[(
    "contributor.wit",
    include_str!("../wit/since_v0.1.0/contributor.wit"),
)];

/// The frozen contract's WIT files written into `dir` (which must exist),
/// for the tools that read WIT from a folder (componentize-py, -js).
pub fn write_frozen_contract(dir: &Path) -> std::io::Result<()> {
    for (name, text) in FROZEN_CONTRACT {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}

/// Why a contract could not be read or its C bindings generated.
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    /// The WIT does not parse or resolve.
    #[error("the contract's WIT is invalid: {0}")]
    Invalid(String),
    /// It has no `contributor` world.
    #[error("the contract has no `{WORLD}` world: {0}")]
    NoWorld(String),
    /// wit-bindgen's C generator failed.
    #[error("generating the C bindings failed: {0}")]
    Bindgen(String),
}

/// A contract, parsed, and its `contributor` world.
#[derive(Clone)]
pub struct Contract {
    resolve: Resolve,
    world: WorldId,
}

impl Contract {
    /// The frozen contract embedded in this crate.
    pub fn frozen() -> Result<Self, ContractError> {
        Self::parse(FROZEN_CONTRACT.iter().map(|(name, text)| (*name, *text)))
    }

    /// The contract made of these WIT files, (name shown in errors, text),
    /// which together form one package.
    pub fn parse<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, ContractError> {
        let mut sources = wit_parser::SourceMap::new();
        for (name, text) in files {
            sources.push_str(name, text);
        }
        let group = sources
            .parse()
            .map_err(|(_, e)| ContractError::Invalid(e.to_string()))?;
        let mut resolve = Resolve::default();
        let package = resolve
            .push_group(group)
            .map_err(|e| ContractError::Invalid(e.to_string()))?;
        let world = resolve
            .select_world(&[package], Some(WORLD))
            .map_err(|e| ContractError::NoWorld(format!("{e:#}")))?;
        Ok(Contract { resolve, world })
    }

    /// The world's full name, e.g. `dsh:env/contributor@0.1.0`.
    pub fn world_name(&self) -> String {
        world_name(&self.resolve, self.world)
    }

    /// The C bindings, (file name, contents): `contributor.h`,
    /// `contributor.c` and `contributor_component_type.o`, the object that
    /// embeds the world in the module it is linked into.
    pub fn c_bindings(&self) -> Result<Vec<(String, Vec<u8>)>, ContractError> {
        // The generator may add to the resolve; keep this one as parsed.
        let mut resolve = self.resolve.clone();
        let mut files = wit_bindgen_core::Files::default();
        wit_bindgen_c::Opts::default()
            .build()
            .generate(&mut resolve, self.world, &mut files)
            .map_err(|e| ContractError::Bindgen(format!("{e:#}")))?;
        Ok(files
            .iter()
            .map(|(name, contents)| (name.to_string(), contents.to_vec()))
            .collect())
    }

    /// `module`, a core WebAssembly module, as a contributor component: the
    /// world embedded unless the module carries one (a `component-type`
    /// custom section, as wit-bindgen's output has), then encoded with the
    /// preview1 reactor adapter for its WASI imports, and validated.
    pub fn componentize(&self, module: &[u8]) -> Result<Vec<u8>, ComponentizeError> {
        if wasmparser::Parser::is_component(module) {
            return Err(ComponentizeError::AlreadyComponent);
        }
        if !wasmparser::Parser::is_core_wasm(module) {
            return Err(ComponentizeError::NotWasm);
        }
        let mut module = module.to_vec();
        if !self.check_embedded_worlds(&module)? {
            wit_component::embed_component_metadata(
                &mut module,
                &self.resolve,
                self.world,
                wit_component::StringEncoding::UTF8,
            )
            .map_err(|e| ComponentizeError::Invalid(format!("{e:#}")))?;
        }
        wit_component::ComponentEncoder::default()
            .module(&module)
            .and_then(|encoder| {
                encoder.validate(true).adapter(
                    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
                    WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
                )
            })
            .and_then(|encoder| encoder.encode())
            .map_err(|e| ComponentizeError::DoesNotFit {
                world: self.world_name(),
                detail: format!("{e:#}"),
            })
    }

    /// Whether `module` embeds a world (a `component-type` custom section,
    /// as wit-bindgen's output has); an error if one is not this contract's.
    fn check_embedded_worlds(&self, module: &[u8]) -> Result<bool, ComponentizeError> {
        let mut embedded = false;
        for payload in wasmparser::Parser::new(0).parse_all(module) {
            let payload = payload.map_err(|e| ComponentizeError::Invalid(e.to_string()))?;
            let wasmparser::Payload::CustomSection(section) = payload else {
                continue;
            };
            if !section.name().starts_with("component-type") {
                continue;
            }
            embedded = true;
            let (resolve, world) = wit_parser::decoding::decode_world(section.data())
                .map_err(|e| ComponentizeError::Invalid(format!("{e:#}")))?;
            if !self.same_world(&resolve, world) {
                return Err(ComponentizeError::OtherWorld {
                    found: world_name(&resolve, world),
                    expected: self.world_name(),
                });
            }
        }
        Ok(embedded)
    }

    /// Whether `world` in `resolve` is this contract's world: the same
    /// package (namespace and name, any version) and world name.
    fn same_world(&self, resolve: &Resolve, world: WorldId) -> bool {
        let key = |resolve: &Resolve, world: WorldId| {
            let world = &resolve.worlds[world];
            let package = world.package.map(|p| &resolve.packages[p].name);
            (
                package.map(|p| (p.namespace.clone(), p.name.clone())),
                world.name.clone(),
            )
        };
        key(resolve, world) == key(&self.resolve, self.world)
    }
}

/// `namespace:package/world@version`.
fn world_name(resolve: &Resolve, world: WorldId) -> String {
    let world = &resolve.worlds[world];
    match world.package {
        Some(package) => resolve.id_of_name(package, &world.name),
        None => world.name.clone(),
    }
}

/// Why a module could not become a contributor component.
#[derive(Debug, thiserror::Error)]
pub enum ComponentizeError {
    /// No WebAssembly header.
    #[error("not a WebAssembly module (no `\\0asm` header with a core module version)")]
    NotWasm,
    /// The input is a component already.
    #[error("already a component: check it with `dsh-env check`")]
    AlreadyComponent,
    /// A core module that does not parse, or whose embedded world does not.
    #[error("not a valid core module: {0}")]
    Invalid(String),
    /// The module embeds another world.
    #[error("the module was built for the world `{found}`, not `{expected}`")]
    OtherWorld {
        /// The world the module embeds.
        found: String,
        /// The contributor world.
        expected: String,
    },
    /// The module's imports or exports do not match the world.
    #[error("the module does not fit the world `{world}`: {detail}")]
    DoesNotFit {
        /// The contributor world.
        world: String,
        /// What wit-component found wrong.
        detail: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_contract_is_every_file_of_the_snapshot() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("wit/since_v0.1.0");
        let mut on_disk: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_str().unwrap().to_string();
                (name, std::fs::read_to_string(&path).unwrap())
            })
            .collect();
        on_disk.sort();
        let embedded: Vec<(String, String)> = FROZEN_CONTRACT
            .iter()
            .map(|(name, text)| (name.to_string(), text.to_string()))
            .collect();
        assert_eq!(embedded, on_disk);
        assert_eq!(
            Contract::frozen().unwrap().world_name(),
            "dsh:env/contributor@0.1.0"
        );
    }

    #[test]
    fn c_bindings_are_the_header_source_and_type_object() {
        let files = Contract::frozen().unwrap().c_bindings().unwrap();
        let mut names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "contributor.c",
                "contributor.h",
                "contributor_component_type.o"
            ]
        );
    }

    #[test]
    fn a_module_built_for_another_world_is_named() {
        let other = Contract::parse([(
            "other.wit",
            "package acme:tools@1.0.0;\nworld contributor { export run: func(); }\n",
        )])
        .unwrap();
        let mut module = wat::parse_str("(module)").unwrap();
        wit_component::embed_component_metadata(
            &mut module,
            &other.resolve,
            other.world,
            wit_component::StringEncoding::UTF8,
        )
        .unwrap();
        let err = Contract::frozen()
            .unwrap()
            .componentize(&module)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the module was built for the world `acme:tools/contributor@1.0.0`, \
             not `dsh:env/contributor@0.1.0`"
        );
    }
}

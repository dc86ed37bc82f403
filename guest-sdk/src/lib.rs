//! Write a dsh-env contributor in Rust: implement [`Contributor`], then call
//! [`export_contributor!`] once.
//!
//! ```ignore
//! use dsh_env_guest::{Contributor, Declaration, Execution, export_contributor};
//!
//! struct Depth;
//! impl Contributor for Depth {
//!     fn declare() -> Declaration {
//!         Declaration::new("agent-depth").key("DSH_AGENT_DEPTH", "How deep this agent is nested.")
//!     }
//!     fn resolve(execution: Execution) -> Result<Vec<(String, String)>, String> {
//!         Ok(execution.agent.map(|a| ("DSH_AGENT_DEPTH".into(), a.depth.to_string())).into_iter().collect())
//!     }
//! }
//! export_contributor!(Depth);
//! ```
//!
//! `dsh-env new my-tool --lang rust` creates a project whose `make` builds
//! it: `cargo build --release --target wasm32-wasip2` with a size-optimised
//! release profile (`opt-level = "s"`, `lto`, `strip`, `panic = "abort"`),
//! about 45 KB; `target/wasm32-wasip2/release/<lib name>.wasm` is a component
//! that targets the `dsh:env/contributor` world.

// Lets the generated code name this crate by its public path, which is also the
// path the export macro uses when it expands in a contributor's crate.
extern crate self as dsh_env_guest;

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

#[cfg(test)]
mod frozen;

/// Raw bindings generated from the `dsh:env@0.2.0` WIT package.
#[allow(clippy::too_many_arguments)] // generated lowering code
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit/since_v0.2.0",
        world: "contributor",
        pub_export_macro: true,
        export_macro_name: "__export_contributor_world",
        default_bindings_module: "dsh_env_guest::bindings",
        runtime_path: "dsh_env_guest::__wit_bindgen::rt",
        additional_derives: [PartialEq, Eq],
    });
}

pub use bindings::dsh::env::types::{Agent, Declaration, Execution, KeyDeclaration, Mode};

/// An env contributor: a declaration plus a resolver for one execution.
pub trait Contributor {
    /// The contributor's stable name and every key it may return.
    fn declare() -> Declaration;

    /// The (key, value) pairs for one execution; `Err` fails it with a message.
    fn resolve(execution: Execution) -> Result<Vec<(String, String)>, String>;
}

impl Declaration {
    /// A declaration named `name`, with no keys yet.
    pub fn new(name: impl Into<String>) -> Self {
        Declaration {
            name: name.into(),
            keys: Vec::new(),
        }
    }

    /// Adds a key this contributor may return, with its description.
    pub fn key(mut self, key: impl Into<String>, description: impl Into<String>) -> Self {
        self.keys.push(KeyDeclaration {
            key: key.into(),
            description: description.into(),
        });
        self
    }
}

/// The static configuration value the host grants this contributor for `key`.
pub fn config(key: &str) -> Option<String> {
    bindings::dsh::env::config::get(key)
}

/// Exports a [`Contributor`] implementation as the component's `declare` and
/// `resolve`.
#[macro_export]
macro_rules! export_contributor {
    ($contributor:ty) => {
        const _: () = {
            struct __DshEnvExport;

            impl $crate::bindings::Guest for __DshEnvExport {
                fn declare() -> $crate::Declaration {
                    <$contributor as $crate::Contributor>::declare()
                }

                fn resolve(
                    execution: $crate::Execution,
                ) -> ::core::result::Result<
                    $crate::__Pairs,
                    ::std::string::String,
                > {
                    <$contributor as $crate::Contributor>::resolve(execution)
                }
            }

            $crate::bindings::__export_contributor_world!(__DshEnvExport with_types_in $crate::bindings);
        };
    };
}

#[doc(hidden)]
pub type __Pairs = Vec<(String, String)>;

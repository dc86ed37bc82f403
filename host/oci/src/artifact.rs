//! What a pushed artifact says about its component, as the CNCF TAG Runtime
//! Wasm OCI artifact layout and the OCI image spec ask: the config's
//! `component` ([`ComponentWorld`]: the world decoded from the component
//! itself, and the `dsh:env` contract it targets) and the manifest's
//! `org.opencontainers.image.*` annotations ([`Description`]: from the
//! component's own metadata custom sections, else from the pusher).

use std::collections::BTreeMap;

use dsh_env_support::input::escape_controls;
use wasmparser::{ComponentName, KnownCustom, Parser, Payload};
use wit_parser::WorldKey;
use wit_parser::decoding::{DecodedWasm, decode};

/// The import whose version names the contract a contributor targets:
/// every contributor's exports use its types.
const CONTRACT_TYPES: &str = "dsh:env/types@";
/// The world every contributor targets, named with that version in `target`.
const CONTRACT_WORLD: &str = "dsh:env/contributor";

/// The OCI annotation: a human-readable title.
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";
/// The OCI annotation: the version of the packaged software.
pub const VERSION_ANNOTATION: &str = "org.opencontainers.image.version";
/// The OCI annotation: a human-readable description.
pub const DESCRIPTION_ANNOTATION: &str = "org.opencontainers.image.description";
/// The OCI annotation: the URL of the source code.
pub const SOURCE_ANNOTATION: &str = "org.opencontainers.image.source";
/// The OCI annotation: the licenses, as an SPDX expression.
pub const LICENSES_ANNOTATION: &str = "org.opencontainers.image.licenses";
/// The OCI annotation: when it was made, RFC 3339.
pub const CREATED_ANNOTATION: &str = "org.opencontainers.image.created";

/// The longest annotation value taken: the whole manifest must stay under
/// [`dsh_env_store::MAX_OCI_MANIFEST_BYTES`] for anyone to pull it.
pub const MAX_ANNOTATION_CHARS: usize = 4096;

/// Why a component cannot be described for a push.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescribeError {
    /// Its world could not be decoded from its bytes.
    #[error("its world cannot be decoded: {0}")]
    World(String),
    /// It imports no `dsh:env/types`, so targets no contract version.
    #[error("it imports no dsh:env/types, so it is not a dsh:env contributor")]
    NoContract,
    /// A metadata custom section is not UTF-8, or too long.
    #[error("its `{section}` metadata section {problem}")]
    Metadata {
        /// The section's name.
        section: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A value given for the push differs from the component's own.
    #[error("the component's {field} is `{component}`, but `{given}` was given for it")]
    Conflict {
        /// `title`, `version` …
        field: &'static str,
        /// The component's (escaped).
        component: String,
        /// The one given (escaped).
        given: String,
    },
    /// A value given for the push is longer than [`MAX_ANNOTATION_CHARS`].
    #[error("the {field} given is over {MAX_ANNOTATION_CHARS} characters")]
    TooLong {
        /// `title`, `version` …
        field: &'static str,
    },
}

/// The config's `component`: the component's world, as its exports and
/// imports (`namespace:package/interface@version`, or a plain name), and
/// the world of the `dsh:env` contract version it targets.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ComponentWorld {
    /// What it exports.
    pub exports: Vec<String>,
    /// What it imports.
    pub imports: Vec<String>,
    /// `dsh:env/contributor@X.Y.Z`, from its `dsh:env/types` import.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl ComponentWorld {
    /// Decodes the world of the component `wasm`.
    pub fn decode(wasm: &[u8]) -> Result<Self, DescribeError> {
        let (resolve, world) = match decode(wasm) {
            Ok(DecodedWasm::Component(resolve, world)) => (resolve, world),
            Ok(DecodedWasm::WitPackage(..)) => {
                return Err(DescribeError::World(
                    "it is a WIT package, not a component".into(),
                ));
            }
            Err(e) => {
                return Err(DescribeError::World(
                    escape_controls(&format!("{e:#}")).into_owned(),
                ));
            }
        };
        let world = &resolve.worlds[world];
        let names = |keys: &mut dyn Iterator<Item = &WorldKey>| -> Vec<String> {
            keys.filter_map(|key| match key {
                WorldKey::Interface(id) => resolve.id_of(*id),
                WorldKey::Name(name) => Some(name.clone()),
            })
            .collect()
        };
        let imports = names(&mut world.imports.keys());
        let exports = names(&mut world.exports.keys());
        let target = (imports.iter())
            .find_map(|name| name.strip_prefix(CONTRACT_TYPES))
            .map(|version| format!("{CONTRACT_WORLD}@{version}"));
        Ok(ComponentWorld {
            exports,
            imports,
            target,
        })
    }
}

/// What the manifest's `org.opencontainers.image.*` annotations say;
/// `created` is the time of the push.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Description {
    /// `org.opencontainers.image.title`.
    pub title: Option<String>,
    /// `org.opencontainers.image.version`.
    pub version: Option<String>,
    /// `org.opencontainers.image.description`.
    pub description: Option<String>,
    /// `org.opencontainers.image.source`.
    pub source: Option<String>,
    /// `org.opencontainers.image.licenses`.
    pub licenses: Option<String>,
}

impl Description {
    /// What the component `wasm` says of itself, in its own top-level custom
    /// sections: the ones `wasm-tools metadata add` writes (`version`,
    /// `description`, `source`, `licenses`) and, for the title, its name
    /// (the `component-name` section). Nested modules' sections are not its.
    pub fn from_component(wasm: &[u8]) -> Result<Self, DescribeError> {
        let mut found = Description::default();
        let mut depth = 0usize;
        for payload in Parser::new(0).parse_all(wasm) {
            let Ok(payload) = payload else {
                // Not for this to judge: the push's own check says what is wrong.
                break;
            };
            let section = match payload {
                Payload::Version { .. } => {
                    depth += 1;
                    continue;
                }
                Payload::End(_) => {
                    depth = depth.saturating_sub(1);
                    continue;
                }
                Payload::CustomSection(section) if depth == 1 => section,
                _ => continue,
            };
            let (field, slot) = match section.name() {
                "version" => ("version", &mut found.version),
                "description" => ("description", &mut found.description),
                "source" => ("source", &mut found.source),
                "licenses" => ("licenses", &mut found.licenses),
                _ => {
                    if let KnownCustom::ComponentName(names) = section.as_known() {
                        for name in names.into_iter().flatten() {
                            if let ComponentName::Component { name, .. } = name {
                                found.title = Some(checked("title", name)?);
                            }
                        }
                    }
                    continue;
                }
            };
            let text =
                std::str::from_utf8(section.data()).map_err(|_| DescribeError::Metadata {
                    section: field,
                    problem: "is not UTF-8",
                })?;
            *slot = Some(checked(field, text).map_err(|_| DescribeError::Metadata {
                section: field,
                problem: "is over 4096 characters",
            })?);
        }
        Ok(found)
    }

    /// This description (the component's), with what it lacks taken from
    /// `given` (the pusher's flags); a value in both must agree.
    pub fn or(self, given: &Description) -> Result<Self, DescribeError> {
        let pick = |field: &'static str,
                    own: Option<String>,
                    given: &Option<String>|
         -> Result<Option<String>, DescribeError> {
            match (own, given) {
                (Some(own), Some(given)) if own != *given => Err(DescribeError::Conflict {
                    field,
                    component: escape_controls(&own).into_owned(),
                    given: escape_controls(given).into_owned(),
                }),
                (Some(own), _) => Ok(Some(own)),
                (None, Some(given)) => Ok(Some(checked(field, given)?)),
                (None, None) => Ok(None),
            }
        };
        Ok(Description {
            title: pick("title", self.title, &given.title)?,
            version: pick("version", self.version, &given.version)?,
            description: pick("description", self.description, &given.description)?,
            source: pick("source", self.source, &given.source)?,
            licenses: pick("licenses", self.licenses, &given.licenses)?,
        })
    }

    /// The manifest annotations, `created` (RFC 3339) included.
    pub fn annotations(&self, created: &str) -> BTreeMap<String, String> {
        let fields = [
            (TITLE_ANNOTATION, &self.title),
            (VERSION_ANNOTATION, &self.version),
            (DESCRIPTION_ANNOTATION, &self.description),
            (SOURCE_ANNOTATION, &self.source),
            (LICENSES_ANNOTATION, &self.licenses),
        ];
        let mut annotations: BTreeMap<String, String> = (fields.into_iter())
            .filter_map(|(key, value)| Some((key.to_string(), value.clone()?)))
            .collect();
        annotations.insert(CREATED_ANNOTATION.to_string(), created.to_string());
        annotations
    }
}

/// `text`, if it is at most [`MAX_ANNOTATION_CHARS`] characters.
fn checked(field: &'static str, text: &str) -> Result<String, DescribeError> {
    if text.chars().count() > MAX_ANNOTATION_CHARS {
        return Err(DescribeError::TooLong { field });
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_fills_what_the_component_lacks_and_must_agree_with_what_it_has() {
        let own = Description {
            version: Some("1.0.0".into()),
            ..Description::default()
        };
        let given = Description {
            source: Some("https://example.com/x".into()),
            ..Description::default()
        };
        let merged = own.clone().or(&given).unwrap();
        assert_eq!(merged.version.as_deref(), Some("1.0.0"));
        assert_eq!(merged.source.as_deref(), Some("https://example.com/x"));
        let clash = Description {
            version: Some("2.0.0".into()),
            ..Description::default()
        };
        assert_eq!(
            own.or(&clash).unwrap_err().to_string(),
            "the component's version is `1.0.0`, but `2.0.0` was given for it"
        );
    }
}

//! Declarations: what a contributor says it owns, and the rules it must obey,
//! both at registration and for every value it returns.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::keys::{BUILTIN_OWNER, DshKey, KeyError};
use crate::limits::{Limits, MAX_DESCRIPTION_BYTES, MAX_NAME_BYTES};
use dsh_env_support::input::{
    control_character, describe_control, describe_hidden, escape_controls, hidden_character,
};

/// A declaration as a contributor gave it, not yet checked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RawDeclaration {
    /// The contributor's name.
    pub name: String,
    /// (key, description) pairs.
    pub keys: Vec<(String, String)>,
}

/// One declared key with its description.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyInfo {
    /// The key.
    pub key: DshKey,
    /// What it means.
    pub description: String,
}

/// A checked declaration: a usable name and well-formed, unique, unreserved keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    name: String,
    keys: BTreeMap<DshKey, String>,
}

/// What is wrong with a declaration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclarationProblem {
    /// The name is empty or whitespace.
    #[error("the name is blank")]
    BlankName,
    /// The name is too long.
    #[error("the name is {0} bytes, over the cap of {MAX_NAME_BYTES}")]
    NameTooLong(usize),
    /// The name holds a character that could hide or reorder text on a
    /// terminal: a control or format character, a line or paragraph
    /// separator (see [`dsh_env_support::input::hidden_from_review`]).
    #[error("the name holds {}", describe_hidden(*.0))]
    NameControl(char),
    /// The name is dsh-env's own, the owner shown for the built-in keys.
    #[error("the name `{BUILTIN_OWNER}` is reserved for dsh-env's built-in keys")]
    ReservedName,
    /// Another contributor has this name.
    #[error(
        "a contributor with this name is already registered, from {}; this one is from {}",
        escape_controls(.first),
        escape_controls(.second)
    )]
    DuplicateName {
        /// Where the registered one came from.
        first: String,
        /// Where the refused one came from.
        second: String,
    },
    /// Too many keys.
    #[error("declares {count} keys, over the cap of {cap}")]
    TooManyKeys {
        /// Keys declared.
        count: usize,
        /// The cap.
        cap: usize,
    },
    /// The key is malformed.
    #[error("malformed key: {0}")]
    MalformedKey(KeyError),
    /// The key is one of dsh-env's built-ins.
    #[error("the key is reserved for dsh-env")]
    ReservedKey,
    /// The description is blank.
    #[error("the description is blank")]
    BlankDescription,
    /// The description is too long.
    #[error("the description is {0} bytes, over the cap of {MAX_DESCRIPTION_BYTES}")]
    DescriptionTooLong(usize),
    /// The description holds a control or format character, or a line or
    /// paragraph separator (it must be one line, shown as it is).
    #[error("the description holds {} (it must be one line, shown as it is)", describe_hidden(*.0))]
    DescriptionControl(char),
    /// The key appears twice in the declaration.
    #[error("the key is declared twice")]
    DuplicateKey,
    /// Another contributor owns the key.
    #[error("the key is already owned by `{owner}`")]
    KeyOwned {
        /// The current owner.
        owner: String,
    },
}

/// A rejected declaration, naming the contributor and, where one is at fault, the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct DeclarationError {
    /// The contributor's declared name (or what was given for it).
    pub contributor: String,
    /// The offending key, if the problem is with a key.
    pub key: Option<String>,
    /// What is wrong.
    pub problem: DeclarationProblem,
}

impl fmt::Display for DeclarationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "contributor `{}`", escape_controls(&self.contributor))?;
        if let Some(key) = &self.key {
            write!(f, ", key `{}`", escape_controls(key))?;
        }
        write!(f, ": {}", self.problem)
    }
}

impl Declaration {
    /// Checks a raw declaration against every rule that needs no other
    /// contributor; the error is the first problem found.
    pub fn validate(raw: RawDeclaration, limits: &Limits) -> Result<Self, DeclarationError> {
        match Self::problems(&raw, limits).into_iter().next() {
            Some(first) => Err(first),
            None => Ok(Declaration {
                keys: raw
                    .keys
                    .into_iter()
                    .filter_map(|(key, description)| Some((DshKey::new(key).ok()?, description)))
                    .collect(),
                name: raw.name,
            }),
        }
    }

    /// Every rule `raw` breaks, in declaration order (empty when it is sound).
    pub fn problems(raw: &RawDeclaration, limits: &Limits) -> Vec<DeclarationError> {
        let mut found = Vec::new();
        let mut fail = |key: Option<&str>, problem| {
            found.push(DeclarationError {
                contributor: raw.name.clone(),
                key: key.map(str::to_string),
                problem,
            })
        };
        if raw.name.trim().is_empty() {
            fail(None, DeclarationProblem::BlankName);
        } else if raw.name.len() > MAX_NAME_BYTES {
            fail(None, DeclarationProblem::NameTooLong(raw.name.len()));
        } else if let Some(c) = hidden_character(&raw.name) {
            fail(None, DeclarationProblem::NameControl(c));
        } else if raw.name.trim().eq_ignore_ascii_case(BUILTIN_OWNER) {
            // Listed as the owner of its keys, it would pass for a built-in.
            fail(None, DeclarationProblem::ReservedName);
        }
        if raw.keys.len() > limits.max_keys {
            let (count, cap) = (raw.keys.len(), limits.max_keys);
            fail(None, DeclarationProblem::TooManyKeys { count, cap });
            return found;
        }
        let mut seen = BTreeSet::new();
        for (key, description) in &raw.keys {
            match DshKey::new(key.as_str()) {
                Err(e) => fail(Some(key), DeclarationProblem::MalformedKey(e)),
                Ok(checked) if checked.is_reserved() => {
                    fail(Some(key), DeclarationProblem::ReservedKey)
                }
                Ok(_) if !seen.insert(key) => fail(Some(key), DeclarationProblem::DuplicateKey),
                Ok(_) => {}
            }
            if description.trim().is_empty() {
                fail(Some(key), DeclarationProblem::BlankDescription);
            } else if description.len() > MAX_DESCRIPTION_BYTES {
                let bytes = description.len();
                fail(Some(key), DeclarationProblem::DescriptionTooLong(bytes));
            } else if let Some(c) = hidden_character(description) {
                fail(Some(key), DeclarationProblem::DescriptionControl(c));
            }
        }
        found
    }

    /// The contributor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The declared keys, sorted, with their descriptions.
    pub fn keys(&self) -> impl Iterator<Item = (&DshKey, &str)> {
        self.keys.iter().map(|(k, d)| (k, d.as_str()))
    }

    /// The declared key equal to `key`, if any.
    pub fn declared(&self, key: &str) -> Option<&DshKey> {
        self.keys.get_key_value(key).map(|(k, _)| k)
    }

    /// The declared key names joined by `, `, for messages.
    pub(crate) fn key_list(&self) -> String {
        let names: Vec<&str> = self.keys.keys().map(DshKey::as_str).collect();
        names.join(", ")
    }
}

/// What is wrong with the pairs a resolver returned. Keys come from the
/// guest, so they are shown escaped: a guest cannot put terminal control
/// sequences into a host error message or log line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputProblem {
    /// A key the contributor did not declare.
    #[error("returned undeclared key `{}`", escape_controls(.0))]
    UndeclaredKey(String),
    /// A key returned twice.
    #[error("returned key `{}` twice", escape_controls(.0))]
    DuplicateKey(String),
    /// A value with a control character (any but TAB; see
    /// [`dsh_env_support::input::control_character`]): it could forge an output line
    /// or cut an environment string.
    #[error("value of `{}` holds control character {}", escape_controls(.key), describe_control(*.character))]
    ControlInValue {
        /// The key.
        key: String,
        /// The first control character found.
        character: char,
    },
    /// A value over the per-value cap.
    #[error("value of `{}` is {len} bytes, over the cap of {cap}", escape_controls(.key))]
    ValueTooLarge {
        /// The key.
        key: String,
        /// The value's size.
        len: usize,
        /// The cap.
        cap: usize,
    },
    /// More pairs than allowed.
    #[error("returned {count} pairs, over the cap of {cap}")]
    TooManyPairs {
        /// Pairs returned.
        count: usize,
        /// The cap.
        cap: usize,
    },
    /// More bytes in all than allowed.
    #[error("returned {total} bytes in all, over the cap of {cap}")]
    OutputTooLarge {
        /// Bytes returned.
        total: usize,
        /// The cap.
        cap: usize,
    },
}

impl Declaration {
    /// Checks one resolver's output: only declared keys, each once, with
    /// valid values within the caps.
    pub fn check_output(
        &self,
        pairs: Vec<(String, String)>,
        limits: &Limits,
    ) -> Result<Vec<(DshKey, String)>, OutputProblem> {
        if pairs.len() > limits.max_pairs {
            return Err(OutputProblem::TooManyPairs {
                count: pairs.len(),
                cap: limits.max_pairs,
            });
        }
        let mut seen = BTreeSet::new();
        let mut checked = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            let Some(declared) = self.declared(&key) else {
                return Err(OutputProblem::UndeclaredKey(key));
            };
            if !seen.insert(declared) {
                return Err(OutputProblem::DuplicateKey(key));
            }
            check_value(&key, &value, limits.max_value_bytes)?;
            checked.push((declared.clone(), value));
        }
        let total: usize = checked
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len())
            .sum();
        if total > limits.max_output_bytes {
            return Err(OutputProblem::OutputTooLarge {
                total,
                cap: limits.max_output_bytes,
            });
        }
        Ok(checked)
    }
}

/// The rules for one value, whoever sets it: no control character but TAB,
/// and at most `max_bytes`.
pub fn check_value(key: &str, value: &str, max_bytes: usize) -> Result<(), OutputProblem> {
    if let Some(character) = control_character(value) {
        return Err(OutputProblem::ControlInValue {
            key: key.to_string(),
            character,
        });
    }
    if value.len() > max_bytes {
        return Err(OutputProblem::ValueTooLarge {
            key: key.to_string(),
            len: value.len(),
            cap: max_bytes,
        });
    }
    Ok(())
}

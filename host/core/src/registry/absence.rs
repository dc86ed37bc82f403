//! Why declared keys are absent from an overlay, as far as the call showed:
//! the contributor's grants, the end of its stderr, and a hint when it
//! looked for the filesystem or its environment and had no grant for it.

use crate::sandbox::CallTrace;

use super::collection::Collection;
use super::registration::ContributorListing;
use super::state::Registry;

/// A contributor whose declared keys are absent from a collection, with
/// what its call showed (see [`Registry::absences`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Absence {
    /// Its name.
    pub contributor: String,
    /// Its declared keys absent from the overlay, sorted.
    pub keys: Vec<String>,
    /// Its grants in words (see [`ContributorListing::grants_text`]).
    pub grants: String,
    /// Where its manifest entry is, `manifest.toml:LINE`, if it came from one.
    pub declared_at: Option<String>,
    /// The end of what it wrote to stderr during the call (control
    /// sequences stripped), if anything; `None` too for a collection that
    /// was not traced.
    pub stderr_tail: Option<String>,
    /// What it looked for without a grant, and the grant that gives it.
    pub hints: Vec<String>,
}

impl Registry {
    /// Every contributor with declared keys absent from `collection`, by
    /// name, with its grants and, when the collection was traced
    /// ([`crate::CollectOptions::traced`]), the end of its stderr and hints naming
    /// the grant it lacked. Runs no resolver.
    pub fn absences(&self, collection: &Collection) -> Vec<Absence> {
        let snapshot = self.inner.snapshot();
        (self.contributors().into_iter())
            .filter_map(|listing| {
                let entry = snapshot.get(&listing.name)?;
                let keys: Vec<String> = (entry.declaration.keys())
                    .map(|(key, _)| key.as_str())
                    .filter(|key| collection.overlay.get(key).is_none())
                    .map(str::to_string)
                    .collect();
                if keys.is_empty() {
                    return None;
                }
                let trace = collection.traces.get(&listing.name);
                Some(Absence {
                    hints: trace
                        .map(|trace| hints(trace, &listing))
                        .unwrap_or_default(),
                    stderr_tail: trace.and_then(|trace| trace.stderr_tail.clone()),
                    grants: listing.grants_text(),
                    declared_at: listing.declared_at.clone(),
                    contributor: listing.name,
                    keys,
                })
            })
            .collect()
    }
}

/// What the call looked for and found empty, and what would give it.
fn hints(trace: &CallTrace, listing: &ContributorListing) -> Vec<String> {
    let entry = match &listing.declared_at {
        Some(at) => format!("under [contributor.grants] in its [[contributor]] entry at {at}"),
        None => "to its grants (a manifest entry's [contributor.grants], or the `grants` \
                 its embedding registered it with)"
            .to_string(),
    };
    let mut hints = Vec::new();
    if trace.found_no_directories {
        hints.push(if listing.cwd_read {
            "it looked for the agent's cwd, and this execution has none (no agent \
             cwd, or one the host could not open)"
                .to_string()
        } else {
            format!(
                "it looked for a directory (to open a path) and has no cwd grant: \
                 add `cwd = \"read\"` {entry}"
            )
        });
    }
    if trace.found_no_environment {
        hints.push(if listing.env_grants.is_empty() {
            // componentize-py's runtime reads it on every call, so for a
            // Python guest this alone says little.
            format!(
                "it read its environment, which is empty without an env grant; if it \
                 needs a host variable, add `env = [\"NAME\"]` {entry} (a Python guest \
                 reads it on every call, needed or not)"
            )
        } else {
            "it read its environment and found it empty: none of its granted \
             variables is set in the host's environment"
                .to_string()
        });
    }
    hints
}

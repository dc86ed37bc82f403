//! The overlay: one execution's managed environment, immutable and sorted.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::keys::DshKey;

/// The managed `DSH_*` variables for one execution: sorted by key, and never
/// changed once built, so it can be shared and spawned from freely.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overlay {
    entries: Arc<[(DshKey, String)]>,
}

impl Overlay {
    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| self.entries[i].1.as_str())
    }

    /// The entries, sorted by key.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&DshKey, &str)> {
        self.entries.iter().map(|(k, v)| (k, v.as_str()))
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries as a sorted map of strings (e.g. for JSON).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

impl From<BTreeMap<DshKey, String>> for Overlay {
    fn from(map: BTreeMap<DshKey, String>) -> Self {
        Overlay {
            entries: map.into_iter().collect(),
        }
    }
}

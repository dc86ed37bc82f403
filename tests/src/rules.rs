//! The declaration and output rules, written again independently of the
//! host: the oracle of both fuzzers (`tests/tests/all/fuzz/`, and `fuzz/`,
//! which includes this file by path so that it need not build the guests).

use std::collections::BTreeSet;

use dsh_env::{Limits, RESERVED_KEYS, RawDeclaration};

/// The key rule: `DSH_[A-Z][A-Z0-9_]*`.
pub fn key_is_valid(key: &str) -> bool {
    let Some(suffix) = key.strip_prefix("DSH_") else {
        return false;
    };
    let mut bytes = suffix.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_uppercase())
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Whether `key` is one dsh-env sets itself.
pub fn key_is_reserved(key: &str) -> bool {
    RESERVED_KEYS.contains(&key)
}

/// The format characters (Unicode 16's category Cf) and the line and
/// paragraph separators (Zl, Zp), as ranges written out here, apart from the
/// ICU data the host reads.
const HIDDEN: [(char, char); 21] = [
    ('\u{ad}', '\u{ad}'),
    ('\u{600}', '\u{605}'),
    ('\u{61c}', '\u{61c}'),
    ('\u{6dd}', '\u{6dd}'),
    ('\u{70f}', '\u{70f}'),
    ('\u{890}', '\u{891}'),
    ('\u{8e2}', '\u{8e2}'),
    ('\u{180e}', '\u{180e}'),
    ('\u{200b}', '\u{200f}'),
    ('\u{2028}', '\u{202e}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206f}'),
    ('\u{feff}', '\u{feff}'),
    ('\u{fff9}', '\u{fffb}'),
    ('\u{110bd}', '\u{110bd}'),
    ('\u{110cd}', '\u{110cd}'),
    ('\u{13430}', '\u{1343f}'),
    ('\u{1bca0}', '\u{1bca3}'),
    ('\u{1d173}', '\u{1d17a}'),
    ('\u{e0001}', '\u{e0001}'),
    ('\u{e0020}', '\u{e007f}'),
];

/// Whether `c` is a control or format character, or a line or paragraph
/// separator: what a name or description refuses and a display escapes.
pub fn is_hidden(c: char) -> bool {
    c.is_control() || HIDDEN.iter().any(|&(a, b)| (a..=b).contains(&c))
}

/// A name or description: not blank, at most `max` bytes, no character
/// [`is_hidden`] names.
fn line_ok(text: &str, max: usize) -> bool {
    !text.trim().is_empty() && text.len() <= max && !text.chars().any(is_hidden)
}

/// Whether `name` is dsh-env's own (trimmed, any ASCII case).
pub fn name_is_reserved(name: &str) -> bool {
    name.trim().eq_ignore_ascii_case("dsh-env")
}

/// The value rule: no control character but TAB (C0 but HT, DEL, C1).
pub fn text_is_clean(text: &str) -> bool {
    !text
        .chars()
        .any(|c| matches!(c, '\0'..='\u{8}' | '\n'..='\u{1f}' | '\u{7f}'..='\u{9f}'))
}

/// Whether a declaration breaks no rule (alone, not against other contributors).
pub fn declaration_is_sound(raw: &RawDeclaration, limits: &Limits) -> bool {
    let unique = raw
        .keys
        .iter()
        .map(|(k, _)| k)
        .collect::<BTreeSet<_>>()
        .len()
        == raw.keys.len();
    line_ok(&raw.name, 128)
        && !name_is_reserved(&raw.name)
        && raw.keys.len() <= limits.max_keys
        && unique
        && raw.keys.iter().all(|(key, description)| {
            key_is_valid(key) && !key_is_reserved(key) && line_ok(description, 1024)
        })
}

/// Whether a resolver's output for a contributor that declared `declared` breaks no rule.
pub fn output_is_sound(
    declared: &BTreeSet<&str>,
    pairs: &[(String, String)],
    limits: &Limits,
) -> bool {
    let total: usize = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
    let unique = pairs.iter().map(|(k, _)| k).collect::<BTreeSet<_>>().len() == pairs.len();
    pairs.len() <= limits.max_pairs
        && total <= limits.max_output_bytes
        && unique
        && pairs.iter().all(|(k, v)| {
            declared.contains(k.as_str()) && text_is_clean(v) && v.len() <= limits.max_value_bytes
        })
}

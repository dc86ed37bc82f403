//! The declaration validator and the output checker, against the rules
//! written again here: what they accept must be valid, and what they refuse
//! must break a rule.

#![no_main]

use std::collections::BTreeSet;

use dsh_env::{Declaration, DshKey, Limits, RESERVED_KEYS, RawDeclaration};
use libfuzzer_sys::fuzz_target;

type Input = (
    String,
    Vec<(String, String)>,
    Vec<(String, String)>,
    (u8, u8, u16, u16),
);

fn key_is_valid(key: &str) -> bool {
    let Some(suffix) = key.strip_prefix("DSH_") else {
        return false;
    };
    let mut bytes = suffix.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_uppercase())
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn line_ok(s: &str, max: usize) -> bool {
    !s.trim().is_empty() && s.len() <= max && !s.chars().any(char::is_control)
}

fuzz_target!(|input: Input| {
    let (name, keys, pairs, (max_keys, max_pairs, max_value, max_output)) = input;
    let limits = Limits {
        max_keys: usize::from(max_keys % 16),
        max_pairs: usize::from(max_pairs % 16),
        max_value_bytes: usize::from(max_value),
        max_output_bytes: usize::from(max_output),
        ..Limits::default()
    };
    let raw = RawDeclaration { name, keys };

    let unique = raw
        .keys
        .iter()
        .map(|(k, _)| k)
        .collect::<BTreeSet<_>>()
        .len()
        == raw.keys.len();
    let sound = line_ok(&raw.name, 128)
        && raw.keys.len() <= limits.max_keys
        && unique
        && raw.keys.iter().all(|(k, d)| {
            key_is_valid(k) && !RESERVED_KEYS.contains(&k.as_str()) && line_ok(d, 1024)
        });
    let problems = Declaration::problems(&raw, &limits);
    assert_eq!(problems.is_empty(), sound, "{problems:?}");
    for problem in &problems {
        assert!(!problem.to_string().chars().any(char::is_control));
    }
    for (key, _) in &raw.keys {
        assert_eq!(DshKey::new(key.as_str()).is_ok(), key_is_valid(key));
    }
    let Ok(declaration) = Declaration::validate(raw.clone(), &limits) else {
        assert!(!sound);
        return;
    };
    for (key, _) in declaration.keys() {
        assert!(key_is_valid(key.as_str()) && !key.is_reserved());
    }

    let declared: BTreeSet<&str> = declaration.keys().map(|(k, _)| k.as_str()).collect();
    let total: usize = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
    let unique = pairs.iter().map(|(k, _)| k).collect::<BTreeSet<_>>().len() == pairs.len();
    let sound = pairs.len() <= limits.max_pairs
        && total <= limits.max_output_bytes
        && unique
        && pairs.iter().all(|(k, v)| {
            declared.contains(k.as_str()) && !v.contains('\0') && v.len() <= limits.max_value_bytes
        });
    match declaration.check_output(pairs.clone(), &limits) {
        Ok(checked) => {
            assert!(sound, "accepted {pairs:?}");
            assert_eq!(checked.len(), pairs.len());
            for (key, value) in &checked {
                assert!(declared.contains(key.as_str()) && !key.is_reserved());
                assert!(!value.contains('\0'));
            }
        }
        Err(problem) => assert!(!sound, "refused sound output: {problem}"),
    }
});

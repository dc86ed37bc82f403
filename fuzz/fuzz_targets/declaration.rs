//! The declaration validator and the output checker, against the rules
//! written again in `tests/src/rules.rs`: what they accept must be valid, and
//! what they refuse must break a rule.

#![no_main]

use std::collections::BTreeSet;

use dsh_env::{Declaration, DshKey, Limits, RawDeclaration};
use libfuzzer_sys::fuzz_target;

// The oracle the seeded fuzz test uses too (by path: depending on
// dsh-env-tests would build every guest).
#[path = "../../tests/src/rules.rs"]
mod rules;
use rules::{declaration_is_sound, key_is_valid, output_is_sound};

type Input = (
    String,
    Vec<(String, String)>,
    Vec<(String, String)>,
    (u8, u8, u16, u16),
);

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

    let sound = declaration_is_sound(&raw, &limits);
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
    let sound = output_is_sound(&declared, &pairs, &limits);
    match declaration.check_output(pairs.clone(), &limits) {
        Ok(checked) => {
            assert!(sound, "accepted {pairs:?}");
            assert_eq!(checked.len(), pairs.len());
            for (key, value) in &checked {
                assert!(declared.contains(key.as_str()) && !key.is_reserved());
                assert!(rules::text_is_clean(value));
            }
        }
        Err(problem) => assert!(!sound, "refused sound output: {problem}"),
    }
});

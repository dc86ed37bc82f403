//! Target 2: the declaration validator, the checker of resolver output, and
//! the `DSH_*` key rule under both, against the oracle in
//! `dsh_env_tests::rules`.

use std::collections::BTreeSet;
use std::time::Instant;

use dsh_env::{Declaration, DshKey, Limits, OutputProblem, RESERVED_KEYS, RawDeclaration};
use dsh_env_tests::rules::{
    declaration_is_sound, is_hidden, key_is_reserved, key_is_valid, output_is_sound, text_is_clean,
};

use super::case::{CaseGuard, each_case};
use super::inputs::{description, key, name, text, valid_key};
use super::mutate::mutate_text;
use super::rng::Rng;

/// Default limits, some of the caps made small.
fn random_limits(rng: &mut Rng) -> Limits {
    let mut limits = Limits::default();
    if rng.one_in(3) {
        limits.max_keys = rng.below(8);
    }
    if rng.one_in(3) {
        limits.max_pairs = rng.below(8);
    }
    if rng.one_in(3) {
        limits.max_value_bytes = rng.below(64);
    }
    if rng.one_in(3) {
        limits.max_output_bytes = rng.below(256);
    }
    limits
}

/// A declaration as a guest might return it, sometimes over `limits`.
fn raw_declaration(rng: &mut Rng, limits: &Limits) -> RawDeclaration {
    let count = match rng.below(10) {
        0 => limits.max_keys + rng.range(1, 3),
        _ => rng.len(8),
    };
    let mut keys: Vec<(String, String)> = Vec::with_capacity(count);
    for _ in 0..count {
        let key = if !keys.is_empty() && rng.one_in(8) {
            keys[rng.below(keys.len())].0.clone()
        } else {
            key(rng)
        };
        keys.push((key, description(rng)));
    }
    RawDeclaration {
        name: name(rng),
        keys,
    }
}

/// Checks the validator against the oracle; returns the declaration if sound.
fn check_declaration(raw: &RawDeclaration, limits: &Limits) -> Option<Declaration> {
    let problems = Declaration::problems(raw, limits);
    let validated = Declaration::validate(raw.clone(), limits);
    assert_eq!(
        problems.is_empty(),
        declaration_is_sound(raw, limits),
        "problems {problems:?}"
    );
    for problem in &problems {
        assert_eq!(problem.contributor, raw.name);
        if let Some(key) = &problem.key {
            assert!(raw.keys.iter().any(|(k, _)| k == key), "{problem:?}");
        }
        let message = problem.to_string();
        assert!(is_one_safe_line(&message), "unsafe message {message:?}");
    }
    match validated {
        Err(err) => {
            assert_eq!(
                Some(&err),
                problems.first(),
                "validate reports the first problem"
            );
            None
        }
        Ok(declaration) => {
            assert!(problems.is_empty());
            assert_eq!(declaration.name(), raw.name);
            assert_eq!(declaration.keys().count(), raw.keys.len());
            for (key, description) in declaration.keys() {
                assert!(DshKey::new(key.as_str()).is_ok(), "{key}");
                assert!(key_is_valid(key.as_str()) && !key.is_reserved(), "{key}");
                assert!(!description.trim().is_empty() && !description.contains('\0'));
            }
            for (key, description) in &raw.keys {
                assert_eq!(
                    declaration.declared(key).map(DshKey::as_str),
                    Some(key.as_str())
                );
                let kept = declaration
                    .keys()
                    .find(|(k, _)| k.as_str() == key)
                    .unwrap()
                    .1;
                assert_eq!(kept, description);
            }
            Some(declaration)
        }
    }
}

/// A sound declaration built from whatever valid keys `raw` holds.
fn sound_part(raw: &RawDeclaration) -> RawDeclaration {
    let mut seen = BTreeSet::new();
    RawDeclaration {
        name: "fuzz".into(),
        keys: (raw.keys.iter())
            .filter(|(k, _)| key_is_valid(k) && !key_is_reserved(k) && seen.insert(k.clone()))
            .map(|(k, _)| (k.clone(), "A key.".to_string()))
            .collect(),
    }
}

/// A resolved value: plain, with a NUL, long, or hostile text.
fn value(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => "plain".into(),
        1 => format!("a\0b{}", text(rng, 8)),
        2 => "v".repeat(rng.range(0, 20_000)),
        _ => text(rng, 300),
    }
}

/// Resolver output: mostly declared keys, some near misses and strangers.
fn output_pairs(rng: &mut Rng, declared: &[String], raw: &RawDeclaration) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for _ in 0..rng.len(12) {
        let key = match rng.below(10) {
            0..=4 if !declared.is_empty() => rng.pick(declared).clone(),
            5 if !raw.keys.is_empty() => rng.pick(&raw.keys).0.clone(),
            6 if !declared.is_empty() => {
                let base = rng.pick(declared).clone();
                rng.pick(&[
                    base.to_lowercase(),
                    format!("{base}\0"),
                    format!(" {base}"),
                    format!("{base}_"),
                    base[..base.len() - 1].to_string(),
                ])
                .clone()
            }
            7 => rng.pick(&RESERVED_KEYS).to_string(),
            _ => key(rng),
        };
        pairs.push((key, value(rng)));
    }
    pairs
}

/// Checks the output checker against the oracle.
fn check_output(declaration: &Declaration, pairs: &[(String, String)], limits: &Limits) {
    let declared: BTreeSet<&str> = declaration.keys().map(|(k, _)| k.as_str()).collect();
    let result = declaration.check_output(pairs.to_vec(), limits);
    assert_eq!(
        result.is_ok(),
        output_is_sound(&declared, pairs, limits),
        "check_output gave {result:?}"
    );
    match result {
        Ok(checked) => {
            assert_eq!(checked.len(), pairs.len());
            let mut seen = BTreeSet::new();
            for ((key, value), (raw_key, raw_value)) in checked.iter().zip(pairs) {
                assert_eq!((key.as_str(), value), (raw_key.as_str(), raw_value));
                assert!(
                    DshKey::new(key.as_str()).is_ok() && !key.is_reserved(),
                    "{key}"
                );
                assert!(declared.contains(key.as_str()), "undeclared {key} accepted");
                assert!(text_is_clean(value), "control character accepted in {key}");
                assert!(value.len() <= limits.max_value_bytes);
                assert!(seen.insert(key.clone()), "{key} accepted twice");
            }
        }
        Err(problem) => {
            let named = match &problem {
                OutputProblem::UndeclaredKey(k) | OutputProblem::DuplicateKey(k) => Some(k),
                OutputProblem::ControlInValue { key, .. }
                | OutputProblem::ValueTooLarge { key, .. } => Some(key),
                _ => None,
            };
            if let Some(key) = named {
                assert!(pairs.iter().any(|(k, _)| k == key), "{problem:?}");
            }
            if let OutputProblem::UndeclaredKey(k) = &problem {
                assert!(!declared.contains(k.as_str()));
            }
            let _ = problem.to_string();
        }
    }
}

#[test]
fn fuzz_declaration_validator_and_output_checker() {
    let start = Instant::now();
    let (mut sound, mut outputs, mut total) = (0, 0, 0);
    for (case, mut rng) in each_case("declaration", 3000) {
        let limits = random_limits(&mut rng);
        let raw = raw_declaration(&mut rng, &limits);
        let input = (&raw, &limits);
        let _guard = CaseGuard::new("declaration", case, &input);
        sound += usize::from(check_declaration(&raw, &limits).is_some());
        total += 1;

        let part = sound_part(&raw);
        let declaration = check_declaration(&part, &Limits::default())
            .expect("valid, unique, unreserved keys with good descriptions are sound");
        let declared: Vec<String> = part.keys.iter().map(|(k, _)| k.clone()).collect();
        for _ in 0..4 {
            let pairs = output_pairs(&mut rng, &declared, &raw);
            let output_limits = random_limits(&mut rng);
            let _guard = CaseGuard::new("declaration-output", case, &pairs);
            check_output(&declaration, &pairs, &output_limits);
            outputs += 1;
        }
    }
    println!(
        "declaration: {total} cases, {sound} sound, {outputs} outputs checked, in {:?}",
        start.elapsed()
    );
}

#[test]
fn fuzz_key_rule() {
    for (case, mut rng) in each_case("key", 20_000) {
        let candidate = match rng.below(3) {
            0 => key(&mut rng),
            _ => {
                let valid = valid_key(&mut rng);
                mutate_text(&mut rng, &valid, b"DSH_")
            }
        };
        let _guard = CaseGuard::new("key", case, &candidate);
        let checked = DshKey::new(candidate.as_str());
        assert_eq!(checked.is_ok(), key_is_valid(&candidate), "{checked:?}");
        if let Ok(key) = checked {
            assert_eq!(key.as_str(), candidate);
            assert_eq!(key.is_reserved(), key_is_reserved(&candidate));
        }
    }
}

/// Whether a printed message could not paint on a terminal or split a log line.
fn is_one_safe_line(message: &str) -> bool {
    !message.chars().any(char::is_control)
}

/// The host's display rule (ICU's categories) and the oracle's own table
/// agree on every code point.
#[test]
fn the_display_rule_matches_the_oracle_on_every_character() {
    for c in (0..=0x10ffff).filter_map(char::from_u32) {
        assert_eq!(
            dsh_env_support::input::hidden_from_review(c),
            is_hidden(c),
            "U+{:04X}",
            u32::from(c)
        );
    }
}

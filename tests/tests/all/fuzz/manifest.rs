//! Target 1: the manifest parser (TOML from the user's disk).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dsh_env::Manifest;

use super::case::{CaseGuard, each_case};
use super::inputs::{atom, text};
use super::mutate::mutate_text;
use super::rng::Rng;

/// A manifest and, when every part of it is well-formed, what it must parse to.
struct ManifestCase {
    text: String,
    expected: Option<ExpectedManifest>,
}

#[derive(Debug, PartialEq)]
struct ExpectedManifest {
    home: Option<String>,
    contributors: Vec<(String, BTreeMap<String, String>, Option<u64>)>,
}

/// A TOML basic string holding `s` exactly.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A manifest whose parts are each well-formed or not.
fn manifest_case(rng: &mut Rng) -> ManifestCase {
    let mut doc = String::new();
    let mut clean = true;
    let home = rng.one_in(2).then(|| match rng.below(3) {
        0 => "~/.dsh".to_string(),
        _ => text(rng, 200),
    });
    if let Some(home) = &home {
        doc.push_str(&format!("home = {}\n", toml_string(home)));
    }
    let mut contributors = Vec::new();
    for _ in 0..rng.len(4) {
        let path = match rng.below(3) {
            0 => "agent_lineage.wasm".to_string(),
            _ => text(rng, 200),
        };
        doc.push_str(&format!(
            "\n[[contributor]]\npath = {}\n",
            toml_string(&path)
        ));
        if rng.one_in(2) {
            let policy = rng.pick(&["fail", "omit", "Omit", "ignore", ""]);
            clean &= matches!(*policy, "fail" | "omit");
            doc.push_str(&format!("on_error = \"{policy}\"\n"));
        }
        let mut config = BTreeMap::new();
        if rng.one_in(2) {
            doc.push_str("[contributor.config]\n");
            for _ in 0..rng.len(4) {
                let (k, v) = (text(rng, 40), text(rng, 200));
                let line = format!("{} = {}\n", toml_string(&k), toml_string(&v));
                // A key given twice is an error; remember the first only.
                if config.contains_key(&k) {
                    clean = false;
                }
                config.entry(k).or_insert(v);
                doc.push_str(&line);
            }
        }
        let mut deadline = None;
        if rng.one_in(2) {
            doc.push_str("[contributor.limits]\n");
            let fields = [
                "deadline_ms",
                "memory_mib",
                "max_keys",
                "max_pairs",
                "max_value_bytes",
                "max_output_bytes",
                "max_error_bytes",
            ];
            let mut used = BTreeSet::new();
            for _ in 0..rng.len(4) {
                let field = *rng.pick(&fields);
                let (value, ok) = limit_value(rng, field);
                clean &= ok && used.insert(field);
                if field == "deadline_ms" && ok {
                    deadline = toml_integer(&value);
                }
                doc.push_str(&format!("{field} = {value}\n"));
            }
        }
        contributors.push((path, config, deadline));
    }
    let expected = clean.then_some(ExpectedManifest { home, contributors });
    ManifestCase {
        text: doc,
        expected,
    }
}

/// The value of a TOML integer literal in range for `u64`.
fn toml_integer(literal: &str) -> Option<u64> {
    let digits = literal.replace('_', "");
    let digits = digits.strip_prefix('+').unwrap_or(&digits);
    match digits.get(..2) {
        Some("0x") => u64::from_str_radix(&digits[2..], 16).ok(),
        Some("0o") => u64::from_str_radix(&digits[2..], 8).ok(),
        Some("0b") => u64::from_str_radix(&digits[2..], 2).ok(),
        _ => digits.parse().ok(),
    }
}

/// A value for a limit field, and whether it is in range: a whole number
/// from `deadline_ms` 1 to 3,600,000, `memory_mib` 1 to 512, `max_keys` and
/// `max_pairs` up to 1,048,576, the `max_*_bytes` up to 512 MiB (README,
/// "The manifest").
fn limit_value(rng: &mut Rng, field: &str) -> (String, bool) {
    let range = match field {
        "deadline_ms" => 1..=3_600_000,
        "memory_mib" => 1..=512,
        "max_keys" | "max_pairs" => 0..=1 << 20,
        _ => 0..=512 << 20,
    };
    let value = *rng.pick(&[
        "0",
        "1",
        "64",
        "512",
        "513",
        "1_000",
        "1_048_576",
        "1_048_577",
        "3_600_000",
        "3_600_001",
        "536870912",
        "536870913",
        "9223372036854775807",
        "18446744073709551615",
        "99999999999999999999999",
        "-1",
        "+5",
        "0x10",
        "0o7",
        "0b1",
        "1.5",
        "1e3",
        "inf",
        "nan",
        "\"5\"",
        "true",
        "[]",
        "{}",
        "1979-05-27",
    ]);
    // Every integer literal above is one `toml_integer` reads; the rest are
    // no integer at all.
    let ok = toml_integer(value).is_some_and(|n| range.contains(&n));
    (value.to_string(), ok)
}

/// Line-level edits that keep the text UTF-8: unknown fields, odd tables,
/// duplicated or dropped lines, huge numbers, odd Unicode, deep nesting.
fn mutate_manifest_text(rng: &mut Rng, doc: &str) -> String {
    let mut lines: Vec<String> = doc.lines().map(str::to_string).collect();
    for _ in 0..rng.range(1, 3) {
        let at = rng.below(lines.len() + 1);
        match rng.below(9) {
            0 => lines.insert(
                at,
                format!(
                    "{} = \"blue\"",
                    rng.pick(&["colour", "Path", "paths", "home2", "\u{feff}path"])
                ),
            ),
            1 => lines.insert(
                at,
                rng.pick(&[
                    "[[contributor]]",
                    "[contributor]",
                    "[contributor.limits]",
                    "[contributor.config]",
                    "[contributor.grants]",
                    "[[contributor.limits]]",
                    "[home]",
                    "home = 1",
                    "contributor = []",
                    "contributor = 5",
                    "a.b.c = 1",
                    "x = { y = [1, { z = 2 }] }",
                    "\"quoted key\" = 1",
                    "path = 'lit\\eral'",
                    "path = \"\"\"\nmulti\nline\"\"\"",
                    "deadline_ms = 18446744073709551616",
                    "memory_mib = 9223372036854775807",
                ])
                .to_string(),
            ),
            2 if !lines.is_empty() => {
                let line = lines[rng.below(lines.len())].clone();
                lines.insert(at, line);
            }
            3 if !lines.is_empty() => {
                lines.remove(rng.below(lines.len()));
            }
            4 => {
                let depth = rng.range(1, 200);
                lines.insert(
                    at,
                    format!("deep = {}1{}", "[".repeat(depth), "]".repeat(depth)),
                );
            }
            5 => {
                let depth = rng.range(1, 200);
                lines.insert(
                    at,
                    format!("deep = {}1{}", "{ a = ".repeat(depth), " }".repeat(depth)),
                );
            }
            6 if !lines.is_empty() => {
                let i = rng.below(lines.len());
                let pos = lines[i].floor_char_boundary(rng.below(lines[i].len() + 1));
                lines[i].insert_str(pos, atom(rng));
            }
            7 => lines.insert(at, format!("{} = {}", atom(rng), atom(rng))),
            _ => lines.insert(at, text(rng, 80)),
        }
    }
    lines.join(*rng.pick(&["\n", "\r\n", "\n\n"]))
}

/// Checks what the parser makes of `text`; returns whether it accepted it.
fn check_manifest(text: &str, expected: Option<&ExpectedManifest>) -> bool {
    let base = PathBuf::from("/base");
    let parsed = Manifest::parse(text, "m.toml", base.clone());
    let accepted = parsed.is_ok();
    let again = Manifest::parse(text, "m.toml", base.clone());
    match (&parsed, &again) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "parsing is deterministic"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "parsing is deterministic"),
        _ => panic!("parsing the same text twice gave different outcomes"),
    }
    match parsed {
        Ok(manifest) => {
            assert_eq!(
                (manifest.origin.as_str(), &manifest.base_dir),
                ("m.toml", &base)
            );
            for entry in &manifest.contributors {
                let limits = entry
                    .limits()
                    .expect("an accepted manifest has valid limits");
                assert!(limits.deadline > Duration::ZERO);
                assert!(limits.memory_bytes > 0 && limits.memory_bytes <= 512 << 20);
                assert_eq!(
                    manifest.component_path(entry),
                    entry.path.as_ref().map(|p| base.join(p))
                );
            }
            if let Some(expected) = expected {
                let got = ExpectedManifest {
                    home: manifest.home.clone(),
                    contributors: (manifest.contributors.iter())
                        .map(|e| {
                            let deadline = e.limits.deadline_ms;
                            (
                                (e.path.as_ref())
                                    .map(|p| p.to_string_lossy().into_owned())
                                    .unwrap_or_default(),
                                e.config.clone(),
                                deadline,
                            )
                        })
                        .collect(),
                };
                assert_eq!(
                    &got, expected,
                    "a well-formed manifest parses to what it says"
                );
            }
        }
        Err(err) => {
            let message = err.to_string();
            assert!(message.starts_with("invalid manifest m.toml"), "{message}");
            assert!(
                expected.is_none(),
                "a well-formed manifest was refused: {message}"
            );
        }
    }
    accepted
}

#[test]
fn fuzz_manifest_parser() {
    let start = Instant::now();
    let (mut accepted, mut total) = (0, 0);
    for (case, mut rng) in each_case("manifest", 1500) {
        let generated = manifest_case(&mut rng);
        let (doc, expected) = match rng.below(5) {
            // As generated (well-formed or not).
            0 => (generated.text, generated.expected),
            // Line-level edits.
            1 | 2 => (mutate_manifest_text(&mut rng, &generated.text), None),
            // Byte-level edits, read back as (lossy) UTF-8.
            3 => (
                mutate_text(&mut rng, &generated.text, b"[[contributor]]\n"),
                None,
            ),
            // Anything.
            _ => (text(&mut rng, 4000), None),
        };
        let _guard = CaseGuard::new("manifest", case, &doc).with_raw(doc.as_bytes());
        accepted += usize::from(check_manifest(&doc, expected.as_ref()));
        total += 1;
        // The same text cut at every 7th character boundary.
        if case.is_multiple_of(50) {
            for (i, (at, _)) in doc.char_indices().enumerate() {
                if i.is_multiple_of(7) {
                    check_manifest(&doc[..at], None);
                }
            }
        }
    }
    println!(
        "manifest: {total} cases, {accepted} accepted, in {:?}",
        start.elapsed()
    );
}

#[test]
fn manifest_parser_survives_deep_nesting() {
    for depth in [1_000, 10_000, 100_000] {
        for text in [
            format!("x = {}{}", "[".repeat(depth), "]".repeat(depth)),
            format!("x = {}1{}", "{a=".repeat(depth), "}".repeat(depth)),
            format!("x = {}", "[".repeat(depth)),
            format!("{} = 1", vec!["a"; depth].join(".")),
        ] {
            let _guard = CaseGuard::new("manifest-nesting", depth as u64, &text);
            let result = Manifest::parse(&text, "m.toml", PathBuf::from("/"));
            assert!(result.is_err(), "unknown field `x` or `a`");
        }
    }
}

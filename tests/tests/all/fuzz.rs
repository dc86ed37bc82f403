//! Deterministic, dependency-free fuzzing of every parser that takes input the
//! host does not control: the manifest, declarations and resolver output, the
//! execution JSON, and component bytes. Each must return `Ok` or `Err` and
//! never panic, and what it accepts must obey the documented rules.
//!
//! Every case has its own generator, seeded from the run's seed, the target
//! and the case number, so a failure reproduces alone:
//!
//! ```text
//! DSH_FUZZ_SEED=<seed> DSH_FUZZ_CASE=<case> cargo test -p dsh-env-tests --test fuzz <target>
//! ```
//!
//! - `DSH_FUZZ_SEED`: the run's seed (decimal or `0x` hex; a fixed default).
//! - `DSH_FUZZ_CASE`: run only this case of each target.
//! - `DSH_FUZZ_SCALE`: multiply every target's case count (e.g. 20 for a soak).
//! - `DSH_FUZZ_TRACE=1`: print each case before it runs (with `--nocapture`),
//!   to name the input behind a crash that kills the process.
//!
//! On a panic, the failing case is printed and its whole input is written to
//! `$CARGO_TARGET_TMPDIR/fuzz-failure-<target>-<case>`. Deeper, coverage-guided
//! runs of the same parsers live in `fuzz/` (cargo-fuzz).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dsh_env::{
    Declaration, DshKey, Limits, Manifest, OutputProblem, RESERVED_KEYS, RawDeclaration,
    ToolExecution,
};
use dsh_env_tests::rules::{
    declaration_is_sound, key_is_reserved, key_is_valid, output_is_sound, text_is_clean,
};
use dsh_env_tests::{agent_call, artifacts};

// ---------------------------------------------------------------------------
// The generator, the run's settings, and the per-case failure report.

const DEFAULT_SEED: u64 = 0x05ee_d0f0_d5e1_2025;

/// SplitMix64: tiny, fast, and good enough to drive a fuzzer.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True once in `n` times.
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    /// A length skewed towards small values, sometimes up to `max`.
    fn len(&mut self, max: usize) -> usize {
        match self.below(10) {
            0..=5 => self.below(8.min(max) + 1),
            6..=8 => self.below(64.min(max) + 1),
            _ => self.below(max + 1),
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    let text = text.trim();
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

fn seed() -> u64 {
    env_u64("DSH_FUZZ_SEED").unwrap_or(DEFAULT_SEED)
}

/// The cases of a target: `0..count` scaled, or the one `DSH_FUZZ_CASE`.
fn cases(count: u64) -> std::ops::Range<u64> {
    match env_u64("DSH_FUZZ_CASE") {
        Some(case) => case..case + 1,
        None => 0..count * env_u64("DSH_FUZZ_SCALE").unwrap_or(1).max(1),
    }
}

/// The generator of one case: independent of every other case.
fn case_rng(target: &str, case: u64) -> Rng {
    let mut mix = seed() ^ 0xcbf2_9ce4_8422_2325;
    for byte in target.bytes() {
        mix = (mix ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut rng = Rng::new(mix ^ case.wrapping_mul(0xd1b5_4a32_d192_ed03));
    rng.next_u64();
    rng
}

fn tracing_cases() -> bool {
    std::env::var_os("DSH_FUZZ_TRACE").is_some()
}

/// Reports the case, and saves its input, if the case panics.
struct CaseGuard<'a> {
    target: &'static str,
    case: u64,
    input: &'a dyn Debug,
    raw: Option<&'a [u8]>,
}

impl<'a> CaseGuard<'a> {
    fn new(target: &'static str, case: u64, input: &'a dyn Debug) -> Self {
        if tracing_cases() {
            println!("fuzz {target} case {case}: {}", abbreviate(input));
        }
        CaseGuard {
            target,
            case,
            input,
            raw: None,
        }
    }

    /// Saves these bytes (instead of the debug form) on failure.
    fn with_raw(mut self, raw: &'a [u8]) -> Self {
        self.raw = Some(raw);
        self
    }
}

impl Drop for CaseGuard<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let (target, case, seed) = (self.target, self.case, seed());
        let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fuzz-failure-{target}-{case}"));
        let full = match self.raw {
            Some(raw) => raw.to_vec(),
            None => format!("{:?}", self.input).into_bytes(),
        };
        let saved = std::fs::write(&file, full).is_ok();
        eprintln!(
            "\nFUZZ FAILURE: target {target}, case {case}, seed {seed:#x}\n\
             reproduce: DSH_FUZZ_SEED={seed:#x} DSH_FUZZ_CASE={case} \
             cargo test -p dsh-env-tests --test fuzz {target}\n\
             input{}: {}",
            if saved {
                format!(" (saved to {})", file.display())
            } else {
                String::new()
            },
            abbreviate(self.input),
        );
    }
}

/// The debug form of `input`, cut to a readable size.
fn abbreviate(input: &dyn Debug) -> String {
    let text = format!("{input:?}");
    if text.len() <= 2000 {
        return text;
    }
    let mut end = 2000;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

// ---------------------------------------------------------------------------
// Generators of hostile text.

/// Pieces that break naive parsers and checks: controls, odd Unicode,
/// metacharacters of TOML and JSON, numbers at the edges.
const ATOMS: &[&str] = &[
    "a",
    "Z",
    "0",
    "_",
    "-",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\0",
    "\x01",
    "\x07",
    "\x1b[31m",
    "\x1b]0;title\x07",
    "\x7f",
    "\u{85}",
    "\u{9b}",
    "\u{a0}",
    "\u{200b}",
    "\u{200d}",
    "\u{2028}",
    "\u{2029}",
    "\u{202e}",
    "\u{3000}",
    "\u{feff}",
    "\u{fffd}",
    "\u{ffff}",
    "\u{10ffff}",
    "\u{e000}",
    "é",
    "e\u{301}",
    "ß",
    "İ",
    "ı",
    "\u{212a}",
    "Ｄ",
    "日本語",
    "🦀",
    "👩‍👩‍👧",
    "\"",
    "'",
    "\\",
    "\\u0000",
    "\\ud800",
    "\\U0010FFFF",
    "'''",
    "\"\"\"",
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    "=",
    ",",
    ".",
    ":",
    "#",
    "~",
    "/",
    "..",
    "DSH_",
    "dsh_",
    "DSH_HOME",
    "-1",
    "0x7f",
    "1e999",
    "-0.0",
    "nan",
    "inf",
    "9223372036854775807",
    "18446744073709551616",
    "1979-05-27T07:32:00Z",
    "true",
    "null",
];

fn atom(rng: &mut Rng) -> &'static str {
    ATOMS[rng.below(ATOMS.len())]
}

/// Text of up to about `max` bytes, mostly hostile atoms, sometimes random
/// characters, sometimes one piece repeated to a great length.
fn text(rng: &mut Rng, max: usize) -> String {
    let mut out = String::new();
    match rng.below(8) {
        0 => {}
        1 => {
            let piece = atom(rng);
            let times = rng.len(max / piece.len().max(1));
            out = piece.repeat(times);
        }
        2 => {
            for _ in 0..rng.len(max / 4) {
                out.push(random_char(rng));
            }
        }
        3 => {
            for _ in 0..rng.len(max) {
                out.push(char::from(rng.range(0x20, 0x7e) as u8));
            }
        }
        _ => {
            for _ in 0..rng.len(64) {
                if out.len() >= max {
                    break;
                }
                out.push_str(atom(rng));
            }
        }
    }
    out
}

/// Any `char`, weighted towards the ranges that matter.
fn random_char(rng: &mut Rng) -> char {
    let code = match rng.below(6) {
        0 => rng.below(0x20) as u32,
        1 => rng.range(0x20, 0x7f) as u32,
        2 => rng.range(0x80, 0x7ff) as u32,
        3 => rng.range(0x800, 0xffff) as u32,
        4 => rng.range(0x1_0000, 0x10_ffff) as u32,
        _ => rng.range(0x7f, 0x9f) as u32,
    };
    char::from_u32(code).unwrap_or('\u{fffd}')
}

/// A `DSH_*` key that is valid, reserved, nearly valid, or anything at all.
fn key(rng: &mut Rng) -> String {
    match rng.below(12) {
        0..=3 => valid_key(rng),
        4 => rng.pick(&RESERVED_KEYS).to_string(),
        5 => format!("{}{}", valid_key(rng), atom(rng)),
        6 => format!("{}{}", atom(rng), valid_key(rng)),
        7 => rng
            .pick(&[
                "DSH_",
                "dsh_X",
                "Dsh_X",
                "DSH_x",
                "DSH_1X",
                "DSH__X",
                "DSH_É",
                "DSH_A-B",
                "DSH_A B",
                "DSH_A\0",
                "DSH_\u{212a}",
                "DSH_\u{130}",
                "ＤＳＨ_A",
                "DSH",
                "DSH_A=B",
                "",
                " ",
            ])
            .to_string(),
        8 => {
            let len = match rng.below(20) {
                0 => 70_000,
                _ => rng.range(100, 2_000),
            };
            format!("DSH_{}", "A".repeat(len))
        }
        9 => valid_key(rng).to_lowercase(),
        _ => text(rng, 64),
    }
}

fn valid_key(rng: &mut Rng) -> String {
    let mut key = String::from("DSH_");
    key.push(char::from(b'A' + rng.below(26) as u8));
    for _ in 0..rng.len(24) {
        key.push(*rng.pick(&['A', 'Q', 'Z', '0', '9', '_']));
    }
    key
}

fn name(rng: &mut Rng) -> String {
    match rng.below(6) {
        0..=2 => format!("contrib-{}", rng.below(1000)),
        3 => "n".repeat(rng.range(120, 140)),
        _ => text(rng, 300),
    }
}

fn description(rng: &mut Rng) -> String {
    match rng.below(6) {
        0..=2 => "A fine description.".to_string(),
        3 => "d".repeat(rng.range(1020, 1030)),
        _ => text(rng, 2000),
    }
}

/// Whether a printed message could not paint on a terminal or split a log line.
fn is_one_safe_line(message: &str) -> bool {
    !message.chars().any(char::is_control)
}

// ---------------------------------------------------------------------------
// Byte-level mutation, shared by the text and component targets.

/// Applies one to a few random edits: bit flips, byte sets, truncation,
/// insertion, deletion, duplication, splicing from `donor`, and overwrites
/// with interesting integers (LEB128 and little-endian edges).
fn mutate(rng: &mut Rng, input: &[u8], donor: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.range(1, 4) {
        let len = out.len();
        match rng.below(10) {
            0 | 1 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            2 if len > 0 => {
                for _ in 0..rng.range(1, 16) {
                    let (i, random) = (rng.below(len), rng.byte());
                    out[i] = *rng.pick(&[0x00, 0x01, 0x7f, 0x80, 0xff, random]);
                }
            }
            3 if len > 0 => out.truncate(rng.below(len)),
            4 => {
                let at = rng.below(len + 1);
                let junk: Vec<u8> = (0..rng.len(64)).map(|_| rng.byte()).collect();
                out.splice(at..at, junk);
            }
            5 if len > 0 => {
                let start = rng.below(len);
                let end = (start + rng.len(256)).min(len);
                out.drain(start..end);
            }
            6 if len > 0 => {
                let start = rng.below(len);
                let end = (start + rng.len(512)).min(len);
                let chunk = out[start..end].to_vec();
                let at = rng.below(len + 1);
                out.splice(at..at, chunk);
            }
            7 if !donor.is_empty() => {
                let start = rng.below(donor.len());
                let end = (start + rng.len(1024)).min(donor.len());
                let at = rng.below(len + 1);
                let cut = (at + rng.len(64)).min(len);
                out.splice(at..cut, donor[start..end].iter().copied());
            }
            8 if len > 0 => {
                let edges: &[&[u8]] = &[
                    &[0xff, 0xff, 0xff, 0xff, 0x0f],
                    &[0x80, 0x80, 0x80, 0x80, 0x80, 0x00],
                    &[0xff, 0xff, 0xff, 0xff],
                    &[0x00, 0x00, 0x00, 0x80],
                    &[0x7f],
                    &[0x00],
                ];
                let edge = rng.pick(edges);
                let at = rng.below(len);
                let end = (at + edge.len()).min(len);
                out.splice(at..end, edge.iter().copied());
            }
            _ => {
                let at = rng.below(len + 1);
                out.splice(at..at, atom(rng).bytes());
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Target 1: the manifest parser.

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

/// A value for a limit field, and whether it is in range.
fn limit_value(rng: &mut Rng, field: &str) -> (String, bool) {
    let cap = if field == "memory_mib" { 512 } else { u64::MAX };
    let (value, ok): (&str, bool) = *rng.pick(&[
        ("0", field != "deadline_ms" && field != "memory_mib"),
        ("1", true),
        ("64", true),
        ("512", true),
        ("513", cap > 512),
        ("1_000", cap > 512),
        ("9223372036854775807", cap > 512),
        ("18446744073709551615", false),
        ("99999999999999999999999", false),
        ("-1", false),
        ("+5", true),
        ("0x10", true),
        ("0o7", true),
        ("0b1", true),
        ("1.5", false),
        ("1e3", false),
        ("inf", false),
        ("nan", false),
        ("\"5\"", false),
        ("true", false),
        ("[]", false),
        ("{}", false),
        ("1979-05-27", false),
    ]);
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
                let pos = floor_char_boundary(&lines[i], rng.below(lines[i].len() + 1));
                lines[i].insert_str(pos, atom(rng));
            }
            7 => lines.insert(at, format!("{} = {}", atom(rng), atom(rng))),
            _ => lines.insert(at, text(rng, 80)),
        }
    }
    lines.join(*rng.pick(&["\n", "\r\n", "\n\n"]))
}

fn floor_char_boundary(s: &str, mut at: usize) -> usize {
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn check_manifest(text: &str, expected: Option<&ExpectedManifest>) {
    let base = PathBuf::from("/base");
    let parsed = Manifest::parse(text, "m.toml", base.clone());
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
                assert_eq!(manifest.component_path(entry), base.join(&entry.path));
            }
            if let Some(expected) = expected {
                let got = ExpectedManifest {
                    home: manifest.home.clone(),
                    contributors: (manifest.contributors.iter())
                        .map(|e| {
                            let deadline = e.limits.deadline_ms;
                            (
                                e.path.to_string_lossy().into_owned(),
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
}

#[test]
fn fuzz_manifest_parser() {
    let start = Instant::now();
    let (mut accepted, mut total) = (0, 0);
    for case in cases(1500) {
        let mut rng = case_rng("manifest", case);
        let generated = manifest_case(&mut rng);
        let (doc, expected) = match rng.below(5) {
            // As generated (well-formed or not).
            0 => (generated.text, generated.expected),
            // Line-level edits.
            1 | 2 => (mutate_manifest_text(&mut rng, &generated.text), None),
            // Byte-level edits, read back as (lossy) UTF-8.
            3 => {
                let bytes = mutate(&mut rng, generated.text.as_bytes(), b"[[contributor]]\n");
                (String::from_utf8_lossy(&bytes).into_owned(), None)
            }
            // Anything.
            _ => (text(&mut rng, 4000), None),
        };
        let _guard = CaseGuard::new("manifest", case, &doc).with_raw(doc.as_bytes());
        let parsed = Manifest::parse(&doc, "m.toml", PathBuf::from("/base")).is_ok();
        accepted += usize::from(parsed);
        total += 1;
        check_manifest(&doc, expected.as_ref());
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

// ---------------------------------------------------------------------------
// Target 2: the declaration validator and the output checker.

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

fn value(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => "plain".into(),
        1 => format!("a\0b{}", text(rng, 8)),
        2 => "v".repeat(rng.range(0, 20_000)),
        _ => text(rng, 300),
    }
}

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
    let (mut sound, mut outputs) = (0, 0);
    for case in cases(3000) {
        let mut rng = case_rng("declaration", case);
        let limits = random_limits(&mut rng);
        let raw = raw_declaration(&mut rng, &limits);
        let input = (&raw, &limits);
        let _guard = CaseGuard::new("declaration", case, &input);
        sound += usize::from(check_declaration(&raw, &limits).is_some());

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
        "declaration: {} cases, {sound} sound, {outputs} outputs checked, in {:?}",
        cases(3000).count(),
        start.elapsed()
    );
}

#[test]
fn fuzz_key_rule() {
    for case in cases(20_000) {
        let mut rng = case_rng("key", case);
        let candidate = match rng.below(3) {
            0 => key(&mut rng),
            _ => {
                let valid = valid_key(&mut rng);
                let bytes = mutate(&mut rng, valid.as_bytes(), b"DSH_");
                String::from_utf8_lossy(&bytes).into_owned()
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

// ---------------------------------------------------------------------------
// Target 3: the execution JSON parser.

/// A JSON document and, when it is well-formed, what it must parse to.
struct ExecutionCase {
    text: String,
    expected: Option<ToolExecution>,
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A JSON value of the wrong kind for any of the fields (or an odd right one).
fn json_junk(rng: &mut Rng, depth: usize) -> String {
    match rng.below(if depth > 4 { 8 } else { 10 }) {
        0 => "null".into(),
        1 => rng.pick(&["true", "false"]).to_string(),
        2 => rng
            .pick(&[
                "0",
                "-1",
                "4294967295",
                "4294967296",
                "18446744073709551616",
                "1e400",
                "-0",
                "1.0",
                "0.5e-999",
                "123456789012345678901234567890",
            ])
            .to_string(),
        3..=5 => json_string(&text(rng, 100)),
        6 => rng
            .pick(&[
                "\"\\ud800\"",
                "\"\\udc00\\ud800\"",
                "\"\\ud83e\\udd80\"",
                "\"\\u0000\"",
                "\"\\x41\"",
                "\"tab\there\"",
                "'single'",
                "NaN",
                "Infinity",
                "undefined",
            ])
            .to_string(),
        7 => {
            let depth = rng.range(1, 300);
            format!("{}{}", "[".repeat(depth), "]".repeat(depth))
        }
        8 => {
            let items: Vec<String> = (0..rng.len(4)).map(|_| json_junk(rng, depth + 1)).collect();
            format!("[{}]", items.join(","))
        }
        _ => {
            let items: Vec<String> = (0..rng.len(4))
                .map(|_| {
                    format!(
                        "{}:{}",
                        json_string(&text(rng, 20)),
                        json_junk(rng, depth + 1)
                    )
                })
                .collect();
            format!("{{{}}}", items.join(","))
        }
    }
}

/// Whether `junk` is a JSON value serde_json accepts `levels` deep in a document.
fn json_ok_at(junk: &str, levels: usize) -> bool {
    let wrapped = format!("{}{junk}{}", "[".repeat(levels), "]".repeat(levels));
    serde_json::from_str::<serde_json::Value>(&wrapped).is_ok()
}

/// How a field is written: left out, of a wrong kind, twice, or as it should be.
fn push_field(rng: &mut Rng, fields: &mut Vec<String>, name: &str, good: &str) -> bool {
    let name = json_string(name);
    match rng.below(12) {
        0 => false,
        1 => {
            fields.push(format!("{name}:{}", json_junk(rng, 0)));
            false
        }
        2 => {
            fields.push(format!("{name}:{good}"));
            fields.push(format!("{name}:{good}"));
            false
        }
        _ => {
            fields.push(format!("{name}:{good}"));
            true
        }
    }
}

const EXECUTION_FIELDS: [&str; 6] = [
    "callId",
    "rootCallId",
    "name",
    "arguments",
    "background",
    "agent",
];

fn execution_case(rng: &mut Rng) -> ExecutionCase {
    let mut fields: Vec<String> = Vec::new();
    let call_id = text(rng, 60);
    let tool = text(rng, 30);
    let background = rng.one_in(2);
    let mut clean = push_field(rng, &mut fields, "callId", &json_string(&call_id));
    clean &= push_field(rng, &mut fields, "name", &json_string(&tool));
    let mut root_call_id = call_id.clone();
    if rng.one_in(2) {
        let root = text(rng, 60);
        let before = fields.len();
        if push_field(rng, &mut fields, "rootCallId", &json_string(&root)) {
            root_call_id = root;
        } else if fields.len() != before {
            // Written wrongly (not merely left out).
            clean = false;
        }
    }
    if rng.one_in(2) {
        let junk = json_junk(rng, 0);
        clean &= json_ok_at(&junk, 1);
        fields.push(format!("\"arguments\":{junk}"));
    }
    if background || rng.one_in(2) {
        fields.push(format!("\"background\":{background}"));
    }
    let agent = rng.one_in(2).then(|| dsh_env::Agent {
        session_id: text(rng, 40),
        cwd: text(rng, 60),
        parent_session_id: rng.one_in(2).then(|| text(rng, 40)),
        depth: *rng.pick(&[0, 1, 7, u32::MAX]),
    });
    if let Some(agent) = &agent {
        let parent = match &agent.parent_session_id {
            Some(p) => format!(",\"parentId\":{}", json_string(p)),
            None => rng.pick(&["", ",\"parentId\":null"]).to_string(),
        };
        let depth = match agent.depth {
            0 => rng.pick(&["", ",\"depth\":0"]).to_string(),
            d => format!(",\"depth\":{d}"),
        };
        let extra = if rng.one_in(3) {
            let junk = json_junk(rng, 0);
            clean &= json_ok_at(&junk, 3);
            format!(",\"extra\":{junk}")
        } else {
            String::new()
        };
        fields.push(format!(
            "\"agent\":{{\"session\":{{\"header\":{{\"id\":{},\"cwd\":{}{parent}}}{extra}}}{depth}}}",
            json_string(&agent.session_id),
            json_string(&agent.cwd),
        ));
    } else if rng.one_in(3) {
        fields.push("\"agent\":null".into());
    }
    if rng.one_in(3) {
        let (name, junk) = (text(rng, 20), json_junk(rng, 0));
        clean &= json_ok_at(&junk, 1) && !EXECUTION_FIELDS.contains(&name.as_str());
        fields.push(format!("{}:{junk}", json_string(&name)));
    }
    let turn = rng.below(fields.len().max(1));
    fields.rotate_left(turn);
    let ws = *rng.pick(&["", " ", "\n\t "]);
    let doc = format!("{ws}{{{ws}{}{ws}}}{ws}", fields.join(&format!(",{ws}")));
    // Text fields with a control character (but TAB) are refused.
    let texts = [&call_id, &root_call_id, &tool];
    let agent_texts = agent.iter().flat_map(|a| {
        [
            Some(&a.session_id),
            Some(&a.cwd),
            a.parent_session_id.as_ref(),
        ]
        .into_iter()
        .flatten()
    });
    clean &= texts
        .into_iter()
        .chain(agent_texts)
        .all(|t| text_is_clean(t));
    let expected = clean.then_some(ToolExecution {
        call_id,
        root_call_id,
        tool,
        mode: if background {
            dsh_env::Mode::Background
        } else {
            dsh_env::Mode::Foreground
        },
        agent,
    });
    ExecutionCase {
        text: doc,
        expected,
    }
}

/// The canonical JSON of `execution`, which must parse back to it.
fn execution_json(execution: &ToolExecution) -> String {
    let agent = execution.agent.as_ref().map(|agent| {
        serde_json::json!({
            "session": {"header": {
                "id": agent.session_id,
                "cwd": agent.cwd,
                "parentId": agent.parent_session_id,
            }},
            "depth": agent.depth,
        })
    });
    serde_json::json!({
        "callId": execution.call_id,
        "rootCallId": execution.root_call_id,
        "name": execution.tool,
        "background": execution.mode == dsh_env::Mode::Background,
        "agent": agent,
    })
    .to_string()
}

fn check_execution(text: &str, expected: Option<&ToolExecution>) {
    match ToolExecution::from_json(text) {
        Ok(execution) => {
            if let Some(expected) = expected {
                assert_eq!(&execution, expected);
            }
            let round_trip = ToolExecution::from_json(&execution_json(&execution)).unwrap();
            assert_eq!(round_trip, execution, "round trip");
        }
        Err(err) => {
            let message = err.to_string();
            assert!(message.starts_with("invalid execution JSON"), "{message}");
            assert!(expected.is_none(), "well-formed JSON refused: {message}");
        }
    }
}

#[test]
fn fuzz_execution_json() {
    let start = Instant::now();
    let (mut accepted, mut total) = (0, 0);
    let reference = r#"{"callId":"c2","rootCallId":"c1","name":"bash","arguments":{"command":"env","env":{"DSH_X":"1"},"stdin":"secret"},"background":true,"agent":{"session":{"header":{"id":"s1","cwd":"/w","parentId":"s0"}},"depth":1}}"#;
    for case in cases(4000) {
        let mut rng = case_rng("execution", case);
        let generated = execution_case(&mut rng);
        let (doc, expected) = match rng.below(5) {
            0 | 1 => (generated.text, generated.expected),
            2 => {
                let bytes = mutate(&mut rng, generated.text.as_bytes(), reference.as_bytes());
                (String::from_utf8_lossy(&bytes).into_owned(), None)
            }
            3 => {
                let bytes = mutate(&mut rng, reference.as_bytes(), generated.text.as_bytes());
                (String::from_utf8_lossy(&bytes).into_owned(), None)
            }
            _ => (json_junk(&mut rng, 0), None),
        };
        let _guard = CaseGuard::new("execution", case, &doc).with_raw(doc.as_bytes());
        accepted += usize::from(ToolExecution::from_json(&doc).is_ok());
        total += 1;
        check_execution(&doc, expected.as_ref());
    }
    for depth in [127, 128, 129, 10_000, 1_000_000] {
        for text in [
            format!(
                r#"{{"callId":"c","name":"b","arguments":{}{}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            ),
            format!(
                r#"{{"callId":"c","name":"b","arguments":{}"#,
                "{\"a\":".repeat(depth)
            ),
        ] {
            let _guard = CaseGuard::new("execution-nesting", depth as u64, &text);
            check_execution(&text, None);
        }
    }
    println!(
        "execution: {total} cases, {accepted} accepted, in {:?}",
        start.elapsed()
    );
}

// ---------------------------------------------------------------------------
// Target 4: the component loader.

const LOADER_CASES: u64 = 200;

/// Small limits, so a mutated guest that loops or hoards ends quickly.
fn loader_limits() -> Limits {
    Limits {
        deadline: Duration::from_millis(250),
        memory_bytes: 32 << 20,
        ..Limits::default()
    }
}

/// Which part of a binary a byte range holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Region {
    /// A core module's data section (strings, tables of constants).
    Data,
    /// A core module's code section (function bodies).
    Code,
}

fn read_leb_u32(bytes: &[u8], pos: &mut usize) -> Option<u32> {
    let mut result = 0u32;
    for shift in (0..35).step_by(7) {
        let byte = *bytes.get(*pos)?;
        *pos += 1;
        result |= u32::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(result);
        }
    }
    None
}

/// The data and code sections of a component and of every core
/// module and component nested in it, as absolute byte ranges.
fn regions(bytes: &[u8], base: usize, out: &mut Vec<(Region, std::ops::Range<usize>)>) {
    let Some(layer) = bytes.get(4..8) else { return };
    let component = layer == [0x0d, 0x00, 0x01, 0x00];
    let mut pos = 8;
    while pos < bytes.len() {
        let id = bytes[pos];
        pos += 1;
        let Some(size) = read_leb_u32(bytes, &mut pos) else {
            return;
        };
        let Some(end) = pos.checked_add(size as usize).filter(|&e| e <= bytes.len()) else {
            return;
        };
        let range = base + pos..base + end;
        match (component, id) {
            (true, 1 | 4) => regions(&bytes[pos..end], base + pos, out),
            (false, 10) => out.push((Region::Code, range)),
            (false, 11) => out.push((Region::Data, range)),
            _ => {}
        }
        pos = end;
    }
}

/// Overwrites a few bytes inside one region of `kind`, keeping every size:
/// such edits mostly still validate, so the guest compiles and runs with
/// changed constants (its name and keys) or changed code.
fn mutate_in_region(rng: &mut Rng, input: &[u8], kind: Region) -> Vec<u8> {
    let mut found = Vec::new();
    regions(input, 0, &mut found);
    let candidates: Vec<_> = found
        .into_iter()
        .filter(|(k, r)| *k == kind && !r.is_empty())
        .collect();
    let mut out = input.to_vec();
    if candidates.is_empty() {
        return out;
    }
    let range = rng.pick(&candidates).1.clone();
    for _ in 0..rng.range(1, 8) {
        let i = range.start + rng.below(range.len());
        let random = rng.byte();
        out[i] = *rng.pick(&[
            random,
            out[i] ^ 1,
            out[i].wrapping_add(1),
            0,
            0xff,
            b'a',
            b'-',
        ]);
    }
    out
}

/// Edits one of the `DSH_` strings the guest declares or returns: a key
/// becomes lowercase, punctuated, non-ASCII, invalid UTF-8, or another key.
fn mutate_key_string(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    let at: Vec<usize> = (0..input.len().saturating_sub(4))
        .filter(|&i| &input[i..i + 4] == b"DSH_")
        .collect();
    if at.is_empty() {
        return out;
    }
    let start = *rng.pick(&at);
    for _ in 0..rng.range(1, 3) {
        let i = (start + rng.below(20)).min(out.len() - 1);
        out[i] = *rng.pick(&[
            b'a', b'-', b' ', b'=', b'_', b'1', 0, b'\n', 0x7f, 0x80, 0xc3, 0xff,
        ]);
    }
    out
}

fn loader_input(rng: &mut Rng, bases: &[Vec<u8>]) -> Vec<u8> {
    let base = rng.pick(&bases[..2]);
    let donor = rng.pick(bases);
    match rng.below(40) {
        // Random bytes, sometimes behind a component or core-module header.
        0 | 1 => (0..rng.len(1 << 16)).map(|_| rng.byte()).collect(),
        2 | 3 => {
            let headers: [&[u8]; 4] = [
                b"\0asm\x0d\0\x01\0",
                b"\0asm\x01\0\0\0",
                b"\0asm\x0d\0\x01",
                b"\0asm",
            ];
            let header = *rng.pick(&headers);
            let mut bytes = header.to_vec();
            bytes.extend((0..rng.len(4096)).map(|_| rng.byte()));
            bytes
        }
        // A real component, cut short.
        4 | 5 => base[..rng.below(base.len())].to_vec(),
        // Size-keeping edits that mostly validate, so the guest compiles and
        // runs (each compile costs ~0.1 s, so these are kept few).
        6 | 7 => mutate_in_region(rng, base, Region::Data),
        8 | 9 => mutate_key_string(rng, base),
        10..=12 => mutate_in_region(rng, base, Region::Code),
        // The real component again: served from the artifact cache.
        13 => base.clone(),
        // A real component with a few edits, or many.
        14..=31 => mutate(rng, base, donor),
        _ => {
            let mut bytes = base.clone();
            for _ in 0..rng.range(2, 6) {
                bytes = mutate(rng, &bytes, donor);
            }
            bytes
        }
    }
}

/// Adds the time from its start to its drop to a total.
struct Elapsed<'a>(Instant, &'a mut Duration);

impl Drop for Elapsed<'_> {
    fn drop(&mut self) {
        *self.1 += self.0.elapsed();
    }
}

#[tokio::test]
async fn fuzz_component_loader() {
    let start = Instant::now();
    let home = tempfile::tempdir().unwrap();
    let registry = dsh_env_tests::registry_at(home.path());
    let bases: Vec<Vec<u8>> = [
        artifacts::AGENT_LINEAGE,
        artifacts::CALL_TRACE,
        artifacts::PUPPET,
    ]
    .iter()
    .map(|path| std::fs::read(path).unwrap())
    .collect();

    // The unmutated component loads, registers and resolves: the baseline.
    let compiling = Instant::now();
    let component = registry.load_bytes("base", &bases[0]).unwrap();
    let compile_time = compiling.elapsed();
    let registration = registry.register(component).await.unwrap();
    assert!(registry.collect(&agent_call("c", "s")).await.is_ok());
    drop(registration);

    let (mut loaded, mut registered, mut collected) = (0, 0, 0);
    let (mut load_time, mut run_time) = (Duration::ZERO, Duration::ZERO);
    let cases = cases(LOADER_CASES);
    let total = cases.clone().count();
    for case in cases {
        let mut rng = case_rng("loader", case);
        let bytes = loader_input(&mut rng, &bases);
        let summary = format!("{} bytes", bytes.len());
        let _guard = CaseGuard::new("loader", case, &summary).with_raw(&bytes);
        let origin = format!("fuzz-{case}");
        let loading = Instant::now();
        let loaded_component = registry.load_bytes(&origin, &bytes);
        load_time += loading.elapsed();
        let running = Instant::now();
        let _running = Elapsed(running, &mut run_time);
        let component = match loaded_component {
            Ok(component) => component,
            Err(err) => {
                assert_eq!(err.origin, origin);
                assert!(err.to_string().contains(&origin));
                continue;
            }
        };
        loaded += 1;
        let component = component.with_limits(loader_limits());
        let _ = registry.check(&component).await;
        let Ok(registration) = registry.register(component).await else {
            continue;
        };
        registered += 1;
        let declared: BTreeSet<String> = registry
            .list()
            .into_iter()
            .map(|row| row.key.to_string())
            .collect();
        for execution in [agent_call("c1", "s1"), ToolExecution::new("c2", "bash")] {
            if let Ok(overlay) = registry.collect(&execution).await {
                collected += 1;
                for (key, value) in overlay.iter() {
                    assert!(
                        declared.contains(key.as_str()),
                        "undeclared {key} in overlay"
                    );
                    assert!(!value.contains('\0'), "NUL in {key}");
                }
            }
        }
        drop(registration);
    }
    println!(
        "loader: {total} cases, {loaded} loaded, {registered} registered, \
         {collected} collections, in {:?} ({load_time:?} loading, {run_time:?} in calls; \
         one compile of the real component: {compile_time:?})",
        start.elapsed()
    );
}

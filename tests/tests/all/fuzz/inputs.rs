//! Generators of hostile text: pieces that break naive parsers, keys that
//! are valid, reserved or nearly so, names and descriptions.

use dsh_env::RESERVED_KEYS;

use super::rng::Rng;

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

/// One of [`ATOMS`].
pub(super) fn atom(rng: &mut Rng) -> &'static str {
    ATOMS[rng.below(ATOMS.len())]
}

/// Text of up to about `max` bytes, mostly hostile atoms, sometimes random
/// characters, sometimes one piece repeated to a great length.
pub(super) fn text(rng: &mut Rng, max: usize) -> String {
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
pub(super) fn key(rng: &mut Rng) -> String {
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

/// A valid, unreserved `DSH_*` key.
pub(super) fn valid_key(rng: &mut Rng) -> String {
    let mut key = String::from("DSH_");
    key.push(char::from(b'A' + rng.below(26) as u8));
    for _ in 0..rng.len(24) {
        key.push(*rng.pick(&['A', 'Q', 'Z', '0', '9', '_']));
    }
    key
}

/// A contributor name: plain, too long, or hostile text.
pub(super) fn name(rng: &mut Rng) -> String {
    match rng.below(6) {
        0..=2 => format!("contrib-{}", rng.below(1000)),
        3 => "n".repeat(rng.range(120, 140)),
        _ => text(rng, 300),
    }
}

/// A key description: plain, too long, or hostile text.
pub(super) fn description(rng: &mut Rng) -> String {
    match rng.below(6) {
        0..=2 => "A fine description.".to_string(),
        3 => "d".repeat(rng.range(1020, 1030)),
        _ => text(rng, 2000),
    }
}

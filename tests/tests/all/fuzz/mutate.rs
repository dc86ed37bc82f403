//! Byte-level mutation, shared by the text and component targets.

use super::inputs::atom;
use super::rng::Rng;

/// Applies one to a few random edits: bit flips, byte sets, truncation,
/// insertion, deletion, duplication, splicing from `donor`, and overwrites
/// with interesting integers (LEB128 and little-endian edges).
pub(super) fn mutate(rng: &mut Rng, input: &[u8], donor: &[u8]) -> Vec<u8> {
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

/// [`mutate`] applied to text, read back as (lossy) UTF-8.
pub(super) fn mutate_text(rng: &mut Rng, input: &str, donor: &[u8]) -> String {
    String::from_utf8_lossy(&mutate(rng, input.as_bytes(), donor)).into_owned()
}

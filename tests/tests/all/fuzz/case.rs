//! The run's settings (seed, case numbers, scale, tracing), the generator of
//! each case, and the report of a case that panics.

use std::fmt::Debug;
use std::path::PathBuf;

use super::rng::Rng;

const DEFAULT_SEED: u64 = 0x05ee_d0f0_d5e1_2025;

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

/// Each case of `target` (see [`cases`]) with its own generator.
pub(super) fn each_case(target: &'static str, count: u64) -> impl Iterator<Item = (u64, Rng)> {
    cases(count).map(move |case| (case, case_rng(target, case)))
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
pub(super) struct CaseGuard<'a> {
    target: &'static str,
    case: u64,
    input: &'a dyn Debug,
    raw: Option<&'a [u8]>,
}

impl<'a> CaseGuard<'a> {
    pub(super) fn new(target: &'static str, case: u64, input: &'a dyn Debug) -> Self {
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
    pub(super) fn with_raw(mut self, raw: &'a [u8]) -> Self {
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
             cargo test -p dsh-env-tests --test all {}\n\
             input{}: {}",
            test_name(),
            if saved {
                format!(" (saved to {})", file.display())
            } else {
                String::new()
            },
            abbreviate(self.input),
        );
    }
}

/// The running test's name, which libtest gives its thread; else a filter
/// that selects every fuzz test.
fn test_name() -> String {
    let thread = std::thread::current();
    let name = thread.name().filter(|name| name.contains("::"));
    name.unwrap_or("fuzz::").to_string()
}

/// The debug form of `input`, cut to a readable size.
fn abbreviate(input: &dyn Debug) -> String {
    let text = format!("{input:?}");
    if text.len() <= 2000 {
        return text;
    }
    let end = text.floor_char_boundary(2000);
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

//! Deterministic, dependency-free fuzzing of every parser that takes input the
//! host does not control: the manifest, declarations and resolver output, the
//! execution JSON, and component bytes. Each must return `Ok` or `Err` and
//! never panic, and what it accepts must obey the documented rules.
//!
//! Every case has its own generator, seeded from the run's seed, the target
//! and the case number, so a failure reproduces alone:
//!
//! ```text
//! DSH_FUZZ_SEED=<seed> DSH_FUZZ_CASE=<case> cargo test -p dsh-env-tests --test all <test>
//! ```
//!
//! - `DSH_FUZZ_SEED`: the run's seed (decimal or `0x` hex; a fixed default).
//! - `DSH_FUZZ_CASE`: run only this case of each target.
//! - `DSH_FUZZ_SCALE`: multiply every target's case count (e.g. 20 for a soak).
//! - `DSH_FUZZ_TRACE=1`: print each case before it runs (with `--nocapture`),
//!   to name the input behind a crash that kills the process.
//!
//! On a panic, the failing case is printed with that command and its whole
//! input is written to `$CARGO_TARGET_TMPDIR/fuzz-failure-<target>-<case>`.
//! Deeper, coverage-guided runs of the same parsers live in `fuzz/`
//! (cargo-fuzz).
//!
//! The modules: `rng` and `case` drive and report the cases; `inputs`
//! and `mutate` make hostile text and bytes; each remaining module fuzzes
//! one parser and holds its tests.

mod case;
mod inputs;
mod mutate;
mod rng;

mod declaration;
mod execution;
mod loader;
mod manifest;

//! Target 4: the component loader, fed real components cut, mutated inside
//! their data and code sections, or replaced by random bytes; whatever
//! loads is registered and collected from.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use dsh_env::{Limits, ToolExecution};
use dsh_env_tests::{agent_call, artifacts};

use super::case::{CaseGuard, each_case};
use super::mutate::mutate;
use super::rng::Rng;
use dsh_env::{CollectOptions, Collection, LoadFrom, LoadOptions};

/// Fewer than the other targets: each input that validates is compiled.
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

/// An unsigned LEB128 `u32` at `pos`, which it moves past it.
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

/// A component's bytes, made from `bases` (the first two are mutated, all
/// of them are donors) or from nothing.
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
    let component = registry
        .load(
            LoadFrom::Bytes {
                origin: "base",
                bytes: &bases[0],
            },
            &LoadOptions::new(),
        )
        .unwrap();
    let compile_time = compiling.elapsed();
    let registration = registry.register(component).await.unwrap();
    assert!(
        registry
            .collect(&agent_call("c", "s"), &CollectOptions::new())
            .await
            .is_ok()
    );
    drop(registration);

    let (mut loaded, mut registered, mut collected) = (0, 0, 0);
    let (mut load_time, mut run_time) = (Duration::ZERO, Duration::ZERO);
    let mut total = 0;
    for (case, mut rng) in each_case("loader", LOADER_CASES) {
        total += 1;
        let bytes = loader_input(&mut rng, &bases);
        let summary = format!("{} bytes", bytes.len());
        let _guard = CaseGuard::new("loader", case, &summary).with_raw(&bytes);
        let origin = format!("fuzz-{case}");
        let loading = Instant::now();
        let loaded_component = registry.load(
            LoadFrom::Bytes {
                origin: &origin,
                bytes: &bytes,
            },
            &LoadOptions::new(),
        );
        load_time += loading.elapsed();
        let running = Instant::now();
        let _running = Elapsed(running, &mut run_time);
        let component = match loaded_component {
            Ok(component) => component,
            Err(err) => {
                let err = dsh_env_tests::load_error(err);
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
            if let Ok(Collection { overlay, .. }) =
                registry.collect(&execution, &CollectOptions::new()).await
            {
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

//! The manifest parser: any text must give `Ok` or `Err`, never a panic, and
//! an accepted manifest must have usable limits and config for every entry.

#![no_main]

use std::path::PathBuf;

use dsh_env::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Manifest::parse(text, "m.toml", PathBuf::from("/base")) {
        Ok(manifest) => {
            for entry in &manifest.contributors {
                let limits = entry
                    .limits()
                    .expect("an accepted manifest has valid limits");
                assert!(limits.memory_bytes > 0 && !limits.deadline.is_zero());
                assert!(
                    entry.config().is_ok(),
                    "an accepted manifest has valid config"
                );
                let _ = manifest.component_path(entry);
            }
        }
        Err(err) => {
            assert!(err.to_string().starts_with("invalid manifest m.toml"));
        }
    }
});

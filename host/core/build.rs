//! Decides, at build time, whether the linked wasmtime has the fixed
//! page-map reset (vendor/README.md): the vendored crate says so through its
//! `links` metadata, which upstream wasmtime does not have. `engine.rs` turns
//! the reset on only under `cfg(dsh_env_fixed_pagemap)`.

fn main() {
    const MARKER: &str = "DEP_WASMTIME_DSH_ENV_PATCH_PAGEMAP_RESET";
    println!("cargo::rustc-check-cfg=cfg(dsh_env_fixed_pagemap)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed={MARKER}");
    if std::env::var(MARKER).is_ok_and(|value| value == "fixed") {
        println!("cargo::rustc-cfg=dsh_env_fixed_pagemap");
    }
}

//! The home a command works in, and its compile cache with the size cap
//! every command keeps it within (`$DSH_CACHE_MAX_MIB`, default 512).

use std::path::Path;

use dsh_env::{ArtifactCache, CacheKey, DshHome, HomeSetting, Manifest};
use dsh_env_harness::host::RegistryConfig;
use dsh_env_support::input::escape_controls;

use crate::failure::{CliResult, Failure};

/// The variable that sets the cache's size cap, in MiB.
pub(crate) const MAX_MIB_VAR: &str = "DSH_CACHE_MAX_MIB";

/// The largest cache cap, in MiB (1 TiB: beyond that a cap means nothing).
pub(crate) const MAX_MIB: u64 = 1 << 20;

/// The home: `--home`, then the manifest's `home`, then `$DSH_HOME`, then `~/.dsh`.
pub(crate) fn resolve_home(flag: Option<&str>, manifest: Option<&Manifest>) -> CliResult<DshHome> {
    resolve_home_explained(flag, manifest).map(|(home, _)| home)
}

/// [`resolve_home`], and where the home came from: `--home`, the manifest's
/// path, `$DSH_HOME` or `default ~/.dsh`.
pub(crate) fn resolve_home_explained(
    flag: Option<&str>,
    manifest: Option<&Manifest>,
) -> CliResult<(DshHome, String)> {
    let config = RegistryConfig {
        home: home_setting(flag),
        ..RegistryConfig::default()
    };
    config.home(manifest).map_err(Failure::config)
}

/// `--home` (`flag`) as a home setting.
pub(crate) fn home_setting(flag: Option<&str>) -> Option<HomeSetting> {
    flag.map(|path| HomeSetting {
        origin: "--home".into(),
        path: path.to_string(),
    })
}

/// The cache's size cap: `$DSH_CACHE_MAX_MIB` (a usage error when it is
/// not a number), else the default.
pub(crate) fn cache_max_bytes() -> CliResult<u64> {
    match std::env::var(MAX_MIB_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(ArtifactCache::DEFAULT_MAX_BYTES),
        Ok(text) => Ok(mib(text
            .trim()
            .parse()
            .ok()
            .filter(|n| *n <= MAX_MIB)
            .ok_or_else(|| {
                Failure::config(format!(
                    "${MAX_MIB_VAR} must be a whole number of MiB from 0 to {MAX_MIB}, not `{}`",
                    escape_controls(&text)
                ))
            })?)),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Failure::config(format!("${MAX_MIB_VAR} is not UTF-8")))
        }
    }
}

/// The cache in `home`, authenticated with `key`, capped by
/// `$DSH_CACHE_MAX_MIB` (a usage error when it is not a number).
pub(crate) fn home_cache(home: &Path, key: CacheKey) -> CliResult<ArtifactCache> {
    Ok((ArtifactCache::new(home.join("cache")))
        .with_key(key)
        .with_max_bytes(cache_max_bytes()?))
}

/// `n` MiB in bytes, saturating.
pub(crate) fn mib(n: u64) -> u64 {
    n.saturating_mul(1 << 20)
}

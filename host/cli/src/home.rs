//! The home a command works in, and its compile cache with the size cap
//! every command keeps it within (`$DSH_CACHE_MAX_MIB`, default 512).

use std::path::Path;

use dsh_env::__internal::DEFAULT_MAX_BYTES;
use dsh_env::__internal::escape_controls;
use dsh_env::{ArtifactCache, CacheKey, DshHome, HomeContext, HomeSetting, Manifest};

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
    let mut explicit = Vec::new();
    if let Some(path) = flag {
        explicit.push(HomeSetting {
            origin: "--home".into(),
            path: path.to_string(),
        });
    }
    explicit.extend(manifest.and_then(Manifest::home_setting));
    DshHome::resolve_explained(&explicit, &HomeContext::from_process()).map_err(Failure::config)
}

/// The key that authenticates the compile cache's entries: the one in the
/// user's own home (`--home` as `flag`, `$DSH_HOME`, `~/.dsh`), never in a
/// home a manifest names, which a checkout can fill with files of its own
/// (docs/compiling.md). Without a user home, none: the cache is not used.
pub(crate) fn user_cache_key(flag: Option<&str>) -> CacheKey {
    resolve_home(flag, None).map_or(CacheKey::Absent, |home| CacheKey::in_home(&home))
}

/// The cache in `home`, authenticated with `key`, capped by
/// `$DSH_CACHE_MAX_MIB` (a usage error when it is not a number).
pub(crate) fn home_cache(home: &Path, key: CacheKey) -> CliResult<ArtifactCache> {
    let max_bytes = match std::env::var(MAX_MIB_VAR) {
        Err(std::env::VarError::NotPresent) => DEFAULT_MAX_BYTES,
        Ok(text) => mib(text
            .trim()
            .parse()
            .ok()
            .filter(|n| *n <= MAX_MIB)
            .ok_or_else(|| {
                Failure::config(format!(
                    "${MAX_MIB_VAR} must be a whole number of MiB from 0 to {MAX_MIB}, not `{}`",
                    escape_controls(&text)
                ))
            })?),
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(Failure::config(format!("${MAX_MIB_VAR} is not UTF-8")));
        }
    };
    Ok((ArtifactCache::new(home.join("cache")))
        .with_key(key)
        .with_max_bytes(max_bytes))
}

/// `n` MiB in bytes, saturating.
pub(crate) fn mib(n: u64) -> u64 {
    n.saturating_mul(1 << 20)
}

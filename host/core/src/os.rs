//! The parts of the host that only Linux has, each behind one
//! `cfg(target_os = "linux")` with a portable fallback beside it, so that
//! another Unix (macOS) builds with no change elsewhere (docs/ci.md,
//! "Portability"). What every Unix has (rlimits, signals, `waitid`, open
//! flags) stays where it is used.

use std::fs::File;
use std::path::{Path, PathBuf};

/// This process's own executable, as a path that starts it again. On Linux
/// `/proc/self/exe`: the very image that runs, even after an upgrade has
/// replaced its file, so a helper started from it always matches this
/// process. Elsewhere the path it was started from.
#[cfg(target_os = "linux")]
pub fn own_image() -> std::io::Result<PathBuf> {
    Ok(PathBuf::from("/proc/self/exe"))
}

/// This process's own executable, as a path that starts it again: the path
/// it was started from (no `/proc` here).
#[cfg(not(target_os = "linux"))]
pub fn own_image() -> std::io::Result<PathBuf> {
    std::env::current_exe()
}

/// Has the kernel kill this (just forked) process when the thread that
/// started it ends: `prctl(PR_SET_PDEATHSIG)`. Async-signal-safe, for
/// `pre_exec`.
#[cfg(target_os = "linux")]
pub(crate) fn die_with_parent() -> std::io::Result<()> {
    // SAFETY: prctl is async-signal-safe, and touches no memory.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Nothing: no such signal here. The helper's own CPU limit still ends it,
/// and the thread that waits for it kills it at its deadline.
#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_parent() -> std::io::Result<()> {
    Ok(())
}

/// Whether `file` lives on a kernel pseudo-filesystem (`/proc`, `/sys`
/// and their kind), whose "regular" files may block a read (`/proc/kmsg`)
/// or never end.
#[cfg(target_os = "linux")]
pub(crate) fn on_pseudo_filesystem(file: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    const PSEUDO: [i64; 7] = [
        0x9fa0,      // proc
        0x6265_6572, // sysfs
        0x6462_6720, // debugfs
        0x7472_6163, // tracefs
        0x7363_6673, // securityfs
        0x6367_7270, // cgroup2
        0x0027_e0eb, // cgroup
    ];
    let mut stat = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: fstatfs writes a statfs into the buffer we pass, for an fd we own.
    if unsafe { libc::fstatfs(file.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstatfs returned 0, so it filled the buffer.
    let stat = unsafe { stat.assume_init() };
    // `f_type`'s integer type differs between libcs and targets.
    #[allow(clippy::unnecessary_cast)]
    let kind = stat.f_type as i64;
    Ok(PSEUDO.contains(&kind))
}

/// Whether `file` lives on a kernel pseudo-filesystem: never, here (no
/// `/proc` or `/sys`; devices are not regular files, and are refused as such).
#[cfg(not(target_os = "linux"))]
pub(crate) fn on_pseudo_filesystem(_file: &File) -> std::io::Result<bool> {
    Ok(false)
}

/// Drops a file's pages from the page cache (`posix_fadvise(DONTNEED)`).
/// Advice only: when it fails, nothing else changes.
#[cfg(target_os = "linux")]
pub(crate) fn drop_cached_pages(path: &Path) {
    use std::os::fd::AsRawFd;
    if let Ok(file) = File::open(path) {
        // SAFETY: `posix_fadvise` reads no memory; the descriptor is open.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// Drops a file's pages from the page cache: no such advice here.
#[cfg(not(target_os = "linux"))]
pub(crate) fn drop_cached_pages(_path: &Path) {}

/// Whether the kernel tells which pages a process wrote (the `PAGEMAP_SCAN`
/// ioctl, Linux 6.7+; not under qemu-user, which does not know it).
#[cfg(target_os = "linux")]
pub(crate) fn pagemap_scan_available() -> bool {
    wasmtime::PoolingAllocationConfig::is_pagemap_scan_available()
}

/// Whether the kernel tells which pages a process wrote: no, here.
#[cfg(not(target_os = "linux"))]
pub(crate) fn pagemap_scan_available() -> bool {
    false
}

//! Files a guest opens through its cwd grant.
//!
//! The model controls the agent's cwd, so it controls what a guest with a
//! cwd grant finds there: a FIFO as `.git/HEAD` made wasmtime-wasi's
//! `open-at` block in `open(2)` for good, on a thread nothing can cancel.
//! This module shadows `wasi:filesystem/types` `[method]descriptor.open-at`
//! with an open that cannot block: `O_NONBLOCK | O_NOCTTY` through cap-std's
//! sandboxed resolution (no `..` or symlink escapes), then `fstat` on the
//! open file, keeping only regular files and directories, and refusing files
//! on kernel pseudo-filesystems (`/proc`, `/sys`, ...), whose reads may block.
//! The grant is read-only, so anything that would create, truncate or write
//! is refused before the OS sees it. Every file it opens counts against a
//! process-wide [`DescriptorLedger`] until the call ends.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cap_fs_ext::{OpenOptionsFollowExt, OpenOptionsMaybeDirExt};
use cap_primitives::fs::{FollowSymlinks, OpenOptions, OpenOptionsExt};
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::OpenMode;
use wasmtime_wasi::filesystem::{Descriptor, Dir, File};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, ErrorCode, OpenFlags, PathFlags,
};

/// A store's state as this module sees it: its resource table and, with the
/// cwd grant, its open files. (The guest's state implements it, so this
/// module needs nothing from the one that builds that state.)
pub(super) trait FileHost: Send + 'static {
    /// The store's resource table, where descriptors live.
    fn table(&mut self) -> &mut ResourceTable;
    /// The files opened through the cwd grant; `None` without the grant.
    fn files(&mut self) -> Option<&mut OpenFiles>;
}

/// The interface whose `open-at` is replaced; guests importing any 0.2.x
/// version link to it.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Files and directories opened by guests, all stores together, against a
/// cap, and who holds them (to name them if a spawn runs out of descriptors).
#[derive(Debug)]
pub(crate) struct DescriptorLedger {
    limit: usize,
    open: AtomicUsize,
    holders: Mutex<BTreeMap<Arc<str>, usize>>,
}

impl DescriptorLedger {
    /// A ledger allowing `limit` open descriptors.
    pub(crate) fn new(limit: usize) -> Self {
        DescriptorLedger {
            limit,
            open: AtomicUsize::new(0),
            holders: Mutex::default(),
        }
    }

    /// Descriptors guests hold open now.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Who holds descriptors now, and how many.
    pub(crate) fn holders(&self) -> Vec<(String, usize)> {
        let holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
        holders
            .iter()
            .map(|(name, n)| (name.to_string(), *n))
            .collect()
    }

    fn add(&self, holder: &Arc<str>, delta: isize) {
        let mut holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
        let held = holders.entry(Arc::clone(holder)).or_default();
        *held = held.saturating_add_signed(delta);
        if *held == 0 {
            holders.remove(holder);
        }
    }
}

/// The descriptors one store opened, released to the ledger when its host
/// resources are (see `Sandbox::finish`) or when it is dropped.
pub(crate) struct OpenFiles {
    held: usize,
    holder: Arc<str>,
    ledger: Arc<DescriptorLedger>,
}

impl OpenFiles {
    /// No files yet, counted in `ledger` under `holder`'s name.
    pub(crate) fn new(ledger: Arc<DescriptorLedger>, holder: &str) -> Self {
        OpenFiles {
            held: 0,
            holder: holder.into(),
            ledger,
        }
    }

    /// Takes one descriptor from the ledger, if any is left.
    fn acquire(&mut self) -> bool {
        let ledger = &self.ledger;
        let taken = ledger
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < ledger.limit).then_some(open + 1)
            })
            .is_ok();
        if taken {
            self.held += 1;
            ledger.add(&self.holder, 1);
        }
        taken
    }

    /// Gives one descriptor back (its open failed).
    fn give_back(&mut self) {
        self.held -= 1;
        self.ledger.open.fetch_sub(1, Ordering::AcqRel);
        self.ledger.add(&self.holder, -1);
    }

    /// Gives every descriptor back: the store's files have been closed.
    pub(crate) fn release(&mut self) {
        if self.held > 0 {
            self.ledger.open.fetch_sub(self.held, Ordering::AcqRel);
            self.ledger.add(&self.holder, -(self.held as isize));
            self.held = 0;
        }
    }
}

impl Drop for OpenFiles {
    fn drop(&mut self) {
        self.release();
    }
}

/// Replaces wasmtime-wasi's `open-at` in `linker` with [`open_at`].
pub(super) fn add_to_linker<T: FileHost>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let defined = linker.instance(FILESYSTEM_TYPES)?.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: StoreContextMut<'_, T>,
         (fd, path_flags, path, oflags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                open_at(store.data_mut(), fd, path_flags, path, oflags, flags)
                    .await
                    .map(|opened| (opened,))
            })
        },
    );
    linker.allow_shadowing(false);
    defined
}

/// What a non-blocking open found.
enum Opened {
    Dir(std::fs::File),
    File(std::fs::File),
}

/// `open-at` for a read-only grant that cannot block. The outer error is a
/// trap (the guest's handle table is full); the inner one is the guest's.
async fn open_at(
    state: &mut impl FileHost,
    fd: Resource<Descriptor>,
    path_flags: PathFlags,
    path: String,
    oflags: OpenFlags,
    flags: DescriptorFlags,
) -> wasmtime::Result<Result<Resource<Descriptor>, ErrorCode>> {
    let dir = match state.table().get(&fd) {
        Ok(Descriptor::Dir(dir)) => dir.clone(),
        Ok(Descriptor::File(_)) => return Ok(Err(ErrorCode::NotDirectory)),
        Err(_) => return Ok(Err(ErrorCode::BadDescriptor)),
    };
    let writes = oflags.intersects(OpenFlags::CREATE | OpenFlags::TRUNCATE | OpenFlags::EXCLUSIVE)
        || flags.intersects(DescriptorFlags::WRITE | DescriptorFlags::MUTATE_DIRECTORY);
    if writes {
        // Grants are read-only (wasmtime-wasi refuses the same opens for
        // them); this open never writes.
        return Ok(Err(ErrorCode::NotPermitted));
    }
    if flags.intersects(
        DescriptorFlags::FILE_INTEGRITY_SYNC
            | DescriptorFlags::DATA_INTEGRITY_SYNC
            | DescriptorFlags::REQUESTED_WRITE_SYNC,
    ) {
        return Ok(Err(ErrorCode::Unsupported));
    }
    // Only a store with the cwd grant has a directory to open under.
    let Some(files) = state.files() else {
        return Ok(Err(ErrorCode::NotPermitted));
    };
    if !files.acquire() {
        tracing::debug!("guest descriptor cap reached; open-at refused");
        return Ok(Err(ErrorCode::InsufficientMemory));
    }
    let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
    // Non-blocking, so running it inline, on the thread of the guest I/O
    // runtime's blocking pool the call runs on, cannot strand that thread on
    // a FIFO or device.
    let opened = open_nonblocking(&dir.dir, &path, follow);
    let descriptor = match opened {
        Ok(Opened::Dir(file)) => Descriptor::Dir(Dir::new(file, dir.perms, OpenMode::READ, true)),
        Ok(Opened::File(_)) if oflags.contains(OpenFlags::DIRECTORY) => {
            files.give_back();
            return Ok(Err(ErrorCode::NotDirectory));
        }
        Ok(Opened::File(file)) => {
            Descriptor::File(File::new(file, dir.perms, OpenMode::READ, true))
        }
        Err(err) => {
            files.give_back();
            return Ok(Err(ErrorCode::from(err)));
        }
    };
    Ok(Ok(state.table().push(descriptor)?))
}

/// Opens `path` under `dir` for reading without blocking, and keeps it only
/// if it is a directory, or a regular file on a real filesystem.
fn open_nonblocking(dir: &std::fs::File, path: &str, follow: bool) -> std::io::Result<Opened> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .follow(if follow {
            FollowSymlinks::Yes
        } else {
            FollowSymlinks::No
        })
        .maybe_dir(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = cap_primitives::fs::open(dir, Path::new(path), &options)?;
    let kind = file.metadata()?.file_type();
    if kind.is_dir() {
        return Ok(Opened::Dir(file));
    }
    if !kind.is_file() || crate::os::on_pseudo_filesystem(&file)? {
        return Err(std::io::Error::from_raw_os_error(libc::EACCES));
    }
    clear_nonblocking(&file)?;
    Ok(Opened::File(file))
}

/// Makes reads of a regular file ordinary again (O_NONBLOCK was only for
/// the open).
fn clear_nonblocking(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on an fd we own, reading and then setting its status flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

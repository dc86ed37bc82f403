//! The precompiled-artifact cache: compile once, recompile cleanly on a
//! changed file or a corrupt entry.

use std::path::PathBuf;

use dsh_env::Registry;
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};
use dsh_env_tests::{agent_call, artifacts, puppet};

/// The cache's precompiled artifacts (not its seals and aliases).
pub(crate) fn entries(registry: &Registry) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(registry.cache().dir())
        .map(|dir| dir.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    paths.retain(|p| p.extension().is_some_and(|e| e == "cwasm"));
    paths.sort();
    paths
}

/// Puts `bytes` at `path` as a new file, as another process replacing a
/// cache file would: a file this process maps is never cut short under it
/// (which is a bus error at its next access, however the host handles it).
fn replace(path: &std::path::Path, bytes: &[u8]) {
    let new = path.with_extension("replacement");
    std::fs::write(&new, bytes).unwrap();
    std::fs::rename(&new, path).unwrap();
}

async fn depth_of(registry: &Registry, path: &str) -> Option<String> {
    let component = registry
        .load(LoadFrom::File(path.as_ref()), &LoadOptions::new())
        .unwrap();
    let _registration = registry.register(component).await.unwrap();
    let execution = agent_call("c", "s");
    registry
        .collect(&execution, &CollectOptions::new())
        .await
        .unwrap()
        .overlay
        .get("DSH_AGENT_DEPTH")
        .map(str::to_string)
}

#[tokio::test]
async fn each_component_is_compiled_once_and_a_corrupt_entry_is_replaced() {
    let home = tempfile::tempdir().unwrap();
    let registry = dsh_env_tests::registry_at(home.path());
    assert!(entries(&registry).is_empty());

    assert_eq!(
        depth_of(&registry, artifacts::AGENT_LINEAGE)
            .await
            .as_deref(),
        Some("0")
    );
    let first = entries(&registry);
    assert_eq!(first.len(), 1, "{first:?}");
    let artifact = std::fs::read(&first[0]).unwrap();

    // A second registry (a new process, in effect) reuses the entry as it is.
    let again = dsh_env_tests::registry_at(home.path());
    assert_eq!(
        depth_of(&again, artifacts::AGENT_LINEAGE).await.as_deref(),
        Some("0")
    );
    assert_eq!(entries(&again), first);
    assert_eq!(std::fs::read(&first[0]).unwrap(), artifact);

    // A corrupt entry is recompiled and rewritten, not loaded.
    let mut corrupt = artifact.clone();
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0xff;
    replace(&first[0], &corrupt);
    let third = dsh_env_tests::registry_at(home.path());
    assert_eq!(
        depth_of(&third, artifacts::AGENT_LINEAGE).await.as_deref(),
        Some("0")
    );
    assert_eq!(
        std::fs::read(&first[0]).unwrap(),
        artifact,
        "the entry was rewritten"
    );

    // A truncated entry too.
    replace(&first[0], &artifact[..10]);
    let fourth = dsh_env_tests::registry_at(home.path());
    assert_eq!(
        depth_of(&fourth, artifacts::AGENT_LINEAGE).await.as_deref(),
        Some("0")
    );
    assert_eq!(std::fs::read(&first[0]).unwrap(), artifact);
}

/// How many of the file at `path`'s pages the page cache holds, of how many.
fn cached_pages(path: &std::path::Path) -> (usize, usize) {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    // SAFETY: `sysconf` reads nothing of ours.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: a private read-only mapping of `file`, of its length, that is
    // never read: `mincore` fills `resident` (one byte per page) and the
    // mapping is unmapped before returning.
    unsafe {
        let fd = file.as_raw_fd();
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            fd,
            0,
        );
        assert_ne!(map, libc::MAP_FAILED);
        assert_eq!(libc::mincore(map, len, resident.as_mut_ptr()), 0);
        libc::munmap(map, len);
    }
    let cached = resident.iter().filter(|&&b| b & 1 != 0).count();
    (cached, resident.len())
}

/// Written, an artifact's pages sit in the page cache in large folios, and
/// a fault maps a large folio whole: a host that runs a little of a big
/// component's code would hold most of it resident. So the cache drops a
/// file it has just written; a host maps it back page by page.
#[tokio::test]
async fn an_artifact_just_written_is_not_left_in_the_page_cache() {
    let home = tempfile::tempdir().unwrap();
    // SAFETY: `statfs` writes only the struct it is given.
    let tmpfs = unsafe {
        let mut stat: libc::statfs = std::mem::zeroed();
        let dir = std::ffi::CString::new(home.path().as_os_str().as_encoded_bytes()).unwrap();
        libc::statfs(dir.as_ptr(), &mut stat) == 0 && stat.f_type == libc::TMPFS_MAGIC
    };
    if tmpfs {
        eprintln!("skipped: a tmpfs file is its page cache");
        return;
    }
    let registry = dsh_env_tests::registry_at(home.path());
    let _component = registry
        .load(
            LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap();
    let written = entries(&registry);
    assert_eq!(written.len(), 1, "{written:?}");
    let (cached, pages) = cached_pages(&written[0]);
    assert!(
        cached * 10 < pages,
        "{cached} of the artifact's {pages} pages are still in the page cache"
    );
}

#[tokio::test]
async fn a_changed_file_gets_its_own_entry() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("contributor.wasm");
    let registry = dsh_env_tests::registry_at(home.path());

    std::fs::copy(artifacts::AGENT_LINEAGE, &path).unwrap();
    assert_eq!(
        depth_of(&registry, path.to_str().unwrap()).await.as_deref(),
        Some("0")
    );
    std::fs::copy(artifacts::CALL_TRACE, &path).unwrap();
    assert_eq!(
        depth_of(&registry, path.to_str().unwrap()).await,
        None,
        "the new file's code runs"
    );
    assert_eq!(entries(&registry).len(), 2);
}

#[tokio::test]
async fn a_copied_cache_is_used_without_recompiling() {
    let (home, copy) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let registry = dsh_env_tests::registry_at(home.path());
    assert_eq!(
        depth_of(&registry, artifacts::AGENT_LINEAGE)
            .await
            .as_deref(),
        Some("0")
    );
    let artifact = std::fs::read(&entries(&registry)[0]).unwrap();

    // Every file gets a new identity, so the copy is verified by digest, not
    // recompiled; an artifact with a foreign byte in it would not be. The
    // home's key comes along: its records are trusted only under it.
    std::fs::copy(home.path().join("cache.key"), copy.path().join("cache.key")).unwrap();
    let copied = copy.path().join("cache");
    std::fs::create_dir(&copied).unwrap();
    for file in std::fs::read_dir(registry.cache().dir()).unwrap() {
        let file = file.unwrap().path();
        std::fs::copy(&file, copied.join(file.file_name().unwrap())).unwrap();
    }
    let moved = dsh_env_tests::registry_at(copy.path());
    let seal =
        |r: &Registry| std::fs::read_to_string(entries(r)[0].with_extension("seal")).unwrap();
    let before = seal(&moved);
    // A recompile would store a new file (written, then renamed into place).
    let inode = |r: &Registry| {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&entries(r)[0]).unwrap())
    };
    let copied_inode = inode(&moved);
    assert_eq!(
        depth_of(&moved, artifacts::AGENT_LINEAGE).await.as_deref(),
        Some("0")
    );
    assert_eq!(inode(&moved), copied_inode, "the copy was not recompiled");
    assert_eq!(std::fs::read(&entries(&moved)[0]).unwrap(), artifact);
    assert_ne!(seal(&moved), before, "the copy was verified and resealed");
    assert_eq!(
        seal(&moved).split_once(' ').unwrap().0,
        before.split_once(' ').unwrap().0,
        "same digest"
    );
}

#[tokio::test]
async fn a_declaration_is_remembered_per_component_and_config() {
    let home = tempfile::tempdir().unwrap();
    let new_registry = || dsh_env_tests::registry_at(home.path());
    async fn declared_name(registry: &Registry, name: &str) -> String {
        let component = puppet(registry, &[("name", name), ("keys", "DSH_REMEMBERED=r")]);
        let registration = registry.register(component).await.unwrap();
        registration.name().to_string()
    }
    let declarations = |registry: &Registry| -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(registry.cache().dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "declaration"))
            .collect();
        paths.sort();
        paths
    };

    // Running `declare` stores its declaration anew (a new file, renamed
    // into place); taking the remembered one leaves the file as it is.
    let inode =
        |path: &PathBuf| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).unwrap());

    let first = new_registry();
    assert_eq!(declared_name(&first, "first").await, "first");
    let stored = declarations(&first);
    assert_eq!(stored.len(), 1, "{stored:?}");
    let written = inode(&stored[0]);

    // A later registration of the same component and config takes the
    // remembered declaration instead of running `declare`.
    let second = new_registry();
    assert_eq!(declared_name(&second, "first").await, "first");
    assert_eq!(inode(&stored[0]), written, "declared again");

    // Another config is another declaration, from the guest.
    assert_eq!(declared_name(&second, "other").await, "other");
    assert_eq!(declarations(&second).len(), 2);

    // An edit without the home's key (a file a checkout could ship), or an
    // unreadable one, is not trusted: it is declared afresh.
    let text = std::fs::read_to_string(&stored[0]).unwrap();
    for edited in [text.replace("\"first\"", "\"forged\""), "not json".into()] {
        std::fs::write(&stored[0], edited).unwrap();
        let edited = inode(&stored[0]);
        assert_eq!(declared_name(&new_registry(), "first").await, "first");
        assert_ne!(inode(&stored[0]), edited, "remembered");
    }
}

/// Loads of one component on several threads at once, in a fresh home,
/// compile it once (the others wait for its artifact and map it) and leave
/// one sound entry.
#[test]
fn concurrent_first_loads_compile_once_and_leave_one_sound_entry() {
    use sha2::{Digest, Sha256};
    let home = tempfile::tempdir().unwrap();
    let compiles = std::sync::Arc::new(Compiles::default());
    let home_dir = dsh_env::DshHome::from_absolute(home.path()).unwrap();
    let registry = (dsh_env_tests::builder(home_dir))
        .compile_progress(compiles.clone())
        .build()
        .unwrap();
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                registry
                    .load(
                        LoadFrom::File(artifacts::PUPPET.as_ref()),
                        &LoadOptions::new(),
                    )
                    .unwrap()
            });
        }
    });
    let puppet = artifacts::PUPPET;
    assert_eq!(
        *compiles.events.lock().unwrap(),
        [format!("start {puppet}"), format!("end {puppet}")]
    );
    let files: Vec<String> = std::fs::read_dir(registry.cache().dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.iter().all(|name| !name.contains(".partial-")),
        "{files:?}"
    );
    let artifacts = entries(&registry);
    assert_eq!(artifacts.len(), 1, "{files:?}");
    // The seal vouches for exactly the bytes in place.
    let seal = std::fs::read_to_string(artifacts[0].with_extension("seal")).unwrap();
    let digest: String = Sha256::digest(std::fs::read(&artifacts[0]).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(seal.split_once(' ').unwrap().0, digest);
}

/// The entry files (`.cwasm`, `.seal`) of the component at `path`.
fn entry_of(registry: &Registry, path: &str) -> (PathBuf, PathBuf) {
    use sha2::{Digest, Sha256};
    let content: String = Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let artifact = entries(registry)
        .into_iter()
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&content)
        })
        .expect("an entry for the component");
    let seal = artifact.with_extension("seal");
    (artifact, seal)
}

#[tokio::test]
async fn an_artifact_copied_over_another_components_entry_is_not_run_for_it() {
    let home = tempfile::tempdir().unwrap();
    let new_registry = || dsh_env_tests::registry_at(home.path());
    let registry = new_registry();
    assert_eq!(
        depth_of(&registry, artifacts::AGENT_LINEAGE)
            .await
            .as_deref(),
        Some("0")
    );
    assert_eq!(depth_of(&registry, artifacts::CALL_TRACE).await, None);
    let (a_artifact, a_seal) = entry_of(&registry, artifacts::AGENT_LINEAGE);
    let (b_artifact, b_seal) = entry_of(&registry, artifacts::CALL_TRACE);

    // B's artifact and seal, copied over A's entry, both verify by digest;
    // the seal names B's entry, so A is compiled again and runs its own code.
    std::fs::copy(&b_artifact, &a_artifact).unwrap();
    std::fs::copy(&b_seal, &a_seal).unwrap();
    let attacked = new_registry();
    let component = attacked
        .load(
            LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap();
    let registration = attacked.register(component).await.unwrap();
    assert_eq!(registration.name(), "agent-lineage");
    let overlay = attacked
        .collect(&agent_call("c", "s"), &CollectOptions::new())
        .await
        .unwrap()
        .overlay;
    assert_eq!(overlay.get("DSH_AGENT_DEPTH"), Some("0"));
    assert_ne!(
        std::fs::read(&a_artifact).unwrap(),
        std::fs::read(&b_artifact).unwrap(),
        "A's entry holds A's artifact again"
    );
}

#[tokio::test]
async fn a_cache_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let world_writable = std::fs::Permissions::from_mode(0o777);
    // The cache directory itself, or the home it is in.
    for shared in ["cache", "home"] {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let cache = home.join("cache");
        std::fs::create_dir_all(&cache).unwrap();
        let open = if shared == "cache" { &cache } else { &home };
        std::fs::set_permissions(open, world_writable.clone()).unwrap();

        let registry = dsh_env_tests::registry_at(&home);
        for _ in 0..2 {
            assert_eq!(
                depth_of(&registry, artifacts::AGENT_LINEAGE)
                    .await
                    .as_deref(),
                Some("0"),
                "{shared}"
            );
        }
        let written: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
        assert!(written.is_empty(), "{shared}: {written:?}");
    }
}

/// A registry in `home` (absolute) whose cache keeps within `max_bytes`.
fn capped_registry(home: &std::path::Path, max_bytes: u64) -> Registry {
    let home = dsh_env::DshHome::from_absolute(home).unwrap();
    let cache = dsh_env::ArtifactCache::new(home.path().join("cache")).with_max_bytes(max_bytes);
    (dsh_env_tests::builder(home)).cache(cache).build().unwrap()
}

/// The SHA-256 of the component at `path`.
fn digest(path: &str) -> String {
    dsh_env_support::digest::sha256_hex(&std::fs::read(path).unwrap())
}

/// The content digests of the cache's entries that hold an artifact.
fn cached(registry: &Registry) -> std::collections::BTreeSet<String> {
    let entries = registry.cache().entries().unwrap();
    entries
        .into_iter()
        .filter(|entry| entry.artifact)
        .filter_map(|entry| entry.content)
        .collect()
}

/// Backdates the files of the component at `path`'s entry by `ago`, as if
/// it had not been used since: all but its artifact, whose times are part of
/// the identity its seal vouches for.
fn age(registry: &Registry, path: &str, ago: std::time::Duration) {
    let content = digest(path);
    let when = std::time::SystemTime::now() - ago;
    for file in std::fs::read_dir(registry.cache().dir()).unwrap() {
        let file = file.unwrap().path();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let alias_of_it = name.ends_with(".alias")
            && std::fs::read_to_string(&file).is_ok_and(|text| text.starts_with(&content));
        if (name.starts_with(&content) && !name.ends_with(".cwasm")) || alias_of_it {
            let opened = std::fs::File::open(&file).unwrap();
            opened.set_modified(when).unwrap();
        }
    }
}

const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);

#[tokio::test]
async fn past_its_cap_the_least_recently_used_entry_goes_and_comes_back_compiled() {
    use artifacts::{AGENT_LINEAGE, CALL_TRACE, GIT_CONTEXT};
    let home = tempfile::tempdir().unwrap();
    let registry = dsh_env_tests::registry_at(home.path());
    for path in [CALL_TRACE, AGENT_LINEAGE, GIT_CONTEXT] {
        drop(
            registry
                .load(LoadFrom::File(path.as_ref()), &LoadOptions::new())
                .unwrap(),
        );
    }
    age(&registry, CALL_TRACE, 3 * HOUR);
    age(&registry, AGENT_LINEAGE, 2 * HOUR);
    age(&registry, GIT_CONTEXT, HOUR);
    let seal_of = |path: &str| {
        let artifact = entry_of(&registry, path).0;
        std::fs::metadata(artifact.with_extension("seal"))
            .unwrap()
            .modified()
            .unwrap()
    };
    // Loading the oldest marks it used; loading it again at once writes nothing.
    let aged = seal_of(CALL_TRACE);
    drop(
        registry
            .load(LoadFrom::File(CALL_TRACE.as_ref()), &LoadOptions::new())
            .unwrap(),
    );
    let used = seal_of(CALL_TRACE);
    assert!(used > aged + 2 * HOUR, "{used:?} {aged:?}");
    drop(
        registry
            .load(LoadFrom::File(CALL_TRACE.as_ref()), &LoadOptions::new())
            .unwrap(),
    );
    assert_eq!(seal_of(CALL_TRACE), used);

    // Room for two: the least recently used of the three goes.
    let entries = registry.cache().entries().unwrap();
    let size = |path: &str| {
        let content = digest(path);
        let entry = entries
            .iter()
            .find(|e| e.content.as_ref() == Some(&content));
        entry.unwrap().bytes
    };
    let keep = size(CALL_TRACE) + size(GIT_CONTEXT);
    let eviction = registry.cache().gc(keep).unwrap();
    assert_eq!(eviction.removed, 1, "{eviction:?}");
    assert_eq!(eviction.freed_bytes, size(AGENT_LINEAGE));
    assert_eq!(eviction.remaining_bytes, keep);
    assert_eq!(
        cached(&registry),
        [digest(CALL_TRACE), digest(GIT_CONTEXT)].into()
    );

    // The evicted component compiles again on its next load, and runs.
    let next = dsh_env_tests::registry_at(home.path());
    assert_eq!(depth_of(&next, AGENT_LINEAGE).await.as_deref(), Some("0"));
    assert!(cached(&next).contains(&digest(AGENT_LINEAGE)));

    // Half an entry (as another process's eviction may leave it for a
    // moment) is compiled again, whichever half is left.
    for (half, gone) in [("seal", "cwasm"), ("cwasm", "seal")] {
        let (artifact, _) = entry_of(&next, AGENT_LINEAGE);
        std::fs::remove_file(artifact.with_extension(gone)).unwrap();
        let again = dsh_env_tests::registry_at(home.path());
        assert_eq!(
            depth_of(&again, AGENT_LINEAGE).await.as_deref(),
            Some("0"),
            "only the {half} left"
        );
        assert!(artifact.with_extension(gone).exists(), "{gone} rewritten");
    }
}

#[tokio::test]
async fn a_write_past_the_cap_evicts_what_this_process_no_longer_holds() {
    use artifacts::{AGENT_LINEAGE, CALL_TRACE, ECHO, GIT_CONTEXT};
    let home = tempfile::tempdir().unwrap();
    // Any artifact is over this cap: each write evicts all it may.
    let registry = capped_registry(home.path(), 1);
    let lineage = registry
        .load(LoadFrom::File(AGENT_LINEAGE.as_ref()), &LoadOptions::new())
        .unwrap();
    let registration = registry.register(lineage).await.unwrap();
    age(&registry, AGENT_LINEAGE, 3 * HOUR);

    // The entry just written stays, and so does the registered one, the
    // least recently used.
    let trace = registry
        .load(LoadFrom::File(CALL_TRACE.as_ref()), &LoadOptions::new())
        .unwrap();
    assert_eq!(
        cached(&registry),
        [digest(AGENT_LINEAGE), digest(CALL_TRACE)].into()
    );
    drop(trace);
    drop(
        registry
            .load(LoadFrom::File(GIT_CONTEXT.as_ref()), &LoadOptions::new())
            .unwrap(),
    );
    assert_eq!(
        cached(&registry),
        [digest(AGENT_LINEAGE), digest(GIT_CONTEXT)].into(),
        "dropped, call-trace went"
    );

    // Unregistered, it goes at the next write.
    drop(registration);
    drop(
        registry
            .load(
                LoadFrom::Bytes {
                    origin: "echo",
                    bytes: &std::fs::read(ECHO).unwrap(),
                },
                &LoadOptions::new(),
            )
            .unwrap(),
    );
    assert_eq!(cached(&registry), [digest(ECHO)].into());
    // Evicted, it compiles again on its next load, and runs.
    assert_eq!(
        depth_of(&registry, AGENT_LINEAGE).await.as_deref(),
        Some("0")
    );
    assert_eq!(cached(&registry), [digest(AGENT_LINEAGE)].into());
}

#[tokio::test]
async fn clearing_leaves_an_empty_cache_that_works() {
    use artifacts::AGENT_LINEAGE;
    let home = tempfile::tempdir().unwrap();
    let registry = dsh_env_tests::registry_at(home.path());
    let runs = async || depth_of(&registry, AGENT_LINEAGE).await.as_deref() == Some("0");
    assert!(runs().await);
    let cleared = registry.cache().clear().unwrap();
    assert!(
        cleared.removed >= 1 && cleared.freed_bytes > 0,
        "{cleared:?}"
    );
    assert_eq!(cleared.remaining_bytes, 0);
    let left: Vec<_> = std::fs::read_dir(registry.cache().dir()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(runs().await, "after the clear");
    assert_eq!(cached(&registry), [digest(AGENT_LINEAGE)].into());
}

/// Every compile a registry reports, in order, and the most that ran at
/// once. A compile that starts waits (up to 20 s) until `overlap`
/// compiles have started, so that compiles allowed to run together are
/// seen together however loaded the machine is; a serial compiler waits
/// out the minute once per compile, and is seen alone.
#[derive(Default)]
struct Compiles {
    events: std::sync::Mutex<Vec<String>>,
    /// Started so far, running now, the most running at once.
    counts: std::sync::Mutex<(usize, usize, usize)>,
    started: std::sync::Condvar,
    overlap: usize,
}

impl dsh_env::CompileProgress for Compiles {
    fn started(&self, origin: &str, bytes: u64) {
        assert!(bytes > 0, "{origin}");
        self.events.lock().unwrap().push(format!("start {origin}"));
        let mut counts = self.counts.lock().unwrap();
        let (started, running, most) = &mut *counts;
        *started += 1;
        *running += 1;
        *most = (*most).max(*running);
        self.started.notify_all();
        let wait = std::time::Duration::from_secs(20);
        drop(
            self.started
                .wait_timeout_while(counts, wait, |c| c.0 < self.overlap),
        );
    }

    fn finished(&self, origin: &str, _bytes: u64, _elapsed: std::time::Duration, ok: bool) {
        assert!(ok, "{origin}");
        self.events.lock().unwrap().push(format!("end {origin}"));
        self.counts.lock().unwrap().1 -= 1;
    }
}

/// The compiles a registry in `home` (absolute) with `tiering` reports
/// while it registers `manifest`, and the most that ran at once (waiting
/// for `overlap` to start, see [`Compiles`]).
async fn compiles_registering(
    home: &std::path::Path,
    manifest: &dsh_env::Manifest,
    tiering: dsh_env::Tiering,
    overlap: usize,
) -> (Vec<String>, usize) {
    let compiles = std::sync::Arc::new(Compiles {
        overlap,
        ..Compiles::default()
    });
    let home = dsh_env::DshHome::from_absolute(home).unwrap();
    let registry = (dsh_env_tests::builder(home))
        .compile_progress(compiles.clone())
        .tiering(tiering)
        .build()
        .unwrap();
    let _registered = registry
        .register_manifest(manifest, &dsh_env::HostEnv::from_process())
        .await
        .unwrap();
    let events = std::mem::take(&mut *compiles.events.lock().unwrap());
    (events, compiles.counts.lock().unwrap().2)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_home_compiles_its_components_with_winch_one_per_core() {
    let home = tempfile::tempdir().unwrap();
    let paths = [
        artifacts::AGENT_LINEAGE,
        artifacts::CALL_TRACE,
        artifacts::GIT_CONTEXT,
    ];
    let text: String = (paths.iter())
        .map(|path| format!("[[contributor]]\npath = {path:?}\n"))
        .collect();
    let manifest = dsh_env::Manifest::parse(&text, "m.toml", home.path().into()).unwrap();
    // Loaded in parallel, and compiled in parallel, one per core (at most
    // four): wasmtime uses every core for one compile's functions, but
    // not for the helper's start, parsing and writing.
    let cores = std::thread::available_parallelism().unwrap().get();
    let expected = cores
        .min(dsh_env::__internal::MAX_COMPILES_AT_ONCE)
        .min(paths.len());
    let (events, most) =
        compiles_registering(home.path(), &manifest, dsh_env::Tiering::Baseline, expected).await;
    assert_eq!(most, expected, "{events:?}");
    assert_eq!(events.len(), 2 * paths.len(), "{events:?}");
    for path in paths {
        assert!(events.contains(&format!("start {path}")), "{events:?}");
        assert!(events.contains(&format!("end {path}")), "{events:?}");
    }
    // Warm: mapped from the cache, nothing compiled, nothing said.
    let warm = compiles_registering(home.path(), &manifest, dsh_env::Tiering::Baseline, 0);
    assert_eq!(warm.await, (Vec::new(), 0));
}

/// Registers the agent-lineage component at `path` as a later process does
/// from a warm cache (its artifact is left unopened), after `between` ran
/// on the loaded component's entry; returns the first collect's
/// `DSH_AGENT_DEPTH`, or its error.
async fn depth_after_warm_load(
    home: &std::path::Path,
    path: &std::path::Path,
    between: impl FnOnce(&std::path::Path),
) -> Result<Option<String>, String> {
    let registry = dsh_env_tests::registry_at(home);
    let component = registry
        .load(LoadFrom::File(path), &LoadOptions::new())
        .unwrap();
    between(&entries(&registry)[0]);
    let _registration = registry.register(component).await.unwrap();
    let overlay = registry
        .collect(&agent_call("c", "s"), &CollectOptions::new())
        .await;
    overlay
        .map(|c| c.overlay.get("DSH_AGENT_DEPTH").map(str::to_string))
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn an_artifact_lost_after_a_warm_load_is_compiled_again_at_first_use() {
    let (home, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let path = dir.path().join("contributor.wasm");
    std::fs::copy(artifacts::AGENT_LINEAGE, &path).unwrap();
    let path_str = path.to_str().unwrap();
    let warm = dsh_env_tests::registry_at(home.path());
    assert_eq!(depth_of(&warm, path_str).await.as_deref(), Some("0"));
    let artifact = std::fs::read(&entries(&warm)[0]).unwrap();

    // Registering from a warm cache takes the remembered declaration and
    // leaves the artifact to be opened later: an artifact removed (another
    // process's eviction) or damaged in between is compiled again from the
    // component's file, and nothing of the call is lost.
    let removed = depth_after_warm_load(home.path(), &path, |entry| {
        std::fs::remove_file(entry).unwrap()
    });
    assert_eq!(removed.await, Ok(Some("0".into())));
    assert_eq!(entries(&warm).len(), 1, "compiled and stored again");
    assert_eq!(std::fs::read(&entries(&warm)[0]).unwrap(), artifact);

    let damaged = depth_after_warm_load(home.path(), &path, |entry| {
        replace(entry, b"not an artifact")
    });
    assert_eq!(damaged.await, Ok(Some("0".into())));
    assert_eq!(std::fs::read(&entries(&warm)[0]).unwrap(), artifact);

    // A component file changed in between is not compiled for the
    // registration of the old bytes: the call names the change.
    let changed = depth_after_warm_load(home.path(), &path, |entry| {
        std::fs::remove_file(entry).unwrap();
        std::fs::copy(artifacts::CALL_TRACE, &path).unwrap();
    });
    let error = changed.await.unwrap_err();
    let named = format!("{} changed since it was loaded", path.display());
    assert!(error.contains(&named), "{error}");
}

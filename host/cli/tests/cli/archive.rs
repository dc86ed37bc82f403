//! The release archive (`scripts/release-archive`): packed from the binary
//! this test command built (no second build), unpacked into an empty
//! directory, and used from there as a user does: a fresh `HOME`, and only
//! the archive's `bin` and the system's directories on `PATH`.

use super::*;

/// The archive's top directory: `dsh-env-<version>-<target>`.
fn unpacked_name(archive: &Path) -> String {
    let file = archive.file_name().unwrap().to_str().unwrap();
    file.strip_suffix(".tar.gz").unwrap().to_string()
}

/// The host's target triple, which names its archive.
const HOST_TARGET: &str = "x86_64-unknown-linux-gnu";

/// `scripts/release-archive BINARY OUT` under `umask`, with no
/// `$SOURCE_DATE_EPOCH`, `binary` run by `runner` if given: the archive's path.
fn pack(binary: &Path, runner: Option<&Path>, umask: &str, out: &Path) -> PathBuf {
    let script = repository().join("scripts/release-archive");
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
        .arg(script)
        .arg(binary)
        .arg(out)
        .env_remove("SOURCE_DATE_EPOCH")
        .env_remove("TARGET");
    match runner {
        Some(runner) => command.env("RUNNER", runner),
        None => command.env_remove("RUNNER"),
    };
    let packed = command.output().unwrap();
    assert!(packed.status.success(), "{}", stderr(&packed));
    PathBuf::from(stdout(&packed).trim())
}

/// Packs `binary` (run by `runner`, if given) under umask 000 and 022, in
/// `work`, asserts the same bytes with normalised entries, and returns the
/// archive.
pub(super) fn packs_reproducibly(binary: &Path, runner: Option<&Path>, work: &Path) -> PathBuf {
    let open = std::fs::read(pack(binary, runner, "000", &work.join("open"))).unwrap();
    let usual = pack(binary, runner, "022", &work.join("usual"));
    assert!(
        open == std::fs::read(&usual).unwrap(),
        "umask 000 and 022 pack different bytes"
    );
    // `tar -tv`: mode, owner/group, size, date, time, name.
    let listed = Command::new("tar")
        .args(["--numeric-owner", "-tvzf"])
        .arg(&usual)
        .env("TZ", "UTC")
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", stderr(&listed));
    let listing = stdout(&listed);
    assert!(listing.lines().count() > 10, "{listing}");
    for line in listing.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (mode, owner, date) = (fields[0], fields[1], fields[3]);
        let expected = match mode.as_bytes()[0] {
            b'd' => "drwxr-xr-x",
            _ if line.ends_with("/bin/dsh-env") => "-rwxr-xr-x",
            _ => "-rw-r--r--",
        };
        assert_eq!(mode, expected, "{line}");
        assert_eq!(owner, "0/0", "{line}");
        assert_eq!(date, "1970-01-01", "{line}");
    }
    usual
}

/// One test packs and unpacks: each pack gzips the whole test binary
/// (about 8 CPU-seconds).
#[test]
fn the_release_archive_is_the_same_bytes_whatever_the_umask_and_runs_unpacked() {
    let work = tempfile::tempdir().unwrap();
    let archive = packs_reproducibly(Path::new(BINARY), None, work.path());
    runs_unpacked(&archive, HOST_TARGET, None, BOUND);
}

/// Unpacks `archive` (for `target`) into an empty prefix, as its README
/// says, and uses it from there as a user does: a fresh `HOME`, only the
/// prefix's `bin` and the system's directories on `PATH`; its `bin/dsh-env`
/// run by `runner`, if given, each command within `bound`.
pub(super) fn runs_unpacked(archive: &Path, target: &str, runner: Option<&Path>, bound: Duration) {
    let work = tempfile::tempdir().unwrap();
    let name = unpacked_name(archive);
    let version = concat!("dsh-env-", env!("CARGO_PKG_VERSION"), "-");
    assert_eq!(name, format!("{version}{target}"));

    // Unpacked as its README says, into an empty prefix.
    let prefix = work.path().join("prefix");
    std::fs::create_dir(&prefix).unwrap();
    let unpacked = Command::new("tar")
        .arg("-xzf")
        .arg(archive)
        .args(["--strip-components=1", "-C"])
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(unpacked.status.success(), "{}", stderr(&unpacked));
    let bin: Vec<_> = std::fs::read_dir(prefix.join("bin"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(bin, ["dsh-env"], "one executable, its own compile helper");
    for (file, marker) in [
        ("LICENSE", "Apache License"),
        ("README.md", target),
        ("share/bash-completion/completions/dsh-env", "_dsh__env()"),
        ("share/zsh/site-functions/_dsh-env", "#compdef dsh-env"),
        (
            "share/fish/vendor_completions.d/dsh-env.fish",
            "complete -c dsh-env",
        ),
        ("share/man/man1/dsh-env.1", ".TH dsh-env"),
        ("share/man/man1/dsh-env-resolve.1", ".TH dsh-env-resolve"),
    ] {
        let text = std::fs::read_to_string(prefix.join(file)).unwrap_or_default();
        assert!(text.contains(marker), "{file} lacks `{marker}`");
    }
    assert!(
        !prefix.join("share/man/man1/dsh-env-man.1").exists(),
        "the hidden `man` command has no page"
    );

    // A project elsewhere, with copies of two example contributors.
    let (home, project) = (work.path().join("home"), work.path().join("project"));
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(&project).unwrap();
    std::fs::copy(AGENT_LINEAGE, project.join("agent_lineage.wasm")).unwrap();
    std::fs::copy(CALL_TRACE, project.join("call_trace.wasm")).unwrap();
    std::fs::write(
        project.join("dsh-env.toml"),
        "[[contributor]]\npath = \"agent_lineage.wasm\"\n\n[[contributor]]\npath = \"call_trace.wasm\"\n",
    )
    .unwrap();
    std::fs::write(
        project.join("call.json"),
        r#"{"callId":"c1","name":"bash","background":false,"arguments":{"command":"x"},
            "agent":{"session":{"header":{"version":1,"id":"child-1","createdAt":0,"cwd":"/tmp","parentSession":"parent-1","delegationDepth":1}}}}"#,
    )
    .unwrap();
    let path = format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        prefix.join("bin").display()
    );
    let user = |args: &[&str]| {
        let mut command = match runner {
            Some(runner) => {
                let mut command = Command::new(runner);
                command.arg(prefix.join("bin/dsh-env"));
                command
            }
            None => Command::new("dsh-env"),
        };
        command
            .args(args)
            .env_clear()
            .env("HOME", &home)
            .env("PATH", &path)
            .current_dir(&project);
        let output = output_bounded(command, Stdio::null(), None, bound);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        stdout(&output)
    };
    let listed = user(&["list", "--manifest", "dsh-env.toml"]);
    assert!(listed.contains("DSH_PARENT_SESSION_ID"), "{listed}");
    let resolved = user(&[
        "resolve",
        "--manifest",
        "dsh-env.toml",
        "--execution",
        "call.json",
    ]);
    assert!(
        resolved.contains("DSH_PARENT_SESSION_ID=parent-1"),
        "{resolved}"
    );
    let dsh_home = home.join(".dsh");
    assert!(
        resolved.contains(&format!("DSH_HOME={}", dsh_home.display())),
        "{resolved}"
    );
    let ran = user(&[
        "run",
        "--manifest",
        "dsh-env.toml",
        "--execution",
        "call.json",
        "--",
        "sh",
        "-c",
        "echo \"$DSH_SESSION_ID $DSH_PARENT_SESSION_ID\"",
    ]);
    assert_eq!(ran, "child-1 parent-1\n");
    // The components were compiled into the fresh home, by the archive's binary.
    assert!(dsh_home.join("cache").is_dir());

    // The man page renders (`man -l`, where man-db is installed), or at
    // least has its roff headings.
    let page = prefix.join("share/man/man1/dsh-env.1");
    match Command::new("man")
        .arg("-l")
        .arg(&page)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("MANWIDTH", "80")
        .output()
    {
        Ok(rendered) => {
            assert!(rendered.status.success(), "{}", stderr(&rendered));
            let text = stdout(&rendered);
            for heading in ["NAME", "SYNOPSIS", "SUBCOMMANDS", "resolve"] {
                assert!(text.contains(heading), "no {heading} in: {text}");
            }
        }
        Err(_) => {
            let roff = std::fs::read_to_string(&page).unwrap();
            for heading in [".SH NAME", ".SH SYNOPSIS", ".SH SUBCOMMANDS"] {
                assert!(roff.contains(heading), "no {heading} in: {roff}");
            }
        }
    }
}

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

#[test]
fn the_release_archive_runs_unpacked_in_an_empty_directory() {
    let work = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/release-archive");
    let packed = Command::new(script)
        .arg(BINARY)
        .arg(work.path().join("out"))
        .output()
        .unwrap();
    assert!(packed.status.success(), "{}", stderr(&packed));
    let archive = PathBuf::from(stdout(&packed).trim());
    let name = unpacked_name(&archive);
    let version = concat!("dsh-env-", env!("CARGO_PKG_VERSION"), "-");
    assert!(name.starts_with(version), "{name}");

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
        ("README.md", "dsh-env"),
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
        let mut command = Command::new("dsh-env");
        command
            .args(args)
            .env_clear()
            .env("HOME", &home)
            .env("PATH", &path)
            .current_dir(&project);
        let output = output_within(command, Stdio::null(), None);
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

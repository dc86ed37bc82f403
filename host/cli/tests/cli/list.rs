//! `dsh-env list`: keys, owners, and compiling on the way.

use super::*;

#[test]
fn list_shows_every_key_with_owner_and_description() {
    let f = Fixture::new();
    let (manifest, home) = (f.path("manifest.toml"), f.home());
    let mut args = f.with_setup("list", manifest.to_str().unwrap(), &home);
    let human = f.run(&args, &[]);
    assert!(human.status.success(), "{}", stderr(&human));
    let text = stdout(&human);
    assert!(
        text.contains("DSH_AGENT_DEPTH") && text.contains("agent-lineage"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("DSH_HOME") && l.contains("dsh-env")),
        "{text}"
    );
    args.push("--json");
    let listed = json(&f.run(&args, &[]));
    let rows = &listed["keys"];
    let keys: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "DSH_AGENT_DEPTH",
            "DSH_HOME",
            "DSH_PARENT_SESSION_ID",
            "DSH_SESSION_ID",
            "DSH_SHELL",
            "DSH_TRACEPARENT"
        ]
    );
    assert_eq!(rows[5]["owner"], "call-trace");
}

#[test]
fn the_installed_binary_alone_compiles_components_as_its_own_helper() {
    // As `cargo install --path host/cli` leaves it: `dsh-env` alone in a
    // directory, that directory alone on PATH, a fresh home (a cold cache).
    let f = Fixture::new();
    let bin = f.path("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::copy(BINARY, bin.join("dsh-env")).unwrap();
    let user = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new("dsh-env");
        command
            .args(args)
            .env_clear()
            .env("PATH", &bin)
            .env("HOME", f.path("user"))
            .envs(env.iter().copied())
            .current_dir(f.dir.path());
        output_within(command, Stdio::null(), None)
    };
    let listed = user(&["list", "--manifest", "manifest.toml"], &[]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(
        stdout(&listed).contains("DSH_PARENT_SESSION_ID"),
        "{}",
        stdout(&listed)
    );
    let cached = json(&user(&["cache", "list", "--json"], &[]));
    assert_eq!(
        cached["entries"].as_array().map(Vec::len),
        Some(2),
        "{cached}"
    );
    let resolved = user(
        &[
            "resolve",
            "--manifest",
            "manifest.toml",
            "--execution",
            "execution.json",
            "--json",
        ],
        &[],
    );
    assert!(resolved.status.success(), "{}", stderr(&resolved));
    assert_eq!(
        json(&resolved)["overlay"]["DSH_PARENT_SESSION_ID"],
        "parent-1"
    );
    // $DSH_ENV_COMPILER still names another helper, on a cold cache.
    let other = user(
        &[
            "list",
            "--manifest",
            "manifest.toml",
            "--home",
            "other-home",
        ],
        &[("DSH_ENV_COMPILER", "/nonexistent/helper")],
    );
    assert_one_line_error(&other, 2, &["/nonexistent/helper", "$DSH_ENV_COMPILER"]);
}

#[test]
fn compiling_shows_a_line_per_component_on_a_terminal_and_nothing_on_a_pipe() {
    let f = Fixture::new();
    let manifest = f.path("manifest.toml");
    let list = |home: &str| {
        let home = f.path(home);
        let args = ["list", "--manifest", manifest.to_str().unwrap()];
        (args, home)
    };
    let compiled_lines = |text: &str| -> Vec<String> {
        (text.split(['\n', '\r']))
            .filter(|l| l.starts_with("dsh-env: compiled "))
            .map(str::to_string)
            .collect()
    };
    // A cold cache on a terminal: one line per component, with its file,
    // size and time; no escape sequences, so NO_COLOR needs nothing more.
    let (args, home) = list("cold-terminal");
    let home_flag = ["--home", home.to_str().unwrap()];
    let on_terminal = |args: &[&str]| {
        let output = f.on_terminal(&[args, &home_flag].concat(), "");
        assert!(output.status.success(), "{}", stdout(&output));
        stdout(&output)
    };
    let shown = on_terminal(&args);
    let lines = compiled_lines(&shown);
    assert_eq!(lines.len(), 2, "{shown}");
    for file in [AGENT_LINEAGE, CALL_TRACE] {
        let line = lines.iter().find(|l| l.contains(file));
        let line = line.unwrap_or_else(|| panic!("no line for {file}: {shown}"));
        assert!(line.contains(" KiB) in "), "{line}");
        assert!(line.ends_with(" ms") || line.ends_with(" s"), "{line}");
    }
    assert!(!shown.contains('\u{1b}'), "{shown:?}");
    // Warm: nothing was compiled, nothing is said.
    assert_eq!(compiled_lines(&on_terminal(&args)), Vec::<String>::new());

    // A cold cache through a pipe: nothing on stderr.
    let (args, home) = list("cold-pipe");
    let output = f.run(
        &[&args[..], &["--home", home.to_str().unwrap()]].concat(),
        &[],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stderr(&output), "");
}

#[test]
fn without_room_for_the_instance_pool_it_says_so_and_still_works() {
    use std::os::unix::process::CommandExt;
    let f = Fixture::new();
    let mut command = f.command(
        &[
            "resolve",
            "--home",
            &f.home(),
            "--manifest",
            f.path("manifest.toml").to_str().unwrap(),
        ],
        &[],
    );
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            // 64 GiB of address space: room for on-demand instances (each
            // memory reserves about 4 GiB), far too little for the pool's
            // reservation (about 1 TiB).
            let limit = libc::rlimit {
                rlim_cur: 64 << 30,
                rlim_max: 64 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let output = output_within(command, Stdio::null(), None);
    let err = stderr(&output);
    assert!(output.status.success(), "{err}");
    assert!(
        err.contains("WARN")
            && err.contains("the instance pool cannot be reserved (")
            && err.contains("allocating instances on demand"),
        "{err}"
    );
    assert!(stdout(&output).contains("DSH_SHELL=1"));
}

/// `list` on a cold cache compiles with Winch only; `--optimize` compiles
/// Cranelift's code, filed beside it; neither compiles again after.
#[test]
fn list_compiles_the_baseline_unless_told_to_optimize() {
    let f = Fixture::new();
    let manifest = f.path("manifest.toml").display().to_string();
    let home = f.home();
    let engines = || -> Vec<String> {
        let output = f.run(&["cache", "list", "--json", "--home", &home], &[]);
        let entries = json(&output)["entries"].as_array().unwrap().clone();
        let mut engines: Vec<String> = (entries.iter())
            .filter(|e| e["artifact"] == true)
            .map(|e| e["engine"].as_str().unwrap().to_string())
            .collect();
        engines.sort();
        engines.dedup();
        engines
    };
    let list = |extra: &[&str]| {
        let args = [
            &["list", "--manifest", &manifest, "--home", &home][..],
            extra,
        ]
        .concat();
        let output = f.run(&args, &[]);
        assert!(output.status.success(), "{}", stderr(&output));
    };
    list(&[]);
    let baseline = engines();
    assert_eq!(baseline.len(), 1, "{baseline:?}");
    list(&[]);
    assert_eq!(engines(), baseline);
    list(&["--optimize"]);
    let both = engines();
    assert_eq!(both.len(), 2, "{both:?}");
    list(&[]);
    assert_eq!(engines(), both);
}

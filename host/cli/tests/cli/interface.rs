//! What every subcommand shares: versions, help, JSON format, one-line errors, input limits, logs and closed pipes.

use super::*;

#[test]
fn every_json_output_carries_its_format_version() {
    let f = Fixture::new();
    let (manifest, home, execution) = (f.path("manifest.toml"), f.home(), f.path("execution.json"));
    let (manifest, execution) = (manifest.to_str().unwrap(), execution.to_str().unwrap());
    let call = |command| {
        let mut args = f.with_setup(command, manifest, &home);
        args.extend(["--execution", execution, "--json"]);
        args
    };
    let mut list = f.with_setup("list", manifest, &home);
    list.push("--json");
    // Each shape as docs/cli.md's "JSON output" section documents it.
    let outputs: [(&[&str], &[&str]); 5] = [
        (&list, &["keys"]),
        (&call("resolve"), &["overlay"]),
        (
            &call("explain"),
            &[
                "home",
                "manifests",
                "keys",
                "absent",
                "why_absent",
                "contributors",
                "scrubbed",
                "set",
                "omitted",
            ],
        ),
        (
            &["check", AGENT_LINEAGE, "--home", &home, "--json"],
            &[
                "file", "sha256", "signer", "name", "keys", "imports", "dry_run", "problems",
            ],
        ),
        (
            &["cache", "list", "--home", &home, "--json"],
            &["dir", "max_bytes", "total_bytes", "entries"],
        ),
    ];
    for (args, fields) in outputs {
        let output = f.run(args, &[]);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        let value = json(&output);
        assert_eq!(value["format"], 1, "{args:?}: {value}");
        let mut expected: Vec<&str> = fields.to_vec();
        expected.push("format");
        expected.sort_unstable();
        let mut found: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        found.sort_unstable();
        assert_eq!(found, expected, "{args:?}");
    }
}

/// `dsh-env <args>` with its stdout a pipe whose reader is already gone, as
/// under `| head -c 1` once head has left.
fn run_into_a_closed_pipe(f: &Fixture, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut command = f.command(args, &[("RUST_BACKTRACE", "1")]);
    command.stdin(Stdio::null()).stdout(writer);
    command.output().unwrap()
}

/// A reader that stops early ends a printing command quietly, by SIGPIPE as
/// C tools end, with nothing on stderr (no panic, no backtrace); `run` stays
/// out of it: its command gets SIGPIPE's default action and `run` passes
/// the command's death by it through as 141.
#[test]
fn a_closed_stdout_ends_the_cli_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let f = Fixture::new();
    let (manifest, home, execution) = (f.path("manifest.toml"), f.home(), f.path("execution.json"));
    let mut resolve = f.with_setup("resolve", manifest.to_str().unwrap(), &home);
    resolve.extend(["--execution", execution.to_str().unwrap(), "--json"]);
    let list = f.with_setup("list", manifest.to_str().unwrap(), &home);
    for args in [resolve, list, vec!["completions", "bash"]] {
        let output = run_into_a_closed_pipe(&f, &args);
        assert_eq!(stderr(&output), "", "{args:?}");
        assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{args:?}");
    }
    let output = run_into_a_closed_pipe(&f, &["run", "--home", &home, "--", "sh", "-c", "echo hi"]);
    assert_eq!(
        (output.status.code(), stderr(&output).as_str()),
        (Some(128 + libc::SIGPIPE), "")
    );
    // The command's own pipes see the default action too: `yes` dies by it.
    let pipeline = "yes | head -c 1 >/dev/null; echo ${PIPESTATUS[0]}";
    let output = f.run(&["run", "--home", &home, "--", "bash", "-c", pipeline], &[]);
    assert_eq!(stdout(&output), "141\n", "{}", stderr(&output));
}

#[test]
fn the_cli_introduces_itself_and_every_help_ends_with_examples_that_parse() {
    let f = Fixture::new();
    let version = f.run(&["--version"], &[]);
    succeeded("--version", &version);
    let text = stdout(&version);
    for needle in [
        "contracts: dsh:env 0.1.0 (components targeting 0.1.x), 0.2.0",
        &format!("wasmtime: {}", dsh_env::WASMTIME_VERSION),
    ] {
        assert!(text.contains(needle), "{text}");
    }
    let commands = [
        "list",
        "resolve",
        "run",
        "add",
        "check",
        "explain",
        "push",
        "pull",
        "login",
        "trust",
        "demo",
        "serve",
        "cache",
        "store",
        "new",
        "bindgen",
        "componentize",
        "completions",
    ];
    for command in commands {
        let help = stdout(&f.run(&[command, "--help"], &[]));
        let (_, examples) = (help.split_once("\nExamples:\n"))
            .unwrap_or_else(|| panic!("`{command} --help` ends with no examples:\n{help}"));
        let lines: Vec<&str> = examples.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(!lines.is_empty(), "{command}");
        for line in lines {
            // Each example's words parse as they are (with --help, before
            // any `--`, so that nothing runs).
            let example = line.split("   #").next().unwrap().trim();
            let mut words: Vec<&str> = example.split_whitespace().collect();
            assert_eq!(words[..2], ["dsh-env", command], "{line}");
            let end = words.iter().position(|w| *w == "--").unwrap_or(words.len());
            words.insert(end, "--help");
            succeeded(example, &f.run(&words[1..], &[]));
        }
    }
}

#[test]
fn configuration_errors_are_one_line_and_exit_2() {
    let f = Fixture::new();
    let bad = f.write(
        "bad.toml",
        "[[contributor]]\npath = \"a.wasm\"\ncolour = \"blue\"\n",
    );
    let output = f.run(&["list", "--manifest", bad.to_str().unwrap()], &[]);
    assert_config_error(&output, &["bad.toml", "line 3", "unknown field `colour`"]);

    let output = f.run(&["list", "--manifest", "/no/such/manifest.toml"], &[]);
    assert_config_error(&output, &["/no/such/manifest.toml"]);

    let missing = f.write("missing.toml", "[[contributor]]\npath = \"nowhere.wasm\"\n");
    let output = f.run(&["list", "--manifest", missing.to_str().unwrap()], &[]);
    assert_config_error(&output, &["nowhere.wasm"]);

    let junk = f.write("junk.wasm", "not wasm at all");
    let output = f.run(&["check", junk.to_str().unwrap()], &[]);
    assert_config_error(&output, &["junk.wasm", "not a WebAssembly component"]);

    let other_world = f.path("other.wasm");
    std::fs::write(&other_world, b"\0asm\x0d\0\x01\0").unwrap();
    let output = f.run(&["check", other_world.to_str().unwrap()], &[]);
    assert_config_error(
        &output,
        &["other.wasm", "not a dsh:env/contributor component"],
    );

    let output = f.run(&["resolve", "--execution", "/no/exec.json"], &[]);
    assert_config_error(&output, &["/no/exec.json"]);
}

#[test]
fn every_subcommand_has_help() {
    for sub in [
        "list",
        "resolve",
        "run",
        "check",
        "explain",
        "serve",
        "completions",
        "push",
        "store",
        "new",
        "bindgen",
        "componentize",
    ] {
        let output = Command::new(BINARY).args([sub, "--help"]).output().unwrap();
        assert!(output.status.success(), "{sub}");
        assert!(stdout(&output).contains("Usage: dsh-env"), "{sub}");
    }
}

#[test]
fn paths_that_are_not_regular_files_fail_at_once_naming_the_file() {
    let f = Fixture::new();
    let home = f.home();
    let fifo = f.fifo("fifo");
    let fifo = fifo.to_str().unwrap();

    let output = f.run(&["check", fifo], &[]);
    assert_config_error(&output, &[fifo, "is a FIFO, not a regular file"]);
    let output = f.run(&["check", "/dev/zero"], &[]);
    assert_config_error(&output, &["/dev/zero", "is a character device"]);
    let dir = f.dir.path().to_str().unwrap();
    let output = f.run(&["check", dir], &[]);
    assert_config_error(&output, &[dir, "is a directory"]);

    let output = f.run(&["list", "--manifest", fifo, "--home", &home], &[]);
    assert_config_error(&output, &["cannot read manifest", fifo, "is a FIFO"]);
    let output = f.run(&["list", "--manifest", "/dev/zero", "--home", &home], &[]);
    assert_config_error(
        &output,
        &["cannot read manifest /dev/zero", "character device"],
    );

    let entry = f.write("entry.toml", &format!("[[contributor]]\npath = {fifo:?}\n"));
    let output = f.run(
        &[
            "list",
            "--manifest",
            entry.to_str().unwrap(),
            "--home",
            &home,
        ],
        &[],
    );
    assert_config_error(
        &output,
        &["cannot load contributor component", fifo, "is a FIFO"],
    );

    let output = f.run(&["resolve", "--home", &home, "--execution", fifo], &[]);
    assert_config_error(&output, &["cannot read execution", fifo, "is a FIFO"]);
    let output = f.run(
        &["resolve", "--home", &home, "--execution", "/dev/zero"],
        &[],
    );
    assert_config_error(&output, &["/dev/zero", "is a character device"]);
}

#[test]
fn inputs_over_their_size_limit_are_refused_naming_the_limit() {
    let f = Fixture::new();
    let home = f.home();
    // Stdin may be a pipe, but it is read through the same cap.
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let output = output_within(
        f.command(&["resolve", "--home", &home, "--execution", "-"], &[]),
        Stdio::from(zero),
        None,
    );
    assert_config_error(&output, &["from stdin", "over the 1048576-byte limit"]);

    let big = f.write("big.toml", &format!("# {}\n", "x".repeat(1 << 20)));
    let output = f.run(
        &["list", "--manifest", big.to_str().unwrap(), "--home", &home],
        &[],
    );
    assert_config_error(&output, &["big.toml", "over the 1048576-byte limit"]);
    let big = f.write("big.json", &" ".repeat((1 << 20) + 1));
    let output = f.run(
        &[
            "resolve",
            "--home",
            &home,
            "--execution",
            big.to_str().unwrap(),
        ],
        &[],
    );
    assert_config_error(&output, &["big.json", "over the 1048576-byte limit"]);
}

/// The CLI's numbers are checked by their parsers: `run --timeout-secs`
/// from 1 to a day (exit 125, `run`'s own failure), `cache gc --max-mib`
/// and `$DSH_CACHE_MAX_MIB` from 0 to 1 TiB (exit 2), each error naming
/// the option.
#[test]
fn cli_numbers_out_of_range_are_refused_naming_the_option() {
    let f = Fixture::new();
    let home = f.home();
    for value in ["-1", "1.5", "0", "86401", "99999999999999999999", "NaN"] {
        let flag = format!("--timeout-secs={value}");
        let output = f.run(&["run", "--home", &home, &flag, "--", "true"], &[]);
        assert_eq!(
            output.status.code(),
            Some(125),
            "{value}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("--timeout-secs"),
            "{}",
            stderr(&output)
        );
    }
    for value in ["-1", "1.5", "1048577", "NaN"] {
        let flag = format!("--max-mib={value}");
        let output = f.run(&["cache", "--home", &home, "gc", &flag], &[]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{value}: {}",
            stderr(&output)
        );
        assert!(stderr(&output).contains("--max-mib"), "{}", stderr(&output));
        let output = f.run(
            &["cache", "--home", &home, "list"],
            &[("DSH_CACHE_MAX_MIB", value)],
        );
        assert_config_error(
            &output,
            &["$DSH_CACHE_MAX_MIB must be a whole number of MiB from 0 to 1048576"],
        );
    }
}

#[test]
fn logs_are_coloured_only_on_a_terminal_without_no_color_and_debug_is_dsh_envs_own() {
    let f = Fixture::new();
    let manifest = f.path("manifest.toml");
    let log = |verbose: &str, home: &str| {
        let home = f.path(home);
        let args = [
            "list",
            verbose,
            "--manifest",
            manifest.to_str().unwrap(),
            "--home",
            home.to_str().unwrap(),
        ];
        let output = f.run(&args, &[]);
        assert!(output.status.success(), "{}", stderr(&output));
        stderr(&output)
    };
    let wasmtime_lines = |err: &str| err.lines().filter(|l| l.contains("wasmtime::")).count();
    // Each run compiles into a fresh home, so wasmtime has things to say.
    let everything = log("-vvv", "h1");
    assert!(
        wasmtime_lines(&everything) > 0,
        "-vvv shows wasmtime's debug: {everything}"
    );
    assert!(
        !everything.contains('\u{1b}'),
        "colour codes on a pipe: {everything}"
    );
    let debug = log("-vv", "h2");
    assert_eq!(wasmtime_lines(&debug), 0, "{debug}");

    // On a terminal: colour, unless $NO_COLOR is set.
    let on_terminal = |home: &str, env: &[(&str, &str)]| {
        let home = f.path(home);
        let args = [
            "list",
            "-vvv",
            "--manifest",
            manifest.to_str().unwrap(),
            "--home",
            home.to_str().unwrap(),
        ];
        let output = f.on_terminal_with(&args, env, "");
        assert!(output.status.success(), "{}", stdout(&output));
        stdout(&output)
    };
    let coloured = on_terminal("h3", &[]);
    assert!(wasmtime_lines(&coloured) > 0, "{coloured}");
    assert!(
        coloured.contains("\u{1b}["),
        "colour on a terminal: {coloured}"
    );
    let plain = on_terminal("h4", &[("NO_COLOR", "1")]);
    assert!(wasmtime_lines(&plain) > 0, "{plain}");
    assert!(!plain.contains('\u{1b}'), "NO_COLOR: {plain}");
}

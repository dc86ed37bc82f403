//! `dsh-env new`, `make`, and the authoring tools, in all four languages.

use super::*;

/// `dsh-env new <tmp>/<name> --lang <lang>`, then `make <vars>` in it (with
/// this process's environment, for the toolchains); returns the project.
fn new_and_make(f: &Fixture, lang: &str, vars: &[String]) -> PathBuf {
    new_and_make_with(f, lang, vars, None, |_| {})
}

/// An edit of a new project's source: `from` replaced by `to` in `file`.
struct Edit<'a> {
    file: &'a str,
    from: &'a str,
    to: &'a str,
}

impl Edit<'_> {
    /// Makes the edit in `project`; returns the file's text before it.
    fn apply(&self, project: &Path) -> String {
        let source = project.join(self.file);
        let text = std::fs::read_to_string(&source).unwrap();
        assert!(text.contains(self.from), "{} is not in {text}", self.from);
        std::fs::write(&source, text.replacen(self.from, self.to, 1)).unwrap();
        text
    }
}

/// [`new_and_make`], the source edited by `edit` (if any) and `make`'s
/// command adjusted by `adjust` first.
fn new_and_make_with(
    f: &Fixture,
    lang: &str,
    vars: &[String],
    edit: Option<&Edit>,
    adjust: impl FnOnce(&mut Command),
) -> PathBuf {
    let name = format!("my-{lang}-tool");
    let project = f.path(&name);
    let project_arg = project.to_str().unwrap();
    let created = f.run(&["new", project_arg, "--lang", lang], &[]);
    assert!(created.status.success(), "{}", stderr(&created));
    assert!(
        stdout(&created).contains(&key_of(lang)),
        "{}",
        stdout(&created)
    );
    if let Some(edit) = edit {
        edit.apply(&project);
    }
    let mut make = Command::new("make");
    make.arg("-C")
        .arg(&project)
        .arg(format!("DSH_ENV={BINARY}"))
        .args(vars);
    adjust(&mut make);
    let made = make.output().unwrap();
    succeeded(&format!("make in a new {lang} project"), &made);
    project
}

/// The key the template for `lang` declares (named `my-<lang>-tool`).
fn key_of(lang: &str) -> String {
    format!("DSH_MY_{}_TOOL", lang.to_uppercase())
}

/// The project's component passes `check`, and its manifest resolves the
/// template's key to the call's tool.
fn assert_checks_and_resolves(f: &Fixture, lang: &str, project: &Path) {
    let home = f.home();
    let component = project.join("contributor.wasm");
    let check = ["check", component.to_str().unwrap(), "--home", &home];
    let checked = f.command(&check, &[]).output().unwrap();
    succeeded(&format!("check of the {lang} component"), &checked);
    assert!(
        stdout(&checked).contains(&key_of(lang)),
        "{}",
        stdout(&checked)
    );
    let resolved = resolve_project(f, project);
    succeeded(&format!("resolve with the {lang} contributor"), &resolved);
    let line = format!("{}=bash\n", key_of(lang));
    assert!(
        stdout(&resolved).contains(&line),
        "{lang}: {}",
        stdout(&resolved)
    );
}

#[test]
fn new_rust_and_c_projects_build_with_make_pass_check_and_resolve_their_key() {
    let f = Fixture::new();
    // As a user without a checkout builds it: the guest SDK is the copy
    // `new` wrote (no path into this repository, no workspace above the
    // temporary folder), a fresh HOME, the project's own target folder.
    // Only rustup's and cargo's homes are this machine's, for the pinned
    // toolchain and, offline, the registry cache (wit-bindgen).
    let user_home = PathBuf::from(std::env::var_os("HOME").unwrap());
    let tool_home = |var: &str, default: &str| {
        std::env::var_os(var).map_or_else(|| user_home.join(default), PathBuf::from)
    };
    let (rustup_home, cargo_home) = (
        tool_home("RUSTUP_HOME", ".rustup"),
        tool_home("CARGO_HOME", ".cargo"),
    );
    let fresh_home = f.path("user");
    std::fs::create_dir(&fresh_home).unwrap();
    let started = std::time::Instant::now();
    let offline = ["CARGO_FLAGS=--offline".into()];
    let rust = new_and_make_with(&f, "rust", &offline, None, |make| {
        // Nothing of this test's own cargo run: not its toolchain, not its
        // target folder, not its manifest's folder.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.starts_with("CARGO") || name.starts_with("RUSTUP") || name.starts_with("RUSTC")
            {
                make.env_remove(&*name);
            }
        }
        make.env("HOME", &fresh_home)
            .env("RUSTUP_HOME", &rustup_home)
            .env("CARGO_HOME", &cargo_home);
    });
    eprintln!("new --lang rust and make: {:?}", started.elapsed());
    let manifest = std::fs::read_to_string(rust.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("dsh-env-guest = { path = \"dsh-env-guest\"")
            && manifest.contains("replace this line with `dsh-env-guest = \"0.2\"`"),
        "{manifest}"
    );
    let lock = std::fs::read_to_string(rust.join("Cargo.lock")).unwrap();
    assert!(!lock.contains(repository().to_str().unwrap()), "{lock}");
    assert_checks_and_resolves(&f, "rust", &rust);
    let size = std::fs::metadata(rust.join("contributor.wasm"))
        .unwrap()
        .len();
    assert!(
        size < 200_000,
        "the size profile is not applied: {size} bytes"
    );

    let c = new_and_make(&f, "c", &[]);
    assert!(c.join("gen/contributor_component_type.o").exists());
    assert_checks_and_resolves(&f, "c", &c);
    // A value that is not UTF-8 is named by its key, not refused whole.
    let not_utf8 = Edit {
        file: "guest.c",
        from: "&execution->tool, err",
        to: "&(contributor_string_t){(uint8_t *)\"\\xff\", 1}, err",
    };
    assert_resolve_fails_after_edit(
        &f,
        (&c, &[format!("DSH_ENV={BINARY}")]),
        &not_utf8,
        &[("bash", "the value for DSH_MY_C_TOOL is not UTF-8")],
    );
}

/// The C template and the `workspace-id` example are one recipe: the
/// template's Makefile, given the example's source, makes the very component
/// the test build (`tests/artifacts`, the code behind `bindgen c` and
/// `componentize`) makes from it.
#[test]
fn the_c_templates_makefile_builds_the_c_example_byte_for_byte() {
    let f = Fixture::new();
    let project = new_and_make(&f, "c", &[]);
    std::fs::copy(
        repository().join("contributors/workspace-id/workspace_id.c"),
        project.join("guest.c"),
    )
    .unwrap();
    let made = Command::new("make")
        .arg("-C")
        .arg(&project)
        .arg(format!("DSH_ENV={BINARY}"))
        .args(["clean", "all"])
        .output()
        .unwrap();
    succeeded("make with the example's source", &made);
    let built = std::fs::read(project.join("contributor.wasm")).unwrap();
    let example = std::fs::read(dsh_env_artifacts::WORKSPACE_ID).unwrap();
    assert!(
        built == example,
        "the template built {} bytes, the test build {}",
        built.len(),
        example.len()
    );
}

/// Each project is built once, its source edited first so that calls to
/// some tools fail: a Python or JavaScript build, and the compile of its
/// interpreter, take tens of CPU-seconds each. Every other tool takes the
/// template's own code, which `check` and `resolve` then run.
#[test]
fn new_python_and_js_projects_build_with_the_pinned_toolchains() {
    let f = Fixture::new();
    let repo = repository();
    let tool = repo.join("target/tools/venv/bin/componentize-py");
    let modules = repo.join("contributors/call-context/node_modules");
    // Each keeps one core busy for tens of seconds: side by side.
    std::thread::scope(|scope| {
        let python = scope.spawn(|| {
            let vars = [format!("COMPONENTIZE_PY={}", tool.display())];
            // The key of a value that is not a string, and an exception's
            // message.
            let edit = Edit {
                file: "app.py",
                from: "[(KEY, execution.tool)]",
                to: "([(KEY, len(execution.tool))] if execution.tool == \"int\" \
                     else [(KEY, {}[\"team\"])] if execution.tool == \"raise\" \
                     else [(KEY, execution.tool)])",
            };
            let project = new_and_make_with(&f, "python", &vars, Some(&edit), |_| {});
            assert!(project.join("wit/contributor.wit").exists());
            assert_checks_and_resolves(&f, "python", &project);
            assert_resolve_fails(
                &f,
                &project,
                &[
                    (
                        "int",
                        "resolve's value for DSH_MY_PYTHON_TOOL is an int, not a string",
                    ),
                    ("raise", "KeyError: 'team'"),
                ],
            );
        });
        let vars = [format!("NODE_MODULES={}", modules.display())];
        // What a JavaScript author gets wrong reaches them by name: an
        // `Error`'s message, and a result that is not a list of pairs.
        let edit = Edit {
            file: "contributor.js",
            from: "[[KEY, execution.tool]]",
            to: "(execution.tool === 'throw' ? (() => { throw new Error('no team configured'); })() \
                 : execution.tool === 'object' ? ({ DSH_MY_JS_TOOL: execution.tool }) \
                 : execution.tool === 'number' ? [[KEY, execution.tool.length]] \
                 : [[KEY, execution.tool]])",
        };
        let project = new_and_make_with(&f, "js", &vars, Some(&edit), |_| {});
        assert_checks_and_resolves(&f, "js", &project);
        assert_resolve_fails(
            &f,
            &project,
            &[
                ("throw", "no team configured"),
                (
                    "object",
                    "resolve returned an object, not a list of [key, value] pairs",
                ),
                (
                    "number",
                    "resolve's value for DSH_MY_JS_TOOL is a number, not a string",
                ),
            ],
        );
        python.join().unwrap();
    });
}

/// `dsh-env resolve` with the project's manifest and the fixture's execution.
fn resolve_project(f: &Fixture, project: &Path) -> Output {
    resolve_call(f, project, &f.path("execution.json"))
}

/// `dsh-env resolve` with the project's manifest and `execution`.
fn resolve_call(f: &Fixture, project: &Path, execution: &Path) -> Output {
    let manifest = project.join("manifest.toml");
    let home = f.home();
    let resolve = [
        "resolve",
        "--manifest",
        manifest.to_str().unwrap(),
        "--home",
        &home,
        "--execution",
        execution.to_str().unwrap(),
    ];
    f.command(&resolve, &[]).output().unwrap()
}

/// Makes `edit` in `project`, remakes it (with `vars`), restores the
/// source, and checks that `resolve` of a call to each `(tool, message)`
/// then fails with that message.
fn assert_resolve_fails_after_edit(
    f: &Fixture,
    (project, vars): (&Path, &[String]),
    edit: &Edit,
    failures: &[(&str, &str)],
) {
    let text = edit.apply(project);
    let made = Command::new("make")
        .arg("-C")
        .arg(project)
        .args(vars)
        .output()
        .unwrap();
    succeeded(&format!("make after `{}`", edit.to), &made);
    std::fs::write(project.join(edit.file), text).unwrap();
    assert_resolve_fails(f, project, failures);
}

/// `resolve` of a call to each `(tool, message)` fails with that message.
fn assert_resolve_fails(f: &Fixture, project: &Path, failures: &[(&str, &str)]) {
    for (tool, message) in failures {
        let execution = f.write(
            &format!("{tool}.json"),
            &serde_json::json!({"callId": "c1", "name": tool}).to_string(),
        );
        let out = resolve_call(f, project, &execution);
        assert!(!out.status.success(), "{tool} resolved: {}", stdout(&out));
        let err = stderr(&out);
        assert!(err.contains(message), "{tool}: {err}");
    }
}

#[test]
fn new_refuses_a_non_empty_directory_and_a_bad_name_saying_why() {
    let f = Fixture::new();
    let taken = f.path("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("notes.txt"), "mine").unwrap();
    let out = f.run(&["new", taken.to_str().unwrap(), "--lang", "c"], &[]);
    assert_config_error(&out, &["taken exists and is not empty"]);
    assert_eq!(std::fs::read_dir(&taken).unwrap().count(), 1);

    let out = f.run(
        &["new", f.path("My_Tool").to_str().unwrap(), "--lang", "rust"],
        &[],
    );
    assert_config_error(
        &out,
        &["`My_Tool` cannot name a contributor", "'M'", "--name"],
    );
    let out = f.run(
        &[
            "new",
            f.path("x").to_str().unwrap(),
            "--lang",
            "js",
            "--name",
            "session-id",
        ],
        &[],
    );
    assert_config_error(&out, &["DSH_SESSION_ID, is reserved"]);
    assert!(!f.path("x").exists());

    // An empty directory is fine, and --name wins over its name.
    let empty = f.path("Empty Dir");
    std::fs::create_dir(&empty).unwrap();
    let out = f.run(
        &[
            "new",
            empty.to_str().unwrap(),
            "--lang",
            "python",
            "--name",
            "greeter",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let app = std::fs::read_to_string(empty.join("app.py")).unwrap();
    assert!(
        app.contains("\"greeter\"") && app.contains("DSH_GREETER"),
        "{app}"
    );
    assert!(empty.join(".gitignore").exists() && empty.join("README.md").exists());
}

#[test]
fn bindgen_and_componentize_name_what_is_wrong() {
    let f = Fixture::new();
    let gen_dir = f.path("gen");
    let out = f.run(&["bindgen", "c", gen_dir.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    for file in [
        "contributor.h",
        "contributor.c",
        "contributor_component_type.o",
    ] {
        assert!(stdout(&out).contains(file), "{}", stdout(&out));
        assert!(gen_dir.join(file).exists(), "{file}");
    }

    let componentize = |input: &Path, output: &str| {
        let output = f.path(output);
        let out = f.run(
            &[
                "componentize",
                input.to_str().unwrap(),
                "-o",
                output.to_str().unwrap(),
            ],
            &[],
        );
        (out, output)
    };
    let text = f.write("notes.txt", "not wasm");
    let (out, written) = componentize(&text, "a.wasm");
    assert_one_line_error(&out, 1, &["notes.txt", "not a WebAssembly module"]);
    assert!(!written.exists());

    let (out, _) = componentize(Path::new(AGENT_LINEAGE), "b.wasm");
    assert_one_line_error(&out, 1, &["already a component"]);

    // An empty core module: the world is embedded, but nothing exports it.
    let empty = f.path("empty.wasm");
    std::fs::write(&empty, b"\0asm\x01\0\0\0").unwrap();
    let (out, written) = componentize(&empty, "c.wasm");
    assert_one_line_error(
        &out,
        1,
        &[
            "empty.wasm",
            "does not fit the world `dsh:env/contributor@0.1.0`",
            "declare",
        ],
    );
    assert!(!written.exists());

    let (out, _) = componentize(&f.path("missing.wasm"), "d.wasm");
    assert_config_error(&out, &["cannot read module", "missing.wasm"]);
}

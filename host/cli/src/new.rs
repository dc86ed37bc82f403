//! `dsh-env new`: a contributor project from one of the templates in
//! `host/cli/templates/` (embedded here), with its name and key filled in,
//! whose `make` builds `contributor.wasm`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use dsh_env::DshKey;
use dsh_env_support::input::escape_controls;

use crate::failure::{CliResult, Failure};

/// A template's languages.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub(crate) enum Lang {
    /// Rust with the guest SDK (cargo, wasm32-wasip2).
    Rust,
    /// Python with componentize-py.
    Python,
    /// JavaScript with componentize-js.
    Js,
    /// C with clang and wasi-libc (Debian), `dsh-env bindgen c` and
    /// `dsh-env componentize`.
    C,
}

/// The arguments of `new`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The project directory to create (it may exist if empty).
    dir: PathBuf,
    /// The language.
    #[arg(long, value_enum)]
    lang: Lang,
    /// The contributor's name: lowercase letters, digits and single dashes,
    /// starting with a letter (default: the directory's name). Its key is
    /// `DSH_` and the name in capitals, dashes as `_`.
    #[arg(long)]
    name: Option<String>,
}

/// One file of a template: its path in the project and its text, in which
/// `{{name}}` and `{{key}}` are filled in.
type TemplateFile = (&'static str, &'static str);

/// Embeds `templates/<path>` as `<project path>`.
macro_rules! template {
    ($($project:literal => $path:literal),* $(,)?) => {
        &[$(($project, include_str!(concat!("../templates/", $path)))),*]
    };
}

/// Every project has these.
const COMMON: &[TemplateFile] = template!["manifest.toml" => "manifest.toml"];

const RUST: &[TemplateFile] = template![
    // Not `Cargo.toml` here: cargo would take the folder for a package.
    "Cargo.toml" => "rust/Cargo.toml.in",
    "rust-toolchain.toml" => "rust/rust-toolchain.toml",
    "src/lib.rs" => "rust/src/lib.rs",
    "Makefile" => "rust/Makefile",
    "README.md" => "rust/README.md",
    ".gitignore" => "rust/gitignore",
];

/// The guest SDK (`guest-sdk/`, through links in `templates/rust/`): a Rust
/// project builds with no checkout and no published crate. Written as it
/// is, nothing filled in; `sdk_is_embedded_whole` keeps the list complete.
const RUST_SDK: &[TemplateFile] = template![
    "dsh-env-guest/Cargo.toml" => "rust/dsh-env-guest/Cargo.toml.in",
    "dsh-env-guest/README.md" => "rust/dsh-env-guest/README.md",
    "dsh-env-guest/src/lib.rs" => "rust/dsh-env-guest/src/lib.rs",
    "dsh-env-guest/src/frozen.rs" => "rust/dsh-env-guest/src/frozen.rs",
    "dsh-env-guest/wit/README.md" => "rust/dsh-env-guest/wit/README.md",
    "dsh-env-guest/wit/frozen.sha256" => "rust/dsh-env-guest/wit/frozen.sha256",
    "dsh-env-guest/wit/since_v0.1.0/contributor.wit" =>
        "rust/dsh-env-guest/wit/since_v0.1.0/contributor.wit",
    "dsh-env-guest/wit/since_v0.2.0/contributor.wit" =>
        "rust/dsh-env-guest/wit/since_v0.2.0/contributor.wit",
];

const PYTHON: &[TemplateFile] = template![
    "app.py" => "python/app.py",
    "dsh_env.py" => "python/dsh_env.py",
    "requirements.txt" => "python/requirements.txt",
    "Makefile" => "python/Makefile",
    "README.md" => "python/README.md",
    ".gitignore" => "python/gitignore",
];

/// `package-lock.json` links to `contributors/call-context`'s, the lock the
/// test suite installs; [`js_lock`] renames its root package. So does
/// `warm-bindings.js` and `dsh-env.js`, which the example is built with too.
const JS: &[TemplateFile] = template![
    "contributor.js" => "js/contributor.js",
    "warm-bindings.js" => "js/warm-bindings.js",
    "dsh-env.js" => "js/dsh-env.js",
    "build.mjs" => "js/build.mjs",
    "package.json" => "js/package.json",
    "Makefile" => "js/Makefile",
    "README.md" => "js/README.md",
    ".gitignore" => "js/gitignore",
];

const C: &[TemplateFile] = template![
    "guest.c" => "c/guest.c",
    "Makefile" => "c/Makefile",
    "README.md" => "c/README.md",
    ".gitignore" => "c/gitignore",
];

/// The root package's name in the embedded JavaScript lockfile.
const JS_LOCK_NAME: &str = "dsh-env-call-context";

/// The longest name accepted.
const MAX_NAME_LEN: usize = 64;

/// Creates the project and says how to build it.
pub(crate) fn run(Args { dir, lang, name }: Args) -> CliResult<ExitCode> {
    let shown = escape_controls(&dir.display().to_string()).into_owned();
    let name = match name {
        Some(name) => name,
        None => dir
            .file_name()
            .and_then(|name| name.to_str())
            .map(str::to_string)
            .ok_or_else(|| Failure::config(format!("{shown} has no name to use: pass --name")))?,
    };
    let key = key_for(&name).map_err(|problem| {
        Failure::config(format!(
            "`{}` cannot name a contributor: {problem}{}",
            escape_controls(&name),
            if name_was_dir(&dir, &name) {
                "; pass --name"
            } else {
                ""
            }
        ))
    })?;
    refuse_non_empty(&dir, &shown)?;
    for (path, contents) in project(lang, &name, &key) {
        let path = dir.join(path);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, contents));
        written.map_err(|e| {
            let path = escape_controls(&path.display().to_string()).into_owned();
            Failure::runtime(format!("cannot write {path}: {e}"))
        })?;
    }
    let lang = clap::ValueEnum::to_possible_value(&lang).map(|v| v.get_name().to_string());
    let lang = lang.unwrap_or_default();
    println!("created {shown}: contributor `{name}` ({lang}), with key {key}");
    println!("build it:  cd {shown} && make   (then `make check`; see README.md)");
    Ok(ExitCode::SUCCESS)
}

/// Whether `name` came from the directory, not `--name`.
fn name_was_dir(dir: &Path, name: &str) -> bool {
    dir.file_name().is_some_and(|file| file == name)
}

/// The key a contributor named `name` declares, or why it cannot be named so.
fn key_for(name: &str) -> Result<String, String> {
    if name.is_empty() {
        return Err("it is empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("it is {} bytes, over {MAX_NAME_LEN}", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-'))
    {
        return Err(format!(
            "it holds {c:?}; use lowercase letters, digits and dashes"
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err("it must start with a lowercase letter".into());
    }
    if name.ends_with('-') || name.contains("--") {
        return Err("a dash must sit between two letters or digits".into());
    }
    if name == dsh_env::BUILTIN_OWNER {
        return Err("it is reserved for dsh-env's built-in keys".into());
    }
    let key = format!("DSH_{}", name.to_ascii_uppercase().replace('-', "_"));
    match DshKey::new(key.as_str()) {
        Ok(checked) if checked.is_reserved() => {
            Err(format!("its key, {key}, is reserved for dsh-env"))
        }
        Ok(_) => Ok(key),
        Err(e) => Err(format!("its key, {key}, is malformed: {e}")),
    }
}

/// Refuses a `dir` that is not an empty directory, if it exists.
fn refuse_non_empty(dir: &Path, shown: &str) -> CliResult {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(Failure::config(format!(
                "{shown} exists and is not empty: choose a new directory"
            ))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Err(Failure::config(format!(
            "{shown} exists and is not a directory"
        ))),
        Err(e) => Err(Failure::config(format!("cannot read {shown}: {e}"))),
    }
}

/// Every file of the project, (path, contents), the name and key filled in.
fn project(lang: Lang, name: &str, key: &str) -> Vec<(String, String)> {
    let files = match lang {
        Lang::Rust => RUST,
        Lang::Python => PYTHON,
        Lang::Js => JS,
        Lang::C => C,
    };
    let fill = |text: &str| text.replace("{{name}}", name).replace("{{key}}", key);
    let mut project: Vec<(String, String)> = COMMON
        .iter()
        .chain(files)
        .map(|(path, text)| (path.to_string(), fill(text)))
        .collect();
    if lang == Lang::Rust {
        project.extend((RUST_SDK.iter()).map(|(path, text)| (path.to_string(), text.to_string())));
    }
    if matches!(lang, Lang::Python | Lang::Js) {
        // componentize-py and -js read the contract from a folder.
        let wit = dsh_env_authoring::FROZEN_CONTRACT.iter();
        project.extend(wit.map(|(file, text)| (format!("wit/{file}"), text.to_string())));
    }
    if lang == Lang::Js {
        project.push(("package-lock.json".into(), js_lock(name)));
    }
    project
}

/// The embedded lockfile with its root package named `name`.
fn js_lock(name: &str) -> String {
    include_str!("../templates/js/package-lock.json").replace(
        &format!("\"name\": \"{JS_LOCK_NAME}\""),
        &format!("\"name\": \"{name}\""),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_keys_and_bad_ones_say_why() {
        assert_eq!(key_for("my-tool2").unwrap(), "DSH_MY_TOOL2");
        for (name, why) in [
            ("", "empty"),
            ("My-Tool", "holds 'M'"),
            ("my tool", "holds ' '"),
            ("2fast", "start with a lowercase letter"),
            ("a--b", "between two letters"),
            ("ab-", "between two letters"),
            ("dsh-env", "reserved for dsh-env's built-in keys"),
            ("session-id", "DSH_SESSION_ID, is reserved"),
        ] {
            let err = key_for(name).unwrap_err();
            assert!(err.contains(why), "{name:?}: {err}");
        }
        assert!(key_for(&"a".repeat(65)).unwrap_err().contains("over 64"));
    }

    #[test]
    fn every_placeholder_is_filled_and_the_js_lock_is_renamed() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js, Lang::C] {
            for (path, text) in project(lang, "tool", "DSH_TOOL") {
                assert!(!text.contains("{{"), "{lang:?} {path}");
            }
        }
        let lock: serde_json::Value = serde_json::from_str(&js_lock("tool")).unwrap();
        assert_eq!(lock["name"], "tool");
        assert_eq!(lock["packages"][""]["name"], "tool");
    }

    /// Every file `cargo package` puts in the guest SDK's crate is written
    /// into a Rust project, and its manifest matches the crate's.
    #[test]
    fn sdk_is_embedded_whole() {
        let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk");
        let mut on_disk = Vec::new();
        let mut dirs = vec![sdk.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let relative = path.strip_prefix(&sdk).unwrap().to_str().unwrap();
                    on_disk.push(format!("dsh-env-guest/{relative}"));
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = RUST_SDK.iter().map(|(p, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
        for (path, text) in RUST_SDK {
            if *path != "dsh-env-guest/Cargo.toml" {
                let original = path.replacen("dsh-env-guest", "", 1);
                let original = sdk.join(original.trim_start_matches('/'));
                assert_eq!(*text, std::fs::read_to_string(original).unwrap(), "{path}");
            }
        }
        // The standalone manifest: the crate's version and dependencies,
        // the workspace's values written out.
        let toml = |path: &Path| -> toml_edit::DocumentMut {
            std::fs::read_to_string(path).unwrap().parse().unwrap()
        };
        let crate_manifest = toml(&sdk.join("Cargo.toml"));
        let workspace = toml(&sdk.join("../Cargo.toml"));
        let (_, text) = RUST_SDK
            .iter()
            .find(|(p, _)| p.ends_with("Cargo.toml"))
            .unwrap();
        let written: toml_edit::DocumentMut = text.parse().unwrap();
        let shown = |item: &toml_edit::Item| item.to_string().trim().to_string();
        for field in ["name", "version", "description"] {
            assert_eq!(
                shown(&written["package"][field]),
                shown(&crate_manifest["package"][field])
            );
        }
        for field in ["edition", "rust-version", "license"] {
            assert_eq!(
                shown(&written["package"][field]),
                shown(&workspace["workspace"]["package"][field])
            );
        }
        for (table, name) in [
            ("dependencies", "wit-bindgen"),
            ("dev-dependencies", "sha2"),
        ] {
            assert_eq!(
                shown(&written[table][name]),
                shown(&workspace["workspace"]["dependencies"][name]),
                "{table}.{name}"
            );
        }
    }

    /// The templates pin what the test suite installs for the examples.
    #[test]
    fn the_templates_pin_the_examples_toolchains() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let json = |path: &Path| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
        };
        let template =
            json(&Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/js/package.json"));
        let example = json(&repo.join("contributors/call-context/package.json"));
        assert_eq!(template["devDependencies"], example["devDependencies"]);
        let pins = |text: &str| -> Vec<String> {
            let lines = text.lines().map(str::trim);
            lines
                .filter(|line| !line.is_empty() && !line.starts_with('#'))
                .map(str::to_string)
                .collect()
        };
        let example =
            std::fs::read_to_string(repo.join("contributors/session-url/requirements.txt"))
                .unwrap();
        let (_, template) = PYTHON
            .iter()
            .find(|(path, _)| *path == "requirements.txt")
            .unwrap();
        assert_eq!(pins(template), pins(&example));
    }
}

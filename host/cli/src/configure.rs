//! `dsh-env setup <harness>`: writes dsh-env into a harness's own
//! configuration (its settings or hooks file, or an OpenCode plugin), and
//! `--remove` takes it out again.
//!
//! The files are edited as text ([`crate::jsontext`], `toml_edit`): every
//! other entry keeps its bytes, a second run changes nothing, and
//! `--remove` deletes exactly what was added, with any array, table or file
//! left empty by that (so a file setup created disappears). A file that
//! does not parse is refused, naming it and where, and never written.
//! Writes are atomic. An older dsh-env hook of the same harness (another
//! manifest, another binary) is replaced in place.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use dsh_env_support::atomic_file;
use dsh_env_support::digest::sha256_hex;
use dsh_env_support::input::{MAX_MANIFEST_BYTES, escape_controls, read_regular_text};
use serde_json::{Value, json};

use crate::failure::{CliResult, Failure};
use crate::harness::Harness;
use crate::jsontext::{self, Node};
use crate::manifests::{self, Approval, shell_quoted};

/// The OpenCode plugin, `__SERVE__` standing for the server's argv.
const OPENCODE_PLUGIN: &str = include_str!("opencode-plugin.js");

/// The first line of every plugin file setup writes: a file without it is
/// not setup's to replace or remove.
const PLUGIN_MARK: &str = "// dsh-env: written by `dsh-env setup opencode`";

/// Codex's default hook timeout, part of the identity it trusts (seconds).
const CODEX_HOOK_TIMEOUT: u64 = 600;

/// The arguments of `setup`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The harness to wire dsh-env into.
    harness: Harness,
    /// The manifest the hook loads (default: the usual search, at each call).
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// The home the hook uses (default: the manifest's `home`, then $DSH_HOME, then ~/.dsh).
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Configure the project in DIR (its `.claude/`, `.codex/`, `.gemini/`
    /// or `.opencode/`), not the user's configuration.
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// Print the change as a diff and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Take out what setup added.
    #[arg(long)]
    remove: bool,
}

/// One file's change: its text before and after (`None`: no file).
struct Change {
    path: PathBuf,
    before: Option<String>,
    after: Option<String>,
}

/// Plans the change, then prints it (`--dry-run`) or makes it.
pub(crate) fn run(args: Args) -> CliResult<ExitCode> {
    let changes = plan(&args)?;
    let mut any = false;
    for change in &changes {
        if change.before == change.after {
            continue;
        }
        any = true;
        let shown = escape_controls(&change.path.display().to_string()).into_owned();
        if args.dry_run {
            print!(
                "{}",
                unified_diff(&shown, change.before.as_deref(), change.after.as_deref())
            );
            continue;
        }
        write_change(change).map_err(|e| Failure::runtime(format!("{shown}: {e}")))?;
        match change.after {
            Some(_) => println!("dsh-env: wrote {shown}"),
            None => println!("dsh-env: removed {shown}"),
        }
    }
    if !any {
        let what = if args.remove {
            "nothing to remove"
        } else {
            "already set up"
        };
        println!("dsh-env: {}: {what}", args.harness.name());
    } else if !args.dry_run && !args.remove && args.harness == Harness::Codex {
        println!(
            "dsh-env: recorded Codex's trust in the hook, as its /hooks review does \
             (review it there)"
        );
    }
    if !args.dry_run && !args.remove && args.project.is_some() {
        let note = match args.harness {
            Harness::Codex => Some("Codex loads a project's .codex/ only in a project it trusts"),
            Harness::Gemini => Some("Gemini CLI runs a project's hooks only in a trusted folder"),
            _ => None,
        };
        if let Some(note) = note {
            println!("dsh-env: note: {note}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Makes one change: writes the file atomically (creating its directory),
/// or removes it (and the OpenCode plugin directory it leaves empty).
fn write_change(change: &Change) -> std::io::Result<()> {
    match &change.after {
        Some(text) => {
            if let Some(dir) = change.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            atomic_file::write(&change.path, text)
        }
        None => {
            std::fs::remove_file(&change.path)?;
            if change.path.extension().is_some_and(|e| e == "js")
                && let Some(dir) = change.path.parent()
            {
                // Only an empty one goes.
                let _ = std::fs::remove_dir(dir);
            }
            Ok(())
        }
    }
}

/// Every file's change for `args`.
fn plan(args: &Args) -> CliResult<Vec<Change>> {
    let command = hook_command(args)?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let scope = |project_dir: &str, user: Option<PathBuf>| -> CliResult<PathBuf> {
        match &args.project {
            Some(dir) => Ok(absolute(dir)?.join(project_dir)),
            None => user.ok_or_else(|| Failure::config("$HOME is not set: pass --project DIR")),
        }
    };
    let mut changes = Vec::new();
    match args.harness {
        Harness::ClaudeCode | Harness::Gemini => {
            let (dir, event, matcher, comments) = match args.harness {
                Harness::ClaudeCode => (".claude", "PreToolUse", "Bash", false),
                _ => (".gemini", "BeforeTool", "run_shell_command", true),
            };
            let path = scope(dir, home.map(|h| h.join(dir)))?.join("settings.json");
            let hook = HookEntry {
                harness: args.harness,
                event,
                matcher,
                command: &command,
                comments,
            };
            changes.push(hook.change(&path, args.remove)?.0);
        }
        Harness::Codex => {
            let codex_home = match std::env::var_os("CODEX_HOME") {
                Some(dir) if !dir.is_empty() => Some(absolute(Path::new(&dir))?),
                _ => home.map(|h| h.join(".codex")),
            };
            let path = scope(".codex", codex_home.clone())?.join("hooks.json");
            let hook = HookEntry {
                harness: args.harness,
                event: "PreToolUse",
                matcher: "Bash",
                command: &command,
                comments: false,
            };
            let (change, position) = hook.change(&path, args.remove)?;
            let config = codex_home
                .ok_or_else(|| Failure::config("neither $CODEX_HOME nor $HOME is set"))?
                .join("config.toml");
            if let Some((group, handler)) = position {
                let key = format!("{}:pre_tool_use:{group}:{handler}", path.display());
                let hash = (!args.remove).then(|| codex_trusted_hash(&command));
                changes.push(codex_trust(&config, &key, hash.as_deref())?);
            }
            changes.insert(0, change);
        }
        Harness::Opencode => {
            let config = match std::env::var_os("XDG_CONFIG_HOME") {
                Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
                _ => home.map(|h| h.join(".config")),
            };
            let path =
                scope(".opencode", config.map(|c| c.join("opencode")))?.join("plugin/dsh-env.js");
            changes.push(opencode_plugin(&path, args)?);
        }
    }
    Ok(changes)
}

/// `path` made absolute against the working directory.
fn absolute(path: &Path) -> CliResult<PathBuf> {
    std::path::absolute(path).map_err(|e| {
        Failure::config(format!(
            "{}: {e}",
            escape_controls(&path.display().to_string())
        ))
    })
}

/// The words that start dsh-env for this setup: this binary's absolute
/// path, then `sub` (e.g. `hook claude-code`), `--manifest` (checked now)
/// and `--home`, all absolute.
fn dsh_env_argv(args: &Args, sub: &[&str]) -> CliResult<Vec<String>> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::runtime(format!("cannot find this dsh-env binary: {e}")))?;
    let mut words = vec![exe.display().to_string()];
    words.extend(sub.iter().map(|word| word.to_string()));
    if let Some(manifest) = &args.manifest {
        let manifest = absolute(manifest)?;
        if !args.remove {
            // A manifest that does not load would block every call.
            let home = args.home.as_ref().map(|h| h.display().to_string());
            manifests::find(Some(&manifest), home.as_deref(), Approval::Required)?;
        }
        words.extend(["--manifest".into(), manifest.display().to_string()]);
    }
    if let Some(home) = &args.home {
        words.extend(["--home".into(), absolute(home)?.display().to_string()]);
    }
    Ok(words)
}

/// The hook command the harness runs: [`dsh_env_argv`] as one shell line.
fn hook_command(args: &Args) -> CliResult<String> {
    let words = dsh_env_argv(args, &["hook", args.harness.name()])?;
    Ok(words
        .iter()
        .map(|word| shell_quoted(word))
        .collect::<Vec<_>>()
        .join(" "))
}

/// Whether `command` is a dsh-env hook of `harness` (setup's own, from any
/// binary path or manifest).
fn is_ours(command: &str, harness: Harness) -> bool {
    let Some(words) = shlex::split(command) else {
        return false;
    };
    words.len() >= 3
        && Path::new(&words[0])
            .file_name()
            .is_some_and(|name| name == "dsh-env")
        && words[1] == "hook"
        && words[2] == harness.name()
}

/// A command hook in a settings or hooks file of Claude Code's shape:
/// `hooks.<event>[{matcher, hooks: [{type: "command", command}]}]`.
struct HookEntry<'a> {
    harness: Harness,
    event: &'a str,
    matcher: &'a str,
    command: &'a str,
    /// Whether the file may hold comments (Gemini CLI's settings).
    comments: bool,
}

impl HookEntry<'_> {
    /// The matcher group setup adds.
    fn group(&self) -> Value {
        json!({"matcher": self.matcher, "hooks": [{"type": "command", "command": self.command}]})
    }

    /// The change to the file at `path`, and where the hook is (or was, for
    /// `remove`) as (group, handler) indexes in the event's list.
    fn change(&self, path: &Path, remove: bool) -> CliResult<(Change, Option<(usize, usize)>)> {
        let before = read_config(path)?;
        let shown = escape_controls(&path.display().to_string()).into_owned();
        let unchanged = |before: Option<String>| Change {
            path: path.to_path_buf(),
            after: before.clone(),
            before,
        };
        let text = match &before {
            Some(text) if !text.trim().is_empty() => text.clone(),
            _ if remove => return Ok((unchanged(before), None)),
            _ => {
                let document = json!({"hooks": {self.event: [self.group()]}});
                let after = format!("{}\n", render_pretty(&document));
                let change = Change {
                    path: path.to_path_buf(),
                    before,
                    after: Some(after),
                };
                return Ok((change, Some((0, 0))));
            }
        };
        let refuse = |what: String| Failure::config(format!("{shown}: {what}"));
        let root = jsontext::parse(&text, self.comments).map_err(refuse)?;
        if root.members().is_none() {
            return Err(refuse("the top level is not an object".into()));
        }
        let with = |splice: jsontext::Splice| Some(splice.apply(&text));
        let Some((hooks_at, hooks)) = root.member("hooks") else {
            if remove {
                return Ok((unchanged(before), None));
            }
            let value = json!({self.event: [self.group()]});
            let after = with(root.insert_member(&text, "hooks", &value));
            return Ok((change_of(path, before, after), Some((0, 0))));
        };
        let hooks = &hooks.value;
        if hooks.members().is_none() {
            return Err(refuse("`hooks` is not an object".into()));
        }
        let Some((event_at, event)) = hooks.member(self.event) else {
            if remove {
                return Ok((unchanged(before), None));
            }
            let after = with(hooks.insert_member(&text, self.event, &json!([self.group()])));
            return Ok((change_of(path, before, after), Some((0, 0))));
        };
        let Some(groups) = event.value.elements() else {
            return Err(refuse(format!("`hooks.{}` is not an array", self.event)));
        };
        let Some((group, handler, command)) = self.find_ours(groups) else {
            if remove {
                return Ok((unchanged(before), None));
            }
            let after = with(event.value.push_element(&text, &self.group()));
            return Ok((change_of(path, before, after), Some((groups.len(), 0))));
        };
        let position = Some((group, handler));
        if !remove {
            if command.as_str() == Some(self.command) {
                return Ok((unchanged(before), position));
            }
            let after = with(command.replace(&Value::from(self.command)));
            return Ok((change_of(path, before, after), position));
        }
        // The hook goes; so does each container it leaves empty.
        let handlers = groups[group].member("hooks").map(|(_, m)| &m.value);
        let after = match handlers {
            Some(list) if list.elements().is_some_and(|e| e.len() > 1) => {
                with(list.remove_item(handler))
            }
            _ if groups.len() > 1 => with(event.value.remove_item(group)),
            _ if hooks.members().is_some_and(|m| m.len() > 1) => with(hooks.remove_item(event_at)),
            _ if root.members().is_some_and(|m| m.len() > 1) => with(root.remove_item(hooks_at)),
            _ => None,
        };
        Ok((change_of(path, before, after), position))
    }

    /// The first handler of `groups` that is a dsh-env hook of this
    /// harness: its group's index, its own index, and its `command` value.
    fn find_ours<'n>(&self, groups: &'n [Node]) -> Option<(usize, usize, &'n Node)> {
        groups.iter().enumerate().find_map(|(g, group)| {
            let handlers = group.member("hooks")?.1.value.elements()?;
            handlers.iter().enumerate().find_map(|(h, handler)| {
                let command = &handler.member("command")?.1.value;
                is_ours(command.as_str()?, self.harness).then_some((g, h, command))
            })
        })
    }
}

/// A [`Change`] of the file at `path`.
fn change_of(path: &Path, before: Option<String>, after: Option<String>) -> Change {
    Change {
        path: path.to_path_buf(),
        before,
        after,
    }
}

/// `value` as JSON with two-space indentation.
fn render_pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// The text of the configuration file at `path`, `None` when there is none.
fn read_config(path: &Path) -> CliResult<Option<String>> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        _ => {}
    }
    read_regular_text(path, MAX_MANIFEST_BYTES)
        .map(Some)
        .map_err(|e| Failure::config(format!("cannot read {e}")))
}

/// The hash Codex records when a user trusts the hook `command` (its
/// `/hooks` review): the SHA-256 of the normalized matcher group (the one
/// handler, with Codex's defaults filled in and absent fields left out), as
/// JSON with sorted keys and no spaces.
fn codex_trusted_hash(command: &str) -> String {
    // serde_json's map is sorted: `to_string` is the canonical form.
    let identity = json!({
        "event_name": "pre_tool_use",
        "matcher": "Bash",
        "hooks": [{
            "type": "command",
            "command": command,
            "timeout": CODEX_HOOK_TIMEOUT,
            "async": false,
        }],
    });
    format!("sha256:{}", sha256_hex(identity.to_string().as_bytes()))
}

/// The change to Codex's `config.toml` at `path` that records (`hash`) or
/// forgets (`None`) the trust in the hook `key`:
/// `[hooks.state."<key>"] trusted_hash = "<hash>"`.
fn codex_trust(path: &Path, key: &str, hash: Option<&str>) -> CliResult<Change> {
    use toml_edit::{DocumentMut, Item, Table, value};
    let before = read_config(path)?;
    let shown = escape_controls(&path.display().to_string()).into_owned();
    let mut doc: DocumentMut =
        (before.as_deref().unwrap_or(""))
            .parse()
            .map_err(|e: toml_edit::TomlError| {
                Failure::config(format!("{shown}: {}", e.to_string().replace('\n', " ")))
            })?;
    let not_table = |name: &str| Failure::config(format!("{shown}: `{name}` is not a table"));
    let implicit = || {
        let mut table = Table::new();
        table.set_implicit(true);
        Item::Table(table)
    };
    match hash {
        Some(hash) => {
            let hooks = (doc.entry("hooks").or_insert_with(implicit).as_table_mut())
                .ok_or_else(|| not_table("hooks"))?;
            let state = (hooks.entry("state").or_insert_with(implicit).as_table_mut())
                .ok_or_else(|| not_table("hooks.state"))?;
            let entry = (state
                .entry(key)
                .or_insert_with(|| Item::Table(Table::new())))
            .as_table_mut()
            .ok_or_else(|| not_table("hooks.state.<key>"))?;
            if entry.get("trusted_hash").and_then(Item::as_str) != Some(hash) {
                entry["trusted_hash"] = value(hash);
            }
        }
        None => {
            let hooks = doc.get_mut("hooks").and_then(Item::as_table_mut);
            if let Some(hooks) = hooks {
                if let Some(state) = hooks.get_mut("state").and_then(Item::as_table_mut) {
                    state.remove(key);
                    if state.is_empty() {
                        hooks.remove("state");
                    }
                }
                if hooks.is_empty() {
                    doc.remove("hooks");
                }
            }
        }
    }
    let text = doc.to_string();
    let after = match (&before, text.trim().is_empty()) {
        (Some(before), _) if *before == text => Some(text),
        (_, true) => None,
        _ => Some(text),
    };
    Ok(change_of(path, before, after))
}

/// The change to OpenCode's plugin file at `path`.
fn opencode_plugin(path: &Path, args: &Args) -> CliResult<Change> {
    let before = read_config(path)?;
    let ours = before
        .as_deref()
        .is_none_or(|text| text.starts_with(PLUGIN_MARK));
    if !ours {
        return Err(Failure::config(format!(
            "{}: exists and was not written by dsh-env setup; move it away first",
            escape_controls(&path.display().to_string())
        )));
    }
    let after = if args.remove {
        None
    } else {
        let argv = dsh_env_argv(args, &["serve"])?;
        Some(OPENCODE_PLUGIN.replace("__SERVE__", &Value::from(argv).to_string()))
    };
    Ok(change_of(path, before, after))
}

/// A unified diff of one file, `before` to `after` (`None`: no file), in
/// one hunk spanning every changed line, with three lines of context.
fn unified_diff(path: &str, before: Option<&str>, after: Option<&str>) -> String {
    let old: Vec<&str> = before.unwrap_or("").split_inclusive('\n').collect();
    let new: Vec<&str> = after.unwrap_or("").split_inclusive('\n').collect();
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let suffix = (old[prefix..].iter().rev())
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let start = prefix.saturating_sub(3);
    let (old_end, new_end) = (
        (old.len() - suffix + 3).min(old.len()),
        (new.len() - suffix + 3).min(new.len()),
    );
    let range = |from: usize, to: usize| {
        let len = to - from;
        format!("{},{len}", if len == 0 { from } else { from + 1 })
    };
    let mut out = format!(
        "--- {}\n+++ {}\n@@ -{} +{} @@\n",
        before.map_or("/dev/null", |_| path),
        after.map_or("/dev/null", |_| path),
        range(start, old_end),
        range(start, new_end),
    );
    let mut line = |mark: char, text: &str| {
        out.push(mark);
        out.push_str(text);
        if !text.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    };
    for text in &old[start..prefix] {
        line(' ', text);
    }
    for text in &old[prefix..old.len() - suffix] {
        line('-', text);
    }
    for text in &new[prefix..new.len() - suffix] {
        line('+', text);
    }
    for text in &old[old.len() - suffix..old_end] {
        line(' ', text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_trust_is_recorded_and_forgotten_leaving_the_rest_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let original = "# mine\nmodel = \"x\"\n\n[features]\nplugins = false\n";
        std::fs::write(&path, original).unwrap();
        let added = codex_trust(&path, "/h/hooks.json:pre_tool_use:0:0", Some("sha256:ab"))
            .unwrap()
            .after
            .unwrap();
        assert!(
            added.starts_with(original)
                && added.ends_with(
                    "[hooks.state.\"/h/hooks.json:pre_tool_use:0:0\"]\ntrusted_hash = \"sha256:ab\"\n"
                ),
            "{added}"
        );
        std::fs::write(&path, &added).unwrap();
        let removed = codex_trust(&path, "/h/hooks.json:pre_tool_use:0:0", None).unwrap();
        assert_eq!(removed.after.as_deref(), Some(original));
    }

    #[test]
    fn the_codex_hash_is_the_one_codex_computes() {
        // As Codex 0.169.0's `hooks/list` reported it for this command.
        assert_eq!(
            codex_trusted_hash("/usr/bin/dsh-env hook codex --manifest /x/y.toml"),
            "sha256:5384c1521577abd588895158486e29ba63bffb9fda1d3dccd0e88134c27fcc9f"
        );
    }

    #[test]
    fn the_diff_shows_the_changed_lines_with_context() {
        let diff = unified_diff("f", Some("a\nb\nc\n"), Some("a\nB\nc\n"));
        assert_eq!(diff, "--- f\n+++ f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n");
        let created = unified_diff("f", None, Some("x\n"));
        assert_eq!(created, "--- /dev/null\n+++ f\n@@ -0,0 +1,1 @@\n+x\n");
    }
}

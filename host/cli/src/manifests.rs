//! Which manifest a command uses, and `dsh-env trust`.
//!
//! The first of these is used: `--manifest`; `$DSH_ENV_MANIFEST`; the
//! nearest project manifest, `.dsh/env.toml` in the working directory or
//! above, once approved with `dsh-env trust`; the user's, `env.toml` in the
//! home. The rest are reported (by `explain`) as skipped. A project
//! manifest comes with a checkout, so nobody vouched for it: as `direnv
//! allow` and `mise trust` do, `trust` records under the home the SHA-256
//! of its exact bytes and of the files it names that the host runs as they
//! are (its hooks), for the path where it was found (`approvals.rs`), and
//! a change to any of them needs approving again.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use dsh_env::{DshHome, HooksSetting, Manifest};
use dsh_env_support::input::escape_controls;

use crate::approvals::{self, shown as shown_path};
use crate::failure::{CliResult, Failure};
use crate::home::resolve_home;

/// Where a project keeps its manifest, relative to the project's folder.
pub(crate) const PROJECT_MANIFEST: &str = ".dsh/env.toml";

/// The user's manifest, relative to the home.
pub(crate) const USER_MANIFEST: &str = "env.toml";

/// The variable that names the manifest to use, before any found.
pub(crate) const MANIFEST_VAR: &str = "DSH_ENV_MANIFEST";

/// Why a command that needs a manifest found none.
pub(crate) const NO_MANIFEST: &str = "no manifest: pass --manifest, set $DSH_ENV_MANIFEST, \
     or create .dsh/env.toml (then `dsh-env trust`) or env.toml in the home";

/// How a manifest came to be considered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// `--manifest`.
    Flag,
    /// `$DSH_ENV_MANIFEST`.
    Variable,
    /// `.dsh/env.toml`, found by walking up from the working directory.
    Project,
    /// `env.toml` in the home.
    User,
}

impl Source {
    /// Its name in `explain --json`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::Variable => "variable",
            Source::Project => "project",
            Source::User => "user",
        }
    }

    /// How it is named in a sentence.
    fn described(self) -> &'static str {
        match self {
            Source::Flag => "--manifest",
            Source::Variable => "$DSH_ENV_MANIFEST",
            Source::Project => "the project manifest",
            Source::User => "the user manifest",
        }
    }
}

/// One manifest considered: used, or skipped and why.
#[derive(Debug)]
pub(crate) struct Considered {
    /// Its path, as found.
    pub(crate) path: PathBuf,
    /// How it was found.
    pub(crate) source: Source,
    /// Whether the command loads it.
    pub(crate) used: bool,
    /// Why it was used or skipped, in a phrase.
    pub(crate) why: String,
}

/// Whether a project manifest nobody approved stops the command.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Approval {
    /// It does, naming the command that approves it (every command but `explain`).
    Required,
    /// It is reported as skipped, and the next manifest is used (`explain`).
    Reported,
}

/// The manifest a command uses, if any, and every one considered.
pub(crate) struct Found {
    /// The manifest loaded.
    pub(crate) manifest: Option<Manifest>,
    /// Every manifest considered, the used one included, in order.
    pub(crate) considered: Vec<Considered>,
    /// The loaded manifest's hooks file, if it names one.
    pub(crate) hooks: Option<ManifestHooks>,
}

/// A manifest's hooks file, with its text when an approval covered it.
pub(crate) struct ManifestHooks {
    /// The file, and where the manifest names it.
    pub(crate) setting: HooksSetting,
    /// The text approved with a project manifest: what runs, never read
    /// again. `None` for a manifest that needs no approval: the file is
    /// read when the hooks load.
    pub(crate) approved: Option<String>,
}

/// The manifest to use: `flag`, else `$DSH_ENV_MANIFEST`, else the nearest
/// approved `.dsh/env.toml` from the working directory up, else `env.toml`
/// in the home (`home_flag`, `$DSH_HOME` or `~/.dsh`). An unapproved or
/// changed project manifest is a configuration error naming the command
/// that approves it, unless `approval` says to report it.
pub(crate) fn find(
    flag: Option<&Path>,
    home_flag: Option<&str>,
    approval: Approval,
) -> CliResult<Found> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::config(format!("cannot read the working directory: {e}")))?;
    // Without a home (no $HOME, no $DSH_HOME), there is no user manifest
    // and no approval; a manifest named outright still loads.
    let home = resolve_home(home_flag, None).ok();
    let user = (home.as_ref())
        .map(|home| home.path().join(USER_MANIFEST))
        .filter(|path| path.is_file());
    let project = walk_up(&cwd, user.as_deref());
    let variable = std::env::var_os(MANIFEST_VAR)
        .filter(|value| !value.is_empty())
        .map(|value| cwd.join(value));

    let mut found = Found {
        manifest: None,
        considered: Vec::new(),
        hooks: None,
    };
    let mut first: Option<Source> = None;
    // The files an approved project manifest's approval covers, as approved.
    let mut approved_files = None;
    let named = [
        (flag.map(Path::to_path_buf), Source::Flag),
        (variable, Source::Variable),
    ];
    for (path, source) in named {
        let Some(path) = path else { continue };
        if let Some(first) = first {
            found.skip(path, source, format!("{} comes first", first.described()));
            continue;
        }
        found.manifest = Some(Manifest::from_file(&path).map_err(|e| Failure::config_error(&e))?);
        found.use_(path, source, format!("named by {}", source.described()));
        first = Some(source);
    }
    if let Some(path) = project {
        let walked = format!("found by walking up from {}", shown_path(&cwd));
        match first {
            Some(first) => found.skip(
                path,
                Source::Project,
                format!("{walked}; {} comes first", first.described()),
            ),
            None => match load_project(&path, home.as_ref(), home_flag)? {
                Ok(approved) => {
                    approved_files = Some(approved.files);
                    found.manifest = Some(approved.manifest);
                    found.use_(path, Source::Project, format!("{walked}, approved"));
                    first = Some(Source::Project);
                }
                Err(refusal) if approval == Approval::Required => {
                    return Err(Failure::config(refusal));
                }
                Err(refusal) => found.skip(path, Source::Project, format!("{walked}; {refusal}")),
            },
        }
    }
    if let Some(path) = user {
        match first {
            Some(first) => found.skip(
                path,
                Source::User,
                format!("in the home; {} comes first", first.described()),
            ),
            None => {
                found.manifest =
                    Some(Manifest::from_file(&path).map_err(|e| Failure::config_error(&e))?);
                found.use_(path, Source::User, "in the home".into());
            }
        }
    }
    let setting = found.manifest.as_ref().and_then(Manifest::hooks_setting);
    found.hooks = match (setting, approved_files) {
        (None, _) => None,
        (Some(setting), None) => Some(ManifestHooks {
            setting,
            approved: None,
        }),
        // An approved manifest's hooks run as approved: its approval covers them.
        (Some(setting), Some(files)) => {
            let text = (files.into_iter())
                .find(|(file, _)| file.path == setting.path)
                .map(|(_, text)| text)
                .ok_or_else(|| {
                    Failure::config(format!(
                        "hooks file {} is not among the files approved",
                        shown_path(&setting.path)
                    ))
                })?;
            Some(ManifestHooks {
                setting,
                approved: Some(text),
            })
        }
    };
    Ok(found)
}

impl Found {
    fn use_(&mut self, path: PathBuf, source: Source, why: String) {
        self.considered.push(Considered {
            path,
            source,
            used: true,
            why,
        });
    }

    fn skip(&mut self, path: PathBuf, source: Source, why: String) {
        self.considered.push(Considered {
            path,
            source,
            used: false,
            why,
        });
    }
}

/// The nearest `.dsh/env.toml` in `cwd` or above that is a file, unless it
/// is the user's manifest (`~/.dsh/env.toml` with the default home), which
/// is not a project's.
fn walk_up(cwd: &Path, user: Option<&Path>) -> Option<PathBuf> {
    let user = user.and_then(|path| path.canonicalize().ok());
    let path = (cwd.ancestors())
        .map(|dir| dir.join(PROJECT_MANIFEST))
        .find(|path| path.is_file())?;
    let is_user = user.is_some_and(|user| path.canonicalize().is_ok_and(|p| p == user));
    (!is_user).then_some(path)
}

/// The project manifest found at `path`, as approved (see `approvals.rs`);
/// or, as `Err`, the one line saying what is not approved and the command
/// that approves it. A file that cannot be read or parsed is a
/// configuration error.
fn load_project(
    path: &Path,
    home: Option<&DshHome>,
    home_flag: Option<&str>,
) -> CliResult<Result<approvals::Approved, String>> {
    let located = approvals::locate(path)?;
    approvals::check(&located, home, &trust_command(&located, home_flag))
}

/// The command that approves the manifest at `path`, quoted for a shell.
fn trust_command(path: &Path, home_flag: Option<&str>) -> String {
    let mut command = String::from("dsh-env trust");
    if let Some(home) = home_flag {
        command.push_str(" --home ");
        command.push_str(&shell_quoted(home));
    }
    command.push(' ');
    command.push_str(&shell_quoted(&path.display().to_string()));
    // Shown on a terminal: a name that could move or hide text is escaped.
    escape_controls(&command).into_owned()
}

/// `text` as one shell word: as it is when that is safe, else single-quoted.
pub(crate) fn shell_quoted(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// The arguments of `trust`.
#[derive(clap::Args)]
pub(crate) struct TrustArgs {
    /// The project manifest, or a folder holding `.dsh/env.toml` (default:
    /// the nearest `.dsh/env.toml` from the working directory up).
    path: Option<PathBuf>,
    /// The home that keeps approvals (default: $DSH_HOME, then ~/.dsh).
    #[arg(long, value_name = "DIR")]
    home: Option<String>,
    /// Withdraw the approval instead.
    #[arg(long)]
    revoke: bool,
}

/// Approves a project manifest's current bytes and those of each file it
/// names that the host runs as is (after checking that it parses and that
/// they can be read), printing each; or withdraws the approval.
pub(crate) fn trust(args: TrustArgs) -> CliResult<ExitCode> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::config(format!("cannot read the working directory: {e}")))?;
    let path = match &args.path {
        Some(path) if cwd.join(path).is_dir() => cwd.join(path).join(PROJECT_MANIFEST),
        Some(path) => cwd.join(path),
        None => walk_up(&cwd, None).ok_or_else(|| {
            Failure::config(format!(
                "no {PROJECT_MANIFEST} in {} or above: name the manifest to approve",
                shown_path(&cwd)
            ))
        })?,
    };
    let located = approvals::locate(&path)?;
    let shown = shown_path(&located);
    let home = resolve_home(args.home.as_deref(), None)?;
    if args.revoke {
        if approvals::revoke(&located, &home)? {
            println!("revoked the approval of {shown}");
        } else {
            println!("{shown} was not approved");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let approval = approvals::approve(&located, &home)?;
    let count = approval.manifest.contributors.len();
    println!(
        "approved {shown} (sha256 {}, {count} contributor{})",
        approval.sha256,
        if count == 1 { "" } else { "s" }
    );
    for (file, sha256) in &approval.files {
        println!(
            "approved its {} file {} (sha256 {sha256})",
            file.field,
            shown_path(&file.path)
        );
    }
    let them = if approval.files.is_empty() {
        "it"
    } else {
        "any of them"
    };
    println!("a change to {them} needs `dsh-env trust` again");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_quoted_only_when_a_shell_needs_it() {
        assert_eq!(shell_quoted("/a/b-c/.dsh/env.toml"), "/a/b-c/.dsh/env.toml");
        assert_eq!(shell_quoted("/a b/x"), "'/a b/x'");
        assert_eq!(shell_quoted("/it's"), r"'/it'\''s'");
    }
}

//! Where `DSH_HOME` points: explicit setting > `$DSH_HOME` > `~/.dsh`.

use std::path::{Component, Path, PathBuf};

use dsh_env_support::input::{control_character, describe_control, escape_controls};

/// One explicitly supplied home, with where it came from (for errors).
#[derive(Debug, Clone)]
pub struct HomeSetting {
    /// Where the setting came from, e.g. `--home` or `manifest.toml`.
    pub origin: String,
    /// The path as written; `~` is expanded, relative paths are made absolute.
    pub path: String,
}

/// Why no home could be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HomeError {
    /// An explicit setting was empty or whitespace.
    #[error("home from {origin} is blank")]
    Blank {
        /// The setting's origin.
        origin: String,
    },
    /// Two explicit settings resolve to different directories.
    #[error("conflicting homes: {first_origin} gives {first}, {second_origin} gives {second}")]
    Conflict {
        /// The first setting's origin.
        first_origin: String,
        /// The first setting, resolved.
        first: String,
        /// The second setting's origin.
        second_origin: String,
        /// The second setting, resolved.
        second: String,
    },
    /// `~` was used, or the default was needed, but the user's home is unknown.
    #[error("cannot expand `~` or default to ~/.dsh: the user's home directory is unknown")]
    NoUserHome,
    /// The resolved path cannot be an environment value.
    #[error("home {0} is not valid UTF-8")]
    NotUtf8(String),
    /// The resolved path holds a control character, which `DSH_HOME` may
    /// not (the value rule of [`dsh_env_support::input::control_character`]).
    #[error("home {} holds control character {}", escape_controls(.path), describe_control(*.character))]
    ControlCharacter {
        /// The path.
        path: String,
        /// The first control character found.
        character: char,
    },
}

/// An absolute harness home directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DshHome(String);

/// The process facts home resolution depends on, passed in so that it is a
/// pure function (and nothing reads or writes the global environment twice).
#[derive(Debug, Clone, Default)]
pub struct HomeContext {
    /// The value of `$DSH_HOME`, if set.
    pub dsh_home_var: Option<String>,
    /// The user's home directory, for `~` and the `~/.dsh` default.
    pub user_home: Option<PathBuf>,
    /// The directory relative paths are resolved against.
    pub cwd: PathBuf,
}

impl HomeContext {
    /// Reads `$DSH_HOME`, `$HOME` and the current directory of this process.
    pub fn from_process() -> Self {
        HomeContext {
            dsh_home_var: std::env::var(crate::keys::DSH_HOME).ok(),
            user_home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        }
    }
}

impl DshHome {
    /// Decides the home from explicit settings (all must agree), then
    /// `$DSH_HOME` (blank counts as unset), then `~/.dsh`.
    pub fn resolve(explicit: &[HomeSetting], context: &HomeContext) -> Result<Self, HomeError> {
        Self::resolve_explained(explicit, context).map(|(home, _)| home)
    }

    /// [`DshHome::resolve`], and where the home came from: the first
    /// explicit setting's origin, `$DSH_HOME`, or `default ~/.dsh`.
    pub fn resolve_explained(
        explicit: &[HomeSetting],
        context: &HomeContext,
    ) -> Result<(Self, String), HomeError> {
        let mut chosen: Option<(&str, PathBuf)> = None;
        for setting in explicit {
            if setting.path.trim().is_empty() {
                return Err(HomeError::Blank {
                    origin: setting.origin.clone(),
                });
            }
            let path = absolutize(&setting.path, context)?;
            match &chosen {
                Some((origin, first)) if *first != path => {
                    return Err(HomeError::Conflict {
                        first_origin: origin.to_string(),
                        first: first.display().to_string(),
                        second_origin: setting.origin.clone(),
                        second: path.display().to_string(),
                    });
                }
                Some(_) => {}
                None => chosen = Some((&setting.origin, path)),
            }
        }
        let (origin, path) = match chosen {
            Some((origin, path)) => (origin.to_string(), path),
            None => match context
                .dsh_home_var
                .as_deref()
                .filter(|v| !v.trim().is_empty())
            {
                Some(var) => ("$DSH_HOME".to_string(), absolutize(var, context)?),
                None => {
                    let user_home = context.user_home.clone().ok_or(HomeError::NoUserHome)?;
                    ("default ~/.dsh".to_string(), user_home.join(".dsh"))
                }
            },
        };
        let path = normalize(&path);
        let text = path
            .to_str()
            .ok_or_else(|| HomeError::NotUtf8(path.display().to_string()))?;
        if let Some(character) = control_character(text) {
            return Err(HomeError::ControlCharacter {
                path: text.to_string(),
                character,
            });
        }
        Ok((DshHome(text.to_string()), origin))
    }

    /// An already absolute directory, taken as it is (e.g. a test's temp dir).
    pub fn from_absolute(path: &Path) -> Result<Self, HomeError> {
        Self::resolve(
            &[HomeSetting {
                origin: "caller".into(),
                path: path.to_string_lossy().into_owned(),
            }],
            &HomeContext::default(),
        )
    }

    /// The home as a string, the value of `DSH_HOME`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The home as a path.
    pub fn path(&self) -> &Path {
        Path::new(&self.0)
    }
}

/// Expands `~` and joins relative paths onto the context's cwd.
fn absolutize(raw: &str, context: &HomeContext) -> Result<PathBuf, HomeError> {
    let raw = raw.trim();
    let expanded = if raw == "~" || raw.starts_with("~/") {
        let home = context.user_home.as_ref().ok_or(HomeError::NoUserHome)?;
        home.join(raw.trim_start_matches('~').trim_start_matches('/'))
    } else {
        PathBuf::from(raw)
    };
    Ok(if expanded.is_absolute() {
        expanded
    } else {
        context.cwd.join(expanded)
    })
}

/// Removes `.` and resolves `..` lexically, so equal homes compare equal.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(var: Option<&str>) -> HomeContext {
        HomeContext {
            dsh_home_var: var.map(str::to_string),
            user_home: Some(PathBuf::from("/users/ada")),
            cwd: PathBuf::from("/work/project"),
        }
    }

    fn setting(origin: &str, path: &str) -> HomeSetting {
        HomeSetting {
            origin: origin.into(),
            path: path.into(),
        }
    }

    #[test]
    fn explicit_beats_variable_beats_default() {
        let ctx = context(Some("/from/var"));
        let explicit = DshHome::resolve(&[setting("--home", "/from/flag")], &ctx).unwrap();
        assert_eq!(explicit.as_str(), "/from/flag");
        assert_eq!(DshHome::resolve(&[], &ctx).unwrap().as_str(), "/from/var");
        assert_eq!(
            DshHome::resolve(&[], &context(None)).unwrap().as_str(),
            "/users/ada/.dsh"
        );
    }

    #[test]
    fn the_origin_of_the_home_is_named() {
        let origin = |explicit: &[HomeSetting], var| {
            DshHome::resolve_explained(explicit, &context(var))
                .unwrap()
                .1
        };
        let both = [setting("--home", "/h"), setting("m.toml", "/h")];
        assert_eq!(origin(&both, Some("/v")), "--home");
        assert_eq!(origin(&both[1..], Some("/v")), "m.toml");
        assert_eq!(origin(&[], Some("/v")), "$DSH_HOME");
        assert_eq!(origin(&[], None), "default ~/.dsh");
    }

    #[test]
    fn blank_variable_counts_as_unset() {
        for blank in ["", "   ", "\t\n"] {
            let home = DshHome::resolve(&[], &context(Some(blank))).unwrap();
            assert_eq!(home.as_str(), "/users/ada/.dsh");
        }
    }

    #[test]
    fn tilde_and_relative_paths_become_absolute() {
        let ctx = context(None);
        let tilde = DshHome::resolve(&[setting("a", "~/h")], &ctx).unwrap();
        assert_eq!(tilde.as_str(), "/users/ada/h");
        let bare = DshHome::resolve(&[setting("a", "~")], &ctx).unwrap();
        assert_eq!(bare.as_str(), "/users/ada");
        let relative = DshHome::resolve(&[setting("a", "./state/../h")], &ctx).unwrap();
        assert_eq!(relative.as_str(), "/work/project/h");
        let var = DshHome::resolve(&[], &context(Some("rel"))).unwrap();
        assert_eq!(var.as_str(), "/work/project/rel");
    }

    #[test]
    fn explicit_homes_must_agree() {
        let ctx = context(None);
        let same = [setting("top", "~/h"), setting("skills", "/users/ada/h/")];
        assert_eq!(
            DshHome::resolve(&same, &ctx).unwrap().as_str(),
            "/users/ada/h"
        );
        let different = [setting("top", "/a"), setting("skills", "/b")];
        let err = DshHome::resolve(&different, &ctx).unwrap_err();
        assert_eq!(
            err.to_string(),
            "conflicting homes: top gives /a, skills gives /b"
        );
    }

    #[test]
    fn blank_explicit_home_and_unknown_user_home_are_errors() {
        let err = DshHome::resolve(&[setting("--home", " ")], &context(None)).unwrap_err();
        assert_eq!(
            err,
            HomeError::Blank {
                origin: "--home".into()
            }
        );
        let forged = DshHome::resolve(&[setting("--home", "/h\nDSH_HOME=/evil")], &context(None));
        assert_eq!(
            forged.unwrap_err().to_string(),
            r"home /h\nDSH_HOME=/evil holds control character `\n` (U+000A)"
        );
        let no_user = HomeContext {
            user_home: None,
            ..context(None)
        };
        assert_eq!(DshHome::resolve(&[], &no_user), Err(HomeError::NoUserHome));
    }
}

//! What `collect()` is compared against: the same facts computed in-process
//! (a native contributor), and by process-per-contributor hooks, run as
//! `sh -c` scripts or as a small compiled helper.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dsh_env::{NativeContributor, RawDeclaration, ToolExecution};

/// The same facts as the `agent-lineage` component, computed in-process.
pub struct NativeLineage;

/// What `agent-lineage` declares, under another name.
fn lineage_declaration(name: &str) -> RawDeclaration {
    RawDeclaration {
        name: name.into(),
        keys: vec![
            ("DSH_PARENT_SESSION_ID".into(), "Parent session.".into()),
            ("DSH_AGENT_DEPTH".into(), "Depth.".into()),
        ],
    }
}

impl NativeContributor for NativeLineage {
    fn declare(&self) -> RawDeclaration {
        lineage_declaration("native-lineage")
    }

    fn resolve(&self, execution: &ToolExecution) -> Result<Vec<(String, String)>, String> {
        let Some(agent) = &execution.agent else {
            return Ok(Vec::new());
        };
        let mut pairs = vec![("DSH_AGENT_DEPTH".to_string(), agent.depth.to_string())];
        if let Some(parent) = &agent.parent_session_id {
            pairs.push(("DSH_PARENT_SESSION_ID".to_string(), parent.clone()));
        }
        Ok(pairs)
    }
}

/// How a hook is run: a shell script, or a compiled helper.
#[derive(Clone)]
pub enum HookProgram {
    Shell,
    Compiled(PathBuf),
}

/// What a hook reports: the agent's lineage, or `DSH_ECHO_<n>=<session>`
/// (the facts of the puppets in the eight-contributor row).
#[derive(Clone, Copy)]
enum HookFacts {
    Lineage,
    Echo(usize),
}

/// A process-per-contributor hook: one process per call, which gets the
/// execution's facts as arguments and prints `KEY=VALUE` lines.
pub struct Hook {
    program: HookProgram,
    facts: HookFacts,
}

impl Hook {
    /// Hook `i` of a row that stands for `agent-lineage` and echo guests:
    /// the lineage first, then echo `i`.
    pub fn nth(program: &HookProgram, i: usize) -> Hook {
        let facts = if i == 0 {
            HookFacts::Lineage
        } else {
            HookFacts::Echo(i)
        };
        Hook {
            program: program.clone(),
            facts,
        }
    }
}

/// The shell versions of the hooks (`$0` is the facts' kind).
const SHELL_HOOK: &str = r#"case "$0" in
lineage) printf 'DSH_AGENT_DEPTH=%s\n' "$1"; [ -n "$2" ] && printf 'DSH_PARENT_SESSION_ID=%s\n' "$2";;
echo) printf 'DSH_ECHO_%s=%s\n' "$1" "$2";;
esac; exit 0"#;

/// The compiled version of the same hooks.
const C_HOOK: &str = r#"#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "lineage") == 0) {
        printf("DSH_AGENT_DEPTH=%s\n", argv[2]);
        if (argv[3][0]) printf("DSH_PARENT_SESSION_ID=%s\n", argv[3]);
    } else if (argc == 4 && strcmp(argv[1], "echo") == 0) {
        printf("DSH_ECHO_%s=%s\n", argv[2], argv[3]);
    }
    return 0;
}
"#;

impl NativeContributor for Hook {
    fn declare(&self) -> RawDeclaration {
        match self.facts {
            HookFacts::Lineage => lineage_declaration("hook-lineage"),
            HookFacts::Echo(n) => RawDeclaration {
                name: format!("hook-echo-{n}"),
                keys: vec![(format!("DSH_ECHO_{n}"), "Echo.".into())],
            },
        }
    }

    fn resolve(&self, execution: &ToolExecution) -> Result<Vec<(String, String)>, String> {
        let agent = execution.agent.as_ref();
        let args: [String; 3] = match self.facts {
            HookFacts::Lineage => {
                let Some(agent) = agent else {
                    return Ok(Vec::new());
                };
                [
                    "lineage".into(),
                    agent.depth.to_string(),
                    agent.parent_session_id.clone().unwrap_or_default(),
                ]
            }
            HookFacts::Echo(n) => [
                "echo".into(),
                n.to_string(),
                agent.map_or("none".into(), |a| a.session_id.clone()),
            ],
        };
        let mut command = match &self.program {
            HookProgram::Shell => {
                let mut command = Command::new("sh");
                command.arg("-c").arg(SHELL_HOOK);
                command
            }
            HookProgram::Compiled(path) => Command::new(path),
        };
        let output = command
            .args(&args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if !output.status.success() {
            return Err(format!("hook failed: {}", output.status));
        }
        let stdout = String::from_utf8(output.stdout).map_err(|e| e.to_string())?;
        Ok(stdout
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }
}

/// Compiles the C hook helper into `dir`, statically if possible; `None`
/// when there is no C compiler.
pub fn compile_hook_helper(dir: &Path) -> Option<PathBuf> {
    let source = dir.join("hook.c");
    let binary = dir.join("hook");
    std::fs::write(&source, C_HOOK).ok()?;
    for flags in [&["-O2", "-static"][..], &["-O2"]] {
        let built = Command::new("cc")
            .args(flags)
            .arg("-o")
            .arg(&binary)
            .arg(&source)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if built {
            return Some(binary);
        }
    }
    None
}

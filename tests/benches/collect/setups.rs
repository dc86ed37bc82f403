//! The registries the rows measure, each with the contributors it holds,
//! and the example contributors in every language.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_env::ContributorComponent;
use dsh_env::Grants;
use dsh_env::Manifest;
use dsh_env::{Agent, Overlay, Registration, Registry, ToolExecution};
use dsh_env_tests::{artifacts, echo, puppet, registry};

use crate::baselines::{Hook, HookProgram, NativeLineage};
use dsh_env::{CollectOptions, LoadFrom, LoadOptions};

/// The execution every row resolves: an agent call with a parent, so that
/// every contributor has something to say.
pub fn execution() -> ToolExecution {
    ToolExecution::new("bench-call", "bash").with_agent(Agent {
        session_id: "bench-session".into(),
        cwd: Some("/work".into()),
        parent_session_id: Some("bench-parent".into()),
        depth: 1,
    })
}

/// A registry, and the registrations that keep its contributors.
pub struct Setup {
    pub registry: Registry,
    pub registrations: Vec<Registration>,
}

impl Setup {
    /// The overlay this setup collects for `execution`.
    pub async fn collect(&self, execution: &ToolExecution) -> Overlay {
        self.registry
            .collect(execution, &CollectOptions::new())
            .await
            .unwrap()
            .overlay
    }
}

/// `agent-lineage`, then `count - 1` echo guests that each echo the session id.
pub async fn wasm_contributors(count: usize) -> Setup {
    let registry = registry();
    let mut registrations = Vec::new();
    let lineage = registry
        .load(
            LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
            &LoadOptions::new(),
        )
        .unwrap();
    registrations.push(registry.register(lineage).await.unwrap());
    for i in 1..count {
        let component = echo(&registry, &format!("echo-{i}"), &format!("DSH_ECHO_{i}"));
        registrations.push(registry.register(component).await.unwrap());
    }
    Setup {
        registry,
        registrations,
    }
}

/// The hooks that compute the same facts as [`wasm_contributors`]`(count)`.
pub fn hooks(program: &HookProgram, count: usize) -> Setup {
    let registry = registry();
    let registrations = (0..count)
        .map(|i| {
            let hook = Hook::nth(program, i);
            registry.register_native(Arc::new(hook)).unwrap()
        })
        .collect();
    Setup {
        registry,
        registrations,
    }
}

/// An example contributor: its row name and JSON key, its component, and
/// its manifest config.
pub struct Example {
    pub name: &'static str,
    pub key: &'static str,
    pub path: &'static str,
    config: &'static [(&'static str, &'static str)],
}

/// Every example contributor, in every language.
pub const EXAMPLES: [Example; 6] = [
    Example {
        name: "Rust agent-lineage",
        key: "rust_agent_lineage",
        path: artifacts::AGENT_LINEAGE,
        config: &[],
    },
    Example {
        name: "Rust call-trace",
        key: "rust_call_trace",
        path: artifacts::CALL_TRACE,
        config: &[],
    },
    Example {
        name: "Rust git-context",
        key: "rust_git_context",
        path: artifacts::GIT_CONTEXT,
        config: &[],
    },
    Example {
        name: "Python session-url",
        key: "python_session_url",
        path: artifacts::SESSION_URL,
        config: &[("base_url", "https://agents.example.com/sessions/")],
    },
    Example {
        name: "JS call-context",
        key: "js_call_context",
        path: artifacts::CALL_CONTEXT,
        config: &[],
    },
    Example {
        name: "C workspace-id",
        key: "c_workspace_id",
        path: artifacts::WORKSPACE_ID,
        config: &[],
    },
];

impl Example {
    /// Whether it is written in another language than Rust.
    pub fn is_polyglot(&self) -> bool {
        !self.name.starts_with("Rust")
    }

    /// Whether its component exists (the polyglot ones need their tools).
    pub fn built(&self) -> bool {
        Path::new(self.path).exists()
    }

    /// Loads and registers it.
    async fn register(&self, registry: &Registry) -> Registration {
        registry.register(self.load(registry)).await.unwrap()
    }

    /// Loads it, configured (git-context gets the cwd grant it needs).
    fn load(&self, registry: &Registry) -> ContributorComponent {
        registry
            .load(LoadFrom::File(self.path.as_ref()), &LoadOptions::new())
            .unwrap()
            .with_config(
                (self.config.iter())
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
            .with_grants(Grants {
                env: Vec::new(),
                cwd_read: self.path == artifacts::GIT_CONTEXT,
            })
    }
}

/// A manifest of `examples`, as `dsh-env --manifest` would read one.
pub fn examples_manifest(examples: &[&Example]) -> Manifest {
    let mut text = String::new();
    for example in examples {
        text += &format!("[[contributor]]\npath = {:?}\n", example.path);
        if !example.config.is_empty() {
            text += "[contributor.config]\n";
            for (key, value) in example.config {
                text += &format!("{key} = {value:?}\n");
            }
        }
        if example.path == artifacts::GIT_CONTEXT {
            text += "[contributor.grants]\ncwd = \"read\"\n";
        }
    }
    Manifest::parse(&text, "bench examples", PathBuf::from("/")).unwrap()
}

/// A registry with `examples` registered.
pub async fn examples<'a>(examples: impl IntoIterator<Item = &'a Example>) -> Setup {
    let registry = registry();
    let mut registrations = Vec::new();
    for example in examples {
        registrations.push(example.register(&registry).await);
    }
    Setup {
        registry,
        registrations,
    }
}

/// [`examples`], compiled by Winch alone, in a home of their own under
/// `target/tmp` that never holds Cranelift's code (the first run compiles).
pub async fn winch_examples<'a>(examples: impl IntoIterator<Item = &'a Example>) -> Setup {
    let home = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-winch-home");
    std::fs::create_dir_all(&home).unwrap();
    let home = dsh_env::DshHome::from_absolute(&home).unwrap();
    let registry = (dsh_env_tests::builder(home))
        .tiering(dsh_env::Tiering::Baseline)
        .build()
        .unwrap();
    let mut registrations = Vec::new();
    for example in examples {
        let registration = example.register(&registry).await;
        registrations.push(registration);
    }
    Setup {
        registry,
        registrations,
    }
}

/// The registries of the rows that every run has.
pub struct Setups {
    pub builtins: Setup,
    pub native: Setup,
    pub wasm_1: Setup,
    pub wasm_8: Setup,
    pub puppet_1: Setup,
    pub hook_sh_1: Setup,
    pub hook_sh_8: Setup,
    /// One and eight compiled hooks, when there is a C compiler.
    pub hook_c: Option<(Setup, Setup)>,
}

impl Setups {
    /// Builds every setup; `compiled` is the C hook helper, if any.
    pub async fn new(compiled: Option<PathBuf>) -> Setups {
        let builtins = Setup {
            registry: registry(),
            registrations: Vec::new(),
        };
        let native = {
            let registry = registry();
            let registration = registry.register_native(Arc::new(NativeLineage)).unwrap();
            Setup {
                registry,
                registrations: vec![registration],
            }
        };
        let wasm_1 = wasm_contributors(1).await;
        let wasm_8 = wasm_contributors(8).await;
        let puppet_1 = puppet_echo().await;
        let hook_sh_1 = hooks(&HookProgram::Shell, 1);
        let hook_sh_8 = hooks(&HookProgram::Shell, 8);
        let hook_c = compiled.map(|path| {
            let program = HookProgram::Compiled(path);
            (hooks(&program, 1), hooks(&program, 8))
        });
        Setups {
            builtins,
            native,
            wasm_1,
            wasm_8,
            puppet_1,
            hook_sh_1,
            hook_sh_8,
            hook_c,
        }
    }

    /// Checks that the rows that should agree do agree.
    pub async fn check_agreement(&self, execution: &ToolExecution) {
        let wasm_1 = self.wasm_1.collect(execution).await;
        assert_eq!(wasm_1.get("DSH_AGENT_DEPTH"), Some("1"));
        let wasm_8 = self.wasm_8.collect(execution).await;
        assert_eq!(wasm_8.len(), 3 + 2 + 7);
        let mut pairs = vec![
            (&self.native, &wasm_1, "native vs WASM"),
            (&self.hook_sh_1, &wasm_1, "sh hook vs WASM"),
            (&self.hook_sh_8, &wasm_8, "8 sh hooks vs WASM"),
        ];
        if let Some((one, eight)) = &self.hook_c {
            pairs.push((one, &wasm_1, "C hook vs WASM"));
            pairs.push((eight, &wasm_8, "8 C hooks vs WASM"));
        }
        for (setup, expected, what) in pairs {
            assert_eq!(&setup.collect(execution).await, expected, "{what}");
        }
    }
}

/// The puppet guest set up to echo the session id: the same work as an
/// echo guest, through a guest that imports many more interfaces.
async fn puppet_echo() -> Setup {
    let registry = registry();
    let echo = puppet(
        &registry,
        &[
            ("name", "echo"),
            ("keys", "DSH_ECHO=e"),
            ("pairs", "DSH_ECHO={session}"),
        ],
    );
    let imports = (
        echo.imports().len(),
        registry
            .load(
                LoadFrom::File(artifacts::AGENT_LINEAGE.as_ref()),
                &LoadOptions::new(),
            )
            .unwrap()
            .imports()
            .len(),
    );
    eprintln!(
        "imported interfaces: puppet {}, agent-lineage {}",
        imports.0, imports.1
    );
    let registration = registry.register(echo).await.unwrap();
    Setup {
        registry,
        registrations: vec![registration],
    }
}

/// The example rows' registries: each polyglot example alone, and every
/// example together.
pub struct ExampleSetups {
    /// (row name, row key, registry) of each built polyglot example.
    pub polyglot: Vec<(&'static str, &'static str, Setup)>,
    /// The same, running Winch's code (`<key>_winch`): what a long-lived
    /// host runs until its background compile ends.
    pub winch: Vec<(String, String, Setup)>,
    /// The polyglot examples not built (their tools are missing).
    pub skipped: Vec<&'static str>,
    /// Every built example in one registry.
    pub all: Option<Setup>,
}

impl ExampleSetups {
    /// The setups of the rows whose key is `wanted`; each adds its keys.
    pub async fn new(execution: &ToolExecution, wanted: impl Fn(&str) -> bool) -> ExampleSetups {
        let mut polyglot = Vec::new();
        let mut winch = Vec::new();
        let mut skipped = Vec::new();
        for example in EXAMPLES.iter().filter(|e| e.is_polyglot()) {
            if !example.built() {
                eprintln!("{}: {} not built; row skipped", example.name, example.path);
                skipped.push(example.name);
            } else if wanted(example.key) {
                let setup = examples([example]).await;
                let overlay = setup.collect(execution).await;
                assert!(overlay.len() > 3, "{} adds a key", example.name);
                polyglot.push((example.name, example.key, setup));
            }
            let winch_key = format!("{}_winch", example.key);
            if example.built() && wanted(&winch_key) {
                let setup = winch_examples([example]).await;
                assert!(setup.collect(execution).await.len() > 3);
                winch.push((format!("{}, Winch", example.name), winch_key, setup));
            }
        }
        let all = if wanted("all_examples") {
            let setup = examples(EXAMPLES.iter().filter(|e| e.built())).await;
            let overlay = setup.collect(execution).await;
            assert!(overlay.get("DSH_TRACEPARENT").is_some());
            Some(setup)
        } else {
            None
        };
        ExampleSetups {
            polyglot,
            winch,
            skipped,
            all,
        }
    }
}

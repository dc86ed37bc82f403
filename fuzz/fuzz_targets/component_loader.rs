//! The component loader: any bytes must give `Ok` or `Err`, never a panic or
//! a crash; a component that loads is registered and collected (errors are
//! fine) under small limits.
//!
//! Seed it with real components (see README.md): random bytes almost never
//! get past the header.

#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use dsh_env::{Agent, DshHome, Limits, Registry, ToolExecution};
use dsh_env::{CollectOptions, Collection, LoadFrom, LoadOptions};
use libfuzzer_sys::fuzz_target;
use tokio::runtime::Runtime;

/// One registry and runtime per process. Its cache directory is a file, so
/// nothing is written per input (the host only warns and compiles).
fn host() -> &'static (Registry, Runtime) {
    static HOST: OnceLock<(Registry, Runtime)> = OnceLock::new();
    HOST.get_or_init(|| {
        let home = std::env::temp_dir().join(format!("dsh-env-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("cache"), b"not a directory").unwrap();
        let registry = Registry::builder(DshHome::from_absolute(&home).unwrap())
            .build()
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        (registry, runtime)
    })
}

fuzz_target!(|data: &[u8]| {
    let (registry, runtime) = host();
    let Ok(component) = registry.load(
        LoadFrom::Bytes {
            origin: "fuzz",
            bytes: data,
        },
        &LoadOptions::new(),
    ) else {
        return;
    };
    let component = component.with_limits(Limits {
        deadline: Duration::from_millis(250),
        memory_bytes: 32 << 20,
        ..Limits::default()
    });
    runtime.block_on(async {
        let Ok(registration) = registry.register(component).await else {
            return;
        };
        let agent = Agent {
            session_id: "s".into(),
            cwd: Some("/work".into()),
            parent_session_id: Some("p".into()),
            depth: 1,
        };
        for execution in [
            ToolExecution::new("c", "bash").with_agent(agent),
            ToolExecution::new("c", "bash"),
        ] {
            if let Ok(Collection { overlay, .. }) =
                registry.collect(&execution, &CollectOptions::new()).await
            {
                assert_eq!(overlay.get("DSH_SHELL"), Some("1"), "built-ins win");
                assert!(overlay.iter().all(|(_, value)| !value.contains('\0')));
            }
        }
        drop(registration);
    });
});

//! Interop with a tool this project did not write: Debian's `skopeo`
//! (installed by `scripts/setup-registry`) copies what `dsh-env push` made
//! out of a registry into an OCI image layout and reads it; it copies an
//! artifact written by hand (no dsh-env) into the registry for `add` and
//! `pull`; and it reads the home's store, which is an OCI image layout.
//! skopeo only ever talks to the test's registry on 127.0.0.1.

use super::*;

/// `skopeo <args>` with a clean environment (HOME in the fixture, so no
/// user's auth file or policy is read), the signature policy off (these
/// artifacts are not container images), expecting success.
fn skopeo(f: &Fixture, args: &[&str]) -> String {
    let mut command = Command::new("skopeo");
    command
        .arg("--insecure-policy")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", f.dir.path())
        .env("TMPDIR", f.dir.path())
        .current_dir(f.dir.path());
    let output = output_within(command, Stdio::null(), None);
    succeeded(&format!("skopeo {args:?}"), &output);
    stdout(&output)
}

/// The JSON `skopeo inspect <args>` prints.
fn inspect(f: &Fixture, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["inspect"];
    all.extend(args);
    let text = skopeo(f, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `bytes` with a custom section `name` holding `data` appended: at the top
/// level, where `wasm-tools metadata add` puts a component's metadata.
fn with_custom_section(bytes: &[u8], name: &str, data: &str) -> Vec<u8> {
    let leb = |mut n: usize, out: &mut Vec<u8>| loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    };
    let mut payload = Vec::new();
    leb(name.len(), &mut payload);
    payload.extend_from_slice(name.as_bytes());
    payload.extend_from_slice(data.as_bytes());
    let mut out = bytes.to_vec();
    out.push(0);
    leb(payload.len(), &mut out);
    out.extend(payload);
    out
}

#[test]
fn skopeo_copies_a_pushed_artifact_out_of_the_registry_and_reads_its_world_and_annotations() {
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start();
    let lineage = std::fs::read(AGENT_LINEAGE).unwrap();
    let component = f.path("lineage.wasm");
    std::fs::write(
        &component,
        with_custom_section(&lineage, "version", "1.4.2"),
    )
    .unwrap();
    let target = format!("{}/dsh/lineage:v1", registry.host());
    let flags = [
        "--description",
        "Who started this agent",
        "--source",
        "https://example.com/lineage",
        "--licenses",
        "Apache-2.0",
        "--title",
        "agent-lineage",
    ];

    // The component's own version and a different --version: refused.
    let mut clashing = flags.to_vec();
    clashing.extend(["--version", "2.0.0"]);
    let output = push(&f, &component, &target, &clashing);
    assert_config_error(
        &output,
        &[
            "lineage.wasm",
            "the component's version is `1.4.2`",
            "`2.0.0`",
        ],
    );
    // Not a contributor: a component that imports no dsh:env/types.
    let empty = f.path("empty.wasm");
    std::fs::write(&empty, b"\0asm\x0d\0\x01\0").unwrap();
    let output = push(&f, &empty, &target, &[]);
    assert_config_error(&output, &["empty.wasm", "not a dsh:env contributor"]);

    let output = push(&f, &component, &target, &flags);
    succeeded("push", &output);
    let pinned = stdout(&output).trim().to_string();
    let digest = pinned.rsplit_once('@').unwrap().1.to_string();

    let layout = f.path("layout").display().to_string();
    skopeo(
        &f,
        &[
            "copy",
            "--src-tls-verify=false",
            &format!("docker://{target}"),
            &format!("oci:{layout}:v1"),
        ],
    );
    let copied = format!("oci:{layout}:v1");
    let raw = skopeo(&f, &["inspect", "--raw", &copied]);
    assert_eq!(
        format!(
            "sha256:{}",
            dsh_env_support::digest::sha256_hex(raw.as_bytes())
        ),
        digest,
        "skopeo keeps the manifest byte for byte"
    );
    let manifest: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let annotations = &manifest["annotations"];
    for (key, value) in [
        ("title", "agent-lineage"),
        ("version", "1.4.2"),
        ("description", "Who started this agent"),
        ("source", "https://example.com/lineage"),
        ("licenses", "Apache-2.0"),
    ] {
        assert_eq!(
            annotations[format!("org.opencontainers.image.{key}")],
            value,
            "{manifest}"
        );
    }
    let created = annotations["org.opencontainers.image.created"]
        .as_str()
        .unwrap();
    created
        .parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("created {created}: {e}"));
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");

    let config = inspect(&f, &["--config", "--raw", &copied]);
    assert_eq!(
        (config["os"].as_str(), config["architecture"].as_str()),
        (Some("wasip2"), Some("wasm"))
    );
    assert_eq!(config["layerDigests"][0], manifest["layers"][0]["digest"]);
    let component = &config["component"];
    let names = |key: &str| -> Vec<String> {
        (component[key].as_array().unwrap().iter())
            .map(|name| name.as_str().unwrap().to_string())
            .collect()
    };
    let (exports, imports) = (names("exports"), names("imports"));
    assert!(
        ["declare", "resolve"]
            .iter()
            .all(|e| exports.contains(&e.to_string())),
        "{config}"
    );
    let types = (imports.iter())
        .find(|name| name.starts_with("dsh:env/types@"))
        .unwrap_or_else(|| panic!("{config}"));
    let version = types.strip_prefix("dsh:env/types@").unwrap();
    assert_eq!(
        component["target"],
        format!("dsh:env/contributor@{version}"),
        "{config}"
    );
}

/// One image of a hand-written OCI layout: its name in `index.json`, its
/// layer's media type and bytes.
struct HandImage<'a> {
    name: &'a str,
    layer_media_type: &'a str,
    layer: &'a [u8],
}

/// Writes an OCI image layout at `dir` by hand, as a tool other than
/// dsh-env would (the spec's files, nothing of dsh-env's code): for each
/// image a Wasm config, its layer and an image manifest, listed in
/// `index.json` under its name. Returns each manifest's digest.
fn write_layout(dir: &Path, images: &[HandImage]) -> Vec<String> {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |bytes: &[u8]| {
        let hex = dsh_env_support::digest::sha256_hex(bytes);
        std::fs::write(blobs.join(&hex), bytes).unwrap();
        (format!("sha256:{hex}"), bytes.len())
    };
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let mut entries = Vec::new();
    let mut digests = Vec::new();
    for image in images {
        let (layer_digest, layer_size) = put(image.layer);
        let config = serde_json::json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest],
            "component": {"exports": ["declare", "resolve"], "imports": ["dsh:env/types@0.2.0"]},
        });
        let (config_digest, config_size) = put(config.to_string().as_bytes());
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": image.layer_media_type, "digest": layer_digest, "size": layer_size}],
            "annotations": {"org.opencontainers.image.title": image.name},
        });
        let (digest, size) = put(manifest.to_string().as_bytes());
        entries.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": size,
            "annotations": {"org.opencontainers.image.ref.name": image.name},
        }));
        digests.push(digest);
    }
    let index = serde_json::json!({"schemaVersion": 2, "manifests": entries});
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
    digests
}

#[test]
fn an_artifact_made_without_dsh_env_is_added_and_pulled_when_valid_and_refused_naming_why_when_not()
{
    let f = Fixture::new();
    let registry = dsh_env_test_registry::TestRegistry::start();
    let lineage = std::fs::read(AGENT_LINEAGE).unwrap();
    let core_module = b"\0asm\x01\0\0\0".as_slice();
    let layout = f.path("hand");
    let digests = write_layout(
        &layout,
        &[
            HandImage {
                name: "good",
                layer_media_type: "application/wasm",
                layer: &lineage,
            },
            HandImage {
                name: "octet",
                layer_media_type: "application/octet-stream",
                layer: &lineage,
            },
            HandImage {
                name: "module",
                layer_media_type: "application/wasm",
                layer: core_module,
            },
        ],
    );
    let host = registry.host();
    for name in ["good", "octet", "module"] {
        skopeo(
            &f,
            &[
                "copy",
                "--dest-tls-verify=false",
                &format!("oci:{}:{name}", layout.display()),
                &format!("docker://{host}/hand/{name}:v1"),
            ],
        );
    }

    let manifest = f.write("m.toml", "");
    let (m, home) = (manifest.to_str().unwrap(), f.home());
    let add = |name: &str| {
        let reference = format!("oci://{host}/hand/{name}:v1");
        f.run(
            &["add", &reference, "--manifest", m, "--home", &home, "--yes"],
            &[],
        )
    };
    let output = add("good");
    succeeded("add", &output);
    assert!(
        stdout(&output).contains("Contributor `agent-lineage` from oci://"),
        "{}",
        stdout(&output)
    );
    let pinned = format!("{host}/hand/good@{}", digests[0]);
    let written = std::fs::read_to_string(&manifest).unwrap();
    assert!(written.contains(&format!("oci://{pinned}")), "{written}");

    assert_config_error(
        &add("octet"),
        &[
            "hand/octet:v1",
            "not a Wasm artifact",
            "its layer media type is \"application/octet-stream\", not application/wasm",
        ],
    );
    let output = add("module");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("core wasm module, not a component"),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), written);

    // skopeo reads the home's store, by the tag it was added by and by its pin.
    let store = f.path("home/store").display().to_string();
    for name in [format!("{host}/hand/good:v1"), pinned.clone()] {
        let raw = skopeo(&f, &["inspect", "--raw", &format!("oci:{store}:{name}")]);
        let read: serde_json::Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(
            read["annotations"]["org.opencontainers.image.title"],
            "good"
        );
    }

    // A worker pulls the reviewed manifest; skopeo reads its store too.
    let worker = f.path("worker").display().to_string();
    let output = pull(&f, m, &worker, &[]);
    succeeded("pull", &output);
    assert!(stdout(&output).contains("1 pulled"), "{}", stdout(&output));
    let raw = skopeo(
        &f,
        &["inspect", "--raw", &format!("oci:{worker}/store:{pinned}")],
    );
    assert_eq!(
        format!(
            "sha256:{}",
            dsh_env_support::digest::sha256_hex(raw.as_bytes())
        ),
        digests[0]
    );

    // A manifest pinning what is not a contributor: pull refuses, naming why.
    for (name, digest, why) in [
        ("octet", &digests[1], "not a Wasm artifact"),
        ("module", &digests[2], "core wasm module, not a component"),
    ] {
        let bad = f.write(
            &format!("{name}.toml"),
            &format!("[[contributor]]\nsource = \"oci://{host}/hand/{name}@{digest}\"\n"),
        );
        let output = pull(&f, bad.to_str().unwrap(), &worker, &[]);
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        assert!(stderr(&output).contains(why), "{}", stderr(&output));
    }
}

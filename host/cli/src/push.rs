//! `dsh-env push`: ship a component to an OCI registry as a Wasm artifact,
//! with the minisign signature that sits beside it, and print the reference
//! pinned to what was pushed. The artifact is described as the CNCF Wasm
//! layout and the OCI annotations ask: its world and contract version in
//! the config, its title, version, description, source and licenses on the
//! manifest (the component's own metadata first, these flags for the rest).

use std::path::PathBuf;
use std::process::ExitCode;

use dsh_env::ReadProblem;
use dsh_env::not_a_component_reason;
use dsh_env_oci::{Artifact, ComponentWorld, DescribeError, Description};
use dsh_env_store::{OCI_SCHEME, OciReference};
use dsh_env_support::input::{
    MAX_COMPONENT_BYTES, escape_controls, read_regular_file, read_regular_text,
};

use crate::failure::{CliResult, Failure};
use crate::network::NetworkArgs;

/// The largest `.minisig` read: one is about 300 bytes.
const MAX_SIGNATURE_BYTES: u64 = 8 << 10;

/// The arguments of `push`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The component file; `<file>.minisig`, if present, is pushed with it.
    file: PathBuf,
    /// Where to: `<registry>/<repository>:<tag>` (`oci://` optional).
    target: String,
    /// The `org.opencontainers.image.title`, unless the component names itself.
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
    /// The `org.opencontainers.image.version`, unless the component's
    /// `version` metadata says it (then they must agree).
    #[arg(long = "version", value_name = "VERSION")]
    artifact_version: Option<String>,
    /// The `org.opencontainers.image.description`, unless the component's
    /// metadata has one.
    #[arg(long, value_name = "TEXT")]
    description: Option<String>,
    /// The `org.opencontainers.image.source` (the source code's URL),
    /// unless the component's metadata has one.
    #[arg(long, value_name = "URL")]
    source: Option<String>,
    /// The `org.opencontainers.image.licenses` (an SPDX expression),
    /// unless the component's metadata has them.
    #[arg(long, value_name = "SPDX")]
    licenses: Option<String>,
    #[command(flatten)]
    network: NetworkArgs,
}

/// Pushes; prints `oci://<registry>/<repository>@sha256:<digest>`.
pub(crate) async fn run(args: Args) -> CliResult<ExitCode> {
    let target = match args.target.strip_prefix(OCI_SCHEME) {
        Some(_) => args.target.clone(),
        None => format!("{OCI_SCHEME}{}", args.target),
    };
    let reference = OciReference::parse(&target).map_err(Failure::config)?;
    let shown_file = escape_controls(&args.file.display().to_string()).into_owned();
    let wasm = read_regular_file(&args.file, MAX_COMPONENT_BYTES)
        .map_err(|e| Failure::config(format!("cannot read component {e}")))?;
    if let Some(reason) = not_a_component_reason(&wasm) {
        return Err(Failure::config(format!("{shown_file}: {reason}")));
    }
    let mut signature_path = args.file.clone().into_os_string();
    signature_path.push(".minisig");
    let signature = match read_regular_text(signature_path.as_ref(), MAX_SIGNATURE_BYTES) {
        Ok(text) => Some(text),
        Err(e) if matches!(&e.problem, ReadProblem::Io(io) if io.kind() == std::io::ErrorKind::NotFound) => {
            None
        }
        Err(e) => return Err(Failure::config(format!("cannot read signature {e}"))),
    };
    let not_described = |e: DescribeError| Failure::config(format!("{shown_file}: {e}"));
    let component = ComponentWorld::decode(&wasm).map_err(not_described)?;
    if component.target.is_none() {
        return Err(not_described(DescribeError::NoContract));
    }
    let given = Description {
        title: args.title.clone(),
        version: args.artifact_version.clone(),
        description: args.description.clone(),
        source: args.source.clone(),
        licenses: args.licenses.clone(),
    };
    let description = (Description::from_component(&wasm).and_then(|own| own.or(&given)))
        .map_err(not_described)?;
    let artifact = Artifact {
        wasm: &wasm,
        signature: signature.as_deref(),
        component: Some(component),
        description,
    };
    let options = args.network.options(&reference)?;
    let pinned = dsh_env_oci::push_artifact(&artifact, &reference, &options)
        .await
        .map_err(Failure::config)?;
    eprintln!(
        "dsh-env: pushed {shown_file} ({}) to {reference}",
        if signature.is_some() {
            "with its signature"
        } else {
            "unsigned"
        }
    );
    println!("{pinned}");
    Ok(ExitCode::SUCCESS)
}

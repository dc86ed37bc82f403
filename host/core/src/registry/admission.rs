//! Admission: loading a component, checking its pin and signature (from a
//! file, bytes, or the store), and the trust rule at registration.

use std::path::Path;
use std::sync::Arc;

use crate::digest;
use crate::input::{MAX_COMPONENT_BYTES, read_regular_file};
use crate::limits::Limits;
use crate::load_error::{LoadError, LoadErrorKind};
use crate::sandbox::{ContributorComponent, Source};
use crate::signature::{SignatureError, Signer, read_signature};
use crate::spec::{ContributorSource, ContributorSpec, SpecError, managed_env_grant};
use crate::store::{SIGNATURE_ANNOTATION, Store, StoredArtifact};

use super::error::RegistryError;
use super::state::Registry;

impl Registry {
    /// Compiles a component from a file under the default compile limits,
    /// or maps it from the cache when the file is unchanged since it was
    /// compiled.
    pub fn load_file(&self, path: &Path) -> Result<ContributorComponent, LoadError> {
        self.load_file_with(path, &Limits::default())
    }

    /// [`Registry::load_file`] under `limits`' compile limits; the component
    /// carries `limits`.
    pub fn load_file_with(
        &self,
        path: &Path,
        limits: &Limits,
    ) -> Result<ContributorComponent, LoadError> {
        let origin = path.display().to_string();
        self.load(&origin, Source::File(path), limits)
    }

    /// Compiles a component from bytes (or takes it from the cache) under
    /// the default compile limits; `origin` names it in errors.
    pub fn load_bytes(
        &self,
        origin: &str,
        bytes: &[u8],
    ) -> Result<ContributorComponent, LoadError> {
        self.load_bytes_with(origin, bytes, &Limits::default())
    }

    /// [`Registry::load_bytes`] under `limits`' compile limits; the
    /// component carries `limits`.
    pub fn load_bytes_with(
        &self,
        origin: &str,
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<ContributorComponent, LoadError> {
        self.load(origin, Source::Bytes(bytes), limits)
    }

    fn load(
        &self,
        origin: &str,
        source: Source<'_>,
        limits: &Limits,
    ) -> Result<ContributorComponent, LoadError> {
        self.inner.loader.load(origin, source, limits)
    }

    /// Loads the component `spec` describes (see [`Registry::load_file_with`])
    /// with its config, limits, grants and failure policy.
    ///
    /// A pinned (`sha256`) or signed-under-`[trust]` component is read and
    /// checked at every load, and the bytes that passed are the ones
    /// compiled: no cached file identity stands in for the check. The
    /// signature is checked under the registry's trust
    /// ([`RegistryBuilder::trust`]).
    pub fn load_spec(&self, spec: &ContributorSpec) -> Result<ContributorComponent, RegistryError> {
        self.load_spec_from(spec, None)
    }

    /// [`Registry::load_spec`] for a spec whose source is the reference
    /// `pulled` was pulled by, from `pulled` in memory rather than from the
    /// store: `add` reviews a pull this way and stores it only once accepted,
    /// so a refused artifact leaves nothing behind. Any other spec loads as
    /// by [`Registry::load_spec`].
    pub fn load_pulled(
        &self,
        spec: &ContributorSpec,
        pulled: &StoredArtifact,
    ) -> Result<ContributorComponent, RegistryError> {
        self.load_spec_from(spec, Some(pulled))
    }

    fn load_spec_from(
        &self,
        spec: &ContributorSpec,
        pulled: Option<&StoredArtifact>,
    ) -> Result<ContributorComponent, RegistryError> {
        let trust = &self.inner.trust;
        let origin = spec.origin();
        let signature_location = (spec.signature.as_deref())
            .map(|path| path.display().to_string())
            .unwrap_or_else(|| "(no signature file)".into());
        let read_signature = || -> Result<Option<String>, RegistryError> {
            let Some(path) = &spec.signature else {
                return Ok(None);
            };
            read_signature(path).map_err(|problem| {
                RegistryError::Signature(SignatureError::Malformed {
                    origin: origin.clone(),
                    signature: signature_location.clone(),
                    reason: problem.to_string(),
                })
            })
        };
        let checked = |bytes: &[u8]| -> Result<Signer, RegistryError> {
            if let Some(pin) = &spec.sha256 {
                check_pin(&origin, bytes, pin)?;
            }
            let signature = read_signature()?;
            Ok(trust.check(&origin, bytes, signature.as_deref(), &signature_location)?)
        };
        let (component, signer) = match &spec.source {
            ContributorSource::File(path) if spec.sha256.is_none() && !trust.is_active() => {
                // Nothing to check on the bytes: the cache may map the file
                // by its identity. A signature is still reported.
                let signature = read_signature()?;
                let signer =
                    trust.check(&origin, &[], signature.as_deref(), &signature_location)?;
                (self.load_file_with(path, &spec.limits)?, signer)
            }
            ContributorSource::File(path) => {
                let bytes = read_regular_file(path, MAX_COMPONENT_BYTES)
                    .map_err(|e| LoadError::new(&origin, LoadErrorKind::Read(e.problem.into())))?;
                let signer = checked(&bytes)?;
                (self.load_bytes_with(&origin, &bytes, &spec.limits)?, signer)
            }
            ContributorSource::Bytes { bytes, .. } => {
                let signer = checked(bytes)?;
                (self.load_bytes_with(&origin, bytes, &spec.limits)?, signer)
            }
            ContributorSource::Oci(reference) => {
                // From the store, never the network; the signature is the
                // annotation on the image manifest the reference pins.
                let artifact = match pulled.filter(|pulled| &pulled.reference == reference) {
                    Some(pulled) => std::borrow::Cow::Borrowed(pulled),
                    None => std::borrow::Cow::Owned(
                        (Store::in_home(&self.inner.home).load(reference)).map_err(|e| {
                            LoadError::new(&origin, LoadErrorKind::Store(e.problem.into()))
                        })?,
                    ),
                };
                if let Some(pin) = &spec.sha256 {
                    check_pin(&origin, &artifact.wasm, pin)?;
                }
                let location =
                    format!("the {SIGNATURE_ANNOTATION} annotation of its image manifest");
                let signature = artifact.signature.as_deref();
                let signer = trust.check(&origin, &artifact.wasm, signature, &location)?;
                (
                    self.load_bytes_with(&origin, &artifact.wasm, &spec.limits)?,
                    signer,
                )
            }
        };
        Ok(component
            .with_config(spec.config.clone())
            .with_grants(spec.grants.clone())
            .with_declared_at(spec.declared_at.clone())
            .with_on_error(spec.on_error)
            .checked(signer, Arc::clone(trust)))
    }

    /// The grants rule at registration, for a component however it was
    /// made: no env grant names a `DSH_*` variable.
    pub(super) fn check_grants(component: &ContributorComponent) -> Result<(), RegistryError> {
        let names = component.grants().env.iter().map(|(name, _)| name.as_str());
        match managed_env_grant(names) {
            Some(name) => Err(RegistryError::Spec {
                contributor: component.origin().to_string(),
                source: SpecError::ManagedEnvGrant(name.to_string()),
            }),
            None => Ok(()),
        }
    }

    /// The trust rule at registration: under a trust with keys, only a
    /// component whose signature was checked under this same trust (by
    /// [`Registry::load_spec`]) is registered. A component loaded with
    /// [`Registry::load_file`] or [`Registry::load_bytes`], or under another
    /// registry's trust, was not.
    pub(super) fn admit(&self, component: &ContributorComponent) -> Result<(), SignatureError> {
        let trust = &self.inner.trust;
        if !trust.is_active() {
            return Ok(());
        }
        match component.checked_under() {
            Some(checked) if Arc::ptr_eq(checked, trust) || **checked == **trust => Ok(()),
            _ => Err(SignatureError::Unchecked {
                origin: component.origin().to_string(),
            }),
        }
    }
}

/// Refuses `bytes` unless their SHA-256 is `pin` (lowercase hex).
fn check_pin(origin: &str, bytes: &[u8], pin: &str) -> Result<(), RegistryError> {
    digest::verify(bytes, pin).map_err(|mismatch| RegistryError::Changed {
        origin: origin.to_string(),
        pinned: pin.to_string(),
        actual: mismatch.actual,
    })
}

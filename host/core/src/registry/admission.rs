//! Admission: loading a component, checking its pin and signature (from a
//! file, bytes, or the store), and the trust rule at registration.

use std::path::Path;
use std::sync::Arc;

use crate::limits::Limits;
use crate::load_error::{LoadError, LoadErrorKind};
use crate::sandbox::{ContributorComponent, Source};
use crate::signature::{SignatureError, Signer, read_signature};
use crate::spec::{ContributorSource, ContributorSpec, SpecError, managed_env_grant};
use dsh_env_store::{BlobStore, SIGNATURE_ANNOTATION, StoredArtifact};
use dsh_env_support::digest;
use dsh_env_support::input::{MAX_COMPONENT_BYTES, read_regular_file};

use super::error::RegistryError;
use super::state::Registry;

/// Where [`Registry::load`] takes a component from.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum LoadFrom<'a> {
    /// A file: compiled, or mapped from the cache when it is unchanged
    /// since it was compiled. Nothing is checked: under a trust with keys,
    /// such a component is refused at registration.
    File(&'a Path),
    /// Bytes in memory, compiled or taken from the cache. Nothing is
    /// checked, as for [`LoadFrom::File`].
    Bytes {
        /// Names the component in errors.
        origin: &'a str,
        /// The component.
        bytes: &'a [u8],
    },
    /// What a spec describes, with its config, limits, grants and failure
    /// policy. A pinned (`sha256`) or signed-under-`[trust]` component is
    /// read and checked at every load, and the bytes that passed are the
    /// ones compiled: no cached file identity stands in for the check. The
    /// signature is checked under the registry's trust
    /// ([`RegistryBuilder::trust`]).
    Spec(&'a ContributorSpec),
    /// [`LoadFrom::Spec`] for a spec whose source is the reference
    /// `artifact` was pulled by, from `artifact` in memory rather than from
    /// the store: `add` reviews a pull this way and stores it only once
    /// accepted, so a refused artifact leaves nothing behind. Any other
    /// spec loads as by [`LoadFrom::Spec`].
    Pulled {
        /// The spec.
        spec: &'a ContributorSpec,
        /// What was pulled for its reference.
        artifact: &'a StoredArtifact,
    },
}

/// How [`Registry::load`] loads: the default compiles under the source's
/// own limits.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct LoadOptions {
    limits: Option<Limits>,
}

impl LoadOptions {
    /// The source's own limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// The component is compiled under `limits`' compile limits and carries
    /// `limits`, instead of a spec's own or, for a file or bytes,
    /// [`Limits::default`].
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }
}

impl Registry {
    /// Loads a component from `from` as `options` say, ready for
    /// [`Registry::register`] or [`Registry::check`].
    pub fn load(
        &self,
        from: LoadFrom<'_>,
        options: &LoadOptions,
    ) -> Result<ContributorComponent, RegistryError> {
        let (given, default) = (options.limits.as_ref(), Limits::default());
        match from {
            LoadFrom::File(path) => {
                let origin = path.display().to_string();
                Ok(self.compile(&origin, Source::File(path), given.unwrap_or(&default))?)
            }
            LoadFrom::Bytes { origin, bytes } => {
                Ok(self.compile(origin, Source::Bytes(bytes), given.unwrap_or(&default))?)
            }
            LoadFrom::Spec(spec) => self.load_checked(spec, None, given.unwrap_or(&spec.limits)),
            LoadFrom::Pulled { spec, artifact } => {
                self.load_checked(spec, Some(artifact), given.unwrap_or(&spec.limits))
            }
        }
    }

    /// Compiles (or takes from the cache) the component `source` holds.
    fn compile(
        &self,
        origin: &str,
        source: Source<'_>,
        limits: &Limits,
    ) -> Result<ContributorComponent, LoadError> {
        self.inner.loader.load(origin, source, limits)
    }

    /// [`LoadFrom::Spec`], from `pulled` when it holds the spec's reference,
    /// compiled under `limits`.
    fn load_checked(
        &self,
        spec: &ContributorSpec,
        pulled: Option<&StoredArtifact>,
        limits: &Limits,
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
                (self.compile(&origin, Source::File(path), limits)?, signer)
            }
            ContributorSource::File(path) => {
                let bytes = read_regular_file(path, MAX_COMPONENT_BYTES)
                    .map_err(|e| LoadError::new(&origin, LoadErrorKind::Read(e.problem.into())))?;
                let signer = checked(&bytes)?;
                (
                    self.compile(&origin, Source::Bytes(&bytes), limits)?,
                    signer,
                )
            }
            ContributorSource::Bytes { bytes, .. } => {
                let signer = checked(bytes)?;
                (self.compile(&origin, Source::Bytes(bytes), limits)?, signer)
            }
            ContributorSource::Oci(reference) => {
                // From the store, never the network; the signature is the
                // annotation on the image manifest the reference pins.
                let artifact = match pulled.filter(|pulled| &pulled.reference == reference) {
                    Some(pulled) => std::borrow::Cow::Borrowed(pulled),
                    None => std::borrow::Cow::Owned(
                        (BlobStore::in_home(self.inner.home.path()).load(reference)).map_err(
                            |e| LoadError::new(&origin, LoadErrorKind::Store(e.problem.into())),
                        )?,
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
                    self.compile(&origin, Source::Bytes(&artifact.wasm), limits)?,
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
    /// component whose signature was checked under this same trust (loaded
    /// from a [`LoadFrom::Spec`]) is registered. A component loaded from a
    /// file or bytes, or under another registry's trust, was not.
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

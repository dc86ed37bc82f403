//! The engine that registries share: one engine with its instance pool and
//! epoch thread, the threads that run guests' file I/O, and the host-wide
//! budgets of [`HostLimits`]. Build one per process and hand it to every
//! [`crate::Registry`]: each engine reserves the pool's address space (about
//! a terabyte of it), so one per registry soon runs out.

use std::sync::Arc;

use crate::engine::{Allocator, EngineError};
use crate::limits::HostLimits;
use crate::sandbox::Sandbox;

/// One engine, its pool and epoch thread, and the host-wide budgets, shared
/// by any number of registries. Cheap to clone.
#[derive(Clone)]
pub struct SharedEngine {
    pub(crate) sandbox: Arc<Sandbox>,
}

impl std::fmt::Debug for SharedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedEngine")
            .field("allocator", self.allocator())
            .field("host_limits", self.host_limits())
            .finish_non_exhaustive()
    }
}

impl SharedEngine {
    /// A runtime under the default [`HostLimits`].
    pub fn new() -> Result<Self, EngineError> {
        Self::with_host_limits(HostLimits::default())
    }

    /// A runtime whose live instances together stay within `host_limits`.
    pub fn with_host_limits(host_limits: HostLimits) -> Result<Self, EngineError> {
        Ok(SharedEngine {
            sandbox: Arc::new(Sandbox::new(host_limits)?),
        })
    }

    /// How the engine allocates instances; an embedder should show the
    /// reason when it is [`Allocator::OnDemand`].
    pub fn allocator(&self) -> &Allocator {
        self.sandbox.allocator()
    }

    /// The host-wide budgets this runtime enforces.
    pub fn host_limits(&self) -> &HostLimits {
        self.sandbox.host_limits()
    }

    /// Guest memory (linear memories and tables) that live instances, and
    /// finished ones not dropped yet, hold now, in bytes: what
    /// [`HostLimits::memory_budget_bytes`] bounds.
    pub fn guest_memory(&self) -> usize {
        self.sandbox.memory_in_use()
    }

    /// Guest memory that finished instances not dropped yet hold, in bytes:
    /// what [`HostLimits::retired_bytes`] bounds.
    pub fn retired_memory(&self) -> usize {
        self.sandbox.retired_bytes()
    }

    /// Files and directories guests hold open through their cwd grants now:
    /// what [`HostLimits::guest_descriptors`] bounds.
    pub fn guest_descriptors(&self) -> usize {
        self.sandbox.descriptors_open()
    }

    /// The contributors holding guest descriptors now, by name, with how
    /// many each holds (prepared instances are named by their origin).
    pub fn descriptor_holders(&self) -> Vec<(String, usize)> {
        self.sandbox.descriptor_holders()
    }
}

//! The helpers every dsh-env crate shares, below the store and the core:
//! reading files a user names under a cap, the one display rule for text the
//! host did not write ([`input::escape_controls`]), SHA-256 as the host
//! compares it ([`digest`]), a file's version without reading it
//! ([`file_version`]), and whole-file writes ([`atomic_file`]).
//!
//! A crate of its own so that the store (`dsh-env-store`), the core and the
//! front ends use one implementation without depending on each other.

#![deny(missing_docs)]

pub mod atomic_file;
pub mod digest;
pub mod file_version;
pub mod input;

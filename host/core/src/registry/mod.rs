//! The registry: which contributors exist, which keys each owns, and
//! `collect`, which turns one execution into one overlay.
//!
//! Bottom to top: what it holds (`state`), why things fail (`error`), how
//! it is built (`builder`), admission (`admission`: load, pin, signature,
//! store), registration and listing (`registration`), collection
//! (`collection`), why keys are absent (`absence`). Each file adds its own `impl Registry`.

mod absence;
mod admission;
mod builder;
mod collection;
mod error;
mod registration;
mod round;
mod state;

pub use absence::Absence;
pub use admission::{LoadFrom, LoadOptions};
pub use builder::RegistryBuilder;
pub use collection::{
    CollectAll, CollectEachAlone, CollectOnly, CollectOptions, CollectScope, Collection,
};
pub use error::{ContributorError, FailureCause, RegistryError};
pub use registration::{ContributorListing, KeyListing};
pub use state::{NativeContributor, Registration, Registry};

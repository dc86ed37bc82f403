//! Paths of the guest components built by `build.rs`: the example
//! contributors in every language and the test guests; and the minisign
//! keys the tests sign them with.

pub mod minisign;

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));

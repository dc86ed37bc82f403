//! Paths of the guest components built by `build.rs`: the example
//! contributors in every language and the test guests.

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));

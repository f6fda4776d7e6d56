//! The end-to-end tests' world, MCP sessions and UCP builders live in `crates/cajaguard-harness`
//! (shared with the benches and `cargo xtask report`); this module only brings them in under the
//! name every test file uses.

#![allow(unused_imports)]

pub use cajaguard_harness::*;

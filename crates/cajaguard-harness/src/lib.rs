//! Test scaffolding written once, for the integration tests of `crates/cajaguard`, the benches and
//! `cargo xtask report`: a [`World`] (a fresh home, a config, keys made by `cajaguard keygen`, a
//! shop process), an [`Mcp`] session to a `cajaguard mcp` child, UCP builders and verdict parsing
//! ([`ucp`]), pure fixtures for the core and the store ([`fixtures`]), PostgreSQL schemas
//! ([`pg`]), racing sessions ([`race`]), worker processes ([`workers`]) and the SPEC §10 table
//! with the flows that produce its rows ([`spec`]).
//!
//! A dev-dependency of `cajaguard` and `cajaguard-core` (their integration tests and benches; a
//! crate's own unit tests cannot use it) and a dependency of `xtask`; not a default member, so a
//! plain `cargo build` does not build it.
//!
//! # Why the helpers panic
//! Every helper panics with a message saying what went wrong instead of returning a `Result`
//! (the one exception, [`fixtures::claim_and_gate`], returns the store's error because tests
//! assert on it). The
//! tests are most of the callers (hundreds of call sites), and there a failing helper *is* the test
//! failing: each call reads as the step it is, with no `?` or `.unwrap()` on every line. The report
//! is the other caller and must not crash on a broken world; it runs each scenario and measurement
//! through [`caught`], which turns a panic into that scenario's error, so one broken world still
//! fails only its own row. Panicking on outside data is fine here for that reason: nothing in this
//! crate ships in the binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod bins;
pub mod fixture_server;
pub mod fixtures;
pub mod http_request;
pub mod mcp;
pub mod pg;
pub mod race;
pub mod service;
pub mod spec;
pub mod ucp;
pub mod workers;
pub mod world;

pub use bins::{Bins, cajaguard_bin, demo_bin, fixture_bin, test_shop_bin};
pub use mcp::Mcp;
pub use ucp::*;
pub use world::{
    FixtureServer, Host, Options, SHOP_TOKEN, Shop, TOKEN_VAR, Transport, World, read_json,
    usd_spend,
};

/// Runs `f`; a panic in it becomes an error carrying the panic's message (for the report, whose
/// scenarios use these panicking helpers but must each fail alone).
pub fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        if let Some(text) = payload.downcast_ref::<&str>() {
            (*text).to_owned()
        } else if let Some(text) = payload.downcast_ref::<String>() {
            text.clone()
        } else {
            "a helper panicked".to_owned()
        }
    })
}

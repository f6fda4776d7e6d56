//! CajaGuard's edges: the MCP proxy, the durable store, key files and the CLI, over the pure
//! decision in `cajaguard-core`.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod bearer;
pub mod bridge;
pub mod cli;
pub mod clock;
pub mod keys;
pub mod metrics;
pub mod proxy;
pub mod service;
pub mod status;
pub mod store;
pub mod web;

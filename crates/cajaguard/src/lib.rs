//! CajaGuard's edges: the MCP proxy, the durable store, key files and the CLI, over the pure
//! decision in `cajaguard-core`.

pub mod keys;
pub mod store;

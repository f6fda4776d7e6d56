//! The wire formats CajaGuard relays, with no knowledge of the gate: JSON-RPC framing and envelopes
//! ([`jsonrpc`]), JSON edited without re-encoding ([`rawjson`]), the MCP protocol eras ([`era`]) and
//! server-sent events ([`sse`]). A crate of its own so that the fuzz targets build these parsers as
//! they run in the proxy, without the store, the CLI or SQLite.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod era;
pub mod jsonrpc;
pub mod rawjson;
pub mod sse;

//! `cajaguard serve`: the gate as an MCP Streamable HTTP service for many agents (SPEC §13).

pub mod oauth;

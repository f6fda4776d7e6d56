//! SPEC §10 end to end with the fixture shop over MCP Streamable HTTP (issue 7): the same scenario
//! bodies as `scenarios.rs`, the fixture started with `--listen 127.0.0.1:0` and a bearer token,
//! `cajaguard mcp` and `cajaguard approve` reaching it over HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod spec_scenarios;
mod support;

use spec_scenarios::spec_scenarios;
use support::Transport;

spec_scenarios!(Transport::Http);

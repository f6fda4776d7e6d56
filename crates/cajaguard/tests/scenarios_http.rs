//! SPEC §10 end to end with the fixture shop over MCP Streamable HTTP (issue 7): the same flows
//! as `scenarios.rs`, the fixture started with `--listen 127.0.0.1:0` and a bearer token,
//! `cajaguard mcp` and `cajaguard approve` reaching it over HTTP.

use cajaguard_harness::Transport;

cajaguard_harness::spec_tests!(Transport::Http);

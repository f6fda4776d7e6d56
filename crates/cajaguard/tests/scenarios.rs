//! SPEC §10 end to end with the fixture shop on stdio (a child process of the proxy). The scenario
//! bodies are in `spec_scenarios/mod.rs`, shared with `scenarios_http.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod spec_scenarios;
mod support;

use spec_scenarios::spec_scenarios;
use support::Transport;

spec_scenarios!(Transport::Stdio);

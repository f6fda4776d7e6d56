//! SPEC §10 end to end with the fixture shop on stdio (a child process of the proxy). The table
//! and the flows are in `cajaguard_harness::spec`, shared with `scenarios_http.rs` and the report.

use cajaguard_harness::Transport;

cajaguard_harness::spec_tests!(Transport::Stdio);

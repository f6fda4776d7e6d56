//! Processes starting together (regression, issue 13): MCP clients start their servers at the same
//! moment, and so do a team's agents. Eight `cajaguard mcp` on a fresh home used to exit at once,
//! now and then, with "stayed locked ... for more than 5 s": SQLite answers the switch to WAL with
//! BUSY without waiting. Sixteen at once on a fresh home, twenty times over: every one initializes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::*;

#[test]
fn sixteen_processes_started_at_once_on_a_fresh_home_all_initialize() {
    const PROCESSES: usize = 16;
    const ROUNDS: usize = 20;
    for round in 0..ROUNDS {
        let world = World::with_test_shop(json!({}));
        assert!(!world.home.exists(), "round {round}: the home is fresh");
        // All started before any is spoken to, so their store openings overlap.
        let mut proxies: Vec<Mcp> = (0..PROCESSES)
            .map(|_| world.proxy_uninitialized())
            .collect();
        let ids: Vec<u64> = proxies
            .iter_mut()
            .map(|mcp| {
                mcp.send_request(
                    "initialize",
                    json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "startup", "version": "0"}}),
                )
            })
            .collect();
        for (i, (mcp, id)) in proxies.iter_mut().zip(ids).enumerate() {
            // A process that exited instead panics here ("the proxy closed its output").
            let answer = mcp.answer_to(id);
            assert!(
                answer.get("result").is_some(),
                "round {round}, process {i}: {answer}"
            );
        }
        // And each serves a call that reads the store.
        for (i, mcp) in proxies.iter_mut().enumerate() {
            let status = mcp.call("cajaguard_status", json!({}));
            assert_eq!(
                status["isError"], false,
                "round {round}, process {i}: {status}"
            );
        }
    }
}

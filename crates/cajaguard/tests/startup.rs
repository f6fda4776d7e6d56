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
        initialize_all(&mut proxies, round);
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

/// Sends `initialize` to every process before reading any answer (their store openings overlap),
/// then checks each answered; a process that exited instead panics ("the proxy closed its output").
fn initialize_all(proxies: &mut [Mcp], round: usize) {
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
        let answer = mcp.answer_to(id);
        assert!(
            answer.get("result").is_some(),
            "round {round}, process {i}: {answer}"
        );
    }
}

use cajaguard_harness::pg as pg_support;

/// The same on one PostgreSQL store: sixteen hosts start at once on a fresh schema, so every
/// one of them finds the migrations unapplied; each is applied once and every host initializes.
#[test]
fn sixteen_hosts_started_at_once_on_a_fresh_postgres_schema_all_initialize() {
    let Some(base) = pg_support::base_url() else {
        pg_support::notice(
            "sixteen_hosts_started_at_once_on_a_fresh_postgres_schema_all_initialize",
        );
        return;
    };
    const HOSTS: usize = 16;
    const ROUNDS: usize = 10;
    const URL_ENV: &str = "CAJAGUARD_STORE_URL";
    for round in 0..ROUNDS {
        let schema = pg_support::Schema::create(&base);
        let world = World::with_test_shop(json!({}));
        let hosts: Vec<Host> = (0..HOSTS)
            .map(|n| {
                world.host(
                    &format!("host{n}"),
                    json!({ "url_env": URL_ENV }),
                    &[(URL_ENV, schema.url.as_str())],
                )
            })
            .collect();
        let mut proxies: Vec<Mcp> = hosts.iter().map(Host::proxy_uninitialized).collect();
        initialize_all(&mut proxies, round);
        let row = schema
            .client()
            .query_one(
                "SELECT COUNT(*), COUNT(DISTINCT version), MAX(version)::BIGINT FROM schema_migrations",
                &[],
            )
            .unwrap();
        let (applied, distinct, latest): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(
            (applied, distinct),
            (latest, latest),
            "round {round}: every migration applied, each once"
        );
    }
}

//! URL-mode elicitation (SPEC §6): a 2025-11-25 client that declared
//! `capabilities.elicitation.url` is sent `elicitation/create` (mode `url`) with the approval page
//! of a blocked payment, and `notifications/elicitation/complete` once the request is decided; its
//! answer approves nothing. A client that did not declare it gets the refusal alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use cajaguard_harness::mcp::Mcp;
use cajaguard_harness::world::World;
use serde_json::{Value, json};

/// A world with the approval page configured (`require: "any"`, so the test can decide with the
/// approver key).
fn world_with_page() -> World {
    let world = World::new();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&world.config).unwrap()).unwrap();
    config["approvals"]["web"] = json!({ "listen": "127.0.0.1:8391" });
    config["approvals"]["require"] = json!("any");
    std::fs::write(&world.config, config.to_string()).unwrap();
    world
}

fn client(world: &World, capabilities: Value) -> Mcp {
    let mut mcp = world.proxy_uninitialized();
    let init = mcp.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
               "clientInfo": {"name": "elicitation-test", "version": "0"}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    mcp.notify("notifications/initialized", json!({}));
    mcp
}

/// Completes a fresh Day pack checkout; returns the answer and every message sent before it.
fn block_day_pack(mcp: &mut Mcp) -> (Value, Vec<Value>) {
    let checkout = mcp.create_checkout("day-pack", 1);
    let id = mcp.send_request(
        "tools/call",
        json!({"name": "complete_checkout", "arguments": Mcp::complete_arguments(&checkout, "k1")}),
    );
    let mut before = Vec::new();
    loop {
        let message = mcp.read_message();
        if message["id"] == json!(id) {
            return (message, before);
        }
        before.push(message);
    }
}

#[test]
fn a_client_that_declared_url_elicitation_is_sent_the_page_and_told_when_decided() {
    let world = world_with_page();
    let mut mcp = client(&world, json!({ "elicitation": { "url": {} } }));
    let (answer, before) = block_day_pack(&mut mcp);
    let refusal = &answer["result"]["structuredContent"]["cajaguard"];
    assert_eq!(refusal["verdict"], "blocked", "{answer}");
    let request_id = refusal["request_id"].as_str().unwrap().to_owned();
    let url = format!("http://localhost:8391/requests/{request_id}");
    assert_eq!(refusal["approval_url"], url.as_str());

    let elicit = before
        .iter()
        .find(|m| m["method"] == "elicitation/create")
        .unwrap_or_else(|| panic!("no elicitation/create before the refusal: {before:?}"));
    assert_eq!(elicit["params"]["mode"], "url");
    assert_eq!(elicit["params"]["url"], url.as_str());
    assert_eq!(elicit["params"]["elicitationId"], request_id.as_str());

    // The client's "accept" approves nothing: the request is still pending.
    mcp.send_line(
        &json!({"jsonrpc": "2.0", "id": elicit["id"], "result": {"action": "accept"}}).to_string(),
    );
    let verify = world.cli(&["verify", &request_id]);
    assert_eq!(verify.status.code(), Some(3));

    // A human decides: the client is told.
    let approve = world.cli(&["approve", &request_id, "--yes"]);
    assert!(
        approve.status.success(),
        "{}",
        String::from_utf8_lossy(&approve.stderr)
    );
    let done = loop {
        let message = mcp.read_message();
        if message["method"] == "notifications/elicitation/complete" {
            break message;
        }
    };
    assert_eq!(done["params"]["elicitationId"], request_id.as_str());
}

#[test]
fn a_client_that_did_not_declare_it_gets_the_refusal_alone() {
    let world = world_with_page();
    let mut mcp = client(&world, json!({}));
    let (answer, before) = block_day_pack(&mut mcp);
    assert_eq!(
        answer["result"]["structuredContent"]["cajaguard"]["verdict"],
        "blocked"
    );
    assert!(
        before.iter().all(|m| m["method"] != "elicitation/create"),
        "{before:?}"
    );
}

/// Threads of the process `pid` (Linux: one entry per thread under /proc/PID/task).
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

#[test]
fn an_agent_making_many_blocked_baskets_gets_every_page_shown_but_a_bounded_number_watched() {
    let world = world_with_page();
    let mut mcp = client(&world, json!({ "elicitation": { "url": {} } }));
    let before = threads(mcp.pid());
    let baskets = 16;
    for n in 0..baskets {
        let (answer, sent) = block_day_pack(&mut mcp);
        assert_eq!(
            answer["result"]["structuredContent"]["cajaguard"]["verdict"], "blocked",
            "basket {n}: {answer}"
        );
        assert!(
            sent.iter().any(|m| m["method"] == "elicitation/create"),
            "basket {n} was not shown: {sent:?}"
        );
    }
    // Each watcher is a thread with a store connection of its own, alive for twice the approval
    // lifetime: at most 8 of them, whatever the agent does (a little slack for call threads
    // still ending).
    let after = threads(mcp.pid());
    assert!(
        after <= before + 8 + 3,
        "{after} threads after {baskets} blocked baskets, {before} before"
    );
}

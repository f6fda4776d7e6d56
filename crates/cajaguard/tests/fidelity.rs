//! Protocol fidelity (SPEC §3): nothing a forwarded message carries is lost or rewritten, the eras
//! are bridged in the envelope only, and the agent's `complete_checkout` bytes reach the shop as sent.
//! The shop here is the scripted test shop, which records every line it receives.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::*;

const CHECKOUT: &str = "gid://test/Checkout/1";

fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "0"},
    })
}

#[test]
fn tools_keep_unknown_fields_and_hidden_tools_stay_hidden() {
    let world = World::with_test_shop(json!({
        "tools": [
            {"name": "search_catalog", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "optional"}, "x-vendor": [1, 2]},
            {"name": "complete_checkout", "inputSchema": {"type": "object"}},
            {"name": "admin_refund", "inputSchema": {"type": "object"}},
        ]
    }));
    let mut mcp = world.proxy();
    let list = mcp.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    let search = tools
        .iter()
        .find(|t| t["name"] == "search_catalog")
        .unwrap();
    assert_eq!(search["execution"], json!({"taskSupport": "optional"}));
    assert_eq!(search["x-vendor"], json!([1, 2]));
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&"admin_refund"), "{names:?}");
    assert!(names.contains(&"cajaguard_status") && names.contains(&"cajaguard_approval_status"));

    let refused = mcp.call("admin_refund", json!({"order": "1"}));
    assert_eq!(refused["isError"], true);
    assert_eq!(verdict(&refused).1, "tool_not_allowed");
    // A UCP tool the shop does not offer is refused too.
    assert_eq!(
        verdict(&mcp.call("get_order", json!({}))).1,
        "tool_not_allowed"
    );
    assert!(
        !world
            .test_shop_lines()
            .iter()
            .any(|l| l.contains("admin_refund") && l.contains("tools/call"))
    );
}

#[test]
fn results_pass_unchanged_with_unknown_content_types() {
    let result = json!({
        "content": [{"type": "hologram", "frames": 3}, {"type": "text", "text": "ok"}],
        "structuredContent": {"products": [{"id": "p1", "price": 1.5e3}]},
        "x-unknown": {"nested": [true, null]},
        "_meta": {"vendor/trace": "abc"}
    });
    let world =
        World::with_test_shop(json!({ "on": { "search_catalog": [ {"result": result} ] } }));
    let mut mcp = world.proxy();
    let answer = mcp.call(
        "search_catalog",
        json!({"meta": {"ucp-agent": {"profile": AGENT}}, "catalog": {"query": "socks"}}),
    );
    assert_eq!(answer, result);
}

#[test]
fn progress_tokens_and_cancellations_survive_the_hop() {
    let world = World::with_test_shop(json!({ "on": {
        "search_catalog": [ {"progress": 2, "result": {"content": []}} ],
        "get_product": [ {"hang": true} ],
    }}));
    let mut mcp = world.proxy();
    mcp.send_line(
        &json!({"jsonrpc": "2.0", "id": "call-a", "method": "tools/call", "params": {
            "name": "search_catalog", "arguments": {"catalog": {"query": "x"}}, "_meta": {"progressToken": "tok-1"}}})
        .to_string(),
    );
    let mut progress = Vec::new();
    loop {
        let message = mcp.read_message();
        if message.get("id") == Some(&json!("call-a")) {
            break;
        }
        progress.push(message);
    }
    assert_eq!(progress.len(), 2, "{progress:?}");
    for p in &progress {
        assert_eq!(p["method"], "notifications/progress");
        assert_eq!(p["params"]["progressToken"], "tok-1");
    }

    // A hanging call, cancelled by the agent: the shop hears the cancellation for its own id.
    mcp.send_line(
        &json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": "get_product", "arguments": {}}}).to_string(),
    );
    let shop_id = wait_for(|| {
        world.test_shop_lines().iter().find_map(|line| {
            let v: Value = serde_json::from_str(line).ok()?;
            (v["params"]["name"] == "get_product").then(|| v["id"].clone())
        })
    });
    mcp.notify(
        "notifications/cancelled",
        json!({"requestId": 77, "reason": "user gave up"}),
    );
    let cancel = wait_for(|| {
        world.test_shop_lines().iter().find_map(|line| {
            let v: Value = serde_json::from_str(line).ok()?;
            (v["method"] == "notifications/cancelled").then_some(v)
        })
    });
    assert_eq!(cancel["params"]["requestId"], shop_id);
    assert_eq!(cancel["params"]["reason"], "user gave up");
    // The proxy is still serving.
    assert!(mcp.request("tools/list", json!({}))["result"]["tools"].is_array());
}

#[test]
fn batches_and_garbage_are_refused_and_the_proxy_stays_up() {
    let world = World::with_test_shop(json!({}));
    let mut mcp = world.proxy();
    mcp.send_line(r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#);
    let answer = mcp.read_message();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    mcp.send_line("{not json");
    assert_eq!(mcp.read_message()["error"]["code"], -32700);
    assert!(mcp.request("tools/list", json!({}))["result"]["tools"].is_array());
}

#[test]
fn complete_checkout_reaches_the_shop_byte_for_byte() {
    let completed = {
        let mut c = ready_checkout(CHECKOUT);
        c["status"] = json!("completed");
        c
    };
    let world = World::with_test_shop(json!({ "on": {
        "get_checkout": [ {"checkout": ready_checkout(CHECKOUT)} ],
        "complete_checkout": [ {"checkout": completed} ],
    }}));
    let mut mcp = world.proxy();
    // Odd spacing, key order and number forms that a re-encoder would change.
    let arguments = format!(
        r#"{{ "id" : "{CHECKOUT}", "checkout": {{"signals": {{"score": 1.0, "big": 12345678901234567890}}, "payment": {{"instruments": [{{"type":"card","id":"pi_1","handler_id":"fixture_test_handler","credential":{{"type":"token","token":"{TEST_TOKEN}"}}}}]}}}}, "meta": {{"idempotency-key": "{}", "ucp-agent": {{"profile": "{AGENT}"}}}} }}"#,
        uuid()
    );
    mcp.send_line(&format!(r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"complete_checkout","arguments":{arguments}}}}}"#));
    let answer = mcp.read_message();
    assert_eq!(
        answer["result"]["_meta"]["cajaguard"]["verdict"], "allow",
        "{answer}"
    );
    assert_eq!(answer["result"]["structuredContent"]["status"], "completed");
    let forwarded = world
        .test_shop_lines()
        .into_iter()
        .find(|l| l.contains(r#""name":"complete_checkout""#))
        .expect("the complete call reached the shop");
    assert!(
        forwarded.contains(&arguments),
        "arguments were re-encoded:\n{forwarded}\nvs\n{arguments}"
    );
}

#[test]
fn a_duplicate_key_in_a_gated_call_is_refused() {
    let world = World::with_test_shop(
        json!({ "on": { "get_checkout": [ {"checkout": ready_checkout(CHECKOUT)} ] } }),
    );
    let mut mcp = world.proxy();
    let arguments = format!(
        r#"{{"id":"{CHECKOUT}","meta":{{"ucp-agent":{{"profile":"{AGENT}"}},"idempotency-key":"{}"}},"checkout":{{"payment":{{"instruments":[{{"id":"pi_1","handler_id":"fixture_test_handler","type":"card","credential":{{"type":"token","token":"{TEST_TOKEN}"}}}}]}},"payment":{{}}}}}}"#,
        uuid()
    );
    mcp.send_line(&format!(r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"complete_checkout","arguments":{arguments}}}}}"#));
    let answer = mcp.read_message();
    assert_eq!(verdict(&answer["result"]).1, "bad_request", "{answer}");
    assert!(
        !world
            .test_shop_lines()
            .iter()
            .any(|l| l.contains("complete_checkout") || l.contains("get_checkout"))
    );
}

#[test]
fn modern_agents_are_served_statelessly_and_the_envelope_stays_on_our_side() {
    let world = World::with_test_shop(
        json!({ "on": { "search_catalog": [ {"result": {"content": []}} ] } }),
    );
    let mut mcp = world.proxy_uninitialized();
    let discover = mcp.request("server/discover", json!({"_meta": modern_meta()}));
    assert_eq!(
        discover["result"]["supportedVersions"],
        json!(["2026-07-28"]),
        "{discover}"
    );
    assert_eq!(discover["result"]["resultType"], "complete");

    let mut meta = modern_meta();
    meta["progressToken"] = json!(5);
    let list = mcp.request("tools/list", json!({"_meta": meta.clone()}));
    assert_eq!(list["result"]["resultType"], "complete");
    assert!(
        list["result"]["ttlMs"].is_u64() && list["result"]["cacheScope"].is_string(),
        "{list}"
    );

    let call = mcp.request(
        "tools/call",
        json!({"name": "search_catalog", "arguments": {"catalog": {}}, "_meta": meta}),
    );
    assert_eq!(call["result"]["resultType"], "complete", "{call}");
    let status = mcp.request(
        "tools/call",
        json!({"name": "cajaguard_status", "arguments": {}, "_meta": modern_meta()}),
    );
    assert_eq!(status["result"]["resultType"], "complete");
    assert_eq!(status["result"]["structuredContent"]["mode"], "test");

    // The legacy shop got the progress token but not the modern envelope.
    let forwarded: Value = world
        .test_shop_lines()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["params"]["name"] == "search_catalog")
        .unwrap();
    assert_eq!(forwarded["params"]["_meta"], json!({"progressToken": 5}));

    let unknown = mcp.request("tools/list", json!({"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": {}}}));
    assert_eq!(unknown["error"]["code"], -32022, "{unknown}");
    let no_caps = mcp.request(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
    );
    assert_eq!(no_caps["error"]["code"], -32602, "{no_caps}");
}

#[test]
fn older_agents_get_the_version_they_asked_for() {
    let world = World::with_test_shop(json!({}));
    let mut mcp = world.proxy_uninitialized();
    for version in ["2025-06-18", "2025-11-25"] {
        let init = mcp.request("initialize", json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}));
        assert_eq!(init["result"]["protocolVersion"], version);
        assert!(
            init["result"].get("resultType").is_none(),
            "no modern fields for a legacy agent: {init}"
        );
    }
}

fn wait_for<T>(mut probe: impl FnMut() -> Option<T>) -> T {
    for _ in 0..200 {
        if let Some(found) = probe() {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("timed out waiting for the shop");
}

//! The tripwire's scope through a real `cajaguard mcp` (SPEC §5; regression, issue 13): every
//! must-refuse form of the committed corpus (`crates/cajaguard-core/tests/corpus/tripwire.jsonl`),
//! put in `_meta`, in the arguments and in keys, on several tools, is refused before the shop; the
//! fixture shop's own record (`calls.jsonl`) shows none of them arrived. A duplicate key on a call
//! that is not gated is refused too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::*;

const CORPUS: &str = include_str!("../../cajaguard-core/tests/corpus/tripwire.jsonl");

const TOOLS: &[&str] = &[
    "search_catalog",
    "get_product",
    "create_checkout",
    "update_checkout",
    "get_checkout",
    "complete_checkout",
    "create_cart",
];

fn refusal_reason(answer: &Value) -> String {
    let result = &answer["result"];
    assert_eq!(result["isError"], true, "not refused: {answer}");
    result["structuredContent"]["cajaguard"]["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("no reason: {answer}"))
        .to_owned()
}

/// Clean arguments for `tool`, so that only the planted form can be refused.
fn base_arguments(tool: &str) -> Value {
    match tool {
        "complete_checkout" => Mcp::complete_arguments("gid://fixture/Checkout/1", &uuid()),
        "search_catalog" => json!({"query": "socks"}),
        _ => json!({"id": "gid://fixture/Checkout/1", "meta": {"idempotency-key": uuid()}}),
    }
}

#[test]
fn every_corpus_form_is_refused_before_the_shop_wherever_it_is_put() {
    let world = World::new();
    let mut mcp = world.proxy();
    let before = world.shop_calls().len();
    let mut sent = 0;
    for (n, line) in CORPUS.lines().enumerate() {
        let case: Value = serde_json::from_str(line).unwrap();
        if case["expect"] != "refuse" {
            continue;
        }
        let form = case["form"].as_str().unwrap();
        // A planted value: a string or a structure; the instrument cases are whole arguments.
        let planted = case.get("text").or(case.get("json")).cloned();
        let mut placements: Vec<(&str, &str, Value)> = Vec::new();
        match planted {
            Some(planted) => {
                let tool = TOOLS[n % TOOLS.len()];
                let other = TOOLS[(n + 3) % TOOLS.len()];
                let mut args = base_arguments(tool);
                args["note"] = planted.clone();
                placements.push(("arguments", tool, json!({"name": tool, "arguments": args})));
                placements.push((
                    "_meta",
                    other,
                    json!({"name": other, "arguments": base_arguments(other), "_meta": {"progressToken": 1, "x": planted}}),
                ));
                if let Some(text) = planted.as_str() {
                    let mut args = base_arguments(tool);
                    args[text] = json!("value");
                    placements.push((
                        "a key in the arguments",
                        tool,
                        json!({"name": tool, "arguments": args}),
                    ));
                    let mut meta = serde_json::Map::new();
                    meta.insert(text.to_owned(), json!(true));
                    placements.push((
                        "a key in _meta",
                        other,
                        json!({"name": other, "arguments": base_arguments(other), "_meta": meta}),
                    ));
                }
            }
            None => {
                for tool in ["create_checkout", "update_checkout", "complete_checkout"] {
                    placements.push((
                        "arguments",
                        tool,
                        json!({"name": tool, "arguments": case["arguments"]}),
                    ));
                }
            }
        }
        for (place, tool, params) in placements {
            let answer = mcp.request("tools/call", params);
            assert_eq!(
                refusal_reason(&answer),
                "test_mode_credential",
                "{form} in {place} of {tool}: {answer}"
            );
            sent += 1;
        }
    }
    assert!(sent > 400, "only {sent} calls: the corpus lost its cases");
    assert_eq!(
        world.shop_calls().len(),
        before,
        "a refused form reached the shop"
    );
    // The record does see what is forwarded.
    mcp.call("search_catalog", json!({"query": "socks"}));
    assert_eq!(world.shop_calls().len(), before + 1);
}

/// A duplicate key on a call that is not gated: the shop's parser may keep the first copy (the
/// card number), the tripwire reads the last. Refused, never forwarded.
#[test]
fn a_duplicate_key_on_any_forwarded_call_is_refused() {
    let world = World::new();
    let mut mcp = world.proxy();
    let before = world.shop_calls().len();
    for (id, params) in [
        (
            1,
            r#"{"name":"search_catalog","arguments":{"query":"4111 1111 1111 1111","query":"socks"}}"#,
        ),
        (
            2,
            r#"{"name":"get_product","arguments":{"id":"gid://fixture/Product/trail-socks"},"_meta":{"a":1,"a":2}}"#,
        ),
        (
            3,
            r#"{"name":"search_catalog","name":"search_catalog","arguments":{"query":"socks"}}"#,
        ),
        // Keys a case-insensitive parser (Go's encoding/json: last copy wins) takes for one: to
        // such a shop the first is a payment that never met the gate, the second reads `Id`.
        (
            4,
            r#"{"name":"search_catalog","NAME":"complete_checkout","arguments":{"query":"socks"}}"#,
        ),
        (
            5,
            r#"{"name":"get_checkout","arguments":{"id":"gid://fixture/Checkout/1","Id":"gid://fixture/Checkout/2"}}"#,
        ),
        (
            6,
            r#"{"name":"search_catalog","arguments":{"query":"socks"},"argumentſ":{"query":"4111 1111 1111 1111"}}"#,
        ),
        // A lone key such a parser reads as `arguments` or `name`: nothing here read it. (On the
        // fast path, `get_checkout`, and on the ordinary one.)
        (
            7,
            r#"{"name":"get_checkout","Arguments":{"id":"gid://fixture/Checkout/1","meta":{}}}"#,
        ),
        (
            8,
            r#"{"name":"search_catalog","ARGUMENTS":{"query":"socks"}}"#,
        ),
    ] {
        mcp.send_line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#
        ));
        let answer = mcp.answer_to(id);
        assert_eq!(refusal_reason(&answer), "bad_request", "{params}: {answer}");
    }
    assert_eq!(world.shop_calls().len(), before);
}

/// Red-team finding: a card number written as a number with a fraction or an exponent was parsed
/// as an `f64`, rounded past 2^53 to digits that fail Luhn, and forwarded as the agent wrote it:
/// a shop reading numbers exactly got the card. It is read from the text now.
#[test]
fn a_card_written_as_a_decimal_or_an_exponent_is_refused_before_the_shop() {
    let world = World::new();
    let mut mcp = world.proxy();
    let before = world.shop_calls().len();
    for (id, params) in [
        (
            1,
            r#"{"name":"search_catalog","arguments":{"query":"socks","pan":4000000000000000006.0}}"#,
        ),
        (
            2,
            r#"{"name":"search_catalog","arguments":{"query":"socks"},"_meta":{"n":4000000000000000006e0}}"#,
        ),
        (
            3,
            r#"{"name":"get_checkout","arguments":{"id":"gid://fixture/Checkout/1","meta":{"x":[9792000000000003.0]}}}"#,
        ),
    ] {
        mcp.send_line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#
        ));
        let answer = mcp.answer_to(id);
        assert_eq!(
            refusal_reason(&answer),
            "test_mode_credential",
            "{params}: {answer}"
        );
    }
    assert_eq!(world.shop_calls().len(), before);
}

/// A cancellation is forwarded to the shop (with the proxy's request id), so its `params` are
/// scanned like a call's: one whose reason holds a card number is dropped, a clean one goes.
#[test]
fn a_cancellation_carrying_a_card_number_is_not_forwarded() {
    let world = World::with_test_shop(json!({"on": {"search_catalog": [{"hang": true}]}}));
    let mut mcp = world.proxy();
    let id = mcp.send_request(
        "tools/call",
        json!({"name": "search_catalog", "arguments": {"query": "socks"}}),
    );
    world.wait_for_test_shop_line("search_catalog");
    mcp.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "wrong card 4111 1111 1111 1111, sorry"}),
    );
    mcp.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "the user left"}),
    );
    // The clean one was sent after the other on the same pipe: once it is there, the other would be.
    let cancellations = || -> Vec<String> {
        world
            .test_shop_lines()
            .into_iter()
            .filter(|l| l.contains("notifications/cancelled"))
            .collect()
    };
    world.wait_for_test_shop_line("notifications/cancelled");
    let seen = cancellations();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].contains("the user left"), "{seen:?}");
    assert!(!seen.iter().any(|l| l.contains("4111")), "{seen:?}");
}

/// A call cancelled twice is cancelled at the shop once (each forward may cost the shop link a
/// thread and a connection); a payment's cancellation is never forwarded: a shop that then
/// answered with an error may have charged, and the error would read as its refusal. The
/// payment runs to its answer and is settled from it.
#[test]
fn cancellations_reach_the_shop_once_and_never_for_a_payment() {
    let ready = ready_checkout("gid://fixture/Checkout/1");
    let mut completed = ready.clone();
    completed["status"] = json!("completed");
    let world = World::with_test_shop(json!({"on": {
        "search_catalog": [{"hang": true}],
        "get_checkout": [{"checkout": ready}],
        "complete_checkout": [{"checkout": completed, "delay_ms": 800}],
    }}));
    let mut mcp = world.proxy();
    let search = mcp.send_request(
        "tools/call",
        json!({"name": "search_catalog", "arguments": {"query": "socks"}}),
    );
    world.wait_for_test_shop_line("search_catalog");
    for _ in 0..3 {
        mcp.notify("notifications/cancelled", json!({"requestId": search}));
    }
    let payment = mcp.send_request(
        "tools/call",
        json!({"name": "complete_checkout", "arguments": Mcp::complete_arguments("gid://fixture/Checkout/1", &uuid())}),
    );
    world.wait_for_test_shop_line("complete_checkout");
    mcp.notify("notifications/cancelled", json!({"requestId": payment}));
    // The payment's answer comes 0.8 s later, and is settled.
    settled_within_10_s(&world, (2400, 0));
    let cancellations: Vec<String> = world
        .test_shop_lines()
        .into_iter()
        .filter(|l| l.contains("notifications/cancelled"))
        .collect();
    assert_eq!(cancellations.len(), 1, "{cancellations:?}");
}

/// Red-team finding: a second call reusing the id of a payment in flight replaced the payment's
/// state, so a cancellation naming that id was forwarded to the shop as the payment's. A call
/// whose id is still in flight is refused now, and the payment is never cancelled at the shop.
#[test]
fn a_call_reusing_a_payments_id_in_flight_is_refused_and_cannot_cancel_it() {
    let ready = ready_checkout("gid://fixture/Checkout/1");
    let mut completed = ready.clone();
    completed["status"] = json!("completed");
    let world = World::with_test_shop(json!({"on": {
        "get_checkout": [{"checkout": ready}],
        "complete_checkout": [{"checkout": completed, "delay_ms": 800}],
    }}));
    let mut mcp = world.proxy();
    let arguments = Mcp::complete_arguments("gid://fixture/Checkout/1", &uuid());
    mcp.send_line(
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "complete_checkout", "arguments": arguments}})
        .to_string(),
    );
    world.wait_for_test_shop_line("complete_checkout");
    mcp.send_line(
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_catalog","arguments":{"query":"socks"}}}"#,
    );
    let refused = mcp.answer_to(7);
    assert_eq!(refused["error"]["code"], json!(-32600), "{refused}");
    assert!(refused.to_string().contains("still in flight"), "{refused}");
    mcp.notify("notifications/cancelled", json!({"requestId": 7}));
    settled_within_10_s(&world, (2400, 0));
    let lines = world.test_shop_lines();
    assert!(
        !lines.iter().any(|l| l.contains("notifications/cancelled")),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("search_catalog")),
        "{lines:?}"
    );
}

/// Waits until the store counts `spend` (settled, in flight) in USD, for at most 10 s.
fn settled_within_10_s(world: &World, spend: (i64, i64)) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while usd_spend(world) != spend {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            usd_spend(world)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

//! SPEC §9 behaviours of the fixture shop, run as a real child process over stdio.
//! One idea (the shop's observable behaviour) in one file, like SPEC §9 itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/shop_process.rs"]
mod shop_process;

use serde_json::{Value, json};
use shop_process::*;

fn checkout(shop: &mut Shop, id: &str, qty: u64) -> String {
    let c = shop.ok(
        "create_checkout",
        json!({"meta": meta(), "checkout": {"line_items": [line(id, qty)]}}),
    );
    c["id"].as_str().unwrap().to_owned()
}

#[test]
fn catalog_is_fixed_and_searchable_case_insensitively() {
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());
    let all = shop.ok(
        "search_catalog",
        json!({"meta": meta(), "catalog": {"query": ""}}),
    );
    let mut got: Vec<(String, String, String, Value)> = all["products"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let v = &p["variants"][0];
            (
                p["metadata"]["merchant"].as_str().unwrap().to_owned(),
                p["title"].as_str().unwrap().to_owned(),
                v["price"]["currency"].as_str().unwrap().to_owned(),
                v["price"]["amount"].clone(),
            )
        })
        .collect();
    got.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let want = [
        ("demo-outfitters.example", "Day pack", "USD", json!(8900)),
        ("demo-outfitters.example", "Down parka", "USD", json!(21900)),
        ("demo-outfitters.example", "Rain shell", "USD", json!(4500)),
        ("demo-outfitters.example", "Trail socks", "USD", json!(1200)),
        ("elsewhere-goods.example", "Camp stove", "USD", json!(7900)),
        ("sloppy-units.example", "Water bottle", "USD", json!(49.99)),
        ("tokyo-tea.example", "Sencha tin", "JPY", json!(1800)),
        ("tokyo-tea.example", "Tea set", "JPY", json!(9800)),
    ];
    let want: Vec<(String, String, String, Value)> = want
        .iter()
        .map(|(m, t, c, a)| (m.to_string(), t.to_string(), c.to_string(), a.clone()))
        .collect();
    assert_eq!(got, want);

    let socks = shop.ok(
        "search_catalog",
        json!({"meta": meta(), "catalog": {"query": "tRaIl SoCkS"}}),
    );
    assert_eq!(socks["products"].as_array().unwrap().len(), 1);
    assert_eq!(socks["products"][0]["id"], SOCKS);
    let none = shop.ok(
        "search_catalog",
        json!({"meta": meta(), "catalog": {"query": "zebra"}}),
    );
    assert_eq!(none["products"], json!([]));
    let product = shop.ok(
        "get_product",
        json!({"meta": meta(), "catalog": {"id": TEA_SET}}),
    );
    assert_eq!(product["product"]["title"], "Tea set");
    let looked = shop.ok(
        "lookup_catalog",
        json!({"meta": meta(), "catalog": {"ids": [SOCKS, TEA_SET]}}),
    );
    assert_eq!(looked["products"].as_array().unwrap().len(), 2);
}

#[test]
fn checkout_shape_ids_urls_and_totals() {
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());
    let c = shop.ok(
        "create_checkout",
        json!({"meta": meta(), "checkout": {"line_items": [line(SOCKS, 2)]}}),
    );
    assert_eq!(c["id"], "gid://fixture/Checkout/1");
    assert_eq!(c["status"], "ready_for_complete");
    assert_eq!(c["currency"], "USD");
    assert_eq!(
        c["continue_url"],
        "https://demo-outfitters.example/checkouts/1"
    );
    for link in c["links"].as_array().unwrap() {
        assert!(
            link["url"]
                .as_str()
                .unwrap()
                .starts_with("https://demo-outfitters.example/")
        );
    }
    let totals = c["totals"].as_array().unwrap();
    assert_eq!(totals.iter().filter(|t| t["type"] == "subtotal").count(), 1);
    assert_eq!(totals.iter().filter(|t| t["type"] == "total").count(), 1);
    assert_eq!(
        totals.iter().find(|t| t["type"] == "total").unwrap()["amount"],
        json!(2400)
    );
    assert_eq!(c["line_items"][0]["item"]["price"], json!(1200));
    let jpy = shop.ok(
        "create_checkout",
        json!({"meta": meta(), "checkout": {"line_items": [line(TEA_SET, 1)]}}),
    );
    assert_eq!(jpy["id"], "gid://fixture/Checkout/2");
    assert_eq!(jpy["currency"], "JPY");
    assert_eq!(jpy["totals"][1]["amount"], json!(9800));
    assert_eq!(jpy["continue_url"], "https://tokyo-tea.example/checkouts/2");
}

#[test]
fn sloppy_units_shop_reports_major_units() {
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());
    let c = shop.ok(
        "create_checkout",
        json!({"meta": meta(), "checkout": {"line_items": [line(BOTTLE, 1)]}}),
    );
    assert_eq!(
        c["continue_url"],
        "https://sloppy-units.example/checkouts/1"
    );
    let total = c["totals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "total")
        .unwrap()["amount"]
        .clone();
    assert_eq!(total, json!(49.99));
    assert!(total.is_f64());
    let got = shop.ok("get_checkout", json!({"meta": meta(), "id": c["id"]}));
    assert_eq!(got["line_items"][0]["item"]["price"], json!(49.99));
}

#[test]
fn decline_token_keeps_the_checkout_ready() {
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());
    let id = checkout(&mut shop, SOCKS, 1);
    let declined = shop.fails(
        "complete_checkout",
        complete_args(&uuid(1), &id, "cg_test_decline_0001"),
    );
    assert_eq!(code(&declined), "payment_declined");
    assert_eq!(declined["status"], "ready_for_complete");
    let got = shop.ok("get_checkout", json!({"meta": meta(), "id": id}));
    assert_eq!(got["status"], "ready_for_complete");
    assert!(got.get("order").is_none());
    // A good token afterwards (new key) completes it.
    let done = shop.ok(
        "complete_checkout",
        complete_args(&uuid(2), &id, "cg_test_good_token_1"),
    );
    assert_eq!(done["status"], "completed");
}

#[test]
fn tokens_and_handlers_outside_the_test_rules_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());
    let id = checkout(&mut shop, SOCKS, 1);
    for (n, token) in ["sk_live_abc12345", "cg_test_short", "cg_test_bad-chars!!"]
        .iter()
        .enumerate()
    {
        let r = shop.fails(
            "complete_checkout",
            complete_args(&uuid(10 + n as u32), &id, token),
        );
        assert_eq!(code(&r), "payment_failed", "{token}");
    }
    let mut args = complete_args(&uuid(20), &id, "cg_test_demo_token_01");
    args["checkout"]["payment"]["instruments"][0]["handler_id"] = json!("com.example.unknown");
    assert_eq!(
        code(&shop.fails("complete_checkout", args)),
        "payment_handler_unsupported"
    );
    let mut args = complete_args(&uuid(21), &id, "cg_test_demo_token_01");
    args["checkout"]["payment"]["instruments"][0]["handler_id"] = json!("com.shopify.shop_pay");
    assert_eq!(shop.ok("complete_checkout", args)["status"], "completed");
}

#[test]
fn idempotent_replay_and_key_reuse_with_another_body() {
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());
    let id = checkout(&mut shop, SOCKS, 2);
    let args = complete_args(&uuid(1), &id, "cg_test_demo_token_01");
    let first = shop.call("complete_checkout", args.clone());
    let again = shop.call("complete_checkout", args.clone());
    assert_eq!(
        first["result"], again["result"],
        "same key, same body: same answer"
    );
    assert_eq!(first["result"]["structuredContent"]["status"], "completed");
    // Same key, other body: JSON-RPC error -32000.
    let other = shop.call(
        "complete_checkout",
        complete_args(&uuid(1), &id, "cg_test_other_token_1"),
    );
    assert_eq!(other["error"]["code"], json!(-32000), "{other}");
    // Replaying a decline replays the decline.
    let id2 = checkout(&mut shop, SOCKS, 1);
    let decline = complete_args(&uuid(2), &id2, "cg_test_decline_0001");
    let d1 = shop.call("complete_checkout", decline.clone());
    let d2 = shop.call("complete_checkout", decline);
    assert_eq!(d1["result"], d2["result"]);
    assert_eq!(d1["result"]["isError"], json!(true));
    // The key is also honoured across processes.
    drop(shop);
    let mut shop = Shop::start(dir.path());
    let third = shop.call("complete_checkout", args);
    assert_eq!(first["result"], third["result"]);
}

#[test]
fn a_checkout_completes_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());
    let id = checkout(&mut shop, SOCKS, 1);
    let done = shop.ok(
        "complete_checkout",
        complete_args(&uuid(1), &id, "cg_test_demo_token_01"),
    );
    let order_id = done["order"]["id"].as_str().unwrap().to_owned();
    let again = shop.fails(
        "complete_checkout",
        complete_args(&uuid(2), &id, "cg_test_demo_token_01"),
    );
    assert_eq!(code(&again), "checkout_completed");
    assert_eq!(again["ucp"]["status"], "error");
    let order = shop.ok("get_order", json!({"meta": meta(), "id": order_id}));
    assert_eq!(order["checkout_id"], json!(id));
    assert_eq!(order["totals"][1]["amount"], json!(1200));
    // Nor can it be updated or canceled afterwards.
    let upd = shop.fails(
        "update_checkout",
        json!({"meta": meta(), "id": id, "checkout": {"line_items": [line(SOCKS, 5)]}}),
    );
    assert_eq!(code(&upd), "checkout_completed");
}

#[test]
fn state_is_shared_by_separate_processes() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = Shop::start(dir.path());
    let mut b = Shop::start(dir.path());
    let id = checkout(&mut a, SOCKS, 2);
    let seen = b.ok("get_checkout", json!({"meta": meta(), "id": id}));
    assert_eq!(seen["status"], "ready_for_complete");
    b.ok(
        "complete_checkout",
        complete_args(&uuid(1), &id, "cg_test_demo_token_01"),
    );
    let after = a.ok("get_checkout", json!({"meta": meta(), "id": id}));
    assert_eq!(after["status"], "completed");
    // Ids keep counting across processes.
    assert_eq!(checkout(&mut b, SOCKS, 1), "gid://fixture/Checkout/2");
    assert_eq!(checkout(&mut a, SOCKS, 1), "gid://fixture/Checkout/3");
}

#[test]
fn concurrent_processes_never_corrupt_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut shop = Shop::start(&path);
                (0..10)
                    .map(|_| checkout(&mut shop, SOCKS, 1))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut ids: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 40, "every checkout got its own id");
    let mut shop = Shop::start(&path);
    for id in &ids {
        shop.ok("get_checkout", json!({"meta": meta(), "id": id}));
    }
    let calls = shop.calls();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c["tool"] == "create_checkout")
            .count(),
        40
    );
}

#[test]
fn every_call_is_recorded_in_calls_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());
    let args = json!({"meta": meta(), "checkout": {"line_items": [line(SOCKS, 2)]}, "zz_extra": {"b": 1, "a": [1.5, "x"]}});
    shop.ok("create_checkout", args.clone());
    shop.fails("get_checkout", json!({"id": 7}));
    let complete = complete_args(
        &uuid(1),
        "gid://fixture/Checkout/1",
        "cg_test_demo_token_01",
    );
    shop.ok("complete_checkout", complete.clone());
    shop.call("complete_checkout", complete.clone()); // replay, recorded too
    let calls = shop.calls();
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[0]["tool"], "create_checkout");
    assert_eq!(calls[0]["arguments"], args);
    // Key order as received.
    let raw = std::fs::read_to_string(dir.path().join("calls.jsonl")).unwrap();
    let first_line = raw.lines().next().unwrap();
    assert!(
        first_line.starts_with(r#"{"tool":"create_checkout","arguments":{"meta":"#),
        "{first_line}"
    );
    assert!(
        first_line.contains(r#""zz_extra":{"b":1,"a":[1.5,"x"]}"#),
        "{first_line}"
    );
    assert_eq!(calls[1]["arguments"], json!({"id": 7}));
    assert_eq!(calls[2]["arguments"], complete);
    assert_eq!(calls[3]["tool"], "complete_checkout");
    let mut last = 0;
    for call in &calls {
        let at = call["at"].as_u64().unwrap();
        assert!(at >= last && at > 1_600_000_000_000);
        last = at;
        assert_eq!(call.as_object().unwrap().len(), 3);
    }
    let sessions = read_jsonl(&dir.path().join("sessions.jsonl"));
    assert_eq!(
        sessions[0]["protocol_version"],
        json!(shop.protocol_version)
    );
}

#[test]
fn malformed_calls_get_clear_ucp_errors_and_the_server_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());
    let id = checkout(&mut shop, SOCKS, 1);
    let big = 1_000_000_000_000u64;
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "create_checkout",
            json!({"checkout": {"line_items": [line(SOCKS, 1)]}}),
            "invalid_request",
        ),
        (
            "create_checkout",
            json!({"meta": "nope", "checkout": {}}),
            "invalid_request",
        ),
        (
            "create_checkout",
            json!({"meta": {"ucp-agent": {}}, "checkout": {}}),
            "invalid_request",
        ),
        (
            "create_checkout",
            json!({"meta": meta(), "checkout": "x"}),
            "invalid_request",
        ),
        (
            "create_checkout",
            json!({"meta": meta(), "checkout": {"line_items": {}}}),
            "invalid_request",
        ),
        (
            "create_checkout",
            json!({"meta": meta(), "checkout": {"line_items": []}}),
            "invalid_request",
        ),
        (
            "create_checkout",
            json!({"meta": meta(), "checkout": {"line_items": [{"item": {"id": 5}, "quantity": 1}]}}),
            "invalid_request",
        ),
        (
            "create_checkout",
            json!({"meta": meta(), "checkout": {"line_items": [line("gid://fixture/Product/unicorn", 1)]}}),
            "not_found",
        ),
        (
            "create_checkout",
            json!({"meta": meta(), "checkout": {"line_items": [line(SOCKS, 1), line(TEA_SET, 1)]}}),
            "mixed_merchants",
        ),
        (
            "create_checkout",
            json!({"meta": meta(), "checkout": {"line_items": [line(SOCKS, 0)]}}),
            "invalid_quantity",
        ),
        (
            "create_checkout",
            json!({"meta": meta(), "checkout": {"line_items": [line(SOCKS, big)]}}),
            "invalid_quantity",
        ),
        (
            "create_checkout",
            json!({"meta": meta(), "checkout": {"line_items": [{"item": {"id": SOCKS}, "quantity": "2"}]}}),
            "invalid_quantity",
        ),
        (
            "create_checkout",
            json!({"meta": meta(), "checkout": {"line_items": [{"item": {"id": SOCKS}, "quantity": 1.5}]}}),
            "invalid_quantity",
        ),
        (
            "create_checkout",
            json!({"meta": meta(), "checkout": {"line_items": [{"item": {"id": SOCKS}, "quantity": -1}]}}),
            "invalid_quantity",
        ),
        (
            "get_checkout",
            json!({"meta": meta(), "id": "gid://fixture/Checkout/999"}),
            "not_found",
        ),
        (
            "get_checkout",
            json!({"meta": meta(), "id": 1}),
            "invalid_request",
        ),
        ("get_checkout", json!({"meta": meta()}), "invalid_request"),
        (
            "update_checkout",
            json!({"meta": meta(), "id": "gid://fixture/Checkout/999", "checkout": {"line_items": [line(SOCKS, 1)]}}),
            "not_found",
        ),
        (
            "update_checkout",
            json!({"meta": meta(), "id": id, "checkout": {"line_items": [line(SOCKS, 1)], "payment": {"instruments": [{"id": 1}]}}}),
            "invalid_request",
        ),
        (
            "complete_checkout",
            json!({"meta": meta(), "id": id, "checkout": {"payment": {}}}),
            "invalid_request",
        ),
        (
            "complete_checkout",
            json!({"meta": meta_key(&uuid(1)), "id": id, "checkout": {}}),
            "invalid_request",
        ),
        (
            "complete_checkout",
            json!({"meta": meta_key(&uuid(2)), "id": id, "checkout": {"payment": {"instruments": []}}}),
            "invalid_request",
        ),
        (
            "complete_checkout",
            json!({"meta": meta_key(&uuid(3)), "id": "gid://fixture/Checkout/999", "checkout": {"payment": {}}}),
            "not_found",
        ),
        (
            "complete_checkout",
            json!({"meta": {"ucp-agent": {"profile": "x"}, "idempotency-key": 5}, "id": id, "checkout": {}}),
            "invalid_request",
        ),
        (
            "cancel_checkout",
            json!({"meta": meta(), "id": id}),
            "invalid_request",
        ),
        (
            "search_catalog",
            json!({"meta": meta(), "catalog": {"query": 42}}),
            "invalid_request",
        ),
        ("search_catalog", json!({"meta": meta()}), "invalid_request"),
        (
            "lookup_catalog",
            json!({"meta": meta(), "catalog": {"ids": []}}),
            "invalid_request",
        ),
        (
            "lookup_catalog",
            json!({"meta": meta(), "catalog": {"ids": [1]}}),
            "invalid_request",
        ),
        (
            "get_product",
            json!({"meta": meta(), "catalog": {"id": "nope"}}),
            "not_found",
        ),
        (
            "get_order",
            json!({"meta": meta(), "id": "nope"}),
            "not_found",
        ),
        (
            "create_cart",
            json!({"meta": meta(), "cart": {"line_items": [line(SOCKS, 1), line(TEA_SET, 1)]}}),
            "mixed_merchants",
        ),
        (
            "get_cart",
            json!({"meta": meta(), "id": "nope"}),
            "not_found",
        ),
        (
            "cancel_cart",
            json!({"meta": meta(), "id": "nope"}),
            "invalid_request",
        ),
    ];
    for (tool, args, want) in cases {
        let r = shop.fails(tool, args.clone());
        assert_eq!(r["ucp"]["status"], "error", "{tool}({args}): {r}");
        assert_eq!(code(&r), want, "{tool}({args}): {r}");
        assert!(!r["messages"][0]["content"].as_str().unwrap().is_empty());
        // The server still works after each one.
        shop.ok("get_checkout", json!({"meta": meta(), "id": id}));
    }
    // No arguments at all, an unknown tool, and garbage on the wire.
    let r = shop.request("tools/call", json!({"name": "get_checkout"}));
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    let r = shop.call("pay_now", json!({}));
    assert!(r.get("error").is_some(), "{r}");
    shop.send_raw("{not json");
    shop.send_raw(r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":5}}"#);
    let got = shop.ok("get_checkout", json!({"meta": meta(), "id": id}));
    assert_eq!(got["status"], "ready_for_complete");
    // Nothing malformed changed the state.
    assert_eq!(checkout(&mut shop, SOCKS, 1), "gid://fixture/Checkout/2");
}

#[test]
fn update_is_a_full_replacement_and_carts_work() {
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());
    let id = checkout(&mut shop, SOCKS, 5);
    let upd = shop.ok("update_checkout", json!({"meta": meta(), "id": id,
        "checkout": {"line_items": [line(SOCKS, 8)], "payment": {"instruments": [instrument("cg_test_demo_token_01")]}}}));
    assert_eq!(upd["totals"][1]["amount"], json!(9600));
    assert_eq!(upd["status"], "ready_for_complete");
    assert!(
        upd["payment"]["instruments"][0].get("credential").is_none(),
        "tokens are never echoed"
    );
    let cart = shop.ok(
        "create_cart",
        json!({"meta": meta(), "cart": {"line_items": [line(TEA_SET, 2)]}}),
    );
    assert_eq!(cart["id"], "gid://fixture/Cart/1");
    assert_eq!(cart["totals"][1]["amount"], json!(19600));
    let from_cart = shop.ok(
        "create_checkout",
        json!({"meta": meta(), "checkout": {"cart_id": "gid://fixture/Cart/1"}}),
    );
    assert_eq!(from_cart["currency"], "JPY");
    shop.ok(
        "cancel_cart",
        json!({"meta": meta_key(&uuid(1)), "id": "gid://fixture/Cart/1"}),
    );
    assert_eq!(
        code(&shop.fails(
            "get_cart",
            json!({"meta": meta(), "id": "gid://fixture/Cart/1"})
        )),
        "not_found"
    );
    let canceled = shop.ok(
        "cancel_checkout",
        json!({"meta": meta_key(&uuid(2)), "id": id}),
    );
    assert_eq!(canceled["status"], "canceled");
    let r = shop.fails(
        "complete_checkout",
        complete_args(&uuid(3), &id, "cg_test_demo_token_01"),
    );
    assert_eq!(code(&r), "checkout_canceled");
}

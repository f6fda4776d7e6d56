//! Every tool's arguments and results checked against the pinned UCP schemas (read from
//! `shared/ucp`, never copied), including the `ucp_request` annotations for create, update and
//! complete and the `ucp_response` ones for results.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/shop_process.rs"]
mod shop_process;
#[path = "support/ucp_schemas.rs"]
mod ucp_schemas;

use serde_json::{Value, json};
use shop_process::*;
use ucp_schemas::UcpSchemas;

/// Calls a tool, checking the request and the answer (success or UCP error) against the schemas.
fn checked(shop: &mut Shop, schemas: &UcpSchemas, tool: &str, args: Value) -> (Value, bool) {
    if let Err(errors) = schemas.check_request(tool, &args) {
        panic!("{tool} request {args} does not conform: {errors:#?}");
    }
    let response = shop.call(tool, args.clone());
    let result = &response["result"];
    let structured = result["structuredContent"].clone();
    if let Err(errors) = schemas.check_result(tool, &structured) {
        panic!("{tool} result {structured} does not conform: {errors:#?}");
    }
    (structured, result["isError"] == json!(true))
}

#[test]
fn every_tool_conforms_to_the_pinned_schemas() {
    let schemas = UcpSchemas::load();
    let mut names = schemas.method_names();
    names.sort();
    let mut listed: Vec<String> = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());

    let tools = shop.request("tools/list", json!({}));
    for tool in tools["result"]["tools"].as_array().unwrap() {
        listed.push(tool["name"].as_str().unwrap().to_owned());
        let schema = &tool["inputSchema"];
        assert_eq!(schema["type"], "object");
        assert!(schema["properties"]["meta"].is_object(), "{tool}");
    }
    listed.sort();
    assert_eq!(
        listed, names,
        "tools/list must offer exactly the openrpc methods"
    );

    let mut seen = std::collections::BTreeSet::new();
    let mut run = |shop: &mut Shop, tool: &str, args: Value, want_error: bool| {
        seen.insert(tool.to_owned());
        let (structured, is_error) = checked(shop, &schemas, tool, args);
        assert_eq!(is_error, want_error, "{tool}: {structured}");
        structured
    };

    // Catalog.
    let found = run(
        &mut shop,
        "search_catalog",
        json!({"meta": meta(), "catalog": {"query": "tea"}}),
        false,
    );
    assert_eq!(found["products"][0]["title"], "Tea set");
    run(
        &mut shop,
        "search_catalog",
        json!({"meta": meta(), "catalog": {"query": "s"}}), // not empty: that lists the sloppy shop
        false,
    );
    run(
        &mut shop,
        "lookup_catalog",
        json!({"meta": meta(), "catalog": {"ids": [SOCKS, "gid://fixture/ProductVariant/tea-set", "nope"]}}),
        false,
    );
    run(
        &mut shop,
        "get_product",
        json!({"meta": meta(), "catalog": {"id": TEA_SET}}),
        false,
    );
    run(
        &mut shop,
        "get_product",
        json!({"meta": meta(), "catalog": {"id": "nope"}}),
        true,
    );

    // Carts.
    let cart = run(
        &mut shop,
        "create_cart",
        json!({"meta": meta(), "cart": {"line_items": [line(SOCKS, 1)]}}),
        false,
    );
    let cart_id = cart["id"].as_str().unwrap().to_owned();
    run(
        &mut shop,
        "get_cart",
        json!({"meta": meta(), "id": cart_id}),
        false,
    );
    run(
        &mut shop,
        "update_cart",
        json!({"meta": meta(), "id": cart_id, "cart": {"line_items": [{"id": "li_1", "item": {"id": SOCKS}, "quantity": 3}]}}),
        false,
    );
    let from_cart = run(
        &mut shop,
        "create_checkout",
        json!({"meta": meta(), "checkout": {"line_items": [line(SOCKS, 3)], "cart_id": cart_id}}),
        false,
    );
    assert_eq!(from_cart["status"], "ready_for_complete");
    run(
        &mut shop,
        "cancel_cart",
        json!({"meta": meta_key(&uuid(1)), "id": cart_id}),
        false,
    );
    run(
        &mut shop,
        "get_cart",
        json!({"meta": meta(), "id": cart_id}),
        true,
    );

    // Checkouts: create, update with payment, get, complete, decline, get_order, cancel.
    let created = run(
        &mut shop,
        "create_checkout",
        json!({"meta": meta(), "checkout": {"line_items": [line(SOCKS, 2)]}}),
        false,
    );
    let id = created["id"].as_str().unwrap().to_owned();
    let updated = run(
        &mut shop,
        "update_checkout",
        json!({"meta": meta(), "id": id, "checkout": {"line_items": [line(SOCKS, 2)],
               "payment": {"instruments": [instrument("cg_test_demo_token_01")]}}}),
        false,
    );
    assert_eq!(updated["status"], "ready_for_complete");
    run(
        &mut shop,
        "get_checkout",
        json!({"meta": meta(), "id": id}),
        false,
    );
    let declined = run(
        &mut shop,
        "complete_checkout",
        complete_args(&uuid(2), &id, "cg_test_decline_0001"),
        true,
    );
    assert_eq!(declined["status"], "ready_for_complete");
    let done = run(
        &mut shop,
        "complete_checkout",
        complete_args(&uuid(3), &id, "cg_test_demo_token_01"),
        false,
    );
    assert_eq!(done["status"], "completed");
    run(
        &mut shop,
        "complete_checkout",
        complete_args(&uuid(4), &id, "cg_test_demo_token_01"),
        true,
    );
    let order_id = done["order"]["id"].as_str().unwrap().to_owned();
    let order = run(
        &mut shop,
        "get_order",
        json!({"meta": meta(), "id": order_id}),
        false,
    );
    assert_eq!(order["checkout_id"], json!(id));
    run(
        &mut shop,
        "get_order",
        json!({"meta": meta(), "id": "gid://fixture/Order/999"}),
        true,
    );
    let other = run(
        &mut shop,
        "create_checkout",
        json!({"meta": meta(), "checkout": {"line_items": [line(TEA_SET, 1)]}}),
        false,
    );
    run(
        &mut shop,
        "cancel_checkout",
        json!({"meta": meta_key(&uuid(5)), "id": other["id"]}),
        false,
    );
    run(
        &mut shop,
        "get_checkout",
        json!({"meta": meta(), "id": "gid://fixture/Checkout/999"}),
        true,
    );

    let mut all: Vec<String> = seen.into_iter().collect();
    all.sort();
    assert_eq!(all, names, "every openrpc method was exercised");
}

#[test]
fn the_sloppy_shop_fails_the_schemas_and_the_others_pass() {
    let schemas = UcpSchemas::load();
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::start(dir.path());
    let sloppy = shop.ok(
        "create_checkout",
        json!({"meta": meta(), "checkout": {"line_items": [line(BOTTLE, 1)]}}),
    );
    assert_eq!(sloppy["totals"][1]["amount"], json!(49.99));
    let errors = schemas
        .check_result("create_checkout", &sloppy)
        .unwrap_err();
    assert!(errors.iter().any(|e| e.contains("49.99")), "{errors:#?}");
    for slug in [
        "trail-socks",
        "rain-shell",
        "day-pack",
        "down-parka",
        "sencha-tin",
        "tea-set",
        "camp-stove",
    ] {
        let id = format!("gid://fixture/Product/{slug}");
        let c = shop.ok(
            "create_checkout",
            json!({"meta": meta(), "checkout": {"line_items": [line(&id, 1)]}}),
        );
        schemas.check_result("create_checkout", &c).unwrap();
    }
}

#[test]
fn requests_breaking_ucp_request_annotations_are_caught() {
    let schemas = UcpSchemas::load();
    // Business-owned fields on complete are `omit`: totals, line_items, status, ...
    let bad = json!({"meta": meta_key(&uuid(1)), "id": "x",
        "checkout": {"payment": {"instruments": [instrument("cg_test_demo_token_01")]},
                     "totals": [{"type": "total", "amount": 120}]}});
    assert!(schemas.check_request("complete_checkout", &bad).is_err());
    // payment is `required` on complete.
    let bad = json!({"meta": meta_key(&uuid(1)), "id": "x", "checkout": {}});
    assert!(schemas.check_request("complete_checkout", &bad).is_err());
    // complete needs an idempotency key.
    let bad = json!({"meta": meta(), "id": "x", "checkout": {"payment": {}}});
    assert!(schemas.check_request("complete_checkout", &bad).is_err());
    // line_items are `required` on create; a line item id is `omit` on create.
    assert!(
        schemas
            .check_request("create_checkout", &json!({"meta": meta(), "checkout": {}}))
            .is_err()
    );
    let bad = json!({"meta": meta(), "checkout": {"line_items": [{"id": "li_1", "item": {"id": SOCKS}, "quantity": 1}]}});
    assert!(schemas.check_request("create_checkout", &bad).is_err());
    // ... and the item price is `omit` on every request.
    let bad = json!({"meta": meta(), "checkout": {"line_items": [{"item": {"id": SOCKS, "price": 1}, "quantity": 1}]}});
    assert!(schemas.check_request("create_checkout", &bad).is_err());
    // meta.ucp-agent is required everywhere.
    assert!(
        schemas
            .check_request("get_checkout", &json!({"meta": {}, "id": "x"}))
            .is_err()
    );
}

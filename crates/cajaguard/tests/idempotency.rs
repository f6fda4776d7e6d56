//! Retries and unknown outcomes (SPEC §4.13): one checkout's spend is counted once however many
//! attempts it takes, an unknown outcome blocks a new payment on that checkout until the shop says
//! how it ended, and that answer (read with `get_checkout`) settles or releases the reservation.
//! See also `bad_input.rs`, `a_shop_that_hangs_on_complete_keeps_the_spend_reserved`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const CHECKOUT: &str = "gid://test/Checkout/1";
fn completed() -> Value {
    let mut c = ready_checkout(CHECKOUT);
    c["status"] = json!("completed");
    c
}

fn in_progress() -> Value {
    let mut c = ready_checkout(CHECKOUT);
    c["status"] = json!("complete_in_progress");
    c
}

fn pay(mcp: &mut Mcp, key: &str, token: &str) -> Value {
    mcp.complete(CHECKOUT, instrument(TEST_HANDLER, token), key, json!({}))
}

fn completes_with_key(world: &World, key: &str) -> usize {
    world
        .test_shop_lines()
        .iter()
        .filter(|l| l.contains("\"complete_checkout\"") && l.contains(key))
        .count()
}

#[test]
fn complete_in_progress_keeps_the_reservation_and_the_retry_settles_it_once() {
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout(CHECKOUT)}],
        "complete_checkout": [{"checkout": in_progress()}, {"checkout": completed()}],
    }}));
    let mut mcp = world.proxy();
    let key = uuid();
    let first = pay(&mut mcp, &key, TEST_TOKEN);
    assert_eq!(verdict(&first).1, "within_caps", "{first}");
    assert_eq!(usd_spend(&world), (0, 2400), "in progress: still reserved");

    let other = pay(&mut mcp, &uuid(), TEST_TOKEN);
    assert_eq!(verdict(&other).1, "payment_in_flight", "{other}");

    let retry = pay(&mut mcp, &key, TEST_TOKEN);
    assert_eq!(verdict(&retry).1, "idempotent_retry", "{retry}");
    assert_eq!(usd_spend(&world), (2400, 0), "counted once");
    assert_eq!(completes_with_key(&world, &key), 2);
}

/// A retry's own failure says nothing about the first attempt, which may have charged: the
/// reservation stays. (Regression: a retry answered with the shop's idempotency-conflict error
/// released the first attempt's reservation.)
#[test]
fn the_same_key_with_another_body_does_not_release_the_first_attempt() {
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout(CHECKOUT)}],
        "complete_checkout": [
            {"hang": true},
            {"error": {"code": -32000, "message": "idempotency key reused with another body"}},
        ],
    }}));
    let mut mcp = world.proxy();
    let key = uuid();
    let first = pay(&mut mcp, &key, TEST_TOKEN);
    assert!(first.to_string().contains("outcome is unknown"), "{first}");
    let mut arguments = Mcp::complete_arguments(CHECKOUT, &key);
    arguments["checkout"]["payment"]["instruments"][0]["credential"]["token"] =
        json!("cg_test_another_token_02");
    let other_body = mcp.request(
        "tools/call",
        json!({"name": "complete_checkout", "arguments": arguments}),
    );
    // Forwarded as a retry; the shop's own idempotency check refuses it (passed back as is).
    assert_eq!(other_body["error"]["code"], -32000, "{other_body}");
    assert_eq!(completes_with_key(&world, &key), 2);
    assert_eq!(
        usd_spend(&world),
        (0, 2400),
        "the first attempt's outcome is still unknown"
    );
    let new_key = pay(&mut mcp, &uuid(), TEST_TOKEN);
    assert_eq!(verdict(&new_key).1, "payment_in_flight", "{new_key}");
}

/// The shop finished the first attempt after the proxy gave up on it: a retry learns it from
/// `get_checkout` and the spend is counted once; nothing is paid again.
#[test]
fn a_retry_after_a_timeout_finds_the_payment_completed() {
    let state = tempfile::tempdir().unwrap();
    let mut template = ready_checkout("x");
    template["status"] = json!("ready_for_complete");
    let world = World::fast_test_shop(json!({
        "state": state.path(),
        "checkouts": { "gid://test/": template },
        "on": {
            "get_checkout": [{"stateful_get": true}],
            // Charges after 1.3 s, past the proxy's 1 s timeout.
            "complete_checkout": [{"stateful_complete": true, "delay_ms": 1300}],
        },
    }));
    let mut mcp = world.proxy();
    let key = uuid();
    let first = pay(&mut mcp, &key, TEST_TOKEN);
    assert!(first.to_string().contains("outcome is unknown"), "{first}");
    assert_eq!(usd_spend(&world), (0, 2400));
    std::thread::sleep(Duration::from_millis(600));

    for retry_key in [key.clone(), uuid()] {
        let retry = pay(&mut mcp, &retry_key, TEST_TOKEN);
        assert_eq!(
            verdict(&retry),
            ("denied".into(), "checkout_not_ready".into(), None),
            "{retry}"
        );
        assert_eq!(usd_spend(&world), (2400, 0), "counted once");
    }
    assert_eq!(completes_with_key(&world, &key), 1, "paid once");
}

/// Nobody completed it: once the reservation is stale (twice the timeout), the shop's
/// `ready_for_complete` releases it and a new attempt is decided afresh; before that, it blocks.
#[test]
fn an_unknown_outcome_blocks_a_new_key_until_the_shop_says_it_was_not_paid() {
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout(CHECKOUT)}],
        "complete_checkout": [{"hang": true}, {"checkout": completed()}],
    }}));
    let mut mcp = world.proxy();
    let first = pay(&mut mcp, &uuid(), TEST_TOKEN);
    assert!(first.to_string().contains("outcome is unknown"), "{first}");
    let early = pay(&mut mcp, &uuid(), TEST_TOKEN);
    assert_eq!(verdict(&early).1, "payment_in_flight", "{early}");
    std::thread::sleep(Duration::from_millis(2100));
    let later = pay(&mut mcp, &uuid(), TEST_TOKEN);
    assert_eq!(verdict(&later).1, "within_caps", "{later}");
    assert_eq!(usd_spend(&world), (2400, 0), "released, then counted once");
    let conn = rusqlite::Connection::open(world.home.join("cajaguard.db")).unwrap();
    let released: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM audit WHERE reason = 'reconciled_released'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(released, 1);
}

/// At start, the proxy asks the shop about every reservation left in flight: completed ones settle
/// with the shop's total (read from the order when the checkout's own is unreadable), and a
/// checkout the shop cannot describe stays reserved.
#[test]
fn a_restart_reconciles_what_a_crash_left_in_flight() {
    let mut unreadable_total = completed();
    unreadable_total["totals"] = json!([{ "type": "total", "amount": 26.0 }]);
    unreadable_total["order"] = json!({ "id": "gid://test/Order/1", "permalink_url": "https://demo-outfitters.example/o/1" });
    let order = json!({ "id": "gid://test/Order/1", "checkout_id": CHECKOUT, "currency": "USD",
                        "totals": [{ "type": "total", "amount": 2600 }] });
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout(CHECKOUT)}],
        "complete_checkout": [{"hang": true}],
    }}));
    let mut mcp = world.proxy();
    let first = pay(&mut mcp, &uuid(), TEST_TOKEN);
    assert!(first.to_string().contains("outcome is unknown"), "{first}");
    mcp.kill();

    // The shop cannot say: the reservation stays.
    world.set_test_shop_script(&json!({ "on": {
        "get_checkout": [{"error": {"code": -32603, "message": "db down"}}],
    }}));
    let mcp = world.proxy();
    std::thread::sleep(Duration::from_millis(300));
    drop(mcp);
    assert_eq!(usd_spend(&world), (0, 2400));

    world.set_test_shop_script(&json!({ "on": {
        "get_checkout": [{"checkout": unreadable_total}],
        "get_order": [{"checkout": order}],
    }}));
    let _mcp = world.proxy();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while usd_spend(&world) != (2600, 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "not reconciled: {:?}",
            usd_spend(&world)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

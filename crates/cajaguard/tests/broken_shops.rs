//! Broken shops (SPEC §4.4-4.5, §4.13, §11.7): every way the scripted shop misbehaves fails closed
//! with the reason the SPEC gives, nothing unchecked reaches the payment call, and the proxy keeps
//! serving the next call.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::*;

const CHECKOUT: &str = "gid://test/Checkout/1";
fn completes_sent(world: &World) -> usize {
    world
        .test_shop_lines()
        .iter()
        .filter(|l| l.contains("\"tools/call\"") && l.contains("\"complete_checkout\""))
        .count()
}

/// The proxy still answers: a read-only call of its own and a listing of the shop's tools.
fn still_serving(mcp: &mut Mcp) {
    let status = mcp.call("cajaguard_status", json!({}));
    assert_eq!(status["isError"], false, "{status}");
    assert!(
        mcp.request("tools/list", json!({}))["result"]["tools"].is_array(),
        "tools/list after a broken shop"
    );
}

fn with_total(total: Value) -> Value {
    let mut c = ready_checkout(CHECKOUT);
    c["totals"] =
        json!([{ "type": "subtotal", "amount": 2400 }, { "type": "total", "amount": total }]);
    c
}

#[test]
fn a_shop_that_misreports_the_checkout_is_refused_before_payment() {
    let mut two_totals = ready_checkout(CHECKOUT);
    two_totals["totals"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "type": "total", "amount": 1 }));
    let mut no_urls = ready_checkout(CHECKOUT);
    no_urls.as_object_mut().unwrap().remove("links");
    no_urls.as_object_mut().unwrap().remove("continue_url");
    let mut float_price = ready_checkout(CHECKOUT);
    float_price["line_items"][0]["item"]["price"] = json!(12.0);
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "float total",
            json!({"checkout": with_total(json!(24.0))}),
            "amount_not_minor_units",
        ),
        (
            "major units",
            json!({"checkout": with_total(json!(23.99))}),
            "amount_not_minor_units",
        ),
        (
            "float price",
            json!({"checkout": float_price}),
            "amount_not_minor_units",
        ),
        (
            "string total",
            json!({"checkout": with_total(json!("2400"))}),
            "amount_not_minor_units",
        ),
        (
            "two totals",
            json!({"checkout": two_totals}),
            "amount_not_minor_units",
        ),
        (
            "negative total",
            json!({"checkout": with_total(json!(-2400))}),
            "amount_not_minor_units",
        ),
        (
            "no URLs",
            json!({"checkout": no_urls}),
            "merchant_not_allowed",
        ),
        ("hang", json!({"hang": true}), "checkout_unreadable"),
        ("crash mid-call", json!({"exit": 9}), "checkout_unreadable"),
        (
            "10 MB answer",
            json!({"huge": 10 * 1024 * 1024}),
            "checkout_unreadable",
        ),
        (
            "invalid JSON line",
            json!({"raw": "{\"jsonrpc\":\"2.0\",\"id\":"}),
            "checkout_unreadable",
        ),
        (
            "text that is not JSON",
            json!({"result": {"content": [{"type": "text", "text": "{not json"}]}}),
            "checkout_unreadable",
        ),
        (
            "JSON-RPC error",
            json!({"error": {"code": -32603, "message": "db down"}}),
            "checkout_unreadable",
        ),
        (
            "another checkout",
            json!({"checkout": ready_checkout("gid://test/Checkout/2")}),
            "checkout_unreadable",
        ),
    ];
    let world = World::fast_test_shop(json!({}));
    for (name, action, reason) in cases {
        world.set_test_shop_script(&json!({ "on": { "get_checkout": [action] } }));
        let mut mcp = world.proxy();
        let answer = mcp.pay(CHECKOUT);
        assert_eq!(answer["isError"], true, "{name}: {answer}");
        assert_eq!(
            verdict(&answer),
            ("denied".into(), reason.into(), None),
            "{name}: {answer}"
        );
        assert_eq!(
            completes_sent(&world),
            0,
            "{name}: the payment must not be forwarded"
        );
        still_serving(&mut mcp);
        assert_eq!(usd_spend(&world), (0, 0), "{name}");
    }
}

/// The payment call itself misbehaves: what the shop charged counts (the higher of quote and
/// charge, with the mismatch in the audit log), and no answer keeps the spend reserved.
#[test]
fn what_the_shop_answers_to_the_payment_settles_it_fail_closed() {
    let completed = |total: Value| {
        let mut c = with_total(total);
        c["status"] = json!("completed");
        json!({ "checkout": c })
    };
    // (name, complete action, expected (settled, in flight))
    let cases: Vec<(&str, Value, (i64, i64))> = vec![
        ("as quoted", completed(json!(2400)), (2400, 0)),
        (
            "charged more than quoted",
            completed(json!(2600)),
            (2600, 0),
        ),
        (
            "charged less than quoted",
            completed(json!(2000)),
            (2400, 0),
        ),
        (
            "float total on completion",
            completed(json!(26.0)),
            (2400, 0),
        ),
        (
            "declined",
            json!({"error": {"code": -32000, "message": "card declined"}}),
            (0, 0),
        ),
        ("crash mid-call", json!({"exit": 9}), (0, 2400)),
        ("10 MB answer", json!({"huge": 10 * 1024 * 1024}), (0, 2400)),
        (
            "invalid JSON line",
            json!({"raw": "{\"jsonrpc\":"}),
            (0, 2400),
        ),
        ("hang", json!({"hang": true}), (0, 2400)),
    ];
    for (name, action, expected) in cases {
        let world = World::fast_test_shop(json!({ "on": {
            "get_checkout": [{"checkout": ready_checkout(CHECKOUT)}],
            "complete_checkout": [action],
        }}));
        let mut mcp = world.proxy();
        // The whole response: a shop's JSON-RPC error (the decline) is passed back as one.
        let answer = mcp.request(
            "tools/call",
            json!({"name": "complete_checkout", "arguments": Mcp::complete_arguments(CHECKOUT, &uuid())}),
        );
        assert_eq!(completes_sent(&world), 1, "{name}");
        assert_eq!(usd_spend(&world), expected, "{name}: {answer}");
        still_serving(&mut mcp);
        let differs = name.starts_with("charged") || name.starts_with("float");
        let conn = rusqlite::Connection::open(world.home.join("cajaguard.db")).unwrap();
        let frozen: i64 = conn
            .query_row("SELECT COUNT(*) FROM payment_freeze", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            frozen,
            i64::from(differs),
            "{name}: a completion that differs from the quote freezes payments, and only that"
        );
        if name == "charged more than quoted" {
            let note: String = conn
                .query_row(
                    "SELECT note FROM audit WHERE verdict = 'settled' AND reason = 'charged_differs'",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(note.contains("2600") && note.contains("2400"), "{note}");
            assert_eq!(
                answer["result"]["_meta"]["cajaguard"]["mismatch"]["fields"],
                json!(["total"]),
                "{answer}"
            );
        }
        if expected.1 > 0 {
            assert!(
                answer.to_string().contains("outcome is unknown"),
                "{name}: {answer}"
            );
        }
    }
}

/// The processes the proxy `pid` started (every thread's children, from /proc).
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        // A call's thread may end between the listing and the read: it has no children then.
        let Ok(children) = std::fs::read_to_string(task.unwrap().path().join("children")) else {
            continue;
        };
        out.extend(
            children
                .split_whitespace()
                .map(|c| c.parse::<u32>().unwrap()),
        );
    }
    out.sort_unstable();
    out
}

/// Regression (issue 13): one caller's read whose answer is over `max_message_bytes` made the
/// proxy kill the shop, turning every call in flight (another caller's payment too) into an
/// unknown outcome. Now only that read fails; the shop keeps its pid, and a payment that was
/// waiting behind the oversized answer completes and is counted.
#[test]
fn an_oversized_answer_fails_only_its_own_call_and_keeps_the_shop() {
    let mut completed = ready_checkout(CHECKOUT);
    completed["status"] = json!("completed");
    let world = World::with_test_shop(json!({ "on": {
        // The first get_checkout is the agent's own read (answered 10 MB, after a pause during
        // which the payment's read queues behind it); the next ones are the gate's.
        "get_checkout": [{"huge": 10 * 1024 * 1024, "delay_ms": 300}, {"checkout": ready_checkout(CHECKOUT)}],
        "complete_checkout": [{"checkout": completed}],
    }}));
    let mut mcp = world.proxy();
    let shop = children_of(mcp.pid());
    assert_eq!(shop.len(), 1, "one shop process: {shop:?}");

    let read = mcp.send_request(
        "tools/call",
        json!({"name": "get_checkout", "arguments": {"id": "gid://test/Checkout/other"}}),
    );
    // The read is with the shop (its record has it) before the payment starts.
    world.wait_for_test_shop_line("gid://test/Checkout/other");
    let pay = mcp.send_request(
        "tools/call",
        json!({"name": "complete_checkout", "arguments": Mcp::complete_arguments(CHECKOUT, &uuid())}),
    );

    // Either may be answered first.
    let mut answers = std::collections::HashMap::new();
    while answers.len() < 2 {
        let message = mcp.read_message();
        if let Some(id) = message["id"].as_u64().filter(|id| [read, pay].contains(id)) {
            answers.insert(id, message);
        }
    }
    let read = &answers[&read];
    assert_eq!(read["result"]["isError"], true, "{read}");
    assert!(read.to_string().contains("only this call failed"), "{read}");
    let pay = &answers[&pay];
    assert_eq!(
        verdict(&pay["result"]),
        ("allow".into(), "within_caps".into(), None),
        "{pay}"
    );
    assert_eq!(completes_sent(&world), 1);
    assert_eq!(usd_spend(&world), (2400, 0), "the payment is counted");
    assert_eq!(children_of(mcp.pid()), shop, "the same shop process");
    still_serving(&mut mcp);
    assert_eq!(children_of(mcp.pid()), shop, "still the same shop process");
}

#[test]
fn a_charge_that_differs_freezes_payments_even_when_its_settlement_cannot_be_written() {
    // The shop charges 26.00 for a 24.00 quote; the store then refuses to write the settlement
    // (a trigger stands in for a failing disk or database). The settlement's own freeze goes down
    // with it, so the proxy must freeze payments by itself, and the reservation stays counted.
    let mut charged = with_total(json!(2600));
    charged["status"] = json!("completed");
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout(CHECKOUT)}],
        "complete_checkout": [{ "checkout": charged }],
    }}));
    let mut mcp = world.proxy();
    let db = rusqlite::Connection::open(world.home.join("cajaguard.db")).unwrap();
    db.execute_batch(
        "CREATE TRIGGER settlement_fails BEFORE UPDATE OF state ON ledger
         WHEN NEW.state = 'settled' BEGIN SELECT RAISE(ABORT, 'injected: the disk is full'); END;",
    )
    .unwrap();
    let answer = mcp.request(
        "tools/call",
        json!({"name": "complete_checkout", "arguments": Mcp::complete_arguments(CHECKOUT, &uuid())}),
    );
    assert_eq!(completes_sent(&world), 1, "{answer}");
    // Not settled: the reservation (the quote's 24.00) still counts, in flight.
    assert_eq!(usd_spend(&world), (0, 2400), "{answer}");
    let reason: String = db
        .query_row("SELECT reason FROM payment_freeze", [], |r| r.get(0))
        .unwrap();
    assert!(reason.starts_with("charged_differs on "), "{reason}");
    let status = mcp.call("cajaguard_status", json!({}));
    assert!(
        status["structuredContent"]["frozen"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("charged_differs")),
        "{status}"
    );
    // Frozen: the next payment is refused before the shop.
    let next = mcp.call(
        "complete_checkout",
        Mcp::complete_arguments("gid://test/Checkout/2", &uuid()),
    );
    assert_eq!(verdict(&next).1, "frozen", "{next}");
    assert_eq!(
        completes_sent(&world),
        1,
        "nothing reached the shop while frozen"
    );
}

/// A payment whose answer never came (the shop hangs), then released once stale by an update's
/// reconciliation, which reads the checkout open; every later read says completed, as if the
/// shop charged after all. Returns the world and the agent's session.
fn a_payment_released_before_the_shop_completed_it() -> (World, Mcp) {
    let ready = ready_checkout(CHECKOUT);
    let mut completed = ready.clone();
    completed["status"] = json!("completed");
    let world = World::fast_test_shop(json!({ "on": {
        // The gate's read-back, the update's reconciliation, then completed from then on.
        "get_checkout": [{"checkout": ready}, {"checkout": ready}, {"checkout": completed}],
        "complete_checkout": [{"hang": true}],
        "update_checkout": [{"checkout": ready}],
    }}));
    let mut mcp = world.proxy();
    let paid = mcp.call(
        "complete_checkout",
        Mcp::complete_arguments(CHECKOUT, &uuid()),
    );
    assert!(paid.to_string().contains("outcome is unknown"), "{paid}");
    assert_eq!(usd_spend(&world), (0, 2400));
    // Stale after twice the 1 s timeout: the update's reconciliation reads it open and releases.
    std::thread::sleep(std::time::Duration::from_millis(2300));
    let updated = mcp.call(
        "update_checkout",
        json!({ "meta": { "ucp-agent": { "profile": AGENT } }, "id": CHECKOUT,
                "checkout": { "line_items": [] } }),
    );
    assert_ne!(updated["isError"], json!(true), "{updated}");
    assert_eq!(usd_spend(&world), (0, 0), "released as stale and open");
    (world, mcp)
}

/// The shop completed a released payment after all: the next time the checkout is read back
/// for a payment, completed, the charge is counted before the gate decides, so the agent cannot
/// spend it again elsewhere under the window.
#[test]
fn a_charge_that_lands_after_its_release_is_counted_when_the_checkout_reads_completed() {
    let (world, mut mcp) = a_payment_released_before_the_shop_completed_it();
    let again = mcp.call(
        "complete_checkout",
        Mcp::complete_arguments(CHECKOUT, &uuid()),
    );
    assert_eq!(verdict(&again).1, "checkout_not_ready", "{again}");
    assert_eq!(usd_spend(&world), (2400, 0), "the late charge counts");
    assert_eq!(completes_sent(&world), 1);
}

/// The same late charge when no agent reads that checkout again: a live proxy revisits what it
/// released as stale, and counts the charge within a few of its passes, so further payments
/// elsewhere are held to the window with it.
#[test]
fn a_charge_that_lands_after_its_release_is_counted_by_a_live_proxy_on_its_own() {
    let (world, mut mcp) = a_payment_released_before_the_shop_completed_it();
    // Passes every 4 s with this 1 s shop timeout: the next reads it completed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while usd_spend(&world) != (2400, 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the late charge was not counted: {:?}",
            usd_spend(&world)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    still_serving(&mut mcp);
}

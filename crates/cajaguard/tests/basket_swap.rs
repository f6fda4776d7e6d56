//! The basket the shop completes is the basket the gate checked (SPEC §4 step 3a, §4.13, §6),
//! tried the way a hostile agent would: through real `cajaguard mcp` processes, pipelining an
//! update behind an allowed payment, from the same session and from a second one, over many
//! timing offsets; retrying an unknown outcome with another basket or instrument; a shop that
//! answers with neither result nor error; a charge that differs freezing a second process.
//!
//! Over 500 lines as one idea: every way a basket can change between the check and the charge,
//! each a short test against the same world.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// Caps where 2 x Trail socks (USD 24.00) pass without approval and a Down parka (USD 219.00)
/// never does, with a window wide enough for every trial.
fn wide_window() -> Options {
    Options {
        caps: json!({
            "USD": { "approval_above": "100.00", "per_transaction": "100.00", "window": "100000.00" },
        }),
        ..Options::default()
    }
}

fn checkout_now(mcp: &mut Mcp, checkout_id: &str) -> Value {
    let result = mcp.call(
        "get_checkout",
        json!({ "meta": { "ucp-agent": { "profile": AGENT } }, "id": checkout_id }),
    );
    result["structuredContent"].clone()
}

fn update_params(checkout_id: &str, slug: &str, quantity: u64) -> Value {
    json!({"name": "update_checkout", "arguments": {
        "meta": { "ucp-agent": { "profile": AGENT }, "idempotency-key": uuid() },
        "id": checkout_id,
        "checkout": { "line_items": [{ "item": { "id": format!("gid://fixture/Product/{slug}") }, "quantity": quantity }] },
    }})
}

/// The answers to two pipelined requests, in whatever order they come.
fn both_answers(mcp: &mut Mcp, a: u64, b: u64) -> (Value, Value) {
    let (mut first, mut second) = (None, None);
    while first.is_none() || second.is_none() {
        let message = mcp.read_message();
        if message.get("id") == Some(&json!(a)) {
            first = Some(message);
        } else if message.get("id") == Some(&json!(b)) {
            second = Some(message);
        }
    }
    (first.unwrap(), second.unwrap())
}

fn total_of(checkout: &Value) -> i64 {
    checkout["totals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "total")
        .unwrap()["amount"]
        .as_i64()
        .unwrap()
}

/// One trial: complete 2 x socks, and `offset_us` later send an update to a Down parka, from
/// `updater` (the same session or another). Whatever the interleaving, a completed checkout holds
/// the basket the gate allowed. Returns whether the payment completed.
fn trial(payer: &mut Mcp, updater: Option<&mut Mcp>, offset_us: u64) -> bool {
    let checkout_id = payer.create_checkout("trail-socks", 2);
    let complete = payer.send_request(
        "tools/call",
        json!({"name": "complete_checkout", "arguments": Mcp::complete_arguments(&checkout_id, &uuid())}),
    );
    std::thread::sleep(Duration::from_micros(offset_us));
    let (paid, updated) = match updater {
        None => {
            let update =
                payer.send_request("tools/call", update_params(&checkout_id, "down-parka", 1));
            both_answers(payer, complete, update)
        }
        Some(other) => {
            let update =
                other.send_request("tools/call", update_params(&checkout_id, "down-parka", 1));
            let updated = other.answer_to(update);
            (payer.answer_to(complete), updated)
        }
    };
    let now = checkout_now(payer, &checkout_id);
    let completed = now["status"] == "completed";
    if completed {
        assert_eq!(
            verdict(&paid["result"]).0,
            "allow",
            "a completed payment passed the gate: {paid}"
        );
        assert_eq!(
            total_of(&now),
            2400,
            "offset {offset_us} µs: the shop completed another basket than the gate checked: {now}; update: {updated}"
        );
        assert!(
            paid["result"]["_meta"]["cajaguard"]
                .get("mismatch")
                .is_none(),
            "{paid}"
        );
    } else {
        // The update got in first (or the payment was refused while the update was on its way).
        assert_ne!(
            verdict(&paid["result"]).0,
            "allow",
            "allowed but not completed: {paid}"
        );
    }
    completed
}

fn swap_trials(cross_session: bool) {
    let world = World::with(wide_window());
    let mut payer = world.proxy();
    let mut other = cross_session.then(|| world.proxy());
    let (mut completed, mut refused) = (0, 0);
    // The window is microseconds wide; walk the update across it.
    for i in 0..40_u64 {
        let offset = (i % 20) * 150;
        if trial(&mut payer, other.as_mut(), offset) {
            completed += 1;
        } else {
            refused += 1;
        }
    }
    let (settled, in_flight) = usd_spend(&world);
    assert_eq!(
        (settled, in_flight),
        (completed * 2400, 0),
        "every completed payment is counted once, as checked"
    );
    eprintln!(
        "swap trials (cross session: {cross_session}): {completed} completed, {refused} refused"
    );
    assert!(
        completed > 0,
        "no trial completed: the test did not exercise the race"
    );
}

#[test]
fn an_update_pipelined_behind_an_allowed_payment_never_changes_what_is_charged() {
    swap_trials(false);
}

#[test]
fn an_update_from_a_second_session_never_changes_what_is_charged() {
    swap_trials(true);
}

/// On stdio too, a call on a checkout carries only what the checks read: an update leased on one
/// checkout cannot point a lenient shop at another (whose payment is in flight) through a
/// `checkout_id` beside `id` or a `checkout.id`, and the same holds for the calls forwarded on
/// the fast path (`get_checkout`, `create_checkout`).
#[test]
fn a_call_on_a_checkout_carries_no_second_id_on_stdio_either() {
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout("gid://fixture/Checkout/1")}],
        "update_checkout": [{"checkout": ready_checkout("gid://fixture/Checkout/1")}],
        "create_checkout": [{"checkout": ready_checkout("gid://fixture/Checkout/3")}],
    }}));
    let mut mcp = world.proxy();
    let meta = json!({ "ucp-agent": { "profile": AGENT }, "idempotency-key": uuid() });
    let line_items =
        json!([{ "item": { "id": "gid://fixture/Product/trail-socks" }, "quantity": 1 }]);
    for (tool, arguments) in [
        (
            "update_checkout",
            json!({ "meta": meta, "id": "gid://fixture/Checkout/1", "checkout_id": "gid://fixture/Checkout/2", "checkout": { "line_items": line_items } }),
        ),
        (
            "update_checkout",
            json!({ "meta": meta, "id": "gid://fixture/Checkout/1", "checkout": { "id": "gid://fixture/Checkout/2", "line_items": line_items } }),
        ),
        (
            "cancel_checkout",
            json!({ "meta": meta, "id": "gid://fixture/Checkout/1", "checkout_id": "gid://fixture/Checkout/2" }),
        ),
        (
            "get_checkout",
            json!({ "meta": meta, "id": "gid://fixture/Checkout/1", "checkout_id": "gid://fixture/Checkout/2" }),
        ),
        (
            "create_checkout",
            json!({ "meta": meta, "checkout": { "ID": "gid://fixture/Checkout/2", "line_items": line_items } }),
        ),
    ] {
        let answer = mcp.call(tool, arguments);
        assert_eq!(
            verdict(&answer),
            ("denied".into(), "request_field_not_allowed".into(), None),
            "{tool}: {answer}"
        );
    }
    assert!(
        world
            .test_shop_lines()
            .iter()
            .all(|l| !l.contains("\"tools/call\"")),
        "a call reached the shop: {:?}",
        world.test_shop_lines()
    );
    // The same calls as the schemas have them still pass.
    let read = mcp.call(
        "get_checkout",
        json!({ "meta": meta, "id": "gid://fixture/Checkout/1" }),
    );
    assert_eq!(
        read["structuredContent"]["id"], "gid://fixture/Checkout/1",
        "{read}"
    );
    let updated = mcp.call(
        "update_checkout",
        json!({ "meta": meta, "id": "gid://fixture/Checkout/1", "checkout": { "line_items": line_items } }),
    );
    assert_eq!(
        updated["structuredContent"]["id"], "gid://fixture/Checkout/1",
        "{updated}"
    );
}

#[test]
fn a_claimed_checkout_refuses_updates_and_cancels_until_its_payment_settles() {
    // The payment hangs at the shop (unknown outcome): the checkout stays claimed.
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout("gid://fixture/Checkout/1")}],
        "complete_checkout": [{"hang": true}],
        "update_checkout": [{"checkout": ready_checkout("gid://fixture/Checkout/1")}],
        "cancel_checkout": [{"checkout": ready_checkout("gid://fixture/Checkout/1")}],
    }}));
    let mut mcp = world.proxy();
    let key = uuid();
    let paid = mcp.call(
        "complete_checkout",
        Mcp::complete_arguments("gid://fixture/Checkout/1", &key),
    );
    assert!(paid.to_string().contains("outcome is unknown"), "{paid}");
    let mut second = world.proxy();
    for tool in ["update_checkout", "cancel_checkout"] {
        let mut arguments = json!({ "meta": { "ucp-agent": { "profile": AGENT }, "idempotency-key": uuid() }, "id": "gid://fixture/Checkout/1" });
        if tool == "update_checkout" {
            arguments["checkout"] = json!({ "line_items": [] });
        }
        let answer = second.call(tool, arguments);
        assert_eq!(
            verdict(&answer),
            ("blocked".into(), "payment_in_flight".into(), None),
            "{tool}: {answer}"
        );
    }
    // Another payment of it too; nothing of them reached the shop.
    let other = second.call(
        "complete_checkout",
        Mcp::complete_arguments("gid://fixture/Checkout/1", &uuid()),
    );
    assert_eq!(verdict(&other).1, "payment_in_flight", "{other}");
    let lines = world.test_shop_lines().join("\n");
    assert!(!lines.contains("update_checkout") && !lines.contains("cancel_checkout"));
    assert_eq!(lines.matches("\"complete_checkout\"").count(), 1, "{lines}");
    assert_eq!(usd_spend(&world), (0, 2400));
}

/// A retry of an unknown outcome is forwarded only for the very basket, handler and instrument of
/// the reserved attempt (SPEC §4.13).
#[test]
fn a_retry_with_another_basket_currency_handler_or_instrument_is_refused() {
    let mut jpy = ready_checkout("gid://fixture/Checkout/1");
    jpy["currency"] = json!("JPY");
    let mut more = ready_checkout("gid://fixture/Checkout/1");
    more["line_items"][0]["quantity"] = json!(3);
    more["totals"] =
        json!([{ "type": "subtotal", "amount": 2400 }, { "type": "total", "amount": 2400 }]);
    let mut other_product = ready_checkout("gid://fixture/Checkout/1");
    other_product["line_items"][0]["item"]["id"] = json!("gid://fixture/Product/gift-card");
    let same = ready_checkout("gid://fixture/Checkout/1");
    let cases: Vec<(&str, Value, Value)> = vec![
        (
            "another currency",
            jpy,
            instrument(TEST_HANDLER, TEST_TOKEN),
        ),
        (
            "another quantity, same total",
            more,
            instrument(TEST_HANDLER, TEST_TOKEN),
        ),
        (
            "another product, same price",
            other_product,
            instrument(TEST_HANDLER, TEST_TOKEN),
        ),
        (
            "another handler",
            same.clone(),
            instrument("com.shopify.shop_pay", TEST_TOKEN),
        ),
        ("another instrument", same, {
            let mut i = instrument(TEST_HANDLER, TEST_TOKEN);
            i["id"] = json!("pi_2");
            i
        }),
    ];
    for (name, retry_basket, retry_instrument) in cases {
        let world = World::with_options_and_test_shop(
            Options {
                mode: "live",
                timeout_seconds: 1,
                ..Options::default()
            },
            json!({ "on": {
                // The blocked call, the approved first attempt, then the retry (and after).
                "get_checkout": [
                    {"checkout": ready_checkout("gid://fixture/Checkout/1")},
                    {"checkout": ready_checkout("gid://fixture/Checkout/1")},
                    {"checkout": retry_basket},
                ],
                "complete_checkout": [{"hang": true}],
            }}),
        );
        // Live mode: the first attempt needs an approval, so the retry would ride on it.
        let mut mcp = world.proxy();
        let key = uuid();
        let blocked = mcp.call(
            "complete_checkout",
            Mcp::complete_arguments("gid://fixture/Checkout/1", &key),
        );
        let (_, reason, request_id) = verdict(&blocked);
        assert_eq!(reason, "pending_approval", "{name}: {blocked}");
        let approved = world.cli(&["approve", request_id.as_deref().unwrap(), "--yes"]);
        assert!(
            approved.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&approved.stderr)
        );
        let first = mcp.call(
            "complete_checkout",
            Mcp::complete_arguments("gid://fixture/Checkout/1", &key),
        );
        assert!(
            first.to_string().contains("outcome is unknown"),
            "{name}: {first}"
        );
        let retry = mcp.complete(
            "gid://fixture/Checkout/1",
            retry_instrument,
            &key,
            json!({}),
        );
        assert_eq!(
            verdict(&retry).1,
            "payment_in_flight",
            "{name}: a retry that is not the approved payment must not be forwarded: {retry}"
        );
        let lines = world.test_shop_lines().join("\n");
        assert_eq!(
            lines.matches("\"complete_checkout\"").count(),
            1,
            "{name}: {lines}"
        );
    }
}

/// SPEC §4.13: an answer with neither result nor error may follow a charge: the spend stays.
#[test]
fn an_answer_without_result_or_error_keeps_the_spend_counted() {
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout("gid://fixture/Checkout/1")}],
        "complete_checkout": [{"bare": true}],
    }}));
    let mut mcp = world.proxy();
    let answer = mcp.call(
        "complete_checkout",
        Mcp::complete_arguments("gid://fixture/Checkout/1", &uuid()),
    );
    assert!(
        answer.to_string().contains("outcome is unknown"),
        "{answer}"
    );
    assert_eq!(
        usd_spend(&world),
        (0, 2400),
        "the reservation stays in flight"
    );
}

/// A charge that differs from the quote freezes payments for every process on the store, and
/// nothing an agent calls lifts it; the human's signed unfreeze does.
#[test]
fn a_mismatched_charge_freezes_a_second_process_until_a_human_unfreezes() {
    let mut charged = ready_checkout("gid://fixture/Checkout/1");
    charged["status"] = json!("completed");
    charged["totals"] =
        json!([{ "type": "subtotal", "amount": 2600 }, { "type": "total", "amount": 2600 }]);
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout("gid://fixture/Checkout/1")}, {"checkout": ready_checkout("gid://fixture/Checkout/2")}],
        "complete_checkout": [{"checkout": charged}],
    }}));
    let mut first = world.proxy();
    let paid = first.call(
        "complete_checkout",
        Mcp::complete_arguments("gid://fixture/Checkout/1", &uuid()),
    );
    assert_eq!(
        paid["_meta"]["cajaguard"]["mismatch"]["fields"],
        json!(["total"]),
        "{paid}"
    );
    assert_eq!(usd_spend(&world), (2600, 0), "the higher charge counts");

    let mut second = world.proxy();
    let refused = second.call(
        "complete_checkout",
        Mcp::complete_arguments("gid://fixture/Checkout/2", &uuid()),
    );
    assert_eq!(
        verdict(&refused),
        ("blocked".into(), "frozen".into(), None),
        "{refused}"
    );
    let status = second.call("cajaguard_status", json!({}));
    assert!(
        status["structuredContent"]["frozen"]["reason"]
            .as_str()
            .unwrap()
            .contains("charged_differs")
    );

    // No tool lifts it, and the CLI needs the human (no terminal here, no --yes).
    assert!(!second.tool_names().iter().any(|t| t.contains("unfreeze")));
    let without_human = world.cli(&["unfreeze"]);
    assert_eq!(without_human.status.code(), Some(2), "{without_human:?}");
    let still = second.call(
        "complete_checkout",
        Mcp::complete_arguments("gid://fixture/Checkout/2", &uuid()),
    );
    assert_eq!(verdict(&still).1, "frozen");

    let unfrozen = world.cli(&["unfreeze", "--yes"]);
    assert!(
        unfrozen.status.success(),
        "{}",
        String::from_utf8_lossy(&unfrozen.stderr)
    );
    let status = second.call("cajaguard_status", json!({}));
    assert_eq!(status["structuredContent"]["frozen"], Value::Null);
}

#[test]
fn an_agent_can_freeze_but_an_unfreeze_with_an_untrusted_key_changes_nothing() {
    let world = World::new();
    let mut mcp = world.proxy();
    let frozen = mcp.call("cajaguard_freeze", json!({"reason": "looks wrong"}));
    assert_eq!(frozen["isError"], json!(false), "{frozen}");
    let checkout_id = mcp.create_checkout("trail-socks", 2);
    let reads_before = world.shop_calls().len();
    assert_eq!(verdict(&mcp.pay(&checkout_id)).1, "frozen");
    assert_eq!(world.completes_reaching_shop(&checkout_id), 0);
    // Frozen wins over every other refusal (SPEC §4 step 0), one found before the store is asked
    // (the tripwire) too, and not even the checkout is read back while frozen.
    let tripped = mcp.complete(&checkout_id, raw_card_instrument(), &uuid(), json!({}));
    assert_eq!(verdict(&tripped).1, "frozen", "{tripped}");
    assert_eq!(
        world.shop_calls().len(),
        reads_before,
        "nothing reached the shop while frozen"
    );
    // Browsing still works while frozen.
    assert_eq!(
        checkout_now(&mut mcp, &checkout_id)["status"],
        "ready_for_complete"
    );

    let stranger = tempfile::tempdir().unwrap();
    let keygen = std::process::Command::new(cajaguard_bin())
        .args(["keygen", "--out"])
        .arg(stranger.path())
        .output()
        .unwrap();
    assert!(keygen.status.success());
    let refused = world.cli(&[
        "unfreeze",
        "--yes",
        "--key-dir",
        stranger.path().to_str().unwrap(),
    ]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert_eq!(verdict(&mcp.pay(&checkout_id)).1, "frozen");
}

/// The stale-release-then-refusal bug: an earlier attempt landed late, so the shop refuses this
/// one ("already completed"). A refusal releases only after a fresh read, which here reads
/// `completed`: the money the shop took is counted.
#[test]
fn a_refusal_after_an_earlier_attempt_landed_counts_the_charge() {
    let mut landed = ready_checkout("gid://fixture/Checkout/1");
    landed["status"] = json!("completed");
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [
            {"checkout": ready_checkout("gid://fixture/Checkout/1")},
            {"checkout": landed},
        ],
        "complete_checkout": [{"error": {"code": -32000, "message": "checkout already completed"}}],
    }}));
    let mut mcp = world.proxy();
    let answer = mcp.request(
        "tools/call",
        json!({"name": "complete_checkout", "arguments": Mcp::complete_arguments("gid://fixture/Checkout/1", &uuid())}),
    );
    assert!(
        answer.get("error").is_some(),
        "the shop's error is passed on: {answer}"
    );
    assert_eq!(usd_spend(&world), (2400, 0), "the landed charge is counted");
}

/// A plain decline: the fresh read shows the checkout still open, so the reservation is released.
#[test]
fn a_decline_confirmed_by_a_fresh_read_releases() {
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout("gid://fixture/Checkout/1")}],
        "complete_checkout": [{"error": {"code": -32000, "message": "card declined"}}],
    }}));
    let mut mcp = world.proxy();
    mcp.request(
        "tools/call",
        json!({"name": "complete_checkout", "arguments": Mcp::complete_arguments("gid://fixture/Checkout/1", &uuid())}),
    );
    assert_eq!(usd_spend(&world), (0, 0));
    // (The start-up reconciliation may read the checkout too, at any moment: count only what
    // follows the payment.)
    let lines = world.test_shop_lines();
    let paid = lines
        .iter()
        .position(|l| l.contains("\"complete_checkout\""))
        .unwrap();
    assert!(
        lines[paid..].iter().any(|l| l.contains("\"get_checkout\"")),
        "the release follows a fresh read of the checkout: {lines:?}"
    );
}

fn wait_for_spend(world: &World, want: (i64, i64)) -> (i64, i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = usd_spend(world);
        if now == want || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// SPEC §4.13: reconciliation revisits, within the window, the reservations it released, and
/// counts the ones whose checkout later reads completed (a shop that landed the payment late).
#[test]
fn a_stale_release_is_revisited_and_counted_when_the_checkout_later_completes() {
    let ready = ready_checkout("gid://fixture/Checkout/1");
    let mut landed = ready.clone();
    landed["status"] = json!("completed");
    let world = World::fast_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready}],
        "complete_checkout": [{"hang": true}],
    }}));
    let mut first = world.proxy();
    let lost = first.call(
        "complete_checkout",
        Mcp::complete_arguments("gid://fixture/Checkout/1", &uuid()),
    );
    assert!(lost.to_string().contains("outcome is unknown"), "{lost}");
    first.kill();
    // Stale (older than twice the 1 s timeout), and the shop still reads it open: released.
    std::thread::sleep(Duration::from_millis(2500));
    let second = world.proxy();
    assert_eq!(wait_for_spend(&world, (0, 0)), (0, 0), "released as stale");
    drop(second);
    // The shop landed it after all.
    world.set_test_shop_script(&json!({ "on": { "get_checkout": [{"checkout": landed}] }}));
    let _third = world.proxy();
    assert_eq!(
        wait_for_spend(&world, (2400, 0)),
        (2400, 0),
        "the late charge is counted at the next reconciliation"
    );
    // Reconciliation read the checkout as the paying agent, not under a profile of its own.
    let lines = world.test_shop_lines().join("\n");
    assert!(!lines.contains("cajaguard.invalid"), "{lines}");
}

/// The digest sees the product, not only the line and its price: an approval for 1 x Day pack at
/// USD 89.00 does not pay for another product at USD 89.00 on the same line.
#[test]
fn an_approval_never_pays_for_another_product_at_the_same_price() {
    let day_pack = |title: &str, product: &str| {
        let mut c = ready_checkout("gid://fixture/Checkout/1");
        c["line_items"] = json!([{ "id": "li_1", "item": { "id": product, "title": title, "price": 8900 }, "quantity": 1 }]);
        c["totals"] =
            json!([{ "type": "subtotal", "amount": 8900 }, { "type": "total", "amount": 8900 }]);
        c
    };
    let approved = day_pack("Day pack", "gid://fixture/Product/day-pack");
    let mut completed = approved.clone();
    completed["status"] = json!("completed");
    let world = World::with_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": approved}],
        "complete_checkout": [{"checkout": completed}],
    }}));
    let key = uuid();
    let mut mcp = world.proxy();
    let blocked = mcp.call(
        "complete_checkout",
        Mcp::complete_arguments("gid://fixture/Checkout/1", &key),
    );
    let (_, reason, request_id) = verdict(&blocked);
    assert_eq!(reason, "pending_approval", "{blocked}");
    let request_id = request_id.unwrap();
    let signed = world.cli(&["approve", &request_id, "--yes"]);
    assert!(
        signed.status.success(),
        "{}",
        String::from_utf8_lossy(&signed.stderr)
    );
    drop(mcp);

    // The shop now holds a tent footprint at the same price on the same line.
    let swapped = day_pack("Tent footprint", "gid://fixture/Product/tent-footprint");
    world.set_test_shop_script(&json!({ "on": { "get_checkout": [{"checkout": swapped}] }}));
    let mut mcp = world.proxy();
    let answer = mcp.call(
        "complete_checkout",
        Mcp::complete_arguments("gid://fixture/Checkout/1", &key),
    );
    let (verdict_now, reason, new_id) = verdict(&answer);
    assert_eq!(
        (verdict_now.as_str(), reason.as_str()),
        ("blocked", "pending_approval"),
        "{answer}"
    );
    assert_ne!(
        new_id.as_deref(),
        Some(request_id.as_str()),
        "a new request to approve"
    );
    let lines = world.test_shop_lines().join("\n");
    assert!(!lines.contains("\"complete_checkout\""), "{lines}");
}

/// An update or cancel must name its checkout as a plain string: an array, a number or an id with
/// spaces could reach a lenient shop as the claimed checkout while no lease covers it.
#[test]
fn updates_that_name_a_checkout_any_other_way_are_refused_before_the_shop() {
    let world = World::new();
    let mut mcp = world.proxy();
    let checkout_id = mcp.create_checkout("trail-socks", 2);
    for id in [
        json!([checkout_id]),
        json!({ "id": checkout_id }),
        json!(1),
        json!(format!("{checkout_id} ")),
        json!(format!("\t{checkout_id}")),
    ] {
        for tool in ["update_checkout", "cancel_checkout"] {
            let mut arguments = json!({ "meta": { "ucp-agent": { "profile": AGENT }, "idempotency-key": uuid() }, "id": id });
            if tool == "update_checkout" {
                arguments["checkout"] = json!({ "line_items": [{ "item": { "id": "gid://fixture/Product/down-parka" }, "quantity": 1 }] });
            }
            let answer = mcp.call(tool, arguments);
            assert_eq!(verdict(&answer).1, "bad_request", "{tool} {id}: {answer}");
        }
    }
    assert!(
        !world
            .shop_calls()
            .iter()
            .any(|(tool, _)| tool == "update_checkout" || tool == "cancel_checkout"),
        "none reached the shop"
    );
}

/// `complete_checkout` takes meta, id and checkout only, and names the instrument that pays.
#[test]
fn a_payment_with_extra_arguments_or_no_instrument_is_refused() {
    let world = World::new();
    let mut mcp = world.proxy();
    let checkout_id = mcp.create_checkout("trail-socks", 2);
    let mut extra = Mcp::complete_arguments(&checkout_id, &uuid());
    extra["line_items"] =
        json!([{ "item": { "id": "gid://fixture/Product/down-parka" }, "quantity": 1 }]);
    let answer = mcp.call("complete_checkout", extra);
    assert_eq!(verdict(&answer).1, "request_field_not_allowed", "{answer}");
    let mut bare = Mcp::complete_arguments(&checkout_id, &uuid());
    bare["checkout"]["payment"] = json!({ "instruments": [] });
    assert_eq!(
        verdict(&mcp.call("complete_checkout", bare)).1,
        "bad_request"
    );
    assert_eq!(world.completes_reaching_shop(&checkout_id), 0);
}

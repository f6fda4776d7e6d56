//! The report's scenarios for "the basket the shop completes is the basket the gate checked"
//! (SPEC §4 step 3a, §4.13, §6, §7): each flow end to end through real `cajaguard mcp` processes.

use std::time::Duration;

use anyhow::Result;
use cajaguard_harness::spec::{self, Setup};
use cajaguard_harness::{
    Mcp, Options, complete_args, completed, get_args, money, shop_checkout, shop_total,
    test_instrument, test_shop_script, update_args, uuid, verdict,
};
use serde_json::{Value, json};

use crate::scenarios::{attempt, pay_with_key, test_shop_world, yes_no};

fn wide_window() -> Value {
    json!({ "USD": { "approval_above": "100.00", "per_transaction": "100.00", "window": "100000.00" } })
}

fn fixture_checkout(mcp: &mut Mcp, checkout_id: &str) -> Value {
    mcp.call("get_checkout", get_args(checkout_id))["structuredContent"].clone()
}

/// 2 x Trail socks (USD 24.00, allowed) completed with an update to a Down parka (USD 219.00)
/// pipelined right behind it, at 20 offsets, half from a second session.
pub fn swap_behind_an_allowed_complete(setup: &Setup) -> Result<(String, bool)> {
    let world = setup.world(Options {
        caps: wide_window(),
        ..Options::default()
    });
    let mut payer = world.proxy();
    let mut other = world.proxy();
    let (mut completed, mut refused, mut swapped) = (0, 0, 0);
    for i in 0..20_u64 {
        let checkout = payer.create_checkout("trail-socks", 2);
        let pay = payer.send_request(
            "tools/call",
            json!({"name": "complete_checkout", "arguments": complete_args(&checkout, test_instrument(), &uuid(), json!({}))}),
        );
        std::thread::sleep(Duration::from_micros((i % 10) * 200));
        let update = json!({"name": "update_checkout", "arguments": update_args(&checkout, "down-parka", 1)});
        if i % 2 == 0 {
            let id = payer.send_request("tools/call", update);
            payer.answers_to(&[pay, id]);
        } else {
            let id = other.send_request("tools/call", update);
            other.answers_to(&[id]);
            payer.answers_to(&[pay]);
        }
        let now = fixture_checkout(&mut payer, &checkout);
        if now["status"] == "completed" {
            completed += 1;
            if shop_total(&now) != Some(2400) {
                swapped += 1;
            }
        } else {
            refused += 1;
        }
    }
    let (spent, in_flight) = world.spend("USD");
    let observed = format!(
        "{completed} completed (all as checked: {}), {refused} refused or updated first; {} counted, {} in flight",
        yes_no(swapped == 0),
        money("USD", spent),
        money("USD", in_flight),
    );
    let ok = swapped == 0 && completed > 0 && spent == completed * 2400 && in_flight == 0;
    Ok((observed, ok))
}

/// Live mode: an approved payment's outcome is lost; the retry (same key) reads another basket.
pub fn retry_with_another_basket(setup: &Setup) -> Result<(String, bool)> {
    let ready = shop_checkout("Day pack", 8900, 1, "ready_for_complete");
    let mut grown = ready.clone();
    grown["line_items"][0]["quantity"] = json!(2);
    let script = json!({ "on": {
        "get_checkout": [
            { "checkout": ready, "echo_id": true },
            { "checkout": ready, "echo_id": true },
            { "checkout": grown, "echo_id": true },
        ],
        "complete_checkout": [{ "hang": true }],
    }});
    let world = setup.world(Options {
        mode: "live",
        timeout_seconds: 1,
        shop: cajaguard_harness::Shop::Test(script),
        ..Options::default()
    });
    let mut mcp = world.proxy();
    let checkout = "gid://fixture/Checkout/retry-basket";
    let key = uuid();
    spec::approve_blocked(&world, &pay_with_key(&mut mcp, checkout, &key));
    let first = pay_with_key(&mut mcp, checkout, &key);
    let (retry, reached) = attempt(&world, checkout, || pay_with_key(&mut mcp, checkout, &key));
    let (v, r, _) = verdict(&retry);
    let at_shop = world.completes_reaching_shop(checkout);
    let observed = format!(
        "1st attempt {}; retry with the basket grown to 2: {v}/{r}, reached shop: {}; {at_shop} complete at the shop",
        if first.to_string().contains("outcome is unknown") {
            "outcome unknown"
        } else {
            "answered"
        },
        yes_no(reached),
    );
    Ok((
        observed,
        r == "payment_in_flight" && !reached && at_shop == 1,
    ))
}

/// An approval for 1 x Day pack (USD 89.00); the shop then holds another product at that price.
pub fn same_price_product_swap(setup: &Setup) -> Result<(String, bool)> {
    let day_pack = shop_checkout("Day pack", 8900, 1, "ready_for_complete");
    let world = test_shop_world(
        setup,
        Options::default(),
        &day_pack,
        vec![completed(&day_pack)],
    );
    let checkout = "gid://fixture/Checkout/same-price";
    let key = uuid();
    let mut mcp = world.proxy();
    let approved_id = spec::approve_blocked(&world, &pay_with_key(&mut mcp, checkout, &key));
    drop(mcp);
    let tent = shop_checkout("Tent footprint", 8900, 1, "ready_for_complete");
    world.set_test_shop_script(&test_shop_script(&tent, vec![completed(&tent)]));
    let mut mcp = world.proxy();
    let (result, reached) = attempt(&world, checkout, || pay_with_key(&mut mcp, checkout, &key));
    let (v, r, new_id) = verdict(&result);
    let observed = format!(
        "approved {approved_id} for the Day pack; with a Tent footprint at USD 89.00 on the line: {v}/{r} as {}, reached shop: {}",
        new_id.as_deref().unwrap_or("-"),
        yes_no(reached)
    );
    Ok((
        observed,
        r == "pending_approval" && new_id.as_deref() != Some(&approved_id) && !reached,
    ))
}

/// The shop charges, then answers with neither result nor error: 4 x USD 48.00 against USD 150.00.
pub fn malformed_answer_after_a_charge(setup: &Setup) -> Result<(String, bool)> {
    let bag = shop_checkout("Duffel bag", 4800, 1, "ready_for_complete");
    let options = Options {
        caps: json!({ "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } }),
        ..Options::default()
    };
    let world = test_shop_world(setup, options, &bag, vec![json!({ "bare": true })]);
    let mut mcp = world.proxy();
    let verdicts: Vec<String> = (0..4)
        .map(|n| verdict(&mcp.pay(&format!("gid://fixture/Checkout/bare-{n}"))).1)
        .collect();
    let (spent, in_flight) = world.spend("USD");
    let observed = format!(
        "{}; {} counted in flight, {} settled",
        verdicts.join(", "),
        money("USD", in_flight),
        money("USD", spent)
    );
    let ok = verdicts[..3].iter().all(|r| r == "within_caps")
        && verdicts[3] == "over_window_cap"
        && in_flight == 3 * 4800;
    Ok((observed, ok))
}

/// The shop completes at USD 26.00 a checkout quoted at USD 24.00.
pub fn mismatched_charge_freezes(setup: &Setup) -> Result<(String, bool)> {
    let socks = shop_checkout("Trail socks", 1200, 2, "ready_for_complete");
    let mut charged = socks.clone();
    charged["totals"] =
        json!([{ "type": "subtotal", "amount": 2600 }, { "type": "total", "amount": 2600 }]);
    let world = test_shop_world(setup, Options::default(), &socks, vec![completed(&charged)]);
    let mut mcp = world.proxy();
    let pay = |mcp: &mut Mcp, n: u32| mcp.pay(&format!("gid://fixture/Checkout/differs-{n}"));
    let first = pay(&mut mcp, 1);
    let mismatch = first["_meta"]["cajaguard"]["mismatch"]["fields"].clone();
    let (spent, _) = world.spend("USD");
    let mut second = world.proxy();
    let frozen = verdict(&pay(&mut second, 2)).1;
    let unfreeze_without_human = world.cli(&["unfreeze"]).status.code();
    let unfrozen = world.cli(&["unfreeze", "--yes"]).status.success();
    let after = verdict(&pay(&mut second, 3)).1;
    let observed = format!(
        "mismatch {mismatch}, {} counted; another process: {frozen}; unfreeze without a terminal exits {}; signed unfreeze: {}; next payment {after}",
        money("USD", spent),
        unfreeze_without_human.map_or("-".into(), |c| c.to_string()),
        yes_no(unfrozen),
    );
    let ok = mismatch == json!(["total"])
        && spent == 2600
        && frozen == "frozen"
        && unfreeze_without_human == Some(2)
        && unfrozen
        && after == "within_caps";
    Ok((observed, ok))
}

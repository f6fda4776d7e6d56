//! The report's scenarios for "the basket the shop completes is the basket the gate checked"
//! (SPEC §4 step 3a, §4.13, §6, §7): each flow end to end through real `cajaguard mcp` processes.

use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};

use crate::scenarios::{Ctx, approve_blocked, attempt, yes_no};
use crate::world::{self, Mcp, Options, Shop, instrument, uuid, verdict};

fn wide_window() -> Value {
    json!({ "USD": { "approval_above": "100.00", "per_transaction": "100.00", "window": "100000.00" } })
}

fn update_params(checkout_id: &str, slug: &str, quantity: u64) -> Result<Value> {
    Ok(json!({"name": "update_checkout", "arguments": {
        "meta": { "ucp-agent": { "profile": world::AGENT }, "idempotency-key": uuid()? },
        "id": checkout_id,
        "checkout": { "line_items": [{ "item": { "id": format!("gid://fixture/Product/{slug}") }, "quantity": quantity }] },
    }}))
}

fn fixture_checkout(mcp: &mut Mcp, checkout_id: &str) -> Result<Value> {
    let result = mcp.call(
        "get_checkout",
        json!({ "meta": { "ucp-agent": { "profile": world::AGENT } }, "id": checkout_id }),
    )?;
    Ok(result["structuredContent"].clone())
}

fn shop_total(checkout: &Value) -> Option<i64> {
    checkout["totals"]
        .as_array()?
        .iter()
        .find(|t| t["type"] == "total")?["amount"]
        .as_i64()
}

/// 2 x Trail socks (USD 24.00, allowed) completed with an update to a Down parka (USD 219.00)
/// pipelined right behind it, at 20 offsets, half from a second session.
pub fn swap_behind_an_allowed_complete(ctx: &Ctx) -> Result<(String, bool)> {
    let world = ctx.world(Options {
        caps: wide_window(),
        ..Options::default()
    })?;
    let mut payer = world.proxy()?;
    let mut other = world.proxy()?;
    let (mut completed, mut refused, mut swapped) = (0, 0, 0);
    for i in 0..20_u64 {
        let (checkout, _) = payer.create_checkout("trail-socks", 2)?;
        let pay = payer.send_request(
            "tools/call",
            json!({"name": "complete_checkout", "arguments": Mcp::complete_args(&checkout, instrument(world::TEST_HANDLER, world::TEST_TOKEN), &uuid()?, json!({}))}),
        )?;
        std::thread::sleep(Duration::from_micros((i % 10) * 200));
        let update = update_params(&checkout, "down-parka", 1)?;
        if i % 2 == 0 {
            let id = payer.send_request("tools/call", update)?;
            payer.wait_responses(&[pay, id])?;
        } else {
            let id = other.send_request("tools/call", update)?;
            other.wait_responses(&[id])?;
            payer.wait_responses(&[pay])?;
        }
        let now = fixture_checkout(&mut payer, &checkout)?;
        if now["status"] == "completed" {
            completed += 1;
            if shop_total(&now) != Some(2400) {
                swapped += 1;
            }
        } else {
            refused += 1;
        }
    }
    let (spent, in_flight) = world.spend("USD")?;
    let observed = format!(
        "{completed} completed (all as checked: {}), {refused} refused or updated first; {} counted, {} in flight",
        yes_no(swapped == 0),
        world::money("USD", spent),
        world::money("USD", in_flight),
    );
    let ok = swapped == 0 && completed > 0 && spent == completed * 2400 && in_flight == 0;
    Ok((observed, ok))
}

/// Live mode: an approved payment's outcome is lost; the retry (same key) reads another basket.
pub fn retry_with_another_basket(ctx: &Ctx) -> Result<(String, bool)> {
    let ready = world::shop_checkout("Day pack", 8900, 1, "ready_for_complete");
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
    let world = ctx.world(Options {
        mode: "live",
        timeout_seconds: 1,
        shop: Shop::Test(script),
        ..Options::default()
    })?;
    let mut mcp = world.proxy()?;
    let checkout = "gid://fixture/Checkout/retry-basket";
    let key = uuid()?;
    let pay = |mcp: &mut Mcp| {
        mcp.complete(
            checkout,
            instrument(world::TEST_HANDLER, world::TEST_TOKEN),
            &key,
            json!({}),
        )
    };
    approve_blocked(&world, &pay(&mut mcp)?)?;
    let first = pay(&mut mcp)?;
    let (retry, reached) = attempt(&world, checkout, || pay(&mut mcp))?;
    let (v, r, _) = verdict(&retry);
    let observed = format!(
        "1st attempt {}; retry with the basket grown to 2: {v}/{r}, reached shop: {}; {} complete at the shop",
        if first.to_string().contains("outcome is unknown") {
            "outcome unknown"
        } else {
            "answered"
        },
        yes_no(reached),
        world.completes_reaching_shop(checkout)?,
    );
    Ok((
        observed,
        r == "payment_in_flight" && !reached && world.completes_reaching_shop(checkout)? == 1,
    ))
}

/// An approval for 1 x Day pack (USD 89.00); the shop then holds another product at that price.
pub fn same_price_product_swap(ctx: &Ctx) -> Result<(String, bool)> {
    let day_pack = world::shop_checkout("Day pack", 8900, 1, "ready_for_complete");
    let world = ctx.world(Options {
        shop: Shop::Test(world::test_shop_script(
            &day_pack,
            vec![world::completed(&day_pack)],
        )),
        ..Options::default()
    })?;
    let checkout = "gid://fixture/Checkout/same-price";
    let key = uuid()?;
    let pay = |mcp: &mut Mcp| {
        mcp.complete(
            checkout,
            instrument(world::TEST_HANDLER, world::TEST_TOKEN),
            &key,
            json!({}),
        )
    };
    let mut mcp = world.proxy()?;
    let approved_id = approve_blocked(&world, &pay(&mut mcp)?)?;
    drop(mcp);
    let tent = world::shop_checkout("Tent footprint", 8900, 1, "ready_for_complete");
    world.rewrite_script(&world::test_shop_script(
        &tent,
        vec![world::completed(&tent)],
    ))?;
    let mut mcp = world.proxy()?;
    let (result, reached) = attempt(&world, checkout, || pay(&mut mcp))?;
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
pub fn malformed_answer_after_a_charge(ctx: &Ctx) -> Result<(String, bool)> {
    let bag = world::shop_checkout("Duffel bag", 4800, 1, "ready_for_complete");
    let world = ctx.world(Options {
        caps: json!({ "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } }),
        shop: Shop::Test(world::test_shop_script(&bag, vec![json!({ "bare": true })])),
        ..Options::default()
    })?;
    let mut mcp = world.proxy()?;
    let mut verdicts = Vec::new();
    for n in 0..4 {
        let checkout = format!("gid://fixture/Checkout/bare-{n}");
        let result = mcp.complete(
            &checkout,
            instrument(world::TEST_HANDLER, world::TEST_TOKEN),
            &uuid()?,
            json!({}),
        )?;
        verdicts.push(verdict(&result).1);
    }
    let (spent, in_flight) = world.spend("USD")?;
    let observed = format!(
        "{}; {} counted in flight, {} settled",
        verdicts.join(", "),
        world::money("USD", in_flight),
        world::money("USD", spent)
    );
    let ok = verdicts[..3].iter().all(|r| r == "within_caps")
        && verdicts[3] == "over_window_cap"
        && in_flight == 3 * 4800;
    Ok((observed, ok))
}

/// The shop completes at USD 26.00 a checkout quoted at USD 24.00.
pub fn mismatched_charge_freezes(ctx: &Ctx) -> Result<(String, bool)> {
    let socks = world::shop_checkout("Trail socks", 1200, 2, "ready_for_complete");
    let mut charged = socks.clone();
    charged["totals"] =
        json!([{ "type": "subtotal", "amount": 2600 }, { "type": "total", "amount": 2600 }]);
    let world = ctx.world(Options {
        shop: Shop::Test(world::test_shop_script(
            &socks,
            vec![world::completed(&charged)],
        )),
        ..Options::default()
    })?;
    let mut mcp = world.proxy()?;
    let pay = |mcp: &mut Mcp, n: u32| -> Result<Value> {
        mcp.complete(
            &format!("gid://fixture/Checkout/differs-{n}"),
            instrument(world::TEST_HANDLER, world::TEST_TOKEN),
            &uuid()?,
            json!({}),
        )
    };
    let first = pay(&mut mcp, 1)?;
    let mismatch = first["_meta"]["cajaguard"]["mismatch"]["fields"].clone();
    let (spent, _) = world.spend("USD")?;
    let mut second = world.proxy()?;
    let frozen = verdict(&pay(&mut second, 2)?).1;
    let unfreeze_without_human = world.cli(&["unfreeze"])?.status.code();
    let unfrozen = world.cli(&["unfreeze", "--yes"])?.status.success();
    let after = verdict(&pay(&mut second, 3)?).1;
    let observed = format!(
        "mismatch {mismatch}, {} counted; another process: {frozen}; unfreeze without a terminal exits {}; signed unfreeze: {}; next payment {after}",
        world::money("USD", spent),
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

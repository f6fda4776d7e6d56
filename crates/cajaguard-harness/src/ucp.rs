//! UCP as an agent and a shop write it: the agent's profile and test credentials, checkout
//! arguments, instruments and ids; the checkouts a good shop answers; the gate's verdict read back
//! from a result; money as the report prints it.

use serde_json::{Value, json};

pub const AGENT: &str = "https://agent.example/profiles/test.json";
pub const TEST_TOKEN: &str = "cg_test_e2e_token_01";
pub const TEST_HANDLER: &str = "fixture_test_handler";

/// Strings that must never appear in an answer (SPEC §11.4): the test token, a card number and a
/// live-looking token the tripwire scenarios send.
pub const SECRETS: [&str; 3] = [TEST_TOKEN, "4111111111111111", "sk_live_51"];

pub fn instrument(handler: &str, token: &str) -> Value {
    json!({ "id": "pi_1", "handler_id": handler, "type": "card", "credential": { "type": "token", "token": token } })
}

/// The instrument the test-mode config accepts: the test handler with the test token.
pub fn test_instrument() -> Value {
    instrument(TEST_HANDLER, TEST_TOKEN)
}

/// A raw card number where a token belongs (the tripwire's business).
pub fn raw_card_instrument() -> Value {
    json!({ "id": "pi_1", "handler_id": TEST_HANDLER, "type": "card",
            "credential": { "type": "card", "number": "4111111111111111", "expiry_month": 12, "expiry_year": 2030 } })
}

/// A random v4-shaped UUID (unique idempotency keys, not cryptographic ones).
pub fn uuid() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    let h = hex::encode(bytes);
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// `meta` of a call from the test agent under a fresh idempotency key.
pub fn meta() -> Value {
    json!({ "ucp-agent": { "profile": AGENT }, "idempotency-key": uuid() })
}

/// `checkout.line_items` of `quantity` x the fixture product `slug`.
pub fn line_items(slug: &str, quantity: u64) -> Value {
    json!([{ "item": { "id": format!("gid://fixture/Product/{slug}") }, "quantity": quantity }])
}

/// `update_checkout` arguments that replace the line items.
pub fn update_args(checkout_id: &str, slug: &str, quantity: u64) -> Value {
    json!({ "meta": meta(), "id": checkout_id, "checkout": { "line_items": line_items(slug, quantity) } })
}

/// `get_checkout` arguments.
pub fn get_args(checkout_id: &str) -> Value {
    json!({ "meta": { "ucp-agent": { "profile": AGENT } }, "id": checkout_id })
}

/// `complete_checkout` arguments with one instrument; `extra` is merged into `checkout`.
pub fn complete_args(checkout_id: &str, instrument: Value, key: &str, extra: Value) -> Value {
    let mut checkout = json!({ "payment": { "instruments": [instrument] } });
    if let (Some(target), Some(extra)) = (checkout.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            target.insert(k.clone(), v.clone());
        }
    }
    json!({
        "meta": { "ucp-agent": { "profile": AGENT }, "idempotency-key": key },
        "id": checkout_id,
        "checkout": checkout,
    })
}

/// `(verdict, reason, request_id)` of a complete_checkout result: `structuredContent.cajaguard`
/// when refused (or forwarded without an answer), `_meta.cajaguard` when the shop answered.
pub fn verdict(result: &Value) -> (String, String, Option<String>) {
    let gate = match result["structuredContent"].get("cajaguard") {
        Some(gate) => gate,
        None => &result["_meta"]["cajaguard"],
    };
    (
        gate["verdict"]
            .as_str()
            .unwrap_or_else(|| panic!("no verdict in {result}"))
            .to_owned(),
        gate["reason"].as_str().unwrap_or("").to_owned(),
        gate["request_id"].as_str().map(str::to_owned),
    )
}

/// `USD 24.00` from a UCP checkout's currency and `total` entry (`-` when it is not minor units).
pub fn total_of(checkout: &Value) -> String {
    let currency = checkout["currency"].as_str().unwrap_or("?");
    match shop_total(checkout) {
        Some(minor) => money(currency, minor),
        None => "-".to_owned(),
    }
}

/// The `total` entry of a UCP checkout, in minor units.
pub fn shop_total(checkout: &Value) -> Option<i64> {
    checkout["totals"]
        .as_array()?
        .iter()
        .find(|t| t["type"] == "total")?["amount"]
        .as_i64()
}

/// Minor units in major units for the two currencies the fixture sells in.
pub fn money(currency: &str, minor: i64) -> String {
    match currency {
        "JPY" => format!("JPY {minor}"),
        _ => format!(
            "{currency} {}.{:02}",
            minor.div_euclid(100),
            minor.rem_euclid(100)
        ),
    }
}

/// A checkout as a well-behaved shop reports it (2 x Trail socks, USD 24.00, ready).
pub fn ready_checkout(id: &str) -> Value {
    let mut checkout = shop_checkout("Trail socks", 1200, 2, "ready_for_complete");
    checkout["id"] = json!(id);
    checkout["line_items"][0]["item"]["id"] = json!("gid://fixture/Product/trail-socks");
    checkout["continue_url"] = json!("https://demo-outfitters.example/checkouts/1");
    checkout
}

/// A checkout of `quantity` x `title` at `price` as a good shop reports it (for the test shop;
/// `id` is echoed per call).
pub fn shop_checkout(title: &str, price: i64, quantity: i64, status: &str) -> Value {
    let total = price * quantity;
    json!({
        "ucp": { "version": "2026-08-25", "status": "success" },
        "id": "gid://fixture/Checkout/echo",
        "status": status,
        "currency": "USD",
        "line_items": [{ "id": "li_1", "item": { "id": format!("gid://fixture/Product/{title}"), "title": title, "price": price }, "quantity": quantity,
                         "totals": [{ "type": "subtotal", "amount": total }, { "type": "total", "amount": total }] }],
        "totals": [{ "type": "subtotal", "amount": total }, { "type": "total", "amount": total }],
        "links": [{ "type": "terms_of_service", "url": "https://demo-outfitters.example/policies/terms" }],
        "continue_url": "https://demo-outfitters.example/checkouts/echo",
    })
}

/// A test shop script: `get_checkout` answers `ready` (any id), `complete_checkout` runs
/// `completes` in order (the last repeats).
pub fn test_shop_script(ready: &Value, completes: Vec<Value>) -> Value {
    json!({ "on": {
        "get_checkout": [{ "checkout": ready, "echo_id": true }],
        "complete_checkout": completes,
    }})
}

/// A `complete_checkout` action that answers the checkout as completed.
pub fn completed(ready: &Value) -> Value {
    let mut done = ready.clone();
    done["status"] = json!("completed");
    json!({ "checkout": done, "echo_id": true })
}

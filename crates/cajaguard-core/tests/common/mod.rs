//! Fixtures shared by the integration tests: a policy, the fixture shop's checkouts, complete
//! requests, keys and approvals. Shapes follow the pinned UCP schemas.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use cajaguard_core::approval::{
    self, ApprovalDocument, ApprovalTerms, BasketDigest, Decision, SigningKey,
};
use cajaguard_core::policy::{ConfigOrigin, Policy};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::Instrument;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::macros::datetime;

pub const NOW: OffsetDateTime = datetime!(2026-08-25 12:00 UTC);
pub const TEST_TOKEN: &str = "cg_test_tok_4242abcd";
pub const PAN: &str = "4111111111111111";
pub const CONFIG_PATH: &str = "/etc/cajaguard/policy.json";

/// Strings that must never appear in a ruling's detail or JSON.
pub const SECRETS: &[&str] = &[
    TEST_TOKEN,
    PAN,
    "4111 1111 1111 1111",
    "sk_live_",
    "tok_live_",
    "cg_test_",
];

pub fn config_json() -> Value {
    json!({
        "mode": "test",
        "home": "../.cajaguard",
        "downstream": { "command": "cajaguard-fixture-shop", "args": [], "cwd": "..", "env": {} },
        "merchants": ["demo-outfitters.example", "tokyo-tea.example"],
        "caps": {
            "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" },
            "JPY": { "approval_above": "5000", "per_transaction": "12000", "window": "20000" }
        },
        "window_hours": 24,
        "approvals": { "trusted_keys": ["~/.config/cajaguard/approver.pub.pem"], "max_ttl_minutes": 15 },
        "test_mode": { "handler_ids": ["fixture_test_handler"], "token_pattern": "^cg_test_[A-Za-z0-9_]{8,}$" }
    })
}

pub fn policy_from(config: &Value) -> Policy {
    let origin = ConfigOrigin {
        path: Path::new(CONFIG_PATH),
        user_home: Some(Path::new("/home/ana")),
    };
    Policy::parse(&config.to_string(), &origin).unwrap()
}

pub fn policy() -> Policy {
    policy_from(&config_json())
}

pub struct Line {
    pub id: &'static str,
    pub title: &'static str,
    pub price: i64,
    pub qty: i64,
}

pub const SOCKS: (&str, &str, i64) = ("trail_socks", "Trail socks", 1200);
pub const SHELL: (&str, &str, i64) = ("rain_shell", "Rain shell", 4500);
pub const PACK: (&str, &str, i64) = ("day_pack", "Day pack", 8900);
pub const PARKA: (&str, &str, i64) = ("down_parka", "Down parka", 21900);
pub const STOVE: (&str, &str, i64) = ("camp_stove", "Camp stove", 7900);
pub const SENCHA: (&str, &str, i64) = ("sencha_tin", "Sencha tin", 1800);
pub const TEA_SET: (&str, &str, i64) = ("tea_set", "Tea set", 9800);

/// The fixture shop's `get_checkout` answer for one product line.
pub fn shop_checkout(
    merchant: &str,
    currency: &str,
    product: (&str, &str, i64),
    qty: i64,
    status: &str,
) -> Value {
    let (id, title, price) = product;
    let total = price * qty;
    json!({
        "ucp": { "version": "2026-08-25", "capabilities": {} },
        "id": "gid://fixture/Checkout/1",
        "status": status,
        "currency": currency,
        "line_items": [{
            "id": "li_1",
            "item": { "id": id, "title": title, "price": price },
            "quantity": qty,
            "totals": [{ "type": "subtotal", "amount": total }, { "type": "total", "amount": total }]
        }],
        "totals": [{ "type": "subtotal", "amount": total }, { "type": "total", "amount": total }],
        "links": [{ "type": "terms_of_service", "url": format!("https://{merchant}/terms") }],
        "continue_url": format!("https://{merchant}/checkout/1"),
        "payment": { "instruments": [] }
    })
}

pub fn usd(product: (&str, &str, i64), qty: i64) -> Value {
    shop_checkout(
        "demo-outfitters.example",
        "USD",
        product,
        qty,
        "ready_for_complete",
    )
}

pub fn instrument(handler: &str, credential: Value) -> Value {
    json!({ "id": "instr_1", "handler_id": handler, "type": "card", "selected": true,
            "display": { "brand": "visa", "last_digits": "4242" }, "credential": credential })
}

pub fn token_credential(token: &str) -> Value {
    json!({ "type": "token", "token": token })
}

pub fn complete_args_with(instrument: Value) -> Value {
    json!({
        "meta": {
            "ucp-agent": { "profile": "https://agent.example/profile.json" },
            "idempotency-key": "2c9a1f5e-8d3b-4a71-9e02-6f4b3c2d1a00"
        },
        "id": "gid://fixture/Checkout/1",
        "checkout": { "payment": { "instruments": [instrument] } }
    })
}

pub fn complete_args() -> Value {
    complete_args_with(instrument(
        "fixture_test_handler",
        token_credential(TEST_TOKEN),
    ))
}

pub fn trusted_key() -> SigningKey {
    SigningKey::from_seed(&[7u8; 32])
}

pub fn untrusted_key() -> SigningKey {
    SigningKey::from_seed(&[9u8; 32])
}

pub fn terms_for(
    quote: &Quote,
    instruments: &[Instrument],
    decision: Decision,
    issued_at: OffsetDateTime,
    ttl: Duration,
) -> ApprovalTerms {
    let digest = BasketDigest::of(quote, instruments);
    ApprovalTerms {
        request_id: digest.request_id(),
        digest,
        decision,
        merchant: quote.merchant.clone().unwrap_or_default(),
        checkout_id: quote.checkout_id.clone(),
        currency: quote.currency.clone(),
        total: quote.total,
        issued_at,
        ttl,
        nonce: [0x5a; 16],
        note: "ok for the day pack".to_owned(),
        checkpoint: None,
    }
}

pub fn sign(key: &SigningKey, terms: &ApprovalTerms) -> ApprovalDocument {
    approval::sign(key, terms)
}

pub fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

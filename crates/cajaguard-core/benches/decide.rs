//! The gate's cost per `complete_checkout`: `decide` on a ~2 KB checkout (allow, blocked, with
//! approval verification) and the tripwire on ~2 KB of arguments. Targets (medians): decide
//! without crypto <= 5 µs, with approval verification <= 50 µs, tripwire <= 10 µs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use cajaguard_core::approval::{
    self, ApprovalTerms, BasketDigest, Decision, SigningKey, TrustedKeys,
};
use cajaguard_core::effect::{ApprovalCandidate, CheckoutLedger, LedgerView};
use cajaguard_core::gate::{self, Facts};
use cajaguard_core::policy::{ConfigOrigin, Policy};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use cajaguard_core::tripwire;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use time::macros::datetime;

fn policy() -> Policy {
    let config = json!({
        "mode": "test", "home": "../.cajaguard", "downstream": {"command": "cajaguard-fixture-shop"},
        "merchants": ["demo-outfitters.example", "tokyo-tea.example"],
        "caps": {"USD": {"approval_above": "50.00", "per_transaction": "100.00", "window": "150.00"}},
        "approvals": {"trusted_keys": ["keys/approver.pub.pem"], "max_ttl_minutes": 15}
    });
    let origin = ConfigOrigin {
        path: Path::new("/etc/cajaguard/policy.json"),
        user_home: None,
    };
    Policy::parse(&config.to_string(), &origin).unwrap()
}

/// A checkout of about 2 KB with `n` line items summing to `total_each * n`.
fn checkout(n: usize, price: i64) -> Value {
    let items: Vec<Value> = (0..n)
        .map(|i| {
            json!({"id": format!("li_{i}"), "item": {"id": format!("sku_{i}"), "title": format!("Product number {i}"), "price": price,
                   "image_url": format!("https://demo-outfitters.example/img/{i}.png")},
                   "quantity": 1, "totals": [{"type": "subtotal", "amount": price}, {"type": "total", "amount": price}]})
        })
        .collect();
    let total = price * n as i64;
    json!({
        "ucp": {"version": "2026-08-25", "capabilities": {}},
        "id": "gid://fixture/Checkout/1", "status": "ready_for_complete", "currency": "USD",
        "line_items": items,
        "totals": [{"type": "subtotal", "amount": total}, {"type": "tax", "amount": 0}, {"type": "total", "amount": total}],
        "links": [{"type": "terms_of_service", "url": "https://demo-outfitters.example/terms"},
                  {"type": "privacy_policy", "url": "https://demo-outfitters.example/privacy"}],
        "continue_url": "https://demo-outfitters.example/checkout/1",
        "messages": [{"type": "info", "content": "Free shipping on orders over USD 50.00"}]
    })
}

fn args() -> Value {
    json!({
        "meta": {"ucp-agent": {"profile": "https://agent.example/.well-known/ucp/profile.json"},
                 "idempotency-key": "2c9a1f5e-8d3b-4a71-9e02-6f4b3c2d1a00"},
        "id": "gid://fixture/Checkout/1",
        "checkout": {
            "payment": {"instruments": [{
                "id": "instr_1", "handler_id": "fixture_test_handler", "type": "card", "selected": true,
                "display": {"brand": "visa", "last_digits": "4242", "expiry_month": 12, "expiry_year": 2030},
                "billing_address": {"street_address": "1600 Amphitheatre Pkwy", "address_locality": "Mountain View",
                                    "address_region": "CA", "postal_code": "94043", "address_country": "US",
                                    "first_name": "Ana", "last_name": "Buyer"},
                "credential": {"type": "token", "token": "cg_test_tok_4242abcd"}}]},
            "signals": {"dev.ucp.buyer_ip": "203.0.113.7", "dev.ucp.user_agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/128.0 Safari/537.36",
                        "session": "b7c4e1a2-3f5d-4e6a-9b8c-0d1e2f3a4b5c", "device": {"screen": "1920x1080", "tz": "America/Los_Angeles", "lang": "en-US"}},
            "attribution": {"campaign": "summer-sale-2026", "source": "agent", "medium": "assistant",
                            "note": "Buyer asked for two pairs of trail socks in size M, delivery before Friday, gift wrap if possible. Order reference 12-3456-7890."},
            "ap2": {"checkout_mandate": "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJjaGVja291dF9pZCI6ImdpZDovL2ZpeHR1cmUvQ2hlY2tvdXQvMSIsInRvdGFsIjo4OTAwfQ.c2lnbmF0dXJlLXBsYWNlaG9sZGVyLWZvci1iZW5jaG1hcmtpbmctb25seQ"}
        },
        "notes": ["Leave at the front desk", "Call 415-555-0100 on arrival", "Second request id 7f3e9a10-1b2c-4d5e-8f90-a1b2c3d4e5f6"],
        "shipping": {"name": "Ana Buyer", "street": "500 Terry A Francois Blvd", "city": "San Francisco", "region": "CA",
                     "postal_code": "94158", "country": "US", "phone": "+1 415 555 0100", "instructions": "Ring twice; the buzzer is on the left."},
        "context": {"locale": "en-US", "currency_hint": "USD", "country": "US", "history": ["search socks", "view item trail_socks", "add to cart", "create checkout", "update checkout", "get checkout"]}
    })
}

fn bench(c: &mut Criterion) {
    let policy = policy();
    let now = datetime!(2026-08-25 12:00 UTC);
    let args = args();
    let request = CompleteRequest::from_args(&json!({
        "meta": args["meta"].clone(), "id": args["id"].clone(), "checkout": {"payment": args["checkout"]["payment"].clone()}
    }))
    .unwrap();
    let ledger = LedgerView {
        window_spent: 2400,
        checkout: CheckoutLedger::Fresh,
        frozen: None,
    };
    let key = SigningKey::from_seed(&[7u8; 32]);
    let trusted = TrustedKeys(vec![key.public_key()]);

    let small = checkout(8, 300); // USD 24.00: allow
    let big = checkout(8, 1100); // USD 88.00: needs approval
    println!(
        "checkout sizes: {} and {} bytes; args {} bytes",
        small.to_string().len(),
        big.to_string().len(),
        args.to_string().len()
    );
    let q_small = Quote::from_shop(&small).unwrap();
    let q_big = Quote::from_shop(&big).unwrap();

    let digest = BasketDigest::of(&q_big, &request.instruments);
    let doc = approval::sign(
        &key,
        &ApprovalTerms {
            request_id: digest.request_id(),
            digest,
            decision: Decision::Approve,
            merchant: "demo-outfitters.example".into(),
            checkout_id: q_big.checkout_id.clone(),
            currency: "USD".into(),
            total: q_big.total,
            issued_at: now - time::Duration::minutes(1),
            ttl: Duration::from_secs(900),
            nonce: [0x5a; 16],
            note: "bench".into(),
        },
    );
    let candidates = vec![ApprovalCandidate {
        document: doc,
        used: false,
    }];

    let d_small = BasketDigest::of(&q_small, &request.instruments);
    let facts = |quote, digest, approvals| Facts {
        request: &request,
        quote,
        digest,
        ledger: &ledger,
        approvals,
        passkey_approvals: &[],
        trusted_keys: &trusted,
        now,
    };

    c.bench_function("decide/allow_2kb", |b| {
        let f = facts(&q_small, &d_small, &[]);
        b.iter(|| gate::decide(black_box(&policy), black_box(&f)))
    });
    c.bench_function("decide/blocked_pending_2kb", |b| {
        let f = facts(&q_big, &digest, &[]);
        b.iter(|| gate::decide(black_box(&policy), black_box(&f)))
    });
    c.bench_function("decide/approved_with_verification_2kb", |b| {
        let f = facts(&q_big, &digest, &candidates);
        b.iter(|| gate::decide(black_box(&policy), black_box(&f)))
    });
    c.bench_function("approval/basket_digest", |b| {
        b.iter(|| BasketDigest::of(black_box(&q_big), black_box(&request.instruments)))
    });
    c.bench_function("approval/verify", |b| {
        b.iter(|| {
            approval::verify(
                black_box(&candidates[0].document),
                &trusted,
                &digest,
                now,
                Duration::from_secs(900),
            )
        })
    });
    c.bench_function("approval/signed_message", |b| {
        b.iter(|| black_box(&candidates[0].document).signed_message())
    });
    c.bench_function("tripwire/scan_2kb_args", |b| {
        b.iter(|| tripwire::scan(black_box(&policy.test_mode), black_box(&args)))
    });
    // What the proxy scans for every forwarded call: the whole params, `_meta` included.
    let params = json!({"name": "complete_checkout", "arguments": args,
                        "_meta": {"progressToken": "9c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e5f"}});
    c.bench_function("tripwire/scan_params_2kb", |b| {
        b.iter(|| tripwire::scan_params(black_box(&policy.test_mode), black_box(&params)))
    });
    c.bench_function("quote/from_shop_2kb", |b| {
        b.iter(|| Quote::from_shop(black_box(&big)))
    });
    c.bench_function("precheck/2kb_args", |b| {
        b.iter(|| gate::precheck(black_box(&policy), black_box(&args)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

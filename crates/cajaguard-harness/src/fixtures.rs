//! Pure inputs for the core and the store, built once for the core bench, the report's timings,
//! the store tests and the soak: a policy, ~2 KB checkouts and arguments, requests and quotes,
//! approval terms, the outcomes `decide` returns, and a seeded SQLite ledger.
//!
//! The fuzz targets keep their own (the fuzz crate is outside the workspace, and this crate would
//! bring the whole binary crate, SQLite and PostgreSQL into every fuzz build).

use std::path::Path;
use std::time::Duration;

use cajaguard::store::{AuditRecord, Gated, Store, StoreError};
use cajaguard_core::agent::AgentId;
use cajaguard_core::approval::{ApprovalTerms, BasketDigest, Decision, TrustedKeys};
use cajaguard_core::effect::{ApprovalCandidate, Effect, LedgerView, Outcome};
use cajaguard_core::gate::{self, Facts};
use cajaguard_core::policy::{ConfigOrigin, Policy, StoreConfig, StoreUrl};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::{CompleteRequest, Instrument};
use cajaguard_core::verdict::{Reason, Ruling};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::ucp::TEST_HANDLER;

pub const MERCHANT: &str = "demo-outfitters.example";

/// A test-mode policy for the fixture's merchants with USD caps 50 / 100 / `window`.
pub fn policy(window: &str) -> Policy {
    let config = json!({
        "mode": "test", "home": "../.cajaguard", "downstream": {"command": "cajaguard-fixture-shop"},
        "merchants": [MERCHANT, "tokyo-tea.example"],
        "caps": {"USD": {"approval_above": "50.00", "per_transaction": "100.00", "window": window}},
        "approvals": {"trusted_keys": ["keys/approver.pub.pem"], "max_ttl_minutes": 15},
        "test_mode": {"handler_ids": [TEST_HANDLER], "token_pattern": "^cg_test_[A-Za-z0-9_]{8,}$"}
    });
    let origin = ConfigOrigin {
        path: Path::new("/etc/cajaguard/policy.json"),
        user_home: None,
    };
    Policy::parse(&config.to_string(), &origin)
        .unwrap_or_else(|e| panic!("the fixture policy: {e}"))
}

/// A checkout of about 2 KB with `n` line items at `price` each.
pub fn checkout_2kb(n: usize, price: i64) -> Value {
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

/// ~2 KB of complete_checkout arguments: one test instrument with display and billing details,
/// signals, attribution, notes and context an agent might send along.
pub fn complete_args_2kb() -> Value {
    json!({
        "meta": {"ucp-agent": {"profile": "https://agent.example/.well-known/ucp/profile.json"},
                 "idempotency-key": "2c9a1f5e-8d3b-4a71-9e02-6f4b3c2d1a00"},
        "id": "gid://fixture/Checkout/1",
        "checkout": {
            "payment": {"instruments": [{
                "id": "instr_1", "handler_id": TEST_HANDLER, "type": "card", "selected": true,
                "display": {"brand": "visa", "last_digits": "4242", "expiry_month": 12, "expiry_year": 2030},
                "billing_address": {"street_address": "1600 Amphitheatre Pkwy", "address_locality": "Mountain View",
                                    "address_region": "CA", "postal_code": "94043", "address_country": "US",
                                    "first_name": "Ana", "last_name": "Buyer"},
                "credential": {"type": "token", "token": "cg_test_tok_4242abcd"}}]},
            "signals": {"dev.ucp.buyer_ip": "203.0.113.7", "dev.ucp.user_agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/128.0 Safari/537.36",
                        "session": "b7c4e1a2-3f5d-4e6a-9b8c-0d1e2f3a4b5c", "device": {"screen": "1920x1080", "tz": "America/Los_Angeles", "lang": "en-US"}},
            "attribution": {"campaign": "summer-sale-2026", "source": "agent", "medium": "assistant",
                            "note": "Buyer asked for two pairs of trail socks in size M, delivery before Friday, gift wrap if possible. Order reference 12-3456-7890."}
        },
        "notes": ["Leave at the front desk", "Call 415-555-0100 on arrival", "Second request id 7f3e9a10-1b2c-4d5e-8f90-a1b2c3d4e5f6"],
        "context": {"locale": "en-US", "currency_hint": "USD", "country": "US", "history": ["search socks", "view item trail_socks", "add to cart", "create checkout", "update checkout", "get checkout"]}
    })
}

/// The request the gate reads from `args` (meta, id and the payment only).
pub fn request_of(args: &Value) -> CompleteRequest {
    CompleteRequest::from_args(&json!({
        "meta": args["meta"].clone(), "id": args["id"].clone(), "checkout": {"payment": args["checkout"]["payment"].clone()}
    }))
    .unwrap_or_else(|r| panic!("the fixture request: {}", r.detail()))
}

/// The quote the gate reads from a shop's checkout.
pub fn quote_of(checkout: &Value) -> Quote {
    Quote::from_shop(checkout).unwrap_or_else(|r| panic!("the fixture checkout: {}", r.detail()))
}

/// A payment of `checkout` with the test handler under the key `key-<checkout>`.
pub fn request(checkout: &str) -> CompleteRequest {
    CompleteRequest {
        checkout_id: checkout.to_owned(),
        idempotency_key: format!("key-{checkout}"),
        agent_profile: "https://agent.example/profile".to_owned(),
        handler_ids: vec![TEST_HANDLER.to_owned()],
        instruments: vec![Instrument::of_handler(TEST_HANDLER)],
    }
}

/// A ready USD quote of `total` from the fixture's merchant, with no line items.
pub fn quote(checkout: &str, total: i64) -> Quote {
    Quote {
        checkout_id: checkout.to_owned(),
        status: "ready_for_complete".to_owned(),
        currency: "USD".to_owned(),
        total,
        merchant: Some(MERCHANT.to_owned()),
        ..Quote::default()
    }
}

/// Terms approving the basket `digest` (checkout `checkout_id`, USD `total`) issued at
/// `issued_at` for 15 minutes; change what a caller needs with struct update syntax.
pub fn approval_terms(
    digest: BasketDigest,
    checkout_id: &str,
    total: i64,
    issued_at: OffsetDateTime,
) -> ApprovalTerms {
    ApprovalTerms {
        request_id: digest.request_id(),
        digest,
        decision: Decision::Approve,
        merchant: MERCHANT.to_owned(),
        checkout_id: checkout_id.to_owned(),
        currency: "USD".to_owned(),
        total,
        issued_at,
        ttl: Duration::from_secs(900),
        nonce: [0x5a; 16],
        note: String::new(),
        checkpoint: None,
    }
}

/// What `decide` returns for an allowed USD payment of `total` on basket `digest`, using the
/// approval with `nonce` if one is named.
pub fn forward(total: i64, digest: BasketDigest, nonce: Option<String>) -> Outcome {
    Outcome {
        ruling: Ruling::new(Reason::WithinCaps, ""),
        effect: Effect::Forward {
            currency: "USD".to_owned(),
            total,
            merchant: MERCHANT.to_owned(),
            digest,
            use_approval_nonce: nonce,
            advance_passkey: None,
        },
    }
}

/// What `decide` returns for a refusal with `reason` (no pending request).
pub fn refuse(reason: Reason) -> Outcome {
    Outcome {
        ruling: Ruling::new(reason, ""),
        effect: Effect::Refuse { pending: None },
    }
}

/// `rows` settled checkouts over the 90 days before `now` (row `i` charged `amount(i)`, a third in
/// JPY), and their hourly buckets, straight into the SQLite store at `db` in one unsynced
/// transaction (through `gate` it would cost one fsync per row), then checkpointed so that the
/// first measured syncs do not pay for the seed.
pub fn seed_sqlite_ledger(db: &Path, rows: u64, now: OffsetDateTime, amount: fn(u64) -> i64) {
    let mut conn = rusqlite::Connection::open(db).unwrap();
    conn.pragma_update(None, "synchronous", "OFF").unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO ledger (checkout_id, idempotency_key, merchant, currency, reserved, charged, state,
                                     hour, reserved_at, settled_at)
                 VALUES (?1, ?2, 'demo-outfitters.example', ?3, ?4, ?4, 'settled', ?5, ?6, ?6)",
            )
            .unwrap();
        for i in 0..rows {
            let at = now.unix_timestamp() - (i % (90 * 24)) as i64 * 3600 - (i % 3600) as i64;
            let currency = if i % 3 == 0 { "JPY" } else { "USD" };
            insert
                .execute(rusqlite::params![
                    format!("gid://seed/Checkout/{i}"),
                    format!("seed-{i}"),
                    currency,
                    amount(i),
                    at.div_euclid(3600),
                    at * 1_000_000
                ])
                .unwrap();
        }
    }
    tx.execute(
        "INSERT INTO spend_buckets (currency, hour, settled, in_flight)
         SELECT currency, hour, SUM(charged), 0 FROM ledger GROUP BY currency, hour",
        [],
    )
    .unwrap();
    tx.commit().unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

/// The same rows as [`seed_sqlite_ledger`] with `100 + i % 900` minor units each, made by the
/// PostgreSQL server behind `client` (a million round trips would take minutes).
pub fn seed_postgres_ledger(client: &mut postgres::Client, rows: u64, now: OffsetDateTime) {
    client
        .batch_execute(&format!(
            "INSERT INTO ledger (checkout_id, idempotency_key, merchant, currency, reserved, charged, state,
                                 hour, reserved_at, settled_at)
             SELECT 'gid://seed/Checkout/' || i, 'seed-' || i, 'demo-outfitters.example',
                    CASE WHEN i % 3 = 0 THEN 'JPY' ELSE 'USD' END, 100 + i % 900, 100 + i % 900, 'settled',
                    at / 3600, at * 1000000, at * 1000000
             FROM (SELECT i, {now} - (i % (90 * 24)) * 3600 - (i % 3600) AS at
                   FROM generate_series(0::BIGINT, {last}::BIGINT) AS i) AS seed;
             INSERT INTO spend_buckets (currency, hour, settled, in_flight)
             SELECT currency, hour, SUM(charged)::BIGINT, 0 FROM ledger GROUP BY currency, hour;",
            now = now.unix_timestamp(),
            last = rows - 1
        ))
        .unwrap();
}

/// The store config of a PostgreSQL store at `url` (written in the config, not read from a
/// variable).
pub fn postgres_config(url: &str) -> StoreConfig {
    StoreConfig::Postgres {
        url: StoreUrl::Literal(zeroize::Zeroizing::new(url.to_owned())),
    }
}

/// A store on `home`: SQLite, or PostgreSQL at `url` (each caller its own connection, as each
/// host would have).
pub fn open_store(home: &Path, url: Option<&str>) -> Store {
    match url {
        None => Store::open(home).unwrap(),
        Some(url) => Store::open_with(home, &postgres_config(url)).unwrap(),
    }
}

/// Claims `request`'s checkout (which must be free) and runs one gate whose decision is `decide`,
/// as the proxy does for each payment: what the store answered.
pub fn claim_and_gate(
    store: &Store,
    request: &CompleteRequest,
    quote: &Quote,
    window: Duration,
    now: OffsetDateTime,
    decide: &mut dyn FnMut(&LedgerView, &[ApprovalCandidate]) -> Outcome,
) -> Result<Gated, StoreError> {
    claim_and_gate_as(store, None, request, quote, window, now, decide)
}

/// [`claim_and_gate`] for a payment by `agent` (the service, SPEC §13).
pub fn claim_and_gate_as(
    store: &Store,
    agent: Option<&AgentId>,
    request: &CompleteRequest,
    quote: &Quote,
    window: Duration,
    now: OffsetDateTime,
    decide: &mut dyn FnMut(&LedgerView, &[ApprovalCandidate]) -> Outcome,
) -> Result<Gated, StoreError> {
    let claim = store
        .claim(&request.checkout_id, &request.idempotency_key, now, window)?
        .unwrap_or_else(|conflict| panic!("the checkout could not be claimed: {conflict:?}"));
    let digest = BasketDigest::of_request(quote, &request.instruments, agent);
    store.gate(
        &claim,
        request,
        quote,
        &digest,
        agent,
        window,
        now,
        // These worlds' policies have no approval page (`reads_passkey_approvals()` is false), so
        // the store reads no passkey approval, as the proxy's gate does for them.
        false,
        &mut |ledger, approvals, _passkeys| decide(ledger, approvals),
        &AuditRecord::new(now, "complete_checkout"),
    )
}

/// The real `decide` under `policy` for this request and quote, as `Store::gate` calls it.
pub fn decide<'a>(
    policy: &'a Policy,
    request: &'a CompleteRequest,
    quote: &'a Quote,
    trusted_keys: &'a TrustedKeys,
    now: OffsetDateTime,
) -> impl FnMut(&LedgerView, &[ApprovalCandidate]) -> Outcome + 'a {
    decide_as(policy, None, request, quote, trusted_keys, now)
}

/// [`decide`] for a payment by `agent` (the service, SPEC §13).
pub fn decide_as<'a>(
    policy: &'a Policy,
    agent: Option<&'a AgentId>,
    request: &'a CompleteRequest,
    quote: &'a Quote,
    trusted_keys: &'a TrustedKeys,
    now: OffsetDateTime,
) -> impl FnMut(&LedgerView, &[ApprovalCandidate]) -> Outcome + 'a {
    let digest = BasketDigest::of_request(quote, &request.instruments, agent);
    move |ledger, approvals| {
        gate::decide(
            policy,
            &Facts {
                request,
                quote,
                digest: &digest,
                ledger,
                approvals,
                passkey_approvals: &[],
                trusted_keys,
                agent,
                now,
            },
        )
    }
}

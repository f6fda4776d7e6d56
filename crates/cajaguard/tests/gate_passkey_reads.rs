//! Which passkey approvals `Store::gate` reads (SPEC §6): without the approval page none, since
//! the decision could count none (one query less on every decision of the default config); with
//! the page every one filed for the request, whatever `approvals.require` says, since a passkey
//! deny refuses under `"key"` too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use cajaguard::store::{AuditRecord, Store};
use cajaguard_core::approval::{ApprovalTerms, BasketDigest, Decision, TrustedKeys};
use cajaguard_core::effect::Outcome;
use cajaguard_core::gate::{self, Facts};
use cajaguard_core::passkey::soft_authenticator::SoftAuthenticator;
use cajaguard_core::passkey::{
    PasskeyApproval, PasskeyApprovalTerms, RelyingParty, verify_registration,
};
use cajaguard_core::policy::{ConfigOrigin, Policy};
use cajaguard_core::quote::{Quote, QuoteLine, QuoteTotal};
use cajaguard_core::request::{CompleteRequest, Instrument};
use cajaguard_core::verdict::Reason;
use serde_json::json;
use time::OffsetDateTime;

const CHECKOUT: &str = "gid://fixture/Checkout/1";

fn policy(home: &Path, web: bool) -> Policy {
    let mut config = json!({
        "mode": "test",
        "home": home,
        "downstream": { "command": "cajaguard-fixture-shop" },
        "merchants": ["demo-outfitters.example"],
        "caps": { "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } },
        "approvals": { "require": "key" }
    });
    if web {
        config["approvals"]["web"] = json!({ "listen": "127.0.0.1:8377" });
    }
    let path = home.join("config.json");
    Policy::parse(
        &config.to_string(),
        &ConfigOrigin {
            path: &path,
            user_home: None,
        },
    )
    .unwrap()
}

/// A Day pack (USD 89.00, over the USD 50.00 threshold).
fn day_pack() -> Quote {
    Quote {
        checkout_id: CHECKOUT.to_owned(),
        status: "ready_for_complete".to_owned(),
        currency: "USD".to_owned(),
        total: 8900,
        line_items: vec![QuoteLine {
            id: "li_1".to_owned(),
            item_id: "day_pack".to_owned(),
            title: "Day pack".to_owned(),
            quantity: 1,
            unit_price: 8900,
        }],
        merchant: Some("demo-outfitters.example".to_owned()),
        totals: vec![QuoteTotal {
            kind: "total".to_owned(),
            amount: 8900,
        }],
        fulfillment: None,
    }
}

fn complete_request(key: &str) -> CompleteRequest {
    CompleteRequest {
        checkout_id: CHECKOUT.to_owned(),
        idempotency_key: key.to_owned(),
        agent_profile: "https://agent.example/profile".to_owned(),
        handler_ids: vec!["fixture_test_handler".to_owned()],
        instruments: vec![Instrument::of_handler("fixture_test_handler")],
    }
}

/// A store holding a registered passkey and, filed with it, a passkey deny of the Day pack (as
/// the page files one while `require` accepts passkeys).
fn store_with_a_passkey_deny(home: &Path) -> Store {
    let store = Store::open(home).unwrap();
    let now = OffsetDateTime::now_utc();
    let audit = AuditRecord::new(now, "test");
    let mut auth = SoftAuthenticator::es256();
    let challenge = [0x33; 32];
    let registered = verify_registration(
        &RelyingParty::localhost(8377),
        &challenge,
        &auth.register(&challenge),
        "laptop",
    )
    .unwrap();
    store
        .create_registration_link("token", "laptop", now, &audit)
        .unwrap();
    store
        .register_passkey("token", &registered, None, now, &audit)
        .unwrap();
    let quote = day_pack();
    let digest = BasketDigest::of(&quote, &complete_request("k").instruments);
    let terms = PasskeyApprovalTerms::new(
        &ApprovalTerms {
            request_id: digest.request_id(),
            digest,
            decision: Decision::Deny,
            merchant: "demo-outfitters.example".to_owned(),
            checkout_id: CHECKOUT.to_owned(),
            currency: "USD".to_owned(),
            total: 8900,
            issued_at: now,
            ttl: Duration::from_secs(600),
            nonce: [0x42; 16],
            note: String::new(),
            checkpoint: None,
        },
        None,
    );
    let assertion = auth.assert(&terms.challenge());
    store
        .file_passkey_approval(&PasskeyApproval { terms, assertion }, now)
        .unwrap();
    store
}

/// The gate's decision for the Day pack under `policy`, as the proxy runs it; and how many
/// passkey approvals the decision was given.
fn gate(store: &Store, policy: &Policy) -> (Outcome, usize) {
    let now = OffsetDateTime::now_utc();
    let request = complete_request("k1");
    let quote = day_pack();
    let digest = BasketDigest::of(&quote, &request.instruments);
    let claim = store
        .claim(CHECKOUT, "k1", now, Duration::from_secs(3600))
        .unwrap()
        .unwrap_or_else(|_| panic!("claimed"));
    let trusted = TrustedKeys(vec![]);
    let mut given = 0;
    let gated = store
        .gate(
            &claim,
            &request,
            &quote,
            &digest,
            None,
            policy.window,
            now,
            policy.approvals.reads_passkey_approvals(),
            &mut |ledger, approvals, passkey_approvals| {
                given = passkey_approvals.len();
                gate::decide(
                    policy,
                    &Facts {
                        agent: None,
                        request: &request,
                        quote: &quote,
                        digest: &digest,
                        ledger,
                        approvals,
                        passkey_approvals,
                        trusted_keys: &trusted,
                        now,
                    },
                )
            },
            &AuditRecord::new(now, "complete_checkout"),
        )
        .unwrap();
    (gated.outcome, given)
}

#[test]
fn without_the_page_the_gate_reads_no_passkey_approval() {
    let home = tempfile::tempdir().unwrap();
    let store = store_with_a_passkey_deny(home.path());
    let (outcome, given) = gate(&store, &policy(home.path(), false));
    assert_eq!(given, 0, "the filed passkey approval was read");
    assert_eq!(outcome.ruling.reason(), Reason::PendingApproval);
}

#[test]
fn with_the_page_a_passkey_deny_refuses_under_require_key() {
    let home = tempfile::tempdir().unwrap();
    let store = store_with_a_passkey_deny(home.path());
    let (outcome, given) = gate(&store, &policy(home.path(), true));
    assert_eq!(given, 1);
    assert_eq!(
        outcome.ruling.reason(),
        Reason::ApprovalDenied,
        "{}",
        outcome.ruling.detail()
    );
}

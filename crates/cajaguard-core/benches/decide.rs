//! The gate's cost per `complete_checkout`: `decide` on a ~2 KB checkout (allow, blocked, with
//! approval verification) and the tripwire on ~2 KB of arguments. Targets (medians): decide
//! without crypto <= 5 µs, with approval verification <= 50 µs, tripwire <= 10 µs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use cajaguard_core::approval::{self, ApprovalTerms, BasketDigest, SigningKey, TrustedKeys};
use cajaguard_core::effect::{ApprovalCandidate, CheckoutLedger, LedgerView};
use cajaguard_core::gate::{self, Facts};
use cajaguard_core::quote::Quote;
use cajaguard_core::tripwire;
use cajaguard_harness::fixtures;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use time::macros::datetime;

/// The core fixtures' ~2 KB arguments, with a mandate and a shipping block more (as an agent
/// that sends everything would).
fn args() -> Value {
    let mut args = fixtures::complete_args_2kb();
    args["checkout"]["ap2"] = json!({"checkout_mandate": "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJjaGVja291dF9pZCI6ImdpZDovL2ZpeHR1cmUvQ2hlY2tvdXQvMSIsInRvdGFsIjo4OTAwfQ.c2lnbmF0dXJlLXBsYWNlaG9sZGVyLWZvci1iZW5jaG1hcmtpbmctb25seQ"});
    args["shipping"] = json!({"name": "Ana Buyer", "street": "500 Terry A Francois Blvd", "city": "San Francisco", "region": "CA",
                              "postal_code": "94158", "country": "US", "phone": "+1 415 555 0100", "instructions": "Ring twice; the buzzer is on the left."});
    args
}

fn bench(c: &mut Criterion) {
    let policy = fixtures::policy("150.00");
    let now = datetime!(2026-08-25 12:00 UTC);
    let args = args();
    let request = fixtures::request_of(&args);
    let ledger = LedgerView {
        agent_window_spent: 0,
        window_spent: 2400,
        checkout: CheckoutLedger::Fresh,
        frozen: None,
    };
    let key = SigningKey::from_seed(&[7u8; 32]);
    let trusted = TrustedKeys(vec![key.public_key()]);

    let small = fixtures::checkout_2kb(8, 300); // USD 24.00: allow
    let big = fixtures::checkout_2kb(8, 1100); // USD 88.00: needs approval
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
            note: "bench".into(),
            checkpoint: None,
            ..fixtures::approval_terms(
                digest,
                &q_big.checkout_id,
                q_big.total,
                now - time::Duration::minutes(1),
            )
        },
    );
    let candidates = vec![ApprovalCandidate {
        document: doc,
        used: false,
    }];

    let d_small = BasketDigest::of(&q_small, &request.instruments);
    let facts = |quote, digest, approvals| Facts {
        agent: None,
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

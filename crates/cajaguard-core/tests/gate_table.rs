//! Table-driven tests of the gate (SPEC §4, §10) through one helper, [`run`]: tripwire and request
//! checks ([`gate::precheck`]), the shop's quote ([`Quote::from_shop`]) and [`gate::decide`]. Every
//! case asserts verdict and reason, that the detail holds no secret, and that the effect matches.
//! One table, one file: its rows are meant to be read together.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use cajaguard_core::request::Instrument;
use std::collections::BTreeSet;

use cajaguard_core::approval::{ApprovalDocument, BasketDigest, Decision, TrustedKeys};
use cajaguard_core::effect::{ApprovalCandidate, CheckoutLedger, Effect, LedgerView};
use cajaguard_core::gate::{self, Facts};
use cajaguard_core::quote::Quote;
use cajaguard_core::tripwire;
use cajaguard_core::verdict::{Reason, Ruling, Verdict};
use common::*;
use serde_json::{Value, json};

#[derive(Clone, Copy)]
enum Signer {
    Trusted,
    Untrusted,
}

#[derive(Clone)]
struct Appr {
    signer: Signer,
    decision: Decision,
    issued_min_ago: i64,
    ttl_min: u64,
    used: bool,
    /// Sign for this other shop checkout instead of the one being decided.
    basket: Option<Value>,
    tamper: Option<fn(&mut ApprovalDocument)>,
}

fn appr() -> Appr {
    Appr {
        signer: Signer::Trusted,
        decision: Decision::Approve,
        issued_min_ago: 1,
        ttl_min: 15,
        used: false,
        basket: None,
        tamper: None,
    }
}

struct Case {
    name: &'static str,
    config: fn(&mut Value),
    args: Value,
    shop: Value,
    ledger: LedgerView,
    approvals: Vec<Appr>,
    expect: (Verdict, Reason),
}

/// Stands for "the digest of the case's own request" in a ledger view (see `with_this_basket`).
fn this_basket() -> BasketDigest {
    BasketDigest::from_hex(&"0".repeat(64)).unwrap()
}

fn with_this_basket(ledger: &LedgerView, digest: &BasketDigest) -> LedgerView {
    let mut ledger = ledger.clone();
    if let CheckoutLedger::InFlight { digest: d, .. } = &mut ledger.checkout
        && *d == Some(this_basket())
    {
        *d = Some(*digest);
    }
    ledger
}

fn fresh() -> LedgerView {
    LedgerView {
        agent_window_spent: 0,
        window_spent: 0,
        checkout: CheckoutLedger::Fresh,
        frozen: None,
    }
}

fn base(name: &'static str, shop: Value, expect: (Verdict, Reason)) -> Case {
    Case {
        name,
        config: |_| {},
        args: complete_args(),
        shop,
        ledger: fresh(),
        approvals: vec![],
        expect,
    }
}

/// The one helper: runs a case through precheck, quote and decide, and checks what every ruling
/// must satisfy. Returns the ruling (and the effect when decide was reached).
fn run(case: &Case) -> (Ruling, Option<Effect>) {
    let mut config = config_json();
    (case.config)(&mut config);
    let policy = policy_from(&config);
    let trusted = TrustedKeys(vec![trusted_key().public_key()]);

    let (ruling, effect) = match gate::precheck(&policy, &case.args) {
        Err(r) => (r, None),
        Ok(request) => match Quote::from_shop(&case.shop) {
            Err(r) => (r, None),
            Ok(quote) => {
                let approvals: Vec<ApprovalCandidate> = case
                    .approvals
                    .iter()
                    .map(|a| {
                        let q = match &a.basket {
                            Some(other) => Quote::from_shop(other).unwrap(),
                            None => quote.clone(),
                        };
                        let key = match a.signer {
                            Signer::Trusted => trusted_key(),
                            Signer::Untrusted => untrusted_key(),
                        };
                        let issued = NOW - time::Duration::minutes(a.issued_min_ago);
                        let terms = terms_for(
                            &q,
                            &request.instruments,
                            a.decision,
                            issued,
                            minutes(a.ttl_min),
                        );
                        let mut document = sign(&key, &terms);
                        if let Some(t) = a.tamper {
                            t(&mut document);
                        }
                        ApprovalCandidate {
                            document,
                            used: a.used,
                        }
                    })
                    .collect();
                let digest = BasketDigest::of(&quote, &request.instruments);
                let ledger = with_this_basket(&case.ledger, &digest);
                let facts = Facts {
                    agent: None,
                    request: &request,
                    quote: &quote,
                    digest: &digest,
                    ledger: &ledger,
                    approvals: &approvals,
                    passkey_approvals: &[],
                    trusted_keys: &trusted,
                    now: NOW,
                };
                let outcome = gate::decide(&policy, &facts);
                (outcome.ruling, Some(outcome.effect))
            }
        },
    };

    let name = case.name;
    assert_eq!(
        (ruling.verdict(), ruling.reason()),
        case.expect,
        "{name}: {}",
        ruling.detail()
    );
    assert_eq!(ruling.verdict(), ruling.reason().verdict(), "{name}");
    let wire = ruling.to_json().to_string();
    for secret in SECRETS {
        assert!(
            !ruling.detail().contains(secret),
            "{name}: detail leaks {secret}: {}",
            ruling.detail()
        );
        assert!(!wire.contains(secret), "{name}: JSON leaks {secret}");
    }
    assert!(
        !tripwire::contains_card_number(ruling.detail()),
        "{name}: detail has card digits"
    );
    assert!(!ruling.detail().is_empty(), "{name}: empty detail");

    let approval_block = matches!(
        ruling.reason(),
        Reason::PendingApproval
            | Reason::ApprovalExpired
            | Reason::ApprovalUntrustedKey
            | Reason::ApprovalBadSignature
            | Reason::ApprovalAlreadyUsed
            | Reason::ApprovalTtlTooLong
    );
    if approval_block {
        let id = ruling
            .request_id()
            .unwrap_or_else(|| panic!("{name}: no request id"));
        assert_eq!(
            ruling.next(),
            Some(format!("cajaguard approve {id} --config {CONFIG_PATH}").as_str())
        );
        let json = ruling.to_json();
        assert_eq!(json["cajaguard"]["request_id"], id.as_str());
        assert_eq!(json["cajaguard"]["next"].as_str(), ruling.next());
    }
    if let Some(effect) = &effect {
        match (ruling.reason(), effect) {
            (
                Reason::WithinCaps,
                Effect::Forward {
                    use_approval_nonce: None,
                    ..
                },
            ) => {}
            (
                Reason::SignedApproval,
                Effect::Forward {
                    use_approval_nonce: Some(n),
                    ..
                },
            ) => {
                assert!(n.len() >= 32, "{name}");
            }
            (Reason::IdempotentRetry, Effect::Retry) => {}
            (_, Effect::Refuse { pending: Some(p) }) if approval_block => {
                assert_eq!(Some(&p.request_id), ruling.request_id(), "{name}");
            }
            (_, Effect::Refuse { pending: None })
                if ruling.verdict() == Verdict::Denied
                    || ruling.reason() == Reason::PaymentInFlight
                    || ruling.reason() == Reason::Frozen => {}
            (r, e) => panic!("{name}: effect {e:?} does not fit reason {r:?}"),
        }
    }
    (ruling, effect)
}

const ALLOW: (Verdict, Reason) = (Verdict::Allow, Reason::WithinCaps);
const APPROVED: (Verdict, Reason) = (Verdict::AllowApproved, Reason::SignedApproval);
const PENDING: (Verdict, Reason) = (Verdict::Blocked, Reason::PendingApproval);

fn cases() -> Vec<Case> {
    let den = |r: Reason| (Verdict::Denied, r);
    let blk = |r: Reason| (Verdict::Blocked, r);
    vec![
        // --- SPEC §10, the seed's scenarios that the core decides alone.
        base("2 x Trail socks, test token", usd(SOCKS, 2), ALLOW),
        base(
            "Down parka over the per-transaction cap",
            usd(PARKA, 1),
            den(Reason::OverPerTransactionCap),
        ),
        base("Day pack, no approval yet", usd(PACK, 1), PENDING),
        Case {
            approvals: vec![appr()],
            ..base("Day pack + trusted signed approval", usd(PACK, 1), APPROVED)
        },
        Case {
            approvals: vec![Appr {
                used: true,
                basket: Some(usd(PACK, 1)),
                ..appr()
            }],
            ..base(
                "next basket after that approval was used",
                usd(SHELL, 1),
                ALLOW,
            )
        },
        Case {
            approvals: vec![Appr {
                used: true,
                basket: Some(usd(PACK, 1)),
                ..appr()
            }],
            ..base(
                "next basket (USD 60.00) after that approval was used",
                usd(("bundle", "Bundle", 6000), 1),
                PENDING,
            )
        },
        Case {
            approvals: vec![Appr {
                used: true,
                ..appr()
            }],
            ..base(
                "replay of a used approval",
                usd(PACK, 1),
                blk(Reason::ApprovalAlreadyUsed),
            )
        },
        Case {
            approvals: vec![Appr {
                signer: Signer::Untrusted,
                ..appr()
            }],
            ..base(
                "approval signed by an untrusted key",
                usd(PACK, 1),
                blk(Reason::ApprovalUntrustedKey),
            )
        },
        Case {
            approvals: vec![Appr {
                tamper: Some(|d| d.expires_at = "2026-08-26T12:00:00Z".into()),
                ..appr()
            }],
            ..base(
                "real approval with edited expires_at",
                usd(PACK, 1),
                blk(Reason::ApprovalBadSignature),
            )
        },
        Case {
            approvals: vec![Appr {
                issued_min_ago: 6,
                ttl_min: 5,
                ..appr()
            }],
            ..base(
                "approval 6 min after a 5 min TTL",
                usd(PACK, 1),
                blk(Reason::ApprovalExpired),
            )
        },
        Case {
            approvals: vec![Appr {
                decision: Decision::Deny,
                ..appr()
            }],
            ..base(
                "human signed a deny",
                usd(PACK, 1),
                den(Reason::ApprovalDenied),
            )
        },
        Case {
            approvals: vec![Appr {
                basket: Some(usd(SOCKS, 5)),
                ..appr()
            }],
            ..base(
                "basket grew 5 -> 8 socks after approval",
                usd(SOCKS, 8),
                PENDING,
            )
        },
        base(
            "merchant reports 49.99 (major units)",
            {
                let mut c = shop_checkout(
                    "sloppy-units.example",
                    "USD",
                    ("bottle", "Water bottle", 0),
                    1,
                    "ready_for_complete",
                );
                c["line_items"][0]["item"]["price"] = json!(49.99);
                c["totals"] = json!([{"type": "subtotal", "amount": 49.99}, {"type": "total", "amount": 49.99}]);
                c
            },
            den(Reason::AmountNotMinorUnits),
        ),
        Case {
            args: {
                let mut a = complete_args();
                a["checkout"]["totals"] = json!([{"type": "total", "amount": 120}]);
                a
            },
            ..base(
                "agent sends totals: 120 for a USD 219.00 basket",
                usd(PARKA, 1),
                den(Reason::RequestFieldNotAllowed),
            )
        },
        Case {
            config: |c| {
                c["caps"].as_object_mut().unwrap().remove("JPY");
            },
            ..base(
                "JPY 9800 checkout, only USD caps",
                shop_checkout("tokyo-tea.example", "JPY", TEA_SET, 1, "ready_for_complete"),
                den(Reason::CurrencyNotAllowed),
            )
        },
        base(
            "JPY 1800 checkout, JPY caps",
            shop_checkout("tokyo-tea.example", "JPY", SENCHA, 1, "ready_for_complete"),
            ALLOW,
        ),
        base("split purchase 1/4", usd(SHELL, 1), ALLOW),
        Case {
            ledger: LedgerView {
                window_spent: 4500,
                ..fresh()
            },
            ..base("split purchase 2/4", usd(SHELL, 1), ALLOW)
        },
        Case {
            ledger: LedgerView {
                window_spent: 9000,
                ..fresh()
            },
            ..base("split purchase 3/4", usd(SHELL, 1), ALLOW)
        },
        Case {
            ledger: LedgerView {
                window_spent: 13500,
                ..fresh()
            },
            ..base(
                "split purchase 4/4",
                usd(SHELL, 1),
                den(Reason::OverWindowCap),
            )
        },
        Case {
            ledger: LedgerView {
                window_spent: 13500,
                ..fresh()
            },
            approvals: vec![appr()],
            ..base(
                "no approval lifts the window cap",
                usd(PACK, 1),
                den(Reason::OverWindowCap),
            )
        },
        Case {
            approvals: vec![appr()],
            ..base(
                "no approval lifts the per-transaction cap",
                usd(PARKA, 1),
                den(Reason::OverPerTransactionCap),
            )
        },
        base(
            "merchant not on allowlist",
            shop_checkout(
                "elsewhere-goods.example",
                "USD",
                STOVE,
                1,
                "ready_for_complete",
            ),
            den(Reason::MerchantNotAllowed),
        ),
        base(
            "suffix of an allowed merchant is not allowed",
            shop_checkout(
                "evil.demo-outfitters.example",
                "USD",
                SOCKS,
                1,
                "ready_for_complete",
            ),
            den(Reason::MerchantNotAllowed),
        ),
        Case {
            args: complete_args_with(
                json!({"id": "i1", "handler_id": "com.shopify.shop_pay", "type": "card"}),
            ),
            ..base(
                "Shop Pay handler in test mode",
                usd(SOCKS, 2),
                den(Reason::TestModeCredential),
            )
        },
        Case {
            args: complete_args_with(instrument(
                "fixture_test_handler",
                json!({"type": "pan", "number": PAN, "expiry_month": 12, "expiry_year": 2030, "cvc": "123"}),
            )),
            ..base(
                "raw PAN credential in test mode",
                usd(SOCKS, 2),
                den(Reason::TestModeCredential),
            )
        },
        Case {
            args: complete_args_with(instrument(
                "fixture_test_handler",
                token_credential("tok_live_51Hx9kLwq"),
            )),
            ..base(
                "live-looking token in test mode",
                usd(SOCKS, 2),
                den(Reason::TestModeCredential),
            )
        },
        Case {
            args: {
                let mut a = complete_args();
                a["checkout"]["signals"] = json!({"note": "card 4111 1111 1111 1111 pls"});
                a
            },
            ..base(
                "card number in free text",
                usd(SOCKS, 2),
                den(Reason::TestModeCredential),
            )
        },
        Case {
            config: |c| c["mode"] = json!("live"),
            ..base("live mode, USD 12.00", usd(SOCKS, 1), PENDING)
        },
        Case {
            config: |c| c["mode"] = json!("live"),
            args: complete_args_with(instrument(
                "com.shopify.shop_pay",
                token_credential("spt_live_abc"),
            )),
            approvals: vec![appr()],
            ..base(
                "live mode with approval: no tripwire",
                usd(SOCKS, 1),
                APPROVED,
            )
        },
        // --- Every other reason code of §4.
        Case {
            approvals: vec![Appr {
                issued_min_ago: 1,
                ttl_min: 30,
                ..appr()
            }],
            ..base(
                "approval lifetime over max_ttl_minutes",
                usd(PACK, 1),
                blk(Reason::ApprovalTtlTooLong),
            )
        },
        Case {
            approvals: vec![
                Appr {
                    signer: Signer::Untrusted,
                    ..appr()
                },
                Appr {
                    used: true,
                    ..appr()
                },
                Appr {
                    issued_min_ago: 20,
                    ttl_min: 5,
                    ..appr()
                },
            ],
            ..base(
                "the most informative rejection wins (used)",
                usd(PACK, 1),
                blk(Reason::ApprovalAlreadyUsed),
            )
        },
        Case {
            approvals: vec![
                Appr {
                    used: true,
                    ..appr()
                },
                appr(),
            ],
            ..base(
                "a used and an unused approval: the unused one is taken",
                usd(PACK, 1),
                APPROVED,
            )
        },
        Case {
            approvals: vec![
                appr(),
                Appr {
                    decision: Decision::Deny,
                    ..appr()
                },
            ],
            ..base(
                "a deny wins over an approve",
                usd(PACK, 1),
                den(Reason::ApprovalDenied),
            )
        },
        Case {
            approvals: vec![Appr {
                issued_min_ago: -10,
                ..appr()
            }],
            ..base(
                "approval issued 10 min in the future",
                usd(PACK, 1),
                blk(Reason::ApprovalBadSignature),
            )
        },
        Case {
            ledger: LedgerView {
                agent_window_spent: 0,
                window_spent: 0,
                checkout: CheckoutLedger::InFlight {
                    idempotency_key: "2c9a1f5e-8d3b-4a71-9e02-6f4b3c2d1a00".into(),
                    total: 8900,
                    digest: Some(this_basket()),
                },
                frozen: None,
            },
            ..base(
                "retry with the same idempotency key while in flight",
                usd(PACK, 1),
                (Verdict::Allow, Reason::IdempotentRetry),
            )
        },
        Case {
            ledger: LedgerView {
                agent_window_spent: 0,
                window_spent: 0,
                checkout: CheckoutLedger::InFlight {
                    idempotency_key: "other-key".into(),
                    total: 8900,
                    digest: Some(this_basket()),
                },
                frozen: None,
            },
            ..base(
                "another attempt in flight",
                usd(PACK, 1),
                blk(Reason::PaymentInFlight),
            )
        },
        Case {
            ledger: LedgerView {
                agent_window_spent: 0,
                window_spent: 0,
                checkout: CheckoutLedger::InFlight {
                    idempotency_key: "2c9a1f5e-8d3b-4a71-9e02-6f4b3c2d1a00".into(),
                    total: 8900,
                    digest: BasketDigest::from_hex(&"1".repeat(64)),
                },
                frozen: None,
            },
            ..base(
                "same key but another basket than the reserved one (same total)",
                usd(PACK, 1),
                blk(Reason::PaymentInFlight),
            )
        },
        Case {
            ledger: LedgerView {
                agent_window_spent: 0,
                window_spent: 0,
                checkout: CheckoutLedger::InFlight {
                    idempotency_key: "2c9a1f5e-8d3b-4a71-9e02-6f4b3c2d1a00".into(),
                    total: 8900,
                    digest: None,
                },
                frozen: None,
            },
            ..base(
                "same key, reservation without a digest (schema 1): never a retry",
                usd(PACK, 1),
                blk(Reason::PaymentInFlight),
            )
        },
        Case {
            ledger: LedgerView {
                frozen: Some(cajaguard_core::freeze::Frozen {
                    at: NOW,
                    reason: "charged_differs".into(),
                }),
                ..fresh()
            },
            ..base("payments frozen", usd(SOCKS, 2), blk(Reason::Frozen))
        },
        Case {
            ledger: LedgerView {
                agent_window_spent: 0,
                window_spent: 0,
                checkout: CheckoutLedger::Settled { total: 2400 },
                frozen: None,
            },
            ..base(
                "already completed through CajaGuard",
                usd(SOCKS, 2),
                den(Reason::CheckoutNotReady),
            )
        },
        base(
            "checkout not ready",
            shop_checkout("demo-outfitters.example", "USD", SOCKS, 2, "incomplete"),
            den(Reason::CheckoutNotReady),
        ),
        base(
            "shop answered with an error",
            json!({"ucp": {"version": "2026-08-25", "status": "error"}, "messages": [{"type": "error", "code": "not_found", "content": "no", "severity": "recoverable"}]}),
            den(Reason::CheckoutUnreadable),
        ),
        Case {
            args: {
                let mut a = complete_args();
                a["meta"].as_object_mut().unwrap().remove("idempotency-key");
                a
            },
            ..base("no idempotency key", usd(SOCKS, 2), den(Reason::BadRequest))
        },
        Case {
            args: json!({"id": "gid://fixture/Checkout/1", "meta": {"ucp-agent": {"profile": "https://a.example"}, "idempotency-key": "k"}, "checkout": {}}),
            ..base("no payment", usd(SOCKS, 2), den(Reason::BadRequest))
        },
    ]
}

#[test]
fn decide_table() {
    let mut seen = BTreeSet::new();
    for case in cases() {
        let (ruling, _) = run(&case);
        seen.insert(ruling.reason().as_str());
    }
    // Every reason the core can produce is covered; the proxy's own reasons are not the core's.
    for reason in Reason::ALL {
        if matches!(reason, Reason::ToolNotAllowed | Reason::StoreUnavailable) {
            continue;
        }
        assert!(
            seen.contains(reason.as_str()),
            "no case covers {}",
            reason.as_str()
        );
    }
}

#[test]
fn reasons_and_verdicts_match_the_spec() {
    let blocked = [
        "pending_approval",
        "approval_expired",
        "approval_untrusted_key",
        "approval_bad_signature",
        "approval_already_used",
        "approval_ttl_too_long",
        "payment_in_flight",
        "frozen",
    ];
    let allow = ["within_caps", "idempotent_retry"];
    let mut names = BTreeSet::new();
    for r in Reason::ALL {
        assert!(
            names.insert(r.as_str()),
            "duplicate wire name {}",
            r.as_str()
        );
        let expected = if blocked.contains(&r.as_str()) {
            Verdict::Blocked
        } else if allow.contains(&r.as_str()) {
            Verdict::Allow
        } else if r.as_str() == "signed_approval" {
            Verdict::AllowApproved
        } else {
            Verdict::Denied
        };
        assert_eq!(r.verdict(), expected, "{}", r.as_str());
    }
    assert_eq!(Reason::ALL.len(), 24);
    assert_eq!(Reason::StoreUnavailable.verdict(), Verdict::Denied);
    assert_eq!(Reason::ToolNotAllowed.verdict(), Verdict::Denied);
}

#[test]
fn details_name_amounts_in_major_units() {
    let (ruling, _) = run(&base(
        "parka",
        usd(PARKA, 1),
        (Verdict::Denied, Reason::OverPerTransactionCap),
    ));
    assert_eq!(
        ruling.detail(),
        "USD 219.00 is over the per-transaction cap of USD 100.00"
    );
    let (ruling, _) = run(&Case {
        args: {
            let mut a = complete_args();
            a["checkout"]["totals"] = json!([]);
            a["checkout"]["currency"] = json!("USD");
            a
        },
        ..base(
            "fields named",
            usd(PARKA, 1),
            (Verdict::Denied, Reason::RequestFieldNotAllowed),
        )
    });
    assert!(
        ruling.detail().contains("totals, currency")
            || ruling.detail().contains("currency, totals"),
        "{}",
        ruling.detail()
    );
    // A payment term, agreed by an update, cannot be changed with the payment (in any case).
    for field in ["selected_term_id", "Selected_Term_Id", "terms"] {
        let (ruling, _) = run(&Case {
            args: {
                let mut a = complete_args();
                a["checkout"]["payment"][field] = json!("pay_in_4_fee");
                a
            },
            ..base(
                "payment term on complete",
                usd(SOCKS, 2),
                (Verdict::Denied, Reason::RequestFieldNotAllowed),
            )
        });
        assert!(ruling.detail().contains(field), "{}", ruling.detail());
    }
    let (ruling, _) = run(&base(
        "status named",
        shop_checkout(
            "demo-outfitters.example",
            "USD",
            SOCKS,
            2,
            "requires_escalation",
        ),
        (Verdict::Denied, Reason::CheckoutNotReady),
    ));
    assert!(ruling.detail().contains("requires_escalation"));
}

#[test]
fn ruling_json_shape() {
    let (ruling, _) = run(&base("pending", usd(PACK, 1), PENDING));
    let json = ruling.to_json();
    let inner = json["cajaguard"].as_object().unwrap();
    let keys: Vec<&str> = inner.keys().map(String::as_str).collect();
    assert_eq!(keys, ["verdict", "reason", "detail", "request_id", "next"]);
    assert_eq!(inner["verdict"], "blocked");
    assert_eq!(inner["reason"], "pending_approval");
    let (ruling, _) = run(&base("allow", usd(SOCKS, 2), ALLOW));
    let json = ruling.to_json();
    assert_eq!(json["cajaguard"].as_object().unwrap().len(), 3);
}

#[test]
fn request_ids_follow_the_basket() {
    let q1 = Quote::from_shop(&usd(SOCKS, 5)).unwrap();
    let q2 = Quote::from_shop(&usd(SOCKS, 8)).unwrap();
    let h = vec![Instrument::of_handler("fixture_test_handler")];
    let d1 = BasketDigest::of(&q1, &h);
    assert_eq!(d1, BasketDigest::of(&q1, &h));
    assert_ne!(d1, BasketDigest::of(&q2, &h));
    assert_ne!(
        d1,
        BasketDigest::of(&q1, &[Instrument::of_handler("com.shopify.shop_pay")])
    );
    // The instrument itself, not only its handler.
    let card_a = Instrument {
        id: Some("instr_a".into()),
        handler_id: "fixture_test_handler".into(),
    };
    let card_b = Instrument {
        id: Some("instr_b".into()),
        ..card_a.clone()
    };
    assert_ne!(
        BasketDigest::of(&q1, &[card_a]),
        BasketDigest::of(&q1, &[card_b])
    );
    // Another product at the same price on the same line: a new request (issue: digest blind to
    // the product).
    let mut other_product = q1.clone();
    other_product.line_items[0].item_id = "camp_stove".into();
    assert_ne!(d1, BasketDigest::of(&other_product, &h));
    let mut other_title = q1.clone();
    other_title.line_items[0].title = "Trail socks (used)".into();
    assert_ne!(d1, BasketDigest::of(&other_title, &h));
    // Another tax line with the same total.
    let mut other_totals = q1.clone();
    other_totals.totals.insert(
        0,
        cajaguard_core::quote::QuoteTotal {
            kind: "tax".into(),
            amount: 0,
        },
    );
    assert_ne!(d1, BasketDigest::of(&other_totals, &h));
    let id = d1.request_id();
    assert!(id.as_str().starts_with("cg-") && id.as_str().len() == 19);
    assert_eq!(
        cajaguard_core::approval::RequestId::parse(id.as_str()).unwrap(),
        id
    );
    assert!(cajaguard_core::approval::RequestId::parse("cg-../../etc/passwd").is_err());
}

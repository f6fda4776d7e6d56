//! What the shop's answer to a forwarded `complete_checkout` means for the ledger (SPEC §4.13).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cajaguard_core::settle::{Settlement, classify};
use serde_json::{Value, json};

fn checkout(status: &str, total: Value) -> Value {
    json!({"ucp": {"version": "2026-08-25"}, "id": "gid://fixture/Checkout/1", "status": status, "currency": "USD",
           "line_items": [], "totals": [{"type": "subtotal", "amount": total}, {"type": "total", "amount": total}], "links": []})
}

fn result(structured: Value) -> Value {
    json!({"content": [{"type": "text", "text": structured.to_string()}], "structuredContent": structured})
}

#[test]
fn completed_counts_the_higher_total() {
    assert_eq!(
        classify(Ok(&result(checkout("completed", json!(8900)))), 8900),
        Settlement::Completed {
            charged: 8900,
            mismatch: false
        }
    );
    assert_eq!(
        classify(Ok(&result(checkout("completed", json!(9900)))), 8900),
        Settlement::Completed {
            charged: 9900,
            mismatch: true
        }
    );
    assert_eq!(
        classify(Ok(&result(checkout("completed", json!(100)))), 8900),
        Settlement::Completed {
            charged: 8900,
            mismatch: false
        }
    );
    assert_eq!(
        classify(Ok(&result(checkout("completed", json!(99.5)))), 8900),
        Settlement::Completed {
            charged: 8900,
            mismatch: false
        }
    );
}

#[test]
fn text_content_is_read_when_there_is_no_structured_content() {
    let text_only = json!({"content": [{"type": "text", "text": checkout("completed", json!(8900)).to_string()}]});
    assert_eq!(
        classify(Ok(&text_only), 8900),
        Settlement::Completed {
            charged: 8900,
            mismatch: false
        }
    );
}

#[test]
fn errors_and_other_statuses_release() {
    let declined = json!({"isError": true, "content": [{"type": "text", "text": "card declined"}]});
    assert_eq!(classify(Ok(&declined), 8900), Settlement::Released);
    let ucp_error = result(
        json!({"ucp": {"version": "2026-08-25", "status": "error"}, "messages": [{"type": "error", "code": "payment_declined", "content": "declined", "severity": "recoverable"}]}),
    );
    assert_eq!(classify(Ok(&ucp_error), 8900), Settlement::Released);
    for status in [
        "incomplete",
        "ready_for_complete",
        "requires_escalation",
        "canceled",
    ] {
        assert_eq!(
            classify(Ok(&result(checkout(status, json!(8900)))), 8900),
            Settlement::Released,
            "{status}"
        );
    }
    assert_eq!(classify(Err(false), 8900), Settlement::Released);
}

#[test]
fn unknown_outcomes_keep_the_reservation() {
    assert_eq!(classify(Err(true), 8900), Settlement::Unknown);
    assert_eq!(
        classify(Ok(&json!({"content": []})), 8900),
        Settlement::Unknown
    );
    assert_eq!(classify(Ok(&json!("garbage")), 8900), Settlement::Unknown);
    assert_eq!(
        classify(
            Ok(&json!({"content": [{"type": "text", "text": "not json"}]})),
            8900
        ),
        Settlement::Unknown
    );
    assert_eq!(
        classify(
            Ok(&result(checkout("complete_in_progress", json!(8900)))),
            8900
        ),
        Settlement::Unknown
    );
    assert_eq!(
        classify(Ok(&result(json!({"id": "x"}))), 8900),
        Settlement::Unknown
    );
}

mod reconcile {
    use super::*;
    use cajaguard_core::settle::{order_to_ask, reconcile};

    #[test]
    fn a_completed_checkout_settles_with_the_higher_total() {
        assert_eq!(
            reconcile(&result(checkout("completed", json!(2400))), None, 2400),
            Settlement::Completed {
                charged: 2400,
                mismatch: false
            }
        );
        assert_eq!(
            reconcile(&result(checkout("completed", json!(2600))), None, 2400),
            Settlement::Completed {
                charged: 2600,
                mismatch: true
            }
        );
        // The checkout's total is unreadable: the order's counts, else the reservation.
        let mut c = checkout("completed", json!(24.0));
        c["order"] =
            json!({"id": "gid://shop/Order/9", "permalink_url": "https://shop.example/o/9"});
        assert_eq!(order_to_ask(&c), Some("gid://shop/Order/9"));
        assert_eq!(
            reconcile(&result(c.clone()), Some(2500), 2400),
            Settlement::Completed {
                charged: 2500,
                mismatch: true
            }
        );
        assert_eq!(
            reconcile(&result(c), None, 2400),
            Settlement::Completed {
                charged: 2400,
                mismatch: false
            }
        );
        assert_eq!(order_to_ask(&checkout("completed", json!(1))), None);
    }

    #[test]
    fn an_open_or_canceled_checkout_was_not_paid() {
        for status in ["ready_for_complete", "incomplete", "canceled"] {
            assert_eq!(
                reconcile(&result(checkout(status, json!(2400))), None, 2400),
                Settlement::Released,
                "{status}"
            );
        }
    }

    #[test]
    fn anything_unreadable_keeps_the_reservation() {
        let error = json!({"ucp": {"version": "2026-08-25", "status": "error"}, "messages": [{"type": "error", "code": "not_found"}]});
        for answer in [
            json!({"isError": true, "content": [{"type": "text", "text": "boom"}]}),
            json!({"content": [{"type": "text", "text": "not json"}]}),
            result(error),
            result(checkout("complete_in_progress", json!(2400))),
            result(checkout("requires_escalation", json!(2400))),
            result(json!({"id": "x"})),
            json!([]),
        ] {
            assert_eq!(
                reconcile(&answer, None, 2400),
                Settlement::Unknown,
                "{answer}"
            );
        }
    }
}

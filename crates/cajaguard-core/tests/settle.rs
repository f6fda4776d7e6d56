//! What the shop's answers mean for the ledger (SPEC §4.13).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cajaguard_core::quote::Quote;
use cajaguard_core::settle::{
    Charge, Completion, Reading, Reserved, Settlement, charge, read_checkout, read_completion,
};
use serde_json::{Value, json};

/// The checkout every reading here is of.
const ID: &str = "gid://fixture/Checkout/1";

/// What the gate reserved for it.
const RESERVED: Reserved<'static> = Reserved {
    total: 2400,
    currency: "USD",
    merchant: "demo-outfitters.example",
};

fn checkout(status: &str, total: Value) -> Value {
    json!({"ucp": {"version": "2026-08-25"}, "id": "gid://fixture/Checkout/1", "status": status, "currency": "USD",
           "line_items": [{"id": "li_1", "item": {"id": "day_pack", "title": "Day pack", "price": 8900}, "quantity": 1}],
           "totals": [{"type": "subtotal", "amount": total}, {"type": "total", "amount": total}],
           "links": [{"type": "terms_of_service", "url": "https://demo-outfitters.example/tos"}]})
}

fn result(structured: Value) -> Value {
    json!({"content": [{"type": "text", "text": structured.to_string()}], "structuredContent": structured})
}

fn quoted() -> Quote {
    Quote::from_shop(&checkout("ready_for_complete", json!(8900))).unwrap()
}

fn completed(c: Value) -> Value {
    match read_completion(&result(c), ID) {
        Completion::Completed(checkout) => checkout,
        other => panic!("not a completion: {other:?}"),
    }
}

#[test]
fn a_completion_of_the_quoted_basket_counts_the_quote() {
    let c = completed(checkout("completed", json!(8900)));
    assert_eq!(charge(&quoted(), &c), Charge::as_reserved(8900));
    // A shop that leaves fields out of its completion is not compared on them.
    let minimal = json!({"id": "gid://fixture/Checkout/1", "status": "completed"});
    assert_eq!(charge(&quoted(), &minimal), Charge::as_reserved(8900));
}

#[test]
fn a_completion_that_differs_is_named_and_counted_as_charged() {
    let higher = completed(checkout("completed", json!(9900)));
    let c = charge(&quoted(), &higher);
    assert_eq!((c.amount, c.differs.clone()), (9900, vec!["total"]));
    // Lower: the higher (quoted) amount counts, and it still differs.
    let lower = charge(&quoted(), &checkout("completed", json!(100)));
    assert_eq!((lower.amount, lower.differs), (8900, vec!["total"]));
    // An unreadable total differs too (fail closed) and the quote counts.
    let float = charge(&quoted(), &checkout("completed", json!(99.5)));
    assert_eq!((float.amount, float.differs), (8900, vec!["total"]));

    let mut jpy = checkout("completed", json!(21900));
    jpy["currency"] = json!("JPY");
    let c = charge(&quoted(), &jpy);
    assert_eq!(c.currency.as_deref(), Some("JPY"));
    assert_eq!(
        c.amount, 21900,
        "another currency counts the shop's amount in it"
    );
    assert_eq!(c.differs, vec!["currency", "total"]);

    let mut elsewhere = checkout("completed", json!(8900));
    elsewhere["links"] = json!([{"type": "tos", "url": "https://elsewhere-goods.example/tos"}]);
    assert_eq!(charge(&quoted(), &elsewhere).differs, vec!["merchant"]);

    // Same price, another product on the line.
    let mut swapped = checkout("completed", json!(8900));
    swapped["line_items"][0]["item"]["id"] = json!("camp_stove");
    assert_eq!(charge(&quoted(), &swapped).differs, vec!["line_items"]);
    let mut more = checkout("completed", json!(8900));
    more["line_items"][0]["quantity"] = json!(2);
    assert_eq!(charge(&quoted(), &more).differs, vec!["line_items"]);
}

#[test]
fn text_content_is_read_when_there_is_no_structured_content() {
    let text_only = json!({"content": [{"type": "text", "text": checkout("completed", json!(8900)).to_string()}]});
    assert!(matches!(
        read_completion(&text_only, ID),
        Completion::Completed(_)
    ));
}

#[test]
fn only_an_explicit_word_is_a_refusal() {
    let declined = json!({"isError": true, "content": [{"type": "text", "text": "card declined"}]});
    assert_eq!(read_completion(&declined, ID), Completion::Refused);
    let ucp_error = result(
        json!({"ucp": {"version": "2026-08-25", "status": "error"}, "messages": [{"type": "error", "code": "payment_declined", "content": "declined", "severity": "recoverable"}]}),
    );
    assert_eq!(read_completion(&ucp_error, ID), Completion::Refused);
    for status in [
        "incomplete",
        "ready_for_complete",
        "requires_escalation",
        "canceled",
    ] {
        assert_eq!(
            read_completion(&result(checkout(status, json!(8900))), ID),
            Completion::Refused,
            "{status}"
        );
    }
}

#[test]
fn anything_else_is_an_unknown_outcome() {
    for answer in [
        json!({"content": []}),
        json!("garbage"),
        json!(null),
        json!({"content": [{"type": "text", "text": "not json"}]}),
        result(checkout("complete_in_progress", json!(8900))),
        result(json!({"id": "x"})),
    ] {
        assert_eq!(
            read_completion(&answer, ID),
            Completion::Unknown,
            "{answer}"
        );
    }
}

#[test]
fn an_answer_about_another_checkout_is_not_this_payments_word() {
    let mut other = checkout("completed", json!(8900));
    other["id"] = json!("gid://fixture/Checkout/2");
    assert_eq!(
        read_completion(&result(other.clone()), ID),
        Completion::Unknown,
        "another checkout's completion settles nothing here"
    );
    other["status"] = json!("canceled");
    assert_eq!(
        read_completion(&result(other), ID),
        Completion::Unknown,
        "nor does another checkout's refusal"
    );
    let mut unnamed = checkout("completed", json!(8900));
    unnamed.as_object_mut().unwrap().remove("id");
    assert_eq!(read_completion(&result(unnamed), ID), Completion::Unknown);
}

mod reconcile {
    use super::*;
    use cajaguard_core::settle::{order_to_ask, reconcile};

    #[test]
    fn a_completed_checkout_settles_with_the_higher_total() {
        assert_eq!(
            reconcile(
                &result(checkout("completed", json!(2400))),
                ID,
                None,
                &RESERVED
            ),
            Settlement::Completed(Charge::as_reserved(2400))
        );
        let Settlement::Completed(higher) = reconcile(
            &result(checkout("completed", json!(2600))),
            ID,
            None,
            &RESERVED,
        ) else {
            panic!("not completed")
        };
        assert_eq!((higher.amount, higher.differs()), (2600, true));
        // The checkout's total is unreadable: the order's counts, else the reservation.
        let mut c = checkout("completed", json!(24.0));
        c["order"] =
            json!({"id": "gid://shop/Order/9", "permalink_url": "https://shop.example/o/9"});
        assert_eq!(order_to_ask(&c), Some("gid://shop/Order/9"));
        let Settlement::Completed(by_order) =
            reconcile(&result(c.clone()), ID, Some(2500), &RESERVED)
        else {
            panic!("not completed")
        };
        assert_eq!(by_order.amount, 2500);
        assert_eq!(
            reconcile(&result(c), ID, None, &RESERVED),
            Settlement::Completed(Charge::as_reserved(2400))
        );
        assert_eq!(order_to_ask(&checkout("completed", json!(1))), None);
    }

    #[test]
    fn a_completion_at_another_merchant_is_named_as_differing() {
        let mut elsewhere = checkout("completed", json!(2400));
        elsewhere["links"] =
            json!([{"type": "terms_of_service", "url": "https://elsewhere-goods.example/tos"}]);
        let Settlement::Completed(charge) = reconcile(&result(elsewhere), ID, None, &RESERVED)
        else {
            panic!("not completed")
        };
        assert_eq!((charge.amount, charge.differs), (2400, vec!["merchant"]));
    }

    #[test]
    fn an_open_or_canceled_checkout_was_not_paid() {
        for status in ["ready_for_complete", "incomplete", "canceled"] {
            assert_eq!(
                reconcile(&result(checkout(status, json!(2400))), ID, None, &RESERVED),
                Settlement::Released,
                "{status}"
            );
            assert_eq!(
                read_checkout(&result(checkout(status, json!(2400))), ID),
                Reading::Open
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
            // Another checkout's answer, or one that names none, says nothing of this one.
            result(json!({"id": "gid://fixture/Checkout/2", "status": "ready_for_complete"})),
            result(json!({"status": "ready_for_complete"})),
            result(
                json!({"id": "gid://fixture/Checkout/2", "status": "completed", "totals": [{"type": "total", "amount": 2400}]}),
            ),
        ] {
            assert_eq!(
                reconcile(&answer, ID, None, &RESERVED),
                Settlement::Unknown,
                "{answer}"
            );
            assert_eq!(read_checkout(&answer, ID), Reading::Unknown, "{answer}");
        }
    }
}

#[test]
fn a_charged_currency_is_read_as_a_code_and_named_when_it_differs() {
    // Another spelling of the same code: counted in its window, still named (it froze payments).
    let mut lower = checkout("completed", json!(8900));
    lower["currency"] = json!("usd ");
    let c = charge(&quoted(), &lower);
    assert_eq!((c.currency, c.differs), (None, vec!["currency"]));
    // Reconciliation compares the currency too: JPY minor units are not USD cents.
    let mut jpy = checkout("completed", json!(21900));
    jpy["currency"] = json!("JPY");
    let Settlement::Completed(c) =
        cajaguard_core::settle::reconcile(&result(jpy), ID, None, &RESERVED)
    else {
        panic!("not completed")
    };
    assert_eq!(
        (c.amount, c.currency.as_deref(), c.differs),
        (21900, Some("JPY"), vec!["currency"])
    );
}

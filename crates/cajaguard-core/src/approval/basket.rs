//! How a basket is hashed into its [`BasketDigest`] (SPEC §6): the shop's quote and the complete
//! request's instruments, encoded in RFC 8785 and hashed with SHA-256. The hand-written encoder is
//! the hot path; `serde_json_canonicalizer` is the reference and the out-of-range fallback.

use sha2::{Digest as _, Sha256};

use super::jcs::{self, canonical};
use crate::agent::AgentId;
use crate::digest::BasketDigest;
use crate::quote::Quote;
use crate::request::Instrument;

impl BasketDigest {
    /// The digest of the basket the shop quoted, paid with these instruments.
    pub fn of(quote: &Quote, instruments: &[Instrument]) -> BasketDigest {
        let all_safe = quote.totals.iter().all(|t| jcs::safe(t.amount))
            && quote
                .line_items
                .iter()
                .all(|l| jcs::safe(l.quantity) && jcs::safe(l.unit_price));
        let bytes = if all_safe {
            basket_fast(quote, instruments)
        } else {
            basket_reference(quote, instruments)
        };
        BasketDigest::from_bytes(Sha256::digest(bytes).into())
    }

    /// The request digest (SPEC §6, §13): the basket's digest, bound to the paying agent when
    /// there is one, so an approval for one agent's request never pays for another's identical
    /// basket. Without an agent (`cajaguard mcp` on stdio) it is the basket's digest unchanged.
    pub fn of_request(
        quote: &Quote,
        instruments: &[Instrument],
        agent: Option<&AgentId>,
    ) -> BasketDigest {
        let basket = BasketDigest::of(quote, instruments);
        match agent {
            None => basket,
            Some(agent) => {
                // Domain-separated, length-prefixed: no agent id and basket pair can collide with
                // another, nor with a plain basket digest.
                let mut h = Sha256::new();
                h.update(b"cajaguard agent request v1\0");
                h.update((agent.as_str().len() as u64).to_be_bytes());
                h.update(agent.as_str().as_bytes());
                h.update(basket.as_bytes());
                BasketDigest::from_bytes(h.finalize().into())
            }
        }
    }
}

#[derive(serde::Serialize)]
struct BasketLine<'a> {
    id: &'a str,
    item_id: &'a str,
    quantity: i64,
    title: &'a str,
    unit_price: i64,
}

#[derive(serde::Serialize)]
struct BasketTotal<'a> {
    amount: i64,
    #[serde(rename = "type")]
    kind: &'a str,
}

#[derive(serde::Serialize)]
struct BasketInstrument<'a> {
    handler_id: &'a str,
    id: Option<&'a str>,
}

#[derive(serde::Serialize)]
struct Basket<'a> {
    checkout_id: &'a str,
    currency: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    fulfillment: Option<serde_json::Value>,
    instruments: Vec<BasketInstrument<'a>>,
    line_items: Vec<BasketLine<'a>>,
    merchant: Option<&'a str>,
    totals: Vec<BasketTotal<'a>>,
}

/// The basket's RFC 8785 bytes via `serde_json_canonicalizer` (reference and out-of-range fallback).
fn basket_reference(quote: &Quote, instruments: &[Instrument]) -> Vec<u8> {
    canonical(&Basket {
        checkout_id: &quote.checkout_id,
        currency: &quote.currency,
        fulfillment: quote
            .fulfillment
            .as_deref()
            .map(|f| serde_json::from_str(f).unwrap_or(serde_json::Value::Null)),
        instruments: instruments
            .iter()
            .map(|i| BasketInstrument {
                handler_id: &i.handler_id,
                id: i.id.as_deref(),
            })
            .collect(),
        line_items: quote
            .line_items
            .iter()
            .map(|l| BasketLine {
                id: &l.id,
                item_id: &l.item_id,
                quantity: l.quantity,
                title: &l.title,
                unit_price: l.unit_price,
            })
            .collect(),
        merchant: quote.merchant.as_deref(),
        totals: quote
            .totals
            .iter()
            .map(|t| BasketTotal {
                amount: t.amount,
                kind: &t.kind,
            })
            .collect(),
    })
}

/// The basket's RFC 8785 bytes, written by hand (keys in JCS order); only for safe integers.
/// `quote.fulfillment` is already RFC 8785 text (the quote canonicalised it) and goes in as is.
fn basket_fast(quote: &Quote, instruments: &[Instrument]) -> Vec<u8> {
    use jcs::{int, key, str};
    let mut out = Vec::with_capacity(160 + 96 * quote.line_items.len());
    out.push(b'{');
    key(&mut out, true, "checkout_id");
    str(&mut out, &quote.checkout_id);
    key(&mut out, false, "currency");
    str(&mut out, &quote.currency);
    if let Some(fulfillment) = &quote.fulfillment {
        key(&mut out, false, "fulfillment");
        out.extend_from_slice(fulfillment.as_bytes());
    }
    key(&mut out, false, "instruments");
    out.push(b'[');
    for (i, inst) in instruments.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        key(&mut out, true, "handler_id");
        str(&mut out, &inst.handler_id);
        key(&mut out, false, "id");
        match &inst.id {
            Some(id) => str(&mut out, id),
            None => out.extend_from_slice(b"null"),
        }
        out.push(b'}');
    }
    out.push(b']');
    key(&mut out, false, "line_items");
    out.push(b'[');
    for (i, l) in quote.line_items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        key(&mut out, true, "id");
        str(&mut out, &l.id);
        key(&mut out, false, "item_id");
        str(&mut out, &l.item_id);
        key(&mut out, false, "quantity");
        int(&mut out, l.quantity);
        key(&mut out, false, "title");
        str(&mut out, &l.title);
        key(&mut out, false, "unit_price");
        int(&mut out, l.unit_price);
        out.push(b'}');
    }
    out.push(b']');
    key(&mut out, false, "merchant");
    match &quote.merchant {
        Some(m) => str(&mut out, m),
        None => out.extend_from_slice(b"null"),
    }
    key(&mut out, false, "totals");
    out.push(b'[');
    for (i, t) in quote.totals.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        key(&mut out, true, "amount");
        int(&mut out, t.amount);
        key(&mut out, false, "type");
        str(&mut out, &t.kind);
        out.push(b'}');
    }
    out.push(b']');
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quote::{QuoteLine, QuoteTotal};
    use proptest::prelude::*;

    const MAX_SAFE: i64 = crate::money::MAX_MINOR;

    pub(crate) fn any_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[a-z0-9_\\-\"\\\\/\u{0}-\u{1f}\u{7f}\u{2028}é€😀]{0,20}"
        ]
    }

    proptest! {
        #[test]
        fn hand_written_jcs_equals_serde_json_canonicalizer(
            merchant in proptest::option::of(any_text()),
            checkout_id in any_text(),
            currency in any_text(),
            total in -MAX_SAFE..=MAX_SAFE,
            lines in proptest::collection::vec((any_text(), any_text(), any_text(), 1i64..=MAX_SAFE, 0i64..=MAX_SAFE), 0..4),
            totals in proptest::collection::vec((any_text(), -MAX_SAFE..=MAX_SAFE), 0..4),
            instruments in proptest::collection::vec((proptest::option::of(any_text()), any_text()), 0..3),
            fulfillment in proptest::option::of(any_text()),
        ) {
            let quote = Quote {
                checkout_id,
                status: "ready_for_complete".into(),
                currency,
                total,
                line_items: lines.into_iter().map(|(id, item_id, title, quantity, unit_price)| QuoteLine {
                    id, item_id, title, quantity, unit_price,
                }).collect(),
                merchant,
                totals: totals.into_iter().map(|(kind, amount)| QuoteTotal { kind, amount }).collect(),
                // The quote holds it canonicalised; any JSON value stands in for destinations.
                fulfillment: fulfillment.map(|text| {
                    serde_json_canonicalizer::to_string(&serde_json::json!([{"type": "shipping", "destinations": [{"address": text}]}])).unwrap()
                }),
            };
            let instruments: Vec<Instrument> = instruments
                .into_iter()
                .map(|(id, handler_id)| Instrument { id, handler_id })
                .collect();
            prop_assert_eq!(basket_fast(&quote, &instruments), basket_reference(&quote, &instruments));
        }
    }

    #[test]
    fn out_of_range_integers_fall_back_to_the_reference_encoder() {
        let quote = Quote {
            checkout_id: "c".into(),
            status: "s".into(),
            currency: "USD".into(),
            total: i64::MAX,
            totals: vec![QuoteTotal {
                kind: "total".into(),
                amount: i64::MAX,
            }],
            ..Quote::default()
        };
        let d = BasketDigest::of(&quote, &[]);
        assert_eq!(
            *d.as_bytes(),
            <[u8; 32]>::from(Sha256::digest(basket_reference(&quote, &[])))
        );
    }
}

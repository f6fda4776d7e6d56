//! What the shop's answer to a forwarded `complete_checkout` means for the ledger (SPEC §4.13).

use serde_json::Value;

use crate::money::MAX_MINOR;

/// How a reservation ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The shop says `completed`; count `total` (the higher of the quote and the shop's own total).
    Completed { charged: i64, mismatch: bool },
    /// An error, a decline, `incomplete`...: release the reservation (a used approval stays used).
    Released,
    /// No usable answer: keep the reservation (fail closed) until reconciled.
    Unknown,
}

/// `result` is the shop's `tools/call` result (`Ok`) or a JSON-RPC error / transport failure (`Err`
/// with `true` when the outcome is unknown: timeout, crash; `false` for a JSON-RPC error answer).
///
/// Fail closed: only an answer that says the payment did not happen releases the reservation;
/// anything the gate cannot read keeps it. `complete_in_progress` keeps it too, since the payment
/// may still go through.
pub fn classify(result: Result<&serde_json::Value, bool>, quoted_total: i64) -> Settlement {
    let result = match result {
        Err(true) => return Settlement::Unknown,
        Err(false) => return Settlement::Released,
        Ok(r) => r,
    };
    let Some(obj) = result.as_object() else {
        return Settlement::Unknown;
    };
    if obj.get("isError").and_then(Value::as_bool) == Some(true) {
        return Settlement::Released;
    }
    let Some(checkout) = checkout_of(obj) else {
        return Settlement::Unknown;
    };
    let Some(checkout) = checkout.as_object() else {
        return Settlement::Unknown;
    };
    let ucp_error = checkout
        .get("ucp")
        .and_then(|u| u.get("status"))
        .and_then(Value::as_str)
        .is_some_and(|s| s == "error");
    if ucp_error || (checkout.contains_key("messages") && !checkout.contains_key("status")) {
        return Settlement::Released;
    }
    match checkout.get("status").and_then(Value::as_str) {
        Some("completed") => {
            let shop_total = single_total(&Value::Object(checkout.clone()));
            match shop_total {
                Some(t) if t > quoted_total => Settlement::Completed {
                    charged: t,
                    mismatch: true,
                },
                // Unreadable or not higher: the quoted total, already checked against the caps, counts.
                _ => Settlement::Completed {
                    charged: quoted_total,
                    mismatch: false,
                },
            }
        }
        Some("complete_in_progress") | None => Settlement::Unknown,
        Some(_) => Settlement::Released,
    }
}

/// `structuredContent`, else the first text content that parses as a JSON object.
fn checkout_of(result: &serde_json::Map<String, Value>) -> Option<Value> {
    if let Some(sc) = result.get("structuredContent")
        && sc.is_object()
    {
        return Some(sc.clone());
    }
    result.get("content")?.as_array()?.iter().find_map(|c| {
        if c.get("type").and_then(Value::as_str) != Some("text") {
            return None;
        }
        let parsed: Value = serde_json::from_str(c.get("text")?.as_str()?).ok()?;
        parsed.is_object().then_some(parsed)
    })
}

/// What a reservation whose outcome was never learnt (the proxy crashed, or the shop did not
/// answer) comes to, read back from the shop: `result` is the shop's `tools/call` result of
/// `get_checkout` for that checkout, `order_total` the single total of the order it names (when the
/// caller asked `get_order` because the checkout's own total is unreadable), `reserved` the amount
/// held for it.
///
/// Unlike [`classify`], an answer the reconciler cannot read is never a release: an error, a
/// missing checkout or an unknown status keeps the reservation (fail closed), since the payment may
/// have happened. `completed` counts the higher of the reservation and the shop's total; a checkout
/// still open (`ready_for_complete`, `incomplete`) or `canceled` was not paid. The caller decides
/// whether the attempt is old enough that no live call can still complete it.
pub fn reconcile(result: &Value, order_total: Option<i64>, reserved: i64) -> Settlement {
    let Some(obj) = result.as_object() else {
        return Settlement::Unknown;
    };
    if obj.get("isError").and_then(Value::as_bool) == Some(true) {
        return Settlement::Unknown;
    }
    let Some(checkout) = checkout_of(obj) else {
        return Settlement::Unknown;
    };
    let ucp_error = checkout
        .get("ucp")
        .and_then(|u| u.get("status"))
        .and_then(Value::as_str)
        .is_some_and(|s| s == "error");
    if ucp_error {
        return Settlement::Unknown;
    }
    match checkout.get("status").and_then(Value::as_str) {
        Some("completed") => match single_total(&checkout).or(order_total) {
            Some(t) if t > reserved => Settlement::Completed {
                charged: t,
                mismatch: true,
            },
            _ => Settlement::Completed {
                charged: reserved,
                mismatch: false,
            },
        },
        Some("ready_for_complete" | "incomplete" | "canceled") => Settlement::Released,
        _ => Settlement::Unknown,
    }
}

/// The checkout inside a `get_checkout` result (structured content or JSON text), if any.
pub fn checkout_in_result(result: &Value) -> Option<Value> {
    checkout_of(result.as_object()?)
}

/// `order.id` of a completed checkout, when its own total cannot be read and the order must be asked.
pub fn order_to_ask(checkout: &Value) -> Option<&str> {
    if checkout.get("status").and_then(Value::as_str) != Some("completed")
        || single_total(checkout).is_some()
    {
        return None;
    }
    checkout.pointer("/order/id").and_then(Value::as_str)
}

/// The one `totals[]` entry of type `total` of a checkout or an order, if it is a readable amount.
pub fn single_total(document: &Value) -> Option<i64> {
    let totals = document.get("totals")?.as_array()?;
    let mut found = totals
        .iter()
        .filter(|t| t.get("type").and_then(Value::as_str) == Some("total"));
    let one = found.next()?;
    if found.next().is_some() {
        return None;
    }
    one.get("amount")
        .and_then(Value::as_i64)
        .filter(|a| (0..=MAX_MINOR).contains(a))
}

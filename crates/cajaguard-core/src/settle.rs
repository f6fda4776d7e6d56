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
            let shop_total = checkout
                .get("totals")
                .and_then(Value::as_array)
                .and_then(|totals| {
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
                });
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

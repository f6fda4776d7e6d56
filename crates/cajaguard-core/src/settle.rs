//! What the shop's answers mean for the ledger (SPEC §4.13): the answer to a forwarded
//! `complete_checkout`, the `get_checkout` read once more before a release, and what reconciliation
//! reads for a reservation whose outcome was never learnt.
//!
//! Fail closed throughout: a reservation is released only on the shop's explicit word that this
//! attempt did not pay, and only after the checkout reads as not completed; anything the gate
//! cannot read keeps it. A completion is compared with the quote the gate checked, and whatever
//! differs is named, so the caller can count it as charged and freeze payments.

use serde_json::Value;

use crate::money::MAX_MINOR;
use crate::quote::Quote;

/// How a reservation ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The shop completed the checkout: count the charge.
    Completed(Charge),
    /// The shop said this attempt did not pay: release the reservation (a used approval stays used).
    Released,
    /// No usable answer: keep the reservation and the claim (fail closed) until the outcome is known.
    Unknown,
}

/// What a completion counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// Minor units of `currency` (or of the reservation's currency when `currency` is `None`).
    pub amount: i64,
    /// The currency the shop charged in, when it is not the reserved one.
    pub currency: Option<String>,
    /// What the completed checkout changed against the quote the gate checked (`currency`,
    /// `merchant`, `total`, `line_items`); empty when it is the basket the gate checked.
    pub differs: Vec<&'static str>,
}

impl Charge {
    /// The reserved amount, as checked.
    pub fn as_reserved(amount: i64) -> Charge {
        Charge {
            amount,
            currency: None,
            differs: Vec::new(),
        }
    }

    /// Whether the completion differs from what the gate checked (it then freezes payments).
    pub fn differs(&self) -> bool {
        !self.differs.is_empty()
    }
}

/// The shop's answer to a forwarded `complete_checkout`, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// The checkout it returned reads `completed`.
    Completed(Value),
    /// The shop's explicit word that this attempt did not pay: a tool error, or a checkout whose
    /// status is neither `completed` nor `complete_in_progress`. (A JSON-RPC error answer is the
    /// caller's to map here too.)
    Refused,
    /// Anything else: `complete_in_progress`, no checkout to read, not an object.
    Unknown,
}

/// Reads the `tools/call` result the shop answered a forwarded `complete_checkout` of
/// `checkout_id` with. A checkout that names another id (or none) is not this payment's word
/// either way: a shop that caches answers by idempotency key alone, say, could answer with
/// another checkout's completion, and counting it would settle (and end the claim of) a payment
/// that may still be under way.
pub fn read_completion(result: &Value, checkout_id: &str) -> Completion {
    let Some(obj) = result.as_object() else {
        return Completion::Unknown;
    };
    if obj.get("isError").and_then(Value::as_bool) == Some(true) {
        return Completion::Refused;
    }
    let Some(checkout) = checkout_of(obj) else {
        return Completion::Unknown;
    };
    if is_error_response(&checkout) {
        return Completion::Refused;
    }
    if checkout.get("id").and_then(Value::as_str) != Some(checkout_id) {
        return Completion::Unknown;
    }
    match checkout.get("status").and_then(Value::as_str) {
        Some("completed") => Completion::Completed(checkout),
        Some("complete_in_progress") | None => Completion::Unknown,
        Some(_) => Completion::Refused,
    }
}

/// What a `get_checkout` answer says about a payment made on that checkout.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// `completed`: the payment happened (the checkout, to count it).
    Completed(Value),
    /// Still open or canceled: no payment on it has landed.
    Open,
    /// An error, no checkout, `complete_in_progress` or an unknown status: nothing can be concluded.
    Unknown,
}

/// Reads the shop's `get_checkout` `tools/call` result for `checkout_id`. Unlike
/// [`read_completion`], an answer that cannot be read is never taken for "not paid", and neither
/// is one about another checkout (or about none named): only this checkout's own status says how
/// its payment ended.
pub fn read_checkout(result: &Value, checkout_id: &str) -> Reading {
    let Some(obj) = result.as_object() else {
        return Reading::Unknown;
    };
    if obj.get("isError").and_then(Value::as_bool) == Some(true) {
        return Reading::Unknown;
    }
    let Some(checkout) = checkout_of(obj) else {
        return Reading::Unknown;
    };
    if is_error_response(&checkout)
        || checkout.get("id").and_then(Value::as_str) != Some(checkout_id)
    {
        return Reading::Unknown;
    }
    match checkout.get("status").and_then(Value::as_str) {
        Some("completed") => Reading::Completed(checkout),
        // `requires_escalation` is not "open": the buyer may be paying at `continue_url` right
        // now, outside CajaGuard, so the reservation keeps counting.
        Some("ready_for_complete" | "incomplete" | "canceled") => Reading::Open,
        _ => Reading::Unknown,
    }
}

/// What a completed `checkout` counts against the `quote` the gate checked: the quoted total when
/// it is the same basket; otherwise the charge as the shop reports it (the higher of quoted and
/// charged when the currency is the same, the shop's amount in the shop's currency when not), with
/// the differing fields named. A field the completion leaves out is not compared; one it holds but
/// that cannot be read counts as differing (fail closed).
pub fn charge(quote: &Quote, checkout: &Value) -> Charge {
    let mut differs = Vec::new();
    let currency = charged_currency(checkout, &quote.currency, &mut differs);
    let shop_total = match checkout.get("totals") {
        None => None,
        Some(_) => match single_total(checkout) {
            Some(t) => {
                if t != quote.total {
                    differs.push("total");
                }
                Some(t)
            }
            None => {
                differs.push("total");
                None
            }
        },
    };
    if has_merchant_url(checkout) && merchant_of(checkout) != quote.merchant {
        differs.push("merchant");
    }
    if let Some(lines) = checkout.get("line_items")
        && !same_lines(quote, lines)
    {
        differs.push("line_items");
    }
    let amount = match (&currency, shop_total) {
        (None, Some(t)) => t.max(quote.total),
        (Some(_), Some(t)) => t,
        (_, None) => quote.total,
    };
    Charge {
        amount,
        currency,
        differs,
    }
}

/// What the gate reserved for a payment whose outcome was never learnt.
#[derive(Debug, Clone, Copy)]
pub struct Reserved<'a> {
    /// Minor units.
    pub total: i64,
    pub currency: &'a str,
    /// The merchant the gate allowed it for.
    pub merchant: &'a str,
}

/// What a reservation whose outcome was never learnt comes to, read back from the shop: `result`
/// is the shop's `get_checkout` result for that checkout (`checkout_id`), `order_total` the single total of the
/// order it names (when the caller asked `get_order` because the checkout's own total is
/// unreadable), `reserved` what was held for it. `completed` counts the higher of the
/// reservation and the shop's total (a higher one is named as differing, and so is another
/// currency or merchant); a checkout still open or
/// canceled was not paid; anything unreadable keeps the reservation. The caller decides whether
/// the attempt is old enough that no live call can still complete it.
pub fn reconcile(
    result: &Value,
    checkout_id: &str,
    order_total: Option<i64>,
    reserved: &Reserved<'_>,
) -> Settlement {
    let Reserved {
        total: reserved,
        currency: reserved_currency,
        merchant: reserved_merchant,
    } = *reserved;
    match read_checkout(result, checkout_id) {
        Reading::Completed(checkout) => {
            let mut differs = Vec::new();
            let currency = charged_currency(&checkout, reserved_currency, &mut differs);
            // As the live settlement compares it: a completion at another merchant's URLs.
            if has_merchant_url(&checkout)
                && merchant_of(&checkout).as_deref() != Some(reserved_merchant)
            {
                differs.push("merchant");
            }
            let amount = match single_total(&checkout).or(order_total) {
                Some(t) if currency.is_some() => t,
                Some(t) if t > reserved => {
                    differs.push("total");
                    t
                }
                _ => reserved,
            };
            Settlement::Completed(Charge {
                amount,
                currency,
                differs,
            })
        }
        Reading::Open => Settlement::Released,
        Reading::Unknown => Settlement::Unknown,
    }
}

/// The currency a completed checkout was charged in when it is not `expected` (`None`: the same,
/// or none stated). Compared as ISO 4217 codes are (trimmed, upper case), so that `"usd "` books
/// in the USD window; any difference, in form too, is named.
fn charged_currency(
    checkout: &Value,
    expected: &str,
    differs: &mut Vec<&'static str>,
) -> Option<String> {
    match checkout.get("currency") {
        None => None,
        Some(Value::String(c)) if c == expected => None,
        Some(Value::String(c)) => {
            differs.push("currency");
            let code = c.trim().to_ascii_uppercase();
            (code != expected).then_some(code)
        }
        Some(_) => {
            differs.push("currency");
            None
        }
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

/// A UCP error response (`ucp.status: "error"`, or messages with no checkout status).
fn is_error_response(checkout: &Value) -> bool {
    let ucp_error = checkout
        .pointer("/ucp/status")
        .and_then(Value::as_str)
        .is_some_and(|s| s == "error");
    ucp_error || (checkout.get("messages").is_some() && checkout.get("status").is_none())
}

fn has_merchant_url(checkout: &Value) -> bool {
    checkout.get("continue_url").is_some()
        || checkout
            .get("links")
            .and_then(Value::as_array)
            .is_some_and(|l| !l.is_empty())
}

/// The merchant host exactly as [`Quote::from_shop`] reads it.
fn merchant_of(checkout: &Value) -> Option<String> {
    let mut probe = serde_json::Map::new();
    for key in ["continue_url", "links"] {
        if let Some(v) = checkout.get(key) {
            probe.insert(key.to_owned(), v.clone());
        }
    }
    crate::quote::merchant_from(&probe)
}

/// Each line's id, item id, quantity and unit price, in order, as the quote has them.
fn same_lines(quote: &Quote, lines: &Value) -> bool {
    let Some(lines) = lines.as_array() else {
        return false;
    };
    lines.len() == quote.line_items.len()
        && lines.iter().zip(&quote.line_items).all(|(line, quoted)| {
            line.get("id").and_then(Value::as_str) == Some(quoted.id.as_str())
                && line.pointer("/item/id").and_then(Value::as_str) == Some(quoted.item_id.as_str())
                && line.get("quantity").and_then(Value::as_i64) == Some(quoted.quantity)
                && line.pointer("/item/price").and_then(Value::as_i64) == Some(quoted.unit_price)
        })
}

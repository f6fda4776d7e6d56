//! Reading a checkout back from the shop (SPEC §4.4), shared by the gate and `cajaguard approve`.

use cajaguard_core::quote::Quote;
use cajaguard_core::verdict::{Reason, Ruling};
use serde_json::Value;

use super::{Reply, ShopError};

/// `tools/call` params for the shop's `get_checkout`, with the caller's UCP agent identity.
pub fn get_checkout_params(agent: &Value, checkout_id: &str) -> String {
    serde_json::json!({
        "name": "get_checkout",
        "arguments": { "meta": { "ucp-agent": agent }, "id": checkout_id },
    })
    .to_string()
}

/// The shop's answer to `get_checkout`, read strictly; any failure is `checkout_unreadable` (or the
/// quote's own refusal, such as `amount_not_minor_units`).
pub fn quote_from_reply(
    reply: Result<Reply, ShopError>,
    checkout_id: &str,
) -> Result<Quote, Ruling> {
    let unreadable = |why: String| Ruling::new(Reason::CheckoutUnreadable, why);
    let result = match reply {
        Ok(Reply::Result(result)) => result,
        Ok(Reply::Error(_)) => {
            return Err(unreadable(
                "the shop answered get_checkout with an error".into(),
            ));
        }
        Err(e) => return Err(unreadable(format!("get_checkout failed: {e}"))),
    };
    let result: Value = serde_json::from_str(result.get())
        .map_err(|_| unreadable("the shop's get_checkout answer is not JSON".into()))?;
    quote_from_result(&result, checkout_id)
}

/// The shop's `get_checkout` `tools/call` result (already parsed), read strictly.
pub fn quote_from_result(result: &Value, checkout_id: &str) -> Result<Quote, Ruling> {
    let unreadable = |why: String| Ruling::new(Reason::CheckoutUnreadable, why);
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(unreadable(
            "the shop answered get_checkout with isError".into(),
        ));
    }
    let checkout = match result.get("structuredContent") {
        Some(content) => content.clone(),
        // Servers that predate structured content put the payload in a text part only.
        None => result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .and_then(|text| serde_json::from_str(text).ok())
            .ok_or_else(|| unreadable("the shop's get_checkout answer has no checkout".into()))?,
    };
    let quote = Quote::from_shop(&checkout)?;
    if quote.checkout_id != checkout_id {
        return Err(unreadable(
            "the shop answered get_checkout with another checkout".into(),
        ));
    }
    Ok(quote)
}

//! What a request is answered with, before the era's envelope goes on: a result, the shop's own
//! error, or an error line of the proxy's; and the tool results CajaGuard writes itself (a
//! refusal, a shop that failed).

use cajaguard_core::verdict::Ruling;
use serde_json::value::RawValue;

use super::ShopError;

/// What one request is answered with, before the era's envelope is applied.
pub enum Answer {
    /// A result object (JSON).
    Result(String),
    /// An error object the shop sent, passed on unchanged.
    ForwardedError(Box<RawValue>),
    /// A whole error line made by the proxy.
    ErrorLine(String),
}

/// A refusal as the agent sees it: a tool result with `isError`, the ruling in `structuredContent`
/// and, as JSON, in the text content.
pub fn refusal(ruling: &Ruling) -> Answer {
    tool_result(&ruling.to_json(), true)
}

pub(crate) fn tool_result(document: &serde_json::Value, is_error: bool) -> Answer {
    let text = document.to_string();
    let result = serde_json::json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": document,
        "isError": is_error,
    });
    Answer::Result(result.to_string())
}

/// A shop that failed to answer a forwarded call: a tool error the agent can read, never a hang.
pub(crate) fn shop_failure(error: &ShopError) -> Answer {
    let document = serde_json::json!({ "cajaguard": { "error": "shop_unavailable", "detail": error.to_string() } });
    tool_result(&document, true)
}

//! The test-mode tripwire (SPEC §5): refuses anything that looks like a real card number or a live
//! credential before the shop sees it. A hit names the JSON path and the rule, never the value.

use crate::policy::TestModePolicy;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A payment instrument whose `handler_id` is not in `test_mode.handler_ids`.
    HandlerNotTest,
    /// A card credential (`type` card, `pan`, `network_token`, a `number`/`cvc`/`cryptogram`).
    CardCredential,
    /// A token credential whose token does not match `test_mode.token_pattern`.
    TokenNotTest,
    /// 13-19 digits passing Luhn, anywhere.
    CardNumber,
    /// A secret-like field whose value has a `live` segment.
    LiveSecret,
    /// `sk_live_`, `rk_live_` anywhere.
    LiveKeyPrefix,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        todo!()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Like `$.checkout.payment.instruments[0].credential.token`. Keys are escaped so that a key
    /// holding a card number is not repeated in the path (the path shows `[key #n]` instead).
    pub path: String,
    pub rule: Rule,
}

/// Scans a tool call's arguments; the first hit in document order, or `None`.
pub fn scan(policy: &TestModePolicy, args: &serde_json::Value) -> Option<Hit> {
    todo!("{policy:?} {args}")
}

/// True when `text` (after NFKC, UUIDs removed) holds a 13-19 digit Luhn-valid run.
pub fn contains_card_number(text: &str) -> bool {
    todo!("{text}")
}

//! What the shop's answer to a forwarded `complete_checkout` means for the ledger (SPEC §4.13).

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
pub fn classify(result: Result<&serde_json::Value, bool>, quoted_total: i64) -> Settlement {
    todo!("{result:?} {quoted_total}")
}

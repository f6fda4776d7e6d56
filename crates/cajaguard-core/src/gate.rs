//! The decision (SPEC §4): pure functions from the policy, the agent's request, the shop's quote,
//! the ledger's view, approvals and the clock to a ruling. Precedence fails closed: tripwire, then
//! malformed input, then hard caps, then approval, then allow.

use time::OffsetDateTime;

use crate::approval::{ApprovalDocument, BasketDigest, RequestId, TrustedKeys};
use crate::policy::Policy;
use crate::quote::Quote;
use crate::request::CompleteRequest;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    AllowApproved,
    /// A human can unblock it.
    Blocked,
    /// Nothing can.
    Denied,
}

impl Verdict {
    /// `allow`, `allow_approved`, `blocked`, `denied`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::AllowApproved => "allow_approved",
            Verdict::Blocked => "blocked",
            Verdict::Denied => "denied",
        }
    }
}

/// Every reason code. `as_str` gives the wire form (`over_window_cap`), `verdict` the verdict it
/// always comes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    WithinCaps,
    SignedApproval,
    /// A retry with the same idempotency key while the first attempt's outcome is unknown (§4.13).
    IdempotentRetry,
    PendingApproval,
    ApprovalExpired,
    ApprovalUntrustedKey,
    ApprovalBadSignature,
    ApprovalAlreadyUsed,
    ApprovalTtlTooLong,
    /// Another attempt on this checkout is in flight with another idempotency key: its outcome
    /// must be learnt first (blocked until reconciled).
    PaymentInFlight,
    OverPerTransactionCap,
    OverWindowCap,
    MerchantNotAllowed,
    CurrencyNotAllowed,
    AmountNotMinorUnits,
    RequestFieldNotAllowed,
    CheckoutNotReady,
    CheckoutUnreadable,
    TestModeCredential,
    ApprovalDenied,
    BadRequest,
    ToolNotAllowed,
    /// The store could not be read or written: refused, never forwarded (fail closed).
    StoreUnavailable,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        todo!()
    }
    pub fn verdict(self) -> Verdict {
        todo!()
    }
    /// Every reason, for tests and docs.
    pub const ALL: &'static [Reason] = &[];
}

/// What the agent is told. `detail` is for a human and never holds a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruling {
    pub verdict: Verdict,
    pub reason: Reason,
    pub detail: String,
    pub request_id: Option<RequestId>,
    /// What a human must do, e.g. `cajaguard approve cg-… --config FILE`.
    pub next: Option<String>,
}

impl Ruling {
    /// A ruling with the verdict that `reason` implies.
    pub fn new(reason: Reason, detail: impl Into<String>) -> Ruling {
        Ruling { verdict: reason.verdict(), reason, detail: detail.into(), request_id: None, next: None }
    }
    /// `{ "cajaguard": { "verdict", "reason", "detail", "request_id"?, "next"? } }`
    pub fn to_json(&self) -> serde_json::Value {
        todo!()
    }
}

/// The ledger's state for the checkout being decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckoutLedger {
    /// Never reserved, or every earlier attempt was released.
    Fresh,
    /// Reserved; the outcome of the attempt with this idempotency key is not known yet.
    InFlight { idempotency_key: String, total: i64 },
    /// The shop reported it completed; its spend is counted.
    Settled { total: i64 },
}

/// What the store knows, read inside the same transaction that will apply the [`Effect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerView {
    /// Settled and in-flight spend in the quote's currency over the window, in minor units,
    /// **excluding** this checkout's own entry.
    pub window_spent: i64,
    pub checkout: CheckoutLedger,
}

/// A signed approval found for this request id, and whether the store has seen it used.
#[derive(Debug, Clone)]
pub struct ApprovalCandidate {
    pub document: ApprovalDocument,
    pub used: bool,
}

/// The pending request the store writes when the gate blocks (so `approve` can show it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRequest {
    pub request_id: RequestId,
    pub digest: BasketDigest,
    pub merchant: String,
    pub checkout_id: String,
    pub currency: String,
    pub total: i64,
    pub handler_ids: Vec<String>,
}

/// What the store must do, atomically with the read that produced the [`LedgerView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Forward the call: reserve `total` against `currency` for this checkout and idempotency key,
    /// and mark the approval with this nonce used (if any).
    Forward { currency: String, total: i64, merchant: String, use_approval_nonce: Option<String> },
    /// Forward again without a new reservation or approval (idempotent retry, §4.13).
    Retry,
    /// Refuse; when blocked for approval, record the pending request.
    Refuse { pending: Option<PendingRequest> },
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub ruling: Ruling,
    pub effect: Effect,
}

/// Steps 1-3: tripwire (test mode), shape, fields. Done before the shop is asked anything.
pub fn precheck(policy: &Policy, args: &serde_json::Value) -> Result<CompleteRequest, Ruling> {
    todo!("{policy:?} {args}")
}

/// Inputs of [`decide`] besides the policy.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub request: &'a CompleteRequest,
    pub quote: &'a Quote,
    pub ledger: &'a LedgerView,
    pub approvals: &'a [ApprovalCandidate],
    pub trusted_keys: &'a TrustedKeys,
    pub now: OffsetDateTime,
}

/// Steps 6-12 (4-5 are [`Quote::from_shop`]). Pure: same inputs, same outcome.
pub fn decide(policy: &Policy, facts: &Facts<'_>) -> Outcome {
    todo!("{policy:?} {facts:?}")
}

//! What the gate tells the agent: a [`Verdict`], the [`Reason`] it follows from, and the
//! [`Ruling`] that carries both. A leaf: it depends on nothing but the request id, so the readers
//! of the agent's request and the shop's checkout can refuse without importing the gate.
//!
//! A ruling's verdict is never stored beside its reason: it is computed from it
//! ([`Reason::verdict`]), so no caller (test or code) can pair them inconsistently.

use crate::digest::RequestId;

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
    /// The checkout is claimed by a payment whose outcome is not known yet (another attempt, or a
    /// retry whose basket differs from the reserved one), or an update of it is in flight.
    PaymentInFlight,
    /// Payments are frozen (SPEC §7) until a human unfreezes them.
    Frozen,
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
        match self {
            Reason::WithinCaps => "within_caps",
            Reason::SignedApproval => "signed_approval",
            Reason::IdempotentRetry => "idempotent_retry",
            Reason::PendingApproval => "pending_approval",
            Reason::ApprovalExpired => "approval_expired",
            Reason::ApprovalUntrustedKey => "approval_untrusted_key",
            Reason::ApprovalBadSignature => "approval_bad_signature",
            Reason::ApprovalAlreadyUsed => "approval_already_used",
            Reason::ApprovalTtlTooLong => "approval_ttl_too_long",
            Reason::PaymentInFlight => "payment_in_flight",
            Reason::Frozen => "frozen",
            Reason::OverPerTransactionCap => "over_per_transaction_cap",
            Reason::OverWindowCap => "over_window_cap",
            Reason::MerchantNotAllowed => "merchant_not_allowed",
            Reason::CurrencyNotAllowed => "currency_not_allowed",
            Reason::AmountNotMinorUnits => "amount_not_minor_units",
            Reason::RequestFieldNotAllowed => "request_field_not_allowed",
            Reason::CheckoutNotReady => "checkout_not_ready",
            Reason::CheckoutUnreadable => "checkout_unreadable",
            Reason::TestModeCredential => "test_mode_credential",
            Reason::ApprovalDenied => "approval_denied",
            Reason::BadRequest => "bad_request",
            Reason::ToolNotAllowed => "tool_not_allowed",
            Reason::StoreUnavailable => "store_unavailable",
        }
    }

    /// The verdict is a function of the reason, so no caller can pair them inconsistently.
    pub fn verdict(self) -> Verdict {
        match self {
            Reason::WithinCaps | Reason::IdempotentRetry => Verdict::Allow,
            Reason::SignedApproval => Verdict::AllowApproved,
            Reason::PendingApproval
            | Reason::ApprovalExpired
            | Reason::ApprovalUntrustedKey
            | Reason::ApprovalBadSignature
            | Reason::ApprovalAlreadyUsed
            | Reason::ApprovalTtlTooLong
            | Reason::PaymentInFlight
            | Reason::Frozen => Verdict::Blocked,
            Reason::OverPerTransactionCap
            | Reason::OverWindowCap
            | Reason::MerchantNotAllowed
            | Reason::CurrencyNotAllowed
            | Reason::AmountNotMinorUnits
            | Reason::RequestFieldNotAllowed
            | Reason::CheckoutNotReady
            | Reason::CheckoutUnreadable
            | Reason::TestModeCredential
            | Reason::ApprovalDenied
            | Reason::BadRequest
            | Reason::ToolNotAllowed
            | Reason::StoreUnavailable => Verdict::Denied,
        }
    }

    /// Every reason, for tests and docs.
    pub const ALL: &'static [Reason] = &[
        Reason::WithinCaps,
        Reason::SignedApproval,
        Reason::IdempotentRetry,
        Reason::PendingApproval,
        Reason::ApprovalExpired,
        Reason::ApprovalUntrustedKey,
        Reason::ApprovalBadSignature,
        Reason::ApprovalAlreadyUsed,
        Reason::ApprovalTtlTooLong,
        Reason::PaymentInFlight,
        Reason::Frozen,
        Reason::OverPerTransactionCap,
        Reason::OverWindowCap,
        Reason::MerchantNotAllowed,
        Reason::CurrencyNotAllowed,
        Reason::AmountNotMinorUnits,
        Reason::RequestFieldNotAllowed,
        Reason::CheckoutNotReady,
        Reason::CheckoutUnreadable,
        Reason::TestModeCredential,
        Reason::ApprovalDenied,
        Reason::BadRequest,
        Reason::ToolNotAllowed,
        Reason::StoreUnavailable,
    ];
}

/// What the agent is told. `detail` is for a human and never holds a secret. Built with
/// [`Ruling::new`] and the `with_*` methods; read through its accessors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruling {
    reason: Reason,
    detail: String,
    request_id: Option<RequestId>,
    next: Option<String>,
    approval_url: Option<String>,
}

impl Ruling {
    /// A ruling for `reason`; its verdict is the one `reason` implies.
    pub fn new(reason: Reason, detail: impl Into<String>) -> Ruling {
        Ruling {
            reason,
            detail: detail.into(),
            request_id: None,
            next: None,
            approval_url: None,
        }
    }
    /// The request a human can approve or look up.
    pub fn with_request_id(mut self, id: RequestId) -> Ruling {
        self.request_id = Some(id);
        self
    }
    /// What a human must do, e.g. `cajaguard approve cg-… --config FILE`.
    pub fn with_next(mut self, next: impl Into<String>) -> Ruling {
        self.next = Some(next.into());
        self
    }
    /// The approval page of this request (SPEC §3: a `blocked` refusal carries it when
    /// `approvals.web` is configured).
    pub fn with_approval_url(mut self, url: impl Into<String>) -> Ruling {
        self.approval_url = Some(url.into());
        self
    }
    pub fn approval_url(&self) -> Option<&str> {
        self.approval_url.as_deref()
    }
    pub fn verdict(&self) -> Verdict {
        self.reason.verdict()
    }
    pub fn reason(&self) -> Reason {
        self.reason
    }
    pub fn detail(&self) -> &str {
        &self.detail
    }
    pub fn request_id(&self) -> Option<&RequestId> {
        self.request_id.as_ref()
    }
    pub fn next(&self) -> Option<&str> {
        self.next.as_deref()
    }
    /// `{ "cajaguard": { "verdict", "reason", "detail", "request_id"?, "next"?, "approval_url"? } }`
    pub fn to_json(&self) -> serde_json::Value {
        let mut inner = serde_json::Map::new();
        inner.insert("verdict".into(), self.verdict().as_str().into());
        inner.insert("reason".into(), self.reason.as_str().into());
        inner.insert("detail".into(), self.detail.clone().into());
        if let Some(id) = &self.request_id {
            inner.insert("request_id".into(), id.as_str().into());
        }
        if let Some(next) = &self.next {
            inner.insert("next".into(), next.clone().into());
        }
        if let Some(url) = &self.approval_url {
            inner.insert("approval_url".into(), url.clone().into());
        }
        let mut outer = serde_json::Map::new();
        outer.insert("cajaguard".into(), serde_json::Value::Object(inner));
        serde_json::Value::Object(outer)
    }
}

//! The decision (SPEC §4): pure functions from the policy, the agent's request, the shop's quote,
//! the ledger's view, approvals and the clock to a ruling. Precedence fails closed: tripwire, then
//! malformed input, then hard caps, then approval, then allow.

use time::OffsetDateTime;

use crate::approval::{
    self, ApprovalDocument, BasketDigest, Decision, Rejection, RequestId, TrustedKeys,
};
pub use crate::freeze::Frozen;
use crate::money::{self, Currency};
use crate::policy::{Mode, Policy};
use crate::quote::Quote;
use crate::request::{CompleteRequest, Instrument};
use crate::tripwire;

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
        Ruling {
            verdict: reason.verdict(),
            reason,
            detail: detail.into(),
            request_id: None,
            next: None,
        }
    }
    /// `{ "cajaguard": { "verdict", "reason", "detail", "request_id"?, "next"? } }`
    pub fn to_json(&self) -> serde_json::Value {
        let mut inner = serde_json::Map::new();
        inner.insert("verdict".into(), self.verdict.as_str().into());
        inner.insert("reason".into(), self.reason.as_str().into());
        inner.insert("detail".into(), self.detail.clone().into());
        if let Some(id) = &self.request_id {
            inner.insert("request_id".into(), id.as_str().into());
        }
        if let Some(next) = &self.next {
            inner.insert("next".into(), next.clone().into());
        }
        let mut outer = serde_json::Map::new();
        outer.insert("cajaguard".into(), serde_json::Value::Object(inner));
        serde_json::Value::Object(outer)
    }
}

/// The ledger's state for the checkout being decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckoutLedger {
    /// Never reserved, or every earlier attempt was released.
    Fresh,
    /// Reserved; the outcome of the attempt with this idempotency key is not known yet. `digest`
    /// is the request digest the reservation was made for (`None` for a row written before
    /// digests were stored: no retry can match it).
    InFlight {
        idempotency_key: String,
        total: i64,
        digest: Option<BasketDigest>,
    },
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
    /// Payments are frozen (SPEC §7), read in the same transaction.
    pub frozen: Option<Frozen>,
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
    /// The complete request's payment instruments (id and handler, never the credential).
    pub instruments: Vec<Instrument>,
}

impl PendingRequest {
    /// The handler of each instrument, in order (what `approve` shows).
    pub fn handler_ids(&self) -> Vec<&str> {
        self.instruments
            .iter()
            .map(|i| i.handler_id.as_str())
            .collect()
    }
}

/// What the store must do, atomically with the read that produced the [`LedgerView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Forward the call: reserve `total` against `currency` for this checkout and idempotency key
    /// (with the request digest, so a retry can be matched to it), and mark the approval with this
    /// nonce used (if any).
    Forward {
        currency: String,
        total: i64,
        merchant: String,
        digest: BasketDigest,
        use_approval_nonce: Option<String>,
    },
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
    if policy.mode == Mode::Test
        && let Some(ruling) = tripwire_ruling(policy, args)
    {
        return Err(ruling);
    }
    CompleteRequest::from_args(args)
}

/// The tripwire on a tool call's arguments alone (SPEC §5): `None` when clean or in live mode.
pub fn tripwire_ruling(policy: &Policy, args: &serde_json::Value) -> Option<Ruling> {
    if policy.mode != Mode::Test {
        return None;
    }
    tripwire::scan(&policy.test_mode, args).map(|hit| tripwire_refusal(&hit))
}

/// The tripwire on the whole `params` of a request or notification bound for the shop (SPEC §5:
/// `arguments`, `_meta` and every other member): `None` when clean or in live mode.
pub fn tripwire_params_ruling(policy: &Policy, params: &serde_json::Value) -> Option<Ruling> {
    if policy.mode != Mode::Test {
        return None;
    }
    tripwire::scan_params(&policy.test_mode, params).map(|hit| tripwire_refusal(&hit))
}

fn tripwire_refusal(hit: &tripwire::Hit) -> Ruling {
    Ruling::new(
        Reason::TestModeCredential,
        format!(
            "test mode refused the call at {} ({}: {}); in test mode use a test handler and a test token",
            hit.path,
            hit.rule.as_str(),
            hit.rule.explain()
        ),
    )
}

/// Shop or agent text shown in a detail: printable, short, no control characters.
fn shown(text: &str) -> String {
    let mut out: String = text.chars().filter(|c| !c.is_control()).take(64).collect();
    if text.chars().count() > 64 {
        out.push('…');
    }
    out
}

/// Inputs of [`decide`] besides the policy.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub request: &'a CompleteRequest,
    pub quote: &'a Quote,
    /// `BasketDigest::of(quote, &request.instruments)`, computed once by the caller.
    pub digest: &'a BasketDigest,
    pub ledger: &'a LedgerView,
    pub approvals: &'a [ApprovalCandidate],
    pub trusted_keys: &'a TrustedKeys,
    pub now: OffsetDateTime,
}

/// The step-0 refusal while payments are frozen.
pub fn frozen_ruling(frozen: &Frozen) -> Ruling {
    let mut ruling = Ruling::new(
        Reason::Frozen,
        format!(
            "payments are frozen ({}); nothing is paid until a human unfreezes them",
            shown(&frozen.reason)
        ),
    );
    ruling.next = Some("a human runs `cajaguard unfreeze --config FILE`".to_owned());
    ruling
}

/// Steps 6-12 (4-5 are [`Quote::from_shop`]), and step 0 again inside the store's transaction.
/// Pure: same inputs, same outcome.
pub fn decide(policy: &Policy, facts: &Facts<'_>) -> Outcome {
    let quote = facts.quote;
    let refuse = |reason: Reason, detail: String| Outcome {
        ruling: Ruling::new(reason, detail),
        effect: Effect::Refuse { pending: None },
    };

    // 0. Frozen: read in the same transaction that would reserve, so a freeze that lands while
    // this call was reading the checkout still holds.
    if let Some(frozen) = &facts.ledger.frozen {
        return Outcome {
            ruling: frozen_ruling(frozen),
            effect: Effect::Refuse { pending: None },
        };
    }

    if quote.checkout_id != facts.request.checkout_id {
        return refuse(
            Reason::CheckoutUnreadable,
            "the shop answered get_checkout with another checkout than the one being completed"
                .to_owned(),
        );
    }

    // 6. Merchant.
    let merchant = match &quote.merchant {
        None => {
            return refuse(
                Reason::MerchantNotAllowed,
                "the shop's checkout has no continue_url or links[] URL, so its merchant is unknown".to_owned(),
            );
        }
        Some(m) if !policy.merchants.contains(m) => {
            return refuse(
                Reason::MerchantNotAllowed,
                format!(
                    "merchant {} is not in the config's merchants list",
                    shown(m)
                ),
            );
        }
        Some(m) => m,
    };

    // 7. Currency.
    let Some(caps) = policy.caps_for(&quote.currency) else {
        return refuse(
            Reason::CurrencyNotAllowed,
            format!(
                "the config has no caps for currency {}, so it cannot be paid in",
                shown(&quote.currency)
            ),
        );
    };
    let cur = caps.currency;
    let amount = |minor: i64| money::display(minor, cur);

    // What the ledger already knows about this checkout comes before status and approval: a retry
    // of an attempt in flight must not need a second approval, and a settled checkout is done.
    match &facts.ledger.checkout {
        CheckoutLedger::Settled { .. } => {
            return refuse(
                Reason::CheckoutNotReady,
                "this checkout was already completed through CajaGuard; its spend is counted"
                    .to_owned(),
            );
        }
        CheckoutLedger::InFlight {
            idempotency_key,
            total,
            digest: Some(reserved),
        } if *idempotency_key == facts.request.idempotency_key && reserved == facts.digest => {
            return Outcome {
                ruling: Ruling::new(
                    Reason::IdempotentRetry,
                    format!(
                        "a retry (same idempotency key) of a payment of {} whose outcome is not known yet: \
                         forwarded again, counted once",
                        amount(*total)
                    ),
                ),
                effect: Effect::Retry,
            };
        }
        CheckoutLedger::InFlight {
            idempotency_key, ..
        } => {
            let why = if *idempotency_key == facts.request.idempotency_key {
                "this retry is not the payment in flight: its basket, merchant, currency, handlers \
                 or instruments differ from the reserved attempt's"
            } else {
                "another payment attempt on this checkout (another idempotency key) is in flight"
            };
            return refuse(
                Reason::PaymentInFlight,
                format!(
                    "{why}; its outcome must be known first: retry with the first attempt's idempotency key"
                ),
            );
        }
        CheckoutLedger::Fresh => {}
    }

    // 8. Status.
    if quote.status != "ready_for_complete" {
        return refuse(
            Reason::CheckoutNotReady,
            format!(
                "the checkout's status is {}, not ready_for_complete",
                shown(&quote.status)
            ),
        );
    }

    // 9. Per-transaction cap.
    if quote.total > caps.per_transaction {
        return refuse(
            Reason::OverPerTransactionCap,
            format!(
                "{} is over the per-transaction cap of {}",
                amount(quote.total),
                amount(caps.per_transaction)
            ),
        );
    }

    // 10. Window cap (settled and in flight, this checkout's own entry excluded by the store).
    let hours = policy.window.as_secs() / 3600;
    let after = facts.ledger.window_spent.saturating_add(quote.total);
    if after > caps.window {
        return refuse(
            Reason::OverWindowCap,
            format!(
                "{} would bring the last {hours} h of spend to {} ({} already spent or in flight), \
                 over the window cap of {}",
                amount(quote.total),
                amount(after),
                amount(facts.ledger.window_spent),
                amount(caps.window)
            ),
        );
    }

    // 11. Approval.
    let over_threshold = quote.total > caps.approval_above;
    if !over_threshold && policy.mode == Mode::Test {
        return Outcome {
            ruling: Ruling::new(
                Reason::WithinCaps,
                format!(
                    "{} is within the caps (approval needed above {})",
                    amount(quote.total),
                    amount(caps.approval_above)
                ),
            ),
            effect: Effect::Forward {
                currency: quote.currency.clone(),
                total: quote.total,
                merchant: merchant.clone(),
                digest: *facts.digest,
                use_approval_nonce: None,
            },
        };
    }
    approval_step(policy, facts, merchant, cur, over_threshold)
}

/// Rank of a rejection when several approvals were found: the most informative one is reported.
fn rejection_rank(r: Rejection) -> Option<(u8, Reason)> {
    match r {
        Rejection::BadSignature => Some((5, Reason::ApprovalBadSignature)),
        Rejection::UntrustedKey => Some((4, Reason::ApprovalUntrustedKey)),
        Rejection::Expired => Some((3, Reason::ApprovalExpired)),
        Rejection::TtlTooLong => Some((2, Reason::ApprovalTtlTooLong)),
        // A malformed file is reported like a bad signature: it cannot be trusted either way.
        Rejection::Malformed => Some((1, Reason::ApprovalBadSignature)),
        Rejection::OtherBasket => None,
    }
}

fn more_informative(a: Option<(u8, Reason)>, b: Option<(u8, Reason)>) -> Option<(u8, Reason)> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.0 > x.0 { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

fn approval_step(
    policy: &Policy,
    facts: &Facts<'_>,
    merchant: &str,
    cur: Currency,
    over_threshold: bool,
) -> Outcome {
    let quote = facts.quote;
    let digest = *facts.digest;
    let request_id = digest.request_id();

    let mut usable_nonce: Option<String> = None;
    let mut best: Option<(u8, Reason)> = None;
    for candidate in facts.approvals {
        match approval::verify(
            &candidate.document,
            facts.trusted_keys,
            &digest,
            facts.now,
            policy.approvals.max_ttl,
        ) {
            Ok(v) if v.decision() == Decision::Deny => {
                let mut ruling = Ruling::new(
                    Reason::ApprovalDenied,
                    format!(
                        "a human signed a deny for {} at {}",
                        money::display(quote.total, cur),
                        shown(merchant)
                    ),
                );
                ruling.request_id = Some(request_id);
                return Outcome {
                    ruling,
                    effect: Effect::Refuse { pending: None },
                };
            }
            Ok(v) if !candidate.used => {
                if usable_nonce.is_none() {
                    usable_nonce = Some(v.nonce().to_owned());
                }
            }
            Ok(_) => best = more_informative(best, Some((6, Reason::ApprovalAlreadyUsed))),
            Err(r) => best = more_informative(best, rejection_rank(r)),
        }
    }

    if let Some(nonce) = usable_nonce {
        let mut ruling = Ruling::new(
            Reason::SignedApproval,
            format!(
                "{} at {} is approved by a signed approval (used now, once)",
                money::display(quote.total, cur),
                shown(merchant)
            ),
        );
        ruling.request_id = Some(request_id);
        return Outcome {
            ruling,
            effect: Effect::Forward {
                currency: quote.currency.clone(),
                total: quote.total,
                merchant: merchant.to_owned(),
                digest,
                use_approval_nonce: Some(nonce),
            },
        };
    }

    let why = if over_threshold {
        format!(
            "it is over the approval threshold of {}",
            policy
                .caps_for(&quote.currency)
                .map_or_else(String::new, |c| money::display(c.approval_above, cur))
        )
    } else {
        "live mode needs a signed approval for every payment".to_owned()
    };
    let (reason, lead) = match best {
        None => (Reason::PendingApproval, "no approval yet"),
        Some((_, Reason::ApprovalAlreadyUsed)) => (
            Reason::ApprovalAlreadyUsed,
            "the approval for this basket was already used (approvals are single-use)",
        ),
        Some((_, Reason::ApprovalBadSignature)) => (
            Reason::ApprovalBadSignature,
            "the approval found does not verify (edited, damaged or malformed)",
        ),
        Some((_, Reason::ApprovalUntrustedKey)) => (
            Reason::ApprovalUntrustedKey,
            "the approval found is signed by a key not in approvals.trusted_keys",
        ),
        Some((_, Reason::ApprovalExpired)) => {
            (Reason::ApprovalExpired, "the approval found has expired")
        }
        Some((_, r)) => (
            r,
            "the approval found lives longer than approvals.max_ttl_minutes allows",
        ),
    };
    let next = format!(
        "cajaguard approve {request_id} --config {}",
        policy.source.display()
    );
    let mut ruling = Ruling::new(
        reason,
        format!(
            "{} at {} needs a human's signed approval ({why}): {lead}; ask a human to run `{next}`",
            money::display(quote.total, cur),
            shown(merchant),
        ),
    );
    ruling.request_id = Some(request_id.clone());
    ruling.next = Some(next);
    Outcome {
        ruling,
        effect: Effect::Refuse {
            pending: Some(PendingRequest {
                request_id,
                digest,
                merchant: merchant.to_owned(),
                checkout_id: quote.checkout_id.clone(),
                currency: quote.currency.clone(),
                total: quote.total,
                instruments: facts.request.instruments.clone(),
            }),
        },
    }
}

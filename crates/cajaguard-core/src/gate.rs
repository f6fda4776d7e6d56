//! The decision (SPEC §4): [`precheck`] before the shop is asked anything, and [`decide`], a pure
//! function from the policy, the agent's request, the shop's quote, the ledger's view, approvals
//! and the clock to an [`Outcome`]. Precedence fails closed: tripwire, then malformed input, then
//! hard caps, then approval, then allow.
//!
//! One idea, the gate's order of rules, kept in one file (a little over 500 lines) so the
//! precedence can be read top to bottom.

use time::OffsetDateTime;

use crate::agent::AgentId;
use crate::approval::{self, Decision, Rejection, TrustedKeys};
use crate::digest::BasketDigest;
use crate::display;
use crate::effect::{
    ApprovalCandidate, CheckoutLedger, Effect, LedgerView, Outcome, PasskeyCandidate,
    PasskeyCounter, PendingRequest,
};
use crate::freeze::Frozen;
use crate::money::{self, Currency};
use crate::passkey::{self, PasskeyRegistry, PasskeyRejection};
use crate::policy::{Mode, Policy};
use crate::quote::Quote;
use crate::request::CompleteRequest;
use crate::tripwire;
use crate::verdict::{Reason, Ruling};

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
/// `arguments`, `_meta` and every other member), parsed from the JSON text `raw`, which is what
/// the shop gets: `None` when clean or in live mode.
pub fn tripwire_params_ruling(
    policy: &Policy,
    raw: &str,
    params: &serde_json::Value,
) -> Option<Ruling> {
    if policy.mode != Mode::Test {
        return None;
    }
    tripwire::scan_params_text(&policy.test_mode, raw, params).map(|hit| tripwire_refusal(&hit))
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

/// Inputs of [`decide`] besides the policy.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub request: &'a CompleteRequest,
    pub quote: &'a Quote,
    /// `BasketDigest::of_request(quote, &request.instruments, agent)`, computed once by the caller.
    pub digest: &'a BasketDigest,
    pub ledger: &'a LedgerView,
    pub approvals: &'a [ApprovalCandidate],
    /// Passkey approvals for the request id (SPEC §6); counted only with `approvals.web`.
    pub passkey_approvals: &'a [PasskeyCandidate],
    pub trusted_keys: &'a TrustedKeys,
    /// The agent paying, through the service (SPEC §13); `None` for `cajaguard mcp` on stdio.
    pub agent: Option<&'a AgentId>,
    pub now: OffsetDateTime,
}

/// The step-0 refusal while payments are frozen.
pub fn frozen_ruling(frozen: &Frozen) -> Ruling {
    Ruling::new(
        Reason::Frozen,
        format!(
            "payments are frozen ({}); nothing is paid until a human unfreezes them",
            display::detail(&frozen.reason)
        ),
    )
    .with_next("a human runs `cajaguard unfreeze --config FILE`")
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
                    display::detail(m)
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
                display::detail(&quote.currency)
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
                display::detail(&quote.status)
            ),
        );
    }

    // The agent's own caps hold on top of the global ones (SPEC §13); with caps, an agent pays
    // only in the currencies they list.
    let agent_caps = match facts.agent.map(|agent| (agent, policy.agent_caps(agent))) {
        Some((agent, Some(by_currency))) => match by_currency.get(&quote.currency) {
            Some(caps) => Some(caps),
            None => {
                return refuse(
                    Reason::CurrencyNotAllowed,
                    format!(
                        "agent {} has no caps for currency {}, so it cannot pay in it",
                        display::detail(agent.as_str()),
                        display::detail(&quote.currency)
                    ),
                );
            }
        },
        _ => None,
    };

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

    if let Some(own) = agent_caps {
        if quote.total > own.per_transaction {
            return refuse(
                Reason::OverPerTransactionCap,
                format!(
                    "{} is over this agent's per-transaction cap of {}",
                    amount(quote.total),
                    amount(own.per_transaction)
                ),
            );
        }
        let after = facts.ledger.agent_window_spent.saturating_add(quote.total);
        if after > own.window {
            return refuse(
                Reason::OverWindowCap,
                format!(
                    "{} would bring this agent's last {hours} h of spend to {} ({} already spent \
                     or in flight), over its window cap of {}",
                    amount(quote.total),
                    amount(after),
                    amount(facts.ledger.agent_window_spent),
                    amount(own.window)
                ),
            );
        }
    }

    // 11. Approval, above the lower of the global and the agent's threshold.
    let approval_above = agent_caps.map_or(caps.approval_above, |own| {
        own.approval_above.min(caps.approval_above)
    });
    let over_threshold = quote.total > approval_above;
    if !over_threshold && policy.mode == Mode::Test {
        return Outcome {
            ruling: Ruling::new(
                Reason::WithinCaps,
                format!(
                    "{} is within the caps (approval needed above {})",
                    amount(quote.total),
                    amount(approval_above)
                ),
            ),
            effect: Effect::Forward {
                currency: quote.currency.clone(),
                total: quote.total,
                merchant: merchant.clone(),
                digest: *facts.digest,
                use_approval_nonce: None,
                advance_passkey: None,
            },
        };
    }
    approval_step(
        policy,
        facts,
        merchant,
        cur,
        over_threshold.then_some(approval_above),
    )
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

/// What the approvals found say, after verification: a deny, a usable approval (its nonce, and
/// the passkey counter to move on), or the most informative reason none is usable.
#[derive(Default)]
struct Found {
    deny: bool,
    usable: Option<(String, Option<PasskeyCounter>)>,
    best: Option<(u8, Reason)>,
    /// A valid approval of a kind `approvals.require` does not count was found.
    refused_kind: bool,
}

impl Found {
    /// One verified document: a deny is honoured whatever its kind (refusing fails closed); an
    /// approval counts only if `approvals.require` accepts its kind, and only once.
    fn verified(
        &mut self,
        decision: Decision,
        accepted: bool,
        used: bool,
        nonce: &str,
        counter: Option<PasskeyCounter>,
    ) {
        if decision == Decision::Deny {
            self.deny = true;
        } else if !accepted {
            self.refused_kind = true;
        } else if used {
            self.best = more_informative(self.best, Some((6, Reason::ApprovalAlreadyUsed)));
        } else if self.usable.is_none() {
            self.usable = Some((nonce.to_owned(), counter));
        }
    }
}

/// Rank of a passkey rejection, on the key-file scale of [`rejection_rank`].
fn passkey_rejection_rank(r: PasskeyRejection) -> Option<(u8, Reason)> {
    match r {
        PasskeyRejection::OtherBasket => None,
        PasskeyRejection::UnregisteredCredential => Some((4, Reason::ApprovalUntrustedKey)),
        PasskeyRejection::Expired => Some((3, Reason::ApprovalExpired)),
        PasskeyRejection::LifetimeTooLong => Some((2, Reason::ApprovalTtlTooLong)),
        PasskeyRejection::Malformed(_) => Some((1, Reason::ApprovalBadSignature)),
        // Wrong origin, RP, flags, challenge, signature or counter: it cannot be trusted.
        _ => Some((5, Reason::ApprovalBadSignature)),
    }
}

fn find_approvals(policy: &Policy, facts: &Facts<'_>, digest: &BasketDigest) -> Found {
    let require = policy.approvals.require;
    let mut found = Found::default();
    for candidate in facts.approvals {
        match approval::verify(
            &candidate.document,
            facts.trusted_keys,
            digest,
            facts.now,
            policy.approvals.max_ttl,
        ) {
            Ok(v) => found.verified(
                v.decision(),
                require.accepts_key_file(),
                candidate.used,
                v.nonce(),
                None,
            ),
            Err(r) => found.best = more_informative(found.best, rejection_rank(r)),
        }
    }
    // Without the page there is no relying party a passkey could have signed for.
    let Some(web) = &policy.approvals.web else {
        return found;
    };
    let rp = web.relying_party();
    for candidate in facts.passkey_approvals {
        let Some(registered) = &candidate.passkey else {
            found.best = more_informative(
                found.best,
                passkey_rejection_rank(PasskeyRejection::UnregisteredCredential),
            );
            continue;
        };
        let verified = PasskeyRegistry::new(std::slice::from_ref(registered)).and_then(|reg| {
            passkey::verify_passkey_approval(
                &candidate.document,
                &reg,
                &rp,
                digest,
                facts.now,
                policy.approvals.max_ttl,
            )
        });
        match verified {
            Ok(v) => {
                let counter = PasskeyCounter {
                    credential_id: v.credential_id().to_vec(),
                    from: registered.sign_count,
                    to: v.sign_count(),
                };
                found.verified(
                    v.decision(),
                    require.accepts_passkey(),
                    candidate.used,
                    v.nonce(),
                    Some(counter),
                );
            }
            Err(r) => found.best = more_informative(found.best, passkey_rejection_rank(r)),
        }
    }
    found
}

fn approval_step(
    policy: &Policy,
    facts: &Facts<'_>,
    merchant: &str,
    cur: Currency,
    // `Some(threshold)` when the total is over it, `None` when only live mode asks for approval.
    over_threshold: Option<i64>,
) -> Outcome {
    let quote = facts.quote;
    let digest = *facts.digest;
    let request_id = digest.request_id();

    let found = find_approvals(policy, facts, &digest);
    if found.deny {
        let ruling = Ruling::new(
            Reason::ApprovalDenied,
            format!(
                "a human signed a deny for {} at {}",
                money::display(quote.total, cur),
                display::detail(merchant)
            ),
        )
        .with_request_id(request_id);
        return Outcome {
            ruling,
            effect: Effect::Refuse { pending: None },
        };
    }

    if let Some((nonce, counter)) = found.usable {
        let by = if counter.is_some() {
            "a passkey approval"
        } else {
            "a signed approval"
        };
        let ruling = Ruling::new(
            Reason::SignedApproval,
            format!(
                "{} at {} is approved by {by} (used now, once)",
                money::display(quote.total, cur),
                display::detail(merchant)
            ),
        )
        .with_request_id(request_id);
        return Outcome {
            ruling,
            effect: Effect::Forward {
                currency: quote.currency.clone(),
                total: quote.total,
                merchant: merchant.to_owned(),
                digest,
                use_approval_nonce: Some(nonce),
                advance_passkey: counter,
            },
        };
    }
    let best = found.best;

    let why = if let Some(threshold) = over_threshold {
        format!(
            "it is over the approval threshold of {}",
            money::display(threshold, cur)
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
    let refused_kind;
    let lead = if found.refused_kind && reason == Reason::PendingApproval {
        refused_kind = format!(
            "the approval found is of a kind approvals.require (\"{}\") does not count",
            policy.approvals.require.as_str()
        );
        refused_kind.as_str()
    } else {
        lead
    };
    let url = policy
        .approvals
        .web
        .as_ref()
        .map(|web| web.request_url(request_id.as_str()));
    // With "passkey" the terminal cannot approve: the human is sent to the page alone.
    let next = match (&url, policy.approvals.require.accepts_key_file()) {
        (Some(url), false) => format!("a human approves with a passkey at {url}"),
        _ => format!(
            "cajaguard approve {request_id} --config {}",
            policy.source.display()
        ),
    };
    let ask = match (&url, policy.approvals.require.accepts_key_file()) {
        (Some(_), false) => next.clone(),
        (Some(url), true) => format!("ask a human to run `{next}` or approve at {url}"),
        (None, _) => format!("ask a human to run `{next}`"),
    };
    let mut ruling = Ruling::new(
        reason,
        format!(
            "{} at {} needs a human's signed approval ({why}): {lead}; {ask}",
            money::display(quote.total, cur),
            display::detail(merchant),
        ),
    )
    .with_request_id(request_id.clone())
    .with_next(next);
    if let Some(url) = url {
        ruling = ruling.with_approval_url(url);
    }
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
                agent: facts.agent.cloned(),
            }),
        },
    }
}

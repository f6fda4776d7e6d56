//! The gated path of `complete_checkout` (SPEC §4), as stages that each take what the one before
//! produced and parse their input once:
//!
//! 1. frozen? precheck (tripwire, shape, fields) → [`CompleteRequest`]
//! 2. claim the checkout in the store → [`Claim`] (nothing sent through CajaGuard can change the
//!    basket from here until the payment settles)
//! 3. read the checkout back from the shop → [`Quote`], digest once
//! 4. decide and reserve in one store transaction → [`Permit`] (only the gate makes one)
//! 5. forward the agent's bytes, which takes the permit
//! 6. settle: release only on the shop's explicit word and a fresh read; compare a completion with
//!    the quote, count what differs as charged, and freeze.

use std::sync::Arc;
use std::time::Instant;

use cajaguard_core::approval::BasketDigest;
use cajaguard_core::gate::{self, Facts};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use cajaguard_core::settle::{self, Charge, Completion, Reading, Settlement};
use cajaguard_core::verdict::{Reason, Ruling};
use serde_json::Value;
use serde_json::value::RawValue;

use super::checkout;
use super::{Answer, Proxy, Reply, ShopError, refusal, shop_failure};
use crate::store::{
    AuditEvent, AuditRecord, Claim, Conflict, FrozenBy, GateCall, Permit, ReleasedBy, SettledAs,
    ShopObject, StoreError,
};
use cajaguard_wire::rawjson::RawObject;

/// What the shop's answer to a forwarded payment comes to, before the fresh read a release needs.
enum Heard {
    Completed(Value),
    /// The shop's explicit word that this attempt did not pay.
    Refused,
    /// The request never reached the shop (refused connection, 401, a forgotten session it did
    /// not process): nothing happened there.
    NotSent,
    Unknown,
}

impl Proxy {
    pub(super) fn complete_checkout(
        &self,
        id: &RawValue,
        params: &RawValue,
        whole: &Value,
        arguments: &Value,
    ) -> Answer {
        let started = Instant::now();
        let mut audit = self.audit_record(super::tools::GATED_TOOL);
        // 0. Frozen wins over every other refusal, and nothing reaches the shop while frozen. The
        //    claim reads the freeze with the checkout's rows; a call refused before it reads it
        //    here. (The gate reads it again in its transaction.)
        let checked = match self.forwarding_refusal(params, whole) {
            Some(ruling) => Err(ruling),
            None => gate::precheck(&self.policy, arguments),
        };
        let request = match checked {
            Ok(request) => request,
            Err(ruling) => {
                let ruling = match self.store.frozen() {
                    Ok(None) => ruling,
                    Ok(Some(frozen)) => gate::frozen_ruling(&frozen),
                    Err(e) => store_failed(&e),
                };
                return self.refuse(&ruling, audit, started);
            }
        };
        audit.checkout_id = Some(cajaguard_core::display::audit(&request.checkout_id));
        audit.idempotency_key = Some(cajaguard_core::display::audit(&request.idempotency_key));
        let agent = arguments
            .pointer("/meta/ucp-agent")
            .cloned()
            .unwrap_or(Value::Null);

        let claim = match self.claim(&request, &agent) {
            Ok(claim) => claim,
            Err(ruling) => return self.refuse(&ruling, audit, started),
        };
        let quote = match self.read_checkout(id, &request, &agent, &claim) {
            Ok(quote) => quote,
            Err(ruling) => {
                self.abandon(claim);
                return self.refuse(&ruling, audit, started);
            }
        };
        audit.merchant = quote.merchant.clone();
        audit.currency = Some(cajaguard_core::display::audit(&quote.currency));
        audit.total = Some(quote.total);
        let digest = BasketDigest::of_request(&quote, &request.instruments, self.agent.as_ref());
        audit.request_id = Some(digest.request_id().as_str().to_owned());

        // Taken before the gate's clock (its reservation's time): the payment is written, and its
        // answer awaited, within the shop's timeout of this, never later (`Shop::request_by`).
        let answered_by = Instant::now() + self.shop.timeout();
        let (ruling, permit) = match self.decide(&claim, &request, &quote, &digest, &audit, started)
        {
            Ok(decided) => {
                self.metrics.decided(&decided.0);
                decided
            }
            Err(ruling) => {
                self.abandon(claim);
                return self.refuse(&ruling, audit, started);
            }
        };
        let Some(permit) = permit else {
            self.elicit(&ruling);
            return refusal(&ruling);
        };
        let answer = self.pay(
            id,
            params,
            permit,
            answered_by,
            &ruling,
            &quote,
            &agent,
            &audit,
            started,
        );
        self.checkpoint(false);
        answer
    }

    /// Step 3a. A conflict with a payment in flight under another key is reconciled once from the
    /// shop (it may have ended) before the call is refused.
    fn claim(&self, request: &CompleteRequest, agent: &Value) -> Result<Claim, Ruling> {
        let orphan_after = self.stale_after();
        for attempt in 0..2 {
            let now = (self.clock)();
            match self.store.claim_as(
                &request.checkout_id,
                &request.idempotency_key,
                now,
                orphan_after,
                self.agent.as_ref(),
            ) {
                // Frozen: nothing was claimed, so there is nothing to end.
                Ok(Ok(claim)) => match claim.frozen() {
                    None => return Ok(claim),
                    Some(frozen) => return Err(gate::frozen_ruling(frozen)),
                },
                Ok(Err(Conflict::NotTheAgents)) => {
                    return Err(super::agents::not_its_own(ShopObject::Checkout));
                }
                Ok(Err(Conflict::UpdateInFlight)) => {
                    return Err(Ruling::new(
                        Reason::PaymentInFlight,
                        "an update or cancel of this checkout is on its way to the shop; pay once it is answered",
                    ));
                }
                Ok(Err(Conflict::PaymentInFlight)) if attempt == 0 => {
                    self.reconcile_checkout(&request.checkout_id, agent);
                }
                Ok(Err(Conflict::PaymentInFlight)) => {
                    return Err(Ruling::new(
                        Reason::PaymentInFlight,
                        "another payment of this checkout is in flight and its outcome is not known yet; \
                         retry with that payment's idempotency key, or wait until it is settled",
                    ));
                }
                Err(e) => return Err(store_failed(&e)),
            }
        }
        Err(Ruling::new(
            Reason::PaymentInFlight,
            "the checkout is claimed by another payment",
        ))
    }

    fn abandon(&self, claim: Claim) {
        if let Err(e) = self.store.abandon(claim) {
            // The claim ends once it looks abandoned; nothing was forwarded under it.
            tracing::warn!("claim not ended, it lapses on its own: {e}");
        }
    }

    /// SPEC §4.4: the shop's own `get_checkout`, never the agent's numbers. An earlier attempt on
    /// this checkout still in flight is reconciled from the same answer first (see `reconcile`).
    /// Only a retry's claim can have one: a claim is refused while another key's reservation is
    /// in flight, and one under this key is what makes the claim a retry. (A second call with the
    /// same key racing this one may reserve meanwhile; its gate then rides on that reservation as
    /// a retry, which the shop answers once.) So other claims skip that read; but a checkout the
    /// shop says is completed has a released reservation of it, if any, counted from this answer
    /// (`count_late_completion`).
    fn read_checkout(
        &self,
        id: &RawValue,
        request: &CompleteRequest,
        agent: &Value,
        claim: &Claim,
    ) -> Result<Quote, Ruling> {
        let params = checkout::get_checkout_params(agent, &request.checkout_id);
        let result = match self.shop_request(id, "tools/call", &params, None) {
            Ok(Reply::Result(raw)) => serde_json::from_str::<Value>(raw.get()).map_err(|_| {
                Ruling::new(
                    Reason::CheckoutUnreadable,
                    "the shop's get_checkout answer is not JSON",
                )
            })?,
            other => return checkout::quote_from_reply(other, &request.checkout_id),
        };
        let quote = checkout::quote_from_result(&result, &request.checkout_id);
        if claim.is_retry() {
            self.reconcile_at_hand(request, &result, agent);
        } else if quote.as_ref().is_ok_and(|q| q.status == "completed") {
            // Rare: only then is the answer read again, as a settlement reads it.
            self.count_late_completion(&request.checkout_id, &result, agent);
        }
        quote
    }

    /// Steps 0 and 5-12 in one store transaction. `Err`: nothing was decided (the store failed or
    /// the claim was lost); the caller abandons the claim.
    fn decide(
        &self,
        claim: &Claim,
        request: &CompleteRequest,
        quote: &Quote,
        digest: &BasketDigest,
        audit: &AuditRecord,
        started: Instant,
    ) -> Result<(Ruling, Option<Permit>), Ruling> {
        let now = (self.clock)();
        let mut audit = audit.clone();
        audit.at = now;
        audit.latency = started.elapsed();
        // Owned, so that whichever thread's turn decides this process's queued gates can run it.
        let (policy, trusted, agent) = (
            Arc::clone(&self.policy),
            Arc::clone(&self.trusted),
            self.agent.clone(),
        );
        let (for_request, for_quote, for_digest) = (request.clone(), quote.clone(), *digest);
        let decide =
            move |ledger: &cajaguard_core::effect::LedgerView,
                  approvals: &[cajaguard_core::effect::ApprovalCandidate],
                  passkey_approvals: &[cajaguard_core::effect::PasskeyCandidate]| {
                gate::decide(
                    &policy,
                    &Facts {
                        request: &for_request,
                        quote: &for_quote,
                        digest: &for_digest,
                        ledger,
                        approvals,
                        passkey_approvals,
                        trusted_keys: &trusted,
                        agent: agent.as_ref(),
                        now,
                    },
                )
            };
        let in_store = Instant::now();
        let gated = self.store.gate_queued(
            claim,
            GateCall {
                request: request.clone(),
                quote: quote.clone(),
                digest: *digest,
                agent: self.agent.clone(),
                window: self.policy.window,
                now,
                read_passkeys: self.policy.approvals.reads_passkey_approvals(),
                decide: Box::new(decide),
                audit,
            },
        );
        self.metrics.store_took(in_store.elapsed());
        match gated {
            Ok(gated) => Ok((gated.outcome.ruling, gated.permit)),
            Err(StoreError::ClaimLost) => Err(Ruling::new(
                Reason::PaymentInFlight,
                "another attempt took over this checkout's claim before the gate decided; nothing was forwarded",
            )),
            Err(e) => Err(store_failed(&e)),
        }
    }

    /// Step 12-13: forwards the agent's exact bytes and settles from the answer. Taking the
    /// [`Permit`] is what makes this the only way a payment reaches the shop.
    #[allow(clippy::too_many_arguments)]
    fn pay(
        &self,
        id: &RawValue,
        params: &RawValue,
        permit: Permit,
        answered_by: Instant,
        ruling: &Ruling,
        quote: &Quote,
        agent: &Value,
        audit: &AuditRecord,
        started: Instant,
    ) -> Answer {
        let answer = self.shop_request(id, "tools/call", params.get(), Some(answered_by));
        let heard = match &answer {
            Ok(Reply::Result(raw)) => match serde_json::from_str::<Value>(raw.get()) {
                Ok(result) => match settle::read_completion(&result, permit.checkout_id()) {
                    Completion::Completed(checkout) => Heard::Completed(checkout),
                    Completion::Refused => Heard::Refused,
                    Completion::Unknown => Heard::Unknown,
                },
                Err(_) => Heard::Unknown,
            },
            Ok(Reply::Error(_)) => Heard::Refused,
            // The shop lost the session: it says it did not take the request, but the bytes were
            // written (once or twice: the resend on a new session goes out only within the
            // shop's timeout of the reservation), so a fresh read confirms it before anything is
            // released.
            Err(ShopError::SessionExpired) => Heard::Refused,
            Err(e) if e.never_sent() => Heard::NotSent,
            // A status that says the request was not taken (401/403): a refusal, confirmed by a
            // fresh read before anything is released. (429/503 on a payment are unknown
            // outcomes: a gateway may have passed it on.)
            Err(e) if !e.outcome_unknown() => Heard::Refused,
            // Anything else after the request was written may have paid.
            Err(_) => Heard::Unknown,
        };
        let settlement = match heard {
            Heard::Completed(checkout) => {
                self.bind_order_of(permit.checkout_id(), &checkout);
                Settlement::Completed(settle::charge(quote, &checkout))
            }
            Heard::Refused => self.confirm_not_paid(&permit, quote, agent),
            // A retry that never left says nothing about the attempt it retries.
            Heard::NotSent if permit.is_retry() => Settlement::Unknown,
            Heard::NotSent => Settlement::Released,
            Heard::Unknown => Settlement::Unknown,
        };
        self.record_settlement(&permit, quote, &settlement, audit, started);
        match answer {
            Ok(Reply::Result(result)) => {
                Answer::Result(with_verdict(result.get(), ruling, &settlement))
            }
            Ok(Reply::Error(error)) => Answer::ForwardedError(error),
            Err(e) => unknown_outcome(ruling, &e),
        }
    }

    /// SPEC §4.13: before a release, the checkout is read once more; an earlier attempt that
    /// landed makes it `completed`, and then the spend is counted instead. A retry's refusal says
    /// nothing about the attempt it retries, so it never releases.
    fn confirm_not_paid(&self, permit: &Permit, quote: &Quote, agent: &Value) -> Settlement {
        let params = checkout::get_checkout_params(agent, permit.checkout_id());
        let reading = match self.shop.request("tools/call", Some(&params), &mut |_| {}) {
            Ok(Reply::Result(raw)) => serde_json::from_str::<Value>(raw.get())
                .map_or(Reading::Unknown, |result| {
                    settle::read_checkout(&result, permit.checkout_id())
                }),
            _ => Reading::Unknown,
        };
        match reading {
            Reading::Completed(checkout) => Settlement::Completed(settle::charge(quote, &checkout)),
            Reading::Open if !permit.is_retry() => Settlement::Released,
            Reading::Open | Reading::Unknown => Settlement::Unknown,
        }
    }

    fn record_settlement(
        &self,
        permit: &Permit,
        quote: &Quote,
        settlement: &Settlement,
        decided: &AuditRecord,
        started: Instant,
    ) {
        let now = (self.clock)();
        let note = match settlement {
            Settlement::Completed(charge) if charge.differs() => {
                Some(differs_note(charge, quote.total, &quote.currency))
            }
            Settlement::Unknown => {
                Some("the reservation and the claim stay until the outcome is known".into())
            }
            Settlement::Completed(_) | Settlement::Released => None,
        };
        let mut record = decided.clone();
        record.at = now;
        record.note = note;
        record.latency = started.elapsed();
        let applied = match self.store.settle_permit(permit, settlement, now, &record) {
            Ok(()) => true,
            // Committed: recorded once, and its freeze (if any) in force.
            Err(e @ StoreError::NotDurable { .. }) => {
                tracing::error!("settlement recorded: {e}");
                true
            }
            Err(e) => {
                // The reservation and the claim stay: the spend still counts (fail closed). The
                // outcome still goes in the log, saying the store failed on it.
                tracing::error!("settlement not recorded, the reservation stays: {e}");
                record.note = Some(not_applied(record.note.take()));
                let event = AuditEvent::Settled(SettledAs::of(settlement, ReleasedBy::Shop));
                if let Err(e) = self.store.audit(event, &record) {
                    tracing::error!("audit record not written: {e}");
                }
                false
            }
        };
        if let Settlement::Completed(charge) = settlement
            && charge.differs()
        {
            let reason = format!(
                "charged_differs on {}: {}",
                cajaguard_core::display::audit(permit.checkout_id()),
                charge.differs.join(", ")
            );
            if applied {
                self.audit_freeze(&reason);
            } else {
                // The settlement's freeze went with it: payments are frozen on their own.
                self.freeze_charged_differs(&reason, now);
            }
        }
    }

    /// Freezes payments after a charge that differs whose settlement the store could not apply.
    fn freeze_charged_differs(&self, reason: &str, now: time::OffsetDateTime) {
        let mut record = self.audit_record("cajaguard_freeze");
        record.note = Some(reason.to_owned());
        if let Err(e) = self
            .store
            .freeze(reason, FrozenBy::ChargedDiffers, now, &record)
        {
            tracing::error!("payments could not be frozen after a charge that differs: {e}");
        }
    }

    /// The audit record of the freeze a differing charge made (the store froze payments in the
    /// settlement's own transaction).
    pub(super) fn audit_freeze(&self, reason: &str) {
        let mut record = self.audit_record("cajaguard_freeze");
        record.note = Some(reason.to_owned());
        if let Err(e) = self
            .store
            .audit(AuditEvent::Frozen(FrozenBy::ChargedDiffers), &record)
        {
            tracing::error!("audit record not written: {e}");
        }
    }

    fn refuse(&self, ruling: &Ruling, mut audit: AuditRecord, started: Instant) -> Answer {
        audit.request_id = ruling
            .request_id()
            .as_ref()
            .map(|r| r.as_str().to_owned())
            .or(audit.request_id);
        audit.latency = started.elapsed();
        self.metrics.decided(ruling);
        if let Err(e) = self.store.audit(AuditEvent::Ruled(ruling.reason()), &audit) {
            tracing::error!("audit record not written: {e}");
        }
        refusal(ruling)
    }
}

/// The refusal of a payment the store failed; what failed goes to the log, not to the agent.
fn store_failed(e: &StoreError) -> Ruling {
    tracing::error!("store failed on a payment: {e}");
    Ruling::new(
        Reason::StoreUnavailable,
        format!("nothing was paid: {}", e.for_agent()),
    )
}

/// The note of a settlement's record when the store could not apply the settlement: the record
/// still says what the shop answered.
fn not_applied(note: Option<String>) -> String {
    // "may": a connection lost after COMMIT went out leaves the outcome unknown to this process.
    let what = "the store failed on this settlement, which may not be applied: unless it was, the \
                reservation and the claim stay";
    match note {
        Some(note) => format!("{note}; {what}"),
        None => what.to_owned(),
    }
}

fn differs_note(charge: &Charge, quoted: i64, quoted_currency: &str) -> String {
    format!(
        "the completed checkout differs from the quote in {}: charged {} minor units of {}, quoted {quoted} {quoted_currency}; payments are frozen",
        charge.differs.join(", "),
        charge.amount,
        charge.currency.as_deref().map_or_else(
            || quoted_currency.to_owned(),
            cajaguard_core::display::audit
        ),
    )
}

/// The shop's result unchanged but for `_meta.cajaguard`.
fn with_verdict(result: &str, ruling: &Ruling, settlement: &Settlement) -> String {
    let Some(mut object) = RawObject::parse(result) else {
        return result.to_owned();
    };
    let mut verdict = verdict_meta(ruling);
    if let Settlement::Completed(charge) = settlement
        && charge.differs()
    {
        verdict["mismatch"] = serde_json::json!({
            "fields": charge.differs,
            "charged_minor": charge.amount,
            "frozen": true,
        });
    }
    let mut meta = object
        .get("_meta")
        .and_then(|meta| RawObject::parse(meta.get()))
        .unwrap_or_default();
    if let Ok(raw) = RawValue::from_string(verdict.to_string()) {
        meta.set("cajaguard", raw);
    }
    if let Ok(raw) = RawValue::from_string(meta.to_json()) {
        object.set("_meta", raw);
    }
    object.to_json()
}

fn verdict_meta(ruling: &Ruling) -> Value {
    let mut meta = serde_json::json!({
        "verdict": ruling.verdict().as_str(),
        "reason": ruling.reason().as_str(),
        "detail": ruling.detail(),
    });
    if let Some(request_id) = &ruling.request_id() {
        meta["request_id"] = Value::String(request_id.as_str().to_owned());
    }
    meta
}

/// The call was forwarded and the shop gave no usable answer: the agent learns the outcome is
/// unknown and that a retry with the same idempotency key is safe.
fn unknown_outcome(ruling: &Ruling, error: &ShopError) -> Answer {
    if !error.outcome_unknown() {
        return shop_failure(error);
    }
    let mut document = ruling.to_json();
    if let Some(inner) = document.get_mut("cajaguard") {
        inner["detail"] = Value::String(format!(
            "forwarded, but {error}; the outcome is unknown and the spend stays reserved; retry with the same idempotency-key"
        ));
    }
    super::tool_result(&document, true)
}

//! [`Store::gate`]: the gate's sequence in one transaction (SPEC §4 steps 6-12): lock, read the
//! ledger's view and the approvals, decide (the pure core), apply the effect, audit, commit, make
//! it durable, and only then hand out the [`Permit`].

use std::time::{Duration, Instant};

use cajaguard_core::agent::AgentId;
use cajaguard_core::approval::BasketDigest;
use cajaguard_core::effect::{ApprovalCandidate, Effect, LedgerView, Outcome, PasskeyCandidate};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use time::OffsetDateTime;

use super::{
    AuditEvent, AuditRecord, Backend, Claim, Gated, Permit, Store, StoreError, approvals, claims,
    ledger, micros, passkeys, tx,
};

/// The pure decision the gate runs inside its transaction: the ledger's view, the key-file and
/// the passkey approvals found for the request, in; the outcome out.
pub type Decide<'a> =
    dyn FnMut(&LedgerView, &[ApprovalCandidate], &[PasskeyCandidate]) -> Outcome + 'a;

impl Store {
    /// SPEC §4 steps 9-12, atomically. `decide` is called inside the transaction, with the ledger
    /// view for `quote.currency`/`request.checkout_id` over `window` before `now`, and the approvals
    /// found for `request_id` (with their used flag). It is called once per attempt: PostgreSQL may
    /// roll an attempt back (deadlock, serialization failure) and run it again, so `decide` must be
    /// pure, as `gate::decide` is. The outcome's effect is applied and `audit` written before
    /// commit. If anything fails, nothing is applied and the error is returned: the caller refuses
    /// (fail closed).
    ///
    /// The audit row takes its verdict and reason from the outcome (the caller cannot know them
    /// before), and its merchant, currency, total, request id, idempotency key and checkout id from
    /// the inputs where `audit` leaves them empty. Its latency is `audit.latency` plus the time spent
    /// in here up to the write.
    ///
    /// `read_passkeys` is the policy's `approvals.reads_passkey_approvals()`: when false, no
    /// passkey approval is read and `decide` is given none (it would look at none).
    ///
    /// The payment must still hold `claim` ([`StoreError::ClaimLost`] otherwise). A refusal ends
    /// the claim in the same transaction (unless it belongs to a reservation in flight); a
    /// forward keeps it until the settlement, and comes with the [`Permit`].
    #[allow(clippy::too_many_arguments)]
    pub fn gate(
        &self,
        claim: &Claim,
        request: &CompleteRequest,
        quote: &Quote,
        digest: &BasketDigest,
        agent: Option<&AgentId>,
        window: Duration,
        now: OffsetDateTime,
        read_passkeys: bool,
        decide: &mut Decide<'_>,
        audit: &AuditRecord,
    ) -> Result<Gated, StoreError> {
        let started = Instant::now();
        let request_id = &digest.request_id();
        let digest_hex = digest.to_hex();
        if claim.checkout_id != request.checkout_id
            || claim.idempotency_key != request.idempotency_key
        {
            return Err(StoreError::Inconsistent(
                "the gate was given the claim of another payment".into(),
            ));
        }
        let outcome = self.write(&mut |tx| {
            tx.lock_gate(&quote.currency, &request.checkout_id)?;
            let from_hour = ledger::window_start_hour(window, now);
            let agent_account = agent.map(|a| ledger::agent_account(&quote.currency, a.as_str()));
            let reads = tx.gate_reads(&tx::GateKeys {
                currency: &quote.currency,
                agent_account: agent_account.as_deref(),
                checkout_id: &request.checkout_id,
                from_hour,
                hour: ledger::hour_of(now),
                request_id,
                // Without the page no passkey approval can count or deny: none is read.
                passkeys: read_passkeys,
            })?;
            let view = ledger::view(
                &reads,
                &quote.currency,
                agent.map(AgentId::as_str),
                from_hour,
            )?;
            // Nothing goes out without the claim: another attempt may have taken over one that
            // looked abandoned. (A refusal needs none: a settlement may have ended it just now.)
            // It was read under the checkout's lock, which every claim change takes.
            let claim_held = reads
                .claim
                .as_ref()
                .is_some_and(|held| held.idempotency_key == request.idempotency_key);
            let candidates = approvals::candidates(tx, reads.approvals)?;
            let passkey_candidates =
                passkeys::candidates(tx, passkeys::parse(request_id, reads.passkey_texts))?;
            let outcome = decide(&view, &candidates, &passkey_candidates);
            if !matches!(outcome.effect, Effect::Refuse { .. }) && !claim_held {
                return Err(StoreError::ClaimLost);
            }
            match &outcome.effect {
                Effect::Forward {
                    currency,
                    total,
                    merchant,
                    digest: _,
                    use_approval_nonce,
                    advance_passkey,
                } => {
                    if *currency != quote.currency {
                        // The lock taken is the quote's currency: a reservation in another one
                        // would not be serialized with that currency's gates.
                        return Err(StoreError::Inconsistent(format!(
                            "the gate asked to reserve in {currency}, but the checkout is in {}",
                            quote.currency
                        )));
                    }
                    ledger::reserve(
                        tx,
                        reads.row.as_ref(),
                        &tx::Reservation {
                            checkout_id: &request.checkout_id,
                            idempotency_key: &request.idempotency_key,
                            merchant,
                            currency,
                            total: *total,
                            digest: &digest_hex,
                            revisit: false,
                            agent_profile: &request.agent_profile,
                            agent: agent.map(AgentId::as_str),
                        },
                        now,
                    )?;
                    if let Some(nonce) = use_approval_nonce {
                        approvals::mark_used(tx, nonce, request_id, &request.checkout_id, now)?;
                    }
                    if let Some(counter) = advance_passkey {
                        passkeys::advance(tx, counter)?;
                    }
                }
                Effect::Retry => {
                    ledger::check_retry(tx, &request.checkout_id, &request.idempotency_key, now)?
                }
                Effect::Refuse { pending } => {
                    if let Some(pending) = pending {
                        tx.upsert_pending(pending, micros(now))?;
                    }
                    // From the rows read under the checkout's lock: the refusal wrote neither.
                    let (row, claim) = (reads.row.as_ref(), reads.claim.as_ref());
                    if claims::ends_claim(row, claim, &request.idempotency_key) {
                        tx.claim_delete(&request.checkout_id)?;
                    }
                }
            }
            let mut record = audit.clone();
            record.merchant = record.merchant.or_else(|| quote.merchant.clone());
            record.currency = record.currency.or_else(|| Some(quote.currency.clone()));
            record.total = record.total.or(Some(quote.total));
            record.request_id = record
                .request_id
                .or_else(|| Some(request_id.as_str().to_owned()));
            record.idempotency_key = record
                .idempotency_key
                .or_else(|| Some(request.idempotency_key.clone()));
            record.checkout_id = record
                .checkout_id
                .or_else(|| Some(request.checkout_id.clone()));
            record.agent = record
                .agent
                .or_else(|| agent.map(|a| a.as_str().to_owned()));
            record.latency = record.latency.saturating_add(started.elapsed());
            super::log::append(tx, AuditEvent::Ruled(outcome.ruling.reason()), &record)?;
            Ok(outcome)
        })?;
        // A reservation or a used approval must survive a power cut before the payment goes out.
        // PostgreSQL's commit is already durable; SQLite's is synced here, outside the write lock.
        if let (Effect::Forward { .. }, Backend::Sqlite(db)) = (&outcome.effect, &self.backend) {
            db.sync_wal()?;
        }
        let permit = match outcome.effect {
            Effect::Forward { .. } | Effect::Retry => Some(Permit {
                checkout_id: request.checkout_id.clone(),
                idempotency_key: request.idempotency_key.clone(),
                retry: matches!(outcome.effect, Effect::Retry),
                forwarded_at: now,
            }),
            Effect::Refuse { .. } => None,
        };
        Ok(Gated { outcome, permit })
    }
}

//! [`Store::gate`]: the gate's sequence in one transaction (SPEC §4 steps 6-12): lock, read the
//! ledger's view and the approvals, decide (the pure core), apply the effect, audit, commit, make
//! it durable, and only then hand out the [`Permit`].
//!
//! [`Store::gate_queued`] runs the same sequence for the gates that queue on one currency's lock
//! in one process, several in one transaction ([`batch`]), taking turns as [`queue`] says.

use std::time::{Duration, Instant};

use cajaguard_core::agent::AgentId;
use cajaguard_core::approval::{BasketDigest, RequestId};
use cajaguard_core::effect::{ApprovalCandidate, Effect, LedgerView, Outcome, PasskeyCandidate};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use time::OffsetDateTime;

use super::ledger::Bump;
use super::{
    AuditEvent, AuditRecord, Backend, Claim, Gated, Permit, Store, StoreError, approvals, claims,
    ledger, micros, passkeys, tx,
};

mod batch;
mod queue;

pub(super) use queue::GateQueue;
pub use queue::{GateCall, OwnedDecide};

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
        let gate = Prepared::new(
            GateInput {
                request,
                quote,
                digest,
                agent,
                window,
                now,
                read_passkeys,
                audit,
                started: Instant::now(),
            },
            claim,
        )?;
        self.decide_one(&gate, decide)
    }

    /// One gate in a transaction of its own.
    fn decide_one(
        &self,
        gate: &Prepared<'_>,
        decide: &mut Decide<'_>,
    ) -> Result<Gated, StoreError> {
        let input = &gate.input;
        let outcome = self.write_gate(&mut |tx| {
            tx.lock_gate(&input.quote.currency, &input.request.checkout_id)?;
            let reads = tx.gate_reads(&gate.keys())?;
            decide_and_apply(tx, gate, reads, &[], decide).map(|(outcome, _)| outcome)
        })?;
        if forwards(&outcome) {
            self.made_durable()?;
        }
        Ok(gated(input.request, outcome, input.now))
    }

    /// A reservation or a used approval must survive a power cut before the payment goes out.
    /// PostgreSQL's commit is already durable; SQLite's is synced here, outside the write lock.
    fn made_durable(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(db) => db.sync_wal(),
            Backend::Postgres(_) => Ok(()),
        }
    }
}

/// Whether the outcome sends the payment on, a retry's included (its permit needs the commit,
/// and every commit it rests on, made durable first): the rule [`gated`] hands out permits by.
fn forwards(outcome: &Outcome) -> bool {
    !matches!(outcome.effect, Effect::Refuse { .. })
}

/// One gate's inputs, as [`Store::gate`] takes them.
struct GateInput<'a> {
    request: &'a CompleteRequest,
    quote: &'a Quote,
    digest: &'a BasketDigest,
    agent: Option<&'a AgentId>,
    window: Duration,
    now: OffsetDateTime,
    read_passkeys: bool,
    audit: &'a AuditRecord,
    /// When the store was first asked: the audit record's latency counts from here.
    started: Instant,
}

/// A gate's inputs with what its reads and writes are keyed by, worked out once.
struct Prepared<'a> {
    input: GateInput<'a>,
    /// The token of the claim the caller holds.
    claim_token: Option<i64>,
    request_id: RequestId,
    digest_hex: String,
    agent_account: Option<String>,
    from_hour: i64,
}

impl<'a> Prepared<'a> {
    /// `Err` if `claim` is another payment's: the gate decides only for the claim's holder.
    fn new(input: GateInput<'a>, claim: &Claim) -> Result<Prepared<'a>, StoreError> {
        if claim.checkout_id != input.request.checkout_id
            || claim.idempotency_key != input.request.idempotency_key
        {
            return Err(StoreError::Inconsistent(
                "the gate was given the claim of another payment".into(),
            ));
        }
        Ok(Prepared {
            claim_token: claim.token,
            request_id: input.digest.request_id(),
            digest_hex: input.digest.to_hex(),
            agent_account: input
                .agent
                .map(|a| ledger::agent_account(&input.quote.currency, a.as_str())),
            from_hour: ledger::window_start_hour(input.window, input.now),
            input,
        })
    }

    fn keys(&self) -> tx::GateKeys<'_> {
        tx::GateKeys {
            currency: &self.input.quote.currency,
            agent_account: self.agent_account.as_deref(),
            checkout_id: &self.input.request.checkout_id,
            from_hour: self.from_hour,
            hour: ledger::hour_of(self.input.now),
            request_id: &self.request_id,
            // Without the page no passkey approval can count or deny: none is read.
            passkeys: self.input.read_passkeys,
        }
    }
}

/// Decides one gate from `reads` (made before `earlier`, the bumps this transaction has made
/// since) and applies the outcome's effect and audit record. Returns the outcome and what its
/// effect did to the window sums. [`StoreError::ClaimLost`] comes before any write.
fn decide_and_apply(
    tx: &mut dyn tx::Tx,
    gate: &Prepared<'_>,
    mut reads: tx::GateReads,
    earlier: &[Bump],
    decide: &mut Decide<'_>,
) -> Result<(Outcome, Vec<Bump>), StoreError> {
    let GateInput {
        request,
        quote,
        agent,
        now,
        audit,
        ..
    } = gate.input;
    let request_id = &gate.request_id;
    ledger::count_bumps(&mut reads, &gate.keys(), earlier);
    let view = ledger::view(
        &reads,
        &quote.currency,
        agent.map(AgentId::as_str),
        gate.from_hour,
    )?;
    // Nothing goes out without the claim: another attempt may have taken over one that
    // looked abandoned. (A refusal needs none: a settlement may have ended it just now.)
    // It was read under the checkout's lock, which every claim change takes.
    let claim_held = claims::holds(
        reads.claim.as_ref(),
        &request.idempotency_key,
        gate.claim_token,
    );
    let candidates = approvals::candidates(tx, reads.approvals)?;
    let passkey_candidates =
        passkeys::candidates(tx, passkeys::parse(request_id, reads.passkey_texts))?;
    let outcome = decide(&view, &candidates, &passkey_candidates);
    if !matches!(outcome.effect, Effect::Refuse { .. }) {
        if !claim_held {
            return Err(StoreError::ClaimLost);
        }
        // A payment goes out under this commit: it must survive a power cut first. (A refusal
        // need not: lost, the agent was refused all the same.)
        tx.durable_on_commit();
    }
    let mut bumps = Vec::new();
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
            bumps = ledger::reserve(
                tx,
                reads.row.as_ref(),
                &tx::Reservation {
                    checkout_id: &request.checkout_id,
                    idempotency_key: &request.idempotency_key,
                    merchant,
                    currency,
                    total: *total,
                    digest: &gate.digest_hex,
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
                tx.supersede_pending(&pending.checkout_id, &pending.request_id)?;
                tx.upsert_pending(pending, micros(now))?;
            }
            // From the rows read under the checkout's lock: the refusal wrote neither.
            let (row, claim) = (reads.row.as_ref(), reads.claim.as_ref());
            if claims::ends_claim(row, claim, &request.idempotency_key, gate.claim_token) {
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
    record.latency = record.latency.saturating_add(gate.input.started.elapsed());
    super::log::append(tx, AuditEvent::Ruled(outcome.ruling.reason()), &record)?;
    Ok((outcome, bumps))
}

/// The decision, with the permit when it forwards (only after its commit was made durable).
fn gated(request: &CompleteRequest, outcome: Outcome, now: OffsetDateTime) -> Gated {
    let permit = match outcome.effect {
        Effect::Forward { .. } | Effect::Retry => Some(Permit {
            checkout_id: request.checkout_id.clone(),
            idempotency_key: request.idempotency_key.clone(),
            retry: matches!(outcome.effect, Effect::Retry),
            forwarded_at: now,
        }),
        Effect::Refuse { .. } => None,
    };
    Gated { outcome, permit }
}

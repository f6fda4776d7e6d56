//! The gates one process has waiting on a currency's lock, decided several to a transaction.
//!
//! One currency's gates take turns, whatever host they run on: each holds the lock for its
//! transaction's round trips. With many agents on one process, those turns are what limits the
//! decisions per second (docs/ARCHITECTURE.md, "Gate batching"). Here the calls that arrive while
//! one is deciding wait in a queue, and the next turn takes them all: one lock, one round trip of
//! reads, one commit.
//!
//! Leader and followers: a call that finds nobody deciding decides itself, on its own thread
//! (alone, it runs exactly [`Store::gate`]). Calls that arrive meanwhile queue and sleep. The
//! leader runs batches from the queue's front until its own call is decided, hands each
//! follower its result, and then wakes the call at the front, if any, to lead the next turn.
//!
//! Invariants:
//! - a batch holds one currency and no checkout twice (see `batch.rs`);
//! - a call is taken off the queue only by the leader, and is answered exactly once;
//! - exactly one thread leads while the queue is not empty.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cajaguard_core::agent::AgentId;
use cajaguard_core::approval::BasketDigest;
use cajaguard_core::effect::{ApprovalCandidate, LedgerView, Outcome, PasskeyCandidate};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use time::OffsetDateTime;

use super::batch::Batched;
use super::{GateInput, Prepared, forwards, gated};
use crate::store::{AuditRecord, Claim, Gated, Store, StoreError};

/// The most gates one transaction decides: enough for every agent of a busy process, few
/// enough that one turn's round trips stay short.
const MAX_BATCH: usize = 32;

/// The pure decision, owned, so that the thread leading the turn can run it.
pub type OwnedDecide =
    dyn FnMut(&LedgerView, &[ApprovalCandidate], &[PasskeyCandidate]) -> Outcome + Send;

/// What [`Store::gate`] takes, owned (see [`Store::gate_queued`]).
pub struct GateCall {
    pub request: CompleteRequest,
    pub quote: Quote,
    pub digest: BasketDigest,
    pub agent: Option<AgentId>,
    pub window: Duration,
    pub now: OffsetDateTime,
    pub read_passkeys: bool,
    pub decide: Box<OwnedDecide>,
    pub audit: AuditRecord,
}

/// The calls waiting for their turn (`Store::gates`).
#[derive(Default)]
pub(in crate::store) struct GateQueue {
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    calls: VecDeque<Queued>,
    /// A thread is running batches; it hands the lead on before it stops.
    leading: bool,
}

struct Queued {
    call: GateCall,
    /// The caller's claim, as the gate checks it.
    claim: Claim,
    started: Instant,
    slot: Arc<Slot>,
}

/// Where a queued call's thread sleeps until it leads or is answered.
#[derive(Default)]
struct Slot {
    turn: Mutex<Turn>,
    changed: Condvar,
}

#[derive(Default)]
enum Turn {
    #[default]
    Wait,
    Lead,
    Done(Result<Gated, StoreError>),
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks but the standard library itself; a poisoned
    // queue still holds consistent calls.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Slot {
    fn set(&self, turn: Turn) {
        *lock(&self.turn) = turn;
        self.changed.notify_one();
    }

    /// Sleeps until the call leads (`None`) or is answered.
    fn wait(&self) -> Option<Result<Gated, StoreError>> {
        let mut turn = lock(&self.turn);
        loop {
            match std::mem::take(&mut *turn) {
                Turn::Wait => {
                    turn = self
                        .changed
                        .wait(turn)
                        .unwrap_or_else(PoisonError::into_inner)
                }
                Turn::Lead => return None,
                Turn::Done(result) => return Some(result),
            }
        }
    }

    /// The answer, if the call has one (the leader's own call).
    fn answered(&self) -> Option<Result<Gated, StoreError>> {
        let mut turn = lock(&self.turn);
        match std::mem::take(&mut *turn) {
            Turn::Done(result) => Some(result),
            other => {
                *turn = other;
                None
            }
        }
    }

    fn is_answered(&self) -> bool {
        matches!(*lock(&self.turn), Turn::Done(_))
    }
}

impl GateQueue {
    /// Queues `queued`; `true` if its caller is to lead.
    fn join(&self, queued: Queued) -> bool {
        let mut waiting = lock(&self.waiting);
        waiting.calls.push_back(queued);
        !std::mem::replace(&mut waiting.leading, true)
    }

    /// The next turn's calls: the front call's currency, in queue order, no checkout twice.
    fn next_batch(&self) -> Vec<Queued> {
        let mut waiting = lock(&self.waiting);
        let Some(currency) = waiting.calls.front().map(|q| q.call.quote.currency.clone()) else {
            return Vec::new();
        };
        let mut checkouts = HashSet::new();
        let mut batch = Vec::new();
        let mut left = VecDeque::with_capacity(waiting.calls.len());
        for queued in waiting.calls.drain(..) {
            if batch.len() < MAX_BATCH
                && queued.call.quote.currency == currency
                && checkouts.insert(queued.call.request.checkout_id.clone())
            {
                batch.push(queued);
            } else {
                left.push_back(queued);
            }
        }
        waiting.calls = left;
        batch
    }

    /// The leader is done: the front call leads next, or nobody does.
    fn pass_lead(&self) {
        let mut waiting = lock(&self.waiting);
        match waiting.calls.front() {
            Some(next) => next.slot.set(Turn::Lead),
            None => waiting.leading = false,
        }
    }
}

impl Store {
    /// How many gate calls wait for a turn in this process (the one deciding not counted).
    pub fn gates_waiting(&self) -> usize {
        lock(&self.gates.waiting).calls.len()
    }

    /// [`Store::gate`], for a process whose many callers gate at once (the service): calls that
    /// arrive while another is deciding are decided together, several to a transaction, in the
    /// order they came (see this module). The outcome of each is the one it would have had in a
    /// transaction of its own, in that order.
    pub fn gate_queued(&self, claim: &Claim, call: GateCall) -> Result<Gated, StoreError> {
        let slot = Arc::new(Slot::default());
        let queued = Queued {
            call,
            claim: Claim {
                checkout_id: claim.checkout_id.clone(),
                idempotency_key: claim.idempotency_key.clone(),
                token: claim.token,
                retry: claim.retry,
                frozen: claim.frozen.clone(),
            },
            started: Instant::now(),
            slot: Arc::clone(&slot),
        };
        // A follower sleeps until it is answered, or until it leads the next turn.
        if !self.gates.join(queued)
            && let Some(result) = slot.wait()
        {
            return result;
        }
        let result = loop {
            let batch = self.next_turn();
            if batch.is_empty() {
                // Unreachable while this call is unanswered, since only the leader takes calls
                // off the queue; answered as a failure rather than waiting forever.
                break slot.answered().unwrap_or_else(|| {
                    Err(StoreError::Inconsistent(
                        "the gate's queue lost a call; nothing was forwarded".into(),
                    ))
                });
            }
            if let Some(result) = slot.answered() {
                break result;
            }
        };
        self.gates.pass_lead();
        result
    }

    /// Runs one turn and answers its calls; returns the calls' slots (empty: nothing queued).
    fn next_turn(&self) -> Vec<Arc<Slot>> {
        let batch = self.gates.next_batch();
        let slots: Vec<Arc<Slot>> = batch.iter().map(|q| Arc::clone(&q.slot)).collect();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_turn(batch)));
        if run.is_err() {
            tracing::error!("a gate's decision panicked; its turn's calls were refused");
            for slot in slots.iter().filter(|slot| !slot.is_answered()) {
                slot.set(Turn::Done(Err(StoreError::Inconsistent(
                    "the gate's decision failed; nothing was forwarded".into(),
                ))));
            }
        }
        slots
    }

    fn run_turn(&self, mut batch: Vec<Queued>) {
        if let [one] = batch.as_mut_slice() {
            let result = self.gate_one(one);
            one.slot.set(Turn::Done(result));
            return;
        }
        let mut gates = Vec::with_capacity(batch.len());
        let mut ready = Vec::with_capacity(batch.len());
        for queued in batch.iter_mut() {
            let slot = Arc::clone(&queued.slot);
            match prepared(queued) {
                (Ok(gate), decide) => {
                    ready.push(slot);
                    gates.push(Batched { gate, decide });
                }
                (Err(e), _) => slot.set(Turn::Done(Err(e))),
            }
        }
        match self.decide_batch(&mut gates) {
            Ok(outcomes) => {
                let mut durable = false;
                for ((batched, slot), outcome) in gates.into_iter().zip(&ready).zip(outcomes) {
                    let input = &batched.gate.input;
                    let result = outcome.and_then(|outcome| {
                        // One sync makes every forward of the turn durable (SQLite).
                        if !durable && forwards(&outcome) {
                            self.made_durable()?;
                            durable = true;
                        }
                        Ok(gated(input.request, outcome, input.now))
                    });
                    slot.set(Turn::Done(result));
                }
            }
            Err(e) => {
                tracing::warn!("a batch of gates failed ({e}); deciding each on its own");
                drop(gates);
                // Locked past the timeout or unreachable, the store may be stuck for every gate
                // (the currency's lock or a bucket held by a host that died mid-transaction, the
                // database gone) or for one (its checkout's lock). The first gate on its own
                // tells: if it meets the same, the others get it too, rather than each waiting
                // the timeout out again in turn with every other currency's gates queued behind.
                let mut probing = e.for_every_gate().is_some();
                let mut stuck: Option<StoreError> = None;
                for queued in batch.iter_mut() {
                    if queued.slot.is_answered() {
                        continue;
                    }
                    let result = match stuck.as_ref().and_then(StoreError::for_every_gate) {
                        Some(again) => Err(again),
                        None => self.gate_one(queued),
                    };
                    if probing {
                        probing = false;
                        if let Err(failed) = &result {
                            stuck = failed.for_every_gate();
                        }
                    }
                    queued.slot.set(Turn::Done(result));
                }
            }
        }
    }

    /// One queued call in a transaction of its own, as [`Store::gate`].
    fn gate_one(&self, queued: &mut Queued) -> Result<Gated, StoreError> {
        let (gate, decide) = prepared(queued);
        self.decide_one(&gate?, decide)
    }
}

/// The queued call as the gate takes it, and its decision.
fn prepared(queued: &mut Queued) -> (Result<Prepared<'_>, StoreError>, &mut OwnedDecide) {
    let Queued {
        call:
            GateCall {
                request,
                quote,
                digest,
                agent,
                window,
                now,
                read_passkeys,
                decide,
                audit,
            },
        claim,
        started,
        slot: _,
    } = queued;
    let gate = Prepared::new(
        GateInput {
            request,
            quote,
            digest,
            agent: agent.as_ref(),
            window: *window,
            now: *now,
            read_passkeys: *read_passkeys,
            audit,
            started: *started,
        },
        claim,
    );
    (gate, &mut **decide)
}

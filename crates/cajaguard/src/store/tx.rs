//! What one store transaction can do, whatever the database holds it. The ledger's arithmetic
//! (`ledger.rs`), the approvals' rules (`approvals.rs`) and the gate's sequence (`mod.rs`) are
//! written once against [`Tx`]; `sqlite/` and `postgres/` only say it in their SQL. So both
//! backends keep the same books by construction, and one test suite runs against both.

use cajaguard_core::approval::{ApprovalDocument, RequestId};
use cajaguard_core::effect::PendingRequest;

use super::{InFlight, PendingRow, StoreError};

/// A ledger row's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    InFlight,
    Settled,
    Released,
}

impl State {
    pub(super) fn parse(text: &str) -> Result<State, StoreError> {
        match text {
            "in_flight" => Ok(State::InFlight),
            "settled" => Ok(State::Settled),
            "released" => Ok(State::Released),
            other => Err(StoreError::Inconsistent(format!(
                "a ledger row has the unknown state {other:?}"
            ))),
        }
    }
}

/// One checkout's ledger row.
pub(super) struct LedgerRow {
    pub idempotency_key: String,
    pub currency: String,
    pub reserved: i64,
    pub charged: Option<i64>,
    pub state: State,
    pub hour: i64,
    /// Hex request digest of the reserved attempt (`None` on rows from schema version 1).
    pub digest: Option<String>,
    /// When the attempt was last forwarded (the reservation, or a retry of it), µs.
    pub reserved_at_us: i64,
    /// Reconciliation once released an attempt of this checkout as stale: it is read again
    /// within the window, whatever later attempts did, in case that attempt landed late.
    pub revisit: bool,
    /// The paying agent (the service, SPEC §13): its own buckets count this row too.
    pub agent: Option<String>,
}

/// A reservation the gate asked for.
#[derive(Clone, Copy)]
pub(super) struct Reservation<'a> {
    pub checkout_id: &'a str,
    pub idempotency_key: &'a str,
    pub merchant: &'a str,
    pub currency: &'a str,
    pub total: i64,
    pub digest: &'a str,
    /// Keep the checkout's revisit mark (see [`LedgerRow::revisit`]).
    pub revisit: bool,
    /// The paying agent's `meta.ucp-agent.profile`.
    pub agent_profile: &'a str,
    /// The paying agent's id (the service); `None` on stdio.
    pub agent: Option<&'a str>,
}

/// A checkout's claim row (SPEC §4 step 3a).
pub(super) struct ClaimRow {
    pub idempotency_key: String,
    pub claimed_at_us: i64,
    /// Random per claim written: the calls that took or shared this claim hold it (see
    /// [`super::Claim`]), and a claim written after it was ended has another.
    pub token: i64,
}

/// What a checkout's claim, update lease and settlement decide on, read once its lock is held
/// (see [`Tx::checkout_reads`]).
pub(super) struct CheckoutReads {
    /// An update lease is live at the time asked (`false` when not asked: not a claim).
    pub lease_live: bool,
    /// The checkout's ledger row (locked on PostgreSQL, as [`Tx::ledger_row`]).
    pub row: Option<LedgerRow>,
    pub claim: Option<ClaimRow>,
    /// The freeze in force, as [`Tx::frozen`] reads it (`None` when not asked: not a claim).
    pub frozen: Option<(i64, String)>,
    /// The agent the checkout was made for through the service, as [`AgentTx::made_for`] reads
    /// it (`None` when not asked: not a claim).
    ///
    /// [`AgentTx::made_for`]: super::agents::AgentTx::made_for
    pub agent: Option<String>,
}

/// One row of [`Tx::window_counts`].
pub(super) enum WindowCount {
    /// What a bucket account's buckets count.
    Counted { account: String, amount: i64 },
    /// What the rows in flight in `currency` (of `agent`, if any) reserve.
    InFlight {
        currency: String,
        agent: Option<String>,
        amount: i64,
    },
}

impl WindowCount {
    /// From a row of `Tx::window_counts` (both backends): (in flight?, currency or account, agent,
    /// amount).
    pub(super) fn of(in_flight: bool, name: String, agent: Option<String>, amount: i64) -> Self {
        if in_flight {
            WindowCount::InFlight {
                currency: name,
                agent,
                amount,
            }
        } else {
            WindowCount::Counted {
                account: name,
                amount,
            }
        }
    }
}

/// Who ended a reservation as not paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleasedBy {
    /// The shop's explicit word on the forwarded call, confirmed by a fresh read.
    Shop,
    /// Reconciliation found a stale attempt's checkout open; revisited later within the window.
    Reconcile,
}

impl ReleasedBy {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            ReleasedBy::Shop => "shop",
            ReleasedBy::Reconcile => "reconcile",
        }
    }
}

/// What the gate reads once it holds its currency's and its checkout's locks.
pub(super) struct GateKeys<'a> {
    pub currency: &'a str,
    /// The paying agent's own bucket account (`ledger::agent_account`), if there is an agent.
    pub agent_account: Option<&'a str>,
    pub checkout_id: &'a str,
    /// The first bucket inside the window.
    pub from_hour: i64,
    /// The bucket a reservation made now goes to (PostgreSQL locks it with the reads).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub hour: i64,
    pub request_id: &'a RequestId,
    /// Whether passkey approvals are read at all (the policy's page is on).
    pub passkeys: bool,
}

/// The rows behind the gate's decision, read in one go (see [`Tx::gate_reads`]).
pub(super) struct GateReads {
    /// `settled + in_flight` over the currency's buckets in the window.
    pub window_sum: i64,
    /// The same over the agent's own account; 0 without an agent.
    pub agent_window_sum: i64,
    /// The checkout's ledger row (locked on PostgreSQL, as [`Tx::ledger_row`]).
    pub row: Option<LedgerRow>,
    pub frozen: Option<(i64, String)>,
    pub claim: Option<ClaimRow>,
    pub approvals: Vec<ApprovalDocument>,
    /// The passkey approvals' texts, when `passkeys` asked for them.
    pub passkey_texts: Vec<String>,
}

/// The statements a transaction runs. Times are Unix microseconds, amounts minor units.
pub(super) trait Tx:
    super::passkeys::PasskeyTx + super::log::LogTx + super::agents::AgentTx
{
    /// Makes every other gate in `currency` wait until this transaction ends, whatever host it
    /// runs on, and then takes [`Tx::lock_checkout`] for `checkout_id` (in that order, always).
    /// SQLite: nothing to do, `BEGIN IMMEDIATE` already holds the database's write lock.
    /// PostgreSQL: the currency's advisory lock, then the checkout's, in one statement.
    fn lock_gate(&mut self, currency: &str, checkout_id: &str) -> Result<(), StoreError>;
    /// Someone acts on this transaction once it commits (a payment goes out under its
    /// reservation, payments stay frozen by it): its commit must be on disk before the commit
    /// returns. A write transaction that never says this may be lost to a power cut of the
    /// database's host, so its loss must fail closed (see `Store::write_unflushed`).
    /// PostgreSQL: the commit waits for its flush. SQLite: the WAL is synced after the commit,
    /// outside the write lock (`Sqlite::write`; for a gate, once per turn that forwards,
    /// `Store::made_durable`).
    fn durable_on_commit(&mut self) {}
    /// [`Tx::lock_gate`] for several gates of one currency decided in one transaction
    /// (`gate::batch`): the currency's lock once, then each checkout's. `checkout_ids` holds no
    /// id twice.
    fn lock_gates(&mut self, currency: &str, checkout_ids: &[&str]) -> Result<(), StoreError> {
        checkout_ids
            .iter()
            .try_for_each(|checkout_id| self.lock_gate(currency, checkout_id))
    }
    /// `settled + in_flight` over the buckets of `currency` (an account: see
    /// `ledger::account`) from `from_hour` on.
    fn bucket_sum(&mut self, currency: &str, from_hour: i64) -> Result<i64, StoreError>;
    /// The checkout's row; PostgreSQL also locks it until the transaction ends, so a settlement
    /// and a gate of the same checkout never interleave.
    fn ledger_row(&mut self, checkout_id: &str) -> Result<Option<LedgerRow>, StoreError>;
    /// Adds the deltas to one bucket (creating it).
    fn bump(
        &mut self,
        currency: &str,
        hour: i64,
        settled: i64,
        in_flight: i64,
    ) -> Result<(), StoreError>;
    /// Writes the checkout's row as in flight, replacing an earlier attempt's.
    fn put_reservation(
        &mut self,
        r: &Reservation<'_>,
        hour: i64,
        at_us: i64,
    ) -> Result<(), StoreError>;
    /// Settles the row; `currency` is the charged one (it differs from the reserved one only when
    /// the shop charged in another currency).
    fn mark_settled(
        &mut self,
        checkout_id: &str,
        charged: i64,
        currency: &str,
        at_us: i64,
    ) -> Result<(), StoreError>;
    fn mark_released(
        &mut self,
        checkout_id: &str,
        at_us: i64,
        by: ReleasedBy,
    ) -> Result<(), StoreError>;
    /// Released-by-reconciliation rows reserved at or after `from_us`, oldest first: their
    /// checkouts may still complete (a slow shop), and are read again.
    fn released_by_reconcile(&mut self, from_us: i64) -> Result<Vec<InFlight>, StoreError>;

    /// Makes every other claim, update lease, gate and settlement of `checkout_id` wait until this
    /// transaction ends. SQLite: nothing to do (`BEGIN IMMEDIATE`). PostgreSQL: an advisory
    /// transaction lock keyed by the checkout id.
    fn lock_checkout(&mut self, checkout_id: &str) -> Result<(), StoreError>;
    fn claim_get(&mut self, checkout_id: &str) -> Result<Option<ClaimRow>, StoreError>;
    /// Writes the checkout's claim, replacing an abandoned one.
    fn claim_put(
        &mut self,
        checkout_id: &str,
        idempotency_key: &str,
        at_us: i64,
        token: i64,
    ) -> Result<(), StoreError>;
    fn claim_delete(&mut self, checkout_id: &str) -> Result<(), StoreError>;
    /// Whether an update lease on the checkout expires after `now_us`.
    fn lease_live(&mut self, checkout_id: &str, now_us: i64) -> Result<bool, StoreError>;
    fn lease_put(
        &mut self,
        lease_id: &str,
        checkout_id: &str,
        expires_us: i64,
    ) -> Result<(), StoreError>;
    fn lease_delete(&mut self, lease_id: &str) -> Result<(), StoreError>;

    /// The freeze in force: (frozen at, reason).
    fn frozen(&mut self) -> Result<Option<(i64, String)>, StoreError>;
    /// Freezes; already frozen, the first time stays and the reason is added to the first's.
    fn freeze_put(&mut self, at_us: i64, reason: &str) -> Result<(), StoreError>;
    fn freeze_delete(&mut self) -> Result<(), StoreError>;
    /// Moves the reservation's time to a retry's: reconciliation measures staleness from the last
    /// forward, so a payment is never released while a retry of it may still be at the shop.
    fn touch_reservation(&mut self, checkout_id: &str, at_us: i64) -> Result<(), StoreError>;
    /// In one statement (one snapshot, so the two agree): what the buckets from `from_hour` on
    /// count (`settled + in_flight`) per account, and the reserved amounts of the ledger's rows
    /// in flight in those hours per (currency, agent).
    fn window_counts(&mut self, from_hour: i64) -> Result<Vec<WindowCount>, StoreError>;
    fn in_flight(&mut self) -> Result<Vec<InFlight>, StoreError>;
    /// The checkout's reservation if it is in flight (one row by the primary key).
    fn in_flight_of(&mut self, checkout_id: &str) -> Result<Option<InFlight>, StoreError>;
    /// The checkout's reservation if it was released (by the shop's word or a reconciliation):
    /// the shop may have completed it after all.
    fn released_of(&mut self, checkout_id: &str) -> Result<Option<InFlight>, StoreError>;

    /// The approval documents filed for `id` (files in `<home>/approvals/`, or the `approvals`
    /// table). Broken entries are skipped with a warning: they can never make the gate fail.
    fn approval_documents(&mut self, id: &RequestId) -> Result<Vec<ApprovalDocument>, StoreError>;
    fn is_used(&mut self, nonce: &str) -> Result<bool, StoreError>;
    /// A plain insert: a nonce already used makes it fail, and the transaction with it.
    fn insert_used(
        &mut self,
        nonce: &str,
        request_id: &RequestId,
        checkout_id: &str,
        at_us: i64,
    ) -> Result<(), StoreError>;

    /// Records (or refreshes) a blocked request. Blocking again keeps the first `created_at` and
    /// makes a request whose approval was used pending again.
    fn upsert_pending(&mut self, p: &PendingRequest, at_us: i64) -> Result<(), StoreError>;
    /// Removes the requests still waiting on `checkout_id` other than `keep`: a block replaces
    /// them (migration 0009 says why). Only gates write pending rows, each under its checkout's
    /// lock, so this takes no lock another writer holds.
    fn supersede_pending(&mut self, checkout_id: &str, keep: &RequestId) -> Result<(), StoreError>;
    fn mark_pending_used(&mut self, id: &RequestId) -> Result<(), StoreError>;
    fn pending_list(&mut self) -> Result<Vec<PendingRow>, StoreError>;
    fn pending_get(&mut self, id: &RequestId) -> Result<Option<PendingRow>, StoreError>;

    /// The last `limit` decisions on `complete_checkout`, newest first (for the approval page).
    fn recent_decisions(&mut self, limit: i64) -> Result<Vec<super::Decided>, StoreError>;

    /// A checkout's rows, as the statements above would read them one by one; for a claim made
    /// at `claim_at_us`, also whether an update lease is live then and the freeze. PostgreSQL
    /// sends them in one round trip, so a claim or a settlement costs two (its reads, then its
    /// writes with `COMMIT`), and holds the rows its writes lock only while the server applies
    /// them.
    fn checkout_reads(
        &mut self,
        checkout_id: &str,
        claim_at_us: Option<i64>,
    ) -> Result<CheckoutReads, StoreError> {
        Ok(CheckoutReads {
            lease_live: match claim_at_us {
                Some(at_us) => self.lease_live(checkout_id, at_us)?,
                None => false,
            },
            row: self.ledger_row(checkout_id)?,
            claim: self.claim_get(checkout_id)?,
            frozen: match claim_at_us {
                Some(_) => self.frozen()?,
                None => None,
            },
            agent: match claim_at_us {
                Some(_) => self.made_for(super::ShopObject::Checkout.as_str(), checkout_id)?,
                None => None,
            },
        })
    }

    /// [`Tx::gate_reads`] for each of several gates holding [`Tx::lock_gates`], in order.
    /// PostgreSQL sends them all in one round trip.
    fn gate_reads_batch(&mut self, keys: &[GateKeys<'_>]) -> Result<Vec<GateReads>, StoreError> {
        keys.iter().map(|keys| self.gate_reads(keys)).collect()
    }

    /// Everything the gate reads after its locks, as the statements above would read it one by
    /// one (which is what this does). PostgreSQL sends them all in one round trip instead.
    fn gate_reads(&mut self, keys: &GateKeys<'_>) -> Result<GateReads, StoreError> {
        Ok(GateReads {
            window_sum: self.bucket_sum(keys.currency, keys.from_hour)?,
            agent_window_sum: match keys.agent_account {
                Some(account) => self.bucket_sum(account, keys.from_hour)?,
                None => 0,
            },
            row: self.ledger_row(keys.checkout_id)?,
            frozen: self.frozen()?,
            claim: self.claim_get(keys.checkout_id)?,
            approvals: self.approval_documents(keys.request_id)?,
            passkey_texts: if keys.passkeys {
                self.passkey_approval_texts(keys.request_id)?
            } else {
                Vec::new()
            },
        })
    }
}

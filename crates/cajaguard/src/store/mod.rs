//! The durable store (SPEC §8): the spend ledger, pending requests, used approvals and the audit log.
//! One idea: the `Store` and its one method per operation, each a transaction over `tx::Tx`
//! (the rules live in the sibling modules), and the tokens only the store can make.
//! Two backends behind one [`Store`], chosen by the config's `store`:
//! - the embedded default, SQLite (WAL) in `home`, with signed approvals as JSON files in
//!   `<home>/approvals/` ([`sqlite`]);
//! - PostgreSQL shared by every host, with the signed approvals in the database too ([`postgres`]).
//!
//! Every gate decision happens inside one transaction: lock the currency (SQLite's `BEGIN
//! IMMEDIATE` locks everything; PostgreSQL takes the currency's advisory lock), read the ledger view, call the
//! pure `decide`, apply its effect (reserve, mark the approval used, record the pending request),
//! write the audit record, commit. No `.await`, no call to the shop inside it. Processes sharing the
//! store, on one host or many, therefore can never together pass a cap or use one approval twice.
//!
//! Layout: [`tx`] is what a transaction can do, whatever the database; [`gate`] the gate's
//! sequence (`Store::gate`); [`ledger`] (reservations, hourly spend buckets), [`claims`],
//! [`approvals`] (candidates, single use, status), [`pending`], [`freeze`] and [`audit`] hold the
//! rules, written once against it; `sqlite/` and `postgres/` hold the SQL. [`error`] and [`rows`]
//! are what callers get back. `Claim`, `Permit` and `Lease` live here, so that only the store's
//! own modules can make one.

mod agents;
mod approvals;
mod audit;
mod claims;
mod error;
mod freeze;
mod gate;
mod ledger;
mod log;
mod passkeys;
mod pending;
mod postgres;
mod rows;
mod sqlite;
mod tx;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cajaguard_core::agent::AgentId;
use cajaguard_core::approval::{ApprovalDocument, RequestId, TrustedKeys};
use cajaguard_core::effect::Outcome;
use cajaguard_core::freeze::{Frozen, VerifiedUnfreeze};
use cajaguard_core::passkey::RelyingParty;
use cajaguard_core::policy::{Policy, StoreConfig, StoreUrl};
use cajaguard_core::settle::Settlement;
use time::OffsetDateTime;

use self::sqlite::SyncWhenAsked;

pub use self::agents::{AgentRow, ShopObject};
pub use self::audit::{
    AgentEvent, AuditEvent, AuditRecord, Decided, FrozenBy, PasskeyEvent, SettledAs,
};
pub use self::claims::Conflict;
pub use self::error::StoreError;
pub use self::gate::{GateCall, OwnedDecide};
pub use self::log::{Anchor, LOG_KEY_FILE, LogHead};
pub use self::passkeys::{LINK_TTL, LinkState, PasskeyRow, token_hash};
pub use self::postgres::CONNECT_TIMEOUT;
pub use self::rows::{ApprovalStatus, FiledApproval, InFlight, PendingRow, WindowSpend};
pub use self::tx::ReleasedBy;
pub use sqlite::schema::{BUSY_TIMEOUT, DB_FILE};

/// A payment's claim on its checkout (SPEC §4 step 3a), made by [`Store::claim`] and handed to
/// [`Store::gate`]. Its holder ends it with [`Store::abandon`] when it forwards nothing.
#[derive(Debug)]
#[must_use = "a claim left alone blocks its checkout until it looks abandoned"]
pub struct Claim {
    checkout_id: String,
    idempotency_key: String,
    /// The claim row's token: the gate forwards only while the row it reads holds this one, so
    /// a claim ended and written again under the same key (by another call) is not this one.
    token: Option<i64>,
    retry: bool,
    frozen: Option<Frozen>,
}

impl Claim {
    /// The claim rides on this payment's reservation in flight: the call is a retry.
    pub fn is_retry(&self) -> bool {
        self.retry
    }

    /// The freeze in force when the claim was asked for, if payments were frozen then: the claim
    /// then holds nothing, and a gate under it can only refuse.
    pub fn frozen(&self) -> Option<&Frozen> {
        self.frozen.as_ref()
    }
}

/// Leave to forward one `complete_checkout`. Only [`Store::gate`] makes one, and only after it
/// committed (and made durable) a reservation or a retry of one; forwarding a payment takes it, so
/// no path can reach the shop without the gate.
#[derive(Debug)]
pub struct Permit {
    checkout_id: String,
    idempotency_key: String,
    retry: bool,
    /// The ledger row's time of this forward (the reservation's, or the retry's touch).
    forwarded_at: OffsetDateTime,
}

impl Permit {
    pub fn checkout_id(&self) -> &str {
        &self.checkout_id
    }
    pub fn idempotency_key(&self) -> &str {
        &self.idempotency_key
    }
    /// A retry of a payment whose first outcome is unknown: its refusal says nothing about the first.
    pub fn is_retry(&self) -> bool {
        self.retry
    }
}

/// What [`Store::gate`] decided, with the permit when the payment may go out.
#[derive(Debug)]
pub struct Gated {
    pub outcome: Outcome,
    pub permit: Option<Permit>,
}

/// An update or cancel of a checkout on its way to the shop; end it with [`Store::end_update`].
#[derive(Debug)]
#[must_use = "a lease left alone blocks payments of its checkout until it expires"]
pub struct Lease {
    lease_id: String,
}

/// The store named by the config. `Send + Sync`: share it behind an `Arc`; calls serialize on one
/// connection (each is a short transaction), and separate processes serialize on the database's
/// locks (SQLite's write lock, PostgreSQL's per-currency advisory lock).
pub struct Store {
    home: PathBuf,
    backend: Backend,
    /// The home's log key as a signer for this log, read once (`log.rs`).
    log_signer: std::sync::OnceLock<cajaguard_core::audit_log::LogSigner>,
    /// The gates waiting for their turn in this process ([`Store::gate_queued`]).
    gates: gate::GateQueue,
    /// The last checkpoint [`Store::checkpoint`] made durable, with the log size it covers.
    durable_checkpoint: std::sync::Mutex<Option<(u64, String)>>,
}

enum Backend {
    Sqlite(sqlite::Sqlite),
    Postgres(self::postgres::Postgres),
}

impl Store {
    /// Opens the embedded SQLite store in `home` (creating the home, 0700, its database and
    /// `approvals/` if missing).
    pub fn open(home: &Path) -> Result<Store, StoreError> {
        Store {
            home: home.to_path_buf(),
            backend: Backend::Sqlite(sqlite::Sqlite::open(home)?),
            log_signer: std::sync::OnceLock::new(),
            gates: gate::GateQueue::default(),
            durable_checkpoint: std::sync::Mutex::new(None),
        }
        .with_log()
    }

    /// The store with its audit log's head made and older rows adopted (`log::open`).
    fn with_log(self) -> Result<Store, StoreError> {
        self.open_log()?;
        Ok(self)
    }

    /// Opens the store the policy names: its `store`, else SQLite in its `home`.
    pub fn for_policy(policy: &Policy) -> Result<Store, StoreError> {
        Store::open_with(&policy.home, &policy.store)
    }

    /// Opens the store `config` names. For PostgreSQL this connects (within [`CONNECT_TIMEOUT`])
    /// and applies missing migrations; `url_env` is read from the environment here, at the edge.
    pub fn open_with(home: &Path, config: &StoreConfig) -> Result<Store, StoreError> {
        let url = match config {
            StoreConfig::Sqlite => return Store::open(home),
            StoreConfig::Postgres { url } => url,
        };
        let url = match url {
            StoreUrl::Literal(url) => url.clone(),
            StoreUrl::Env(name) => match std::env::var(name) {
                Ok(value) if !value.trim().is_empty() => zeroize::Zeroizing::new(value),
                _ => {
                    return Err(StoreError::Config(format!(
                        "store.url_env names {name}, which is not set (or not UTF-8): export {name}=postgres://user@host:5432/dbname"
                    )));
                }
            },
        };
        Store {
            home: home.to_path_buf(),
            backend: Backend::Postgres(self::postgres::Postgres::open(&url)?),
            log_signer: std::sync::OnceLock::new(),
            gates: gate::GateQueue::default(),
            durable_checkpoint: std::sync::Mutex::new(None),
        }
        .with_log()
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    /// Where the data is, for people: the SQLite file, or the PostgreSQL address without user or
    /// password.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Sqlite(_) => self.database_path().display().to_string(),
            Backend::Postgres(pg) => pg.target().to_owned(),
        }
    }

    /// Whether this is the shared PostgreSQL store.
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// The SQLite database file inside the home (meaningful for the SQLite store only).
    pub fn database_path(&self) -> PathBuf {
        self.home.join(DB_FILE)
    }

    /// The folder a human drops signed approvals into (SQLite store only: the shared store keeps
    /// them in its `approvals` table).
    pub fn approvals_dir(&self) -> PathBuf {
        self.home.join(sqlite::approval_files::APPROVALS_DIR)
    }

    /// A write transaction: `f` runs in it and it commits if `f` returns `Ok`. PostgreSQL may run
    /// `f` again after a serialization failure or deadlock (the earlier run was rolled back).
    fn write<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn tx::Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Sqlite(db) => db.write(f, SyncWhenAsked::Here),
            Backend::Postgres(db) => db.run(f),
        }
    }

    /// [`Store::write`] for writes whose loss in a crash fails closed and that nothing acts on
    /// before a later write is made durable: the commit does not wait for the disk unless `f`
    /// asks for it ([`tx::Tx::durable_on_commit`]: a forward, a freeze). (SQLite's commits never
    /// wait for the disk by themselves: see `sqlite::schema::open`.)
    fn write_unflushed<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn tx::Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Sqlite(db) => db.write(f, SyncWhenAsked::Here),
            Backend::Postgres(db) => db.run_unflushed(f),
        }
    }

    /// [`Store::write_unflushed`] for the gate: on SQLite the gate syncs a turn's forwards itself
    /// (`Store::made_durable`), once per turn, and a failed sync refuses them.
    fn write_gate<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn tx::Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Sqlite(db) => db.write(f, SyncWhenAsked::ByTheGate),
            Backend::Postgres(db) => db.run_unflushed(f),
        }
    }

    /// Reads, and single inserts that need no transaction of their own on SQLite.
    fn read<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn tx::Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Sqlite(db) => db.read(f),
            Backend::Postgres(db) => db.read(f),
        }
    }

    /// Claims `checkout_id` for the payment with `idempotency_key` before its checkout is read back
    /// (SPEC §4 step 3a). `orphan_after`: how old a claim without a reservation must be before it
    /// counts as abandoned (longer than any live holder takes to read and decide). A payment of no
    /// agent (stdio); the service's payments are [`Store::claim_as`].
    pub fn claim(
        &self,
        checkout_id: &str,
        idempotency_key: &str,
        now: OffsetDateTime,
        orphan_after: Duration,
    ) -> Result<Result<Claim, Conflict>, StoreError> {
        self.claim_as(checkout_id, idempotency_key, now, orphan_after, None)
    }

    /// [`Store::claim`] for a payment by `agent` (the service): refused as
    /// [`Conflict::NotTheAgents`] unless the checkout was made for `agent` ([`Store::bind_to_agent`]),
    /// read in the claim's own transaction.
    pub fn claim_as(
        &self,
        checkout_id: &str,
        idempotency_key: &str,
        now: OffsetDateTime,
        orphan_after: Duration,
        agent: Option<&AgentId>,
    ) -> Result<Result<Claim, Conflict>, StoreError> {
        let agent = agent.map(AgentId::as_str);
        // Not flushed on its own: nothing is forwarded under it before the gate's flush, which
        // covers it, and a claim lost in a crash makes that gate refuse (`ClaimLost`). One flush
        // wait fewer on every payment.
        let new_token = claims::new_token()?;
        let claimed = self.write_unflushed(&mut |tx| {
            claims::claim(
                tx,
                checkout_id,
                idempotency_key,
                new_token,
                now,
                orphan_after,
                agent,
            )
        })?;
        Ok(claimed.map(|claimed| Claim {
            checkout_id: checkout_id.to_owned(),
            idempotency_key: idempotency_key.to_owned(),
            token: claimed.token,
            retry: claimed.retry,
            frozen: claimed.frozen,
        }))
    }

    /// Ends a claim under which nothing was forwarded (the checkout could not be read, the store
    /// failed before the gate decided). A claim that belongs to a reservation in flight stays.
    pub fn abandon(&self, claim: Claim) -> Result<(), StoreError> {
        self.write(&mut |tx| {
            claims::end_unreserved(tx, &claim.checkout_id, &claim.idempotency_key, claim.token)
        })
    }

    /// An update or cancel of `checkout_id` may go to the shop unless a payment holds it; the lease
    /// keeps payments of it off until [`Store::end_update`] or `now + lasts`.
    pub fn begin_update(
        &self,
        checkout_id: &str,
        now: OffsetDateTime,
        lasts: Duration,
        orphan_after: Duration,
    ) -> Result<Result<Lease, Conflict>, StoreError> {
        let mut random = [0u8; 16];
        getrandom::fill(&mut random).map_err(|e| {
            StoreError::Inconsistent(format!("no randomness for an update lease: {e}"))
        })?;
        let lease_id = hex::encode(random);
        let expires = now + time::Duration::try_from(lasts).unwrap_or(time::Duration::MAX);
        let leased = self.write(&mut |tx| {
            claims::lease(tx, checkout_id, &lease_id, now, expires, orphan_after)
        })?;
        Ok(leased.map(|()| Lease {
            lease_id: lease_id.clone(),
        }))
    }

    /// The update answered: payments of its checkout may be claimed again.
    pub fn end_update(&self, lease: Lease) -> Result<(), StoreError> {
        self.write(&mut |tx| tx.lease_delete(&lease.lease_id))
    }

    /// The freeze in force, if any.
    pub fn frozen(&self) -> Result<Option<Frozen>, StoreError> {
        self.read(&mut |tx| freeze::current(tx))
    }

    /// Freezes payments on every process and host on the store, at once. Already frozen: the first
    /// freeze stays (its time is what an unfreeze names). Returns the freeze in force.
    pub fn freeze(
        &self,
        reason: &str,
        by: FrozenBy,
        now: OffsetDateTime,
        audit: &AuditRecord,
    ) -> Result<Frozen, StoreError> {
        self.write(&mut |tx| {
            tx.freeze_put(micros(now), reason)?;
            // Gates on every process act on it at once: it must not be lost to a power cut.
            tx.durable_on_commit();
            log::append(tx, AuditEvent::Frozen(by), audit)?;
            freeze::current(tx)?
                .ok_or_else(|| StoreError::Inconsistent("a freeze did not stay written".into()))
        })
    }

    /// Lifts `frozen` with a verified unfreeze, using its nonce once. Fails with
    /// [`StoreError::NotThatFreeze`] when `frozen` is no longer the freeze in force.
    pub fn unfreeze(
        &self,
        frozen: &Frozen,
        unfreeze: &VerifiedUnfreeze,
        now: OffsetDateTime,
        audit: &AuditRecord,
    ) -> Result<(), StoreError> {
        // The nonce goes where approval nonces go, so no signed document of either kind is ever
        // used twice; the unfreeze has no request of its own, so it is filed under a marker id.
        let marker = RequestId::parse("cg-0000000000000000")
            .map_err(|e| StoreError::Inconsistent(e.to_string()))?;
        self.write(&mut |tx| {
            if freeze::current(tx)?.as_ref() != Some(frozen) {
                return Err(StoreError::NotThatFreeze);
            }
            if tx.is_used(unfreeze.nonce())? {
                return Err(StoreError::NotThatFreeze);
            }
            tx.insert_used(unfreeze.nonce(), &marker, "unfreeze", micros(now))?;
            tx.freeze_delete()?;
            log::append(tx, AuditEvent::Unfrozen, audit)
        })
    }

    /// Reservations that reconciliation released within `window` before `now`: their checkouts
    /// are read again, since a slow shop may still complete one (SPEC §4.13).
    pub fn released_by_reconcile(
        &self,
        window: Duration,
        now: OffsetDateTime,
    ) -> Result<Vec<InFlight>, StoreError> {
        let from = now - time::Duration::try_from(window).unwrap_or(time::Duration::MAX);
        self.read(&mut |tx| tx.released_by_reconcile(micros(from)))
    }

    /// Ends the reservation of `checkout_id`/`idempotency_key` as `settlement` says (Unknown: no change),
    /// and appends `record` to the audit log in the same transaction, as what `settlement` says
    /// ([`SettledAs::of`]): a settlement is never applied without its record. (It is recorded
    /// also when the ledger ignores it: no reservation, another attempt's, a retry forwarded
    /// since; the logs say which.) Idempotent: settling the same outcome twice changes nothing in
    /// the ledger the second time (each is recorded). Settled spend is never released.
    ///
    /// A completion or release ends the checkout's claim with it; `released_by` says who released.
    /// A completion that differs from its quote freezes payments in the same transaction.
    #[allow(clippy::too_many_arguments)]
    pub fn settle(
        &self,
        checkout_id: &str,
        idempotency_key: &str,
        settlement: &Settlement,
        released_by: ReleasedBy,
        now: OffsetDateTime,
        record: &AuditRecord,
    ) -> Result<(), StoreError> {
        self.settle_recorded(
            checkout_id,
            idempotency_key,
            settlement,
            released_by,
            None,
            now,
            record,
        )
    }

    /// Settles `row`, a reservation as a reconciliation read it before asking the shop (see
    /// [`Store::settle`]): a release applies only if it is still that attempt, reserved when it
    /// was. A retry that renewed the reservation meanwhile has its own payment at the shop, and
    /// the reading said nothing of it; its reservation stays.
    pub fn settle_reconciled(
        &self,
        row: &InFlight,
        settlement: &Settlement,
        now: OffsetDateTime,
        record: &AuditRecord,
    ) -> Result<(), StoreError> {
        self.settle_recorded(
            &row.checkout_id,
            &row.idempotency_key,
            settlement,
            ReleasedBy::Reconcile,
            Some(row.reserved_at),
            now,
            record,
        )
    }

    /// Settles the attempt `permit` forwarded, with its record (see [`Store::settle`]); a release
    /// applies only if no retry of the same payment was forwarded since.
    pub fn settle_permit(
        &self,
        permit: &Permit,
        settlement: &Settlement,
        now: OffsetDateTime,
        record: &AuditRecord,
    ) -> Result<(), StoreError> {
        self.settle_recorded(
            &permit.checkout_id,
            &permit.idempotency_key,
            settlement,
            ReleasedBy::Shop,
            Some(permit.forwarded_at),
            now,
            record,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn settle_recorded(
        &self,
        checkout_id: &str,
        idempotency_key: &str,
        settlement: &Settlement,
        released_by: ReleasedBy,
        forwarded_at: Option<OffsetDateTime>,
        now: OffsetDateTime,
        record: &AuditRecord,
    ) -> Result<(), StoreError> {
        let event = AuditEvent::Settled(SettledAs::of(settlement, released_by));
        if *settlement == Settlement::Unknown {
            return self.audit(event, record);
        }
        // Lost to a power cut, a settlement leaves its reservation in flight (counted) for
        // reconciliation to settle again; one that freezes waits for its flush.
        self.write_unflushed(&mut |tx| {
            ledger::settle(
                tx,
                checkout_id,
                idempotency_key,
                settlement,
                released_by,
                forwarded_at,
                now,
            )?;
            log::append(tx, event, record)
        })
    }

    /// An audit record for a decision made outside [`Store::gate`] (precheck refusals, other tools).
    pub fn audit(&self, event: AuditEvent, record: &AuditRecord) -> Result<(), StoreError> {
        self.write(&mut |tx| log::append(tx, event, record))
    }

    /// Settled and in-flight spend per currency over `window` before `now` (the same conservative
    /// hourly reading the gate uses).
    pub fn window_spend(
        &self,
        window: Duration,
        now: OffsetDateTime,
    ) -> Result<BTreeMap<String, WindowSpend>, StoreError> {
        let from_hour = ledger::window_start_hour(window, now);
        let mut all = self.read(&mut |tx| ledger::window_spend(tx, from_hour))?;
        all.retain(|account, _| ledger::account_agent(account).is_none());
        Ok(all)
    }

    /// The same for one agent's own spend (SPEC §13: an agent sees its own headroom).
    pub fn agent_window_spend(
        &self,
        agent: &AgentId,
        window: Duration,
        now: OffsetDateTime,
    ) -> Result<BTreeMap<String, WindowSpend>, StoreError> {
        let from_hour = ledger::window_start_hour(window, now);
        let all = self.read(&mut |tx| ledger::window_spend(tx, from_hour))?;
        Ok(all
            .into_iter()
            .filter_map(|(account, spend)| match ledger::account_agent(&account) {
                Some((currency, of)) if of == agent.as_str() => Some((currency.to_owned(), spend)),
                _ => None,
            })
            .collect())
    }

    /// Requests still waiting for a human, oldest first (a request whose approval was used to
    /// forward a payment is no longer pending until the gate blocks it again).
    pub fn pending(&self) -> Result<Vec<PendingRow>, StoreError> {
        self.read(&mut |tx| tx.pending_list())
    }

    /// The requests a human still has to decide (SPEC §7: what `pending` lists): [`Store::pending`]
    /// without those that already carry a valid deny or a valid unused approval, read in one
    /// transaction so a request cannot fall between the two lists. `of_agent`: only that agent's
    /// requests (an agent's status), sorted out before any is checked, so one agent's requests
    /// cost another's status nothing.
    pub fn awaiting_decision(
        &self,
        trusted: &TrustedKeys,
        passkeys: Option<&RelyingParty>,
        now: OffsetDateTime,
        max_ttl: Duration,
        of_agent: Option<&AgentId>,
    ) -> Result<Vec<PendingRow>, StoreError> {
        self.read(&mut |tx| {
            let mut waiting = Vec::new();
            let rows = tx.pending_list()?.into_iter().filter(|row| {
                of_agent.is_none_or(|agent| row.request.agent.as_ref() == Some(agent))
            });
            for row in rows {
                let status = approvals::status(
                    tx,
                    &row.request.request_id,
                    trusted,
                    passkeys,
                    now,
                    max_ttl,
                )?;
                if !matches!(status, ApprovalStatus::Approved | ApprovalStatus::Denied) {
                    waiting.push(row);
                }
            }
            Ok(waiting)
        })
    }

    /// The stored request, pending or already used (so `show` and `approve` can read it).
    pub fn pending_request(&self, id: &RequestId) -> Result<Option<PendingRow>, StoreError> {
        self.read(&mut |tx| tx.pending_get(id))
    }

    /// What a human or the agent may learn about `id`: `Invalid` when the store knows neither a
    /// pending request nor an approval for it. Otherwise, over its approvals (verified against
    /// the pending request's digest): a valid deny wins, then a valid unused approval, then an
    /// approval whose nonce the gate used, else `Pending`.
    /// `passkeys`: the relying party passkey approvals are checked against when they count
    /// (`ApprovalPolicy::passkey_relying_party`); `None` leaves them out.
    pub fn approval_status(
        &self,
        id: &RequestId,
        trusted: &TrustedKeys,
        passkeys: Option<&RelyingParty>,
        now: OffsetDateTime,
        max_ttl: Duration,
    ) -> Result<ApprovalStatus, StoreError> {
        self.read(&mut |tx| approvals::status(tx, id, trusted, passkeys, now, max_ttl))
    }

    /// Files a signed approval, never overwriting one with the same request id and nonce. SQLite:
    /// `approvals/<request_id>-<nonce prefix>.json`, written atomically (temp file, fsync, link,
    /// fsync dir), mode 0600. PostgreSQL: a row in `approvals`, seen at once by every host.
    pub fn write_approval(&self, doc: &ApprovalDocument) -> Result<FiledApproval, StoreError> {
        match &self.backend {
            Backend::Sqlite(db) => db.write_approval(doc).map(FiledApproval::File),
            Backend::Postgres(db) => {
                db.write_approval(doc)?;
                Ok(FiledApproval::Database(db.target().to_owned()))
            }
        }
    }

    /// The last `limit` gate decisions, newest first.
    pub fn recent_decisions(&self, limit: i64) -> Result<Vec<Decided>, StoreError> {
        self.read(&mut |tx| tx.recent_decisions(limit))
    }

    /// Every reservation whose outcome is not known yet, oldest first.
    pub fn in_flight(&self) -> Result<Vec<InFlight>, StoreError> {
        self.read(&mut |tx| tx.in_flight())
    }

    /// The checkout's reservation if it is in flight: what the gate's hot path asks, by key.
    pub fn in_flight_of(&self, checkout_id: &str) -> Result<Option<InFlight>, StoreError> {
        self.read(&mut |tx| tx.in_flight_of(checkout_id))
    }

    /// The checkout's reservation if it was released (see [`Tx::released_of`]).
    pub fn released_of(&self, checkout_id: &str) -> Result<Option<InFlight>, StoreError> {
        self.read(&mut |tx| tx.released_of(checkout_id))
    }

    /// The database's clock (PostgreSQL's `clock_timestamp()`), or `None` for SQLite, whose
    /// clock is this host's (SPEC §13: hosts sharing a PostgreSQL store share its clock).
    pub fn database_now(&self) -> Result<Option<OffsetDateTime>, StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(db) => {
                from_micros(db.database_now_us()?, "the database's clock").map(Some)
            }
        }
    }

    /// The query plan of the window sum the gate runs for a USD window ending `now`, one line per
    /// step: a diagnostic showing the decision reads only the hourly buckets, never the ledger.
    /// (PostgreSQL plans for the actual parameters, so they are the gate's.)
    pub fn explain_window_query(
        &self,
        window: Duration,
        now: OffsetDateTime,
    ) -> Result<Vec<String>, StoreError> {
        let from_hour = ledger::window_start_hour(window, now);
        match &self.backend {
            Backend::Sqlite(db) => db.explain_window_query(from_hour),
            Backend::Postgres(db) => db.explain_window_query(from_hour),
        }
    }
}

fn micros(at: OffsetDateTime) -> i64 {
    i64::try_from(at.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

fn from_micros(us: i64, what: &str) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000)
        .map_err(|_| StoreError::Inconsistent(format!("{what} holds an impossible time ({us} µs)")))
}

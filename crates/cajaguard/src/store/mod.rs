//! The durable store under `home` (SPEC §8): the spend ledger, pending requests, used approvals and the
//! audit log in SQLite (WAL), and signed approvals as JSON files in `<home>/approvals/`.
//!
//! Every gate decision happens inside one `BEGIN IMMEDIATE` transaction: read the ledger view, call the
//! pure `decide`, apply its effect (reserve, mark the approval used, record the pending request), write
//! the audit record, commit. No `.await`, no network inside it. Two processes sharing a home therefore
//! can never together pass a cap or use one approval twice.
//!
//! Layout: [`schema`] opens the home and the database safely; [`ledger`] holds reservations and the
//! hourly spend buckets; [`approvals`] reads and writes approval files and the used-nonce table;
//! [`pending`] the blocked requests; [`audit`] the decision log.

mod approvals;
mod audit;
mod ledger;
mod pending;
mod schema;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cajaguard_core::approval::{ApprovalDocument, RequestId, TrustedKeys};
use cajaguard_core::gate::{ApprovalCandidate, Effect, LedgerView, Outcome, PendingRequest};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use cajaguard_core::settle::Settlement;
use rusqlite::{Connection, TransactionBehavior};
use time::OffsetDateTime;

pub use schema::{BUSY_TIMEOUT, DB_FILE};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the CajaGuard home {}: {source}; check that the path is right and that you own it", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the CajaGuard home {} is unsafe: {why}", path.display())]
    Unsafe { path: PathBuf, why: String },
    #[error("the store's database failed: {0}; the call was refused (nothing was forwarded)")]
    Database(#[from] rusqlite::Error),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Another process held the database's write lock past [`BUSY_TIMEOUT`]. Nothing was applied;
    /// retrying later is safe.
    #[error(
        "the store {} stayed locked by another CajaGuard process for more than {} s; the call was refused (nothing was forwarded), retry it",
        path.display(), BUSY_TIMEOUT.as_secs()
    )]
    Busy { path: PathBuf },
    /// The database was written by a newer CajaGuard (its schema version is unknown here).
    #[error(
        "the store {} has schema version {found}, this CajaGuard knows up to {known}; use the newer cajaguard binary or another home",
        path.display()
    )]
    Incompatible {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    /// The database holds something that cannot be (a bad value, or an effect that contradicts the
    /// ledger). Nothing was applied; the call was refused.
    #[error(
        "the store is inconsistent: {0}; the call was refused (nothing was forwarded); please report this"
    )]
    Inconsistent(String),
}

/// One audited decision (never a secret: no tokens, no card numbers, no arguments).
#[derive(Debug, Clone)]
pub struct AuditRecord {
    pub at: OffsetDateTime,
    pub tool: String,
    pub verdict: String,
    pub reason: String,
    pub merchant: Option<String>,
    pub currency: Option<String>,
    pub total: Option<i64>,
    pub request_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub checkout_id: Option<String>,
    pub latency: Duration,
    /// Free text without secrets (e.g. "shop charged 9900, quoted 8900").
    pub note: Option<String>,
}

/// A pending request as stored, with what `approve` shows.
#[derive(Debug, Clone)]
pub struct PendingRow {
    pub request: PendingRequest,
    pub created_at: OffsetDateTime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Used,
    Denied,
    Invalid,
}

impl ApprovalStatus {
    /// The wire form of `cajaguard_approval_status`: `pending`, `approved`, `used`, `denied`, `invalid`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Used => "used",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Invalid => "invalid",
        }
    }
}

/// Spend per currency inside the window, minor units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowSpend {
    pub settled: i64,
    pub in_flight: i64,
}

/// A reservation whose outcome is unknown (for reconciliation).
#[derive(Debug, Clone)]
pub struct InFlight {
    pub checkout_id: String,
    pub idempotency_key: String,
    pub currency: String,
    pub total: i64,
    /// When the payment was last forwarded: the reservation, or a later retry of it.
    pub reserved_at: OffsetDateTime,
}

/// The store of one home. `Send + Sync`: share it behind an `Arc`; calls serialize on one connection
/// (each is a short transaction with no I/O but the disk), and separate processes serialize on
/// SQLite's write lock.
pub struct Store {
    home: PathBuf,
    conn: Mutex<Connection>,
}

impl Store {
    /// Opens (creating if missing, 0700) the home and its database, and `approvals/`.
    pub fn open(home: &Path) -> Result<Store, StoreError> {
        let conn = schema::open(home)?;
        Ok(Store {
            home: home.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The SQLite database file inside the home.
    pub fn database_path(&self) -> PathBuf {
        self.home.join(DB_FILE)
    }

    /// The folder a human drops signed approvals into.
    pub fn approvals_dir(&self) -> PathBuf {
        self.home.join(approvals::APPROVALS_DIR)
    }

    /// SPEC §4 steps 9-12, atomically. `decide` is called exactly once, inside the transaction, with
    /// the ledger view for `quote.currency`/`request.checkout_id` over `window` before `now`, and the
    /// approvals found for `request_id` (files in `approvals/` plus their used flag). The outcome's
    /// effect is applied and `audit` written before commit. If anything fails, nothing is applied and
    /// the error is returned: the caller refuses (fail closed).
    ///
    /// The audit row takes its verdict and reason from the outcome (the caller cannot know them
    /// before), and its merchant, currency, total, request id, idempotency key and checkout id from
    /// the inputs where `audit` leaves them empty. Its latency is `audit.latency` plus the time spent
    /// in here up to the write.
    #[allow(clippy::too_many_arguments)]
    pub fn gate(
        &self,
        request: &CompleteRequest,
        quote: &Quote,
        request_id: &RequestId,
        window: Duration,
        now: OffsetDateTime,
        decide: &mut dyn FnMut(&LedgerView, &[ApprovalCandidate]) -> Outcome,
        audit: &AuditRecord,
    ) -> Result<Outcome, StoreError> {
        let started = Instant::now();
        let mut conn = self.lock();
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let view = ledger::view(&tx, &quote.currency, &request.checkout_id, window, now)?;
            let candidates = approvals::candidates(&tx, &self.approvals_dir(), request_id)?;
            let outcome = decide(&view, &candidates);
            match &outcome.effect {
                Effect::Forward {
                    currency,
                    total,
                    merchant,
                    use_approval_nonce,
                } => {
                    ledger::reserve(
                        &tx,
                        &ledger::Reservation {
                            checkout_id: &request.checkout_id,
                            idempotency_key: &request.idempotency_key,
                            merchant,
                            currency,
                            total: *total,
                        },
                        now,
                    )?;
                    if let Some(nonce) = use_approval_nonce {
                        approvals::mark_used(&tx, nonce, request_id, &request.checkout_id, now)?;
                    }
                }
                Effect::Retry => {
                    ledger::check_retry(&tx, &request.checkout_id, &request.idempotency_key, now)?
                }
                Effect::Refuse {
                    pending: Some(pending),
                } => pending::upsert(&tx, pending, now)?,
                Effect::Refuse { pending: None } => {}
            }
            let mut record = audit.clone();
            record.verdict = outcome.ruling.verdict.as_str().to_owned();
            record.reason = outcome.ruling.reason.as_str().to_owned();
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
            record.latency = record.latency.saturating_add(started.elapsed());
            audit::insert(&tx, &record)?;
            tx.commit()?;
            Ok(outcome)
        })();
        result.map_err(|e| self.classify(e))
    }

    /// Ends the reservation of `checkout_id`/`idempotency_key` as `settlement` says (Unknown: no change).
    /// Idempotent: settling the same outcome twice changes nothing the second time. Settled spend is
    /// never released.
    pub fn settle(
        &self,
        checkout_id: &str,
        idempotency_key: &str,
        settlement: &Settlement,
        now: OffsetDateTime,
    ) -> Result<(), StoreError> {
        if *settlement == Settlement::Unknown {
            return Ok(());
        }
        let mut conn = self.lock();
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            ledger::settle(&tx, checkout_id, idempotency_key, settlement, now)?;
            tx.commit()?;
            Ok(())
        })();
        result.map_err(|e| self.classify(e))
    }

    /// An audit record for a decision made outside [`Store::gate`] (precheck refusals, other tools).
    pub fn audit(&self, record: &AuditRecord) -> Result<(), StoreError> {
        let conn = self.lock();
        audit::insert(&conn, record).map_err(|e| self.classify(e))
    }

    /// Settled and in-flight spend per currency over `window` before `now` (the same conservative
    /// hourly reading the gate uses).
    pub fn window_spend(
        &self,
        window: Duration,
        now: OffsetDateTime,
    ) -> Result<BTreeMap<String, WindowSpend>, StoreError> {
        let conn = self.lock();
        ledger::window_spend(&conn, window, now).map_err(|e| self.classify(e))
    }

    /// Requests still waiting for a human, oldest first (a request whose approval was used to
    /// forward a payment is no longer pending until the gate blocks it again).
    pub fn pending(&self) -> Result<Vec<PendingRow>, StoreError> {
        let conn = self.lock();
        pending::list(&conn).map_err(|e| self.classify(e))
    }

    /// The stored request, pending or already used (so `show` and `approve` can read it).
    pub fn pending_request(&self, id: &RequestId) -> Result<Option<PendingRow>, StoreError> {
        let conn = self.lock();
        pending::get(&conn, id).map_err(|e| self.classify(e))
    }

    /// What a human or the agent may learn about `id`: `Invalid` when the store knows neither a
    /// pending request nor an approval file for it. Otherwise, over its approval files (verified
    /// against the pending request's digest): a valid deny wins, then a valid unused approval, then
    /// an approval whose nonce the gate used, else `Pending`.
    pub fn approval_status(
        &self,
        id: &RequestId,
        trusted: &TrustedKeys,
        now: OffsetDateTime,
        max_ttl: Duration,
    ) -> Result<ApprovalStatus, StoreError> {
        let conn = self.lock();
        approvals::status(&conn, &self.approvals_dir(), id, trusted, now, max_ttl)
            .map_err(|e| self.classify(e))
    }

    /// Writes `doc` to `approvals/<request_id>-<nonce prefix>.json` atomically (temp file, fsync,
    /// rename, fsync dir), mode 0600, never overwriting.
    pub fn write_approval(&self, doc: &ApprovalDocument) -> Result<PathBuf, StoreError> {
        approvals::write(&self.approvals_dir(), doc)
    }

    /// Every reservation whose outcome is not known yet, oldest first.
    pub fn in_flight(&self) -> Result<Vec<InFlight>, StoreError> {
        let conn = self.lock();
        ledger::in_flight(&conn).map_err(|e| self.classify(e))
    }

    /// The query plan of the window sum the gate runs (`EXPLAIN QUERY PLAN`), one line per step: a
    /// diagnostic showing the decision reads only the hourly buckets, never the ledger.
    pub fn explain_window_query(&self) -> Result<Vec<String>, StoreError> {
        let conn = self.lock();
        ledger::explain_window_query(&conn).map_err(|e| self.classify(e))
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic inside a call (say, in `decide`) dropped its `Transaction`, which rolled back: the
        // connection is clean, so a poisoned lock is safe to take over.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn classify(&self, err: StoreError) -> StoreError {
        schema::classify(err, &self.home)
    }
}

fn micros(at: OffsetDateTime) -> i64 {
    i64::try_from(at.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

fn from_micros(us: i64, what: &str) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000)
        .map_err(|_| StoreError::Inconsistent(format!("{what} holds an impossible time ({us} µs)")))
}

//! The durable store (SPEC §8): the spend ledger, pending requests, used approvals and the audit log.
//! Two backends behind one [`Store`], chosen by the config's `store`:
//! - the embedded default, SQLite (WAL) in `home`, with signed approvals as JSON files in
//!   `<home>/approvals/` ([`sqlite`]);
//! - PostgreSQL shared by every host, with the signed approvals in the database too ([`postgres`]).
//!
//! Every gate decision happens inside one transaction: lock the currency (SQLite's `BEGIN
//! IMMEDIATE` locks everything; PostgreSQL locks the currency's row), read the ledger view, call the
//! pure `decide`, apply its effect (reserve, mark the approval used, record the pending request),
//! write the audit record, commit. No `.await`, no call to the shop inside it. Processes sharing the
//! store, on one host or many, therefore can never together pass a cap or use one approval twice.
//!
//! Layout: [`tx`] is what a transaction can do, whatever the database; [`ledger`] (reservations,
//! hourly spend buckets), [`approvals`] (candidates, single use, status), [`pending`] and [`audit`]
//! hold the rules, written once against it; `sqlite/` and `postgres/` hold the SQL.

mod approvals;
mod audit;
mod claims;
mod freeze;
mod ledger;
mod pending;
mod postgres;
mod sqlite;
mod tx;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cajaguard_core::approval::{ApprovalDocument, BasketDigest, RequestId, TrustedKeys};
use cajaguard_core::freeze::{Frozen, VerifiedUnfreeze};
use cajaguard_core::gate::{ApprovalCandidate, Effect, LedgerView, Outcome, PendingRequest};
use cajaguard_core::policy::{Policy, StoreConfig, StoreUrl};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use cajaguard_core::settle::Settlement;
use time::OffsetDateTime;

pub use self::claims::Conflict;
pub use self::postgres::CONNECT_TIMEOUT;
pub use self::tx::ReleasedBy;
pub use sqlite::schema::{BUSY_TIMEOUT, DB_FILE};

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
    /// A statement failed on a live PostgreSQL connection. `target` names the database without
    /// user or password.
    #[error(
        "the PostgreSQL store {target} failed: {}; the call was refused (nothing was forwarded)",
        self::postgres::detail(source)
    )]
    Postgres {
        target: String,
        source: self::postgres::Error,
    },
    /// The PostgreSQL store cannot be reached (down, restarting, connection cut). Nothing was
    /// applied; the next call connects again.
    #[error(
        "the PostgreSQL store {store} is unreachable ({why}); the call was refused (nothing was forwarded); CajaGuard reconnects on the next call, check that the database is up"
    )]
    Unavailable { store: String, why: String },
    /// The `store` settings cannot be used (an unset `url_env` variable, a URL that does not
    /// parse). The message never holds the URL's password.
    #[error("the store setting is unusable: {0}")]
    Config(String),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An approval with this request id and nonce is already filed; it is never overwritten.
    #[error(
        "an approval for {request_id} with this nonce is already filed; it was not overwritten"
    )]
    ApprovalExists { request_id: String },
    /// Another process held the lock the call needed past [`BUSY_TIMEOUT`]. Nothing was applied;
    /// retrying later is safe.
    #[error(
        "the store {store} stayed locked by another CajaGuard process for more than {} s; the call was refused (nothing was forwarded), retry it",
        BUSY_TIMEOUT.as_secs()
    )]
    Busy { store: String },
    /// The database was written by a newer CajaGuard (its schema version is unknown here).
    #[error(
        "the store {store} has schema version {found}, this CajaGuard knows up to {known}; use the newer cajaguard binary or another store"
    )]
    Incompatible {
        store: String,
        found: i64,
        known: i64,
    },
    /// The payment's claim on its checkout was taken over (it had looked abandoned) before the gate
    /// decided. Nothing was applied or forwarded; the payment may be sent again.
    #[error(
        "this payment's claim on the checkout was taken over by another attempt before the gate decided; nothing was forwarded, send it again"
    )]
    ClaimLost,
    /// An unfreeze names a freeze that is no longer the one in force (already lifted, or frozen
    /// again since). Nothing was changed.
    #[error(
        "the unfreeze names a freeze that is not the one in force; run `cajaguard status` and unfreeze again"
    )]
    NotThatFreeze,
    /// The database holds something that cannot be (a bad value, or an effect that contradicts the
    /// ledger). Nothing was applied; the call was refused.
    #[error(
        "the store is inconsistent: {0}; the call was refused (nothing was forwarded); please report this"
    )]
    Inconsistent(String),
}

impl StoreError {
    /// The message already says what to do, so the CLI adds no hint that repeats it.
    pub fn says_what_to_do(&self) -> bool {
        matches!(
            self,
            StoreError::Open { .. }
                | StoreError::Unavailable { .. }
                | StoreError::Busy { .. }
                | StoreError::Incompatible { .. }
                | StoreError::Inconsistent(_)
                | StoreError::ClaimLost
                | StoreError::NotThatFreeze
        )
    }
}

/// Where `write_approval` filed a signed approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FiledApproval {
    /// A file in `<home>/approvals/` (SQLite store).
    File(PathBuf),
    /// The `approvals` table of the shared store (its redacted address).
    Database(String),
}

impl std::fmt::Display for FiledApproval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FiledApproval::File(path) => write!(f, "{}", path.display()),
            FiledApproval::Database(store) => write!(f, "filed in the shared store {store}"),
        }
    }
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

impl AuditRecord {
    /// A record for `tool` at `at`; the caller fills in what it knows.
    pub fn new(at: OffsetDateTime, tool: &str) -> AuditRecord {
        AuditRecord {
            at,
            tool: tool.to_owned(),
            verdict: String::new(),
            reason: String::new(),
            merchant: None,
            currency: None,
            total: None,
            request_id: None,
            idempotency_key: None,
            checkout_id: None,
            latency: Duration::ZERO,
            note: None,
        }
    }
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
    /// The paying agent's UCP profile (`None` on rows from schema version 1).
    pub agent_profile: Option<String>,
}

/// A payment's claim on its checkout (SPEC §4 step 3a), made by [`Store::claim`] and handed to
/// [`Store::gate`]. Its holder ends it with [`Store::abandon`] when it forwards nothing.
#[derive(Debug)]
#[must_use = "a claim left alone blocks its checkout until it looks abandoned"]
pub struct Claim {
    checkout_id: String,
    idempotency_key: String,
    retry: bool,
}

impl Claim {
    /// The claim rides on this payment's reservation in flight: the call is a retry.
    pub fn is_retry(&self) -> bool {
        self.retry
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
/// locks (SQLite's write lock, PostgreSQL's per-currency row lock).
pub struct Store {
    home: PathBuf,
    backend: Backend,
}

enum Backend {
    Sqlite(sqlite::Sqlite),
    Postgres(self::postgres::Postgres),
}

impl Store {
    /// Opens the embedded SQLite store in `home` (creating the home, 0700, its database and
    /// `approvals/` if missing).
    pub fn open(home: &Path) -> Result<Store, StoreError> {
        Ok(Store {
            home: home.to_path_buf(),
            backend: Backend::Sqlite(sqlite::Sqlite::open(home)?),
        })
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
        Ok(Store {
            home: home.to_path_buf(),
            backend: Backend::Postgres(self::postgres::Postgres::open(&url)?),
        })
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
            Backend::Sqlite(db) => db.write(f),
            Backend::Postgres(db) => db.run(f),
        }
    }

    /// Reads, and single inserts that need no transaction of their own on SQLite.
    fn read<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn tx::Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Sqlite(db) => db.read(f),
            Backend::Postgres(db) => db.run(f),
        }
    }

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
        window: Duration,
        now: OffsetDateTime,
        decide: &mut dyn FnMut(&LedgerView, &[ApprovalCandidate]) -> Outcome,
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
            tx.lock_currency(&quote.currency)?;
            tx.lock_checkout(&request.checkout_id)?;
            let view = ledger::view(tx, &quote.currency, &request.checkout_id, window, now)?;
            let candidates = approvals::candidates(tx, request_id)?;
            let outcome = decide(&view, &candidates);
            // Nothing goes out without the claim: another attempt may have taken over one that
            // looked abandoned. (A refusal needs none: a settlement may have ended it just now.)
            if !matches!(outcome.effect, Effect::Refuse { .. })
                && !claims::held(tx, &request.checkout_id, &request.idempotency_key)?
            {
                return Err(StoreError::ClaimLost);
            }
            match &outcome.effect {
                Effect::Forward {
                    currency,
                    total,
                    merchant,
                    digest: _,
                    use_approval_nonce,
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
                        &tx::Reservation {
                            checkout_id: &request.checkout_id,
                            idempotency_key: &request.idempotency_key,
                            merchant,
                            currency,
                            total: *total,
                            digest: &digest_hex,
                            revisit: false,
                            agent_profile: &request.agent_profile,
                        },
                        now,
                    )?;
                    if let Some(nonce) = use_approval_nonce {
                        approvals::mark_used(tx, nonce, request_id, &request.checkout_id, now)?;
                    }
                }
                Effect::Retry => {
                    ledger::check_retry(tx, &request.checkout_id, &request.idempotency_key, now)?
                }
                Effect::Refuse { pending } => {
                    if let Some(pending) = pending {
                        tx.upsert_pending(pending, micros(now))?;
                    }
                    claims::end_unreserved(tx, &request.checkout_id, &request.idempotency_key)?;
                }
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
            tx.insert_audit(&record)?;
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

    /// Claims `checkout_id` for the payment with `idempotency_key` before its checkout is read back
    /// (SPEC §4 step 3a). `orphan_after`: how old a claim without a reservation must be before it
    /// counts as abandoned (longer than any live holder takes to read and decide).
    pub fn claim(
        &self,
        checkout_id: &str,
        idempotency_key: &str,
        now: OffsetDateTime,
        orphan_after: Duration,
    ) -> Result<Result<Claim, Conflict>, StoreError> {
        let claimed = self
            .write(&mut |tx| claims::claim(tx, checkout_id, idempotency_key, now, orphan_after))?;
        Ok(claimed.map(|retry| Claim {
            checkout_id: checkout_id.to_owned(),
            idempotency_key: idempotency_key.to_owned(),
            retry,
        }))
    }

    /// Ends a claim under which nothing was forwarded (the checkout could not be read, the store
    /// failed before the gate decided). A claim that belongs to a reservation in flight stays.
    pub fn abandon(&self, claim: Claim) -> Result<(), StoreError> {
        self.write(&mut |tx| claims::end_unreserved(tx, &claim.checkout_id, &claim.idempotency_key))
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
        now: OffsetDateTime,
        audit: &AuditRecord,
    ) -> Result<Frozen, StoreError> {
        self.write(&mut |tx| {
            tx.freeze_put(micros(now), reason)?;
            tx.insert_audit(audit)?;
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
            tx.insert_audit(audit)
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

    /// Ends the reservation of `checkout_id`/`idempotency_key` as `settlement` says (Unknown: no change).
    /// Idempotent: settling the same outcome twice changes nothing the second time. Settled spend is
    /// never released.
    ///
    /// A completion or release ends the checkout's claim with it; `released_by` says who released.
    /// A completion that differs from its quote freezes payments in the same transaction.
    pub fn settle(
        &self,
        checkout_id: &str,
        idempotency_key: &str,
        settlement: &Settlement,
        released_by: ReleasedBy,
        now: OffsetDateTime,
    ) -> Result<(), StoreError> {
        if *settlement == Settlement::Unknown {
            return Ok(());
        }
        self.write(&mut |tx| {
            ledger::settle(
                tx,
                checkout_id,
                idempotency_key,
                settlement,
                released_by,
                None,
                now,
            )
        })
    }

    /// Settles the attempt `permit` forwarded (see [`Store::settle`]); a release applies only if
    /// no retry of the same payment was forwarded since.
    pub fn settle_permit(
        &self,
        permit: &Permit,
        settlement: &Settlement,
        now: OffsetDateTime,
    ) -> Result<(), StoreError> {
        if *settlement == Settlement::Unknown {
            return Ok(());
        }
        self.write(&mut |tx| {
            ledger::settle(
                tx,
                &permit.checkout_id,
                &permit.idempotency_key,
                settlement,
                ReleasedBy::Shop,
                Some(permit.forwarded_at),
                now,
            )
        })
    }

    /// An audit record for a decision made outside [`Store::gate`] (precheck refusals, other tools).
    pub fn audit(&self, record: &AuditRecord) -> Result<(), StoreError> {
        self.read(&mut |tx| tx.insert_audit(record))
    }

    /// Settled and in-flight spend per currency over `window` before `now` (the same conservative
    /// hourly reading the gate uses).
    pub fn window_spend(
        &self,
        window: Duration,
        now: OffsetDateTime,
    ) -> Result<BTreeMap<String, WindowSpend>, StoreError> {
        let from_hour = ledger::window_start_hour(window, now);
        self.read(&mut |tx| tx.window_spend(from_hour))
    }

    /// Requests still waiting for a human, oldest first (a request whose approval was used to
    /// forward a payment is no longer pending until the gate blocks it again).
    pub fn pending(&self) -> Result<Vec<PendingRow>, StoreError> {
        self.read(&mut |tx| tx.pending_list())
    }

    /// The requests a human still has to decide (SPEC §7: what `pending` lists): [`Store::pending`]
    /// without those that already carry a valid deny or a valid unused approval, read in one
    /// transaction so a request cannot fall between the two lists.
    pub fn awaiting_decision(
        &self,
        trusted: &TrustedKeys,
        now: OffsetDateTime,
        max_ttl: Duration,
    ) -> Result<Vec<PendingRow>, StoreError> {
        self.read(&mut |tx| {
            let mut waiting = Vec::new();
            for row in tx.pending_list()? {
                let status = approvals::status(tx, &row.request.request_id, trusted, now, max_ttl)?;
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
    pub fn approval_status(
        &self,
        id: &RequestId,
        trusted: &TrustedKeys,
        now: OffsetDateTime,
        max_ttl: Duration,
    ) -> Result<ApprovalStatus, StoreError> {
        self.read(&mut |tx| approvals::status(tx, id, trusted, now, max_ttl))
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

    /// Every reservation whose outcome is not known yet, oldest first.
    pub fn in_flight(&self) -> Result<Vec<InFlight>, StoreError> {
        self.read(&mut |tx| tx.in_flight())
    }

    /// The checkout's reservation if it is in flight: what the gate's hot path asks, by key.
    pub fn in_flight_of(&self, checkout_id: &str) -> Result<Option<InFlight>, StoreError> {
        self.read(&mut |tx| tx.in_flight_of(checkout_id))
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

/// A checkout id as the freeze reason shows it (agent text: bounded, no control characters).
fn shown_id(id: &str) -> String {
    id.chars().filter(|c| !c.is_control()).take(128).collect()
}

fn micros(at: OffsetDateTime) -> i64 {
    i64::try_from(at.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

fn from_micros(us: i64, what: &str) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000)
        .map_err(|_| StoreError::Inconsistent(format!("{what} holds an impossible time ({us} µs)")))
}

//! The shared backend: one PostgreSQL database for every host. The ledger, the hourly buckets,
//! pending requests, the signed approvals themselves, their use and the audit log all live in it,
//! so a request blocked on one host can be approved from another and the approval is honoured on
//! every host, exactly once.
//!
//! **Row locks, not SERIALIZABLE.** Transactions run at READ COMMITTED. A gate transaction first
//! locks its currency's row in `currency_locks` (an upsert, which creates and locks it in one round
//! trip), then reads the buckets and locks the checkout's ledger row (`FOR UPDATE`), calls the pure
//! `decide`, writes the effect and the audit row, and commits. Two hosts deciding in one currency
//! therefore take turns exactly like SQLite's `BEGIN IMMEDIATE` (each statement after the lock sees
//! everything committed before it), while different currencies never wait for each other. Under
//! SERIALIZABLE the same race would instead abort one side at commit (40001) after `decide` ran,
//! and under contention — the split-purchase race is all contention — most of the work would be
//! retried; a lock queue decides each call once. Settlements lock only the checkout's row and
//! change buckets by relative updates, so they never wait for a currency. Deadlocks (40P01) are not
//! expected with this lock order, but a transaction that hits one, or a serialization failure, is
//! retried up to [`ATTEMPTS`] times as a whole (`decide` is pure, so running it again is safe).
//!
//! **Connection loss fails closed.** There is one connection per store, opened with a bounded
//! [`CONNECT_TIMEOUT`]; a lost connection is dropped and the call is refused
//! ([`StoreError::Unavailable`]); the next call connects again. A transaction whose commit was cut
//! off may or may not have committed: the caller refuses the call either way (nothing is
//! forwarded), and a reservation that did commit stays in flight, counting against the window
//! (fail closed) until a later call for that checkout replaces it.
//!
//! The `postgres` crate is synchronous (it drives its own small runtime inside each call), which
//! keeps the proxy free of an async runtime and of `.await` inside the transaction.

mod migrations;
mod passkeys;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use cajaguard_core::approval::{ApprovalDocument, RequestId};
use cajaguard_core::effect::PendingRequest;
use postgres::error::SqlState;
use postgres::{Client, NoTls, Statement, Transaction};
use time::OffsetDateTime;

use super::tx::{ClaimRow, LedgerRow, ReleasedBy, Reservation, State, Tx};
use super::{
    AuditRecord, InFlight, PendingRow, StoreError, WindowSpend, approvals, audit, from_micros,
    micros, pending,
};

/// How long opening a connection may take before the call is refused: an agent is never left
/// hanging on a database that went away. A `connect_timeout` in the URL wins.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a statement waits for another transaction's row lock (a gate in the same currency on
/// another host) before the call is refused; the twin of SQLite's busy timeout.
const LOCK_TIMEOUT_MS: u32 = 5_000;
/// Any one statement; far above what a gate needs, well below an agent's patience.
const STATEMENT_TIMEOUT_MS: u32 = 10_000;
/// Unacknowledged TCP data for this long means the server is gone (a pulled cable sends no RST).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(5);

/// Attempts per transaction when PostgreSQL aborts it with a serialization failure or deadlock.
const ATTEMPTS: u32 = 3;

pub(super) struct Postgres {
    /// Holds the password, if the URL had one: never printed (`tokio_postgres::Config`'s own
    /// `Debug` redacts it too, but nothing here formats it).
    config: postgres::Config,
    /// Where the database is, without user, password or query: for messages and logs.
    target: String,
    conn: Mutex<Option<Conn>>,
}

struct Conn {
    client: Client,
    /// Statements prepared on this connection, by their SQL (a prepared statement survives a
    /// rolled-back transaction; the cache dies with the connection).
    statements: HashMap<&'static str, Statement>,
}

impl Postgres {
    /// Parses the URL, connects, and applies missing migrations. A wrong URL or a database that is
    /// down is reported now, at start, rather than at the first payment.
    pub(super) fn open(url: &str) -> Result<Postgres, StoreError> {
        let redacted = cajaguard_core::policy::redact_url(url);
        // The parser's message could quote a piece of the URL, so it is not repeated.
        let mut config: postgres::Config = url.parse().map_err(|_| {
            StoreError::Config(format!(
                "the store URL ({redacted}) is not a valid PostgreSQL URL: write postgres://user@host:5432/dbname"
            ))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(TCP_USER_TIMEOUT);
        }
        config.keepalives(true);
        if config.get_application_name().is_none() {
            config.application_name("cajaguard");
        }
        let target = describe(&config);
        let store = Postgres {
            config,
            target,
            conn: Mutex::new(None),
        };
        let mut conn = store.connect()?;
        // Every host may start at once. Migrations queue on one advisory lock (bounded by
        // `lock_timeout`, then `Busy`); a transaction the server aborts for a conflict all the
        // same (a deadlock, a serialization failure, two `CREATE ... IF NOT EXISTS` racing in the
        // catalog) is run again, as every other write is, until the lock timeout has really passed.
        let started = std::time::Instant::now();
        loop {
            match migrations::migrate(&mut conn.client, &store.target) {
                Ok(()) => break,
                Err(StoreError::Postgres { source, .. })
                    if migration_conflict(&source)
                        && started.elapsed()
                            < Duration::from_millis(u64::from(LOCK_TIMEOUT_MS)) =>
                {
                    tracing::info!(store = %store.target, "a migration met another host's; trying again");
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(store.classify(e)),
            }
        }
        *store.lock() = Some(conn);
        Ok(store)
    }

    pub(super) fn target(&self) -> &str {
        &self.target
    }

    fn connect(&self) -> Result<Conn, StoreError> {
        let mut client = self
            .config
            .connect(NoTls)
            .map_err(|e| self.unavailable(&e))?;
        client
            .batch_execute(&format!(
                "SET lock_timeout = {LOCK_TIMEOUT_MS}; SET statement_timeout = {STATEMENT_TIMEOUT_MS}; \
                 SET idle_in_transaction_session_timeout = 60000"
            ))
            .map_err(|e| self.unavailable(&e))?;
        Ok(Conn {
            client,
            statements: HashMap::new(),
        })
    }

    fn unavailable(&self, e: &postgres::Error) -> StoreError {
        StoreError::Unavailable {
            store: self.target.clone(),
            why: detail(e),
        }
    }

    /// `f` in one transaction, committed if it returns `Ok`. Reads go through here too: a
    /// transaction gives them one snapshot, and there is one code path for losing a connection.
    pub(super) fn run<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.run_pg(&mut |tx| f(tx))
    }

    fn run_pg<T>(
        &self,
        f: &mut dyn FnMut(&mut PgTx<'_, '_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut slot = self.lock();
        let mut attempt = 1;
        loop {
            match self.attempt(&mut slot, f) {
                Err(StoreError::Postgres { source, .. })
                    if attempt < ATTEMPTS && is_retryable(&source) =>
                {
                    tracing::warn!(store = %self.target, attempt, "transaction aborted ({source}); retrying");
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(5 * u64::from(attempt)));
                }
                Err(e) => {
                    if lost_connection(&e) {
                        *slot = None;
                    }
                    return Err(self.classify(e));
                }
                Ok(value) => return Ok(value),
            }
        }
    }

    fn attempt<T>(
        &self,
        slot: &mut Option<Conn>,
        f: &mut dyn FnMut(&mut PgTx<'_, '_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // A connection that died while idle (the server restarted, an administrator terminated
        // it) is found at BEGIN, before anything was done: reconnect once and go on, so the first
        // call after the database returns is served.
        for fresh in [false, true] {
            if fresh || slot.as_ref().is_none_or(|c| c.client.is_closed()) {
                *slot = None;
                *slot = Some(self.connect()?);
            }
            let Some(Conn { client, statements }) = slot.as_mut() else {
                continue;
            };
            let mut tx = match client.transaction() {
                Ok(tx) => tx,
                Err(e) if !fresh && lost(&e) => continue,
                Err(source) => return Err(self.pg(source)),
            };
            let value = f(&mut PgTx {
                tx: &mut tx,
                statements,
                target: &self.target,
            })?;
            tx.commit().map_err(|e| self.pg(e))?;
            return Ok(value);
        }
        Err(StoreError::Unavailable {
            store: self.target.clone(),
            why: "the connection was lost twice in a row".to_owned(),
        })
    }

    /// Files a signed approval in the `approvals` table; refuses a second copy of one.
    pub(super) fn write_approval(&self, doc: &ApprovalDocument) -> Result<(), StoreError> {
        let (id, nonce) = approvals::check_fileable(doc).map_err(StoreError::Inconsistent)?;
        let text = serde_json::to_string_pretty(doc)
            .map_err(|e| StoreError::Inconsistent(format!("cannot encode the approval: {e}")))?;
        let filed_at = micros(OffsetDateTime::now_utc());
        let inserted = self.run_pg(&mut |tx| {
            tx.execute(
                "INSERT INTO approvals (request_id, nonce, document, filed_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (request_id, nonce) DO NOTHING",
                &[&id.as_str(), &nonce, &text, &filed_at],
            )
        })?;
        if inserted == 0 {
            return Err(StoreError::ApprovalExists {
                request_id: doc.request_id.clone(),
            });
        }
        Ok(())
    }

    pub(super) fn explain_window_query(&self, from_hour: i64) -> Result<Vec<String>, StoreError> {
        self.run_pg(&mut |tx| {
            let rows = tx
                .tx
                .query(&format!("EXPLAIN {WINDOW_SUM}"), &[&"USD", &from_hour])
                .map_err(|e| pg_err(tx.target, e))?;
            rows.iter().map(|r| tx.get::<String>(r, 0)).collect()
        })
    }

    fn pg(&self, source: postgres::Error) -> StoreError {
        pg_err(&self.target, source)
    }

    /// Lock and statement timeouts become [`StoreError::Busy`], a lost connection
    /// [`StoreError::Unavailable`]: both say what happened and that a retry is safe.
    fn classify(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::Postgres { source, .. }
                if matches!(
                    source.code(),
                    Some(&SqlState::LOCK_NOT_AVAILABLE | &SqlState::QUERY_CANCELED)
                ) =>
            {
                StoreError::Busy {
                    store: self.target.clone(),
                }
            }
            StoreError::Postgres { source, .. } if lost(&source) => self.unavailable(&source),
            other => other,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Conn>> {
        // A panic inside a call (say, in `decide`) dropped its `Transaction`, which rolled back.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// `host:port/dbname` (or the socket directory), for messages: never the user's password.
fn describe(config: &postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(host)) => host.clone(),
        Some(postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("postgres://{host}:{port}/{db}")
}

/// What went wrong, for a person: the server's message and SQLSTATE for a database error (the
/// error's own `Display` says only "db error"), else the error and its cause. Neither holds the
/// connection's password: the server never echoes it, and the URL is not part of any error.
pub(super) fn detail(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

fn pg_err(target: &str, source: postgres::Error) -> StoreError {
    StoreError::Postgres {
        target: target.to_owned(),
        source,
    }
}

/// A migration's transaction aborted by another host's at the same moment: safe to run again.
fn migration_conflict(e: &postgres::Error) -> bool {
    is_retryable(e) || matches!(e.code(), Some(&SqlState::UNIQUE_VIOLATION))
}

fn is_retryable(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE | &SqlState::T_R_DEADLOCK_DETECTED)
    )
}

/// Whether the connection is gone (not a statement that failed on a live one).
fn lost(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        // Class 08: connection exception; 57P01-03: the server is shutting down or starting.
        Some(code) => {
            code.code().starts_with("08")
                || matches!(
                    code,
                    &SqlState::ADMIN_SHUTDOWN
                        | &SqlState::CRASH_SHUTDOWN
                        | &SqlState::CANNOT_CONNECT_NOW
                )
        }
        // No SQLSTATE: an I/O error or the like, unless it is a conversion of a value we read.
        None => std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

fn lost_connection(e: &StoreError) -> bool {
    match e {
        StoreError::Unavailable { .. } => true,
        StoreError::Postgres { source, .. } => lost(source),
        _ => false,
    }
}

// ---- the statements ----

/// The gate's window sum: a range scan of the `spend_buckets` primary key, never the ledger.
const WINDOW_SUM: &str = "SELECT COALESCE(SUM(settled + in_flight), 0)::BIGINT FROM spend_buckets WHERE currency = $1 AND hour >= $2";

struct PgTx<'a, 't> {
    tx: &'a mut Transaction<'t>,
    statements: &'a mut HashMap<&'static str, Statement>,
    target: &'a str,
}

type Params<'p> = [&'p (dyn postgres::types::ToSql + Sync)];

impl PgTx<'_, '_> {
    fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.tx.prepare(sql).map_err(|e| pg_err(self.target, e))?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    fn query(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Vec<postgres::Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.tx
            .query(&statement, params)
            .map_err(|e| pg_err(self.target, e))
    }

    fn query_opt(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Option<postgres::Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.tx
            .query_opt(&statement, params)
            .map_err(|e| pg_err(self.target, e))
    }

    fn execute(&mut self, sql: &'static str, params: &Params<'_>) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        self.tx
            .execute(&statement, params)
            .map_err(|e| pg_err(self.target, e))
    }

    /// Ledger rows as [`InFlight`], from a query selecting checkout id, idempotency key,
    /// currency, reserved, reserved at and the agent's profile.
    fn in_flight_rows(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Vec<InFlight>, StoreError> {
        let rows = self.query(sql, params)?;
        rows.iter()
            .map(|row| {
                Ok(InFlight {
                    checkout_id: self.get(row, 0)?,
                    idempotency_key: self.get(row, 1)?,
                    currency: self.get(row, 2)?,
                    total: self.get(row, 3)?,
                    reserved_at: from_micros(self.get(row, 4)?, "a ledger row's reserved_at")?,
                    agent_profile: self.get(row, 5)?,
                })
            })
            .collect()
    }

    fn get<'r, T: postgres::types::FromSql<'r>>(
        &self,
        row: &'r postgres::Row,
        index: usize,
    ) -> Result<T, StoreError> {
        row.try_get(index).map_err(|e| pg_err(self.target, e))
    }
}

impl Tx for PgTx<'_, '_> {
    fn lock_currency(&mut self, currency: &str) -> Result<(), StoreError> {
        // ON CONFLICT DO UPDATE locks the existing row (or the one just inserted) until commit.
        self.execute(
            "INSERT INTO currency_locks (currency) VALUES ($1)
             ON CONFLICT (currency) DO UPDATE SET currency = excluded.currency",
            &[&currency],
        )?;
        Ok(())
    }

    fn bucket_sum(&mut self, currency: &str, from_hour: i64) -> Result<i64, StoreError> {
        let row = self.query_opt(WINDOW_SUM, &[&currency, &from_hour])?;
        match row {
            Some(row) => self.get(&row, 0),
            None => Ok(0),
        }
    }

    fn ledger_row(&mut self, checkout_id: &str) -> Result<Option<LedgerRow>, StoreError> {
        let Some(row) = self.query_opt(
            "SELECT idempotency_key, currency, reserved, charged, state, hour, digest, reserved_at,
                    COALESCE(released_by = 'reconcile', FALSE) FROM ledger
             WHERE checkout_id = $1 FOR UPDATE",
            &[&checkout_id],
        )?
        else {
            return Ok(None);
        };
        let state: String = self.get(&row, 4)?;
        Ok(Some(LedgerRow {
            idempotency_key: self.get(&row, 0)?,
            currency: self.get(&row, 1)?,
            reserved: self.get(&row, 2)?,
            charged: self.get(&row, 3)?,
            state: State::parse(&state)?,
            hour: self.get(&row, 5)?,
            digest: self.get(&row, 6)?,
            reserved_at_us: self.get(&row, 7)?,
            revisit: self.get(&row, 8)?,
        }))
    }

    fn bump(
        &mut self,
        currency: &str,
        hour: i64,
        settled: i64,
        in_flight: i64,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO spend_buckets (currency, hour, settled, in_flight) VALUES ($1, $2, $3, $4)
             ON CONFLICT (currency, hour) DO UPDATE SET settled = spend_buckets.settled + excluded.settled,
                                                        in_flight = spend_buckets.in_flight + excluded.in_flight",
            &[&currency, &hour, &settled, &in_flight],
        )?;
        Ok(())
    }

    fn put_reservation(
        &mut self,
        r: &Reservation<'_>,
        hour: i64,
        at_us: i64,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO ledger
                 (checkout_id, idempotency_key, merchant, currency, reserved, charged, state, hour, reserved_at, settled_at, digest, released_by, agent_profile)
             VALUES ($1, $2, $3, $4, $5, NULL, 'in_flight', $6, $7, NULL, $8,
                     CASE WHEN $9 THEN 'reconcile' END, $10)
             ON CONFLICT (checkout_id) DO UPDATE SET
                 idempotency_key = excluded.idempotency_key, merchant = excluded.merchant,
                 currency = excluded.currency, reserved = excluded.reserved, charged = NULL,
                 state = 'in_flight', hour = excluded.hour, reserved_at = excluded.reserved_at,
                 settled_at = NULL, digest = excluded.digest, released_by = excluded.released_by,
                 agent_profile = excluded.agent_profile",
            &[
                &r.checkout_id,
                &r.idempotency_key,
                &r.merchant,
                &r.currency,
                &r.total,
                &hour,
                &at_us,
                &r.digest,
                &r.revisit,
                &r.agent_profile,
            ],
        )?;
        Ok(())
    }

    fn mark_settled(
        &mut self,
        checkout_id: &str,
        charged: i64,
        currency: &str,
        at_us: i64,
    ) -> Result<(), StoreError> {
        self.execute(
            "UPDATE ledger SET state = 'settled', charged = $2, currency = $3, settled_at = $4 WHERE checkout_id = $1",
            &[&checkout_id, &charged, &currency, &at_us],
        )?;
        Ok(())
    }

    fn mark_released(
        &mut self,
        checkout_id: &str,
        at_us: i64,
        by: ReleasedBy,
    ) -> Result<(), StoreError> {
        self.execute(
            "UPDATE ledger SET state = 'released', settled_at = $2,
                 released_by = CASE WHEN released_by = 'reconcile' THEN 'reconcile' ELSE $3 END
             WHERE checkout_id = $1",
            &[&checkout_id, &at_us, &by.as_str()],
        )?;
        Ok(())
    }

    fn released_by_reconcile(&mut self, from_us: i64) -> Result<Vec<InFlight>, StoreError> {
        self.in_flight_rows(
            "SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile FROM ledger
             WHERE state = 'released' AND released_by = 'reconcile' AND reserved_at >= $1
             ORDER BY reserved_at",
            &[&from_us],
        )
    }

    fn lock_checkout(&mut self, checkout_id: &str) -> Result<(), StoreError> {
        // A row lock cannot lock a claim that does not exist yet; an advisory lock on the id's
        // hash serializes every claim, lease, gate and settlement of one checkout across hosts
        // (another checkout sharing the hash only waits a moment more).
        self.execute(
            "SELECT pg_advisory_xact_lock(1667720039, hashtext($1))",
            &[&checkout_id],
        )?;
        Ok(())
    }

    fn claim_get(&mut self, checkout_id: &str) -> Result<Option<ClaimRow>, StoreError> {
        let Some(row) = self.query_opt(
            "SELECT idempotency_key, claimed_at FROM claims WHERE checkout_id = $1",
            &[&checkout_id],
        )?
        else {
            return Ok(None);
        };
        Ok(Some(ClaimRow {
            idempotency_key: self.get(&row, 0)?,
            claimed_at_us: self.get(&row, 1)?,
        }))
    }

    fn claim_put(
        &mut self,
        checkout_id: &str,
        idempotency_key: &str,
        at_us: i64,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO claims (checkout_id, idempotency_key, claimed_at) VALUES ($1, $2, $3)
             ON CONFLICT (checkout_id) DO UPDATE SET idempotency_key = excluded.idempotency_key,
                                                     claimed_at = excluded.claimed_at",
            &[&checkout_id, &idempotency_key, &at_us],
        )?;
        Ok(())
    }

    fn claim_delete(&mut self, checkout_id: &str) -> Result<(), StoreError> {
        self.execute("DELETE FROM claims WHERE checkout_id = $1", &[&checkout_id])?;
        Ok(())
    }

    fn lease_live(&mut self, checkout_id: &str, now_us: i64) -> Result<bool, StoreError> {
        Ok(self
            .query_opt(
                "SELECT 1 FROM update_leases WHERE checkout_id = $1 AND expires_at > $2 LIMIT 1",
                &[&checkout_id, &now_us],
            )?
            .is_some())
    }

    fn lease_put(
        &mut self,
        lease_id: &str,
        checkout_id: &str,
        expires_us: i64,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO update_leases (lease_id, checkout_id, expires_at) VALUES ($1, $2, $3)",
            &[&lease_id, &checkout_id, &expires_us],
        )?;
        Ok(())
    }

    fn lease_delete(&mut self, lease_id: &str) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM update_leases WHERE lease_id = $1",
            &[&lease_id],
        )?;
        Ok(())
    }

    fn frozen(&mut self) -> Result<Option<(i64, String)>, StoreError> {
        let Some(row) = self.query_opt(
            "SELECT frozen_at, reason FROM payment_freeze WHERE id = 1",
            &[],
        )?
        else {
            return Ok(None);
        };
        Ok(Some((self.get(&row, 0)?, self.get(&row, 1)?)))
    }

    fn freeze_put(&mut self, at_us: i64, reason: &str) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO payment_freeze (id, frozen_at, reason) VALUES (1, $1, $2)
             ON CONFLICT (id) DO UPDATE SET reason = substr(payment_freeze.reason || '; ' || excluded.reason, 1, 2000)",
            &[&at_us, &reason],
        )?;
        Ok(())
    }

    fn freeze_delete(&mut self) -> Result<(), StoreError> {
        self.execute("DELETE FROM payment_freeze WHERE id = 1", &[])?;
        Ok(())
    }

    fn touch_reservation(&mut self, checkout_id: &str, at_us: i64) -> Result<(), StoreError> {
        self.execute(
            "UPDATE ledger SET reserved_at = $2 WHERE checkout_id = $1",
            &[&checkout_id, &at_us],
        )?;
        Ok(())
    }

    fn window_spend(
        &mut self,
        from_hour: i64,
    ) -> Result<BTreeMap<String, WindowSpend>, StoreError> {
        let rows = self.query(
            "SELECT currency, SUM(settled)::BIGINT, SUM(in_flight)::BIGINT FROM spend_buckets
             WHERE hour >= $1 GROUP BY currency",
            &[&from_hour],
        )?;
        let mut out = BTreeMap::new();
        for row in &rows {
            out.insert(
                self.get(row, 0)?,
                WindowSpend {
                    settled: self.get(row, 1)?,
                    in_flight: self.get(row, 2)?,
                },
            );
        }
        Ok(out)
    }

    fn in_flight_of(&mut self, checkout_id: &str) -> Result<Option<InFlight>, StoreError> {
        Ok(self
            .in_flight_rows(
                "SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile FROM ledger
                 WHERE checkout_id = $1 AND state = 'in_flight'",
                &[&checkout_id],
            )?
            .pop())
    }

    fn in_flight(&mut self) -> Result<Vec<InFlight>, StoreError> {
        self.in_flight_rows(
            "SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile FROM ledger
             WHERE state = 'in_flight' ORDER BY reserved_at",
            &[],
        )
    }

    fn approval_documents(&mut self, id: &RequestId) -> Result<Vec<ApprovalDocument>, StoreError> {
        let rows = self.query(
            "SELECT nonce, document FROM approvals WHERE request_id = $1 ORDER BY filed_at, nonce",
            &[&id.as_str()],
        )?;
        let mut docs = Vec::new();
        for row in &rows {
            let nonce: String = self.get(row, 0)?;
            let text: String = self.get(row, 1)?;
            // As with a broken file: skipped, never a reason for the gate to fail or to pass.
            match ApprovalDocument::from_json(&text) {
                Ok(doc) => docs.push(doc),
                Err(e) => tracing::warn!(request_id = id.as_str(), nonce, error = %e,
                    "skipping a stored approval that does not parse"),
            }
        }
        Ok(docs)
    }

    fn is_used(&mut self, nonce: &str) -> Result<bool, StoreError> {
        Ok(self
            .query_opt("SELECT 1 FROM used_approvals WHERE nonce = $1", &[&nonce])?
            .is_some())
    }

    fn insert_used(
        &mut self,
        nonce: &str,
        request_id: &RequestId,
        checkout_id: &str,
        at_us: i64,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO used_approvals (nonce, request_id, checkout_id, used_at) VALUES ($1, $2, $3, $4)",
            &[&nonce, &request_id.as_str(), &checkout_id, &at_us],
        )?;
        Ok(())
    }

    fn upsert_pending(&mut self, p: &PendingRequest, at_us: i64) -> Result<(), StoreError> {
        let handler_ids = pending::handler_ids_json(p)?;
        self.execute(
            "INSERT INTO pending (request_id, digest, merchant, checkout_id, currency, total, handler_ids, state, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $8)
             ON CONFLICT (request_id) DO UPDATE SET
                 digest = excluded.digest, merchant = excluded.merchant, checkout_id = excluded.checkout_id,
                 currency = excluded.currency, total = excluded.total, handler_ids = excluded.handler_ids,
                 state = 'pending', updated_at = excluded.updated_at",
            &[
                &p.request_id.as_str(),
                &p.digest.to_hex(),
                &p.merchant,
                &p.checkout_id,
                &p.currency,
                &p.total,
                &handler_ids,
                &at_us,
            ],
        )?;
        Ok(())
    }

    fn mark_pending_used(&mut self, id: &RequestId) -> Result<(), StoreError> {
        self.execute(
            "UPDATE pending SET state = 'used' WHERE request_id = $1",
            &[&id.as_str()],
        )?;
        Ok(())
    }

    fn pending_list(&mut self) -> Result<Vec<PendingRow>, StoreError> {
        let rows = self.query(
            "SELECT request_id, digest, merchant, checkout_id, currency, total, handler_ids, created_at
             FROM pending WHERE state = 'pending' ORDER BY created_at, request_id",
            &[],
        )?;
        rows.iter()
            .map(|row| pending::decode(self.pending_raw(row)?))
            .collect()
    }

    fn pending_get(&mut self, id: &RequestId) -> Result<Option<PendingRow>, StoreError> {
        let row = self.query_opt(
            "SELECT request_id, digest, merchant, checkout_id, currency, total, handler_ids, created_at
             FROM pending WHERE request_id = $1",
            &[&id.as_str()],
        )?;
        row.map(|row| pending::decode(self.pending_raw(&row)?))
            .transpose()
    }

    fn insert_audit(&mut self, r: &AuditRecord) -> Result<(), StoreError> {
        let (at, latency_us) = audit::columns(r)?;
        self.execute(
            "INSERT INTO audit (at, at_us, tool, verdict, reason, merchant, currency, total, request_id,
                                idempotency_key, checkout_id, latency_us, note)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            &[
                &at,
                &micros(r.at),
                &r.tool,
                &r.verdict,
                &r.reason,
                &r.merchant,
                &r.currency,
                &r.total,
                &r.request_id,
                &r.idempotency_key,
                &r.checkout_id,
                &latency_us,
                &r.note,
            ],
        )?;
        Ok(())
    }
}

impl PgTx<'_, '_> {
    fn pending_raw(&self, row: &postgres::Row) -> Result<pending::Raw, StoreError> {
        Ok((
            self.get(row, 0)?,
            self.get(row, 1)?,
            self.get(row, 2)?,
            self.get(row, 3)?,
            self.get(row, 4)?,
            self.get(row, 5)?,
            self.get(row, 6)?,
            self.get(row, 7)?,
        ))
    }
}

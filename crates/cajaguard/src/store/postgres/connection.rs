//! The connections to the shared store: a small pool, each connection opened with bounded
//! timeouts and driven on a runtime of its own, migrated at start; a transaction is retried as a
//! whole after a serialization failure or deadlock, and a connection that is lost is dropped (the
//! call refused) and replaced by the next call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cajaguard_core::approval::ApprovalDocument;
use std::collections::HashMap;
use time::OffsetDateTime;
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use super::migrations;
use super::statements::EXPLAIN_WINDOW_SUM;
use super::transaction::{Access, PgTx, Session};
use crate::store::tx::Tx;
use crate::store::{StoreError, approvals, micros};

/// How long opening a connection may take before the call is refused: an agent is never left
/// hanging on a database that went away. A `connect_timeout` in the URL wins.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a statement waits for another transaction's lock (a gate in the same currency on
/// another host, a row another transaction writes) before the call is refused; the twin of SQLite's busy timeout. A call waiting
/// for a free connection of the pool waits as long.
const LOCK_TIMEOUT_MS: u32 = 5_000;
/// Any one statement; far above what a gate needs, well below an agent's patience.
const STATEMENT_TIMEOUT_MS: u32 = 10_000;
/// Unacknowledged TCP data for this long means the server is gone (a pulled cable sends no RST).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(5);

/// Attempts per transaction when PostgreSQL aborts it with a serialization failure or deadlock.
const ATTEMPTS: u32 = 3;

/// Connections one store keeps at most. A process serves one call per agent session at a time,
/// and its gates in one currency queue on that currency's row lock anyway: more connections than
/// this would only wait there, holding server memory. With fewer, a claim or a settlement would
/// wait behind another payment's gate that waits for the lock.
pub(super) const POOL_SIZE: usize = 8;

pub(in crate::store) struct Postgres {
    /// Holds the password, if the URL had one: never printed (`tokio_postgres::Config`'s own
    /// `Debug` redacts it too, but nothing here formats it).
    config: tokio_postgres::Config,
    /// Where the database is, without user, password or query: for messages and logs.
    target: String,
    pool: Mutex<Pool>,
    /// Signalled when a connection is given back or dropped.
    returned: Condvar,
    /// Commits that waited for their flush (tests read it: which writes pay for the disk).
    flushed_commits: AtomicU64,
}

struct Pool {
    idle: Vec<Session>,
    /// Connections open, idle or in use (and ones being opened).
    open: usize,
}

impl Postgres {
    /// Parses the URL, connects, and applies missing migrations. A wrong URL or a database that is
    /// down is reported now, at start, rather than at the first payment.
    pub(in crate::store) fn open(url: &str) -> Result<Postgres, StoreError> {
        let redacted = cajaguard_core::policy::redact_url(url);
        // The parser's message could quote a piece of the URL, so it is not repeated.
        let mut config: tokio_postgres::Config = url.parse().map_err(|_| {
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
            pool: Mutex::new(Pool {
                idle: Vec::new(),
                open: 1,
            }),
            returned: Condvar::new(),
            flushed_commits: AtomicU64::new(0),
        };
        let mut session = store.connect()?;
        // Every host may start at once. Migrations queue on one advisory lock (bounded by
        // `lock_timeout`, then `Busy`); a transaction the server aborts for a conflict all the
        // same (a deadlock, a serialization failure, two `CREATE ... IF NOT EXISTS` racing in the
        // catalog) is run again, as every other write is, until the lock timeout has really passed.
        let started = Instant::now();
        loop {
            let Session {
                client, runtime, ..
            } = &mut session;
            match runtime.block_on(migrations::migrate(client, &store.target)) {
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
        store.lock().idle.push(session);
        Ok(store)
    }

    pub(in crate::store) fn target(&self) -> &str {
        &self.target
    }

    fn connect(&self) -> Result<Session, StoreError> {
        // The socket is driven by this runtime whenever a call blocks on it, on the caller's
        // thread, as the synchronous `postgres` crate does: no thread of its own, no hop.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable {
                store: self.target.clone(),
                why: format!("cannot start the connection's runtime: {e}"),
            })?;
        let (client, connection) = runtime
            .block_on(self.config.connect(NoTls))
            .map_err(|e| self.unavailable(&e))?;
        let target = self.target.clone();
        runtime.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(store = %target, "the connection ended: {}", detail(&e));
            }
        });
        // Generic plans: every statement of the store is a primary-key lookup or range whose
        // plan does not depend on its values, and a custom plan is planned again on every
        // execution: 0.4 ms of the gate's 2 ms went to planning its reads (server statement log).
        runtime
            .block_on(client.batch_execute(&format!(
                "SET lock_timeout = {LOCK_TIMEOUT_MS}; SET statement_timeout = {STATEMENT_TIMEOUT_MS}; \
                 SET idle_in_transaction_session_timeout = 60000; SET plan_cache_mode = force_generic_plan"
            )))
            .map_err(|e| self.unavailable(&e))?;
        Ok(Session {
            client,
            runtime,
            statements: HashMap::new(),
        })
    }

    fn unavailable(&self, e: &tokio_postgres::Error) -> StoreError {
        StoreError::Unavailable {
            store: self.target.clone(),
            why: detail(e),
        }
    }

    /// An idle connection, or a new one while fewer than [`POOL_SIZE`] are open; else waits for
    /// one to come back, as long as a row lock may be waited for. `fresh`: never an idle one (the
    /// last one was found dead, and the others may be too).
    fn take(&self, fresh: bool) -> Result<Session, StoreError> {
        let deadline = Instant::now() + Duration::from_millis(u64::from(LOCK_TIMEOUT_MS));
        let mut pool = self.lock();
        loop {
            if !fresh && let Some(session) = pool.idle.pop() {
                if !session.client.is_closed() {
                    return Ok(session);
                }
                pool.open -= 1;
                continue;
            }
            if fresh && pool.open >= POOL_SIZE && pool.idle.pop().is_some() {
                // Make room for the fresh one.
                pool.open -= 1;
            }
            if pool.open < POOL_SIZE {
                pool.open += 1;
                drop(pool);
                return self.connect().inspect_err(|_| self.discard());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StoreError::Busy {
                    store: self.target.clone(),
                });
            }
            pool = self
                .returned
                .wait_timeout(pool, deadline - now)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }

    fn give_back(&self, session: Session) {
        self.lock().idle.push(session);
        self.returned.notify_one();
    }

    /// A connection that was taken is gone (lost, or never opened).
    fn discard(&self) {
        let mut pool = self.lock();
        pool.open = pool.open.saturating_sub(1);
        drop(pool);
        self.returned.notify_one();
    }

    /// How many commits so far waited for their flush.
    #[cfg(test)]
    pub(in crate::store) fn flushed_commits(&self) -> u64 {
        self.flushed_commits.load(Ordering::Relaxed)
    }

    /// `f` in one transaction, committed (and flushed) if it returns `Ok`.
    pub(in crate::store) fn run<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.run_as(Access::Write, &mut |tx| f(tx))
    }

    /// `f` in one `READ ONLY` transaction (a write in it is an error), whose commit waits for
    /// no flush: what a read returns, nobody acts on without a write of their own (a permit,
    /// an approval, a refusal's record), and that write's flush covers all it read. The same
    /// code path for losing a connection as the writes.
    pub(in crate::store) fn read<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.run_as(Access::Read, &mut |tx| f(tx))
    }

    /// [`Postgres::run`], its commit not waiting for the flush (see [`Access::WriteUnflushed`]).
    pub(in crate::store) fn run_unflushed<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.run_as(Access::WriteUnflushed, &mut |tx| f(tx))
    }

    pub(super) fn run_pg<T>(
        &self,
        f: &mut dyn FnMut(&mut PgTx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.run_as(Access::Write, f)
    }

    pub(super) fn run_as<T>(
        &self,
        access: Access,
        f: &mut dyn FnMut(&mut PgTx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut attempt = 1;
        loop {
            match self.attempt(access, f) {
                Err(StoreError::Postgres { source, .. })
                    if attempt < ATTEMPTS && is_retryable(&source) =>
                {
                    tracing::warn!(store = %self.target, attempt, "transaction aborted ({source}); retrying");
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(5 * u64::from(attempt)));
                }
                Err(e) => return Err(self.classify(e)),
                Ok(value) => return Ok(value),
            }
        }
    }

    fn attempt<T>(
        &self,
        access: Access,
        f: &mut dyn FnMut(&mut PgTx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // A connection that died while idle (the server restarted, an administrator terminated
        // it) shows at the first statement, before `COMMIT` was sent, so nothing was applied: the
        // transaction runs again once, on a new connection, and the first call after the
        // database returns is served.
        for fresh in [false, true] {
            let mut session = self.take(fresh)?;
            let mut tx = PgTx::begin(&mut session, &self.target, access);
            let result = f(&mut tx);
            let result = match result {
                Ok(value) => {
                    let flushed = tx.flushes_on_commit();
                    let committed = tx.commit();
                    if flushed && committed.is_ok() {
                        self.flushed_commits.fetch_add(1, Ordering::Relaxed);
                    }
                    committed.map(|()| value)
                }
                Err(e) => {
                    let lost_early = lost_connection(&e) && !tx.commit_sent();
                    if lost_connection(&e) || tx.rollback().is_err() {
                        drop(session);
                        self.discard();
                        if lost_early && !fresh {
                            continue;
                        }
                        return Err(e);
                    }
                    Err(e)
                }
            };
            match result {
                Err(e) if lost_connection(&e) => {
                    // The outcome of a cut-off COMMIT is unknown: refused either way (fail closed).
                    drop(session);
                    self.discard();
                    return Err(e);
                }
                other => {
                    self.give_back(session);
                    return other;
                }
            }
        }
        Err(StoreError::Unavailable {
            store: self.target.clone(),
            why: "the connection was lost twice in a row".to_owned(),
        })
    }

    /// Files a signed approval in the `approvals` table; refuses a second copy of one.
    pub(in crate::store) fn write_approval(
        &self,
        doc: &ApprovalDocument,
    ) -> Result<(), StoreError> {
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

    pub(in crate::store) fn explain_window_query(
        &self,
        from_hour: i64,
    ) -> Result<Vec<String>, StoreError> {
        self.run_pg(&mut |tx| {
            let rows = tx.query(EXPLAIN_WINDOW_SUM, &[&"USD", &from_hour])?;
            rows.iter().map(|r| tx.get::<String>(r, 0)).collect()
        })
    }

    /// The database's own clock now (`clock_timestamp()`, not the transaction's start), in µs.
    pub(in crate::store) fn database_now_us(&self) -> Result<i64, StoreError> {
        self.run_pg(&mut |tx| {
            let row = tx
                .query_opt(
                    "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
                    &[],
                )?
                .ok_or_else(|| {
                    StoreError::Inconsistent("the clock query returned no row".into())
                })?;
            tx.get::<i64>(&row, 0)
        })
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

    fn lock(&self) -> MutexGuard<'_, Pool> {
        // A panic inside a call (say, in `decide`) dropped its `Transaction`, which rolled back.
        self.pool
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// `host:port/dbname` (or the socket directory), for messages: never the user's password.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
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
pub(in crate::store) fn detail(e: &tokio_postgres::Error) -> String {
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

pub(super) fn pg_err(target: &str, source: tokio_postgres::Error) -> StoreError {
    StoreError::Postgres {
        target: target.to_owned(),
        source,
    }
}

/// A migration's transaction aborted by another host's at the same moment: safe to run again.
fn migration_conflict(e: &tokio_postgres::Error) -> bool {
    is_retryable(e) || matches!(e.code(), Some(&SqlState::UNIQUE_VIOLATION))
}

fn is_retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE | &SqlState::T_R_DEADLOCK_DETECTED)
    )
}

/// Whether the connection is gone (not a statement that failed on a live one).
fn lost(e: &tokio_postgres::Error) -> bool {
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

//! The connection to the shared store: opened with bounded timeouts, migrated at start, one
//! transaction at a time, retried as a whole after a serialization failure or deadlock, and
//! dropped (the call refused) when it is lost.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use cajaguard_core::approval::ApprovalDocument;
use postgres::error::SqlState;
use postgres::{Client, NoTls, Statement};
use std::collections::HashMap;
use time::OffsetDateTime;

use super::migrations;
use super::statements::WINDOW_SUM;
use super::transaction::PgTx;
use crate::store::tx::Tx;
use crate::store::{StoreError, approvals, micros};

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

pub(in crate::store) struct Postgres {
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
    pub(in crate::store) fn open(url: &str) -> Result<Postgres, StoreError> {
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

    pub(in crate::store) fn target(&self) -> &str {
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
    pub(in crate::store) fn run<T>(
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
            let rows = tx
                .tx
                .query(&format!("EXPLAIN {WINDOW_SUM}"), &[&"USD", &from_hour])
                .map_err(|e| pg_err(tx.target, e))?;
            rows.iter().map(|r| tx.get::<String>(r, 0)).collect()
        })
    }

    /// The database's own clock now (`clock_timestamp()`, not the transaction's start), in µs.
    pub(in crate::store) fn database_now_us(&self) -> Result<i64, StoreError> {
        self.run_pg(&mut |tx| {
            let row = tx
                .tx
                .query_one(
                    "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
                    &[],
                )
                .map_err(|e| pg_err(tx.target, e))?;
            tx.get::<i64>(&row, 0)
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
pub(in crate::store) fn detail(e: &postgres::Error) -> String {
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

pub(super) fn pg_err(target: &str, source: postgres::Error) -> StoreError {
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

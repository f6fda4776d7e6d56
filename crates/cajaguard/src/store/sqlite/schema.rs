//! Opening a home safely and the SQLite database's schema (versioned by `PRAGMA user_version`, the
//! SQLite-native equivalent of PostgreSQL's `schema_migrations`; applied under `BEGIN IMMEDIATE`, so
//! two processes opening a fresh home at once cannot both create the tables).

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use super::approval_files::APPROVALS_DIR;
use crate::store::StoreError;

/// The database file inside the home.
pub const DB_FILE: &str = "cajaguard.db";

/// How long a call waits for another process's write transaction before it gives up and the call is
/// refused. Gate transactions last milliseconds, so 5 s means something is wrong, and a refusal is
/// the safe answer.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// SQLite's busy handler: `true` to try again. Sleeps 25 µs doubling up to 1 ms, and gives up
/// after about [`BUSY_TIMEOUT`] in all (then the call is refused: fail closed).
fn busy_wait(attempt: i32) -> bool {
    const FIRST: Duration = Duration::from_micros(25);
    const LONGEST: Duration = Duration::from_millis(1);
    let attempt = u32::try_from(attempt).unwrap_or(0);
    // The ramp (25 µs .. 1 ms) takes 6 tries and about 1.6 ms; after it, one try per millisecond.
    let ramp: u32 = 6;
    let tries_after_ramp = u32::try_from(BUSY_TIMEOUT.as_millis()).unwrap_or(u32::MAX);
    if attempt >= ramp.saturating_add(tries_after_ramp) {
        return false;
    }
    std::thread::sleep(FIRST.saturating_mul(1 << attempt.min(ramp)).min(LONGEST));
    true
}

const SCHEMA_VERSION: i64 = 8;

// `spend_buckets` exists so the window sum costs the same with 10^3 or 10^6 ledger rows: it is kept
// per currency and hour, in the same transactions that change the ledger, and the gate reads only
// the hours inside the window. `settled + in_flight` of a bucket is the spend it counts.
//
// A ledger row counts its spend in the bucket of the hour it was reserved (`hour`), whatever happens
// later: settling or releasing adjusts that same bucket, so the two never drift apart. `in_flight`
// counts amounts at their reservation, which a completion exactly as reserved leaves there; the
// split a status shows comes from the ledger's rows in flight (`store/ledger.rs`).
const SCHEMA: &str = "
CREATE TABLE ledger (
    checkout_id     TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL,
    merchant        TEXT NOT NULL,
    currency        TEXT NOT NULL,
    reserved        INTEGER NOT NULL,
    charged         INTEGER,
    state           TEXT NOT NULL CHECK (state IN ('in_flight', 'settled', 'released')),
    hour            INTEGER NOT NULL,
    reserved_at     INTEGER NOT NULL,
    settled_at      INTEGER
);
CREATE INDEX ledger_in_flight ON ledger (reserved_at) WHERE state = 'in_flight';

CREATE TABLE spend_buckets (
    currency  TEXT NOT NULL,
    hour      INTEGER NOT NULL,
    settled   INTEGER NOT NULL DEFAULT 0,
    in_flight INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (currency, hour)
) WITHOUT ROWID;

CREATE TABLE used_approvals (
    nonce       TEXT PRIMARY KEY,
    request_id  TEXT NOT NULL,
    checkout_id TEXT NOT NULL,
    used_at     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX used_approvals_request ON used_approvals (request_id);

CREATE TABLE pending (
    request_id  TEXT PRIMARY KEY,
    digest      TEXT NOT NULL,
    merchant    TEXT NOT NULL,
    checkout_id TEXT NOT NULL,
    currency    TEXT NOT NULL,
    total       INTEGER NOT NULL,
    handler_ids TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'used')),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE TABLE audit (
    id              INTEGER PRIMARY KEY,
    at              TEXT NOT NULL,
    at_us           INTEGER NOT NULL,
    tool            TEXT NOT NULL,
    verdict         TEXT NOT NULL,
    reason          TEXT NOT NULL,
    merchant        TEXT,
    currency        TEXT,
    total           INTEGER,
    request_id      TEXT,
    idempotency_key TEXT,
    checkout_id     TEXT,
    latency_us      INTEGER NOT NULL,
    note            TEXT
);
";

/// Version 2: claims, the reserved attempt's digest, who released, the freeze (the same as
/// PostgreSQL's `0002_claims_freeze.sql`, which says what each is for).
const SCHEMA_V2: &str = "
ALTER TABLE ledger ADD COLUMN digest TEXT;
ALTER TABLE ledger ADD COLUMN released_by TEXT;
ALTER TABLE ledger ADD COLUMN agent_profile TEXT;
CREATE TABLE claims (
    checkout_id     TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL,
    claimed_at      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE update_leases (
    lease_id    TEXT PRIMARY KEY,
    checkout_id TEXT NOT NULL,
    expires_at  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX update_leases_checkout ON update_leases (checkout_id);
CREATE TABLE payment_freeze (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    frozen_at INTEGER NOT NULL,
    reason    TEXT NOT NULL
);
";

/// Version 5: agents of the service (SPEC §13), the same as PostgreSQL's `0005_agents.sql`, which
/// says what each is for.
const SCHEMA_V5: &str = "
ALTER TABLE ledger ADD COLUMN agent TEXT;
ALTER TABLE pending ADD COLUMN agent TEXT;
ALTER TABLE audit ADD COLUMN agent TEXT;
CREATE TABLE agent_tokens (
    name         TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL
);
";

/// Version 6: which agent of the service each checkout, cart and order was made for, the same
/// as PostgreSQL's `0008_made_for_agent.sql`, which says why.
const SCHEMA_V6: &str = "
CREATE TABLE made_for_agent (
    object     TEXT NOT NULL CHECK (object IN ('checkout', 'cart', 'order')),
    id         TEXT NOT NULL,
    agent      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (object, id)
) WITHOUT ROWID;
";

/// Version 7: the requests waiting on each checkout, the same as PostgreSQL's
/// `0009_pending_by_checkout.sql`, which says why.
const SCHEMA_V7: &str = "
CREATE INDEX pending_waiting_by_checkout ON pending (checkout_id) WHERE state = 'pending';
";

/// Version 8: each claim's token (the same as PostgreSQL's `0010_claim_token.sql`, which says
/// what it is for).
const SCHEMA_V8: &str = "
ALTER TABLE claims ADD COLUMN token INTEGER NOT NULL DEFAULT 0;
";

pub(crate) fn open(home: &Path) -> Result<Connection, StoreError> {
    prepare_home(home)?;
    let db = home.join(DB_FILE);
    for path in [
        db.clone(),
        home.join(format!("{DB_FILE}-wal")),
        home.join(format!("{DB_FILE}-shm")),
    ] {
        refuse_symlink(&path)?;
    }
    create_private_file(&db)?;

    // NOFOLLOW: the database must be the file in the home, not wherever a link points.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    // Opening a fresh home races every other process opening it: the switch to WAL needs the
    // database to itself, and SQLite answers BUSY at once (without its busy handler) to a
    // connection that finds another mid-switch or mid-recovery. So the whole opening is retried,
    // like any write, until BUSY_TIMEOUT has really passed; only then is it `Busy`.
    let started = Instant::now();
    let mut attempt: i32 = 0;
    let conn = loop {
        match configure(&db, flags) {
            Ok(conn) => break conn,
            Err(e) if retry_open(&e) && started.elapsed() < BUSY_TIMEOUT => {
                attempt = attempt.saturating_add(1);
                // The busy handler's own ramp: short sleeps, a lock held for a millisecond.
                busy_wait(attempt.min(6));
            }
            Err(e) => return Err(classify(e, home)),
        }
    };
    for path in [
        home.join(format!("{DB_FILE}-wal")),
        home.join(format!("{DB_FILE}-shm")),
    ] {
        make_private(&path)?;
    }
    Ok(conn)
}

/// Failures of opening that another process opening the same home at that moment explains.
fn retry_open(e: &StoreError) -> bool {
    match e {
        StoreError::Database(e) => matches!(
            e.sqlite_error_code(),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
        ),
        // WAL refused while another connection held the database: asked again, it switches.
        StoreError::Unsafe { why, .. } => why.starts_with(WAL_REFUSED),
        _ => false,
    }
}

const WAL_REFUSED: &str = "SQLite refused WAL mode";

/// Opens the database file and sets it up: WAL, durability, schema. Fails as a whole, to be retried.
fn configure(db: &Path, flags: OpenFlags) -> Result<Connection, StoreError> {
    (|| {
        let mut conn = Connection::open_with_flags(db, flags)?;
        // Not `busy_timeout`: SQLite's own handler sleeps 1, 2, 5, 10... up to 100 ms between tries,
        // while a gate holds the write lock for well under a millisecond; short sleeps keep the
        // processes sharing a home from idling behind a lock that is long free.
        conn.busy_handler(Some(busy_wait))?;
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Unsafe {
                path: db.to_path_buf(),
                why: format!("{WAL_REFUSED} (got {mode}); use a home on a local file system"),
            });
        }
        // Durability. WAL with NORMAL survives a crash of the process (kill -9): a commit is in the
        // WAL in the OS's page cache before `COMMIT` returns. Power loss or a kernel crash can roll
        // back the last commits. The ones that matter are those something acts on at once: the
        // reservation or used approval that precedes a payment, a freeze, an audit checkpoint an
        // approver keeps. Their transactions say so (`Tx::durable_on_commit`) and the WAL is synced
        // after their commit (`Sqlite::sync_wal`); a gate's, before the payment is forwarded.
        // Everything else (refusals, settlements, audit rows of refusals) may be lost by a power
        // cut without passing a cap: a lost settlement leaves its reservation counted until
        // reconciled, a lost refusal is asked again. The sync happens after the write lock is
        // released, so the processes sharing a home sync side by side instead of queueing behind
        // each other's fsync.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // Off: a database file a human copied in cannot run code through triggers or views.
        conn.pragma_update(None, "trusted_schema", "OFF")?;
        migrate(&mut conn, db)?;
        Ok(conn)
    })()
}

fn migrate(conn: &mut Connection, db: &Path) -> Result<(), StoreError> {
    // IMMEDIATE: two processes opening a fresh home at once must not both create the tables.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
    match version {
        0..SCHEMA_VERSION => {
            if version < 1 {
                tx.execute_batch(SCHEMA)?;
            }
            if version < 2 {
                tx.execute_batch(SCHEMA_V2)?;
            }
            if version < 3 {
                tx.execute_batch(super::passkeys::SCHEMA_V3)?;
            }
            if version < 4 {
                tx.execute_batch(super::log::SCHEMA_V4)?;
            }
            if version < 5 {
                tx.execute_batch(SCHEMA_V5)?;
            }
            if version < 6 {
                tx.execute_batch(SCHEMA_V6)?;
            }
            if version < 7 {
                tx.execute_batch(SCHEMA_V7)?;
            }
            tx.execute_batch(SCHEMA_V8)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        SCHEMA_VERSION => {}
        found => {
            return Err(StoreError::Incompatible {
                store: db.display().to_string(),
                found,
                known: SCHEMA_VERSION,
            });
        }
    }
    tx.commit()?;
    Ok(())
}

/// Creates the home (0700) and `approvals/` if missing, and refuses a home others can write into.
fn prepare_home(home: &Path) -> Result<(), StoreError> {
    let open_err = |source| StoreError::Open {
        path: home.to_path_buf(),
        source,
    };
    match fs::metadata(home) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(home)
                .map_err(open_err)?;
        }
        Err(e) => return Err(open_err(e)),
    }
    check_dir(home, home)?;

    let approvals = home.join(APPROVALS_DIR);
    refuse_symlink(&approvals)?;
    match DirBuilder::new().mode(0o700).create(&approvals) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(StoreError::Write {
                path: approvals,
                source,
            });
        }
    }
    check_dir(&approvals, home)
}

fn check_dir(dir: &Path, home: &Path) -> Result<(), StoreError> {
    let meta = fs::metadata(dir).map_err(|source| StoreError::Open {
        path: dir.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(StoreError::Unsafe {
            path: home.to_path_buf(),
            why: format!("{} is not a directory", dir.display()),
        });
    }
    let mode = meta.permissions().mode();
    if mode & 0o002 != 0 {
        // Anyone could replace the database or plant files: nothing read from it could be trusted.
        return Err(StoreError::Unsafe {
            path: home.to_path_buf(),
            why: format!(
                "{} is writable by every user (mode {:o}); run `chmod 700 {}`",
                dir.display(),
                mode & 0o7777,
                dir.display()
            ),
        });
    }
    if mode & 0o020 != 0 {
        tracing::warn!(dir = %dir.display(), "the CajaGuard home is group-writable; consider `chmod 700`");
    }
    Ok(())
}

fn refuse_symlink(path: &Path) -> Result<(), StoreError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(StoreError::Unsafe {
            path: path.to_path_buf(),
            why: "it is a symbolic link; CajaGuard never follows links out of its home: replace it with the real file or directory".to_owned(),
        }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StoreError::Open { path: path.to_path_buf(), source }),
    }
}

/// Creates `path` 0600 if missing (SQLite gives its WAL and shm files the database's mode), and
/// narrows an existing one to 0600.
fn create_private_file(path: &Path) -> Result<(), StoreError> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => make_private(path),
        Err(source) => Err(StoreError::Write {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn make_private(path: &Path) -> Result<(), StoreError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(StoreError::Open {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if meta.file_type().is_symlink() {
        return refuse_symlink(path);
    }
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(file = %path.display(), "store file was readable by others; narrowing it to 0600");
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(|source| {
            StoreError::Write {
                path: path.to_path_buf(),
                source,
            }
        })?;
    }
    Ok(())
}

/// Turns SQLite's "busy"/"locked" into [`StoreError::Busy`], which tells the caller what to do.
pub(crate) fn classify(err: StoreError, home: &Path) -> StoreError {
    match err {
        StoreError::Database(e)
            if matches!(
                e.sqlite_error_code(),
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
            ) =>
        {
            StoreError::Busy {
                store: home.join(DB_FILE).display().to_string(),
            }
        }
        other => other,
    }
}

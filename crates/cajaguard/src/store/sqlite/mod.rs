//! The embedded backend: a SQLite database (WAL) in `home`, approvals as signed JSON files in
//! `<home>/approvals/`. Write transactions are `BEGIN IMMEDIATE`: they take the database's write
//! lock first, so processes sharing the home decide one at a time (waiting up to
//! [`schema::BUSY_TIMEOUT`]). `statements.rs` says each [`Tx`] statement in SQLite's SQL.

mod agents;
pub(super) mod approval_files;
mod log;
mod passkeys;
pub(super) mod schema;
mod statements;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use cajaguard_core::approval::ApprovalDocument;
use rusqlite::{Connection, TransactionBehavior, params};

use self::statements::{SqliteTx, WINDOW_SUM};
use super::StoreError;
use super::tx::Tx;

pub(super) struct Sqlite {
    home: PathBuf,
    conn: Mutex<Connection>,
    /// The WAL, opened once for [`Sqlite::sync_wal`]. SQLite removes it only when the last
    /// connection closes, and ours stays open as long as this handle, so it is the live file.
    wal: Mutex<Option<std::fs::File>>,
}

impl Sqlite {
    pub(super) fn open(home: &Path) -> Result<Sqlite, StoreError> {
        Ok(Sqlite {
            home: home.to_path_buf(),
            conn: Mutex::new(schema::open(home)?),
            wal: Mutex::new(None),
        })
    }

    pub(super) fn approvals_dir(&self) -> PathBuf {
        self.home.join(approval_files::APPROVALS_DIR)
    }

    /// `f` inside one `BEGIN IMMEDIATE` transaction, committed if it returns `Ok`.
    pub(super) fn write<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let dir = self.approvals_dir();
        let mut conn = self.lock();
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let value = f(&mut SqliteTx {
                conn: &tx,
                approvals_dir: &dir,
            })?;
            tx.commit()?;
            Ok(value)
        })();
        result.map_err(|e| schema::classify(e, &self.home))
    }

    /// `f` on the connection, outside an explicit transaction (reads and single inserts).
    pub(super) fn read<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let dir = self.approvals_dir();
        let conn = self.lock();
        f(&mut SqliteTx {
            conn: &conn,
            approvals_dir: &dir,
        })
        .map_err(|e| schema::classify(e, &self.home))
    }

    /// Makes every commit so far durable by syncing the WAL, as `synchronous=FULL` would have at
    /// each commit (see `schema::open`). A failure is an error: the caller must not forward.
    pub(super) fn sync_wal(&self) -> Result<(), StoreError> {
        let path = self.home.join(format!("{}-wal", schema::DB_FILE));
        let mut wal = self.wal.lock().unwrap_or_else(|p| p.into_inner());
        let synced = match wal.as_ref() {
            Some(file) => file.sync_data(),
            None => std::fs::File::open(&path).and_then(|file| {
                let synced = file.sync_data();
                *wal = Some(file);
                synced
            }),
        };
        synced.map_err(|source| StoreError::Write { path, source })
    }

    pub(super) fn write_approval(&self, doc: &ApprovalDocument) -> Result<PathBuf, StoreError> {
        approval_files::write(&self.approvals_dir(), doc)
    }

    pub(super) fn explain_window_query(&self, from_hour: i64) -> Result<Vec<String>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {WINDOW_SUM}"))?;
        let rows = stmt.query_map(params!["USD", from_hour], |r| r.get::<_, String>(3))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic inside a call (say, in `decide`) dropped its `Transaction`, which rolled back: the
        // connection is clean, so a poisoned lock is safe to take over.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

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
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// How many times [`Sqlite::sync_wal`] synced the WAL (tests count what waited for the disk).
    wal_syncs: AtomicU64,
    /// Set once a sync failed, for good: Linux reports a write-back error once, and the pages
    /// it lost may be marked clean, so a later sync that succeeds proves nothing (PostgreSQL
    /// treats a failed fsync as fatal for the same reason). Every later sync fails.
    sync_failed: AtomicBool,
    /// Tests: the next sync fails as a full or failing disk would make it.
    #[cfg(test)]
    fail_next_sync: AtomicBool,
}

/// Who syncs the WAL after a commit whose transaction asked for it (`Tx::durable_on_commit`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SyncWhenAsked {
    /// [`Sqlite::write`], right after the commit and outside the connection's lock.
    Here,
    /// The gate, once per turn and only for a turn that forwards (`Store::made_durable`): a sync
    /// that fails after a turn committed must refuse its forwards, not run the turn again.
    ByTheGate,
}

impl Sqlite {
    pub(super) fn open(home: &Path) -> Result<Sqlite, StoreError> {
        Ok(Sqlite {
            home: home.to_path_buf(),
            conn: Mutex::new(schema::open(home)?),
            wal: Mutex::new(None),
            wal_syncs: AtomicU64::new(0),
            sync_failed: AtomicBool::new(false),
            #[cfg(test)]
            fail_next_sync: AtomicBool::new(false),
        })
    }

    pub(super) fn approvals_dir(&self) -> PathBuf {
        self.home.join(approval_files::APPROVALS_DIR)
    }

    /// `f` inside one `BEGIN IMMEDIATE` transaction, committed if it returns `Ok`; then, if `f`
    /// asked for it and `sync` says so, the WAL synced, so the commit survives a power cut.
    pub(super) fn write<T>(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
        sync: SyncWhenAsked,
    ) -> Result<T, StoreError> {
        let dir = self.approvals_dir();
        let mut conn = self.lock();
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut statements = SqliteTx {
                conn: &tx,
                approvals_dir: &dir,
                durable: false,
            };
            let value = f(&mut statements)?;
            let durable = statements.durable;
            tx.commit()?;
            Ok((value, durable))
        })();
        drop(conn);
        let (value, durable) = result.map_err(|e| schema::classify(e, &self.home))?;
        // Outside the connection's lock: other writers of this process go on meanwhile.
        if durable && sync == SyncWhenAsked::Here {
            self.sync_wal()?;
        }
        Ok(value)
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
            durable: false,
        })
        .map_err(|e| schema::classify(e, &self.home))
    }

    /// Makes every commit so far durable by syncing the WAL, as `synchronous=FULL` would have at
    /// each commit (see `schema::open`). A failure is an error, and so is every sync after one
    /// (`sync_failed`): the caller must not forward.
    pub(super) fn sync_wal(&self) -> Result<(), StoreError> {
        let path = self.home.join(format!("{}-wal", schema::DB_FILE));
        let not_durable = |source| StoreError::NotDurable {
            path: path.clone(),
            source,
        };
        // Read under the lock, which every sync holds: a sync that waited behind the one that
        // failed must not succeed on the same file after the kernel reported the error once.
        let mut wal = self.wal.lock().unwrap_or_else(|p| p.into_inner());
        if self.sync_failed.load(Ordering::SeqCst) {
            return Err(not_durable(std::io::Error::other(
                "an earlier sync of the database's WAL failed",
            )));
        }
        let file = match wal.as_ref() {
            Some(file) => file,
            // Not a write-back error: nothing is lost yet, so nothing is latched.
            None => wal.insert(std::fs::File::open(&path).map_err(not_durable)?),
        };
        if let Err(source) = self.sync_file(file) {
            self.sync_failed.store(true, Ordering::SeqCst);
            return Err(not_durable(source));
        }
        self.wal_syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn sync_file(&self, file: &std::fs::File) -> std::io::Result<()> {
        #[cfg(test)]
        if self.fail_next_sync.swap(false, Ordering::SeqCst) {
            return Err(std::io::Error::other("a sync failed (test)"));
        }
        file.sync_data()
    }

    /// Tests: makes the next sync fail.
    #[cfg(test)]
    pub(in crate::store) fn fail_next_sync(&self) {
        self.fail_next_sync.store(true, Ordering::SeqCst);
    }

    /// How many times the WAL was synced since this handle opened.
    #[cfg(test)]
    pub(in crate::store) fn wal_syncs(&self) -> u64 {
        self.wal_syncs.load(Ordering::Relaxed)
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

//! The audit log's tables in SQLite (rules in `store/log.rs`): schema version 4.

use cajaguard_core::approval::ApprovalDocument;
use cajaguard_core::audit_log::Leaf;
use rusqlite::{OptionalExtension, params};

use super::SqliteTx;
use super::approval_files;
use crate::store::StoreError;
use crate::store::audit::LEAF_COLUMNS;
use crate::store::log::{LogHead, LogTx};

/// Version 4: the audit log's tree (the same as PostgreSQL's `0004_audit_log.sql`, which says
/// what each is for). Rows from before get their places when the store opens (`log::open`).
pub(super) const SCHEMA_V4: &str = "
ALTER TABLE audit ADD COLUMN log_index INTEGER;
ALTER TABLE audit ADD COLUMN log_hashes BLOB;
CREATE UNIQUE INDEX audit_log_index ON audit (log_index);
CREATE TABLE audit_log (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    origin TEXT NOT NULL,
    size   INTEGER NOT NULL
);
CREATE TABLE audit_checkpoints (
    tree_size  INTEGER PRIMARY KEY,
    note       TEXT NOT NULL,
    written_at INTEGER NOT NULL
);
CREATE TABLE audit_log_keys (
    verifier_key TEXT PRIMARY KEY,
    added_at     INTEGER NOT NULL
) WITHOUT ROWID;
";

fn to_i64(value: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::Inconsistent(format!("{what} is out of range")))
}

fn to_u64(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| {
        StoreError::Inconsistent(format!(
            "{what} is negative ({value}): the store was altered; run `cajaguard audit verify`"
        ))
    })
}

type RawLeaf = (
    i64,
    String,
    i64,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<String>,
    Option<Vec<u8>>,
    Option<String>,
);

fn read_raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawLeaf> {
    Ok((
        r.get::<_, Option<i64>>(0)?.unwrap_or(-1),
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
        r.get(11)?,
        r.get(12)?,
        r.get(13)?,
        r.get(14)?,
        r.get(15)?,
    ))
}

fn leaf(raw: RawLeaf) -> Result<(Leaf, Vec<u8>), StoreError> {
    let (
        index,
        at,
        at_us,
        tool,
        verdict,
        reason,
        merchant,
        currency,
        total,
        request_id,
        key,
        checkout_id,
        latency_us,
        note,
        hashes,
        agent,
    ) = raw;
    Ok((
        Leaf {
            index: u64::try_from(index).unwrap_or(0),
            at,
            at_us,
            tool,
            verdict,
            reason,
            merchant,
            currency,
            total,
            request_id,
            idempotency_key: key,
            checkout_id,
            latency_us,
            note,
            agent,
        },
        hashes.unwrap_or_default(),
    ))
}

impl LogTx for SqliteTx<'_> {
    fn insert_audit(&mut self, l: &Leaf, log_hashes: &[u8]) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO audit (log_index, at, at_us, tool, verdict, reason, merchant, currency,
                                    total, request_id, idempotency_key, checkout_id, latency_us,
                                    note, log_hashes, agent)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            )?
            .execute(params![
                to_i64(l.index, "the log index")?,
                l.at,
                l.at_us,
                l.tool,
                l.verdict,
                l.reason,
                l.merchant,
                l.currency,
                l.total,
                l.request_id,
                l.idempotency_key,
                l.checkout_id,
                l.latency_us,
                l.note,
                log_hashes,
                l.agent,
            ])?;
        Ok(())
    }

    fn log_next_index(&mut self) -> Result<u64, StoreError> {
        let index: Option<i64> = self
            .conn
            .prepare_cached("UPDATE audit_log SET size = size + 1 WHERE id = 1 RETURNING size - 1")?
            .query_row([], |r| r.get(0))
            .optional()?;
        let index = index.ok_or_else(|| {
            StoreError::Inconsistent(
                "the audit log has no head row: the store was altered; run `cajaguard audit verify`"
                    .to_owned(),
            )
        })?;
        to_u64(index, "the audit log's size")
    }

    fn log_head(&mut self) -> Result<Option<LogHead>, StoreError> {
        let head: Option<(String, i64)> = self
            .conn
            .prepare_cached("SELECT origin, size FROM audit_log WHERE id = 1")?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        head.map(|(origin, size)| {
            Ok(LogHead {
                origin,
                size: to_u64(size, "the audit log's size")?,
            })
        })
        .transpose()
    }

    fn log_init(&mut self, origin: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO audit_log (id, origin, size) VALUES (1, ?1, 0) ON CONFLICT DO NOTHING",
            )?
            .execute([origin])?;
        Ok(())
    }

    fn log_hashes_of(&mut self, records: &[u64]) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT log_hashes FROM audit WHERE log_index = ?1")?;
        let mut found = Vec::with_capacity(records.len());
        for &record in records {
            let blob: Option<Option<Vec<u8>>> = stmt
                .query_row([to_i64(record, "a log index")?], |r| r.get(0))
                .optional()?;
            if let Some(Some(blob)) = blob {
                found.push((record, blob));
            }
        }
        Ok(found)
    }

    fn audit_unindexed(&mut self) -> Result<Vec<(i64, Leaf)>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT id, {LEAF_COLUMNS} FROM audit WHERE log_index IS NULL ORDER BY id"
        ))?;
        let rows = stmt.query_map([], |r| {
            let id: i64 = r.get(0)?;
            let raw: RawLeaf = (
                0,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
                r.get(11)?,
                r.get(12)?,
                r.get(13)?,
                r.get(14)?,
                None,
                r.get(16)?,
            );
            Ok((id, raw))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, raw) = row?;
            out.push((id, leaf(raw)?.0));
        }
        Ok(out)
    }

    fn audit_adopt(
        &mut self,
        row_id: i64,
        index: u64,
        log_hashes: &[u8],
    ) -> Result<bool, StoreError> {
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE audit SET log_index = ?1, log_hashes = ?2 WHERE id = ?3 AND log_index IS NULL",
            )?
            .execute(params![to_i64(index, "a log index")?, log_hashes, row_id])?;
        Ok(changed == 1)
    }

    fn audit_in_log(&mut self) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM audit WHERE log_index IS NOT NULL)")?
            .query_row([], |r| r.get(0))?;
        to_u64(n, "a count")
    }

    fn log_lock_head(&mut self) -> Result<Option<LogHead>, StoreError> {
        // `BEGIN IMMEDIATE` holds the database's write lock already.
        self.log_head()
    }

    fn audit_leaves(&mut self, from: u64, limit: u64) -> Result<Vec<(Leaf, Vec<u8>)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {LEAF_COLUMNS} FROM audit WHERE log_index >= ?1 ORDER BY log_index LIMIT ?2"
        ))?;
        let rows = stmt.query_map(
            params![to_i64(from, "a log index")?, to_i64(limit, "a limit")?],
            read_raw,
        )?;
        let mut out = Vec::new();
        for row in rows {
            out.push(leaf(row?)?);
        }
        Ok(out)
    }

    fn audit_outside_log(&mut self) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn
            .prepare_cached("SELECT count(*) FROM audit WHERE log_index IS NULL OR log_index < 0")?
            .query_row([], |r| r.get(0))?;
        to_u64(n, "a count")
    }

    fn checkpoint_latest(&mut self) -> Result<Option<(u64, String)>, StoreError> {
        let row: Option<(i64, String)> = self
            .conn
            .prepare_cached(
                "SELECT tree_size, note FROM audit_checkpoints ORDER BY tree_size DESC LIMIT 1",
            )?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        row.map(|(size, note)| Ok((to_u64(size, "a checkpoint's size")?, note)))
            .transpose()
    }

    fn checkpoints_all(&mut self) -> Result<Vec<(u64, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT tree_size, note FROM audit_checkpoints ORDER BY tree_size")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (size, note) = row?;
            out.push((to_u64(size, "a checkpoint's size")?, note));
        }
        Ok(out)
    }

    fn checkpoint_insert(&mut self, size: u64, note: &str, at_us: i64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO audit_checkpoints (tree_size, note, written_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![to_i64(size, "a checkpoint's size")?, note, at_us])?;
        Ok(())
    }

    fn log_key_add(&mut self, verifier_key: &str, at_us: i64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO audit_log_keys (verifier_key, added_at) VALUES (?1, ?2)
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![verifier_key, at_us])?;
        Ok(())
    }

    fn log_keys(&mut self) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT verifier_key FROM audit_log_keys ORDER BY added_at")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<Vec<String>, _>>()?)
    }

    fn all_approval_documents(&mut self) -> Result<Vec<ApprovalDocument>, StoreError> {
        Ok(approval_files::load_all(self.approvals_dir)?
            .into_iter()
            .map(|(_, doc)| doc)
            .collect())
    }

    fn all_passkey_approval_texts(&mut self) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT document FROM passkey_approvals ORDER BY filed_at, nonce")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<Vec<String>, _>>()?)
    }
}

//! The audit log's tables in PostgreSQL (rules in `store/log.rs`): migration `0004_audit_log.sql`.

use cajaguard_core::approval::ApprovalDocument;
use cajaguard_core::audit_log::Leaf;
use tokio_postgres::types::ToSql;

use super::transaction::PgTx;
use crate::store::StoreError;
use crate::store::log::{LogHead, LogTx};

/// `audit::LEAF_COLUMNS`, spelled out because statements are cached by their `&'static str`.
macro_rules! leaf_columns {
    () => {
        "log_index, at, at_us, tool, verdict, reason, merchant, currency, total, request_id, \
         idempotency_key, checkout_id, latency_us, note, log_hashes, agent"
    };
}

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

impl PgTx<'_> {
    /// A [`Leaf`] and its stored hashes from a row selecting `leaf_columns!()` from `offset` on;
    /// `index` replaces the row's `log_index` when given (rows not yet in the log).
    fn leaf_row(
        &self,
        row: &tokio_postgres::Row,
        offset: usize,
        index: Option<u64>,
    ) -> Result<(Leaf, Vec<u8>), StoreError> {
        let at_index: Option<i64> = self.get(row, offset)?;
        let index = match index {
            Some(index) => index,
            None => to_u64(at_index.unwrap_or(-1), "a log index")?,
        };
        let hashes: Option<Vec<u8>> = self.get(row, offset + 14)?;
        Ok((
            Leaf {
                index,
                at: self.get(row, offset + 1)?,
                at_us: self.get(row, offset + 2)?,
                tool: self.get(row, offset + 3)?,
                verdict: self.get(row, offset + 4)?,
                reason: self.get(row, offset + 5)?,
                merchant: self.get(row, offset + 6)?,
                currency: self.get(row, offset + 7)?,
                total: self.get(row, offset + 8)?,
                request_id: self.get(row, offset + 9)?,
                idempotency_key: self.get(row, offset + 10)?,
                checkout_id: self.get(row, offset + 11)?,
                latency_us: self.get(row, offset + 12)?,
                note: self.get(row, offset + 13)?,
                agent: self.get(row, offset + 15)?,
            },
            hashes.unwrap_or_default(),
        ))
    }
}

/// The log's next index, claimed, for an append whose hashes are computed here (see
/// [`LOG_APPEND`] for the rest): the head row's lock is held from here to the commit, and every
/// append waits for it, so each round trip spent under it is spent by all of them in turn. Hence
/// `LOG_PREFETCH`, sent with it.
pub(super) const LOG_CLAIM: &str =
    "UPDATE audit_log SET size = size + 1 WHERE id = 1 RETURNING size - 1";

/// The stored hashes the append of the index just claimed reads: record `n` reads those of
/// records `n - 2^l` for each of its `l` trailing one bits (`audit_log::stored_hash_owner` of its
/// left siblings). Sent after `LOG_CLAIM`, it takes its snapshot once the head is held, so it sees
/// every record before this one; what it misses, `log_hashes_of` reads as before.
pub(super) const LOG_PREFETCH: &str = "SELECT log_index, log_hashes FROM audit WHERE log_index IN (
     SELECT h.size - 1 - (1::BIGINT << l) FROM audit_log h, generate_series(0, 61) AS l
     WHERE h.id = 1 AND h.size % (1::BIGINT << (l + 1)) = 0)";

impl PgTx<'_> {
    /// The index `LOG_CLAIM` answered, keeping what `LOG_PREFETCH` read for the append.
    pub(super) fn log_claimed(
        &mut self,
        claimed: Vec<tokio_postgres::Row>,
        earlier: &[tokio_postgres::Row],
    ) -> Result<u64, StoreError> {
        self.log_prefetch = self.hash_rows(earlier)?;
        let row = claimed.into_iter().next().ok_or_else(|| {
            StoreError::Inconsistent(
                "the audit log has no head row: the store was altered; run `cajaguard audit verify`"
                    .to_owned(),
            )
        })?;
        to_u64(self.get(&row, 0)?, "the audit log's size")
    }

    /// `(log_index, log_hashes)` rows, those with hashes.
    fn hash_rows(&self, rows: &[tokio_postgres::Row]) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let mut found = Vec::with_capacity(rows.len());
        for row in rows {
            let index: i64 = self.get(row, 0)?;
            let blob: Option<Vec<u8>> = self.get(row, 1)?;
            if let Some(blob) = blob {
                found.push((to_u64(index, "a log index")?, blob));
            }
        }
        Ok(found)
    }
}

/// The record's append in one statement: the head taken, the stored hashes computed and the row
/// inserted by the database (migration 0007). Its parameters: the record's RFC 8785 bytes before
/// and after the index's digits, then its columns in `leaf_columns!()` order without `log_index`
/// and `log_hashes`.
const LOG_APPEND: &str = "SELECT cajaguard_log_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)";

/// A record's columns from `at` to `note`, in `leaf_columns!()` order: what both inserts write
/// between the index (or the bytes around it) and the stored hashes.
fn record_columns(l: &Leaf) -> [&(dyn ToSql + Sync); 13] {
    [
        &l.at,
        &l.at_us,
        &l.tool,
        &l.verdict,
        &l.reason,
        &l.merchant,
        &l.currency,
        &l.total,
        &l.request_id,
        &l.idempotency_key,
        &l.checkout_id,
        &l.latency_us,
        &l.note,
    ]
}

impl LogTx for PgTx<'_> {
    fn append_in_store(&mut self, l: &Leaf) -> Result<bool, StoreError> {
        let Some((before, after)) = l.canonical_around_index() else {
            return Ok(false);
        };
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&before, &after];
        params.extend(record_columns(l));
        params.push(&l.agent);
        self.defer(LOG_APPEND, &params)?;
        Ok(true)
    }

    fn insert_audit(&mut self, l: &Leaf, log_hashes: &[u8]) -> Result<(), StoreError> {
        let index = to_i64(l.index, "the log index")?;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&index];
        params.extend(record_columns(l));
        params.extend([&log_hashes as &(dyn ToSql + Sync), &l.agent]);
        self.defer(
            "INSERT INTO audit (log_index, at, at_us, tool, verdict, reason, merchant, currency,
                                total, request_id, idempotency_key, checkout_id, latency_us, note,
                                log_hashes, agent)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
            &params,
        )
    }

    fn log_next_index(&mut self) -> Result<u64, StoreError> {
        let mut answers = self.query_all(&[(LOG_CLAIM, &[]), (LOG_PREFETCH, &[])])?;
        let earlier = answers.pop().unwrap_or_default();
        let claimed = answers.pop().unwrap_or_default();
        self.log_claimed(claimed, &earlier)
    }

    fn log_head(&mut self) -> Result<Option<LogHead>, StoreError> {
        let row = self.query_opt("SELECT origin, size FROM audit_log WHERE id = 1", &[])?;
        row.map(|row| {
            Ok(LogHead {
                origin: self.get(&row, 0)?,
                size: to_u64(self.get(&row, 1)?, "the audit log's size")?,
            })
        })
        .transpose()
    }

    fn log_init(&mut self, origin: &str) -> Result<(), StoreError> {
        self.defer(
            "INSERT INTO audit_log (id, origin, size) VALUES (1, $1, 0) ON CONFLICT DO NOTHING",
            &[&origin],
        )
    }

    fn log_hashes_of(&mut self, records: &[u64]) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let prefetched = std::mem::take(&mut self.log_prefetch);
        if records
            .iter()
            .all(|r| prefetched.iter().any(|(index, _)| index == r))
        {
            return Ok(prefetched
                .into_iter()
                .filter(|(index, _)| records.contains(index))
                .collect());
        }
        let wanted = records
            .iter()
            .map(|&r| to_i64(r, "a log index"))
            .collect::<Result<Vec<i64>, _>>()?;
        // One round trip for all of them.
        let rows = self.query(
            "SELECT log_index, log_hashes FROM audit WHERE log_index = ANY($1)",
            &[&wanted],
        )?;
        self.hash_rows(&rows)
    }

    fn audit_unindexed(&mut self) -> Result<Vec<(i64, Leaf)>, StoreError> {
        let rows = self.query(
            concat!(
                "SELECT id, ",
                leaf_columns!(),
                " FROM audit WHERE log_index IS NULL ORDER BY id"
            ),
            &[],
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: i64 = self.get(row, 0)?;
            out.push((id, self.leaf_row(row, 1, Some(0))?.0));
        }
        Ok(out)
    }

    fn audit_adopt(
        &mut self,
        row_id: i64,
        index: u64,
        log_hashes: &[u8],
    ) -> Result<bool, StoreError> {
        let changed = self.execute(
            "UPDATE audit SET log_index = $1, log_hashes = $2 WHERE id = $3 AND log_index IS NULL",
            &[&to_i64(index, "a log index")?, &log_hashes, &row_id],
        )?;
        Ok(changed == 1)
    }

    fn audit_in_log(&mut self) -> Result<u64, StoreError> {
        let row = self.query_opt(
            "SELECT 1 FROM audit WHERE log_index IS NOT NULL LIMIT 1",
            &[],
        )?;
        Ok(u64::from(row.is_some()))
    }

    fn log_lock_head(&mut self) -> Result<Option<LogHead>, StoreError> {
        let row = self.query_opt(
            "SELECT origin, size FROM audit_log WHERE id = 1 FOR UPDATE",
            &[],
        )?;
        row.map(|row| {
            Ok(LogHead {
                origin: self.get(&row, 0)?,
                size: to_u64(self.get(&row, 1)?, "the audit log's size")?,
            })
        })
        .transpose()
    }

    fn audit_leaves(&mut self, from: u64, limit: u64) -> Result<Vec<(Leaf, Vec<u8>)>, StoreError> {
        let rows = self.query(
            concat!(
                "SELECT ",
                leaf_columns!(),
                " FROM audit WHERE log_index >= $1 ORDER BY log_index LIMIT $2"
            ),
            &[&to_i64(from, "a log index")?, &to_i64(limit, "a limit")?],
        )?;
        rows.iter().map(|row| self.leaf_row(row, 0, None)).collect()
    }

    fn audit_outside_log(&mut self) -> Result<u64, StoreError> {
        let row = self.query_opt(
            "SELECT count(*) FROM audit WHERE log_index IS NULL OR log_index < 0",
            &[],
        )?;
        let n: i64 = match row {
            Some(row) => self.get(&row, 0)?,
            None => 0,
        };
        to_u64(n, "a count")
    }

    fn checkpoint_latest(&mut self) -> Result<Option<(u64, String)>, StoreError> {
        let row = self.query_opt(
            "SELECT tree_size, note FROM audit_checkpoints ORDER BY tree_size DESC LIMIT 1",
            &[],
        )?;
        row.map(|row| {
            Ok((
                to_u64(self.get(&row, 0)?, "a checkpoint's size")?,
                self.get(&row, 1)?,
            ))
        })
        .transpose()
    }

    fn checkpoints_all(&mut self) -> Result<Vec<(u64, String)>, StoreError> {
        let rows = self.query(
            "SELECT tree_size, note FROM audit_checkpoints ORDER BY tree_size",
            &[],
        )?;
        rows.iter()
            .map(|row| {
                Ok((
                    to_u64(self.get(row, 0)?, "a checkpoint's size")?,
                    self.get(row, 1)?,
                ))
            })
            .collect()
    }

    fn checkpoint_insert(&mut self, size: u64, note: &str, at_us: i64) -> Result<(), StoreError> {
        self.defer(
            "INSERT INTO audit_checkpoints (tree_size, note, written_at) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING",
            &[&to_i64(size, "a checkpoint's size")?, &note, &at_us],
        )
    }

    fn log_key_add(&mut self, verifier_key: &str, at_us: i64) -> Result<(), StoreError> {
        self.defer(
            "INSERT INTO audit_log_keys (verifier_key, added_at) VALUES ($1, $2)
             ON CONFLICT DO NOTHING",
            &[&verifier_key, &at_us],
        )
    }

    fn log_keys(&mut self) -> Result<Vec<String>, StoreError> {
        let rows = self.query(
            "SELECT verifier_key FROM audit_log_keys ORDER BY added_at",
            &[],
        )?;
        rows.iter().map(|row| self.get(row, 0)).collect()
    }

    fn all_approval_documents(&mut self) -> Result<Vec<ApprovalDocument>, StoreError> {
        let rows = self.query(
            "SELECT document FROM approvals ORDER BY filed_at, nonce",
            &[],
        )?;
        let mut docs = Vec::new();
        for row in &rows {
            let text: String = self.get(row, 0)?;
            match ApprovalDocument::from_json(&text) {
                Ok(doc) => docs.push(doc),
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a stored approval that does not parse")
                }
            }
        }
        Ok(docs)
    }

    fn all_passkey_approval_texts(&mut self) -> Result<Vec<String>, StoreError> {
        let rows = self.query(
            "SELECT document FROM passkey_approvals ORDER BY filed_at, nonce",
            &[],
        )?;
        rows.iter().map(|row| self.get(row, 0)).collect()
    }
}

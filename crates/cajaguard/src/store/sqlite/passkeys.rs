//! The passkey tables in SQLite (rules in `store/passkeys.rs`): schema version 3.

use cajaguard_core::approval::RequestId;
use cajaguard_core::passkey::RegisteredPasskey;
use rusqlite::{OptionalExtension, params};

use super::SqliteTx;
use crate::store::passkeys::{
    LinkRow, PasskeyRow, PasskeyTx, algorithm, algorithm_name, created, unhex,
};
use crate::store::{StoreError, from_micros};
use time::OffsetDateTime;

/// Version 3: passkeys, one-time registration links, passkey approvals (the same as PostgreSQL's
/// `0003_passkeys.sql`, which says what each is for).
pub(super) const SCHEMA_V3: &str = "
CREATE TABLE passkeys (
    credential_id   TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    algorithm       TEXT NOT NULL CHECK (algorithm IN ('ES256', 'EdDSA')),
    public_key      TEXT NOT NULL,
    sign_count      INTEGER NOT NULL,
    aaguid          TEXT NOT NULL,
    backup_eligible INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    removed_at      INTEGER
) WITHOUT ROWID;
CREATE TABLE passkey_links (
    token_hash TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    used       INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE passkey_approvals (
    request_id TEXT NOT NULL,
    nonce      TEXT NOT NULL UNIQUE,
    document   TEXT NOT NULL,
    filed_at   INTEGER NOT NULL,
    PRIMARY KEY (request_id, nonce)
) WITHOUT ROWID;
";

const COLUMNS: &str =
    "credential_id, name, algorithm, public_key, sign_count, aaguid, backup_eligible, created_at";

type Raw = (String, String, String, String, i64, String, bool, i64);

fn row(raw: Raw) -> Result<PasskeyRow, StoreError> {
    let (id, name, alg, key, count, aaguid, backup, created_at) = raw;
    Ok(PasskeyRow {
        passkey: RegisteredPasskey {
            credential_id: unhex(&id, "credential id")?,
            name,
            algorithm: algorithm(&alg)?,
            public_key: unhex(&key, "key")?,
            sign_count: u32::try_from(count).map_err(|_| {
                StoreError::Inconsistent("a passkey's counter is out of range".into())
            })?,
            aaguid,
            backup_eligible: backup,
        },
        created_at: created(created_at)?,
    })
}

fn raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<Raw> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
    ))
}

impl PasskeyTx for SqliteTx<'_> {
    fn passkey_list(&mut self) -> Result<Vec<PasskeyRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM passkeys WHERE removed_at IS NULL ORDER BY created_at, credential_id"
        ))?;
        let raws = stmt.query_map([], raw)?.collect::<Result<Vec<_>, _>>()?;
        raws.into_iter().map(row).collect()
    }

    fn passkey_list_removed(&mut self) -> Result<Vec<(PasskeyRow, OffsetDateTime)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS}, removed_at FROM passkeys WHERE removed_at IS NOT NULL ORDER BY removed_at, credential_id"
        ))?;
        let raws = stmt
            .query_map([], |r| Ok((raw(r)?, r.get::<_, i64>(8)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        raws.into_iter()
            .map(|(raw, removed_at)| {
                Ok((
                    row(raw)?,
                    from_micros(removed_at, "a passkey's removed_at")?,
                ))
            })
            .collect()
    }

    fn lock_passkeys(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    fn passkey_ever(&mut self) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM passkeys LIMIT 1")?
            .query_row([], |_| Ok(()))
            .optional()?
            .is_some())
    }

    fn passkey_get(
        &mut self,
        credential_id: &[u8],
    ) -> Result<Option<RegisteredPasskey>, StoreError> {
        let found = self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM passkeys WHERE credential_id = ?1 AND removed_at IS NULL"
            ))?
            .query_row([hex::encode(credential_id)], raw)
            .optional()?;
        found.map(|r| row(r).map(|r| r.passkey)).transpose()
    }

    fn passkey_insert(&mut self, p: &RegisteredPasskey, at_us: i64) -> Result<bool, StoreError> {
        let n = self.conn.prepare_cached(&format!(
            "INSERT INTO passkeys ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (credential_id) DO NOTHING"
        ))?
        .execute(params![
            hex::encode(&p.credential_id),
            p.name,
            algorithm_name(p.algorithm),
            hex::encode(&p.public_key),
            i64::from(p.sign_count),
            p.aaguid,
            p.backup_eligible,
            at_us
        ])?;
        Ok(n == 1)
    }

    fn passkey_remove(&mut self, credential_id: &[u8], at_us: i64) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE passkeys SET removed_at = ?2 WHERE credential_id = ?1 AND removed_at IS NULL",
            )?
            .execute(params![hex::encode(credential_id), at_us])?;
        Ok(n == 1)
    }

    fn passkey_set_count(
        &mut self,
        credential_id: &[u8],
        from: u32,
        to: u32,
    ) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE passkeys SET sign_count = ?3 WHERE credential_id = ?1 AND sign_count = ?2 AND removed_at IS NULL",
            )?
            .execute(params![hex::encode(credential_id), i64::from(from), i64::from(to)])?;
        Ok(n == 1)
    }

    fn link_insert(
        &mut self,
        token_hash: &str,
        name: &str,
        expires_us: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO passkey_links (token_hash, name, expires_at) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![token_hash, name, expires_us])?;
        Ok(())
    }

    fn link_get(&mut self, token_hash: &str) -> Result<Option<LinkRow>, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT name, expires_at, used FROM passkey_links WHERE token_hash = ?1",
            )?
            .query_row([token_hash], |r| {
                Ok(LinkRow {
                    name: r.get(0)?,
                    expires_us: r.get(1)?,
                    used: r.get(2)?,
                })
            })
            .optional()?)
    }

    fn link_use(&mut self, token_hash: &str) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached("UPDATE passkey_links SET used = 1 WHERE token_hash = ?1 AND used = 0")?
            .execute([token_hash])?;
        Ok(n == 1)
    }

    fn passkey_approval_insert(
        &mut self,
        id: &RequestId,
        nonce: &str,
        document: &str,
        at_us: i64,
    ) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached(
                "INSERT INTO passkey_approvals (request_id, nonce, document, filed_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
            )?
            .execute(params![id.as_str(), nonce, document, at_us])?;
        Ok(n == 1)
    }

    fn passkey_approval_texts(&mut self, id: &RequestId) -> Result<Vec<String>, StoreError> {
        // Sorted here, not by `ORDER BY`: with it SQLite re-prepared the statement on every run
        // (16-23 µs on the gate's path, rows or none); there are rarely more than one or two.
        let mut stmt = self.conn.prepare_cached(
            "SELECT filed_at, nonce, document FROM passkey_approvals WHERE request_id = ?1",
        )?;
        let mut rows = stmt
            .query_map([id.as_str()], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get(2)?))
            })?
            .collect::<Result<Vec<(i64, String, String)>, _>>()?;
        rows.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        Ok(rows.into_iter().map(|(_, _, text)| text).collect())
    }
}

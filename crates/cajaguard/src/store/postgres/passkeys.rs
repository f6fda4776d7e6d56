//! The passkey tables in PostgreSQL (rules in `store/passkeys.rs`): migration `0003_passkeys.sql`.

use cajaguard_core::approval::RequestId;
use cajaguard_core::passkey::RegisteredPasskey;

use super::transaction::PgTx;
use crate::store::passkeys::{
    LinkRow, PasskeyRow, PasskeyTx, algorithm, algorithm_name, created, unhex,
};
use crate::store::{StoreError, from_micros};
use time::OffsetDateTime;

const LIST: &str = "SELECT credential_id, name, algorithm, public_key, sign_count, aaguid, backup_eligible, created_at
     FROM passkeys WHERE removed_at IS NULL ORDER BY created_at, credential_id";
const LIST_REMOVED: &str = "SELECT credential_id, name, algorithm, public_key, sign_count, aaguid, backup_eligible, created_at, removed_at
     FROM passkeys WHERE removed_at IS NOT NULL ORDER BY removed_at, credential_id";
pub(super) const APPROVAL_TEXTS: &str =
    "SELECT document FROM passkey_approvals WHERE request_id = $1 ORDER BY filed_at, nonce";
const GET: &str = "SELECT credential_id, name, algorithm, public_key, sign_count, aaguid, backup_eligible, created_at
     FROM passkeys WHERE credential_id = $1 AND removed_at IS NULL";

impl PgTx<'_> {
    fn passkey_row(&self, row: &tokio_postgres::Row) -> Result<PasskeyRow, StoreError> {
        let id: String = self.get(row, 0)?;
        let alg: String = self.get(row, 2)?;
        let key: String = self.get(row, 3)?;
        let count: i64 = self.get(row, 4)?;
        Ok(PasskeyRow {
            passkey: RegisteredPasskey {
                credential_id: unhex(&id, "credential id")?,
                name: self.get(row, 1)?,
                algorithm: algorithm(&alg)?,
                public_key: unhex(&key, "key")?,
                sign_count: u32::try_from(count).map_err(|_| {
                    StoreError::Inconsistent("a passkey's counter is out of range".into())
                })?,
                aaguid: self.get(row, 5)?,
                backup_eligible: self.get(row, 6)?,
            },
            created_at: created(self.get(row, 7)?)?,
        })
    }
}

impl PasskeyTx for PgTx<'_> {
    fn passkey_list(&mut self) -> Result<Vec<PasskeyRow>, StoreError> {
        let rows = self.query(LIST, &[])?;
        rows.iter().map(|r| self.passkey_row(r)).collect()
    }

    fn passkey_list_removed(&mut self) -> Result<Vec<(PasskeyRow, OffsetDateTime)>, StoreError> {
        let rows = self.query(LIST_REMOVED, &[])?;
        rows.iter()
            .map(|r| {
                let removed_at: i64 = self.get(r, 8)?;
                Ok((
                    self.passkey_row(r)?,
                    from_micros(removed_at, "a passkey's removed_at")?,
                ))
            })
            .collect()
    }

    fn lock_passkeys(&mut self) -> Result<(), StoreError> {
        // Keyed by the schema, as the migrations' lock is, so stores in other schemas never wait.
        self.query(
            "SELECT pg_advisory_xact_lock(hashtext('cajaguard-passkeys:' || current_schema()))",
            &[],
        )?;
        Ok(())
    }

    fn passkey_ever(&mut self) -> Result<bool, StoreError> {
        Ok(self
            .query_opt("SELECT 1 FROM passkeys LIMIT 1", &[])?
            .is_some())
    }

    fn passkey_get(
        &mut self,
        credential_id: &[u8],
    ) -> Result<Option<RegisteredPasskey>, StoreError> {
        let row = self.query_opt(GET, &[&hex::encode(credential_id)])?;
        row.map(|r| self.passkey_row(&r).map(|r| r.passkey))
            .transpose()
    }

    fn passkey_insert(&mut self, p: &RegisteredPasskey, at_us: i64) -> Result<bool, StoreError> {
        let n = self.execute(
            "INSERT INTO passkeys (credential_id, name, algorithm, public_key, sign_count, aaguid, backup_eligible, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (credential_id) DO NOTHING",
            &[
                &hex::encode(&p.credential_id),
                &p.name,
                &algorithm_name(p.algorithm),
                &hex::encode(&p.public_key),
                &i64::from(p.sign_count),
                &p.aaguid,
                &p.backup_eligible,
                &at_us,
            ],
        )?;
        Ok(n == 1)
    }

    fn passkey_remove(&mut self, credential_id: &[u8], at_us: i64) -> Result<bool, StoreError> {
        let n = self.execute(
            "UPDATE passkeys SET removed_at = $2 WHERE credential_id = $1 AND removed_at IS NULL",
            &[&hex::encode(credential_id), &at_us],
        )?;
        Ok(n == 1)
    }

    fn passkey_set_count(
        &mut self,
        credential_id: &[u8],
        from: u32,
        to: u32,
    ) -> Result<bool, StoreError> {
        // A single UPDATE with the old value in its WHERE: under READ COMMITTED a concurrent
        // update of the row makes this one re-check the condition on the new row, so only one of
        // two uses that read the same counter moves it.
        let n = self.execute(
            "UPDATE passkeys SET sign_count = $3 WHERE credential_id = $1 AND sign_count = $2 AND removed_at IS NULL",
            &[&hex::encode(credential_id), &i64::from(from), &i64::from(to)],
        )?;
        Ok(n == 1)
    }

    fn link_insert(
        &mut self,
        token_hash: &str,
        name: &str,
        expires_us: i64,
    ) -> Result<(), StoreError> {
        self.defer(
            "INSERT INTO passkey_links (token_hash, name, expires_at) VALUES ($1, $2, $3)",
            &[&token_hash, &name, &expires_us],
        )
    }

    fn link_get(&mut self, token_hash: &str) -> Result<Option<LinkRow>, StoreError> {
        let row = self.query_opt(
            "SELECT name, expires_at, used FROM passkey_links WHERE token_hash = $1",
            &[&token_hash],
        )?;
        row.map(|r| {
            Ok(LinkRow {
                name: self.get(&r, 0)?,
                expires_us: self.get(&r, 1)?,
                used: self.get(&r, 2)?,
            })
        })
        .transpose()
    }

    fn link_use(&mut self, token_hash: &str) -> Result<bool, StoreError> {
        let n = self.execute(
            "UPDATE passkey_links SET used = TRUE WHERE token_hash = $1 AND NOT used",
            &[&token_hash],
        )?;
        Ok(n == 1)
    }

    fn passkey_approval_insert(
        &mut self,
        id: &RequestId,
        nonce: &str,
        document: &str,
        at_us: i64,
    ) -> Result<bool, StoreError> {
        let n = self.execute(
            "INSERT INTO passkey_approvals (request_id, nonce, document, filed_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING",
            &[&id.as_str(), &nonce, &document, &at_us],
        )?;
        Ok(n == 1)
    }

    fn passkey_approval_texts(&mut self, id: &RequestId) -> Result<Vec<String>, StoreError> {
        let rows = self.query(APPROVAL_TEXTS, &[&id.as_str()])?;
        rows.iter().map(|r| self.get(r, 0)).collect()
    }
}

//! Agent tokens and what the shop made for each agent in SQLite (rules in `store/agents.rs`; tables in
//! schema versions 5 and 6).

use rusqlite::{OptionalExtension, params};

use super::SqliteTx;
use crate::store::StoreError;
use crate::store::agents::AgentTx;

impl AgentTx for SqliteTx<'_> {
    fn agent_insert(
        &mut self,
        name: &str,
        token_sha256: &str,
        at_us: i64,
    ) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached(
                "INSERT INTO agent_tokens (name, token_sha256, created_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO NOTHING",
            )?
            .execute(params![name, token_sha256, at_us])?;
        Ok(n == 1)
    }

    fn agent_list(&mut self) -> Result<Vec<(String, i64)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name, created_at FROM agent_tokens ORDER BY name")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    fn agent_delete(&mut self, name: &str) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached("DELETE FROM agent_tokens WHERE name = ?1")?
            .execute([name])?;
        Ok(n == 1)
    }

    fn agent_by_token(&mut self, token_sha256: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT name FROM agent_tokens WHERE token_sha256 = ?1")?
            .query_row([token_sha256], |r| r.get(0))
            .optional()?)
    }

    fn made_for_insert(
        &mut self,
        object: &str,
        id: &str,
        agent: &str,
        at_us: i64,
    ) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO made_for_agent (object, id, agent, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (object, id) DO NOTHING",
            )?
            .execute(params![object, id, agent, at_us])?;
        self.made_for(object, id)
    }

    fn made_for(&mut self, object: &str, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT agent FROM made_for_agent WHERE object = ?1 AND id = ?2")?
            .query_row([object, id], |r| r.get(0))
            .optional()?)
    }
}

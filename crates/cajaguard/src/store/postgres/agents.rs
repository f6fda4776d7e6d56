//! Agent tokens and what the shop made for each agent in PostgreSQL (rules in `store/agents.rs`;
//! tables in `0005_agents.sql` and `0008_made_for_agent.sql`).

use super::statements::MADE_FOR;
use super::transaction::PgTx;
use crate::store::StoreError;
use crate::store::agents::AgentTx;

impl AgentTx for PgTx<'_> {
    fn agent_insert(
        &mut self,
        name: &str,
        token_sha256: &str,
        at_us: i64,
    ) -> Result<bool, StoreError> {
        let n = self.execute(
            "INSERT INTO agent_tokens (name, token_sha256, created_at) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO NOTHING",
            &[&name, &token_sha256, &at_us],
        )?;
        Ok(n == 1)
    }

    fn agent_list(&mut self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = self.query(
            "SELECT name, created_at FROM agent_tokens ORDER BY name",
            &[],
        )?;
        rows.iter()
            .map(|row| Ok((self.get(row, 0)?, self.get(row, 1)?)))
            .collect()
    }

    fn agent_delete(&mut self, name: &str) -> Result<bool, StoreError> {
        let n = self.execute("DELETE FROM agent_tokens WHERE name = $1", &[&name])?;
        Ok(n == 1)
    }

    fn agent_by_token(&mut self, token_sha256: &str) -> Result<Option<String>, StoreError> {
        let row = self.query_opt(
            "SELECT name FROM agent_tokens WHERE token_sha256 = $1",
            &[&token_sha256],
        )?;
        row.map(|row| self.get(&row, 0)).transpose()
    }

    fn made_for_insert(
        &mut self,
        object: &str,
        id: &str,
        agent: &str,
        at_us: i64,
    ) -> Result<Option<String>, StoreError> {
        // Sent with the read, in one round trip. Under READ COMMITTED the read's snapshot is
        // taken after the insert ran: a row another transaction was inserting at the same time
        // was waited for and is seen.
        self.defer(
            "INSERT INTO made_for_agent (object, id, agent, created_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (object, id) DO NOTHING",
            &[&object, &id, &agent, &at_us],
        )?;
        self.made_for(object, id)
    }

    fn made_for(&mut self, object: &str, id: &str) -> Result<Option<String>, StoreError> {
        let row = self.query_opt(MADE_FOR, &[&object, &id])?;
        row.map(|row| self.get(&row, 0)).transpose()
    }
}

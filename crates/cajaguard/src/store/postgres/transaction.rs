//! One open transaction as the statements see it: each statement prepared once per connection
//! and cached by its SQL, every error tagged with the store it came from, and the rows the
//! ledger and pending reads share decoded in one place.

use std::collections::HashMap;

use postgres::{Statement, Transaction};

use super::connection::pg_err;
use crate::store::{InFlight, StoreError, from_micros, pending};

pub(super) struct PgTx<'a, 't> {
    pub(super) tx: &'a mut Transaction<'t>,
    pub(super) statements: &'a mut HashMap<&'static str, Statement>,
    pub(super) target: &'a str,
}

pub(super) type Params<'p> = [&'p (dyn postgres::types::ToSql + Sync)];

impl PgTx<'_, '_> {
    pub(super) fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.tx.prepare(sql).map_err(|e| pg_err(self.target, e))?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    pub(super) fn query(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Vec<postgres::Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.tx
            .query(&statement, params)
            .map_err(|e| pg_err(self.target, e))
    }

    pub(super) fn query_opt(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Option<postgres::Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.tx
            .query_opt(&statement, params)
            .map_err(|e| pg_err(self.target, e))
    }

    pub(super) fn execute(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        self.tx
            .execute(&statement, params)
            .map_err(|e| pg_err(self.target, e))
    }

    /// Ledger rows as [`InFlight`], from a query selecting checkout id, idempotency key,
    /// currency, reserved, reserved at and the agent's profile.
    pub(super) fn in_flight_rows(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Vec<InFlight>, StoreError> {
        let rows = self.query(sql, params)?;
        rows.iter()
            .map(|row| {
                Ok(InFlight {
                    checkout_id: self.get(row, 0)?,
                    idempotency_key: self.get(row, 1)?,
                    currency: self.get(row, 2)?,
                    total: self.get(row, 3)?,
                    reserved_at: from_micros(self.get(row, 4)?, "a ledger row's reserved_at")?,
                    agent_profile: self.get(row, 5)?,
                })
            })
            .collect()
    }

    pub(super) fn get<'r, T: postgres::types::FromSql<'r>>(
        &self,
        row: &'r postgres::Row,
        index: usize,
    ) -> Result<T, StoreError> {
        row.try_get(index).map_err(|e| pg_err(self.target, e))
    }
}

impl PgTx<'_, '_> {
    pub(super) fn pending_raw(&self, row: &postgres::Row) -> Result<pending::Raw, StoreError> {
        Ok((
            self.get(row, 0)?,
            self.get(row, 1)?,
            self.get(row, 2)?,
            self.get(row, 3)?,
            self.get(row, 4)?,
            self.get(row, 5)?,
            self.get(row, 6)?,
            self.get(row, 7)?,
            self.get(row, 8)?,
        ))
    }
}

//! One open transaction as the statements see it, **pipelined**: a statement whose result nobody
//! reads (a lock, an insert, a bucket bump) is queued rather than sent, and goes out with the next
//! statement whose result is needed, or with `COMMIT`, as one write to the socket. The server runs
//! them one after another exactly as if each had been sent alone (so a lock queued first is held
//! before a read queued after it takes its snapshot), and answers them in order; only the waiting
//! for answers is shared. A gate that used to cost 14 round trips costs 2 (docs/ARCHITECTURE.md).
//!
//! Errors keep their meaning: the first statement that fails fails the transaction (PostgreSQL
//! refuses every later one with 25P02), and that first error is what the caller gets, from
//! whichever call flushed it. A caller that needs a statement's row count uses [`PgTx::execute`],
//! which flushes; [`PgTx::defer`] is for the rest.
//!
//! Statements are prepared once per connection and cached by their SQL; every error is tagged
//! with the store it came from; the rows the ledger and pending reads share are decoded here.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use bytes::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type};
use tokio_postgres::{Client, Row, Statement};

use super::connection::pg_err;
use crate::store::{InFlight, StoreError, from_micros, pending};

pub(super) type Params<'p> = [&'p (dyn ToSql + Sync)];

/// Every transaction commits without waiting for its WAL to reach the disk, so its locks (the
/// currency's, the audit log's head, a spend bucket) are released as soon as the server has
/// applied it, and the next transaction that waits on them does not also wait out this one's
/// flush: a flush held under a lock is what made every gate take its turn behind the one
/// before's disk write (docs/ARCHITECTURE.md, "Durability").
const BEGIN: &str = "BEGIN; SET LOCAL synchronous_commit TO off";

/// A read has nothing to flush (see `Postgres::read`).
const BEGIN_READ: &str = "BEGIN READ ONLY";

/// What a transaction may do: writes are flushed before their commit returns, reads cannot write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    Read,
    Write,
    /// Writes whose commit does not wait for their flush, because nothing acts on them before a
    /// later write's flush, which covers them (WAL is flushed in order), and their loss in a crash
    /// fails closed. A claim: the gate that forwards under it is flushed first, and a gate that
    /// finds its claim gone refuses (`StoreError::ClaimLost`). A refusal: the agent is refused
    /// whether or not its record survives. A settlement: lost, its reservation stays in flight,
    /// counted, until reconciliation reads the checkout again. As SQLite's commits, which are
    /// synced only when their transaction asks. Such a transaction becomes [`Access::Write`] when it
    /// asks for it ([`PgTx::flush_on_commit`]: a gate that forwards, a settlement that freezes).
    WriteUnflushed,
}

/// ...and is made durable before [`PgTx::commit`] returns, by this statement sent right after
/// `COMMIT`: its own transaction writes a WAL record and commits with the session's
/// `synchronous_commit` (on, unless the operator turned it off for the whole database), so the
/// server answers only once the WAL is flushed up to it, and WAL is flushed in order: with it,
/// this transaction's commit and every commit this transaction read from. Nothing leaves the
/// store (a permit, an answer) before that, so a crash can lose only what nobody was told; the
/// flushes of transactions waiting for theirs at once are one disk write (group commit). The
/// message is transactional (it takes a transaction id, so its commit must be flushed) and
/// logical decoding ignores a prefix nobody subscribes to; any role may call it.
const DURABLE: &str = "SELECT pg_logical_emit_message(true, 'cajaguard', '')";

/// What one connection keeps between transactions: the client, the runtime its socket is driven
/// on, and the statements prepared on it.
pub(super) struct Session {
    pub(super) client: Client,
    pub(super) runtime: tokio::runtime::Runtime,
    /// Statements prepared on this connection, by their SQL (a prepared statement survives a
    /// rolled-back transaction; the cache dies with the connection).
    pub(super) statements: HashMap<&'static str, Statement>,
}

pub(super) struct PgTx<'c> {
    session: &'c mut Session,
    pub(super) target: &'c str,
    access: Access,
    queued: Vec<Queued>,
    /// `BEGIN` has been sent (it is queued first and goes out with the first flush).
    begun: bool,
    /// `COMMIT` has been sent: from here a lost connection leaves the outcome unknown.
    commit_sent: bool,
    /// A statement failed: the server has failed the transaction, and a `COMMIT` would only roll
    /// it back (answered without an error), so [`PgTx::commit`] refuses instead.
    failed: bool,
    /// The stored hashes the next append reads, fetched with its index (`log.rs`).
    pub(super) log_prefetch: Vec<(u64, Vec<u8>)>,
    /// Round trips so far: what a lock taken in one is held across (tests count them).
    round_trips: u32,
}

/// A statement waiting to be sent, its parameters already encoded (so it borrows nothing).
enum Queued {
    Simple(&'static str),
    Execute(Statement, Vec<Encoded>),
    Query(Statement, Vec<Encoded>),
}

/// What a sent statement answered.
enum Answer {
    Done,
    Count(u64),
    Rows(Vec<Row>),
}

impl<'c> PgTx<'c> {
    /// A transaction on `session`; nothing is sent until the first flush.
    pub(super) fn begin(session: &'c mut Session, target: &'c str, access: Access) -> PgTx<'c> {
        PgTx {
            session,
            target,
            access,
            queued: vec![Queued::Simple(match access {
                Access::Write | Access::WriteUnflushed => BEGIN,
                Access::Read => BEGIN_READ,
            })],
            begun: false,
            commit_sent: false,
            failed: false,
            log_prefetch: Vec::new(),
            round_trips: 0,
        }
    }

    /// How many times this transaction has waited for the server so far.
    #[cfg(test)]
    pub(super) fn round_trips(&self) -> u32 {
        self.round_trips
    }

    /// From here on, this transaction's commit waits for its flush (see [`Access::Write`]).
    pub(super) fn flush_on_commit(&mut self) {
        if self.access == Access::WriteUnflushed {
            self.access = Access::Write;
        }
    }

    /// Whether [`PgTx::commit`] will wait for the flush.
    pub(super) fn flushes_on_commit(&self) -> bool {
        self.access == Access::Write
    }

    /// Whether `COMMIT` went out: a lost connection before that rolled the transaction back.
    pub(super) fn commit_sent(&self) -> bool {
        self.commit_sent
    }

    /// Sends what is queued with `COMMIT`, and checks every answer.
    pub(super) fn commit(mut self) -> Result<(), StoreError> {
        if self.failed {
            // Rolled back here, so the connection goes back to the pool outside a transaction.
            self.rollback()?;
            return Err(StoreError::Inconsistent(
                "a statement of this transaction failed and its error was not passed on; nothing was applied".into(),
            ));
        }
        if !self.begun && self.queued.len() == 1 {
            // Nothing was ever asked: there is no transaction to end.
            return Ok(());
        }
        self.queued.push(Queued::Simple("COMMIT"));
        if self.access == Access::Write {
            self.queued.push(Queued::Simple(DURABLE));
        }
        self.commit_sent = true;
        self.flush()?;
        Ok(())
    }

    /// Ends the transaction without applying it. `Err` means the connection cannot be trusted
    /// any more (drop it).
    pub(super) fn rollback(mut self) -> Result<(), StoreError> {
        self.queued.clear();
        if !self.begun {
            return Ok(());
        }
        let PgTx {
            session, target, ..
        } = self;
        session
            .runtime
            .block_on(session.client.batch_execute("ROLLBACK"))
            .map_err(|e| pg_err(target, e))
    }

    pub(super) fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.session.statements.get(sql) {
            return Ok(statement.clone());
        }
        let Session {
            client,
            runtime,
            statements,
        } = &mut *self.session;
        let statement = runtime
            .block_on(client.prepare(sql))
            .map_err(|e| pg_err(self.target, e))?;
        statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Queues a statement whose row count nobody needs; it goes out with the next flush.
    pub(super) fn defer(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<(), StoreError> {
        let statement = self.statement(sql)?;
        let params = encode(&statement, params)?;
        self.queued.push(Queued::Execute(statement, params));
        Ok(())
    }

    /// Runs a statement now (with everything queued before it) and returns its row count.
    pub(super) fn execute(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        let params = encode(&statement, params)?;
        self.queued.push(Queued::Execute(statement, params));
        match self.flush()? {
            Some(Answer::Count(n)) => Ok(n),
            _ => Err(StoreError::Inconsistent(
                "the store's answer to a statement was not a row count".into(),
            )),
        }
    }

    pub(super) fn query(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, StoreError> {
        let mut answers = self.query_all(&[(sql, params)])?;
        Ok(answers.pop().unwrap_or_default())
    }

    pub(super) fn query_opt(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Option<Row>, StoreError> {
        one_row(self.query(sql, params)?)
    }

    /// Runs several reads in one round trip (with everything queued before them), in order; their
    /// rows come back in the same order.
    pub(super) fn query_all(
        &mut self,
        reads: &[(&'static str, &Params<'_>)],
    ) -> Result<Vec<Vec<Row>>, StoreError> {
        let first = self.queued.len();
        for (sql, params) in reads {
            let statement = self.statement(sql)?;
            let params = encode(&statement, params)?;
            self.queued.push(Queued::Query(statement, params));
        }
        let answers = self.send()?;
        answers
            .into_iter()
            .skip(first)
            .map(|answer| match answer {
                Answer::Rows(rows) => Ok(rows),
                _ => Err(StoreError::Inconsistent(
                    "the store's answer to a query held no rows".into(),
                )),
            })
            .collect()
    }

    /// Sends what is queued; the last statement's answer.
    fn flush(&mut self) -> Result<Option<Answer>, StoreError> {
        Ok(self.send()?.pop())
    }

    /// Sends every queued statement in one go and waits for all the answers. The first error is
    /// returned: the server failed the transaction there, and refused everything after it.
    fn send(&mut self) -> Result<Vec<Answer>, StoreError> {
        let queued = std::mem::take(&mut self.queued);
        if queued.is_empty() {
            return Ok(Vec::new());
        }
        self.begun = true;
        self.round_trips += 1;
        let Session {
            client, runtime, ..
        } = &*self.session;
        let answers = runtime.block_on(in_order(
            queued.iter().map(|q| run(client, q)).collect::<Vec<_>>(),
        ));
        let answers = answers.into_iter().collect::<Result<Vec<_>, _>>();
        self.failed |= answers.is_err();
        answers.map_err(|e| pg_err(self.target, e))
    }

    /// Ledger rows as [`InFlight`], from a query selecting checkout id, idempotency key,
    /// currency, reserved, reserved at, the agent's profile and the merchant.
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
                    merchant: self.get(row, 6)?,
                })
            })
            .collect()
    }

    pub(super) fn get<'r, T: tokio_postgres::types::FromSql<'r>>(
        &self,
        row: &'r Row,
        index: usize,
    ) -> Result<T, StoreError> {
        row.try_get(index).map_err(|e| pg_err(self.target, e))
    }

    pub(super) fn pending_raw(&self, row: &Row) -> Result<pending::Raw, StoreError> {
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

/// The row of a statement that returns at most one.
pub(super) fn one_row(mut rows: Vec<Row>) -> Result<Option<Row>, StoreError> {
    if rows.len() > 1 {
        return Err(StoreError::Inconsistent(format!(
            "a statement expected to return at most one row returned {}",
            rows.len()
        )));
    }
    Ok(rows.pop())
}

type Pending<'a> = Pin<Box<dyn Future<Output = Result<Answer, tokio_postgres::Error>> + 'a>>;

fn run<'a>(client: &'a Client, queued: &'a Queued) -> Pending<'a> {
    Box::pin(async move {
        match queued {
            Queued::Simple(sql) => client.batch_execute(sql).await.map(|()| Answer::Done),
            Queued::Execute(statement, params) => client
                .execute(statement, &refs(params))
                .await
                .map(Answer::Count),
            Queued::Query(statement, params) => client
                .query(statement, &refs(params))
                .await
                .map(Answer::Rows),
        }
    })
}

fn refs(params: &[Encoded]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

/// Polls every future, always in the order given, until all are done. The order is the point:
/// tokio-postgres writes a request to the connection on its future's first poll, so the first
/// poll's order is the order the server runs them in (a lock before the reads it protects).
/// (`futures::join_all` keeps it only below a size it does not promise.)
async fn in_order<T>(mut futures: Vec<Pin<Box<dyn Future<Output = T> + '_>>>) -> Vec<T> {
    let mut done: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (future, slot) in futures.iter_mut().zip(done.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *slot = Some(value),
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    done.into_iter().flatten().collect()
}

/// A parameter already in PostgreSQL's binary format for the type the statement declared, so a
/// queued statement owns its parameters and the caller's borrows end at the call.
#[derive(Debug)]
struct Encoded {
    ty: Type,
    value: Option<BytesMut>,
}

fn encode(statement: &Statement, params: &Params<'_>) -> Result<Vec<Encoded>, StoreError> {
    let types = statement.params();
    if types.len() != params.len() {
        return Err(StoreError::Inconsistent(format!(
            "a statement takes {} parameters but was given {}",
            types.len(),
            params.len()
        )));
    }
    types
        .iter()
        .zip(params)
        .map(|(ty, param)| {
            let mut value = BytesMut::new();
            match param.to_sql_checked(ty, &mut value) {
                Ok(IsNull::No) => Ok(Encoded {
                    ty: ty.clone(),
                    value: Some(value),
                }),
                Ok(IsNull::Yes) => Ok(Encoded {
                    ty: ty.clone(),
                    value: None,
                }),
                Err(e) => Err(StoreError::Inconsistent(format!(
                    "a value cannot be written as the store's {ty}: {e}"
                ))),
            }
        })
        .collect()
}

impl ToSql for Encoded {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.value {
            Some(value) => {
                out.extend_from_slice(value);
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        }
    }

    fn accepts(_: &Type) -> bool {
        // The real check is per value, in `to_sql_checked`: the type it was encoded for.
        true
    }

    fn to_sql_checked(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        if *ty != self.ty {
            return Err(format!("a value encoded as {} was sent as {ty}", self.ty).into());
        }
        self.to_sql(ty, out)
    }
}

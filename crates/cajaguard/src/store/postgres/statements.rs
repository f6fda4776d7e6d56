//! What a transaction says to PostgreSQL: [`Tx`] in SQL (`transaction.rs` runs it).

use cajaguard_core::approval::{ApprovalDocument, RequestId};
use cajaguard_core::effect::PendingRequest;

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::transaction::{Params, PgTx, one_row};
use crate::store::tx::{
    CheckoutReads, ClaimRow, GateKeys, GateReads, LedgerRow, ReleasedBy, Reservation, State, Tx,
    WindowCount,
};
use crate::store::{InFlight, PendingRow, StoreError, pending};

/// The gate's window sum: a range scan of the `spend_buckets` primary key, never the ledger.
macro_rules! window_sum {
    () => {
        "SELECT COALESCE(SUM(settled + in_flight), 0)::BIGINT FROM spend_buckets WHERE currency = $1 AND hour >= $2"
    };
}
const WINDOW_SUM: &str = window_sum!();
/// Its plan, for the report (statements are cached by their `&'static str`).
pub(super) const EXPLAIN_WINDOW_SUM: &str = concat!("EXPLAIN ", window_sum!());

impl Tx for PgTx<'_> {
    fn durable_on_commit(&mut self) {
        self.flush_on_commit();
    }

    fn lock_gate(&mut self, currency: &str, checkout_id: &str) -> Result<(), StoreError> {
        // The currency's lock, then the checkout's (see `lock_checkout`), as every transaction
        // that takes both: the subquery (OFFSET 0, so it is not flattened) yields its row, its
        // lock held, before the outer select takes the second. Advisory locks, so a gate writes
        // nothing to take them (migration 0006); they are the database's, so the currency's is
        // keyed by the schema too, as the row it replaces was, and stores in other schemas of
        // the database never queue behind it. Two currencies whose hashes meet only take turns.
        self.defer(
            "SELECT pg_advisory_xact_lock(1667720039, hashtext($2))
             FROM (SELECT pg_advisory_xact_lock(1667720040, hashtext(current_schema() || ':' || $1)) OFFSET 0) AS currency",
            &[&currency, &checkout_id],
        )
    }

    fn lock_gates(&mut self, currency: &str, checkout_ids: &[&str]) -> Result<(), StoreError> {
        // As `lock_gate`, in two statements of the same round trip: the currency's lock, then
        // the checkouts' in the order of their keys (the subquery's order is the one the locks
        // are taken in), so two batches never wait on each other's checkouts.
        self.defer(
            "SELECT pg_advisory_xact_lock(1667720040, hashtext(current_schema() || ':' || $1))",
            &[&currency],
        )?;
        self.defer(
            "SELECT pg_advisory_xact_lock(1667720039, hashtext(c))
             FROM (SELECT c FROM unnest($1::TEXT[]) AS c ORDER BY hashtext(c), c) AS ordered",
            &[&checkout_ids],
        )
    }

    fn bucket_sum(&mut self, currency: &str, from_hour: i64) -> Result<i64, StoreError> {
        let row = self.query_opt(WINDOW_SUM, &[&currency, &from_hour])?;
        match row {
            Some(row) => self.get(&row, 0),
            None => Ok(0),
        }
    }

    fn ledger_row(&mut self, checkout_id: &str) -> Result<Option<LedgerRow>, StoreError> {
        let row = self.query_opt(LEDGER_ROW, &[&checkout_id])?;
        row.map(|row| self.ledger_row_at(&row, 0)).transpose()
    }

    fn bump(
        &mut self,
        currency: &str,
        hour: i64,
        settled: i64,
        in_flight: i64,
    ) -> Result<(), StoreError> {
        self.defer(
            "INSERT INTO spend_buckets (currency, hour, settled, in_flight) VALUES ($1, $2, $3, $4)
             ON CONFLICT (currency, hour) DO UPDATE SET settled = spend_buckets.settled + excluded.settled,
                                                        in_flight = spend_buckets.in_flight + excluded.in_flight",
            &[&currency, &hour, &settled, &in_flight],
        )
    }

    fn put_reservation(
        &mut self,
        r: &Reservation<'_>,
        hour: i64,
        at_us: i64,
    ) -> Result<(), StoreError> {
        self.defer(
            "INSERT INTO ledger
                 (checkout_id, idempotency_key, merchant, currency, reserved, charged, state, hour, reserved_at, settled_at, digest, released_by, agent_profile, agent)
             VALUES ($1, $2, $3, $4, $5, NULL, 'in_flight', $6, $7, NULL, $8,
                     CASE WHEN $9 THEN 'reconcile' END, $10, $11)
             ON CONFLICT (checkout_id) DO UPDATE SET
                 idempotency_key = excluded.idempotency_key, merchant = excluded.merchant,
                 currency = excluded.currency, reserved = excluded.reserved, charged = NULL,
                 state = 'in_flight', hour = excluded.hour, reserved_at = excluded.reserved_at,
                 settled_at = NULL, digest = excluded.digest, released_by = excluded.released_by,
                 agent_profile = excluded.agent_profile, agent = excluded.agent",
            &[
                &r.checkout_id,
                &r.idempotency_key,
                &r.merchant,
                &r.currency,
                &r.total,
                &hour,
                &at_us,
                &r.digest,
                &r.revisit,
                &r.agent_profile,
                &r.agent,
            ],
        )
    }

    fn mark_settled(
        &mut self,
        checkout_id: &str,
        charged: i64,
        currency: &str,
        at_us: i64,
    ) -> Result<(), StoreError> {
        self.defer(
            "UPDATE ledger SET state = 'settled', charged = $2, currency = $3, settled_at = $4 WHERE checkout_id = $1",
            &[&checkout_id, &charged, &currency, &at_us],
        )
    }

    fn mark_released(
        &mut self,
        checkout_id: &str,
        at_us: i64,
        by: ReleasedBy,
    ) -> Result<(), StoreError> {
        self.defer(
            "UPDATE ledger SET state = 'released', settled_at = $2,
                 released_by = CASE WHEN released_by = 'reconcile' THEN 'reconcile' ELSE $3 END
             WHERE checkout_id = $1",
            &[&checkout_id, &at_us, &by.as_str()],
        )
    }

    fn released_by_reconcile(&mut self, from_us: i64) -> Result<Vec<InFlight>, StoreError> {
        self.in_flight_rows(
            "SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile, merchant FROM ledger
             WHERE state = 'released' AND released_by = 'reconcile' AND reserved_at >= $1
             ORDER BY reserved_at",
            &[&from_us],
        )
    }

    fn lock_checkout(&mut self, checkout_id: &str) -> Result<(), StoreError> {
        // A row lock cannot lock a claim that does not exist yet; an advisory lock on the id's
        // hash serializes every claim, lease, gate and settlement of one checkout across hosts
        // (another checkout sharing the hash only waits a moment more).
        self.defer(
            "SELECT pg_advisory_xact_lock(1667720039, hashtext($1))",
            &[&checkout_id],
        )
    }

    fn claim_get(&mut self, checkout_id: &str) -> Result<Option<ClaimRow>, StoreError> {
        let row = self.query_opt(CLAIM, &[&checkout_id])?;
        row.map(|row| self.claim_of(&row)).transpose()
    }

    fn claim_put(
        &mut self,
        checkout_id: &str,
        idempotency_key: &str,
        at_us: i64,
        token: i64,
    ) -> Result<(), StoreError> {
        self.defer(
            "INSERT INTO claims (checkout_id, idempotency_key, claimed_at, token) VALUES ($1, $2, $3, $4)
             ON CONFLICT (checkout_id) DO UPDATE SET idempotency_key = excluded.idempotency_key,
                                                     claimed_at = excluded.claimed_at,
                                                     token = excluded.token",
            &[&checkout_id, &idempotency_key, &at_us, &token],
        )
    }

    fn claim_delete(&mut self, checkout_id: &str) -> Result<(), StoreError> {
        self.defer("DELETE FROM claims WHERE checkout_id = $1", &[&checkout_id])
    }

    fn lease_live(&mut self, checkout_id: &str, now_us: i64) -> Result<bool, StoreError> {
        Ok(self
            .query_opt(LEASE_LIVE, &[&checkout_id, &now_us])?
            .is_some())
    }

    fn checkout_reads(
        &mut self,
        checkout_id: &str,
        claim_at_us: Option<i64>,
    ) -> Result<CheckoutReads, StoreError> {
        // With the checkout's lock queued before them (see transaction.rs), in one round trip.
        let mut answers = match &claim_at_us {
            Some(at_us) => self.query_all(&[
                (LEASE_LIVE, &[&checkout_id, at_us]),
                (LEDGER_ROW, &[&checkout_id]),
                (CLAIM, &[&checkout_id]),
                (FROZEN, &[]),
                (CHECKOUT_MADE_FOR, &[&checkout_id]),
            ])?,
            None => self.query_all(&[(LEDGER_ROW, &[&checkout_id]), (CLAIM, &[&checkout_id])])?,
        };
        let (agent, frozen) = match claim_at_us {
            Some(_) => {
                let agent = answers.pop().unwrap_or_default();
                (agent, answers.pop().unwrap_or_default())
            }
            None => (Vec::new(), Vec::new()),
        };
        let claim = answers.pop().unwrap_or_default();
        let row = answers.pop().unwrap_or_default();
        let lease = answers.pop().unwrap_or_default();
        Ok(CheckoutReads {
            lease_live: !lease.is_empty(),
            row: one_row(row)?
                .map(|row| self.ledger_row_at(&row, 0))
                .transpose()?,
            claim: one_row(claim)?.map(|row| self.claim_of(&row)).transpose()?,
            frozen: one_row(frozen)?
                .map(|row| self.frozen_of(&row))
                .transpose()?,
            agent: one_row(agent)?.map(|row| self.get(&row, 0)).transpose()?,
        })
    }

    fn lease_put(
        &mut self,
        lease_id: &str,
        checkout_id: &str,
        expires_us: i64,
    ) -> Result<(), StoreError> {
        self.defer(
            "INSERT INTO update_leases (lease_id, checkout_id, expires_at) VALUES ($1, $2, $3)",
            &[&lease_id, &checkout_id, &expires_us],
        )
    }

    fn lease_delete(&mut self, lease_id: &str) -> Result<(), StoreError> {
        self.defer(
            "DELETE FROM update_leases WHERE lease_id = $1",
            &[&lease_id],
        )
    }

    fn frozen(&mut self) -> Result<Option<(i64, String)>, StoreError> {
        let row = self.query_opt(FROZEN, &[])?;
        row.map(|row| self.frozen_of(&row)).transpose()
    }

    fn freeze_put(&mut self, at_us: i64, reason: &str) -> Result<(), StoreError> {
        self.defer(
            "INSERT INTO payment_freeze (id, frozen_at, reason) VALUES (1, $1, $2)
             ON CONFLICT (id) DO UPDATE SET reason = substr(payment_freeze.reason || '; ' || excluded.reason, 1, 2000)",
            &[&at_us, &reason],
        )
    }

    fn freeze_delete(&mut self) -> Result<(), StoreError> {
        self.defer("DELETE FROM payment_freeze WHERE id = 1", &[])
    }

    fn touch_reservation(&mut self, checkout_id: &str, at_us: i64) -> Result<(), StoreError> {
        self.defer(
            "UPDATE ledger SET reserved_at = $2 WHERE checkout_id = $1",
            &[&checkout_id, &at_us],
        )
    }

    fn window_counts(&mut self, from_hour: i64) -> Result<Vec<WindowCount>, StoreError> {
        let rows = self.query(
            "SELECT FALSE, currency, NULL::TEXT, SUM(settled + in_flight)::BIGINT FROM spend_buckets
             WHERE hour >= $1 GROUP BY currency
             UNION ALL
             SELECT TRUE, currency, agent, SUM(reserved)::BIGINT FROM ledger
             WHERE state = 'in_flight' AND hour >= $1 GROUP BY currency, agent",
            &[&from_hour],
        )?;
        rows.iter()
            .map(|row| {
                Ok(WindowCount::of(
                    self.get(row, 0)?,
                    self.get(row, 1)?,
                    self.get(row, 2)?,
                    self.get(row, 3)?,
                ))
            })
            .collect()
    }

    fn in_flight_of(&mut self, checkout_id: &str) -> Result<Option<InFlight>, StoreError> {
        Ok(self.in_flight_rows(IN_FLIGHT_OF, &[&checkout_id])?.pop())
    }

    fn released_of(&mut self, checkout_id: &str) -> Result<Option<InFlight>, StoreError> {
        Ok(self.in_flight_rows(RELEASED_OF, &[&checkout_id])?.pop())
    }

    fn in_flight(&mut self) -> Result<Vec<InFlight>, StoreError> {
        self.in_flight_rows(
            "SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile, merchant FROM ledger
             WHERE state = 'in_flight' ORDER BY reserved_at",
            &[],
        )
    }

    fn approval_documents(&mut self, id: &RequestId) -> Result<Vec<ApprovalDocument>, StoreError> {
        let rows = self.query(APPROVALS, &[&id.as_str()])?;
        let texts = rows
            .iter()
            .map(|row| self.get(row, 0))
            .collect::<Result<Vec<String>, _>>()?;
        Ok(parse_approvals(id, texts))
    }

    fn is_used(&mut self, nonce: &str) -> Result<bool, StoreError> {
        Ok(self
            .query_opt("SELECT 1 FROM used_approvals WHERE nonce = $1", &[&nonce])?
            .is_some())
    }

    fn insert_used(
        &mut self,
        nonce: &str,
        request_id: &RequestId,
        checkout_id: &str,
        at_us: i64,
    ) -> Result<(), StoreError> {
        self.defer(
            "INSERT INTO used_approvals (nonce, request_id, checkout_id, used_at) VALUES ($1, $2, $3, $4)",
            &[&nonce, &request_id.as_str(), &checkout_id, &at_us],
        )
    }

    fn upsert_pending(&mut self, p: &PendingRequest, at_us: i64) -> Result<(), StoreError> {
        let handler_ids = pending::handler_ids_json(p)?;
        self.defer(
            "INSERT INTO pending (request_id, digest, merchant, checkout_id, currency, total, handler_ids, state, created_at, updated_at, agent)
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $8, $9)
             ON CONFLICT (request_id) DO UPDATE SET
                 digest = excluded.digest, merchant = excluded.merchant, checkout_id = excluded.checkout_id,
                 currency = excluded.currency, total = excluded.total, handler_ids = excluded.handler_ids,
                 state = 'pending', updated_at = excluded.updated_at, agent = excluded.agent",
            &[
                &p.request_id.as_str(),
                &p.digest.to_hex(),
                &p.merchant,
                &p.checkout_id,
                &p.currency,
                &p.total,
                &handler_ids,
                &at_us,
                &p.agent.as_ref().map(|a| a.as_str()),
            ],
        )
    }

    fn supersede_pending(&mut self, checkout_id: &str, keep: &RequestId) -> Result<(), StoreError> {
        self.defer(
            "DELETE FROM pending WHERE checkout_id = $1 AND state = 'pending' AND request_id <> $2",
            &[&checkout_id, &keep.as_str()],
        )
    }

    fn mark_pending_used(&mut self, id: &RequestId) -> Result<(), StoreError> {
        self.defer(
            "UPDATE pending SET state = 'used' WHERE request_id = $1",
            &[&id.as_str()],
        )
    }

    fn pending_list(&mut self) -> Result<Vec<PendingRow>, StoreError> {
        let rows = self.query(
            "SELECT request_id, digest, merchant, checkout_id, currency, total, handler_ids, created_at, agent
             FROM pending WHERE state = 'pending' ORDER BY created_at, request_id",
            &[],
        )?;
        rows.iter()
            .map(|row| pending::decode(self.pending_raw(row)?))
            .collect()
    }

    fn pending_get(&mut self, id: &RequestId) -> Result<Option<PendingRow>, StoreError> {
        let row = self.query_opt(
            "SELECT request_id, digest, merchant, checkout_id, currency, total, handler_ids, created_at, agent
             FROM pending WHERE request_id = $1",
            &[&id.as_str()],
        )?;
        row.map(|row| pending::decode(self.pending_raw(&row)?))
            .transpose()
    }

    fn recent_decisions(&mut self, limit: i64) -> Result<Vec<crate::store::Decided>, StoreError> {
        let rows = self.query(
            "SELECT at, verdict, reason, merchant, currency, total, request_id FROM audit
             WHERE tool = 'complete_checkout' ORDER BY id DESC LIMIT $1",
            &[&limit],
        )?;
        rows.iter()
            .map(|r| {
                Ok(crate::store::Decided {
                    at: self.get(r, 0)?,
                    verdict: self.get(r, 1)?,
                    reason: self.get(r, 2)?,
                    merchant: self.get(r, 3)?,
                    currency: self.get(r, 4)?,
                    total: self.get(r, 5)?,
                    request_id: self.get(r, 6)?,
                })
            })
            .collect()
    }

    fn gate_reads(&mut self, keys: &GateKeys<'_>) -> Result<GateReads, StoreError> {
        // Sent in the same round trip as the locks queued before it (see transaction.rs): the
        // reads start, and take their snapshot, once those are held. The rows a lone gate writes
        // are locked by its writes, which are made in lock order (`ledger::in_lock_order` for the
        // buckets, the log's head last; docs/ARCHITECTURE.md, "Lock order"): locking them here
        // first cost a statement and a row-lock WAL record per bucket, 0.15-0.2 ms of the gate's
        // 0.9 ms.
        let agent_account = keys.agent_account.unwrap_or("");
        let request_id = keys.request_id.as_str();
        let row = self.query(
            GATE_READS,
            &[
                &keys.currency,
                &keys.from_hour,
                &agent_account,
                &keys.checkout_id,
                &request_id,
                &keys.passkeys,
            ],
        )?;
        self.gate_reads_of(keys, Some(row))
    }

    fn gate_reads_batch(&mut self, keys: &[GateKeys<'_>]) -> Result<Vec<GateReads>, StoreError> {
        // `gate_reads` for every gate in one round trip: each one's reads, then the buckets any
        // of them may write locked in one statement, then their pending rows. Unlike a lone
        // gate's, a turn's writes are not in lock order (the second gate's buckets come after the
        // first's agent account, its pending row after the first's buckets), so they are locked
        // here, in (account, hour) order across all of them, as every other transaction takes
        // buckets.
        let Some(first) = keys.first() else {
            return Ok(Vec::new());
        };
        if keys.iter().any(|k| k.currency != first.currency) {
            return Err(StoreError::Inconsistent(
                "a batch of gates held more than one currency".into(),
            ));
        }
        let agent_accounts: Vec<&str> =
            keys.iter().map(|k| k.agent_account.unwrap_or("")).collect();
        let request_ids: Vec<&str> = keys.iter().map(|k| k.request_id.as_str()).collect();
        let hours: Vec<i64> = keys.iter().map(|k| k.hour).collect();
        let checkout_ids: Vec<&str> = keys.iter().map(|k| k.checkout_id).collect();
        let reads: Vec<[&(dyn ToSql + Sync); 6]> = keys
            .iter()
            .enumerate()
            .map(|(n, k)| -> [&(dyn ToSql + Sync); 6] {
                [
                    &k.currency,
                    &k.from_hour,
                    &agent_accounts[n],
                    &k.checkout_id,
                    &request_ids[n],
                    &k.passkeys,
                ]
            })
            .collect();
        let locks: [&(dyn ToSql + Sync); 4] =
            [&first.currency, &agent_accounts, &hours, &checkout_ids];
        let pending: Vec<[&(dyn ToSql + Sync); 1]> = request_ids
            .iter()
            .map(|id| -> [&(dyn ToSql + Sync); 1] { [id] })
            .collect();
        let statements: Vec<(&'static str, &Params<'_>)> = reads
            .iter()
            .map(|params| (GATE_READS, &params[..]))
            .chain(std::iter::once((GATE_LOCKS_BATCH, &locks[..])))
            .chain(pending.iter().map(|params| (PENDING_LOCK, &params[..])))
            .collect();
        let mut answers = self.query_all(&statements)?;
        answers.truncate(keys.len());
        keys.iter()
            .zip(answers)
            .map(|(keys, rows)| self.gate_reads_of(keys, Some(rows)))
            .collect()
    }
}

impl PgTx<'_> {
    /// The gate's reads from `GATE_READS`' one row.
    fn gate_reads_of(
        &self,
        keys: &GateKeys<'_>,
        rows: Option<Vec<Row>>,
    ) -> Result<GateReads, StoreError> {
        let row = rows
            .and_then(|mut rows| rows.pop())
            .ok_or_else(|| StoreError::Inconsistent("the gate's reads returned no row".into()))?;
        let ledger_key: Option<String> = self.get(&row, 2)?;
        let frozen_at: Option<i64> = self.get(&row, 12)?;
        let claim_key: Option<String> = self.get(&row, 14)?;
        let approvals: Option<Vec<String>> = self.get(&row, 16)?;
        let passkey_texts: Option<Vec<String>> = self.get(&row, 17)?;
        Ok(GateReads {
            window_sum: self.get(&row, 0)?,
            agent_window_sum: if keys.agent_account.is_some() {
                self.get(&row, 1)?
            } else {
                0
            },
            row: match ledger_key {
                Some(_) => Some(self.ledger_row_at(&row, 2)?),
                None => None,
            },
            frozen: match frozen_at {
                Some(at) => Some((at, self.get(&row, 13)?)),
                None => None,
            },
            claim: match claim_key {
                Some(idempotency_key) => Some(ClaimRow {
                    idempotency_key,
                    claimed_at_us: self.get(&row, 15)?,
                    token: self.get(&row, 18)?,
                }),
                None => None,
            },
            approvals: parse_approvals(keys.request_id, approvals.unwrap_or_default()),
            passkey_texts: passkey_texts.unwrap_or_default(),
        })
    }
}

/// Everything `gate_reads` needs, in one statement: the window sums (global, then the agent's
/// account, `$3`, which is `''` and sums nothing without an agent), the checkout's ledger row,
/// locked as `LEDGER_ROW` locks it, the freeze, the claim, and the approval documents (the
/// passkey ones only when `$6`). Columns 2-11 are `LEDGER_ROW`'s, in its order.
const GATE_READS: &str = "SELECT
    (SELECT COALESCE(SUM(settled + in_flight), 0)::BIGINT FROM spend_buckets WHERE currency = $1 AND hour >= $2),
    (SELECT COALESCE(SUM(settled + in_flight), 0)::BIGINT FROM spend_buckets WHERE currency = $3 AND hour >= $2),
    l.idempotency_key, l.currency, l.reserved, l.charged, l.state, l.hour, l.digest, l.reserved_at,
    COALESCE(l.released_by = 'reconcile', FALSE), l.agent,
    f.frozen_at, f.reason,
    c.idempotency_key, c.claimed_at,
    (SELECT array_agg(document ORDER BY filed_at, nonce) FROM approvals WHERE request_id = $5),
    CASE WHEN $6::BOOLEAN THEN
        (SELECT array_agg(document ORDER BY filed_at, nonce) FROM passkey_approvals WHERE request_id = $5)
    END,
    c.token
 FROM (SELECT 1) AS one
 LEFT JOIN LATERAL (SELECT * FROM ledger WHERE checkout_id = $4 FOR UPDATE) AS l ON TRUE
 LEFT JOIN payment_freeze AS f ON f.id = 1
 LEFT JOIN claims AS c ON c.checkout_id = $4";

/// The buckets a turn of gates in one currency (`$1`) may change, locked in (account, hour) order
/// by bytes, the order every bucket writer writes them in (`ledger::in_lock_order`): this hour's
/// buckets of the currency and of each gate's agent account (`$2`, `''` for none, with the gate's
/// hour in `$3`), and those of each checkout's (`$4`) reservation in flight, which a new
/// reservation releases. A bucket not there yet is not locked: its first writer makes it, and
/// two writers making it at once meet in the upsert's conflict. Each is found through the
/// primary key (an `OR` across them scanned every bucket, with the ledger probed for each), and so
/// are the checkouts' ledger rows (see [`IN_FLIGHT_OF`]).
pub(super) const GATE_LOCKS_BATCH: &str = "WITH l AS MATERIALIZED (SELECT currency, hour, agent, state FROM ledger WHERE checkout_id = ANY($4::TEXT[]))
 SELECT 1 FROM spend_buckets b
 JOIN (SELECT $1::TEXT AS account, h AS hour FROM unnest($3::BIGINT[]) AS h
       UNION ALL SELECT a, h FROM unnest($2::TEXT[], $3::BIGINT[]) AS g(a, h)
       UNION ALL SELECT currency, hour FROM l WHERE state = 'in_flight'
       UNION ALL SELECT currency || '/' || agent, hour FROM l WHERE state = 'in_flight' AND agent IS NOT NULL) AS k
   ON b.currency = k.account AND b.hour = k.hour
 ORDER BY b.currency COLLATE \"C\", b.hour
 FOR UPDATE OF b";

/// The checkout's reservation in flight. Its ledger row is read by the key alone, in a
/// `MATERIALIZED` CTE, and `state` tested after: given `checkout_id = $1 AND state =
/// 'in_flight'`, the planner may answer from the partial index `ledger_in_flight`, filtering on
/// the id, a scan of every reservation in flight. Statistics taken while few are in flight make
/// that plan look cheapest, and the generic plan keeps it as they grow (it made the gate's locks
/// cost O(reservations in flight)). [`GATE_LOCKS_BATCH`] reads the rows the same way.
pub(super) const IN_FLIGHT_OF: &str = "WITH l AS MATERIALIZED (SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile, merchant, state FROM ledger WHERE checkout_id = $1)
 SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile, merchant FROM l WHERE state = 'in_flight'";

/// The checkout's ledger row if released, read as [`IN_FLIGHT_OF`] reads it: by its key alone,
/// the state tested after.
const RELEASED_OF: &str = "WITH l AS MATERIALIZED (SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile, merchant, state FROM ledger WHERE checkout_id = $1)
 SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile, merchant FROM l WHERE state = 'released'";

/// The request's pending row, which a refusal may rewrite: a turn of gates locks each before its
/// writes, since a turn writes one gate's pending row before the next gate's buckets (a lone
/// gate's refusal takes it as it writes it, after its buckets and before the log's head). Only
/// gates write pending rows, each under its checkout's lock.
const PENDING_LOCK: &str = "SELECT 1 FROM pending WHERE request_id = $1 FOR UPDATE";

const LEDGER_ROW: &str =
    "SELECT idempotency_key, currency, reserved, charged, state, hour, digest, reserved_at,
        COALESCE(released_by = 'reconcile', FALSE), agent FROM ledger
 WHERE checkout_id = $1 FOR UPDATE";
const LEASE_LIVE: &str =
    "SELECT 1 FROM update_leases WHERE checkout_id = $1 AND expires_at > $2 LIMIT 1";
const CLAIM: &str = "SELECT idempotency_key, claimed_at, token FROM claims WHERE checkout_id = $1";
const FROZEN: &str = "SELECT frozen_at, reason FROM payment_freeze WHERE id = 1";
pub(super) const MADE_FOR: &str = "SELECT agent FROM made_for_agent WHERE object = $1 AND id = $2";
const CHECKOUT_MADE_FOR: &str =
    "SELECT agent FROM made_for_agent WHERE object = 'checkout' AND id = $1";
const APPROVALS: &str =
    "SELECT document FROM approvals WHERE request_id = $1 ORDER BY filed_at, nonce";

impl PgTx<'_> {
    /// A ledger row from `LEDGER_ROW`'s columns, starting at column `at`.
    fn ledger_row_at(&self, row: &Row, at: usize) -> Result<LedgerRow, StoreError> {
        let state: String = self.get(row, at + 4)?;
        Ok(LedgerRow {
            idempotency_key: self.get(row, at)?,
            currency: self.get(row, at + 1)?,
            reserved: self.get(row, at + 2)?,
            charged: self.get(row, at + 3)?,
            state: State::parse(&state)?,
            hour: self.get(row, at + 5)?,
            digest: self.get(row, at + 6)?,
            reserved_at_us: self.get(row, at + 7)?,
            revisit: self.get(row, at + 8)?,
            agent: self.get(row, at + 9)?,
        })
    }

    /// The freeze's row (frozen at, reason), from `FROZEN`'s columns.
    fn frozen_of(&self, row: &Row) -> Result<(i64, String), StoreError> {
        Ok((self.get(row, 0)?, self.get(row, 1)?))
    }

    fn claim_of(&self, row: &Row) -> Result<ClaimRow, StoreError> {
        Ok(ClaimRow {
            idempotency_key: self.get(row, 0)?,
            claimed_at_us: self.get(row, 1)?,
            token: self.get(row, 2)?,
        })
    }
}

/// The approval documents filed for `id`, from their stored texts. As with a broken file, one
/// that does not parse is skipped: never a reason for the gate to fail or to pass.
fn parse_approvals(id: &RequestId, texts: Vec<String>) -> Vec<ApprovalDocument> {
    texts
        .into_iter()
        .filter_map(|text| match ApprovalDocument::from_json(&text) {
            Ok(doc) => Some(doc),
            Err(e) => {
                tracing::warn!(request_id = id.as_str(), error = %e,
                    "skipping a stored approval that does not parse");
                None
            }
        })
        .collect()
}

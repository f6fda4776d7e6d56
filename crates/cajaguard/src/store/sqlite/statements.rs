//! What a transaction says to SQLite: [`Tx`] in SQL, each statement prepared once and cached by
//! the connection.

use std::path::Path;

use cajaguard_core::approval::{ApprovalDocument, RequestId};
use cajaguard_core::effect::PendingRequest;
use rusqlite::{Connection, OptionalExtension, params};

use super::approval_files;
use crate::store::tx::{ClaimRow, LedgerRow, ReleasedBy, Reservation, State, Tx, WindowCount};
use crate::store::{InFlight, PendingRow, StoreError, audit, from_micros, pending};

/// The gate's window sum. It must stay a range seek on the `spend_buckets` primary key (see
/// `explain_window_query` and the scale test).
pub(super) const WINDOW_SUM: &str = "SELECT COALESCE(SUM(settled + in_flight), 0) FROM spend_buckets WHERE currency = ?1 AND hour >= ?2";

pub(super) struct SqliteTx<'a> {
    pub(super) conn: &'a Connection,
    pub(super) approvals_dir: &'a Path,
    /// Set by [`Tx::durable_on_commit`]: the WAL must be synced once this commits.
    pub(super) durable: bool,
}

impl SqliteTx<'_> {
    /// Ledger rows as [`InFlight`], from a query selecting checkout id, idempotency key,
    /// currency, reserved, reserved at and the agent's profile.
    fn in_flight_rows(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<InFlight>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let rows = stmt.query_map(params, |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, String>(6)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (
                checkout_id,
                idempotency_key,
                currency,
                total,
                reserved_at,
                agent_profile,
                merchant,
            ) = row?;
            out.push(InFlight {
                checkout_id,
                idempotency_key,
                currency,
                total,
                reserved_at: from_micros(reserved_at, "a ledger row's reserved_at")?,
                agent_profile,
                merchant,
            });
        }
        Ok(out)
    }
}

impl Tx for SqliteTx<'_> {
    fn durable_on_commit(&mut self) {
        self.durable = true;
    }

    fn lock_gate(&mut self, _currency: &str, _checkout_id: &str) -> Result<(), StoreError> {
        // BEGIN IMMEDIATE already holds the whole database's write lock.
        Ok(())
    }

    fn bucket_sum(&mut self, currency: &str, from_hour: i64) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .prepare_cached(WINDOW_SUM)?
            .query_row(params![currency, from_hour], |r| r.get(0))?)
    }

    fn ledger_row(&mut self, checkout_id: &str) -> Result<Option<LedgerRow>, StoreError> {
        let raw = self
            .conn
            .prepare_cached(
                "SELECT idempotency_key, currency, reserved, charged, state, hour, digest, reserved_at,
                        released_by = 'reconcile', agent FROM ledger WHERE checkout_id = ?1",
            )?
            .query_row([checkout_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, Option<String>>(6)?,
                    r.get::<_, i64>(7)?,
                    r.get::<_, Option<bool>>(8)?,
                    r.get::<_, Option<String>>(9)?,
                ))
            })
            .optional()?;
        raw.map(
            |(
                idempotency_key,
                currency,
                reserved,
                charged,
                state,
                hour,
                digest,
                at,
                revisit,
                agent,
            )| {
                Ok(LedgerRow {
                    idempotency_key,
                    currency,
                    reserved,
                    charged,
                    state: State::parse(&state)?,
                    hour,
                    digest,
                    reserved_at_us: at,
                    revisit: revisit.unwrap_or(false),
                    agent,
                })
            },
        )
        .transpose()
    }

    fn bump(
        &mut self,
        currency: &str,
        hour: i64,
        settled: i64,
        in_flight: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO spend_buckets (currency, hour, settled, in_flight) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (currency, hour) DO UPDATE SET settled = settled + excluded.settled,
                                                            in_flight = in_flight + excluded.in_flight",
            )?
            .execute(params![currency, hour, settled, in_flight])?;
        Ok(())
    }

    fn put_reservation(
        &mut self,
        r: &Reservation<'_>,
        hour: i64,
        at_us: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO ledger
                     (checkout_id, idempotency_key, merchant, currency, reserved, charged, state, hour, reserved_at, settled_at, digest, released_by, agent_profile, agent)
                 VALUES (?1, ?2, ?3, ?4, ?5, NULL, 'in_flight', ?6, ?7, NULL, ?8,
                         CASE WHEN ?9 THEN 'reconcile' END, ?10, ?11)",
            )?
            .execute(params![r.checkout_id, r.idempotency_key, r.merchant, r.currency, r.total, hour, at_us, r.digest, r.revisit, r.agent_profile, r.agent])?;
        Ok(())
    }

    fn mark_settled(
        &mut self,
        checkout_id: &str,
        charged: i64,
        currency: &str,
        at_us: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE ledger SET state = 'settled', charged = ?2, currency = ?3, settled_at = ?4 WHERE checkout_id = ?1",
            )?
            .execute(params![checkout_id, charged, currency, at_us])?;
        Ok(())
    }

    fn mark_released(
        &mut self,
        checkout_id: &str,
        at_us: i64,
        by: ReleasedBy,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE ledger SET state = 'released', settled_at = ?2,
                     released_by = CASE WHEN released_by = 'reconcile' THEN 'reconcile' ELSE ?3 END
                 WHERE checkout_id = ?1",
            )?
            .execute(params![checkout_id, at_us, by.as_str()])?;
        Ok(())
    }

    fn released_by_reconcile(&mut self, from_us: i64) -> Result<Vec<InFlight>, StoreError> {
        self.in_flight_rows(
            "SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile, merchant FROM ledger
             WHERE state = 'released' AND released_by = 'reconcile' AND reserved_at >= ?1
             ORDER BY reserved_at",
            &[&from_us],
        )
    }

    fn lock_checkout(&mut self, _checkout_id: &str) -> Result<(), StoreError> {
        // BEGIN IMMEDIATE already holds the whole database's write lock.
        Ok(())
    }

    fn claim_get(&mut self, checkout_id: &str) -> Result<Option<ClaimRow>, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT idempotency_key, claimed_at, token FROM claims WHERE checkout_id = ?1",
            )?
            .query_row([checkout_id], |r| {
                Ok(ClaimRow {
                    idempotency_key: r.get(0)?,
                    claimed_at_us: r.get(1)?,
                    token: r.get(2)?,
                })
            })
            .optional()?)
    }

    fn claim_put(
        &mut self,
        checkout_id: &str,
        idempotency_key: &str,
        at_us: i64,
        token: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO claims (checkout_id, idempotency_key, claimed_at, token) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![checkout_id, idempotency_key, at_us, token])?;
        Ok(())
    }

    fn claim_delete(&mut self, checkout_id: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("DELETE FROM claims WHERE checkout_id = ?1")?
            .execute([checkout_id])?;
        Ok(())
    }

    fn lease_live(&mut self, checkout_id: &str, now_us: i64) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT 1 FROM update_leases WHERE checkout_id = ?1 AND expires_at > ?2 LIMIT 1",
            )?
            .query_row(params![checkout_id, now_us], |_| Ok(()))
            .optional()?
            .is_some())
    }

    fn lease_put(
        &mut self,
        lease_id: &str,
        checkout_id: &str,
        expires_us: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO update_leases (lease_id, checkout_id, expires_at) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![lease_id, checkout_id, expires_us])?;
        Ok(())
    }

    fn lease_delete(&mut self, lease_id: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("DELETE FROM update_leases WHERE lease_id = ?1")?
            .execute([lease_id])?;
        Ok(())
    }

    fn frozen(&mut self) -> Result<Option<(i64, String)>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT frozen_at, reason FROM payment_freeze WHERE id = 1")?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    fn freeze_put(&mut self, at_us: i64, reason: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO payment_freeze (id, frozen_at, reason) VALUES (1, ?1, ?2)
                 ON CONFLICT (id) DO UPDATE SET reason = substr(reason || '; ' || excluded.reason, 1, 2000)",
            )?
            .execute(params![at_us, reason])?;
        Ok(())
    }

    fn freeze_delete(&mut self) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("DELETE FROM payment_freeze WHERE id = 1")?
            .execute([])?;
        Ok(())
    }

    fn touch_reservation(&mut self, checkout_id: &str, at_us: i64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE ledger SET reserved_at = ?2 WHERE checkout_id = ?1")?
            .execute(params![checkout_id, at_us])?;
        Ok(())
    }

    fn window_counts(&mut self, from_hour: i64) -> Result<Vec<WindowCount>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT 0, currency, NULL, SUM(settled + in_flight) FROM spend_buckets
             WHERE hour >= ?1 GROUP BY currency
             UNION ALL
             SELECT 1, currency, agent, SUM(reserved) FROM ledger
             WHERE state = 'in_flight' AND hour >= ?1 GROUP BY currency, agent",
        )?;
        let rows = stmt.query_map([from_hour], |r| {
            Ok(WindowCount::of(r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn in_flight_of(&mut self, checkout_id: &str) -> Result<Option<InFlight>, StoreError> {
        Ok(self
            .in_flight_rows(
                "SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile, merchant FROM ledger
                 WHERE checkout_id = ?1 AND state = 'in_flight'",
                &[&checkout_id],
            )?
            .pop())
    }

    fn released_of(&mut self, checkout_id: &str) -> Result<Option<InFlight>, StoreError> {
        Ok(self
            .in_flight_rows(
                "SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile, merchant FROM ledger
                 WHERE checkout_id = ?1 AND state = 'released'",
                &[&checkout_id],
            )?
            .pop())
    }

    fn in_flight(&mut self) -> Result<Vec<InFlight>, StoreError> {
        self.in_flight_rows(
            "SELECT checkout_id, idempotency_key, currency, reserved, reserved_at, agent_profile, merchant FROM ledger
             WHERE state = 'in_flight' ORDER BY reserved_at",
            &[],
        )
    }

    fn approval_documents(&mut self, id: &RequestId) -> Result<Vec<ApprovalDocument>, StoreError> {
        Ok(approval_files::load(self.approvals_dir, id)?
            .into_iter()
            .map(|(_, doc)| doc)
            .collect())
    }

    fn is_used(&mut self, nonce: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM used_approvals WHERE nonce = ?1")?
            .query_row([nonce], |_| Ok(()))
            .optional()?
            .is_some())
    }

    fn insert_used(
        &mut self,
        nonce: &str,
        request_id: &RequestId,
        checkout_id: &str,
        at_us: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO used_approvals (nonce, request_id, checkout_id, used_at) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![nonce, request_id.as_str(), checkout_id, at_us])?;
        Ok(())
    }

    fn upsert_pending(&mut self, p: &PendingRequest, at_us: i64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO pending (request_id, digest, merchant, checkout_id, currency, total, handler_ids, state, created_at, updated_at, agent)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', ?8, ?8, ?9)
                 ON CONFLICT (request_id) DO UPDATE SET
                     digest = excluded.digest, merchant = excluded.merchant, checkout_id = excluded.checkout_id,
                     currency = excluded.currency, total = excluded.total, handler_ids = excluded.handler_ids,
                     state = 'pending', updated_at = excluded.updated_at, agent = excluded.agent",
            )?
            .execute(params![
                p.request_id.as_str(),
                p.digest.to_hex(),
                p.merchant,
                p.checkout_id,
                p.currency,
                p.total,
                pending::handler_ids_json(p)?,
                at_us,
                p.agent.as_ref().map(|a| a.as_str())
            ])?;
        Ok(())
    }

    fn supersede_pending(&mut self, checkout_id: &str, keep: &RequestId) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "DELETE FROM pending WHERE checkout_id = ?1 AND state = 'pending' AND request_id <> ?2",
            )?
            .execute(params![checkout_id, keep.as_str()])?;
        Ok(())
    }

    fn mark_pending_used(&mut self, id: &RequestId) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE pending SET state = 'used' WHERE request_id = ?1")?
            .execute([id.as_str()])?;
        Ok(())
    }

    fn pending_list(&mut self) -> Result<Vec<PendingRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM pending WHERE state = 'pending' ORDER BY created_at, request_id",
            pending::COLUMNS
        ))?;
        let raw = stmt
            .query_map([], read_pending)?
            .collect::<Result<Vec<_>, _>>()?;
        raw.into_iter().map(pending::decode).collect()
    }

    fn pending_get(&mut self, id: &RequestId) -> Result<Option<PendingRow>, StoreError> {
        let raw = self
            .conn
            .prepare_cached(&format!(
                "SELECT {} FROM pending WHERE request_id = ?1",
                pending::COLUMNS
            ))?
            .query_row([id.as_str()], read_pending)
            .optional()?;
        raw.map(pending::decode).transpose()
    }

    fn recent_decisions(&mut self, limit: i64) -> Result<Vec<crate::store::Decided>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM audit WHERE tool = 'complete_checkout' ORDER BY id DESC LIMIT ?1",
            audit::DECIDED_COLUMNS
        ))?;
        let rows = stmt.query_map([limit], |r| {
            Ok(crate::store::Decided {
                at: r.get(0)?,
                verdict: r.get(1)?,
                reason: r.get(2)?,
                merchant: r.get(3)?,
                currency: r.get(4)?,
                total: r.get(5)?,
                request_id: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }
}

fn read_pending(r: &rusqlite::Row<'_>) -> rusqlite::Result<pending::Raw> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
    ))
}

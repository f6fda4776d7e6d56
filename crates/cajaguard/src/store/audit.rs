//! The audit log: one row per decision. The record type has no field for arguments, tokens or keys,
//! so nothing secret can be written here.

use rusqlite::{Connection, params};
use time::format_description::well_known::Rfc3339;

use super::{AuditRecord, StoreError, micros};

pub(super) fn insert(conn: &Connection, r: &AuditRecord) -> Result<(), StoreError> {
    let at =
        r.at.to_offset(time::UtcOffset::UTC)
            .format(&Rfc3339)
            .map_err(|e| StoreError::Inconsistent(format!("cannot format the audit time: {e}")))?;
    let latency_us = i64::try_from(r.latency.as_micros()).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "INSERT INTO audit (at, at_us, tool, verdict, reason, merchant, currency, total, request_id,
                            idempotency_key, checkout_id, latency_us, note)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?
    .execute(params![
        at,
        micros(r.at),
        r.tool,
        r.verdict,
        r.reason,
        r.merchant,
        r.currency,
        r.total,
        r.request_id,
        r.idempotency_key,
        r.checkout_id,
        latency_us,
        r.note,
    ])?;
    Ok(())
}

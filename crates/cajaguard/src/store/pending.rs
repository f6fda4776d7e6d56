//! Requests the gate blocked for a human's approval (what `approve` and `show` read).

use cajaguard_core::approval::{BasketDigest, RequestId};
use cajaguard_core::gate::PendingRequest;
use rusqlite::{Connection, OptionalExtension, params};
use time::OffsetDateTime;

use super::{PendingRow, StoreError, from_micros, micros};

const COLUMNS: &str =
    "request_id, digest, merchant, checkout_id, currency, total, handler_ids, created_at";

/// Records (or refreshes) a blocked request. Blocking again keeps the first `created_at` and makes a
/// request whose approval was used pending again.
pub(super) fn upsert(
    conn: &Connection,
    p: &PendingRequest,
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    let handler_ids = serde_json::to_string(&p.handler_ids)
        .map_err(|e| StoreError::Inconsistent(format!("cannot encode handler ids: {e}")))?;
    conn.prepare_cached(
        "INSERT INTO pending (request_id, digest, merchant, checkout_id, currency, total, handler_ids, state, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', ?8, ?8)
         ON CONFLICT (request_id) DO UPDATE SET
             digest = excluded.digest, merchant = excluded.merchant, checkout_id = excluded.checkout_id,
             currency = excluded.currency, total = excluded.total, handler_ids = excluded.handler_ids,
             state = 'pending', updated_at = excluded.updated_at",
    )?
    .execute(params![
        p.request_id.as_str(),
        p.digest.to_hex(),
        p.merchant,
        p.checkout_id,
        p.currency,
        p.total,
        handler_ids,
        micros(now)
    ])?;
    Ok(())
}

/// The request's approval was used to forward a payment: it no longer waits for anyone.
pub(super) fn mark_used(conn: &Connection, request_id: &RequestId) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE pending SET state = 'used' WHERE request_id = ?1")?
        .execute([request_id.as_str()])?;
    Ok(())
}

pub(super) fn list(conn: &Connection) -> Result<Vec<PendingRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM pending WHERE state = 'pending' ORDER BY created_at, request_id"
    ))?;
    let raw = stmt.query_map([], read)?.collect::<Result<Vec<_>, _>>()?;
    raw.into_iter().map(decode).collect()
}

pub(super) fn get(conn: &Connection, id: &RequestId) -> Result<Option<PendingRow>, StoreError> {
    let raw = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM pending WHERE request_id = ?1"
        ))?
        .query_row([id.as_str()], read)
        .optional()?;
    raw.map(decode).transpose()
}

type Raw = (String, String, String, String, String, i64, String, i64);

fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Raw> {
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

fn decode(raw: Raw) -> Result<PendingRow, StoreError> {
    let (request_id, digest, merchant, checkout_id, currency, total, handler_ids, created_at) = raw;
    let bad =
        |what: &str| StoreError::Inconsistent(format!("pending request {request_id:?} has {what}"));
    let parsed_id = RequestId::parse(&request_id).map_err(|_| bad("a malformed request id"))?;
    let digest = digest_from_hex(&digest).ok_or_else(|| bad("a malformed digest"))?;
    let handler_ids: Vec<String> =
        serde_json::from_str(&handler_ids).map_err(|_| bad("malformed handler ids"))?;
    let created_at = from_micros(created_at, "a pending request's created_at")?;
    Ok(PendingRow {
        request: PendingRequest {
            request_id: parsed_id,
            digest,
            merchant,
            checkout_id,
            currency,
            total,
            handler_ids,
        },
        created_at,
    })
}

pub(super) fn digest_from_hex(text: &str) -> Option<BasketDigest> {
    let bytes = hex::decode(text).ok()?;
    Some(BasketDigest(<[u8; 32]>::try_from(bytes.as_slice()).ok()?))
}

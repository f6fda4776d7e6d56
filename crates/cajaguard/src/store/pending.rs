//! Requests the gate blocked for a human's approval (what `approve` and `show` read): how a stored
//! row turns back into a [`PendingRequest`], whichever backend stored it.

use cajaguard_core::agent::AgentId;
use cajaguard_core::approval::{BasketDigest, RequestId};
use cajaguard_core::effect::PendingRequest;
use cajaguard_core::request::Instrument;

use super::{PendingRow, StoreError, from_micros};

/// The columns every backend selects, in this order.
pub(super) const COLUMNS: &str =
    "request_id, digest, merchant, checkout_id, currency, total, handler_ids, created_at, agent";

/// A row as read: request id, digest (hex), merchant, checkout id, currency, total, handler ids
/// (JSON array), created at (µs), agent (schema 5 on).
pub(super) type Raw = (
    String,
    String,
    String,
    String,
    String,
    i64,
    String,
    i64,
    Option<String>,
);

/// The instruments as the `handler_ids` column keeps them: a JSON array of `{id, handler_id}`
/// (schema version 1 kept bare handler ids, which still read).
pub(super) fn handler_ids_json(p: &PendingRequest) -> Result<String, StoreError> {
    serde_json::to_string(&p.instruments)
        .map_err(|e| StoreError::Inconsistent(format!("cannot encode instruments: {e}")))
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum StoredInstrument {
    Instrument(Instrument),
    Handler(String),
}

pub(super) fn decode(raw: Raw) -> Result<PendingRow, StoreError> {
    let (
        request_id,
        digest,
        merchant,
        checkout_id,
        currency,
        total,
        handler_ids,
        created_at,
        agent,
    ) = raw;
    let bad =
        |what: &str| StoreError::Inconsistent(format!("pending request {request_id:?} has {what}"));
    let parsed_id = RequestId::parse(&request_id).map_err(|_| bad("a malformed request id"))?;
    let digest = digest_from_hex(&digest).ok_or_else(|| bad("a malformed digest"))?;
    let stored: Vec<StoredInstrument> =
        serde_json::from_str(&handler_ids).map_err(|_| bad("malformed instruments"))?;
    let instruments = stored
        .into_iter()
        .map(|s| match s {
            StoredInstrument::Instrument(i) => i,
            StoredInstrument::Handler(h) => Instrument::of_handler(h),
        })
        .collect();
    let created_at = from_micros(created_at, "a pending request's created_at")?;
    let agent = agent
        .map(|a| AgentId::parse(&a).map_err(|_| bad("a malformed agent id")))
        .transpose()?;
    Ok(PendingRow {
        request: PendingRequest {
            request_id: parsed_id,
            digest,
            merchant,
            checkout_id,
            currency,
            total,
            instruments,
            agent,
        },
        created_at,
    })
}

pub(super) fn digest_from_hex(text: &str) -> Option<BasketDigest> {
    BasketDigest::from_hex(text)
}

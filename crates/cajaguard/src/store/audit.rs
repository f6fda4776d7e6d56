//! The audit log: one row per decision. The record type has no field for arguments, tokens or keys,
//! so nothing secret can be written here. The backends write these columns.

use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::StoreError;

/// One audited decision (never a secret: no tokens, no card numbers, no arguments).
#[derive(Debug, Clone)]
pub struct AuditRecord {
    pub at: OffsetDateTime,
    pub tool: String,
    pub verdict: String,
    pub reason: String,
    pub merchant: Option<String>,
    pub currency: Option<String>,
    pub total: Option<i64>,
    pub request_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub checkout_id: Option<String>,
    pub latency: Duration,
    /// Free text without secrets (e.g. "shop charged 9900, quoted 8900").
    pub note: Option<String>,
}

impl AuditRecord {
    /// A record for `tool` at `at`; the caller fills in what it knows.
    pub fn new(at: OffsetDateTime, tool: &str) -> AuditRecord {
        AuditRecord {
            at,
            tool: tool.to_owned(),
            verdict: String::new(),
            reason: String::new(),
            merchant: None,
            currency: None,
            total: None,
            request_id: None,
            idempotency_key: None,
            checkout_id: None,
            latency: Duration::ZERO,
            note: None,
        }
    }
}

/// The audit row's `at` (RFC 3339, UTC) and `latency_us`.
pub(super) fn columns(r: &AuditRecord) -> Result<(String, i64), StoreError> {
    let at =
        r.at.to_offset(time::UtcOffset::UTC)
            .format(&Rfc3339)
            .map_err(|e| StoreError::Inconsistent(format!("cannot format the audit time: {e}")))?;
    let latency_us = i64::try_from(r.latency.as_micros()).unwrap_or(i64::MAX);
    Ok((at, latency_us))
}

//! The audit log: one row per decision. The record type has no field for arguments, tokens or keys,
//! so nothing secret can be written here. The backends write these columns.

use time::format_description::well_known::Rfc3339;

use super::{AuditRecord, StoreError};

/// The audit row's `at` (RFC 3339, UTC) and `latency_us`.
pub(super) fn columns(r: &AuditRecord) -> Result<(String, i64), StoreError> {
    let at =
        r.at.to_offset(time::UtcOffset::UTC)
            .format(&Rfc3339)
            .map_err(|e| StoreError::Inconsistent(format!("cannot format the audit time: {e}")))?;
    let latency_us = i64::try_from(r.latency.as_micros()).unwrap_or(i64::MAX);
    Ok((at, latency_us))
}

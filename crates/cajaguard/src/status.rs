//! The status document: the same JSON for `cajaguard status --json` and the `cajaguard_status` tool.

use cajaguard_core::approval::TrustedKeys;
use cajaguard_core::money::{self, Currency};
use cajaguard_core::policy::{Mode, Policy};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::store::{PendingRow, Store, StoreError, WindowSpend};

/// The document with the trusted keys read from the policy's files. A key that cannot be read
/// counts as no key: no approval then verifies, so every stored request still counts as waiting,
/// which is what the gate would do with it too.
pub fn document(policy: &Policy, store: &Store, now: OffsetDateTime) -> Result<Value, StoreError> {
    let trusted = crate::keys::counted_trusted_keys(policy).unwrap_or_default();
    document_with(policy, store, &trusted, now)
}

/// The document, `pending` holding only the requests still waiting for a human's decision
/// (approved-but-unused and denied ones are decided; SPEC §7).
pub fn document_with(
    policy: &Policy,
    store: &Store,
    trusted: &TrustedKeys,
    now: OffsetDateTime,
) -> Result<Value, StoreError> {
    let spend = store.window_spend(policy.window, now)?;
    let mut caps = serde_json::Map::new();
    for (code, cap) in &policy.caps {
        let used = spend.get(code).copied().unwrap_or_default();
        caps.insert(
            code.clone(),
            cap_entry(
                cap.currency,
                cap.approval_above,
                cap.per_transaction,
                cap.window,
                used,
            ),
        );
    }
    let pending: Vec<Value> = store
        .awaiting_decision(
            trusted,
            policy.approvals.passkey_relying_party().as_ref(),
            now,
            policy.approvals.max_ttl,
        )?
        .iter()
        .map(pending_entry)
        .collect();
    let frozen = match store.frozen()? {
        Some(frozen) => json!({ "at": frozen.stamp(), "reason": frozen.reason }),
        None => Value::Null,
    };
    Ok(json!({
        "frozen": frozen,
        "mode": match policy.mode { Mode::Test => "test", Mode::Live => "live" },
        "window_hours": policy.window.as_secs() / 3600,
        "merchants": policy.merchants,
        "caps": caps,
        "pending": pending,
    }))
}

/// One request as `status` and `pending --json` list it.
pub fn pending_entry(row: &PendingRow) -> Value {
    let request = &row.request;
    let total = match Currency::from_code(&request.currency) {
        Ok(currency) => Value::String(money::format_major(request.total, currency)),
        Err(_) => Value::Null,
    };
    json!({
        "request_id": request.request_id.as_str(),
        "merchant": request.merchant,
        "checkout_id": request.checkout_id,
        "currency": request.currency,
        "total": total,
        "total_minor": request.total,
        "created_at": row.created_at.format(&Rfc3339).unwrap_or_default(),
    })
}

fn cap_entry(
    currency: Currency,
    approval_above: i64,
    per_transaction: i64,
    window: i64,
    used: WindowSpend,
) -> Value {
    let major = |minor: i64| money::format_major(minor, currency);
    let remaining = window
        .saturating_sub(used.settled)
        .saturating_sub(used.in_flight)
        .max(0);
    json!({
        "approval_above": major(approval_above),
        "per_transaction": major(per_transaction),
        "window": major(window),
        "spent": major(used.settled),
        "in_flight": major(used.in_flight),
        "remaining": major(remaining),
        "spent_minor": used.settled,
        "in_flight_minor": used.in_flight,
        "remaining_minor": remaining,
    })
}

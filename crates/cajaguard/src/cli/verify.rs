//! `cajaguard verify <id> --config FILE`: 0 approved, 3 pending/invalid/used/expired, 4 denied.

use std::path::Path;

use super::{Failure, Outcome};
use crate::store::ApprovalStatus;

pub fn run(id: &str, config: &Path) -> Outcome {
    let policy = super::load_policy(config)?;
    let trusted = super::load_trusted(&policy)?;
    let id = super::parse_request_id(id)?;
    let store = super::open_store(&policy)?;
    let status = store
        .approval_status(
            &id,
            &trusted,
            time::OffsetDateTime::now_utc(),
            policy.approvals.max_ttl,
        )
        .map_err(|e| Failure::unexpected(e.to_string()))?;
    let (word, code) = match status {
        ApprovalStatus::Approved => ("approved", 0),
        ApprovalStatus::Pending => ("pending", 3),
        ApprovalStatus::Used => ("used", 3),
        ApprovalStatus::Invalid => ("invalid", 3),
        ApprovalStatus::Denied => ("denied", 4),
    };
    println!("{id}: {word}");
    Ok(code)
}

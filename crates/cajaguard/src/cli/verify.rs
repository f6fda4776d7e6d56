//! `cajaguard verify <id> --config FILE [--json]`: 0 approved, 3 pending/invalid/used/expired,
//! 4 denied.

use serde_json::json;

use super::output::{json_outcome, print_json};
use super::{Exit, Failure, IdArgs, Outcome};
use crate::store::ApprovalStatus;

pub fn run(args: &IdArgs) -> Outcome {
    json_outcome(args.json, verify(args))
}

fn verify(args: &IdArgs) -> Outcome {
    let id = super::parse_request_id(&args.id)?;
    let policy = super::load_policy(&args.config)?;
    let trusted = super::load_trusted(&policy)?;
    let store = super::open_store(&policy)?;
    let status = store
        .approval_status(
            &id,
            &trusted,
            policy.approvals.passkey_relying_party().as_ref(),
            time::OffsetDateTime::now_utc(),
            policy.approvals.max_ttl,
        )
        .map_err(Failure::from)?;
    let exit = match status {
        ApprovalStatus::Approved => Exit::Done,
        ApprovalStatus::Denied => Exit::Denied,
        ApprovalStatus::Pending | ApprovalStatus::Used | ApprovalStatus::Invalid => Exit::Refused,
    };
    if args.json {
        print_json(&json!({ "request_id": id.as_str(), "status": status.as_str() }))?;
    } else {
        println!("{id}: {}", status.as_str());
    }
    Ok(exit)
}

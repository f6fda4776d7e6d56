//! CajaGuard's own tools: `cajaguard_status`, `cajaguard_approval_status` (both read only) and
//! `cajaguard_freeze` (an agent may stop payments, never start them). For an agent of the
//! service (`Proxy::session`) the two read-only tools show only that agent's own requests.

use cajaguard_core::approval::RequestId;

use super::{Answer, Proxy, tool_result, tools};
use crate::store::{ApprovalStatus, FrozenBy, StoreError};

impl Proxy {
    /// `cajaguard_freeze`: an agent may stop payments; nothing an agent calls starts them again.
    pub(super) fn freeze_tool(&self, arguments: &serde_json::Value) -> Answer {
        let reason = arguments
            .get("reason")
            .and_then(|v| v.as_str())
            .map(cajaguard_core::display::audit)
            .map(cajaguard_core::tripwire::withhold_secrets)
            .unwrap_or_else(|| "frozen by the agent".to_owned());
        let mut record = self.audit_record(tools::FREEZE_TOOL);
        record.note = Some(reason.clone());
        match self
            .store
            .freeze(&reason, FrozenBy::Agent, (self.clock)(), &record)
        {
            Ok(frozen) => tool_result(
                &serde_json::json!({
                    "frozen": { "at": frozen.stamp(), "reason": frozen.reason },
                    "next": "a human runs `cajaguard unfreeze --config FILE` to let payments through again",
                }),
                false,
            ),
            Err(e) => store_failed(&e),
        }
    }

    /// `cajaguard_status`: on stdio the global document; for an agent of the service, its own
    /// caps, headroom and requests beside the global caps, never another agent's (SPEC §13).
    pub(super) fn status_tool(&self) -> Answer {
        let now = (self.clock)();
        let document = match &self.agent {
            None => crate::status::document_with(&self.policy, &self.store, &self.trusted, now),
            Some(agent) => crate::status::document_for_agent(
                &self.policy,
                &self.store,
                &self.trusted,
                agent,
                now,
            ),
        };
        match document {
            Ok(document) => tool_result(&document, false),
            Err(e) => store_failed(&e),
        }
    }

    pub(super) fn approval_status_tool(&self, arguments: &serde_json::Value) -> Answer {
        let status = match arguments
            .get("request_id")
            .and_then(|v| v.as_str())
            .map(RequestId::parse)
        {
            Some(Ok(request_id)) => {
                // An agent of the service learns nothing of another agent's request: an id that
                // is not one of its own pending requests reads as unknown (SPEC §13).
                if let Some(agent) = &self.agent {
                    match self.store.pending_request(&request_id) {
                        Ok(Some(row)) if row.request.agent.as_ref() == Some(agent) => {}
                        Ok(_) => {
                            return tool_result(
                                &serde_json::json!({ "status": ApprovalStatus::Invalid.as_str() }),
                                false,
                            );
                        }
                        Err(e) => return store_failed(&e),
                    }
                }
                match self.store.approval_status(
                    &request_id,
                    &self.trusted,
                    self.policy.approvals.passkey_relying_party().as_ref(),
                    (self.clock)(),
                    self.policy.approvals.max_ttl,
                ) {
                    Ok(status) => status,
                    Err(e) => return store_failed(&e),
                }
            }
            _ => ApprovalStatus::Invalid,
        };
        tool_result(&serde_json::json!({ "status": status.as_str() }), false)
    }
}

/// The answer of one of these tools when the store failed: what kind of failure, for the agent
/// (`StoreError::for_agent`); the error itself, which names the home or the database, goes to
/// the log.
fn store_failed(e: &StoreError) -> Answer {
    tracing::error!("store failed on one of CajaGuard's own tools: {e}");
    tool_result(&serde_json::json!({ "error": e.for_agent() }), true)
}

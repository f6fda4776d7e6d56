//! CajaGuard's own tools: `cajaguard_status`, `cajaguard_approval_status` (both read only) and
//! `cajaguard_freeze` (an agent may stop payments, never start them).

use cajaguard_core::approval::RequestId;

use super::{Answer, Proxy, tool_result, tools};
use crate::store::{ApprovalStatus, FrozenBy};

impl Proxy {
    /// `cajaguard_freeze`: an agent may stop payments; nothing an agent calls starts them again.
    pub(super) fn freeze_tool(&self, arguments: &serde_json::Value) -> Answer {
        let reason = arguments
            .get("reason")
            .and_then(|v| v.as_str())
            .map(cajaguard_core::display::audit)
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
            Err(e) => tool_result(&serde_json::json!({"error": e.to_string()}), true),
        }
    }

    pub(super) fn status_tool(&self) -> Answer {
        match crate::status::document_with(&self.policy, &self.store, &self.trusted, (self.clock)())
        {
            Ok(document) => tool_result(&document, false),
            Err(e) => tool_result(&serde_json::json!({"error": e.to_string()}), true),
        }
    }

    pub(super) fn approval_status_tool(&self, arguments: &serde_json::Value) -> Answer {
        let status = match arguments
            .get("request_id")
            .and_then(|v| v.as_str())
            .map(RequestId::parse)
        {
            Some(Ok(request_id)) => {
                match self.store.approval_status(
                    &request_id,
                    &self.trusted,
                    self.policy.approvals.passkey_relying_party().as_ref(),
                    (self.clock)(),
                    self.policy.approvals.max_ttl,
                ) {
                    Ok(status) => status,
                    Err(e) => {
                        return tool_result(&serde_json::json!({"error": e.to_string()}), true);
                    }
                }
            }
            _ => ApprovalStatus::Invalid,
        };
        tool_result(&serde_json::json!({ "status": status.as_str() }), false)
    }
}

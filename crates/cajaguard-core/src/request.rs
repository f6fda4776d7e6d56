//! The agent's `complete_checkout` arguments: shape (SPEC §4.2) and the fields a platform may send on
//! complete (§4.3). The numbers in it are never used.

use crate::gate::Ruling;

/// Fields of `checkout` that UCP lets a platform send on complete (`ucp_request` is not `omit` for
/// complete in the pinned `checkout.json`); extension objects (names with a `.` or known extensions
/// such as `ap2`) are allowed too. A test derives this list from the pinned schema.
pub const PLATFORM_FIELDS_ON_COMPLETE: &[&str] = &["payment", "signals", "attribution"];

/// A complete request that passed §4.1-4.3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompleteRequest {
    pub checkout_id: String,
    pub idempotency_key: String,
    pub agent_profile: String,
    /// `checkout.payment.instruments[].handler_id`, in order.
    pub handler_ids: Vec<String>,
}

impl CompleteRequest {
    /// Steps 2-3 only (the tripwire is [`crate::tripwire`]). Refusals: `bad_request`,
    /// `request_field_not_allowed` (detail names the fields).
    pub fn from_args(args: &serde_json::Value) -> Result<CompleteRequest, Ruling> {
        todo!("{args}")
    }
}

//! What the store hands back: where an approval was filed, pending requests as stored, an
//! approval's status, window spend, reservations in flight.

use std::path::PathBuf;

use cajaguard_core::effect::PendingRequest;
use time::OffsetDateTime;

/// Where `write_approval` filed a signed approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FiledApproval {
    /// A file in `<home>/approvals/` (SQLite store).
    File(PathBuf),
    /// The `approvals` table of the shared store (its redacted address).
    Database(String),
}

impl std::fmt::Display for FiledApproval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FiledApproval::File(path) => write!(f, "{}", path.display()),
            FiledApproval::Database(store) => write!(f, "filed in the shared store {store}"),
        }
    }
}

/// A pending request as stored, with what `approve` shows.
#[derive(Debug, Clone)]
pub struct PendingRow {
    pub request: PendingRequest,
    pub created_at: OffsetDateTime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Used,
    Denied,
    Invalid,
}

impl ApprovalStatus {
    /// The wire form of `cajaguard_approval_status`: `pending`, `approved`, `used`, `denied`, `invalid`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Used => "used",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Invalid => "invalid",
        }
    }
}

/// Spend per currency inside the window, minor units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowSpend {
    pub settled: i64,
    pub in_flight: i64,
}

/// A reservation whose outcome is unknown (for reconciliation).
#[derive(Debug, Clone)]
pub struct InFlight {
    pub checkout_id: String,
    pub idempotency_key: String,
    pub currency: String,
    pub total: i64,
    /// When the payment was last forwarded: the reservation, or a later retry of it.
    pub reserved_at: OffsetDateTime,
    /// The paying agent's UCP profile (`None` on rows from schema version 1).
    pub agent_profile: Option<String>,
    /// The merchant the gate allowed it for (the quote's, from the shop's own URLs).
    pub merchant: String,
}

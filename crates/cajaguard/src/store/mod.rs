//! The durable store under `home` (SPEC §8): the spend ledger, pending requests, used approvals and the
//! audit log in SQLite (WAL), and signed approvals as JSON files in `<home>/approvals/`.
//!
//! Every gate decision happens inside one `BEGIN IMMEDIATE` transaction: read the ledger view, call the
//! pure `decide`, apply its effect (reserve, mark the approval used, record the pending request), write
//! the audit record, commit. No `.await`, no network inside it. Two processes sharing a home therefore
//! can never together pass a cap or use one approval twice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cajaguard_core::approval::{ApprovalDocument, RequestId, TrustedKeys};
use cajaguard_core::gate::{ApprovalCandidate, LedgerView, Outcome, PendingRequest};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use cajaguard_core::settle::Settlement;
use time::OffsetDateTime;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the CajaGuard home {}: {source}", path.display())]
    Open { path: PathBuf, source: std::io::Error },
    #[error("the CajaGuard home {} is unsafe: {why}", path.display())]
    Unsafe { path: PathBuf, why: String },
    #[error("the store's database failed: {0}")]
    Database(#[from] rusqlite::Error),
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
}

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
    pub reserved_at: OffsetDateTime,
}

pub struct Store {
    home: PathBuf,
}

impl Store {
    /// Opens (creating if missing, 0700) the home and its database, and `approvals/`.
    pub fn open(home: &Path) -> Result<Store, StoreError> {
        todo!("{}", home.display())
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    /// SPEC §4 steps 9-12, atomically. `decide` is called exactly once, inside the transaction, with
    /// the ledger view for `quote.currency`/`request.checkout_id` over `window` before `now`, and the
    /// approvals found for `request_id` (files in `approvals/` plus their used flag). The outcome's
    /// effect is applied and `audit` written before commit. If anything fails, nothing is applied and
    /// the error is returned: the caller refuses (fail closed).
    pub fn gate(
        &self,
        request: &CompleteRequest,
        quote: &Quote,
        request_id: &RequestId,
        window: Duration,
        now: OffsetDateTime,
        decide: &mut dyn FnMut(&LedgerView, &[ApprovalCandidate]) -> Outcome,
        audit: &AuditRecord,
    ) -> Result<Outcome, StoreError> {
        todo!("{request:?} {quote:?} {request_id} {window:?} {now} {audit:?} {}", decide as *const _ as *const () as usize)
    }

    /// Ends the reservation of `checkout_id`/`idempotency_key` as `settlement` says (Unknown: no change).
    pub fn settle(
        &self,
        checkout_id: &str,
        idempotency_key: &str,
        settlement: &Settlement,
        now: OffsetDateTime,
    ) -> Result<(), StoreError> {
        todo!("{checkout_id} {idempotency_key} {settlement:?} {now}")
    }

    /// An audit record for a decision made outside [`Store::gate`] (precheck refusals, other tools).
    pub fn audit(&self, record: &AuditRecord) -> Result<(), StoreError> {
        todo!("{record:?}")
    }

    pub fn window_spend(&self, window: Duration, now: OffsetDateTime) -> Result<BTreeMap<String, WindowSpend>, StoreError> {
        todo!("{window:?} {now}")
    }

    pub fn pending(&self) -> Result<Vec<PendingRow>, StoreError> {
        todo!()
    }

    pub fn pending_request(&self, id: &RequestId) -> Result<Option<PendingRow>, StoreError> {
        todo!("{id}")
    }

    pub fn approval_status(
        &self,
        id: &RequestId,
        trusted: &TrustedKeys,
        now: OffsetDateTime,
        max_ttl: Duration,
    ) -> Result<ApprovalStatus, StoreError> {
        todo!("{id} {trusted:?} {now} {max_ttl:?}")
    }

    /// Writes `doc` to `approvals/<request_id>-<nonce prefix>.json` atomically (temp file, fsync,
    /// rename, fsync dir), mode 0600, never overwriting.
    pub fn write_approval(&self, doc: &ApprovalDocument) -> Result<PathBuf, StoreError> {
        todo!("{doc:?}")
    }

    pub fn in_flight(&self) -> Result<Vec<InFlight>, StoreError> {
        todo!()
    }
}

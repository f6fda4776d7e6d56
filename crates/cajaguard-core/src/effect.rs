//! What the gate asks the store to do, and what the store tells the gate: the ledger's view of a
//! checkout, the approvals found for a request, the pending request to record, and the [`Effect`]
//! the store applies atomically with the read that produced the view.

use crate::agent::AgentId;
use crate::approval::ApprovalDocument;
use crate::digest::{BasketDigest, RequestId};
use crate::freeze::Frozen;
use crate::passkey::{PasskeyApproval, RegisteredPasskey};
use crate::request::Instrument;
use crate::verdict::Ruling;

/// The ledger's state for the checkout being decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckoutLedger {
    /// Never reserved, or every earlier attempt was released.
    Fresh,
    /// Reserved; the outcome of the attempt with this idempotency key is not known yet. `digest`
    /// is the request digest the reservation was made for (`None` for a row written before
    /// digests were stored: no retry can match it).
    InFlight {
        idempotency_key: String,
        total: i64,
        digest: Option<BasketDigest>,
    },
    /// The shop reported it completed; its spend is counted.
    Settled { total: i64 },
}

/// What the store knows, read inside the same transaction that will apply the [`Effect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerView {
    /// Settled and in-flight spend in the quote's currency over the window, in minor units,
    /// **excluding** this checkout's own entry.
    pub window_spent: i64,
    /// The same for the paying agent's own spend (SPEC §13); 0 without an agent.
    pub agent_window_spent: i64,
    pub checkout: CheckoutLedger,
    /// Payments are frozen (SPEC §7), read in the same transaction.
    pub frozen: Option<Frozen>,
}

/// A signed approval found for this request id, and whether the store has seen it used.
#[derive(Debug, Clone)]
pub struct ApprovalCandidate {
    pub document: ApprovalDocument,
    pub used: bool,
}

/// A passkey approval found for this request id (SPEC §6), the registered passkey its assertion
/// names as read in the gate's transaction (`None`: no such passkey here), and whether its nonce
/// was used.
#[derive(Debug, Clone)]
pub struct PasskeyCandidate {
    pub document: PasskeyApproval,
    pub passkey: Option<RegisteredPasskey>,
    pub used: bool,
}

/// The signature counter a passkey approval moved on. The store keeps `to` only if the passkey
/// still holds `from` (compare-and-set): two uses that both read `from` cannot both pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasskeyCounter {
    pub credential_id: Vec<u8>,
    pub from: u32,
    pub to: u32,
}

/// The pending request the store writes when the gate blocks (so `approve` can show it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRequest {
    pub request_id: RequestId,
    pub digest: BasketDigest,
    pub merchant: String,
    pub checkout_id: String,
    pub currency: String,
    pub total: i64,
    /// The complete request's payment instruments (id and handler, never the credential).
    pub instruments: Vec<Instrument>,
    /// The agent that asked, through the service (SPEC §13).
    pub agent: Option<AgentId>,
}

impl PendingRequest {
    /// The handler of each instrument, in order (what `approve` shows).
    pub fn handler_ids(&self) -> Vec<&str> {
        self.instruments
            .iter()
            .map(|i| i.handler_id.as_str())
            .collect()
    }
}

/// What the store must do, atomically with the read that produced the [`LedgerView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Forward the call: reserve `total` against `currency` for this checkout and idempotency key
    /// (with the request digest, so a retry can be matched to it), and mark the approval with this
    /// nonce used (if any); for a passkey approval, move its passkey's counter on.
    Forward {
        currency: String,
        total: i64,
        merchant: String,
        digest: BasketDigest,
        use_approval_nonce: Option<String>,
        advance_passkey: Option<PasskeyCounter>,
    },
    /// Forward again without a new reservation or approval (idempotent retry, §4.13).
    Retry,
    /// Refuse; when blocked for approval, record the pending request.
    Refuse { pending: Option<PendingRequest> },
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub ruling: Ruling,
    pub effect: Effect,
}

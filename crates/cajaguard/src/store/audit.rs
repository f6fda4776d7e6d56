//! The audit log: one row per decision, settlement, freeze, unfreeze, passkey change and config
//! load; each row is a leaf of the log's Merkle tree (`log.rs`). A row is an
//! [`AuditEvent`] (what happened, typed, so no writer can misspell a verdict) and an
//! [`AuditRecord`] (what was known about the call). The record has no field for arguments, tokens
//! or keys, so nothing secret can be written here. The backends write these columns.

use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use cajaguard_core::audit_log::Leaf;
use cajaguard_core::settle::Settlement;
use cajaguard_core::tripwire::withhold_secrets;
use cajaguard_core::verdict::Reason;

use super::{ReleasedBy, StoreError};

/// What an audit row says happened: its `verdict` and `reason` columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditEvent {
    /// The gate's ruling on a call (the verdict follows from the reason).
    Ruled(Reason),
    /// What became of a forwarded payment.
    Settled(SettledAs),
    /// Payments were frozen.
    Frozen(FrozenBy),
    /// A human unfroze payments.
    Unfrozen,
    /// A passkey of the approval page changed (SPEC §8: registrations are audit records).
    Passkey(PasskeyEvent),
    /// An agent of the service was given a token, or lost it (SPEC §13).
    Agent(AgentEvent),
    /// A process loaded the config (its SHA-256 is the record's note, SPEC §8).
    ConfigLoaded,
}

/// What happened to an agent's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentEvent {
    Added,
    Removed,
}

/// What happened to the approval page's passkeys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasskeyEvent {
    /// `cajaguard passkey add` issued a one-time registration link.
    LinkIssued,
    /// A passkey was registered through a link.
    Registered,
    /// `cajaguard passkey remove`.
    Removed,
}

/// How a forwarded payment's outcome became known, and what it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettledAs {
    /// The shop's answer: completed as quoted.
    Completed,
    /// The shop's answer: completed, but not as quoted (counted as charged; payments freeze).
    ChargedDiffers,
    /// The shop's word that nothing was paid: the reservation is released.
    Released,
    /// No answer that tells: the reservation and the claim stay.
    OutcomeUnknown,
    /// Reconciliation read the checkout completed.
    ReconciledCompleted,
    /// Reconciliation read the checkout open or canceled: the reservation is released.
    ReconciledReleased,
}

impl SettledAs {
    /// What a settlement learned from the shop's answer (`Shop`) or by reconciliation says.
    pub fn of(settlement: &Settlement, learned_by: ReleasedBy) -> SettledAs {
        match (settlement, learned_by) {
            (Settlement::Unknown, _) => SettledAs::OutcomeUnknown,
            (Settlement::Completed(_), ReleasedBy::Reconcile) => SettledAs::ReconciledCompleted,
            (Settlement::Released, ReleasedBy::Reconcile) => SettledAs::ReconciledReleased,
            (Settlement::Completed(charge), ReleasedBy::Shop) if charge.differs() => {
                SettledAs::ChargedDiffers
            }
            (Settlement::Completed(_), ReleasedBy::Shop) => SettledAs::Completed,
            (Settlement::Released, ReleasedBy::Shop) => SettledAs::Released,
        }
    }
}

/// Who or what froze payments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrozenBy {
    /// `cajaguard freeze`.
    Human,
    /// The `cajaguard_freeze` tool.
    Agent,
    /// A settlement that differed from its quote.
    ChargedDiffers,
}

impl AuditEvent {
    /// The `verdict` column: a ruling's verdict, or `settled`, `frozen`, `unfrozen`.
    pub fn verdict(self) -> &'static str {
        match self {
            AuditEvent::Ruled(reason) => reason.verdict().as_str(),
            AuditEvent::Settled(_) => "settled",
            AuditEvent::Frozen(_) => "frozen",
            AuditEvent::Unfrozen => "unfrozen",
            AuditEvent::Passkey(_) => "passkey",
            AuditEvent::Agent(_) => "agent",
            AuditEvent::ConfigLoaded => "config",
        }
    }

    /// The `reason` column.
    pub fn reason(self) -> &'static str {
        match self {
            AuditEvent::Ruled(reason) => reason.as_str(),
            AuditEvent::Settled(SettledAs::Completed) => "completed",
            AuditEvent::Settled(SettledAs::ChargedDiffers) => "charged_differs",
            AuditEvent::Settled(SettledAs::Released) => "released",
            AuditEvent::Settled(SettledAs::OutcomeUnknown) => "outcome_unknown",
            AuditEvent::Settled(SettledAs::ReconciledCompleted) => "reconciled_completed",
            AuditEvent::Settled(SettledAs::ReconciledReleased) => "reconciled_released",
            AuditEvent::Frozen(FrozenBy::Human) => "frozen_by_human",
            AuditEvent::Frozen(FrozenBy::Agent) => "frozen_by_agent",
            AuditEvent::Frozen(FrozenBy::ChargedDiffers) => "charged_differs",
            AuditEvent::Unfrozen => "unfrozen_by_human",
            AuditEvent::Agent(AgentEvent::Added) => "agent_added",
            AuditEvent::Agent(AgentEvent::Removed) => "agent_removed",
            AuditEvent::Passkey(PasskeyEvent::LinkIssued) => "passkey_link_issued",
            AuditEvent::Passkey(PasskeyEvent::Registered) => "passkey_registered",
            AuditEvent::Passkey(PasskeyEvent::Removed) => "passkey_removed",
            AuditEvent::ConfigLoaded => "config_loaded",
        }
    }
}

/// One gate decision as the audit log has it (what the approval page's status view lists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// RFC 3339, UTC.
    pub at: String,
    pub verdict: String,
    pub reason: String,
    pub merchant: Option<String>,
    pub currency: Option<String>,
    pub total: Option<i64>,
    pub request_id: Option<String>,
}

/// The columns [`Decided`] is read from, in order.
pub(super) const DECIDED_COLUMNS: &str =
    "at, verdict, reason, merchant, currency, total, request_id";

/// What is known about one call, gathered as it goes; written with the [`AuditEvent`] that ends
/// it (never a secret: no tokens, no card numbers, no arguments).
#[derive(Debug, Clone)]
pub struct AuditRecord {
    pub at: OffsetDateTime,
    pub tool: String,
    pub merchant: Option<String>,
    pub currency: Option<String>,
    pub total: Option<i64>,
    pub request_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub checkout_id: Option<String>,
    pub latency: Duration,
    /// Free text without secrets (e.g. "shop charged 9900, quoted 8900").
    pub note: Option<String>,
    /// The paying agent (the service, SPEC §13).
    pub agent: Option<String>,
}

impl AuditRecord {
    /// A record for `tool` at `at`; the caller fills in what it knows.
    pub fn new(at: OffsetDateTime, tool: &str) -> AuditRecord {
        AuditRecord {
            at,
            tool: tool.to_owned(),
            merchant: None,
            currency: None,
            total: None,
            request_id: None,
            idempotency_key: None,
            checkout_id: None,
            latency: Duration::ZERO,
            note: None,
            agent: None,
        }
    }
}

/// The audit row of `event` at log index `index`, as written and as hashed: the leaf holds
/// exactly the column values, so what `audit verify` reads back hashes the same.
pub(super) fn leaf(event: AuditEvent, r: &AuditRecord, index: u64) -> Result<Leaf, StoreError> {
    let at =
        r.at.to_offset(time::UtcOffset::UTC)
            .format(&Rfc3339)
            .map_err(|e| StoreError::Inconsistent(format!("cannot format the audit time: {e}")))?;
    // What an agent or a shop chose may hold a card number or a live key: never written. (The
    // request id is CajaGuard's own hex; an agent id is a validated name.)
    let kept = |text: &Option<String>| text.clone().map(withhold_secrets);
    Ok(Leaf {
        index,
        at,
        at_us: super::micros(r.at),
        tool: withhold_secrets(r.tool.clone()),
        verdict: event.verdict().to_owned(),
        reason: event.reason().to_owned(),
        merchant: kept(&r.merchant),
        currency: r.currency.clone(),
        total: r.total,
        request_id: r.request_id.clone(),
        idempotency_key: kept(&r.idempotency_key),
        checkout_id: kept(&r.checkout_id),
        // Clamped where JCS still writes integers exactly (2^53 - 1 µs is 285 years).
        latency_us: i64::try_from(r.latency.as_micros())
            .unwrap_or(i64::MAX)
            .min(cajaguard_core::money::MAX_MINOR),
        note: kept(&r.note),
        agent: r.agent.clone(),
    })
}

/// The columns a [`Leaf`] is read from, in its field order, then `log_hashes`, then `agent`
/// (added in schema 5, after the rest so every position before it stays).
pub(super) const LEAF_COLUMNS: &str = "log_index, at, at_us, tool, verdict, reason, merchant, \
     currency, total, request_id, idempotency_key, checkout_id, latency_us, note, log_hashes, agent";

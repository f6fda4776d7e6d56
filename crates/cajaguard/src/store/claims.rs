//! Claims on checkouts (SPEC §4 step 3a): the basket the shop completes must be the basket the gate
//! checked. Before the gate reads a checkout back, the payment claims it; while it is claimed,
//! updates, cancels and other payments of that checkout are refused on every process and host on
//! the store. An update on its way to the shop holds a short lease that a payment waits for by
//! being refused, so neither can slip between the other's read and write.
//!
//! - A claim lasts until the payment settles (`ledger::settle` ends it in the same transaction).
//!   While the outcome is unknown the reservation stays in flight, and an in-flight reservation is
//!   a claim in itself: a retry of the same payment (same idempotency key) rides on it; anything
//!   else waits for reconciliation to learn the outcome from the shop.
//! - A claim whose holder never reserved (it was refused, or crashed while reading the checkout) is
//!   ended by that holder, or, once it is older than `orphan_after`, replaced: nothing was
//!   forwarded under a claim without a reservation, so no payment can be hidden by ending it.
//! - A lease expires on its own (its holder's shop timeout, twice): an update whose answer never
//!   came may still be applied by the shop, and the settlement's comparison with the quote is the
//!   backstop for that.

use std::time::Duration;

use time::OffsetDateTime;

use cajaguard_core::freeze::Frozen;

use super::tx::{ClaimRow, LedgerRow, State, Tx};
use super::{StoreError, freeze, micros};

/// Why a claim or lease was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// Another payment holds the checkout (its outcome not known yet, or still being decided).
    PaymentInFlight,
    /// An update or cancel of the checkout is on its way to the shop.
    UpdateInFlight,
    /// The paying agent (the service) did not make the checkout: it is another agent's, or no
    /// agent's (`proxy/agents.rs`). Nothing was written.
    NotTheAgents,
}

/// A claim taken.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Claimed {
    /// It rides on this key's reservation in flight (a retry).
    pub retry: bool,
    /// The token of the claim row this call holds (its own, or the one it shares with another
    /// call of the same key); `None` when it holds none (payments are frozen).
    pub token: Option<i64>,
    /// The freeze in force, read with the checkout's rows, so that a payment learns it without a
    /// read of its own (the gate reads it again in its transaction).
    pub frozen: Option<Frozen>,
}

/// Claims `checkout_id` for the payment with `idempotency_key`, and reads the freeze. A claim
/// written here gets `new_token`; one shared (same key) keeps its own. While
/// payments are frozen nothing is written: the payment is refused before its checkout is read,
/// and a claim would only keep updates of the checkout off, which a freeze leaves alone (SPEC
/// §7). A gate under such a claim can only refuse (a forward finds no claim: `ClaimLost`).
pub(super) fn claim(
    tx: &mut dyn Tx,
    checkout_id: &str,
    idempotency_key: &str,
    new_token: i64,
    now: OffsetDateTime,
    orphan_after: Duration,
    agent: Option<&str>,
) -> Result<Result<Claimed, Conflict>, StoreError> {
    tx.lock_checkout(checkout_id)?;
    let mut reads = tx.checkout_reads(checkout_id, Some(micros(now)))?;
    // Read with the rest, in the same round trip: the record never changes once made.
    if let Some(agent) = agent
        && reads.agent.as_deref() != Some(agent)
    {
        return Ok(Err(Conflict::NotTheAgents));
    }
    if let Some(frozen) = freeze::of_row(reads.frozen.take())? {
        return Ok(Ok(Claimed {
            retry: false,
            token: None,
            frozen: Some(frozen),
        }));
    }
    let put = |tx: &mut dyn Tx| tx.claim_put(checkout_id, idempotency_key, micros(now), new_token);
    if reads.lease_live {
        return Ok(Err(Conflict::UpdateInFlight));
    }
    // Token 0 is a claim written by a CajaGuard from before tokens (its default): its holder
    // checks the key alone, so sharing it would let this call forward under a claim that holder
    // may end and another write again with the same 0. This call writes a token of its own
    // instead, as over its own claim.
    let shared = reads
        .claim
        .as_ref()
        .filter(|held| held.idempotency_key == idempotency_key && held.token != NO_TOKEN)
        .map(|held| held.token);
    if let Some(row) = &reads.row
        && row.state == State::InFlight
    {
        if row.idempotency_key != idempotency_key {
            return Ok(Err(Conflict::PaymentInFlight));
        }
        let token = match (&reads.claim, shared) {
            (_, Some(shared)) => Some(shared),
            // Another key's claim beside this key's reservation: held by nobody here.
            (Some(held), None) if held.idempotency_key != idempotency_key => None,
            _ => {
                put(tx)?;
                Some(new_token)
            }
        };
        return Ok(Ok(Claimed {
            retry: true,
            token,
            frozen: None,
        }));
    }
    let token = match reads.claim {
        Some(_) if shared.is_some() => shared,
        Some(held)
            if held.idempotency_key != idempotency_key
                && held.claimed_at_us > micros(now).saturating_sub(as_micros(orphan_after)) =>
        {
            return Ok(Err(Conflict::PaymentInFlight));
        }
        _ => {
            put(tx)?;
            Some(new_token)
        }
    };
    Ok(Ok(Claimed {
        retry: false,
        token,
        frozen: None,
    }))
}

/// Ends the claim of a payment that was not forwarded (see [`ends_claim`]).
pub(super) fn end_unreserved(
    tx: &mut dyn Tx,
    checkout_id: &str,
    idempotency_key: &str,
    token: Option<i64>,
) -> Result<(), StoreError> {
    // Under the checkout's lock, as every claim change: an attempt taking over this claim as
    // abandoned must not lose its own to this delete.
    tx.lock_checkout(checkout_id)?;
    let reads = tx.checkout_reads(checkout_id, None)?;
    if ends_claim(
        reads.row.as_ref(),
        reads.claim.as_ref(),
        idempotency_key,
        token,
    ) {
        tx.claim_delete(checkout_id)?;
    }
    Ok(())
}

/// Whether a payment with `idempotency_key` holding the claim `token` that was not forwarded
/// ends the checkout's claim, given the checkout's rows read under its lock: only the claim it
/// holds (not a later one under the same key), and not one that belongs to a reservation in
/// flight (a refused retry: that payment's outcome is still unknown).
pub(super) fn ends_claim(
    row: Option<&LedgerRow>,
    claim: Option<&ClaimRow>,
    idempotency_key: &str,
    token: Option<i64>,
) -> bool {
    let reserved = row.is_some_and(|row| row.state == State::InFlight);
    !reserved && holds(claim, idempotency_key, token)
}

/// Whether the claim read is the one a call with `idempotency_key` and `token` took or shares.
pub(super) fn holds(claim: Option<&ClaimRow>, idempotency_key: &str, token: Option<i64>) -> bool {
    claim.is_some_and(|held| {
        held.idempotency_key == idempotency_key
            && held.token != NO_TOKEN
            && Some(held.token) == token
    })
}

/// The token of a claim written before claims had tokens (the column's default): no call holds it.
const NO_TOKEN: i64 = 0;

/// A new claim's token (never [`NO_TOKEN`]).
pub(super) fn new_token() -> Result<i64, StoreError> {
    let mut bytes = [0; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::Inconsistent(format!("no randomness for a claim: {e}")))?;
    Ok(match i64::from_le_bytes(bytes) {
        NO_TOKEN => 1,
        token => token,
    })
}

/// Takes an update lease on `checkout_id` until `expires`, unless a payment holds it.
pub(super) fn lease(
    tx: &mut dyn Tx,
    checkout_id: &str,
    lease_id: &str,
    now: OffsetDateTime,
    expires: OffsetDateTime,
    orphan_after: Duration,
) -> Result<Result<(), Conflict>, StoreError> {
    tx.lock_checkout(checkout_id)?;
    let reads = tx.checkout_reads(checkout_id, None)?;
    if reads.row.is_some_and(|row| row.state == State::InFlight) {
        return Ok(Err(Conflict::PaymentInFlight));
    }
    if let Some(held) = reads.claim {
        if held.claimed_at_us > micros(now).saturating_sub(as_micros(orphan_after)) {
            return Ok(Err(Conflict::PaymentInFlight));
        }
        // Abandoned before it reserved: nothing was paid under it.
        tx.claim_delete(checkout_id)?;
    }
    tx.lease_put(lease_id, checkout_id, micros(expires))?;
    Ok(Ok(()))
}

fn as_micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

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

use super::tx::{State, Tx};
use super::{StoreError, micros};

/// Why a claim or lease was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// Another payment holds the checkout (its outcome not known yet, or still being decided).
    PaymentInFlight,
    /// An update or cancel of the checkout is on its way to the shop.
    UpdateInFlight,
}

/// Claims `checkout_id` for the payment with `idempotency_key`. `Ok(true)`: the claim rides on this
/// key's reservation in flight (a retry).
pub(super) fn claim(
    tx: &mut dyn Tx,
    checkout_id: &str,
    idempotency_key: &str,
    now: OffsetDateTime,
    orphan_after: Duration,
) -> Result<Result<bool, Conflict>, StoreError> {
    tx.lock_checkout(checkout_id)?;
    if tx.lease_live(checkout_id, micros(now))? {
        return Ok(Err(Conflict::UpdateInFlight));
    }
    if let Some(row) = tx.ledger_row(checkout_id)?
        && row.state == State::InFlight
    {
        if row.idempotency_key != idempotency_key {
            return Ok(Err(Conflict::PaymentInFlight));
        }
        if tx.claim_get(checkout_id)?.is_none() {
            tx.claim_put(checkout_id, idempotency_key, micros(now))?;
        }
        return Ok(Ok(true));
    }
    match tx.claim_get(checkout_id)? {
        Some(held) if held.idempotency_key == idempotency_key => Ok(Ok(false)),
        Some(held) if held.claimed_at_us > micros(now).saturating_sub(as_micros(orphan_after)) => {
            Ok(Err(Conflict::PaymentInFlight))
        }
        _ => {
            tx.claim_put(checkout_id, idempotency_key, micros(now))?;
            Ok(Ok(false))
        }
    }
}

/// Whether the payment with `idempotency_key` still holds the checkout's claim.
pub(super) fn held(
    tx: &mut dyn Tx,
    checkout_id: &str,
    idempotency_key: &str,
) -> Result<bool, StoreError> {
    Ok(tx
        .claim_get(checkout_id)?
        .is_some_and(|held| held.idempotency_key == idempotency_key))
}

/// Ends the claim of a payment that was not forwarded. A claim that belongs to a reservation in
/// flight (a refused retry) stays: that payment's outcome is still unknown.
pub(super) fn end_unreserved(
    tx: &mut dyn Tx,
    checkout_id: &str,
    idempotency_key: &str,
) -> Result<(), StoreError> {
    if tx
        .ledger_row(checkout_id)?
        .is_some_and(|row| row.state == State::InFlight)
    {
        return Ok(());
    }
    if held(tx, checkout_id, idempotency_key)? {
        tx.claim_delete(checkout_id)?;
    }
    Ok(())
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
    if tx
        .ledger_row(checkout_id)?
        .is_some_and(|row| row.state == State::InFlight)
    {
        return Ok(Err(Conflict::PaymentInFlight));
    }
    if let Some(held) = tx.claim_get(checkout_id)? {
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

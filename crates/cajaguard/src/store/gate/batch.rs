//! Several gates of one currency decided in one transaction: the currency's lock taken once, every
//! gate's reads sent in one round trip, each gate decided in turn, and one commit for all.
//!
//! Invariant: the batch decides exactly as the same gates would, one transaction each, in the
//! batch's order. Each gate's reads come before any gate is decided, so they miss what the gates
//! before it wrote; what they miss is repaired or cannot occur:
//! - the window sums: every bucket write returns its [`Bump`], and each gate's sums count the
//!   bumps made before it (`ledger::count_bumps`);
//! - the checkout's ledger row, claim and pending row: no two gates of a batch share a checkout
//!   (the queue never puts them together, and [`Store::decide_batch`] refuses to run them);
//! - the freeze: no gate writes one;
//! - the approvals' used flags and the passkeys' counters: read while deciding
//!   (`approvals::candidates`, `passkeys::candidates`), after the writes before them.

use std::collections::HashSet;

use cajaguard_core::effect::Outcome;

use super::{Decide, Prepared, decide_and_apply};
use crate::store::ledger::Bump;
use crate::store::{Store, StoreError};

/// One gate of a batch, with the decision its caller gave.
pub(super) struct Batched<'g, 'd> {
    pub gate: Prepared<'g>,
    pub decide: &'d mut Decide<'d>,
}

impl Store {
    /// Decides `gates` (one currency, no checkout twice) in one transaction, in order. `Err`:
    /// the transaction failed and nothing was applied; the caller runs each gate on its own, so
    /// that one gate's failure is only its own. `Ok` holds each gate's outcome, or
    /// [`StoreError::ClaimLost`] for a gate that wrote nothing because its claim was taken over.
    pub(super) fn decide_batch(
        &self,
        gates: &mut [Batched<'_, '_>],
    ) -> Result<Vec<Result<Outcome, StoreError>>, StoreError> {
        let Some(first) = gates.first() else {
            return Ok(Vec::new());
        };
        let currency = first.gate.input.quote.currency.clone();
        let mut checkouts = HashSet::new();
        for batched in gates.iter() {
            let input = &batched.gate.input;
            if input.quote.currency != currency
                || !checkouts.insert(input.request.checkout_id.as_str())
            {
                return Err(StoreError::Inconsistent(
                    "a batch of gates held two currencies or one checkout twice".into(),
                ));
            }
        }
        let checkout_ids: Vec<&str> = checkouts.into_iter().collect();
        self.write_gate(&mut |tx| {
            tx.lock_gates(&currency, &checkout_ids)?;
            let keys: Vec<_> = gates.iter().map(|b| b.gate.keys()).collect();
            let reads = tx.gate_reads_batch(&keys)?;
            drop(keys);
            let mut bumps: Vec<Bump> = Vec::new();
            let mut outcomes = Vec::with_capacity(gates.len());
            for (batched, reads) in gates.iter_mut().zip(reads) {
                match decide_and_apply(tx, &batched.gate, reads, &bumps, batched.decide) {
                    Ok((outcome, made)) => {
                        bumps.extend(made);
                        outcomes.push(Ok(outcome));
                    }
                    Err(StoreError::ClaimLost) => outcomes.push(Err(StoreError::ClaimLost)),
                    Err(e) => return Err(e),
                }
            }
            Ok(outcomes)
        })
    }
}

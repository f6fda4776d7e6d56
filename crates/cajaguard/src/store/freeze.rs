//! The freeze (SPEC §7) as the store keeps it: one row, read by every gate in its transaction.

use cajaguard_core::freeze::Frozen;

use super::tx::Tx;
use super::{StoreError, from_micros};

pub(super) fn current(tx: &mut dyn Tx) -> Result<Option<Frozen>, StoreError> {
    of_row(tx.frozen()?)
}

/// The freeze a `payment_freeze` row (frozen at, reason) says is in force.
pub(super) fn of_row(row: Option<(i64, String)>) -> Result<Option<Frozen>, StoreError> {
    row.map(|(at_us, reason)| {
        Ok(Frozen {
            at: from_micros(at_us, "the freeze's time")?,
            reason,
        })
    })
    .transpose()
}

//! The freeze (SPEC §7) as the store keeps it: one row, read by every gate in its transaction.

use cajaguard_core::freeze::Frozen;

use super::tx::Tx;
use super::{StoreError, from_micros};

pub(super) fn current(tx: &mut dyn Tx) -> Result<Option<Frozen>, StoreError> {
    tx.frozen()?
        .map(|(at_us, reason)| {
            Ok(Frozen {
                at: from_micros(at_us, "the freeze's time")?,
                reason,
            })
        })
        .transpose()
}

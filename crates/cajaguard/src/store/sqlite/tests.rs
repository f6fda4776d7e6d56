//! What waits for the disk on the embedded store.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cajaguard_core::approval::BasketDigest;
use cajaguard_core::effect::Outcome;
use cajaguard_core::settle::{Charge, Settlement};
use cajaguard_core::verdict::Reason;
use cajaguard_harness::fixtures;

use crate::store::{AuditRecord, Backend, FrozenBy, Gated, Store};

/// SQLite's commits never wait for the disk by themselves (`synchronous = NORMAL`): the WAL is
/// synced after a commit that something acts on at once. A gate that forwards (the payment goes
/// out under its reservation), a freeze, whether a human's or a settlement's (gates on every
/// process obey it), and an audit checkpoint (an approver keeps what it signs). A claim, a
/// refusal and a settlement that only moves the books are not synced; lost to a power cut, each
/// fails closed.
#[test]
fn only_a_forward_a_freeze_and_a_checkpoint_wait_for_the_disk() {
    let home = tempfile::tempdir().unwrap();
    let store = Store::open(home.path()).unwrap();
    let Backend::Sqlite(db) = &store.backend else {
        panic!("a home without a store URL opened another store");
    };
    let now = time::macros::datetime!(2026-12-03 12:00 UTC);
    let day = Duration::from_secs(24 * 3600);
    let record = AuditRecord::new(now, "complete_checkout");
    let gate = |checkout: &str, forwards: bool| -> Gated {
        let request = fixtures::request(checkout);
        let quote = fixtures::quote(checkout, 2400);
        let digest = BasketDigest::of(&quote, &request.instruments);
        let outcome: Outcome = if forwards {
            fixtures::forward(2400, digest, None)
        } else {
            fixtures::refuse(Reason::OverWindowCap)
        };
        let claim = store
            .claim(checkout, &request.idempotency_key, now, day)
            .unwrap()
            .unwrap();
        store
            .gate(
                &claim,
                &request,
                &quote,
                &digest,
                None,
                day,
                now,
                false,
                &mut |_, _, _| outcome.clone(),
                &record,
            )
            .unwrap()
    };
    let start = db.wal_syncs();
    let synced = || db.wal_syncs() - start;

    let paid = gate("c1", true);
    assert_eq!(synced(), 1, "a forward is synced before it goes out");
    assert!(gate("c2", false).permit.is_none());
    assert_eq!(synced(), 1, "a claim and a refusal are not");
    let as_reserved = Settlement::Completed(Charge::as_reserved(2400));
    store
        .settle_permit(&paid.permit.unwrap(), &as_reserved, now, &record)
        .unwrap();
    assert_eq!(synced(), 1, "nor a settlement that only moves the books");

    store
        .freeze("a human", FrozenBy::Human, now, &record)
        .unwrap();
    assert_eq!(synced(), 2, "a freeze is synced at once");

    store.checkpoint(now).unwrap();
    assert_eq!(synced(), 3, "so is a checkpoint");
}

/// A settlement whose charge differs from its quote freezes payments, and is synced for it.
#[test]
fn a_settlement_that_freezes_waits_for_the_disk() {
    let home = tempfile::tempdir().unwrap();
    let store = Store::open(home.path()).unwrap();
    let Backend::Sqlite(db) = &store.backend else {
        panic!("a home without a store URL opened another store");
    };
    let now = time::macros::datetime!(2026-12-03 12:00 UTC);
    let day = Duration::from_secs(24 * 3600);
    let record = AuditRecord::new(now, "complete_checkout");
    let request = fixtures::request("c1");
    let quote = fixtures::quote("c1", 2400);
    let digest = BasketDigest::of(&quote, &request.instruments);
    let outcome = fixtures::forward(2400, digest, None);
    let claim = store
        .claim("c1", &request.idempotency_key, now, day)
        .unwrap()
        .unwrap();
    let permit = store
        .gate(
            &claim,
            &request,
            &quote,
            &digest,
            None,
            day,
            now,
            false,
            &mut |_, _, _| outcome.clone(),
            &record,
        )
        .unwrap()
        .permit
        .unwrap();
    let start = db.wal_syncs();
    let differs = Settlement::Completed(Charge {
        amount: 2600,
        currency: None,
        differs: vec!["total"],
    });
    store
        .settle_permit(&permit, &differs, now, &record)
        .unwrap();
    assert!(
        store.frozen().unwrap().is_some(),
        "the settlement froze payments"
    );
    assert_eq!(
        db.wal_syncs() - start,
        1,
        "and was synced, since gates act on it"
    );
}

//! What waits for the disk on the embedded store.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cajaguard_core::approval::BasketDigest;
use cajaguard_core::effect::{Effect, Outcome};
use cajaguard_core::settle::{Charge, Settlement};
use cajaguard_core::verdict::{Reason, Ruling};
use cajaguard_harness::fixtures;

use crate::store::{AuditRecord, Backend, FrozenBy, Gated, Store, StoreError};

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

/// A retry forwards the payment again under the first attempt's reservation and approval: if
/// the process died between that attempt's commit and its sync, nothing else made them durable,
/// so the retry syncs before it goes out, as a first forward does.
#[test]
fn a_retry_is_synced_before_it_goes_out() {
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
    let claim = |store: &Store| {
        store
            .claim("c1", &request.idempotency_key, now, day)
            .unwrap()
            .unwrap()
    };
    let gate = |store: &Store, outcome: Outcome| {
        store
            .gate(
                &claim(store),
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
    assert!(
        gate(&store, fixtures::forward(2400, digest, None))
            .permit
            .is_some()
    );
    let start = db.wal_syncs();
    let retry = Outcome {
        ruling: Ruling::new(Reason::WithinCaps, ""),
        effect: Effect::Retry,
    };
    assert!(gate(&store, retry).permit.is_some());
    assert_eq!(
        db.wal_syncs() - start,
        1,
        "the retry synced before it went out"
    );
}

/// After a failed sync, Linux may report success for the next one though the failed pages never
/// reached the disk: every later forward is refused until CajaGuard is restarted.
#[test]
fn a_failed_sync_refuses_every_later_forward() {
    let home = tempfile::tempdir().unwrap();
    let store = Store::open(home.path()).unwrap();
    let Backend::Sqlite(db) = &store.backend else {
        panic!("a home without a store URL opened another store");
    };
    let now = time::macros::datetime!(2026-12-03 12:00 UTC);
    let day = Duration::from_secs(24 * 3600);
    let record = AuditRecord::new(now, "complete_checkout");
    let gate = |checkout: &str, outcome: Outcome| {
        let request = fixtures::request(checkout);
        let quote = fixtures::quote(checkout, 2400);
        let digest = BasketDigest::of(&quote, &request.instruments);
        let claim = store
            .claim(checkout, &request.idempotency_key, now, day)
            .unwrap()
            .unwrap();
        let outcome = match outcome.effect {
            Effect::Forward { .. } => fixtures::forward(2400, digest, None),
            _ => outcome,
        };
        store.gate(
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
    };
    let forward = || fixtures::forward(2400, BasketDigest::from_bytes([0; 32]), None);
    db.fail_next_sync();
    assert!(gate("c1", forward()).is_err());
    let later = gate("c2", forward());
    assert!(
        matches!(later, Err(StoreError::Write { .. })),
        "a later forward is refused too: {later:?}"
    );
    // A refusal needs no sync, and is still answered.
    let refused = gate("c3", fixtures::refuse(Reason::OverWindowCap)).unwrap();
    assert!(refused.permit.is_none());
    // So is a freeze: it commits, and says its sync failed.
    assert!(
        store
            .freeze("a human", FrozenBy::Human, now, &record)
            .is_err()
    );
    assert!(store.frozen().unwrap().is_some());
}

/// Taking an agent's token away must hold after a power cut: the removal is synced.
#[test]
fn removing_an_agent_waits_for_the_disk() {
    let home = tempfile::tempdir().unwrap();
    let store = Store::open(home.path()).unwrap();
    let Backend::Sqlite(db) = &store.backend else {
        panic!("a home without a store URL opened another store");
    };
    let now = time::macros::datetime!(2026-12-03 12:00 UTC);
    let record = AuditRecord::new(now, "agent");
    let agent = cajaguard_core::agent::AgentId::parse("ci-bot").unwrap();
    store
        .add_agent(&agent, "cg_agent_test_0123456789abcdef0123", now, &record)
        .unwrap();
    let start = db.wal_syncs();
    assert!(store.remove_agent(&agent, &record).unwrap());
    assert_eq!(db.wal_syncs() - start, 1);
}

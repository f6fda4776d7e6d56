//! What waits for the disk on the embedded store.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cajaguard_core::approval::BasketDigest;
use cajaguard_core::effect::{Effect, Outcome};
use cajaguard_core::settle::{Charge, Settlement};
use cajaguard_core::verdict::{Reason, Ruling};
use cajaguard_harness::fixtures;
use time::OffsetDateTime;

use super::Sqlite;
use crate::store::{AuditRecord, Backend, FrozenBy, Gated, Permit, Store, StoreError};

const NOW: OffsetDateTime = time::macros::datetime!(2026-12-03 12:00 UTC);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// A store in a fresh home (the folder goes when the first value is dropped).
fn sqlite_store() -> (tempfile::TempDir, Store) {
    let home = tempfile::tempdir().unwrap();
    let store = Store::open(home.path()).unwrap();
    (home, store)
}

fn sqlite(store: &Store) -> &Sqlite {
    match &store.backend {
        Backend::Sqlite(db) => db,
        Backend::Postgres(_) => panic!("a home without a store URL opened another store"),
    }
}

/// A claim and a gate of USD 24.00 on `checkout` that comes to `outcome`. (The harness's
/// `claim_and_gate` takes the library as another crate sees it, not this test's.)
fn gate(store: &Store, checkout: &str, outcome: Outcome) -> Result<Gated, StoreError> {
    let request = fixtures::request(checkout);
    let quote = fixtures::quote(checkout, 2400);
    let digest = BasketDigest::of(&quote, &request.instruments);
    let claim = store
        .claim(checkout, &request.idempotency_key, NOW, DAY)?
        .unwrap();
    store.gate(
        &claim,
        &request,
        &quote,
        &digest,
        None,
        DAY,
        NOW,
        false,
        &mut |_, _, _| outcome.clone(),
        &record(),
    )
}

/// What the gate answers to let `checkout`'s payment of USD 24.00 through.
fn forward(checkout: &str) -> Outcome {
    let request = fixtures::request(checkout);
    let digest = BasketDigest::of(&fixtures::quote(checkout, 2400), &request.instruments);
    fixtures::forward(2400, digest, None)
}

fn retry() -> Outcome {
    Outcome {
        ruling: Ruling::new(Reason::WithinCaps, ""),
        effect: Effect::Retry,
    }
}

fn paid(store: &Store, checkout: &str) -> Permit {
    gate(store, checkout, forward(checkout))
        .unwrap()
        .permit
        .unwrap()
}

fn record() -> AuditRecord {
    AuditRecord::new(NOW, "complete_checkout")
}

/// SQLite's commits never wait for the disk by themselves (`synchronous = NORMAL`): the WAL is
/// synced after a commit that something acts on at once. A gate that forwards (the payment goes
/// out under its reservation), a freeze, whether a human's or a settlement's (gates on every
/// process obey it), and an audit checkpoint a human takes (an approver keeps what it signs). A claim, a
/// refusal and a settlement that only moves the books are not synced; lost to a power cut, each
/// fails closed.
#[test]
fn only_a_forward_a_freeze_and_a_checkpoint_wait_for_the_disk() {
    let (_home, store) = sqlite_store();
    let start = sqlite(&store).wal_syncs();
    let synced = || sqlite(&store).wal_syncs() - start;

    let permit = paid(&store, "c1");
    assert_eq!(synced(), 1, "a forward is synced before it goes out");
    let refused = gate(&store, "c2", fixtures::refuse(Reason::OverWindowCap)).unwrap();
    assert!(refused.permit.is_none());
    assert_eq!(synced(), 1, "a claim and a refusal are not");
    let as_reserved = Settlement::Completed(Charge::as_reserved(2400));
    store
        .settle_permit(&permit, &as_reserved, NOW, &record())
        .unwrap();
    assert_eq!(synced(), 1, "nor a settlement that only moves the books");

    store
        .freeze("a human", FrozenBy::Human, NOW, &record())
        .unwrap();
    assert_eq!(synced(), 2, "a freeze is synced at once");

    // The proxy's checkpoint after payments is kept by the log alone: it need not wait.
    store.checkpoint_in_passing(NOW).unwrap();
    assert_eq!(synced(), 2, "a checkpoint in passing is not");
    store.checkpoint(NOW).unwrap();
    assert_eq!(synced(), 3, "a checkpoint a human takes is");
}

/// A checkpoint taken again with nothing appended since is the one already made durable: no
/// write and no sync. Each new form of the approval page takes one, and any process on the
/// machine can load the page. Once the log grew, the next one is new and synced, even when a
/// checkpoint in passing (not synced) of that size was written meanwhile.
#[test]
fn a_checkpoint_of_a_log_that_did_not_grow_is_not_synced_again() {
    let (_home, store) = sqlite_store();
    let first = store.checkpoint(NOW).unwrap();
    let start = sqlite(&store).wal_syncs();
    let synced = || sqlite(&store).wal_syncs() - start;
    for _ in 0..3 {
        assert_eq!(store.checkpoint(NOW).unwrap(), first);
    }
    assert_eq!(synced(), 0, "nothing was appended: nothing to sync");

    store
        .audit_many(
            crate::store::AuditEvent::Ruled(Reason::OverWindowCap),
            &[record()],
        )
        .unwrap();
    store.checkpoint_in_passing(NOW).unwrap();
    assert_eq!(synced(), 0);
    let second = store.checkpoint(NOW).unwrap();
    assert_ne!(second, first, "the log grew");
    assert_eq!(synced(), 1, "the grown log's checkpoint is made durable");
    assert_eq!(store.checkpoint(NOW).unwrap(), second);
    assert_eq!(synced(), 1);
}

/// A settlement whose charge differs from its quote freezes payments, and is synced for it.
#[test]
fn a_settlement_that_freezes_waits_for_the_disk() {
    let (_home, store) = sqlite_store();
    let permit = paid(&store, "c1");
    let start = sqlite(&store).wal_syncs();
    let differs = Settlement::Completed(Charge {
        amount: 2600,
        currency: None,
        differs: vec!["total"],
    });
    store
        .settle_permit(&permit, &differs, NOW, &record())
        .unwrap();
    assert!(
        store.frozen().unwrap().is_some(),
        "the settlement froze payments"
    );
    assert_eq!(
        sqlite(&store).wal_syncs() - start,
        1,
        "and was synced, since gates act on it"
    );
}

/// A retry forwards the payment again under the first attempt's reservation and approval: if
/// the process died between that attempt's commit and its sync, nothing else made them durable,
/// so the retry syncs before it goes out, as a first forward does.
#[test]
fn a_retry_is_synced_before_it_goes_out() {
    let (_home, store) = sqlite_store();
    paid(&store, "c1");
    let start = sqlite(&store).wal_syncs();
    assert!(gate(&store, "c1", retry()).unwrap().permit.is_some());
    assert_eq!(
        sqlite(&store).wal_syncs() - start,
        1,
        "the retry synced before it went out"
    );
}

/// After a failed sync, Linux may report success for the next one though the failed pages never
/// reached the disk: every later forward is refused until CajaGuard is restarted.
#[test]
fn a_failed_sync_refuses_every_later_forward() {
    let (_home, store) = sqlite_store();
    sqlite(&store).fail_next_sync();
    assert!(gate(&store, "c1", forward("c1")).is_err());
    for (checkout, outcome) in [("c1", retry()), ("c2", forward("c2"))] {
        let later = gate(&store, checkout, outcome);
        assert!(
            matches!(later, Err(StoreError::NotDurable { .. })),
            "a later forward is refused too: {later:?}"
        );
    }
    // A refusal needs no sync, and is still answered.
    let refused = gate(&store, "c3", fixtures::refuse(Reason::OverWindowCap)).unwrap();
    assert!(refused.permit.is_none());
    // A freeze commits, and says its sync failed.
    assert!(
        store
            .freeze("a human", FrozenBy::Human, NOW, &record())
            .is_err()
    );
    assert!(store.frozen().unwrap().is_some());
}

/// Taking an agent's token away must hold after a power cut: the removal is synced.
#[test]
fn removing_an_agent_waits_for_the_disk() {
    let (_home, store) = sqlite_store();
    let agent = cajaguard_core::agent::AgentId::parse("ci-bot").unwrap();
    store
        .add_agent(&agent, "cg_agent_test_0123456789abcdef0123", NOW, &record())
        .unwrap();
    let start = sqlite(&store).wal_syncs();
    assert!(store.remove_agent(&agent, &record()).unwrap());
    assert_eq!(sqlite(&store).wal_syncs() - start, 1);
}

/// A settlement whose sync fails is still made: `StoreError::NotDurable` says so, which the
/// proxy takes as recorded (one record, its freeze in force), not as a settlement to log again.
#[test]
fn a_settlement_that_cannot_be_synced_is_made_and_says_so() {
    let (_home, store) = sqlite_store();
    let permit = paid(&store, "c1");
    sqlite(&store).fail_next_sync();
    let differs = Settlement::Completed(Charge {
        amount: 2600,
        currency: None,
        differs: vec!["total"],
    });
    let settled = store.settle_permit(&permit, &differs, NOW, &record());
    assert!(
        matches!(settled, Err(StoreError::NotDurable { .. })),
        "{settled:?}"
    );
    assert!(store.frozen().unwrap().is_some(), "its freeze is in force");
    let usd = store.window_spend(DAY, NOW).unwrap()["USD"];
    assert_eq!(
        (usd.settled, usd.in_flight),
        (2600, 0),
        "counted once, as charged"
    );
}

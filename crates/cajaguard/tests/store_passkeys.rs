//! The store's passkey rules (SPEC §6), on both backends: registration through a one-time link
//! (trust on first use only while no passkey was ever registered, a credential id never twice), the
//! signature counter moved by compare-and-set, passkey approvals filed once per nonce, and an
//! unfreeze by passkey that names the freeze in force. PostgreSQL runs against
//! `CAJAGUARD_TEST_POSTGRES_URL` (a fresh schema per test; skipped with a notice when unset).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use cajaguard::store::{AuditRecord, FrozenBy, LinkState, Store, StoreError};
use cajaguard_core::approval::{BasketDigest, RequestId};
use cajaguard_core::passkey::{
    Algorithm, PasskeyApproval, PasskeyApprovalTerms, PasskeyAssertion, RegisteredPasskey,
};
use cajaguard_harness::fixtures;
use cajaguard_harness::pg as pg_support;
use time::OffsetDateTime;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-12-01 12:00 UTC);

#[derive(Clone, Copy)]
enum Kind {
    Sqlite,
    Postgres,
}

struct Fixture {
    store: Store,
    _tmp: tempfile::TempDir,
    _schema: Option<pg_support::Schema>,
}

fn open(kind: Kind) -> Option<Fixture> {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (store, schema) = match kind {
        Kind::Sqlite => (Store::open(&home).unwrap(), None),
        Kind::Postgres => {
            let schema = pg_support::schema_or_notice("a PostgreSQL passkey store test")?;
            let store = fixtures::open_store(&home, Some(&schema.url));
            (store, Some(schema))
        }
    };
    Some(Fixture {
        store,
        _tmp: tmp,
        _schema: schema,
    })
}

fn audit() -> AuditRecord {
    AuditRecord::new(NOW, "test")
}

fn passkey(id: u8, sign_count: u32) -> RegisteredPasskey {
    RegisteredPasskey {
        credential_id: vec![id; 16],
        name: format!("key {id}"),
        algorithm: Algorithm::Es256,
        public_key: vec![0xa5, 1, 2],
        sign_count,
        aaguid: "00".repeat(16),
        backup_eligible: false,
    }
}

fn link(store: &Store, token: &str) {
    store
        .create_registration_link(token, "laptop", NOW, &audit())
        .unwrap();
}

fn registration_is_one_time_and_first_use_only(kind: Kind) {
    let Some(fx) = open(kind) else { return };
    let store = &fx.store;
    assert!(store.passkey_first_use().unwrap());
    link(store, "t1");
    assert_eq!(
        store.registration_link("t1", NOW).unwrap(),
        LinkState::Open {
            name: "laptop".into()
        }
    );
    let later = NOW + time::Duration::minutes(6);
    assert_eq!(
        store.registration_link("t1", later).unwrap(),
        LinkState::Closed,
        "5 minutes"
    );
    assert!(matches!(
        store.register_passkey("t1", &passkey(1, 0), None, later, &audit()),
        Err(StoreError::PasskeyRefused(_))
    ));
    store
        .register_passkey("t1", &passkey(1, 0), None, NOW, &audit())
        .unwrap();
    assert_eq!(
        store.registration_link("t1", NOW).unwrap(),
        LinkState::Closed,
        "used"
    );
    assert!(matches!(
        store.register_passkey("t1", &passkey(2, 0), None, NOW, &audit()),
        Err(StoreError::PasskeyRefused(_))
    ));

    // A second passkey is not trusted on first use, and no credential id is registered twice.
    link(store, "t2");
    assert!(matches!(
        store.register_passkey("t2", &passkey(2, 0), None, NOW, &audit()),
        Err(StoreError::PasskeyRefused(_))
    ));
    assert_eq!(store.passkeys().unwrap().len(), 1);
    assert_eq!(store.passkeys().unwrap()[0].passkey, passkey(1, 0));

    // Removing every passkey does not reopen trust on first use.
    let removed = store
        .remove_passkey(&hex::encode([1u8; 4]), NOW, &audit())
        .unwrap();
    assert_eq!(removed.unwrap().passkey.credential_id, vec![1; 16]);
    assert!(store.passkeys().unwrap().is_empty());
    assert!(!store.passkey_first_use().unwrap());
    assert!(store.remove_passkey("01", NOW, &audit()).unwrap().is_none());
}

fn doc(nonce: &str) -> PasskeyApproval {
    let digest = BasketDigest::from_bytes([7; 32]);
    let mut terms = PasskeyApprovalTerms::new(
        &cajaguard_core::approval::ApprovalTerms {
            request_id: digest.request_id(),
            digest,
            decision: cajaguard_core::approval::Decision::Approve,
            merchant: "demo-outfitters.example".into(),
            checkout_id: "c1".into(),
            currency: "USD".into(),
            total: 8900,
            issued_at: NOW,
            ttl: std::time::Duration::from_secs(600),
            nonce: [0; 16],
            note: String::new(),
            checkpoint: None,
        },
        None,
    );
    terms.nonce = nonce.to_owned();
    PasskeyApproval {
        terms,
        assertion: PasskeyAssertion {
            credential_id: vec![1; 16],
            authenticator_data: vec![0; 37],
            client_data_json: b"{}".to_vec(),
            signature: vec![0; 64],
        },
    }
}

fn passkey_approvals_are_filed_once_per_nonce(kind: Kind) {
    let Some(fx) = open(kind) else { return };
    let store = &fx.store;
    let first = doc(&"ab".repeat(16));
    store.file_passkey_approval(&first, NOW).unwrap();
    assert!(matches!(
        store.file_passkey_approval(&first, NOW),
        Err(StoreError::ApprovalExists { .. })
    ));
    let second = doc(&"cd".repeat(16));
    store.file_passkey_approval(&second, NOW).unwrap();
    let id = RequestId::parse(&first.terms.request_id).unwrap();
    assert_eq!(store.passkey_approvals(&id).unwrap(), vec![first, second]);
}

fn an_unfreeze_by_passkey_names_the_freeze_and_moves_the_counter_once(kind: Kind) {
    let Some(fx) = open(kind) else { return };
    let store = &fx.store;
    link(store, "t1");
    store
        .register_passkey("t1", &passkey(1, 3), None, NOW, &audit())
        .unwrap();
    let frozen = store
        .freeze("test", FrozenBy::Human, NOW, &audit())
        .unwrap();
    // The verified unfreeze can only be built by the core; its effects are checked here through
    // the counter: a stale `from` (another use moved it) changes nothing.
    let verified = cajaguard_core_test_support::verified_unfreeze(&frozen, 4);
    assert!(
        store
            .unfreeze_by_passkey(&frozen, &verified, 2, NOW, &audit())
            .is_err()
    );
    assert!(
        store.frozen().unwrap().is_some(),
        "a stale counter unfreezes nothing"
    );
    store
        .unfreeze_by_passkey(&frozen, &verified, 3, NOW, &audit())
        .unwrap();
    assert!(store.frozen().unwrap().is_none());
    assert_eq!(store.passkeys().unwrap()[0].passkey.sign_count, 4);
    assert!(matches!(
        store.unfreeze_by_passkey(&frozen, &verified, 4, NOW, &audit()),
        Err(StoreError::NotThatFreeze)
    ));
}

fn recent_decisions_are_the_gates_newest_first(kind: Kind) {
    let Some(fx) = open(kind) else { return };
    let store = &fx.store;
    use cajaguard::store::AuditEvent;
    use cajaguard_core::verdict::Reason;
    for (tool, reason, total) in [
        ("complete_checkout", Reason::WithinCaps, 1200),
        ("get_checkout", Reason::WithinCaps, 1),
        ("complete_checkout", Reason::PendingApproval, 8900),
    ] {
        let record = AuditRecord {
            total: Some(total),
            currency: Some("USD".into()),
            ..AuditRecord::new(NOW, tool)
        };
        store.audit(AuditEvent::Ruled(reason), &record).unwrap();
    }
    let recent = store.recent_decisions(10).unwrap();
    let seen: Vec<(&str, Option<i64>)> = recent
        .iter()
        .map(|d| (d.reason.as_str(), d.total))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("pending_approval", Some(8900)),
            ("within_caps", Some(1200))
        ]
    );
    assert_eq!(store.recent_decisions(1).unwrap().len(), 1);
}

/// A `VerifiedPasskeyUnfreeze` as only the core builds it: a real software-authenticator
/// assertion over unfreeze terms, verified.
mod cajaguard_core_test_support {
    use cajaguard_core::freeze::Frozen;
    use cajaguard_core::passkey::soft_authenticator::SoftAuthenticator;
    use cajaguard_core::passkey::{
        PasskeyRegistry, PasskeyUnfreeze, PasskeyUnfreezeTerms, RelyingParty,
        VerifiedPasskeyUnfreeze, verify_passkey_unfreeze,
    };

    pub fn verified_unfreeze(frozen: &Frozen, counter: u32) -> VerifiedPasskeyUnfreeze {
        let mut auth = SoftAuthenticator::es256();
        auth.credential_id = vec![1; 16];
        let rp = RelyingParty::localhost(8377);
        let mut record = cajaguard_core::passkey::verify_registration(
            &rp,
            &[9; 32],
            &auth.register(&[9; 32]),
            "k",
        )
        .unwrap();
        record.sign_count = counter - 1;
        auth.counter = Some(counter);
        let terms = PasskeyUnfreezeTerms::new(frozen, super::NOW, [5; 16], "", None);
        let assertion = auth.assert(&terms.challenge());
        verify_passkey_unfreeze(
            &PasskeyUnfreeze { terms, assertion },
            &PasskeyRegistry::new(&[record]).unwrap(),
            &rp,
            frozen,
            super::NOW,
        )
        .unwrap()
    }
}

/// Two first registrations at once, from two stores (two processes or hosts): exactly one is
/// trusted on first use, over rounds of fresh stores (the PostgreSQL race needs the lock).
fn two_first_registrations_at_once_trust_only_one(kind: Kind) {
    for round in 0..12 {
        let Some(fx) = open(kind) else { return };
        let home = fx._tmp.path().join("home");
        let other = match kind {
            Kind::Sqlite => Store::open(&home).unwrap(),
            Kind::Postgres => fixtures::open_store(&home, Some(&fx._schema.as_ref().unwrap().url)),
        };
        link(&fx.store, "a");
        link(&other, "b");
        let barrier = std::sync::Barrier::new(2);
        let results: Vec<bool> = std::thread::scope(|scope| {
            let runs: Vec<_> = [(&fx.store, "a", 1u8), (&other, "b", 2u8)]
                .into_iter()
                .map(|(store, token, id)| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        store
                            .register_passkey(token, &passkey(id, 0), None, NOW, &audit())
                            .is_ok()
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert_eq!(
            results.iter().filter(|ok| **ok).count(),
            1,
            "round {round}: {results:?}"
        );
        assert_eq!(fx.store.passkeys().unwrap().len(), 1, "round {round}");
    }
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name(super::Kind::Sqlite) } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::$name(super::Kind::Postgres) } )*
        }
    };
}

both!(
    registration_is_one_time_and_first_use_only,
    two_first_registrations_at_once_trust_only_one,
    passkey_approvals_are_filed_once_per_nonce,
    an_unfreeze_by_passkey_names_the_freeze_and_moves_the_counter_once,
    recent_decisions_are_the_gates_newest_first,
);

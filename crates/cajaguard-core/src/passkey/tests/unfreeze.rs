use super::*;
use crate::freeze::Frozen;

fn frozen(minute: u8) -> Frozen {
    Frozen {
        at: datetime!(2026-12-01 11:00:00 UTC) + time::Duration::minutes(minute.into()),
        reason: "settlement differed".to_owned(),
    }
}

fn unfreeze_doc(auth: &mut SoftAuthenticator, freeze: &Frozen) -> PasskeyUnfreeze {
    let terms = PasskeyUnfreezeTerms::new(freeze, NOW, [0x24; 16], "checked the shop", None);
    let assertion = auth.assert(&terms.challenge());
    PasskeyUnfreeze { terms, assertion }
}

fn verify(
    auth: &SoftAuthenticator,
    doc: &PasskeyUnfreeze,
    freeze: &Frozen,
    now: OffsetDateTime,
) -> Result<VerifiedPasskeyUnfreeze, PasskeyRejection> {
    verify_passkey_unfreeze(doc, &registry(auth, 0), &rp(), freeze, now)
}

#[test]
fn a_passkey_unfreeze_lifts_the_freeze_it_names_for_both_algorithms() {
    for mut auth in SoftAuthenticator::both() {
        let doc = unfreeze_doc(&mut auth, &frozen(0));
        let verified = verify(&auth, &doc, &frozen(0), NOW).unwrap();
        assert_eq!(verified.nonce(), "24".repeat(16));
        assert_eq!(verified.credential_id(), auth.credential_id);
        assert_eq!(verified.sign_count(), 1);
        let back: PasskeyUnfreeze =
            serde_json::from_str(&serde_json::to_string(&doc).unwrap()).unwrap();
        assert_eq!(back, doc);
    }
}

#[test]
fn a_passkey_unfreeze_for_an_earlier_freeze_or_out_of_time_is_refused() {
    for mut auth in SoftAuthenticator::both() {
        let doc = unfreeze_doc(&mut auth, &frozen(0));
        assert_eq!(
            verify(&auth, &doc, &frozen(1), NOW).unwrap_err(),
            PasskeyRejection::OtherFreeze
        );
        let late = NOW + time::Duration::minutes(5);
        assert_eq!(
            verify(&auth, &doc, &frozen(0), late).unwrap_err(),
            PasskeyRejection::Expired
        );
        let mut long = doc.clone();
        long.terms.expires_at = "2026-12-01T13:00:00Z".to_owned();
        let long = PasskeyUnfreeze {
            assertion: auth.assert(&long.terms.challenge()),
            terms: long.terms,
        };
        assert_eq!(
            verify(&auth, &long, &frozen(0), NOW).unwrap_err(),
            PasskeyRejection::LifetimeTooLong
        );
    }
}

#[test]
fn an_approval_assertion_cannot_unfreeze_nor_an_unfreeze_assertion_approve() {
    for mut auth in SoftAuthenticator::both() {
        let approval = approve(&mut auth, terms(&digest(1), Decision::Approve));
        let unfreeze = unfreeze_doc(&mut auth, &frozen(0));
        let crossed = PasskeyUnfreeze {
            terms: unfreeze.terms.clone(),
            assertion: approval.assertion.clone(),
        };
        assert_eq!(
            verify(&auth, &crossed, &frozen(0), NOW).unwrap_err(),
            PasskeyRejection::ChallengeMismatch
        );
        let crossed = PasskeyApproval {
            terms: approval.terms,
            assertion: unfreeze.assertion,
        };
        assert_eq!(
            check(&auth, &crossed).unwrap_err(),
            PasskeyRejection::ChallengeMismatch
        );
    }
}

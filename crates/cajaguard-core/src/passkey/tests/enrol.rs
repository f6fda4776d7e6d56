//! Approving a new passkey with a registered one.

use super::*;

fn enrol_setup() -> (SoftAuthenticator, PasskeyRegistry, RegisteredPasskey) {
    let approver = SoftAuthenticator::es256();
    let registry = registry(&approver, 0);
    let new = registered(&SoftAuthenticator::eddsa());
    (approver, registry, new)
}

#[test]
fn a_registered_passkey_approves_exactly_the_new_one() {
    let (mut approver, registry, new) = enrol_setup();
    let terms = PasskeyEnrolTerms::new(&new, NOW, [3; 16]);
    let assertion = approver.assert(&terms.challenge());
    let verified =
        verify_passkey_enrolment(&terms, &assertion, &registry, &rp(), &new, NOW).unwrap();
    assert_eq!(verified.approver(), approver.credential_id.as_slice());
    assert_eq!(verified.sign_count(), 1);

    // The same approval for another key under the same credential id.
    let mut other = new.clone();
    other.public_key = registered(&SoftAuthenticator::es256()).public_key;
    assert_eq!(
        verify_passkey_enrolment(&terms, &assertion, &registry, &rp(), &other, NOW).unwrap_err(),
        PasskeyRejection::ChallengeMismatch
    );
    // Expired.
    let late = NOW + time::Duration::minutes(6);
    assert_eq!(
        verify_passkey_enrolment(&terms, &assertion, &registry, &rp(), &new, late).unwrap_err(),
        PasskeyRejection::Expired
    );
}

#[test]
fn an_enrolment_needs_a_registered_approver_and_its_own_challenge() {
    let (_, registry, new) = enrol_setup();
    let terms = PasskeyEnrolTerms::new(&new, NOW, [3; 16]);
    // The new passkey approving itself: it is not registered yet.
    let mut itself = SoftAuthenticator::eddsa();
    let assertion = itself.assert(&terms.challenge());
    assert_eq!(
        verify_passkey_enrolment(&terms, &assertion, &registry, &rp(), &new, NOW).unwrap_err(),
        PasskeyRejection::UnregisteredCredential
    );
    // An assertion made for an approval does not pass for an enrolment.
    let mut approver = SoftAuthenticator::es256();
    let approval = terms_for_enrol_test();
    let assertion = approver.assert(&approval.challenge());
    assert_eq!(
        verify_passkey_enrolment(&terms, &assertion, &registry, &rp(), &new, NOW).unwrap_err(),
        PasskeyRejection::ChallengeMismatch
    );
}

fn terms_for_enrol_test() -> PasskeyApprovalTerms {
    super::terms(&digest(1), Decision::Approve)
}

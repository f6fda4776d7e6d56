//! Tests of passkey verification against the software authenticator: one happy path per
//! algorithm and ceremony, and one test per rejection, each failing without the check it names.

mod approval;
mod canonical;
mod enrol;
mod registration;
mod third_party;
mod unfreeze;

use std::time::Duration;

use time::OffsetDateTime;
use time::macros::datetime;

use super::soft_authenticator::{ORIGIN, SoftAuthenticator};
use super::*;
use crate::approval::{ApprovalTerms, BasketDigest, Decision};

/// The fixed clock of every test.
const NOW: OffsetDateTime = datetime!(2026-12-01 12:00:00 UTC);
const MAX_TTL: Duration = Duration::from_secs(60 * 60);
/// A registration challenge, as the server would draw it.
const REG_CHALLENGE: [u8; 32] = [0x5a; 32];

fn rp() -> RelyingParty {
    RelyingParty::new("localhost", ORIGIN).unwrap()
}

fn digest(byte: u8) -> BasketDigest {
    BasketDigest::from_bytes([byte; 32])
}

fn approval_terms(basket: &BasketDigest, decision: Decision) -> ApprovalTerms {
    ApprovalTerms {
        request_id: basket.request_id(),
        digest: *basket,
        decision,
        merchant: "Trailhead Outfitters".to_owned(),
        checkout_id: "chk_123".to_owned(),
        currency: "USD".to_owned(),
        total: 8900,
        issued_at: NOW,
        ttl: Duration::from_secs(15 * 60),
        nonce: [0x42; 16],
        note: "day pack".to_owned(),
        checkpoint: None,
    }
}

fn terms(basket: &BasketDigest, decision: Decision) -> PasskeyApprovalTerms {
    PasskeyApprovalTerms::new(&approval_terms(basket, decision), None)
}

/// Registers `auth` through [`verify_registration`] and returns the store's record.
fn registered(auth: &SoftAuthenticator) -> RegisteredPasskey {
    verify_registration(
        &rp(),
        &REG_CHALLENGE,
        &auth.register(&REG_CHALLENGE),
        "test key",
    )
    .unwrap()
}

/// A registry holding `auth`'s passkey with `sign_count` stored.
fn registry(auth: &SoftAuthenticator, sign_count: u32) -> PasskeyRegistry {
    let mut record = registered(auth);
    record.sign_count = sign_count;
    PasskeyRegistry::new(&[record]).unwrap()
}

/// `auth` approving `terms` as the page would have it.
fn approve(auth: &mut SoftAuthenticator, terms: PasskeyApprovalTerms) -> PasskeyApproval {
    let assertion = auth.assert(&terms.challenge());
    PasskeyApproval { terms, assertion }
}

/// Verifies `doc` for basket 1 at [`NOW`] against `auth`'s passkey with counter 0 stored.
fn check(
    auth: &SoftAuthenticator,
    doc: &PasskeyApproval,
) -> Result<VerifiedPasskeyApproval, PasskeyRejection> {
    verify_passkey_approval(doc, &registry(auth, 0), &rp(), &digest(1), NOW, MAX_TTL)
}

#[test]
fn relying_party_takes_only_a_serialised_origin_under_its_rp_id() {
    assert_eq!(rp().origin(), ORIGIN);
    assert_eq!(RelyingParty::localhost(8377), rp());
    assert!(RelyingParty::new("localhost", "https://approve.localhost").is_ok());
    for (rp_id, origin) in [
        ("localhost", "http://localhost:8377/"),
        ("localhost", "http://localhost:8377/approve"),
        ("localhost", "http://evil.example:8377"),
        ("localhost", "http://notlocalhost:8377"),
        ("localhost", "ftp://localhost:8377"),
        ("localhost", "http://LOCALHOST:8377"),
        ("", "http://localhost:8377"),
    ] {
        assert_eq!(
            RelyingParty::new(rp_id, origin),
            Err(PasskeyRejection::BadRelyingParty),
            "{rp_id} {origin}"
        );
    }
}

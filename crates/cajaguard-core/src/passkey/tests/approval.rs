use base64::Engine as _;

use super::*;
use crate::passkey::authdata::{FLAG_UP, FLAG_UV};

#[test]
fn an_approval_and_a_deny_verify_for_both_algorithms() {
    for mut auth in SoftAuthenticator::both() {
        for decision in [Decision::Approve, Decision::Deny] {
            let doc = approve(&mut auth, terms(&digest(1), decision));
            let verified = check(&auth, &doc).unwrap_or_else(|e| panic!("{}: {e}", auth.name()));
            assert_eq!(verified.decision(), decision);
            assert_eq!(verified.nonce(), "42".repeat(16));
            assert_eq!(verified.expires_at(), datetime!(2026-12-01 12:15:00 UTC));
            assert_eq!(verified.credential_id(), auth.credential_id);
        }
    }
}

#[test]
fn the_document_round_trips_through_json_and_verifies_offline() {
    for mut auth in SoftAuthenticator::both() {
        let doc = approve(&mut auth, terms(&digest(1), Decision::Approve));
        let text = doc.to_json_pretty();
        let back = PasskeyApproval::from_json(&text).unwrap();
        assert_eq!(back, doc);
        check(&auth, &back).unwrap();
        // Byte fields are base64url without padding, as the browser writes them.
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let sig = value["assertion"]["signature"].as_str().unwrap();
        assert!(!sig.contains(['=', '+', '/']), "{sig}");
    }
}

#[test]
fn the_browser_json_of_an_assertion_is_what_the_document_keeps() {
    let mut auth = SoftAuthenticator::eddsa();
    let doc = approve(&mut auth, terms(&digest(1), Decision::Approve));
    let a = &doc.assertion;
    let json = serde_json::json!({
        "id": b64::encode(&a.credential_id),
        "rawId": b64::encode(&a.credential_id),
        "type": "public-key",
        "response": {
            "clientDataJSON": b64::encode(&a.client_data_json),
            "authenticatorData": b64::encode(&a.authenticator_data),
            "signature": b64::encode(&a.signature),
            "userHandle": null,
        },
        "clientExtensionResults": {},
    });
    let read = BrowserAssertion::from_json(&json.to_string()).unwrap();
    assert_eq!(read.into_assertion(), doc.assertion);
}

#[test]
fn every_term_is_in_the_challenge() {
    let base = terms(&digest(1), Decision::Approve);
    let edits: [fn(&mut PasskeyApprovalTerms); 13] = [
        |t| t.version = 2,
        |t| t.request_id = digest(2).request_id().as_str().to_owned(),
        |t| t.digest = digest(2).to_hex(),
        |t| t.decision = "deny".to_owned(),
        |t| t.merchant.push('!'),
        |t| t.checkout_id.push('!'),
        |t| t.currency = "EUR".to_owned(),
        |t| t.total += 1,
        |t| t.issued_at = "2026-12-01T12:00:01Z".to_owned(),
        |t| t.expires_at = "2026-12-01T12:15:01Z".to_owned(),
        |t| t.nonce = "43".repeat(16),
        |t| t.note.push('!'),
        |t| t.checkpoint = Some("log\n1\nroot\n".to_owned()),
    ];
    for (i, edit) in edits.iter().enumerate() {
        let mut t = base.clone();
        edit(&mut t);
        assert_ne!(t.challenge(), base.challenge(), "edit {i}");
    }
    // And the prefix is in it: the same bytes under the unfreeze prefix differ.
    assert_ne!(
        crate::passkey::approval::challenge(UNFREEZE_CHALLENGE_CONTEXT, &base),
        base.challenge()
    );
    assert_eq!(
        b64::ENGINE
            .decode(base.challenge_b64url())
            .map(|b| b == base.challenge()),
        Ok(true)
    );
}

#[test]
fn terms_edited_after_approving_fail_the_challenge() {
    for mut auth in SoftAuthenticator::both() {
        // Another decision: the human denied, the document claims approve.
        let mut doc = approve(&mut auth, terms(&digest(1), Decision::Deny));
        doc.terms.decision = "approve".to_owned();
        assert_eq!(
            check(&auth, &doc).unwrap_err(),
            PasskeyRejection::ChallengeMismatch
        );

        // Another basket: an assertion made for basket 2 under basket 1's terms.
        let assertion = auth.assert(&terms(&digest(2), Decision::Approve).challenge());
        let doc = PasskeyApproval {
            terms: terms(&digest(1), Decision::Approve),
            assertion,
        };
        assert_eq!(
            check(&auth, &doc).unwrap_err(),
            PasskeyRejection::ChallengeMismatch
        );

        // A larger total, a longer life, a checkpoint added afterwards.
        for edit in [
            (|t: &mut PasskeyApprovalTerms| t.total = 100_000) as fn(&mut PasskeyApprovalTerms),
            |t| t.expires_at = "2026-12-01T12:30:00Z".to_owned(),
            |t| t.checkpoint = Some("forged".to_owned()),
        ] {
            let mut doc = approve(&mut auth, terms(&digest(1), Decision::Approve));
            edit(&mut doc.terms);
            assert_eq!(
                check(&auth, &doc).unwrap_err(),
                PasskeyRejection::ChallengeMismatch
            );
        }
    }
}

#[test]
fn an_honest_approval_for_another_basket_is_not_for_this_one() {
    for mut auth in SoftAuthenticator::both() {
        let doc = approve(&mut auth, terms(&digest(2), Decision::Approve));
        assert_eq!(
            check(&auth, &doc).unwrap_err(),
            PasskeyRejection::OtherBasket
        );
    }
}

#[test]
fn an_unregistered_passkey_is_refused() {
    let mut stranger = SoftAuthenticator::es256();
    stranger.credential_id = vec![0x99; 16];
    let doc = approve(&mut stranger, terms(&digest(1), Decision::Approve));
    assert_eq!(
        check(&SoftAuthenticator::es256(), &doc).unwrap_err(),
        PasskeyRejection::UnregisteredCredential
    );
    assert_eq!(
        verify_passkey_approval(
            &doc,
            &PasskeyRegistry::default(),
            &rp(),
            &digest(1),
            NOW,
            MAX_TTL
        )
        .unwrap_err(),
        PasskeyRejection::UnregisteredCredential
    );
}

/// `auth` approving basket 1 with the knob `set` turned, expecting `rejection`, for both keys.
fn refused_with(set: impl Fn(&mut SoftAuthenticator), rejection: PasskeyRejection) {
    for mut auth in SoftAuthenticator::both() {
        // Registered before the knob turns, as the passkey was.
        let passkeys = registry(&auth, 0);
        set(&mut auth);
        let doc = approve(&mut auth, terms(&digest(1), Decision::Approve));
        let result = verify_passkey_approval(&doc, &passkeys, &rp(), &digest(1), NOW, MAX_TTL);
        assert_eq!(result.unwrap_err(), rejection, "{}", auth.name());
    }
}

#[test]
fn a_registration_s_client_data_type_is_refused() {
    refused_with(
        |a| a.client_data_type = Some("webauthn.create"),
        PasskeyRejection::WrongClientDataType {
            expected: "webauthn.get",
            found: "webauthn.create",
        },
    );
    refused_with(
        |a| a.client_data_type = Some("payment.get"),
        PasskeyRejection::WrongClientDataType {
            expected: "webauthn.get",
            found: "another type",
        },
    );
}

#[test]
fn another_origin_or_a_cross_origin_frame_is_refused() {
    for origin in [
        "http://localhost:8378",
        "https://localhost:8377",
        "http://evil.example",
    ] {
        refused_with(
            |a| a.origin = origin.to_owned(),
            PasskeyRejection::WrongOrigin,
        );
    }
    refused_with(
        |a| a.client_data_extra = r#","topOrigin":"http://evil.example""#.to_owned(),
        PasskeyRejection::WrongOrigin,
    );
    // Signed inside another site's frame: `crossOrigin` true.
    for mut auth in SoftAuthenticator::both() {
        let mut doc = approve(&mut auth, terms(&digest(1), Decision::Approve));
        let a = &mut doc.assertion;
        let text = String::from_utf8(std::mem::take(&mut a.client_data_json)).unwrap();
        a.client_data_json = text
            .replace(r#""crossOrigin":false"#, r#""crossOrigin":true"#)
            .into_bytes();
        a.signature = auth.sign(&a.authenticator_data, &a.client_data_json);
        assert_eq!(
            check(&auth, &doc).unwrap_err(),
            PasskeyRejection::WrongOrigin
        );
    }
    // `crossOrigin` is already false in the client data; a second member is tampering.
    refused_with(
        |a| a.client_data_extra = r#","crossOrigin":true"#.to_owned(),
        PasskeyRejection::TamperedClientData,
    );
}

#[test]
fn another_relying_party_is_refused() {
    refused_with(
        |a| a.rp_id = "evil.example".to_owned(),
        PasskeyRejection::WrongRpIdHash,
    );
}

#[test]
fn user_presence_and_user_verification_are_required() {
    refused_with(|a| a.flags = FLAG_UV, PasskeyRejection::UserNotPresent);
    refused_with(|a| a.flags = FLAG_UP, PasskeyRejection::UserNotVerified);
    refused_with(|a| a.flags = 0, PasskeyRejection::UserNotPresent);
}

#[test]
fn an_altered_signature_authenticator_data_or_client_data_fails_the_signature() {
    for mut auth in SoftAuthenticator::both() {
        let good = approve(&mut auth, terms(&digest(1), Decision::Approve));
        let mut bad_sig = good.clone();
        let last = bad_sig.assertion.signature.len() - 2;
        bad_sig.assertion.signature[last] ^= 1;
        let mut bad_counter = good.clone();
        bad_counter.assertion.authenticator_data[36] ^= 0x80;
        // Client data rewritten with its meaning kept (spacing): still not what was signed.
        let mut bad_client = good.clone();
        let text = String::from_utf8(bad_client.assertion.client_data_json).unwrap();
        bad_client.assertion.client_data_json =
            text.replace(",\"origin\"", ", \"origin\"").into_bytes();
        let mut empty_sig = good.clone();
        empty_sig.assertion.signature.clear();
        for doc in [bad_sig, bad_counter, bad_client, empty_sig] {
            assert_eq!(
                check(&auth, &doc).unwrap_err(),
                PasskeyRejection::BadSignature,
                "{}",
                auth.name()
            );
        }
    }
}

#[test]
fn client_data_that_no_browser_writes_is_tampered() {
    let mut auth = SoftAuthenticator::es256();
    let good = approve(&mut auth, terms(&digest(1), Decision::Approve));
    let text = String::from_utf8(good.assertion.client_data_json.clone()).unwrap();
    let challenge = format!(r#""challenge":"{}""#, b64::encode(&[0u8; 32]));
    for edited in [
        // A second challenge: a reader keeping the last one would see another.
        text.replacen('}', &format!(",{challenge}}}"), 1),
        text.replacen('}', r#","extra":1,"extra":2}"#, 1),
        text.replacen("\"type\":\"webauthn.get\"", "\"type\":7", 1),
        text.replacen("\"type\":\"webauthn.get\",", "", 1),
        format!("{text} trailing"),
        "[]".to_owned(),
        "not json".to_owned(),
        format!("{text:<5000}"),
    ] {
        let mut doc = good.clone();
        doc.assertion.client_data_json = edited.clone().into_bytes();
        assert_eq!(
            check(&auth, &doc).unwrap_err(),
            PasskeyRejection::TamperedClientData,
            "{edited}"
        );
    }
}

/// (counter the authenticator presents, counter stored) -> the counter to keep, or the rejection.
#[test]
fn a_non_zero_counter_must_grow() {
    let grown = |stored, presented| PasskeyRejection::CounterNotGrown { stored, presented };
    let table = [
        (Some(5), 4, Ok(5)),
        (Some(5), 0, Ok(5)),
        // The same counter again is a replay or a clone; a smaller one has gone backwards.
        (Some(5), 5, Err(grown(5, 5))),
        (Some(5), 9, Err(grown(9, 5))),
        // An authenticator that keeps no counter: zero against zero passes (WebAuthn §7.2).
        (None, 0, Ok(0)),
        (None, 3, Err(grown(3, 0))),
    ];
    for make in [SoftAuthenticator::es256, SoftAuthenticator::eddsa] {
        for (presented, stored, expected) in table {
            let mut auth = make();
            auth.counter = presented;
            let doc = approve(&mut auth, terms(&digest(1), Decision::Approve));
            let passkeys = registry(&auth, stored);
            let result = verify_passkey_approval(&doc, &passkeys, &rp(), &digest(1), NOW, MAX_TTL);
            assert_eq!(
                result.map(|v| v.sign_count()),
                expected,
                "{} presented {presented:?} stored {stored}",
                auth.name()
            );
        }
    }
}

#[test]
fn expiry_and_lifetime_are_checked_against_the_clock_passed_in() {
    for mut auth in SoftAuthenticator::both() {
        let doc = approve(&mut auth, terms(&digest(1), Decision::Approve));
        let at = |now, max| {
            verify_passkey_approval(&doc, &registry(&auth, 0), &rp(), &digest(1), now, max)
        };
        assert!(at(datetime!(2026-12-01 12:14:59 UTC), MAX_TTL).is_ok());
        assert_eq!(
            at(datetime!(2026-12-01 12:15:00 UTC), MAX_TTL).unwrap_err(),
            PasskeyRejection::Expired
        );
        assert_eq!(
            at(NOW, Duration::from_secs(14 * 60)).unwrap_err(),
            PasskeyRejection::LifetimeTooLong
        );
        assert!(matches!(
            at(datetime!(2026-12-01 11:50:00 UTC), MAX_TTL),
            Err(PasskeyRejection::Malformed(_))
        ));
    }
}

#[test]
fn malformed_terms_and_authenticator_data_are_refused() {
    let mut auth = SoftAuthenticator::eddsa();
    let edits: [fn(&mut PasskeyApproval); 8] = [
        |d| d.terms.version = 2,
        |d| d.terms.decision = "maybe".to_owned(),
        |d| d.terms.nonce = "42".repeat(8),
        |d| d.terms.nonce = "XY".repeat(16),
        |d| d.terms.request_id = "cg-nothex".to_owned(),
        |d| d.terms.digest = "ab".to_owned(),
        |d| d.assertion.authenticator_data.truncate(36),
        |d| d.assertion.authenticator_data[32] |= 0x40,
    ];
    for (i, edit) in edits.iter().enumerate() {
        let mut doc = approve(&mut auth, terms(&digest(1), Decision::Approve));
        edit(&mut doc);
        if i < 6 {
            // Re-sign the edited terms, so only the malformed field can be what is refused.
            doc = approve(&mut auth, doc.terms);
        }
        assert!(
            matches!(check(&auth, &doc), Err(PasskeyRejection::Malformed(_))),
            "edit {i}"
        );
    }
    for text in ["{}", "not json", r#"{"terms":{},"assertion":{},"extra":1}"#] {
        assert!(matches!(
            PasskeyApproval::from_json(text),
            Err(PasskeyRejection::Malformed(_))
        ));
    }
    let doc = approve(&mut auth, terms(&digest(1), Decision::Approve));
    let mut value = serde_json::to_value(&doc).unwrap();
    value["assertion"]["signature"] = "*not base64*".into();
    assert!(matches!(
        PasskeyApproval::from_json(&value.to_string()),
        Err(PasskeyRejection::Malformed(_))
    ));
}

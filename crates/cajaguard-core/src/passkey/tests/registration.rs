use ciborium::value::Value;

use super::*;
use crate::passkey::authdata::{FLAG_ED, FLAG_UP, FLAG_UV};
use crate::passkey::soft_authenticator::{attestation_object, cbor};

fn register(auth: &SoftAuthenticator) -> Result<RegisteredPasskey, PasskeyRejection> {
    verify_registration(
        &rp(),
        &REG_CHALLENGE,
        &auth.register(&REG_CHALLENGE),
        "laptop",
    )
}

#[test]
fn registration_yields_the_key_the_authenticator_made_for_both_algorithms() {
    for (auth, algorithm) in SoftAuthenticator::both()
        .into_iter()
        .zip([Algorithm::Es256, Algorithm::EdDsa])
    {
        let record = register(&auth).unwrap();
        assert_eq!(record.algorithm, algorithm);
        assert_eq!(record.credential_id, auth.credential_id);
        assert_eq!(record.public_key, auth.cose_key());
        assert_eq!(record.name, "laptop");
        assert_eq!(record.sign_count, 0);
        assert_eq!(record.aaguid, "0".repeat(32));
        assert!(!record.backup_eligible);
    }
}

#[test]
fn a_registered_passkey_reads_back_from_json_and_still_verifies() {
    for mut auth in SoftAuthenticator::both() {
        let record = register(&auth).unwrap();
        let text = serde_json::to_string(&record).unwrap();
        let back: RegisteredPasskey = serde_json::from_str(&text).unwrap();
        assert_eq!(back, record);
        let passkeys = PasskeyRegistry::new(&[back]).unwrap();
        let doc = approve(&mut auth, terms(&digest(1), Decision::Approve));
        verify_passkey_approval(&doc, &passkeys, &rp(), &digest(1), NOW, MAX_TTL).unwrap();
    }
}

#[test]
fn the_browser_json_of_a_registration_is_read() {
    let auth = SoftAuthenticator::es256();
    let response = auth.register(&REG_CHALLENGE);
    let json = serde_json::json!({
        "id": b64::encode(&response.id),
        "rawId": b64::encode(&response.id),
        "type": "public-key",
        "authenticatorAttachment": "platform",
        "clientExtensionResults": {},
        "response": {
            "clientDataJSON": b64::encode(&response.response.client_data_json),
            "attestationObject": b64::encode(&response.response.attestation_object),
            "transports": ["internal"],
            "publicKeyAlgorithm": -7,
        },
    });
    let read = RegistrationResponse::from_json(&json.to_string()).unwrap();
    assert_eq!(read, response);
    assert!(matches!(
        RegistrationResponse::from_json(r#"{"id":"!!","response":{}}"#),
        Err(PasskeyRejection::Malformed(_))
    ));
}

#[test]
fn registration_checks_type_challenge_origin_rp_and_flags() {
    for make in [SoftAuthenticator::es256, SoftAuthenticator::eddsa] {
        let mut auth = make();
        auth.client_data_type = Some("webauthn.get");
        assert_eq!(
            register(&auth),
            Err(PasskeyRejection::WrongClientDataType {
                expected: "webauthn.create",
                found: "webauthn.get"
            })
        );

        let auth = make();
        let other = auth.register(&[0x11; 32]);
        assert_eq!(
            verify_registration(&rp(), &REG_CHALLENGE, &other, "x"),
            Err(PasskeyRejection::ChallengeMismatch)
        );

        let mut auth = make();
        auth.origin = "http://localhost:9999".to_owned();
        assert_eq!(register(&auth), Err(PasskeyRejection::WrongOrigin));

        let mut auth = make();
        auth.rp_id = "example.com".to_owned();
        assert_eq!(register(&auth), Err(PasskeyRejection::WrongRpIdHash));

        let mut auth = make();
        auth.flags = FLAG_UV;
        assert_eq!(register(&auth), Err(PasskeyRejection::UserNotPresent));

        let mut auth = make();
        auth.flags = FLAG_UP;
        assert_eq!(register(&auth), Err(PasskeyRejection::UserNotVerified));
    }
}

#[test]
fn registration_refuses_algorithms_other_than_es256_and_eddsa() {
    let mut auth = SoftAuthenticator::es256();
    auth.cose_alg = Some(-257); // RS256 label on an EC2 key
    assert_eq!(register(&auth), Err(PasskeyRejection::UnsupportedAlgorithm));
    let mut auth = SoftAuthenticator::eddsa();
    auth.cose_alg = Some(-19); // the fully-specified Ed25519 id is EdDSA too
    assert_eq!(register(&auth).unwrap().algorithm, Algorithm::EdDsa);
}

#[test]
fn registration_refuses_a_credential_id_other_than_the_authenticator_data_s() {
    let auth = SoftAuthenticator::eddsa();
    let mut response = auth.register(&REG_CHALLENGE);
    response.id = vec![1, 2, 3];
    assert!(matches!(
        verify_registration(&rp(), &REG_CHALLENGE, &response, "x"),
        Err(PasskeyRejection::Malformed(_))
    ));
}

#[test]
fn registration_refuses_a_short_server_challenge() {
    let auth = SoftAuthenticator::es256();
    assert!(matches!(
        verify_registration(&rp(), &[1; 8], &auth.register(&[1; 8]), "x"),
        Err(PasskeyRejection::Malformed(_))
    ));
}

#[test]
fn registration_refuses_malformed_attestation_objects_and_authenticator_data() {
    let auth = SoftAuthenticator::es256();
    let good = auth.registration_auth_data();
    let mut trailing = good.clone();
    trailing.push(0);
    let mut extensions_missing = good.clone();
    extensions_missing[32] |= FLAG_ED;
    let mut key_label_twice = auth.registration_auth_data();
    // A COSE map that repeats `kty`: the authenticator data ends with the key.
    let key = auth.cose_key();
    key_label_twice.truncate(good.len() - key.len());
    let Value::Map(mut entries) = ciborium::de::from_reader::<Value, _>(key.as_slice()).unwrap()
    else {
        unreachable!()
    };
    entries.push(entries[0].clone());
    key_label_twice.extend_from_slice(&cbor(&Value::Map(entries)));

    let objects = [
        attestation_object(&good[..40]),
        attestation_object(&trailing),
        attestation_object(&extensions_missing),
        attestation_object(&key_label_twice),
        cbor(&Value::Array(vec![])),
        cbor(&Value::Map(vec![(
            Value::Text("authData".into()),
            Value::Bytes(good.clone()),
        )])),
        {
            let mut object = attestation_object(&good);
            object.push(0);
            object
        },
    ];
    for (i, object) in objects.into_iter().enumerate() {
        let mut response = auth.register(&REG_CHALLENGE);
        response.response.attestation_object = object;
        assert!(
            matches!(
                verify_registration(&rp(), &REG_CHALLENGE, &response, "x"),
                Err(PasskeyRejection::Malformed(_))
            ),
            "case {i}"
        );
    }
}

#[test]
fn a_stored_record_whose_algorithm_disagrees_with_its_key_is_refused() {
    let mut record = register(&SoftAuthenticator::es256()).unwrap();
    record.algorithm = Algorithm::EdDsa;
    assert!(matches!(
        PasskeyRegistry::new(&[record]),
        Err(PasskeyRejection::Malformed(_))
    ));
}

//! The same ceremonies against an authenticator and client CajaGuard did not write (1Password's
//! `passkey-authenticator` and `passkey-client`), through the JSON a browser's `toJSON()` makes of their output: the
//! software authenticator above shares this code's reading of WebAuthn, this one does not. Its keys
//! come from its own randomness; what the tests assert does not depend on them.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use passkey_authenticator::{Authenticator, MemoryStore, UiHint, UserCheck, UserValidationMethod};
use passkey_client::{Client, DefaultClientData};
use passkey_crypto::{AvailableBackend, iana};
use passkey_types::ctap2::{Aaguid, Ctap2Error};
use passkey_types::webauthn::{
    AuthenticatorSelectionCriteria, CredentialCreationOptions, CredentialRequestOptions,
    PublicKeyCredentialCreationOptions, PublicKeyCredentialDescriptor,
    PublicKeyCredentialParameters, PublicKeyCredentialRequestOptions, PublicKeyCredentialRpEntity,
    PublicKeyCredentialType, PublicKeyCredentialUserEntity, UserVerificationRequirement,
};
use passkey_types::{Bytes, Passkey};

use super::*;

/// A human who is always present, and verified when `verifies`.
struct Human {
    verifies: bool,
}

#[async_trait::async_trait]
impl UserValidationMethod for Human {
    type PasskeyItem = Passkey;
    async fn check_user<'a>(
        &self,
        _hint: UiHint<'a, Passkey>,
        presence: bool,
        verification: bool,
    ) -> Result<UserCheck, Ctap2Error> {
        Ok(UserCheck {
            presence,
            verification: verification && self.verifies,
        })
    }
    fn is_presence_enabled(&self) -> bool {
        true
    }
    fn is_verification_enabled(&self) -> Option<bool> {
        Some(self.verifies)
    }
}

/// The in-memory authenticator never waits, so one poll finishes each call.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the in-memory authenticator waited"),
    }
}

type TestClient = Client<MemoryStore, Human, AvailableBackend, public_suffix::PublicSuffixList, ()>;

fn new_client(verifies: bool) -> TestClient {
    let authenticator = Authenticator::new(
        Aaguid::new_empty(),
        MemoryStore::new(),
        Human { verifies },
        AvailableBackend,
    );
    Client::new(authenticator).allows_insecure_localhost(true)
}

fn origin() -> url::Url {
    url::Url::parse(ORIGIN).unwrap()
}

fn uv(required: bool) -> UserVerificationRequirement {
    if required {
        UserVerificationRequirement::Required
    } else {
        UserVerificationRequirement::Discouraged
    }
}

/// Registers through the client; returns the response as the page would post it (its JSON).
fn create(
    client: &mut TestClient,
    alg: iana::Algorithm,
    uv_required: bool,
) -> RegistrationResponse {
    let options = PublicKeyCredentialCreationOptions {
        rp: PublicKeyCredentialRpEntity {
            id: Some("localhost".into()),
            name: "CajaGuard".into(),
        },
        user: PublicKeyCredentialUserEntity {
            id: vec![1; 16].into(),
            display_name: "approver".into(),
            name: "approver".into(),
        },
        challenge: REG_CHALLENGE.to_vec().into(),
        pub_key_cred_params: vec![PublicKeyCredentialParameters {
            ty: PublicKeyCredentialType::PublicKey,
            alg,
        }],
        timeout: None,
        exclude_credentials: None,
        authenticator_selection: Some(AuthenticatorSelectionCriteria {
            user_verification: uv(uv_required),
            ..Default::default()
        }),
        hints: None,
        attestation: Default::default(),
        attestation_formats: None,
        extensions: None,
    };
    let created = ready(client.register(
        &origin(),
        CredentialCreationOptions {
            public_key: options,
        },
        DefaultClientData,
    ))
    .unwrap();
    // passkey-types writes bytes as number arrays; the page posts `toJSON()`'s base64url.
    let json = serde_json::json!({
        "id": created.id,
        "rawId": b64::encode(&created.raw_id),
        "type": "public-key",
        "response": {
            "clientDataJSON": b64::encode(&created.response.client_data_json),
            "attestationObject": b64::encode(&created.response.attestation_object),
            "transports": ["internal", "hybrid"],
        },
        "clientExtensionResults": {},
    });
    RegistrationResponse::from_json(&json.to_string()).unwrap()
}

/// Asserts through the client over `challenge`; returns the assertion read from its JSON.
fn get(
    client: &mut TestClient,
    id: &[u8],
    challenge: &[u8; 32],
    uv_required: bool,
) -> PasskeyAssertion {
    let options = PublicKeyCredentialRequestOptions {
        challenge: challenge.to_vec().into(),
        timeout: None,
        rp_id: Some("localhost".into()),
        allow_credentials: Some(vec![PublicKeyCredentialDescriptor {
            ty: PublicKeyCredentialType::PublicKey,
            id: Bytes::from(id.to_vec()),
            transports: None,
        }]),
        user_verification: uv(uv_required),
        hints: None,
        attestation: Default::default(),
        attestation_formats: None,
        extensions: None,
    };
    let asserted = ready(client.authenticate(
        &origin(),
        CredentialRequestOptions {
            public_key: options,
        },
        DefaultClientData,
    ))
    .unwrap();
    let json = serde_json::json!({
        "id": asserted.id,
        "rawId": b64::encode(&asserted.raw_id),
        "type": "public-key",
        "response": {
            "clientDataJSON": b64::encode(&asserted.response.client_data_json),
            "authenticatorData": b64::encode(&asserted.response.authenticator_data),
            "signature": b64::encode(&asserted.response.signature),
        },
    });
    BrowserAssertion::from_json(&json.to_string())
        .unwrap()
        .into_assertion()
}

#[test]
fn passkey_rs_registrations_and_approvals_verify_for_es256_and_eddsa() {
    for (alg, expected) in [
        (iana::Algorithm::ES256, Algorithm::Es256),
        (iana::Algorithm::EdDSA, Algorithm::EdDsa),
        (iana::Algorithm::Ed25519, Algorithm::EdDsa),
    ] {
        let mut client = new_client(true);
        let response = create(&mut client, alg, true);
        let record = verify_registration(&rp(), &REG_CHALLENGE, &response, "passkey-rs").unwrap();
        assert_eq!(record.algorithm, expected, "{alg:?}");
        let passkeys = PasskeyRegistry::new(std::slice::from_ref(&record)).unwrap();

        for decision in [Decision::Approve, Decision::Deny] {
            let terms = terms(&digest(1), decision);
            let assertion = get(&mut client, &record.credential_id, &terms.challenge(), true);
            let doc = PasskeyApproval { terms, assertion };
            let doc = PasskeyApproval::from_json(&doc.to_json_pretty()).unwrap();
            let verified =
                verify_passkey_approval(&doc, &passkeys, &rp(), &digest(1), NOW, MAX_TTL)
                    .unwrap_or_else(|e| panic!("{alg:?}: {e}"));
            assert_eq!(verified.decision(), decision);
            assert_eq!(verified.credential_id(), record.credential_id);
        }

        // The same passkey's assertion for another basket, under this basket's terms.
        let other = terms(&digest(2), Decision::Approve).challenge();
        let doc = PasskeyApproval {
            terms: terms(&digest(1), Decision::Approve),
            assertion: get(&mut client, &record.credential_id, &other, true),
        };
        assert_eq!(
            verify_passkey_approval(&doc, &passkeys, &rp(), &digest(1), NOW, MAX_TTL).unwrap_err(),
            PasskeyRejection::ChallengeMismatch
        );
    }
}

#[test]
fn passkey_rs_without_user_verification_is_refused() {
    let mut client = new_client(false);
    let response = create(&mut client, iana::Algorithm::ES256, false);
    assert_eq!(
        verify_registration(&rp(), &REG_CHALLENGE, &response, "x").unwrap_err(),
        PasskeyRejection::UserNotVerified
    );

    // A passkey registered with verification, then used without it.
    let mut client = new_client(true);
    let response = create(&mut client, iana::Algorithm::EdDSA, true);
    let record = verify_registration(&rp(), &REG_CHALLENGE, &response, "x").unwrap();
    let terms = terms(&digest(1), Decision::Approve);
    let doc = PasskeyApproval {
        assertion: get(
            &mut client,
            &record.credential_id,
            &terms.challenge(),
            false,
        ),
        terms,
    };
    let passkeys = PasskeyRegistry::new(&[record]).unwrap();
    assert_eq!(
        verify_passkey_approval(&doc, &passkeys, &rp(), &digest(1), NOW, MAX_TTL).unwrap_err(),
        PasskeyRejection::UserNotVerified
    );
}

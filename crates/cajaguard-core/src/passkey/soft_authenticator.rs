//! A software authenticator for the tests: fixed P-256 or Ed25519 keys that produce real
//! authenticator data, client data JSON and signatures, with every field a test may want to get
//! wrong exposed as a knob (flags, RP ID, origin, type, counter), and re-signing done for it so a
//! rejection is the one the knob causes and not a broken signature. Test-only (the feature
//! `soft-authenticator` lends it to other crates' tests): a panic here is a failed test.
#![allow(clippy::unwrap_used)]

use ciborium::value::Value;
use sha2::{Digest as _, Sha256};

use super::assertion::PasskeyAssertion;
use super::authdata::FLAG_AT;

/// The user-present flag, for tests that clear it.
pub const FLAG_UP: u8 = super::authdata::FLAG_UP;
/// The user-verified flag, for tests that clear it.
pub const FLAG_UV: u8 = super::authdata::FLAG_UV;
use super::b64;
use super::registration::{AttestationResponse, RegistrationResponse};

pub const ORIGIN: &str = "http://localhost:8377";

enum Key {
    Es256(p256::ecdsa::SigningKey),
    EdDsa(ed25519_dalek::SigningKey),
}

pub struct SoftAuthenticator {
    key: Key,
    pub credential_id: Vec<u8>,
    /// The counter the next assertion carries; `None` for an authenticator that keeps none (0).
    pub counter: Option<u32>,
    pub flags: u8,
    pub rp_id: String,
    pub origin: String,
    /// `None`: the ceremony's own type.
    pub client_data_type: Option<&'static str>,
    /// Appended inside the client data object, e.g. `,"crossOrigin":true`.
    pub client_data_extra: String,
    /// COSE algorithm written into the key at registration (to test unsupported ones).
    pub cose_alg: Option<i64>,
}

impl SoftAuthenticator {
    fn new(key: Key, id_byte: u8) -> SoftAuthenticator {
        SoftAuthenticator {
            key,
            credential_id: vec![id_byte; 16],
            counter: Some(1),
            flags: FLAG_UP | FLAG_UV,
            rp_id: "localhost".to_owned(),
            origin: ORIGIN.to_owned(),
            client_data_type: None,
            client_data_extra: String::new(),
            cose_alg: None,
        }
    }
    /// P-256 from a fixed scalar.
    pub fn es256() -> SoftAuthenticator {
        let key = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        SoftAuthenticator::new(Key::Es256(key), 0xe5)
    }
    /// Ed25519 from a fixed seed.
    pub fn eddsa() -> SoftAuthenticator {
        SoftAuthenticator::new(
            Key::EdDsa(ed25519_dalek::SigningKey::from_bytes(&[9u8; 32])),
            0xed,
        )
    }
    pub fn both() -> [SoftAuthenticator; 2] {
        [SoftAuthenticator::es256(), SoftAuthenticator::eddsa()]
    }
    pub fn name(&self) -> &'static str {
        match self.key {
            Key::Es256(_) => "ES256",
            Key::EdDsa(_) => "EdDSA",
        }
    }

    pub fn cose_key(&self) -> Vec<u8> {
        let int = |i: i64| Value::Integer(i.into());
        let map = match &self.key {
            Key::Es256(key) => {
                let point = key.verifying_key().to_sec1_point(false);
                let bytes = point.as_bytes();
                vec![
                    (int(1), int(2)),
                    (int(3), int(self.cose_alg.unwrap_or(-7))),
                    (int(-1), int(1)),
                    (int(-2), Value::Bytes(bytes[1..33].to_vec())),
                    (int(-3), Value::Bytes(bytes[33..].to_vec())),
                ]
            }
            Key::EdDsa(key) => vec![
                (int(1), int(1)),
                (int(3), int(self.cose_alg.unwrap_or(-8))),
                (int(-1), int(6)),
                (
                    int(-2),
                    Value::Bytes(key.verifying_key().to_bytes().to_vec()),
                ),
            ],
        };
        cbor(&Value::Map(map))
    }

    pub fn client_data(&self, default_type: &str, challenge: &[u8]) -> Vec<u8> {
        format!(
            r#"{{"type":"{}","challenge":"{}","origin":"{}","crossOrigin":false{}}}"#,
            self.client_data_type.unwrap_or(default_type),
            b64::encode(challenge),
            self.origin,
            self.client_data_extra
        )
        .into_bytes()
    }

    fn auth_data(&self, flags: u8, counter: u32, attested: &[u8]) -> Vec<u8> {
        let mut out = Sha256::digest(self.rp_id.as_bytes()).to_vec();
        out.push(flags);
        out.extend_from_slice(&counter.to_be_bytes());
        out.extend_from_slice(attested);
        out
    }

    /// The WebAuthn signature over authenticator data ‖ SHA-256(client data).
    pub fn sign(&self, auth_data: &[u8], client_data: &[u8]) -> Vec<u8> {
        let mut message = auth_data.to_vec();
        message.extend_from_slice(&Sha256::digest(client_data));
        match &self.key {
            Key::Es256(key) => {
                let sig: p256::ecdsa::Signature =
                    p256::ecdsa::signature::Signer::sign(key, &message);
                sig.to_der().as_bytes().to_vec()
            }
            Key::EdDsa(key) => ed25519_dalek::Signer::sign(key, &message)
                .to_bytes()
                .to_vec(),
        }
    }

    /// Authenticator data with attested credential data (AAGUID all zeros, as under `none`).
    pub fn registration_auth_data(&self) -> Vec<u8> {
        let mut attested = vec![0u8; 16];
        let id_len = u16::try_from(self.credential_id.len()).unwrap();
        attested.extend_from_slice(&id_len.to_be_bytes());
        attested.extend_from_slice(&self.credential_id);
        attested.extend_from_slice(&self.cose_key());
        self.auth_data(self.flags | FLAG_AT, 0, &attested)
    }

    /// A `navigator.credentials.create` response for `challenge`, attestation `none`.
    pub fn register(&self, challenge: &[u8]) -> RegistrationResponse {
        RegistrationResponse {
            id: self.credential_id.clone(),
            kind: "public-key".to_owned(),
            response: AttestationResponse {
                client_data_json: self.client_data("webauthn.create", challenge),
                attestation_object: attestation_object(&self.registration_auth_data()),
            },
        }
    }

    /// A `navigator.credentials.get` assertion for `challenge`; the counter then moves on by one.
    pub fn assert(&mut self, challenge: &[u8; 32]) -> PasskeyAssertion {
        let counter = self.counter.unwrap_or(0);
        let auth_data = self.auth_data(self.flags, counter, &[]);
        let client_data = self.client_data("webauthn.get", challenge);
        let signature = self.sign(&auth_data, &client_data);
        if let Some(c) = &mut self.counter {
            *c += 1;
        }
        PasskeyAssertion {
            credential_id: self.credential_id.clone(),
            authenticator_data: auth_data,
            client_data_json: client_data,
            signature,
        }
    }
}

pub fn cbor(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::ser::into_writer(value, &mut out).unwrap();
    out
}

pub fn attestation_object(auth_data: &[u8]) -> Vec<u8> {
    cbor(&Value::Map(vec![
        (Value::Text("fmt".into()), Value::Text("none".into())),
        (Value::Text("attStmt".into()), Value::Map(vec![])),
        (
            Value::Text("authData".into()),
            Value::Bytes(auth_data.to_vec()),
        ),
    ]))
}

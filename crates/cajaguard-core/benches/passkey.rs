//! Passkey approval verification beside the signature verify it cannot do without, measured in the
//! same run: `verify_passkey_approval` (terms, JCS challenge, client data, authenticator data,
//! signature, counter, basket, lifetime) against a bare P-256 ECDSA verify (and Ed25519's) of the
//! same message. Target (issue 15): the ES256 approval at most 1.5x the P-256 floor.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use base64::Engine as _;
use cajaguard_core::approval::{ApprovalTerms, BasketDigest, Decision};
use cajaguard_core::passkey::{
    Algorithm, PasskeyApproval, PasskeyApprovalTerms, PasskeyAssertion, PasskeyRegistry,
    RegisteredPasskey, RelyingParty, verify_passkey_approval,
};
use ciborium::value::Value;
use criterion::{Criterion, criterion_group, criterion_main};
use sha2::{Digest as _, Sha256};
use time::macros::datetime;

const NOW: time::OffsetDateTime = datetime!(2026-12-01 12:00:00 UTC);

enum Key {
    P256(p256::ecdsa::SigningKey),
    Ed25519(ed25519_dalek::SigningKey),
}

fn cose(key: &Key) -> (Algorithm, Vec<u8>) {
    let int = |i: i64| Value::Integer(i.into());
    let (alg, map) = match key {
        Key::P256(k) => {
            let point = k.verifying_key().to_sec1_point(false);
            let b = point.as_bytes();
            let map = vec![
                (int(1), int(2)),
                (int(3), int(-7)),
                (int(-1), int(1)),
                (int(-2), Value::Bytes(b[1..33].to_vec())),
                (int(-3), Value::Bytes(b[33..].to_vec())),
            ];
            (Algorithm::Es256, map)
        }
        Key::Ed25519(k) => {
            let map = vec![
                (int(1), int(1)),
                (int(3), int(-8)),
                (int(-1), int(6)),
                (int(-2), Value::Bytes(k.verifying_key().to_bytes().to_vec())),
            ];
            (Algorithm::EdDsa, map)
        }
    };
    let mut out = Vec::new();
    ciborium::ser::into_writer(&Value::Map(map), &mut out).unwrap();
    (alg, out)
}

/// A document as the page would produce it, the registry holding its passkey, and the signed
/// message with its raw signature for the floor.
fn fixture(key: &Key) -> (PasskeyApproval, PasskeyRegistry, Vec<u8>, Vec<u8>) {
    let basket = BasketDigest::from_bytes([1; 32]);
    let terms = PasskeyApprovalTerms::new(
        &ApprovalTerms {
            request_id: basket.request_id(),
            digest: basket,
            decision: Decision::Approve,
            merchant: "demo-outfitters.example".to_owned(),
            checkout_id: "gid://fixture/Checkout/1".to_owned(),
            currency: "USD".to_owned(),
            total: 8900,
            issued_at: NOW,
            ttl: Duration::from_secs(15 * 60),
            nonce: [0x42; 16],
            note: String::new(),
            checkpoint: None,
        },
        None,
    );
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(terms.challenge());
    let client_data = format!(
        r#"{{"type":"webauthn.get","challenge":"{challenge}","origin":"http://localhost:8377","crossOrigin":false}}"#
    )
    .into_bytes();
    let mut auth_data = Sha256::digest(b"localhost").to_vec();
    auth_data.push(0x05); // UP | UV
    auth_data.extend_from_slice(&7u32.to_be_bytes());
    let mut message = auth_data.clone();
    message.extend_from_slice(&Sha256::digest(&client_data));
    let (signature, raw) = match key {
        Key::P256(k) => {
            let sig: p256::ecdsa::Signature = p256::ecdsa::signature::Signer::sign(k, &message);
            (sig.to_der().as_bytes().to_vec(), sig.to_bytes().to_vec())
        }
        Key::Ed25519(k) => {
            let sig = ed25519_dalek::Signer::sign(k, &message).to_bytes().to_vec();
            (sig.clone(), sig)
        }
    };
    let (algorithm, public_key) = cose(key);
    let record = RegisteredPasskey {
        credential_id: vec![0xc5; 16],
        name: "bench".to_owned(),
        algorithm,
        public_key,
        sign_count: 6,
        aaguid: "0".repeat(32),
        backup_eligible: false,
    };
    let doc = PasskeyApproval {
        terms,
        assertion: PasskeyAssertion {
            credential_id: record.credential_id.clone(),
            authenticator_data: auth_data,
            client_data_json: client_data,
            signature,
        },
    };
    (doc, PasskeyRegistry::new(&[record]).unwrap(), message, raw)
}

fn bench(c: &mut Criterion) {
    let rp = RelyingParty::localhost(8377);
    let basket = BasketDigest::from_bytes([1; 32]);
    let max_ttl = Duration::from_secs(60 * 60);

    let p256_key = Key::P256(p256::ecdsa::SigningKey::from_slice(&[7; 32]).unwrap());
    let (doc, passkeys, message, raw) = fixture(&p256_key);
    verify_passkey_approval(&doc, &passkeys, &rp, &basket, NOW, max_ttl).unwrap();
    c.bench_function("passkey/verify_approval_es256", |b| {
        b.iter(|| {
            verify_passkey_approval(black_box(&doc), &passkeys, &rp, &basket, NOW, max_ttl).unwrap()
        })
    });
    let Key::P256(k) = &p256_key else {
        unreachable!()
    };
    let vk = *k.verifying_key();
    let sig = p256::ecdsa::Signature::from_slice(&raw).unwrap();
    c.bench_function("passkey/floor_p256_verify", |b| {
        b.iter(|| p256::ecdsa::signature::Verifier::verify(&vk, black_box(&message), &sig).unwrap())
    });

    let ed_key = Key::Ed25519(ed25519_dalek::SigningKey::from_bytes(&[9; 32]));
    let (doc, passkeys, message, raw) = fixture(&ed_key);
    verify_passkey_approval(&doc, &passkeys, &rp, &basket, NOW, max_ttl).unwrap();
    c.bench_function("passkey/verify_approval_eddsa", |b| {
        b.iter(|| {
            verify_passkey_approval(black_box(&doc), &passkeys, &rp, &basket, NOW, max_ttl).unwrap()
        })
    });
    let Key::Ed25519(k) = &ed_key else {
        unreachable!()
    };
    let vk = k.verifying_key();
    let sig = ed25519_dalek::Signature::from_slice(&raw).unwrap();
    c.bench_function("passkey/floor_ed25519_verify", |b| {
        b.iter(|| vk.verify_strict(black_box(&message), &sig).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

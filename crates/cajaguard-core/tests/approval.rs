//! Approvals (SPEC §6): keys as PEM (interoperating with OpenSSL), signing, verification order,
//! and tampering with any signed field.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use cajaguard_core::approval::{
    self, ApprovalDocument, BasketDigest, Decision, PublicKey, Rejection, SigningKey, TrustedKeys,
};
use cajaguard_core::quote::Quote;
use common::*;
use proptest::prelude::*;

fn quote() -> Quote {
    Quote::from_shop(&usd(PACK, 1)).unwrap()
}

fn handlers() -> Vec<cajaguard_core::request::Instrument> {
    vec![cajaguard_core::request::Instrument::of_handler(
        "fixture_test_handler",
    )]
}

fn signed(decision: Decision) -> (ApprovalDocument, BasketDigest) {
    let q = quote();
    let terms = terms_for(
        &q,
        &handlers(),
        decision,
        NOW - time::Duration::minutes(1),
        minutes(15),
    );
    (sign(&trusted_key(), &terms), terms.digest)
}

fn trusted() -> TrustedKeys {
    TrustedKeys(vec![
        untrusted_key().public_key(),
        trusted_key().public_key(),
    ])
}

fn check(
    doc: &ApprovalDocument,
    digest: &BasketDigest,
) -> Result<approval::VerifiedApproval, Rejection> {
    approval::verify(doc, &trusted(), digest, NOW, minutes(15))
}

#[test]
fn a_signed_approval_verifies_and_round_trips_through_json() {
    let (doc, digest) = signed(Decision::Approve);
    let v = check(&doc, &digest).unwrap();
    assert_eq!(v.decision(), Decision::Approve);
    assert_eq!(v.nonce(), "5a".repeat(16));
    assert_eq!(doc.issued_at, "2026-08-25T11:59:00Z");
    assert_eq!(doc.expires_at, "2026-08-25T12:14:00Z");
    let text = doc.to_json_pretty();
    let back = ApprovalDocument::from_json(&text).unwrap();
    assert_eq!(back, doc);
    // Re-ordered and re-indented JSON still verifies: the signature covers canonical JSON.
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut fields: Vec<(String, serde_json::Value)> =
        value.as_object().unwrap().clone().into_iter().collect();
    fields.reverse();
    let reordered = format!(
        "{{{}}}",
        fields
            .iter()
            .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), v))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert!(check(&ApprovalDocument::from_json(&reordered).unwrap(), &digest).is_ok());
    let (deny, d) = signed(Decision::Deny);
    assert_eq!(check(&deny, &d).unwrap().decision(), Decision::Deny);
}

#[test]
fn unknown_fields_in_the_file_are_refused() {
    let (doc, _) = signed(Decision::Approve);
    let mut value = serde_json::to_value(&doc).unwrap();
    value["extra"] = serde_json::json!(1);
    assert!(ApprovalDocument::from_json(&value.to_string()).is_err());
    assert!(ApprovalDocument::from_json("not json").is_err());
}

#[test]
fn verification_order() {
    let (doc, digest) = signed(Decision::Approve);
    // Edited expires_at: the signature is checked before expiry or lifetime.
    let mut edited = doc.clone();
    edited.expires_at = "2026-08-25T13:00:00Z".into();
    assert_eq!(
        check(&edited, &digest).unwrap_err(),
        Rejection::BadSignature
    );
    // Unknown key id.
    let only_other = TrustedKeys(vec![untrusted_key().public_key()]);
    assert_eq!(
        approval::verify(&doc, &only_other, &digest, NOW, minutes(15)).unwrap_err(),
        Rejection::UntrustedKey
    );
    // Key id of a trusted key but signed by another key.
    let mut forged = sign(
        &untrusted_key(),
        &terms_for(&quote(), &handlers(), Decision::Approve, NOW, minutes(5)),
    );
    forged.key_id = trusted_key().public_key().key_id();
    assert_eq!(
        check(&forged, &digest).unwrap_err(),
        Rejection::BadSignature
    );
    // Another basket.
    let other = BasketDigest::of(&Quote::from_shop(&usd(SOCKS, 2)).unwrap(), &handlers());
    assert_eq!(check(&doc, &other).unwrap_err(), Rejection::OtherBasket);
    // Lifetime over max_ttl.
    assert_eq!(
        approval::verify(&doc, &trusted(), &digest, NOW, minutes(10)).unwrap_err(),
        Rejection::TtlTooLong
    );
    // Expired: now == expires_at is expired.
    let at_expiry = NOW + time::Duration::minutes(14);
    assert_eq!(
        approval::verify(&doc, &trusted(), &digest, at_expiry, minutes(15)).unwrap_err(),
        Rejection::Expired
    );
    // Issued more than 5 minutes in the future.
    let early = NOW - time::Duration::minutes(7);
    assert_eq!(
        approval::verify(&doc, &trusted(), &digest, early, minutes(15)).unwrap_err(),
        Rejection::Malformed
    );
    let slightly_early = NOW - time::Duration::minutes(5);
    assert!(approval::verify(&doc, &trusted(), &digest, slightly_early, minutes(15)).is_ok());
    // Malformed pieces.
    for edit in [
        (|d: &mut ApprovalDocument| d.version = 2) as fn(&mut ApprovalDocument),
        |d| d.decision = "maybe".into(),
        |d| d.nonce = "abcd".into(),
        |d| d.issued_at = "yesterday".into(),
        |d| d.expires_at = "2026-08-25T14:14:00+02:00".into(),
        |d| d.signature = "AAAA".into(),
        |d| d.key_id = "XYZ".into(),
    ] {
        let mut bad = doc.clone();
        edit(&mut bad);
        assert_eq!(check(&bad, &digest).unwrap_err(), Rejection::Malformed);
    }
}

#[test]
fn keys_round_trip_as_pem() {
    let key = trusted_key();
    let pem = key.to_pkcs8_pem().unwrap();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
    let back = SigningKey::from_pkcs8_pem(&pem).unwrap();
    assert_eq!(back.public_key(), key.public_key());
    let pub_pem = key.public_key().to_pem().unwrap();
    assert!(pub_pem.starts_with("-----BEGIN PUBLIC KEY-----\n"));
    assert_eq!(PublicKey::from_pem(&pub_pem).unwrap(), key.public_key());
    assert_eq!(key.public_key().key_id().len(), 16);
    assert!(SigningKey::from_pkcs8_pem(&pub_pem).is_err());
    assert!(PublicKey::from_pem(&pem).is_err());
    // The error names no key material.
    let err = match SigningKey::from_pkcs8_pem(
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    ) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted garbage"),
    };
    assert!(!err.contains("AAAA"));
}

/// A PKCS#8 v2 key (with the public key embedded), as ed25519-dalek writes by default, must load.
#[test]
fn reads_pkcs8_v2() {
    use ed25519_dalek::pkcs8::EncodePrivateKey;
    let dalek = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let v2 = dalek
        .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .unwrap();
    let ours = SigningKey::from_pkcs8_pem(&v2).unwrap();
    assert_eq!(ours.public_key(), trusted_key().public_key());
    // Ours is v1: shorter than v2 and equal to OpenSSL's layout (48-byte DER).
    assert!(trusted_key().to_pkcs8_pem().unwrap().len() < v2.len());
}

fn openssl_available() -> bool {
    match Command::new("openssl").arg("version").output() {
        Ok(out) if out.status.success() => true,
        _ => {
            eprintln!(
                "SKIP: the `openssl` binary is not on PATH; OpenSSL key interoperability was not checked"
            );
            false
        }
    }
}

fn openssl(args: &[&str]) -> std::process::Output {
    Command::new("openssl").args(args).output().unwrap()
}

#[test]
fn keys_interoperate_with_openssl() {
    if !openssl_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();

    // OpenSSL's key loads, and its public key matches ours.
    let out = openssl(&[
        "genpkey",
        "-algorithm",
        "ed25519",
        "-out",
        &p("openssl.key.pem"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs =
        SigningKey::from_pkcs8_pem(&std::fs::read_to_string(p("openssl.key.pem")).unwrap())
            .unwrap();
    let out = openssl(&[
        "pkey",
        "-in",
        &p("openssl.key.pem"),
        "-pubout",
        "-out",
        &p("openssl.pub.pem"),
    ]);
    assert!(out.status.success());
    let their_pub =
        PublicKey::from_pem(&std::fs::read_to_string(p("openssl.pub.pem")).unwrap()).unwrap();
    assert_eq!(theirs.public_key(), their_pub);
    assert_eq!(
        theirs.public_key().to_pem().unwrap(),
        std::fs::read_to_string(p("openssl.pub.pem")).unwrap()
    );

    // OpenSSL reads the keys we write.
    let key = trusted_key();
    std::fs::write(p("ours.key.pem"), key.to_pkcs8_pem().unwrap().as_bytes()).unwrap();
    std::fs::write(p("ours.pub.pem"), key.public_key().to_pem().unwrap()).unwrap();
    let out = openssl(&["pkey", "-in", &p("ours.key.pem"), "-noout"]);
    assert!(
        out.status.success(),
        "openssl refused our private key: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = openssl(&["pkey", "-pubin", "-in", &p("ours.pub.pem"), "-noout"]);
    assert!(
        out.status.success(),
        "openssl refused our public key: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = openssl(&["pkey", "-in", &p("ours.key.pem"), "-pubout"]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        key.public_key().to_pem().unwrap()
    );

    // A signature made with OpenSSL's key verifies under the public key OpenSSL derived.
    let q = quote();
    let doc = approval::sign(
        &theirs,
        &terms_for(&q, &handlers(), Decision::Approve, NOW, minutes(5)),
    );
    let digest = BasketDigest::of(&q, &handlers());
    assert!(
        approval::verify(
            &doc,
            &TrustedKeys(vec![their_pub]),
            &digest,
            NOW,
            minutes(15)
        )
        .is_ok()
    );
    let _ = Path::new(&p("x"));
}

/// The signed fields, each with a way to alter it that keeps the document well formed.
fn alter(doc: &mut ApprovalDocument, field: usize, salt: u8) {
    let hexflip = |s: &str| {
        let mut b = s.as_bytes().to_vec();
        let i = usize::from(salt) % b.len();
        b[i] = if b[i] == b'0' { b'1' } else { b'0' };
        String::from_utf8(b).unwrap()
    };
    match field {
        0 => {
            doc.request_id =
                hexflip(&doc.request_id[3..])
                    .chars()
                    .fold("cg-".to_owned(), |mut a, c| {
                        a.push(c);
                        a
                    })
        }
        1 => doc.digest = hexflip(&doc.digest),
        2 => {
            doc.decision = if doc.decision == "approve" {
                "deny".into()
            } else {
                "approve".into()
            }
        }
        3 => doc.merchant.push(char::from(b'a' + salt % 26)),
        4 => doc.checkout_id.push(char::from(b'0' + salt % 10)),
        5 => doc.currency = "EUR".into(),
        6 => doc.total += 1 + i64::from(salt),
        7 => doc.issued_at = "2026-08-25T11:58:00Z".into(),
        8 => doc.expires_at = format!("2026-08-25T12:{:02}:00Z", 1 + salt % 13),
        9 => doc.nonce = hexflip(&doc.nonce),
        10 => doc.note.push_str(" (edited)"),
        11 => doc.key_id = hexflip(&doc.key_id),
        12 => {
            doc.signature = {
                let mut sig = base64::Engine::decode(
                    &base64::engine::general_purpose::STANDARD,
                    &doc.signature,
                )
                .unwrap();
                let i = usize::from(salt) % sig.len();
                sig[i] ^= 1 << (salt % 8);
                base64::Engine::encode(&base64::engine::general_purpose::STANDARD, sig)
            }
        }
        _ => doc.version += 1,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn altering_any_signed_field_fails_verification(field in 0usize..14, salt in any::<u8>()) {
        let (mut doc, digest) = signed(Decision::Approve);
        let original = doc.clone();
        alter(&mut doc, field, salt);
        prop_assert_ne!(&doc, &original);
        prop_assert!(check(&doc, &digest).is_err());
    }

    #[test]
    fn flipping_any_bit_of_the_file_never_verifies_as_something_else(pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let (doc, digest) = signed(Decision::Approve);
        let mut bytes = doc.to_json_pretty().into_bytes();
        let i = pos.index(bytes.len());
        bytes[i] ^= 1 << bit;
        if let Ok(text) = String::from_utf8(bytes)
            && let Ok(parsed) = ApprovalDocument::from_json(&text)
            && parsed != doc
        {
            prop_assert!(check(&parsed, &digest).is_err());
        }
    }
}

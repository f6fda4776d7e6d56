//! The token checks, one rejection per test, with keys made here (P-256, Ed25519) or committed
//! as test fixtures (RSA 2048), a JWKS in a temp dir or on a loopback test server, and a fixed
//! clock.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use jsonwebtoken::EncodingKey;
use p256::ecdsa::signature::Signer as _;
use serde_json::json;

use super::*;

const ISS: &str = "https://issuer.example";
const AUD: &str = "https://gate.example/mcp";
const NOW: i64 = 1_800_000_000;
const AGENT: &str = "shopper-1";

const RSA_PRIVATE_PEM: &str = include_str!("../../../tests/fixtures/oauth/rsa-test-private.pem");
const RSA_PUBLIC_PEM: &str = include_str!("../../../tests/fixtures/oauth/rsa-test-public.pem");
const RSA_PUBLIC_DER: &[u8] = include_bytes!("../../../tests/fixtures/oauth/rsa-test-public.der");
const RSA_PUBLIC_JWK: &str = include_str!("../../../tests/fixtures/oauth/rsa-test-public.jwk.json");

enum Key {
    Ec(p256::ecdsa::SigningKey),
    Ed(ed25519_dalek::SigningKey),
    Rsa(EncodingKey),
    /// HS256/384/512 over this secret, per the header's alg.
    Hmac(Vec<u8>),
    Unsigned,
}

fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn ec_key(seed: u8) -> p256::ecdsa::SigningKey {
    p256::ecdsa::SigningKey::from_slice(&[seed; 32]).unwrap()
}

fn ed_key(seed: u8) -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[seed; 32])
}

/// The body of a PEM file, decoded.
fn pem_der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}

fn rsa_key() -> EncodingKey {
    EncodingKey::from_rsa_der(&pem_der(RSA_PRIVATE_PEM))
}

fn ec_point(key: &p256::ecdsa::SigningKey) -> Vec<u8> {
    key.verifying_key().to_sec1_point(false).as_bytes().to_vec()
}

fn ec_jwk(key: &p256::ecdsa::SigningKey, kid: &str) -> Value {
    let point = ec_point(key);
    json!({"kty": "EC", "crv": "P-256", "kid": kid, "x": b64(&point[1..33]), "y": b64(&point[33..65])})
}

fn ed_jwk(key: &ed25519_dalek::SigningKey, kid: &str) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(key.verifying_key().as_bytes())})
}

fn rsa_jwk(kid: &str) -> Value {
    let mut jwk: Value = serde_json::from_str(RSA_PUBLIC_JWK).unwrap();
    jwk["kid"] = json!(kid);
    jwk
}

/// A compact JWS over exactly this header and these claims.
fn token(header: &Value, claims: &Value, key: &Key) -> String {
    let message = format!("{}.{}", b64(header.to_string()), b64(claims.to_string()));
    let signature = match key {
        Key::Ec(k) => {
            let sig: p256::ecdsa::Signature = k.sign(message.as_bytes());
            b64(sig.to_bytes())
        }
        Key::Ed(k) => b64(ed25519_dalek::Signer::sign(k, message.as_bytes()).to_bytes()),
        Key::Rsa(k) => jsonwebtoken::crypto::sign(message.as_bytes(), k, Algorithm::RS256).unwrap(),
        Key::Hmac(secret) => {
            let alg = match header["alg"].as_str().unwrap() {
                "HS384" => Algorithm::HS384,
                "HS512" => Algorithm::HS512,
                _ => Algorithm::HS256,
            };
            let key = EncodingKey::from_secret(secret).unwrap();
            jsonwebtoken::crypto::sign(message.as_bytes(), &key, alg).unwrap()
        }
        Key::Unsigned => String::new(),
    };
    format!("{message}.{signature}")
}

fn header(alg: &str, kid: Option<&str>) -> Value {
    match kid {
        Some(kid) => json!({"alg": alg, "typ": "JWT", "kid": kid}),
        None => json!({"alg": alg, "typ": "JWT"}),
    }
}

fn claims() -> Value {
    json!({"iss": ISS, "aud": AUD, "sub": AGENT, "exp": NOW + 600, "nbf": NOW - 10, "iat": NOW - 10})
}

fn with(mut claims: Value, name: &str, value: Value) -> Value {
    claims[name] = value;
    claims
}

fn without(mut claims: Value, name: &str) -> Value {
    claims.as_object_mut().unwrap().remove(name);
    claims
}

/// The three signing keys of the standard JWKS, with their kids and algs.
fn signers() -> Vec<(&'static str, &'static str, Key)> {
    vec![
        ("ES256", "ec1", Key::Ec(ec_key(1))),
        ("EdDSA", "ed1", Key::Ed(ed_key(2))),
        ("RS256", "rsa1", Key::Rsa(rsa_key())),
    ]
}

fn standard_jwks() -> Value {
    json!({"keys": [ec_jwk(&ec_key(1), "ec1"), ed_jwk(&ed_key(2), "ed1"), rsa_jwk("rsa1")]})
}

#[derive(Debug)]
struct Setup {
    _dir: tempfile::TempDir,
    verifier: TokenVerifier,
}

fn setup_with(jwks: &Value, agent_claim: &str) -> Result<Setup, OauthError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks.to_string()).unwrap();
    let mut settings = OauthSettings::new(ISS, AUD, JwksSource::File(path));
    settings.agent_claim = agent_claim.to_owned();
    let verifier = TokenVerifier::new(settings)?;
    Ok(Setup {
        _dir: dir,
        verifier,
    })
}

fn setup() -> Setup {
    setup_with(&standard_jwks(), DEFAULT_AGENT_CLAIM).unwrap()
}

/// `token` is refused with exactly `expected`, and the message shows neither the token nor the
/// agent's name.
#[track_caller]
fn refused(verifier: &TokenVerifier, token: &str, expected: TokenRejected) {
    let got = verifier.verify(token, NOW);
    assert_eq!(
        got,
        Err(expected.clone()),
        "for a token meant to be {expected:?}"
    );
    let message = expected.to_string();
    assert!(
        !message.contains(token) && !message.contains(AGENT),
        "{message}"
    );
}

#[test]
fn each_algorithm_is_accepted_with_and_without_kid() {
    let s = setup();
    for (alg, kid, key) in signers() {
        let with_kid = token(&header(alg, Some(kid)), &claims(), &key);
        assert_eq!(
            s.verifier.verify(&with_kid, NOW).as_deref(),
            Ok(AGENT),
            "{alg}"
        );
        // Without kid, the keys of the alg's type are tried.
        let no_kid = token(&header(alg, None), &claims(), &key);
        assert_eq!(
            s.verifier.verify(&no_kid, NOW).as_deref(),
            Ok(AGENT),
            "{alg}"
        );
    }
}

#[test]
fn a_custom_agent_claim_is_returned_raw() {
    let s = setup_with(&standard_jwks(), "client_id").unwrap();
    let bot_claims = with(claims(), "client_id", json!("Bot 7 (raw)"));
    for (alg, kid, key) in signers() {
        let t = token(&header(alg, Some(kid)), &bot_claims, &key);
        assert_eq!(
            s.verifier.verify(&t, NOW).as_deref(),
            Ok("Bot 7 (raw)"),
            "{alg}"
        );
    }
    // `sub` is there, but it is not the configured claim.
    let t = token(
        &header("ES256", Some("ec1")),
        &claims(),
        &Key::Ec(ec_key(1)),
    );
    refused(
        &s.verifier,
        &t,
        TokenRejected::MissingClaim("client_id".into()),
    );
}

#[test]
fn an_expired_token_is_refused_after_the_leeway() {
    let s = setup();
    for (alg, kid, key) in signers() {
        let late = token(
            &header(alg, Some(kid)),
            &with(claims(), "exp", json!(NOW - CLOCK_LEEWAY_SECS)),
            &key,
        );
        refused(&s.verifier, &late, TokenRejected::Expired);
        let long_gone = token(
            &header(alg, Some(kid)),
            &with(claims(), "exp", json!(NOW - 3600)),
            &key,
        );
        refused(&s.verifier, &long_gone, TokenRejected::Expired);
        // Within the leeway: accepted.
        let skewed = token(
            &header(alg, Some(kid)),
            &with(claims(), "exp", json!(NOW - CLOCK_LEEWAY_SECS + 1)),
            &key,
        );
        assert_eq!(s.verifier.verify(&skewed, NOW).as_deref(), Ok(AGENT));
    }
    // A fractional NumericDate is rounded down for exp.
    let key = Key::Ec(ec_key(1));
    let frac = token(
        &header("ES256", Some("ec1")),
        &with(
            claims(),
            "exp",
            json!((NOW - CLOCK_LEEWAY_SECS) as f64 + 0.9),
        ),
        &key,
    );
    refused(&s.verifier, &frac, TokenRejected::Expired);
}

#[test]
fn the_clock_is_the_injected_one() {
    // Valid at NOW, long expired by the system clock's reckoning if it were 2100, and not yet
    // valid if it were 1970: only `now_unix` decides.
    let s = setup();
    let key = Key::Ec(ec_key(1));
    let t = token(&header("ES256", Some("ec1")), &claims(), &key);
    assert_eq!(s.verifier.verify(&t, NOW).as_deref(), Ok(AGENT));
    assert_eq!(
        s.verifier.verify(&t, NOW + 601 + CLOCK_LEEWAY_SECS),
        Err(TokenRejected::Expired)
    );
    assert_eq!(
        s.verifier.verify(&t, NOW - 3600),
        Err(TokenRejected::NotYetValid)
    );
    // A token that expired (by the real clock) in 2001 is accepted at an injected 2000.
    let old = with(
        with(claims(), "exp", json!(1_000_000_000)),
        "nbf",
        json!(900_000_000),
    );
    let t = token(&header("ES256", Some("ec1")), &old, &key);
    assert_eq!(s.verifier.verify(&t, 950_000_000).as_deref(), Ok(AGENT));
}

#[test]
fn a_token_not_valid_yet_is_refused_after_the_leeway() {
    let s = setup();
    for (alg, kid, key) in signers() {
        let early = token(
            &header(alg, Some(kid)),
            &with(claims(), "nbf", json!(NOW + CLOCK_LEEWAY_SECS + 1)),
            &key,
        );
        refused(&s.verifier, &early, TokenRejected::NotYetValid);
        let skewed = token(
            &header(alg, Some(kid)),
            &with(claims(), "nbf", json!(NOW + CLOCK_LEEWAY_SECS)),
            &key,
        );
        assert_eq!(s.verifier.verify(&skewed, NOW).as_deref(), Ok(AGENT));
        // nbf is optional.
        let none = token(&header(alg, Some(kid)), &without(claims(), "nbf"), &key);
        assert_eq!(s.verifier.verify(&none, NOW).as_deref(), Ok(AGENT));
    }
    let key = Key::Ec(ec_key(1));
    let bad = token(
        &header("ES256", Some("ec1")),
        &with(claims(), "nbf", json!("soon")),
        &key,
    );
    refused(&s.verifier, &bad, TokenRejected::InvalidClaim("nbf".into()));
}

#[test]
fn another_issuer_is_refused() {
    let s = setup();
    for (alg, kid, key) in signers() {
        for iss in [
            json!("https://evil.example"),
            json!(format!("{ISS}/")),
            json!(ISS.to_uppercase()),
        ] {
            let t = token(&header(alg, Some(kid)), &with(claims(), "iss", iss), &key);
            refused(&s.verifier, &t, TokenRejected::Issuer);
        }
        let t = token(&header(alg, Some(kid)), &without(claims(), "iss"), &key);
        refused(&s.verifier, &t, TokenRejected::MissingClaim("iss".into()));
        let t = token(
            &header(alg, Some(kid)),
            &with(claims(), "iss", json!([ISS])),
            &key,
        );
        refused(&s.verifier, &t, TokenRejected::InvalidClaim("iss".into()));
    }
}

#[test]
fn the_audience_must_be_there() {
    let s = setup();
    for (alg, kid, key) in signers() {
        let t = token(
            &header(alg, Some(kid)),
            &with(claims(), "aud", json!("https://other.example/mcp")),
            &key,
        );
        refused(&s.verifier, &t, TokenRejected::Audience);
        let t = token(
            &header(alg, Some(kid)),
            &with(claims(), "aud", json!(["https://other.example", "x"])),
            &key,
        );
        refused(&s.verifier, &t, TokenRejected::Audience);
        let t = token(
            &header(alg, Some(kid)),
            &with(claims(), "aud", json!([])),
            &key,
        );
        refused(&s.verifier, &t, TokenRejected::Audience);
        let t = token(&header(alg, Some(kid)), &without(claims(), "aud"), &key);
        refused(&s.verifier, &t, TokenRejected::MissingClaim("aud".into()));
        let t = token(
            &header(alg, Some(kid)),
            &with(claims(), "aud", json!(7)),
            &key,
        );
        refused(&s.verifier, &t, TokenRejected::InvalidClaim("aud".into()));
        // An array that contains the audience is accepted.
        let t = token(
            &header(alg, Some(kid)),
            &with(claims(), "aud", json!(["https://other.example", AUD])),
            &key,
        );
        assert_eq!(s.verifier.verify(&t, NOW).as_deref(), Ok(AGENT));
    }
}

#[test]
fn alg_none_is_refused() {
    let s = setup();
    for alg in ["none", "None", "NONE", "nOnE"] {
        for kid in [None, Some("ec1"), Some("rsa1")] {
            let t = token(&header(alg, kid), &claims(), &Key::Unsigned);
            refused(&s.verifier, &t, TokenRejected::Algorithm(alg.into()));
        }
    }
}

#[test]
fn hmac_with_the_public_key_as_secret_is_refused() {
    // The classic confusion: the verifier is handed the public key and an HS* header, and MACs
    // with the key's bytes as the secret. Every form of the public key an attacker could use.
    let ec_point = ec_point(&ec_key(1));
    let ec_jwk = ec_jwk(&ec_key(1), "ec1");
    let rsa_jwk = rsa_jwk("rsa1");
    let secrets: Vec<Vec<u8>> = vec![
        RSA_PUBLIC_PEM.as_bytes().to_vec(),
        RSA_PUBLIC_DER.to_vec(),
        rsa_jwk["n"].as_str().unwrap().as_bytes().to_vec(),
        URL_SAFE_NO_PAD
            .decode(rsa_jwk["n"].as_str().unwrap())
            .unwrap(),
        RSA_PUBLIC_JWK.as_bytes().to_vec(),
        ec_point.clone(),
        ec_point[1..33].to_vec(),
        ec_jwk["x"].as_str().unwrap().as_bytes().to_vec(),
        ed_key(2).verifying_key().as_bytes().to_vec(),
    ];
    let s = setup();
    for alg in ["HS256", "HS384", "HS512"] {
        for secret in &secrets {
            for kid in [None, Some("rsa1"), Some("ec1"), Some("ed1")] {
                let t = token(&header(alg, kid), &claims(), &Key::Hmac(secret.clone()));
                refused(&s.verifier, &t, TokenRejected::Algorithm(alg.into()));
            }
        }
    }
}

#[test]
fn an_oct_key_in_the_jwks_never_verifies_hmac() {
    let secret = b"a shared secret the issuer should not have published".to_vec();
    let mut jwks = standard_jwks();
    jwks["keys"]
        .as_array_mut()
        .unwrap()
        .push(json!({"kty": "oct", "kid": "hmac1", "alg": "HS256", "k": b64(&secret)}));
    let s = setup_with(&jwks, DEFAULT_AGENT_CLAIM).unwrap();
    let t = token(
        &header("HS256", Some("hmac1")),
        &claims(),
        &Key::Hmac(secret),
    );
    refused(&s.verifier, &t, TokenRejected::Algorithm("HS256".into()));
}

#[test]
fn other_algorithms_are_refused_by_name() {
    let s = setup();
    for alg in [
        "ES384", "RS512", "PS256", "ES256K", "Ed25519", "es256", "RS256 ",
    ] {
        let t = token(&header(alg, Some("rsa1")), &claims(), &Key::Rsa(rsa_key()));
        refused(&s.verifier, &t, TokenRejected::Algorithm(shown_alg(alg)));
    }
    // A long or odd alg is shortened in the message.
    let long = "X".repeat(500);
    let t = token(&header(&long, None), &claims(), &Key::Unsigned);
    let err = s.verifier.verify(&t, NOW).unwrap_err();
    assert!(err.to_string().len() < 150, "{err}");
}

#[test]
fn an_alg_that_does_not_fit_the_kid_s_key_is_refused() {
    let s = setup();
    // An RS256 header over the EC key's kid (signed with the RSA key), and the other pairings.
    for (alg, kid, key) in [
        ("RS256", "ec1", Key::Rsa(rsa_key())),
        ("ES256", "rsa1", Key::Ec(ec_key(1))),
        ("EdDSA", "ec1", Key::Ed(ed_key(2))),
        ("ES256", "ed1", Key::Ec(ec_key(1))),
        ("RS256", "ed1", Key::Rsa(rsa_key())),
    ] {
        let t = token(&header(alg, Some(kid)), &claims(), &key);
        refused(&s.verifier, &t, TokenRejected::KeyMismatch);
    }
    // A key that states another alg is not used at all.
    let jwks = json!({"keys": [with(rsa_jwk("rsa384"), "alg", json!("RS384")), ec_jwk(&ec_key(1), "ec1")]});
    let s = setup_with(&jwks, DEFAULT_AGENT_CLAIM).unwrap();
    let t = token(
        &header("RS256", Some("rsa384")),
        &claims(),
        &Key::Rsa(rsa_key()),
    );
    refused(&s.verifier, &t, TokenRejected::UnknownKey);
    let t = token(&header("RS256", None), &claims(), &Key::Rsa(rsa_key()));
    refused(&s.verifier, &t, TokenRejected::UnknownKey);
    // One that states the right alg is.
    let jwks = json!({"keys": [with(rsa_jwk("rsa1"), "alg", json!("RS256"))]});
    let s = setup_with(&jwks, DEFAULT_AGENT_CLAIM).unwrap();
    let t = token(
        &header("RS256", Some("rsa1")),
        &claims(),
        &Key::Rsa(rsa_key()),
    );
    assert_eq!(s.verifier.verify(&t, NOW).as_deref(), Ok(AGENT));
}

#[test]
fn an_unknown_kid_is_refused() {
    let s = setup();
    for (alg, _, key) in signers() {
        let t = token(&header(alg, Some("rotated-away")), &claims(), &key);
        refused(&s.verifier, &t, TokenRejected::UnknownKey);
    }
    // No kid, and no key of the alg's type.
    let jwks = json!({"keys": [ec_jwk(&ec_key(1), "ec1")]});
    let s = setup_with(&jwks, DEFAULT_AGENT_CLAIM).unwrap();
    let t = token(&header("EdDSA", None), &claims(), &Key::Ed(ed_key(2)));
    refused(&s.verifier, &t, TokenRejected::UnknownKey);
}

#[test]
fn a_tampered_payload_is_refused() {
    let s = setup();
    for (alg, kid, key) in signers() {
        let good = token(&header(alg, Some(kid)), &claims(), &key);
        let forged = token(
            &header(alg, Some(kid)),
            &with(claims(), "sub", json!("admin")),
            &key,
        );
        let mut parts: Vec<&str> = good.split('.').collect();
        parts[1] = forged.split('.').nth(1).unwrap();
        refused(&s.verifier, &parts.join("."), TokenRejected::Signature);
        // The same without a kid: every key of the type is tried, none verifies.
        let good = token(&header(alg, None), &claims(), &key);
        let forged = token(
            &header(alg, None),
            &with(claims(), "sub", json!("admin")),
            &key,
        );
        let mut parts: Vec<&str> = good.split('.').collect();
        parts[1] = forged.split('.').nth(1).unwrap();
        refused(&s.verifier, &parts.join("."), TokenRejected::Signature);
        // A truncated or flipped signature.
        let mut parts: Vec<String> = token(&header(alg, Some(kid)), &claims(), &key)
            .split('.')
            .map(str::to_owned)
            .collect();
        let mut sig = URL_SAFE_NO_PAD.decode(&parts[2]).unwrap();
        sig[5] ^= 1;
        parts[2] = b64(&sig);
        refused(&s.verifier, &parts.join("."), TokenRejected::Signature);
        parts[2] = String::new();
        refused(&s.verifier, &parts.join("."), TokenRejected::Signature);
    }
}

#[test]
fn a_key_that_is_not_in_the_jwks_does_not_verify() {
    let s = setup();
    for (alg, kid, key) in [
        ("ES256", "ec1", Key::Ec(ec_key(9))),
        ("EdDSA", "ed1", Key::Ed(ed_key(9))),
    ] {
        let t = token(&header(alg, Some(kid)), &claims(), &key);
        refused(&s.verifier, &t, TokenRejected::Signature);
        let t = token(&header(alg, None), &claims(), &key);
        refused(&s.verifier, &t, TokenRejected::Signature);
    }
}

#[test]
fn a_key_embedded_in_the_header_is_ignored() {
    let s = setup();
    let attacker = ec_key(9);
    let mut h = header("ES256", None);
    h["jwk"] = ec_jwk(&attacker, "mine");
    h["jku"] = json!("https://attacker.example/jwks.json");
    let t = token(&h, &claims(), &Key::Ec(attacker));
    refused(&s.verifier, &t, TokenRejected::Signature);
}

#[test]
fn missing_or_mistyped_exp_is_refused() {
    let s = setup();
    for (alg, kid, key) in signers() {
        let t = token(&header(alg, Some(kid)), &without(claims(), "exp"), &key);
        refused(&s.verifier, &t, TokenRejected::MissingClaim("exp".into()));
        for exp in [json!("1900000000"), json!(null), json!([NOW + 600])] {
            let t = token(&header(alg, Some(kid)), &with(claims(), "exp", exp), &key);
            refused(&s.verifier, &t, TokenRejected::InvalidClaim("exp".into()));
        }
    }
}

#[test]
fn a_missing_non_string_or_blank_agent_claim_is_refused() {
    let s = setup();
    for (alg, kid, key) in signers() {
        let t = token(&header(alg, Some(kid)), &without(claims(), "sub"), &key);
        refused(&s.verifier, &t, TokenRejected::MissingClaim("sub".into()));
        for sub in [
            json!(42),
            json!(null),
            json!(["shopper-1"]),
            json!({"name": "shopper-1"}),
            // Blank: every such principal would be the one agent `oauth:`.
            json!(""),
            json!(" \t\n"),
        ] {
            let t = token(&header(alg, Some(kid)), &with(claims(), "sub", sub), &key);
            refused(&s.verifier, &t, TokenRejected::InvalidClaim("sub".into()));
        }
    }
}

#[test]
fn an_oversized_token_is_refused_before_parsing() {
    let s = setup();
    // Validly signed: without the size check it would be accepted.
    let padded = with(claims(), "pad", json!("p".repeat(MAX_TOKEN_BYTES)));
    let t = token(&header("ES256", Some("ec1")), &padded, &Key::Ec(ec_key(1)));
    assert!(t.len() > MAX_TOKEN_BYTES);
    refused(&s.verifier, &t, TokenRejected::TooLong);
    // Not even the shape is looked at.
    refused(
        &s.verifier,
        &"x".repeat(MAX_TOKEN_BYTES + 1),
        TokenRejected::TooLong,
    );
    // Just under the limit is fine.
    let padded = with(claims(), "pad", json!("p".repeat(11_500)));
    let t = token(&header("ES256", Some("ec1")), &padded, &Key::Ec(ec_key(1)));
    assert!(
        (MAX_TOKEN_BYTES - 1000..=MAX_TOKEN_BYTES).contains(&t.len()),
        "{}",
        t.len()
    );
    assert_eq!(s.verifier.verify(&t, NOW).as_deref(), Ok(AGENT));
}

#[test]
fn malformed_tokens_are_refused() {
    let s = setup();
    let good = token(
        &header("ES256", Some("ec1")),
        &claims(),
        &Key::Ec(ec_key(1)),
    );
    let parts: Vec<&str> = good.split('.').collect();
    for bad in [
        String::new(),
        "abc".to_owned(),
        format!("{}.{}", parts[0], parts[1]),
        format!("{good}.{}", parts[2]),
        format!("{}..{}", parts[0], parts[2]),
        format!("{}=.{}.{}", parts[0], parts[1], parts[2]),
        format!("{}.{}.{}+", parts[0], parts[1], parts[2]),
        format!("{}.{}.{}", b64("not json"), parts[1], parts[2]),
        format!("{}.{}.{}", b64("[\"ES256\"]"), parts[1], parts[2]),
        format!("{}.{}.{}", b64(r#"{"kid":"ec1"}"#), parts[1], parts[2]),
        format!(
            "{}.{}.{}",
            b64(r#"{"alg":"ES256","kid":7}"#),
            parts[1],
            parts[2]
        ),
        format!("Bearer {good}"),
    ] {
        let got = s.verifier.verify(&bad, NOW);
        assert!(
            matches!(got, Err(TokenRejected::Malformed(_))),
            "{bad}: {got:?}"
        );
    }
    // A signed payload that is not a JSON object.
    for payload in ["[1,2]", "\"sub\"", "not json"] {
        let message = format!(
            "{}.{}",
            b64(header("ES256", Some("ec1")).to_string()),
            b64(payload)
        );
        let sig: p256::ecdsa::Signature = ec_key(1).sign(message.as_bytes());
        let t = format!("{message}.{}", b64(sig.to_bytes()));
        let got = s.verifier.verify(&t, NOW);
        assert!(
            matches!(got, Err(TokenRejected::Malformed(_))),
            "{payload}: {got:?}"
        );
    }
}

#[test]
fn a_critical_header_extension_is_refused() {
    let s = setup();
    let mut h = header("ES256", Some("ec1"));
    h["crit"] = json!(["exp-policy"]);
    h["exp-policy"] = json!("lenient");
    let t = token(&h, &claims(), &Key::Ec(ec_key(1)));
    refused(&s.verifier, &t, TokenRejected::CriticalHeader);
}

#[test]
fn unusable_keys_in_a_jwks_are_skipped() {
    let jwks = json!({"keys": [
        {"kty": "oct", "k": b64(b"secret"), "kid": "h"},
        {"kty": "EC", "crv": "P-384", "kid": "p384", "x": b64([1u8; 48]), "y": b64([2u8; 48])},
        {"kty": "EC", "crv": "P-256", "kid": "off-curve", "x": b64([1u8; 32]), "y": b64([2u8; 32])},
        {"kty": "OKP", "crv": "Ed25519", "kid": "short", "x": b64([1u8; 16])},
        {"kty": "OKP", "crv": "X25519", "kid": "x", "x": b64([1u8; 32])},
        {"kty": "RSA", "kid": "tiny", "n": b64([0xffu8; 128]), "e": "AQAB"},
        with(ec_jwk(&ec_key(3), "enc"), "use", json!("enc")),
        with(ec_jwk(&ec_key(3), "sign-only"), "key_ops", json!(["sign"])),
        with(ec_jwk(&ec_key(3), "wrong-alg"), "alg", json!("RS256")),
        {"kty": "EC", "crv": "P-256", "kid": "no-y", "x": b64([1u8; 32])},
        {"kty": "LWE", "kid": "future"},
        "not an object",
        ec_jwk(&ec_key(1), "ec1"),
        with(ed_jwk(&ed_key(2), "ed1"), "key_ops", json!(["verify"])),
    ]});
    let s = setup_with(&jwks, DEFAULT_AGENT_CLAIM).unwrap();
    assert_eq!(s.verifier.current_keys().keys.len(), 2);
    let t = token(
        &header("ES256", Some("ec1")),
        &claims(),
        &Key::Ec(ec_key(1)),
    );
    assert_eq!(s.verifier.verify(&t, NOW).as_deref(), Ok(AGENT));
    let t = token(
        &header("EdDSA", Some("ed1")),
        &claims(),
        &Key::Ed(ed_key(2)),
    );
    assert_eq!(s.verifier.verify(&t, NOW).as_deref(), Ok(AGENT));
    for kid in ["enc", "sign-only", "wrong-alg"] {
        let t = token(&header("ES256", Some(kid)), &claims(), &Key::Ec(ec_key(3)));
        refused(&s.verifier, &t, TokenRejected::UnknownKey);
    }
    // A short Ed25519 key is skipped, not a panic at the first token.
    let t = token(
        &header("EdDSA", Some("short")),
        &claims(),
        &Key::Ed(ed_key(2)),
    );
    refused(&s.verifier, &t, TokenRejected::UnknownKey);
}

#[test]
fn a_jwks_that_cannot_be_used_is_an_error_naming_its_source() {
    let only_oct = json!({"keys": [{"kty": "oct", "k": b64(b"secret")}]});
    let err = setup_with(&only_oct, DEFAULT_AGENT_CLAIM).unwrap_err();
    assert!(
        matches!(err, OauthError::NoUsableKeys { skipped: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("jwks.json"), "{err}");

    for bad in [json!([1, 2]), json!({"keys": "none"}), json!({"key": []})] {
        let err = setup_with(&bad, DEFAULT_AGENT_CLAIM).unwrap_err();
        assert!(matches!(err, OauthError::JwksParse { .. }), "{err}");
        assert!(err.to_string().contains("jwks.json"), "{err}");
    }
    let many: Vec<Value> = (0..=MAX_KEYS)
        .map(|i| ec_jwk(&ec_key(1), &format!("k{i}")))
        .collect();
    let err = setup_with(&json!({ "keys": many }), DEFAULT_AGENT_CLAIM).unwrap_err();
    assert!(matches!(err, OauthError::TooManyKeys { .. }), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.json");
    let err =
        TokenVerifier::new(OauthSettings::new(ISS, AUD, JwksSource::File(missing))).unwrap_err();
    assert!(matches!(err, OauthError::JwksRead { .. }), "{err}");
    assert!(err.to_string().contains("nowhere.json"), "{err}");

    let big = dir.path().join("big.json");
    std::fs::write(&big, vec![b' '; MAX_JWKS_BYTES as usize + 1]).unwrap();
    let err = TokenVerifier::new(OauthSettings::new(ISS, AUD, JwksSource::File(big))).unwrap_err();
    assert!(matches!(err, OauthError::JwksRead { .. }), "{err}");

    let mut settings = OauthSettings::new(ISS, "", JwksSource::File(dir.path().join("x")));
    assert!(matches!(
        TokenVerifier::new(settings.clone()),
        Err(OauthError::EmptySetting("audience"))
    ));
    settings.audience = AUD.into();
    settings.agent_claim = String::new();
    assert!(matches!(
        TokenVerifier::new(settings),
        Err(OauthError::EmptySetting("agent_claim"))
    ));
}

#[test]
fn a_jwks_url_must_be_https_or_loopback_http() {
    for refused in [
        "http://issuer.example/jwks.json",
        "http://localhost:8080/jwks.json",
        "http://10.1.2.3/jwks.json",
        "http://192.168.1.1/jwks.json",
        "http://[fe80::1]/jwks.json",
        "http://0.0.0.0:1/jwks.json",
        "ftp://127.0.0.1/jwks.json",
        "file:///etc/jwks.json",
    ] {
        let url = url::Url::parse(refused).unwrap();
        let err =
            TokenVerifier::new(OauthSettings::new(ISS, AUD, JwksSource::Url(url))).unwrap_err();
        assert!(
            matches!(err, OauthError::InsecureJwksUrl(_)),
            "{refused}: {err}"
        );
    }
    for allowed in [
        "https://issuer.example/jwks.json",
        "http://127.0.0.1:9/jwks",
        "http://127.8.0.1/",
        "http://[::1]:9/jwks",
    ] {
        assert!(
            check_jwks_url(&url::Url::parse(allowed).unwrap()).is_ok(),
            "{allowed}"
        );
    }
    // Allowed, but nothing listens: an error that names the URL, not its query.
    let url = url::Url::parse("http://127.0.0.1:1/jwks.json?secret=1").unwrap();
    let err = TokenVerifier::new(OauthSettings::new(ISS, AUD, JwksSource::Url(url))).unwrap_err();
    assert!(matches!(err, OauthError::JwksFetch { .. }), "{err}");
    assert!(
        err.to_string().contains("http://127.0.0.1:1/jwks.json")
            && !err.to_string().contains("secret"),
        "{err}"
    );
}

/// A loopback HTTP server that answers each request with the next of `responses` (the last one
/// again once they run out), counts the requests, and stops when dropped (or after 60 s).
struct JwksServer {
    url: url::Url,
    served: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl JwksServer {
    fn start(responses: Vec<(u16, String)>) -> JwksServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = url::Url::parse(&format!(
            "http://{}/jwks.json",
            listener.local_addr().unwrap()
        ))
        .unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (served, stop) = (served.clone(), stop.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                    let mut stream = match listener.accept() {
                        Ok((stream, _)) => stream,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                        Err(_) => return,
                    };
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let n = served.fetch_add(1, Ordering::SeqCst);
                    let (status, body) = &responses[n.min(responses.len() - 1)];
                    let head = format!(
                        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes());
                    let _ = stream.write_all(body.as_bytes());
                }
            })
        };
        JwksServer {
            url,
            served,
            stop,
            thread: Some(thread),
        }
    }

    fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn a_jwks_url_is_fetched_at_start() {
    let server = JwksServer::start(vec![(200, standard_jwks().to_string())]);
    let verifier = TokenVerifier::new(OauthSettings::new(
        ISS,
        AUD,
        JwksSource::Url(server.url.clone()),
    ))
    .unwrap();
    assert_eq!(server.served(), 1);
    for (alg, kid, key) in signers() {
        let t = token(&header(alg, Some(kid)), &claims(), &key);
        assert_eq!(verifier.verify(&t, NOW).as_deref(), Ok(AGENT), "{alg}");
    }
    // Known kids never go back to the issuer.
    assert_eq!(server.served(), 1);
}

#[test]
fn a_jwks_url_that_fails_at_start_is_an_error() {
    let server = JwksServer::start(vec![(404, "{}".into())]);
    let err = TokenVerifier::new(OauthSettings::new(
        ISS,
        AUD,
        JwksSource::Url(server.url.clone()),
    ))
    .unwrap_err();
    assert!(matches!(err, OauthError::JwksFetch { .. }), "{err}");
    assert!(err.to_string().contains("404"), "{err}");

    let server = JwksServer::start(vec![(200, "<html>".into())]);
    let err = TokenVerifier::new(OauthSettings::new(
        ISS,
        AUD,
        JwksSource::Url(server.url.clone()),
    ))
    .unwrap_err();
    assert!(matches!(err, OauthError::JwksParse { .. }), "{err}");
    assert!(err.to_string().contains(server.url.as_str()), "{err}");

    let huge = format!(
        "{{\"keys\":[],\"pad\":\"{}\"}}",
        "p".repeat(MAX_JWKS_BYTES as usize)
    );
    let server = JwksServer::start(vec![(200, huge)]);
    let err = TokenVerifier::new(OauthSettings::new(
        ISS,
        AUD,
        JwksSource::Url(server.url.clone()),
    ))
    .unwrap_err();
    assert!(matches!(err, OauthError::JwksFetch { .. }), "{err}");
    assert!(err.to_string().contains("larger than"), "{err}");
}

#[test]
fn an_unknown_kid_refetches_the_jwks_at_most_once_a_minute() {
    let old = json!({"keys": [ec_jwk(&ec_key(1), "ec1")]});
    let rotated = json!({"keys": [ec_jwk(&ec_key(1), "ec1"), ec_jwk(&ec_key(5), "ec2")]});
    // Start, then a re-fetch that still has the old keys, then the rotated set.
    let server = JwksServer::start(vec![
        (200, old.to_string()),
        (200, old.to_string()),
        (200, rotated.to_string()),
    ]);
    let verifier = TokenVerifier::new(OauthSettings::new(
        ISS,
        AUD,
        JwksSource::Url(server.url.clone()),
    ))
    .unwrap();
    assert_eq!(server.served(), 1);
    let new_key = Key::Ec(ec_key(5));
    let t = token(&header("ES256", Some("ec2")), &claims(), &new_key);

    // An unknown kid: one re-fetch, which does not have it yet.
    assert_eq!(verifier.verify(&t, NOW), Err(TokenRejected::UnknownKey));
    assert_eq!(server.served(), 2);
    // A flood within the minute costs the issuer nothing.
    for i in 0..50 {
        assert_eq!(verifier.verify(&t, NOW + i), Err(TokenRejected::UnknownKey));
    }
    assert_eq!(server.served(), 2);
    // Tokens under known keys still pass meanwhile, without a fetch.
    let known = token(
        &header("ES256", Some("ec1")),
        &claims(),
        &Key::Ec(ec_key(1)),
    );
    assert_eq!(verifier.verify(&known, NOW + 1).as_deref(), Ok(AGENT));
    assert_eq!(server.served(), 2);

    // A minute later the rotated key is fetched and the token accepted.
    assert_eq!(
        verifier.verify(&t, NOW + JWKS_REFETCH_SECS).as_deref(),
        Ok(AGENT)
    );
    assert_eq!(server.served(), 3);
    assert_eq!(
        verifier.verify(&t, NOW + JWKS_REFETCH_SECS + 1).as_deref(),
        Ok(AGENT)
    );
    assert_eq!(server.served(), 3);

    // A kid still unknown after that is limited the same way.
    let stray = token(
        &header("ES256", Some("ec9")),
        &claims(),
        &Key::Ec(ec_key(9)),
    );
    for i in 0..20 {
        assert_eq!(
            verifier.verify(&stray, NOW + JWKS_REFETCH_SECS + 2 + i),
            Err(TokenRejected::UnknownKey)
        );
    }
    assert_eq!(server.served(), 3);
    // A file source never fetches anything.
    let s = setup();
    assert!(!s.verifier.refetch(NOW));
}

#[test]
fn a_failed_refetch_keeps_the_keys() {
    let jwks = json!({"keys": [ec_jwk(&ec_key(1), "ec1")]});
    let server = JwksServer::start(vec![(200, jwks.to_string()), (500, "down".into())]);
    let verifier = TokenVerifier::new(OauthSettings::new(
        ISS,
        AUD,
        JwksSource::Url(server.url.clone()),
    ))
    .unwrap();
    let stray = token(
        &header("ES256", Some("ec9")),
        &claims(),
        &Key::Ec(ec_key(9)),
    );
    assert_eq!(verifier.verify(&stray, NOW), Err(TokenRejected::UnknownKey));
    assert_eq!(server.served(), 2);
    let known = token(
        &header("ES256", Some("ec1")),
        &claims(),
        &Key::Ec(ec_key(1)),
    );
    assert_eq!(verifier.verify(&known, NOW).as_deref(), Ok(AGENT));
}

#[test]
fn the_verifier_is_shareable() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<TokenVerifier>();
    shareable::<Arc<TokenVerifier>>();
}

#[test]
fn protected_resource_metadata_is_rfc_9728() {
    let json: Value = serde_json::from_str(&protected_resource_metadata(AUD, ISS)).unwrap();
    assert_eq!(
        json,
        json!({"resource": AUD, "authorization_servers": [ISS], "bearer_methods_supported": ["header"]})
    );
}

#[test]
fn www_authenticate_names_the_metadata_and_the_error() {
    let url = "https://gate.example/.well-known/oauth-protected-resource";
    assert_eq!(
        www_authenticate(url, None),
        format!("Bearer resource_metadata=\"{url}\"")
    );
    assert_eq!(
        www_authenticate(url, Some(&TokenRejected::Expired)),
        format!(
            "Bearer resource_metadata=\"{url}\", error=\"invalid_token\", error_description=\"token expired\""
        )
    );
    // Nothing from the token reaches the header, even through a variant that carries text.
    let odd = TokenRejected::Algorithm("\"\r\nX: y".into());
    let value = www_authenticate("https://g.example/a\"b\\c", Some(&odd));
    assert!(!value.contains('\r') && !value.contains('\n'), "{value}");
    assert!(
        value.starts_with("Bearer resource_metadata=\"https://g.example/a\\\"b\\\\c\""),
        "{value}"
    );
    assert!(
        value.ends_with("error_description=\"algorithm not accepted\""),
        "{value}"
    );
}

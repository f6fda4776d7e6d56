//! COSE_Key (RFC 9052/9053) credential public keys: ES256 on P-256 and EdDSA on Ed25519, the two
//! the registration page offers. Read with `ciborium` into its generic value; the few labels a
//! key has are checked by hand, which is shorter than a COSE library's types and rejects more.

use ciborium::value::Value;

use super::PasskeyRejection;

/// COSE algorithm identifiers (IANA "COSE Algorithms").
const ALG_ES256: i128 = -7;
/// The fully-specified ES256 identifier (RFC 9864): the same algorithm on P-256.
const ALG_ESP256: i128 = -9;
const ALG_EDDSA: i128 = -8;
/// The fully-specified Ed25519 identifier (RFC 9864), which newer authenticators may write.
const ALG_ED25519: i128 = -19;
const KTY_OKP: i128 = 1;
const KTY_EC2: i128 = 2;
const CRV_P256: i128 = 1;
const CRV_ED25519: i128 = 6;

/// The signature algorithm of a registered passkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Algorithm {
    /// ECDSA on P-256 with SHA-256; WebAuthn signatures are ASN.1 DER.
    #[serde(rename = "ES256")]
    Es256,
    /// Ed25519; signatures are the raw 64 bytes.
    #[serde(rename = "EdDSA")]
    EdDsa,
}

/// A credential public key, parsed and checked once (on a curve, not weak).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CredentialKey {
    Es256(p256::ecdsa::VerifyingKey),
    EdDsa(ed25519_dalek::VerifyingKey),
}

/// Reads one CBOR data item from the front of `input`; returns it and the bytes after it.
pub(crate) fn read_item(input: &[u8]) -> Option<(Value, &[u8])> {
    let mut rest = input;
    let value: Value = ciborium::de::from_reader(&mut rest).ok()?;
    Some((value, rest))
}

/// Looks up integer label `label` in a COSE map; a repeated label is an error (`Err`).
fn label(map: &[(Value, Value)], label: i128) -> Result<Option<&Value>, PasskeyRejection> {
    let mut found = None;
    for (k, v) in map {
        if k.as_integer().map(i128::from) == Some(label) {
            if found.is_some() {
                return Err(PasskeyRejection::Malformed(
                    "a COSE key label appears twice",
                ));
            }
            found = Some(v);
        }
    }
    Ok(found)
}

fn int(map: &[(Value, Value)], l: i128) -> Result<i128, PasskeyRejection> {
    label(map, l)?
        .and_then(Value::as_integer)
        .map(i128::from)
        .ok_or(PasskeyRejection::Malformed("a COSE key field is missing"))
}

fn coordinate(map: &[(Value, Value)], l: i128) -> Result<[u8; 32], PasskeyRejection> {
    label(map, l)?
        .and_then(Value::as_bytes)
        .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
        .ok_or(PasskeyRejection::Malformed(
            "a COSE key coordinate is not 32 bytes",
        ))
}

impl CredentialKey {
    /// Parses exactly one COSE_Key; trailing bytes are malformed.
    pub(crate) fn from_cose(bytes: &[u8]) -> Result<CredentialKey, PasskeyRejection> {
        match read_item(bytes) {
            Some((value, [])) => CredentialKey::from_value(&value),
            _ => Err(PasskeyRejection::Malformed(
                "the COSE key is not one CBOR map",
            )),
        }
    }

    pub(crate) fn from_value(value: &Value) -> Result<CredentialKey, PasskeyRejection> {
        let map = value
            .as_map()
            .ok_or(PasskeyRejection::Malformed("the COSE key is not a map"))?;
        let (kty, alg, crv) = (int(map, 1)?, int(map, 3)?, int(map, -1)?);
        match (kty, alg, crv) {
            (KTY_EC2, ALG_ES256 | ALG_ESP256, CRV_P256) => {
                let (x, y) = (coordinate(map, -2)?, coordinate(map, -3)?);
                let mut sec1 = [0u8; 65];
                sec1[0] = 0x04;
                sec1[1..33].copy_from_slice(&x);
                sec1[33..].copy_from_slice(&y);
                p256::ecdsa::VerifyingKey::from_sec1_bytes(&sec1)
                    .map(CredentialKey::Es256)
                    .map_err(|_| PasskeyRejection::Malformed("the P-256 key is not on the curve"))
            }
            (KTY_OKP, ALG_EDDSA | ALG_ED25519, CRV_ED25519) => {
                let x = coordinate(map, -2)?;
                match ed25519_dalek::VerifyingKey::from_bytes(&x) {
                    Ok(key) if !key.is_weak() => Ok(CredentialKey::EdDsa(key)),
                    _ => Err(PasskeyRejection::Malformed(
                        "the Ed25519 key is not a valid, non-weak point",
                    )),
                }
            }
            _ => Err(PasskeyRejection::UnsupportedAlgorithm),
        }
    }

    pub(crate) fn algorithm(&self) -> Algorithm {
        match self {
            CredentialKey::Es256(_) => Algorithm::Es256,
            CredentialKey::EdDsa(_) => Algorithm::EdDsa,
        }
    }

    /// Verifies a WebAuthn signature over `message` (authenticator data ‖ SHA-256 of client data).
    /// ES256 accepts high-S signatures, as WebAuthn does: single use rests on the nonce, not on
    /// the signature bytes, so a second valid encoding of one signature gains nothing.
    pub(crate) fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        match self {
            CredentialKey::Es256(key) => {
                let Ok(sig) = p256::ecdsa::Signature::from_der(signature) else {
                    return false;
                };
                p256::ecdsa::signature::Verifier::verify(key, message, &sig).is_ok()
            }
            CredentialKey::EdDsa(key) => {
                let Ok(bytes) = <[u8; 64]>::try_from(signature) else {
                    return false;
                };
                key.verify_strict(message, &ed25519_dalek::Signature::from_bytes(&bytes))
                    .is_ok()
            }
        }
    }
}

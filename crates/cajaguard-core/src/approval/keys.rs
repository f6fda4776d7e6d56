//! Ed25519 approver keys as PEM: the private key as PKCS#8 v1 (what OpenSSL 3.0 and
//! `openssl genpkey -algorithm ed25519` read and write), the public key as SubjectPublicKeyInfo.
//! Encoding and decoding are `ed25519-dalek`'s own (`pkcs8` and `pem` features); the key id is
//! CajaGuard's.

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::spki::{DecodePublicKey as _, EncodePublicKey as _};
use ed25519_dalek::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _, KeypairBytes};
use sha2::{Digest as _, Sha256};

use crate::Error;

/// An Ed25519 private key. No `Debug`, no `Display`; wiped on drop.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl SigningKey {
    /// From 32 random bytes (the caller brings the randomness).
    pub fn from_seed(seed: &[u8; 32]) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(seed))
    }
    /// PKCS#8 PEM, as written by CajaGuard or `openssl genpkey -algorithm ed25519`.
    pub fn from_pkcs8_pem(pem: &str) -> Result<SigningKey, Error> {
        // Reads v1 (OpenSSL) and v2 (with the public key, which must then match).
        let pair = KeypairBytes::from_pkcs8_pem(pem.trim()).map_err(|_| {
            Error::Key(
                "not an Ed25519 private key in PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`): \
                 create one with `cajaguard keygen`"
                    .to_owned(),
            )
        })?;
        let key = ed25519_dalek::SigningKey::try_from(&pair).map_err(|_| {
            Error::Key("the PKCS#8 key's embedded public key does not match its private key: the file is damaged".to_owned())
        })?;
        Ok(SigningKey(key))
    }
    /// PKCS#8 v1 PEM: without the optional public key, because OpenSSL 3.0 refuses the v2 form
    /// that `SigningKey`'s own encoder writes. The encoder's buffers are zeroized.
    pub fn to_pkcs8_pem(&self) -> Result<zeroize::Zeroizing<String>, Error> {
        let pair = KeypairBytes {
            secret_key: self.0.to_bytes(),
            public_key: None,
        };
        pair.to_pkcs8_pem(LineEnding::LF).map_err(|_| {
            Error::Key("the private key could not be encoded as PKCS#8 PEM".to_owned())
        })
    }
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }
    /// An Ed25519 signature over `message`, which the caller has domain-separated.
    pub(crate) fn sign_raw(&self, message: &[u8]) -> [u8; 64] {
        ed25519_dalek::Signer::sign(&self.0, message).to_bytes()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl PublicKey {
    /// SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    pub fn from_pem(pem: &str) -> Result<PublicKey, Error> {
        let key = ed25519_dalek::VerifyingKey::from_public_key_pem(pem.trim()).map_err(|_| {
            Error::Key(
                "not an Ed25519 public key in SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`): \
                 use the approver.pub.pem written by `cajaguard keygen`"
                    .to_owned(),
            )
        })?;
        if key.is_weak() {
            return Err(Error::Key(
                "the Ed25519 public key is a weak (small-order) key: it cannot be trusted"
                    .to_owned(),
            ));
        }
        Ok(PublicKey(key))
    }
    pub fn to_pem(&self) -> Result<String, Error> {
        self.0
            .to_public_key_pem(LineEnding::LF)
            .map_err(|_| Error::Key("the public key could not be encoded as PEM".to_owned()))
    }
    /// First 16 hex digits of SHA-256 of the raw 32-byte key.
    pub fn key_id(&self) -> String {
        hex::encode(&Sha256::digest(self.0.as_bytes())[..8])
    }
    /// The raw 32 bytes, for comparisons and storage.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }
    /// Strict Ed25519 verification of a domain-separated `message`.
    pub(crate) fn verify_raw(&self, message: &[u8], signature: &[u8]) -> bool {
        let Ok(bytes) = <[u8; 64]>::try_from(signature) else {
            return false;
        };
        let signature = ed25519_dalek::Signature::from_bytes(&bytes);
        self.0.verify_strict(message, &signature).is_ok()
    }
}

/// The keys listed in `approvals.trusted_keys`, loaded at the edge.
#[derive(Debug, Clone, Default)]
pub struct TrustedKeys(pub Vec<PublicKey>);

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8410's v1 layout: SEQUENCE { version 0, AlgorithmIdentifier { 1.3.101.112 },
    /// OCTET STRING { OCTET STRING (32 bytes) } }; OpenSSL 3.0 reads only this form.
    const PKCS8_V1_PREFIX: [u8; 16] = [
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];

    #[test]
    fn the_private_key_is_written_as_pkcs8_v1_and_read_back() {
        use base64::Engine as _;
        let key = SigningKey::from_seed(&[7; 32]);
        let pem = key.to_pkcs8_pem().unwrap();
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        assert_eq!(der.len(), 48, "v1 holds the seed only");
        assert_eq!(der[..16], PKCS8_V1_PREFIX);
        assert_eq!(der[16..], [7; 32]);
        let back = SigningKey::from_pkcs8_pem(&pem).unwrap();
        assert_eq!(back.public_key(), key.public_key());
        let public = PublicKey::from_pem(&key.public_key().to_pem().unwrap()).unwrap();
        assert_eq!(public, key.public_key());
    }
}

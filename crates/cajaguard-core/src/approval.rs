//! Human approvals (SPEC §6): the basket digest and request id, Ed25519 keys as PEM, the signed
//! approval document, and [`VerifiedApproval`], which only [`verify`] can build.

use std::time::Duration;

use time::OffsetDateTime;

use crate::Error;
use crate::quote::Quote;

/// SHA-256 over the RFC 8785 encoding of merchant, checkout id, currency, total, line items (id,
/// quantity, unit price) and the complete request's handler ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BasketDigest(pub [u8; 32]);

impl BasketDigest {
    pub fn of(quote: &Quote, handler_ids: &[String]) -> BasketDigest {
        todo!("{quote:?} {handler_ids:?}")
    }
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    pub fn request_id(&self) -> RequestId {
        todo!()
    }
}

/// `cg-` and the first 16 hex digits of the basket digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(String);

impl RequestId {
    /// Accepts exactly `cg-` + 16 lower-case hex digits (safe as a file name).
    pub fn parse(text: &str) -> Result<RequestId, Error> {
        todo!("{text}")
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny,
}

/// An Ed25519 private key. No `Debug`, no `Display`; wiped on drop.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl SigningKey {
    /// From 32 random bytes (the caller brings the randomness).
    pub fn from_seed(seed: &[u8; 32]) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(seed))
    }
    /// PKCS#8 PEM, as written by CajaGuard or `openssl genpkey -algorithm ed25519`.
    pub fn from_pkcs8_pem(pem: &str) -> Result<SigningKey, Error> {
        todo!("{}", pem.len())
    }
    /// PKCS#8 v1 PEM (OpenSSL 3.0 reads v1, not dalek's default v2).
    pub fn to_pkcs8_pem(&self) -> zeroize::Zeroizing<String> {
        todo!()
    }
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl PublicKey {
    /// SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    pub fn from_pem(pem: &str) -> Result<PublicKey, Error> {
        todo!("{}", pem.len())
    }
    pub fn to_pem(&self) -> String {
        todo!()
    }
    /// First 16 hex digits of SHA-256 of the raw 32-byte key.
    pub fn key_id(&self) -> String {
        todo!()
    }
}

/// The keys listed in `approvals.trusted_keys`, loaded at the edge.
#[derive(Debug, Clone, Default)]
pub struct TrustedKeys(pub Vec<PublicKey>);

/// The signed file in `<home>/approvals/`. Field names are the file format (SPEC §6).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDocument {
    pub version: u32,
    pub request_id: String,
    /// Hex basket digest.
    pub digest: String,
    /// `"approve"` or `"deny"`.
    pub decision: String,
    pub merchant: String,
    pub checkout_id: String,
    pub currency: String,
    /// Minor units.
    pub total: i64,
    /// RFC 3339 UTC.
    pub issued_at: String,
    pub expires_at: String,
    /// Hex, at least 128 bits.
    pub nonce: String,
    pub note: String,
    pub key_id: String,
    /// Base64 Ed25519 signature over `cajaguard-approval-v1\0` + RFC 8785 of every other field.
    pub signature: String,
}

impl ApprovalDocument {
    pub fn from_json(text: &str) -> Result<ApprovalDocument, Error> {
        todo!("{}", text.len())
    }
    pub fn to_json_pretty(&self) -> String {
        todo!()
    }
}

/// Everything a signer decides; [`sign`] adds `version`, `key_id` and `signature`.
#[derive(Debug, Clone)]
pub struct ApprovalTerms {
    pub request_id: RequestId,
    pub digest: BasketDigest,
    pub decision: Decision,
    pub merchant: String,
    pub checkout_id: String,
    pub currency: String,
    pub total: i64,
    pub issued_at: OffsetDateTime,
    pub ttl: Duration,
    /// From the caller's randomness.
    pub nonce: [u8; 16],
    pub note: String,
}

pub fn sign(key: &SigningKey, terms: &ApprovalTerms) -> ApprovalDocument {
    todo!("{:?}", terms.request_id)
}

/// Why an approval was not accepted. Each maps to a `blocked` reason of SPEC §4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The document is for another basket (digest or request id differ): ignored, not an error.
    OtherBasket,
    UntrustedKey,
    BadSignature,
    Expired,
    TtlTooLong,
    /// Malformed fields (bad timestamps, short nonce, unknown decision...).
    Malformed,
}

/// An approval that passed every check of SPEC §6. Only [`verify`] builds one.
#[derive(Debug, Clone)]
pub struct VerifiedApproval {
    decision: Decision,
    nonce: String,
    expires_at: OffsetDateTime,
}

impl VerifiedApproval {
    pub fn decision(&self) -> Decision {
        self.decision
    }
    /// The nonce (hex); the store marks an approval used by it.
    pub fn nonce(&self) -> &str {
        &self.nonce
    }
    pub fn expires_at(&self) -> OffsetDateTime {
        self.expires_at
    }
}

/// Signature under a trusted key, digest equal to `expected`, `issued_at <= now < expires_at`
/// (small clock skew allowed on `issued_at` only), lifetime <= `max_ttl`. "Not used yet" is the
/// store's fact and the gate's check, not this function's.
pub fn verify(
    doc: &ApprovalDocument,
    trusted: &TrustedKeys,
    expected: &BasketDigest,
    now: OffsetDateTime,
    max_ttl: Duration,
) -> Result<VerifiedApproval, Rejection> {
    todo!("{doc:?} {trusted:?} {expected:?} {now} {max_ttl:?}")
}

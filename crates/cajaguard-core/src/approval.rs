//! Human approvals (SPEC §6): the basket digest and request id, Ed25519 keys as PEM, the signed
//! approval document, and [`VerifiedApproval`], which only [`verify`] can build.
//!
//! **Signature encoding.** The signed message is the ASCII bytes `cajaguard-approval-v1`, one NUL
//! byte, then the RFC 8785 (JCS) canonical JSON of every document field except `signature`. The
//! prefix keeps a CajaGuard signature from ever being valid for another protocol that uses the same
//! key; JCS makes the bytes independent of key order and whitespace in the file, so a human may
//! pretty-print or reorder an approval without breaking it, while any change of value breaks it.
//! Every field is signed, `note` included: nothing in the file is unauthenticated.

use std::time::Duration;

use base64::Engine as _;
use ed25519_dalek::pkcs8::spki::DecodePublicKey as _;
use ed25519_dalek::pkcs8::{DecodePrivateKey as _, KeypairBytes};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use zeroize::Zeroize as _;

use crate::Error;
use crate::quote::Quote;
use crate::request::Instrument;

/// Domain separation for approval signatures (see the module docs).
pub const SIGNING_CONTEXT: &[u8] = b"cajaguard-approval-v1\0";
/// The only approval document version this code reads and writes.
pub const APPROVAL_VERSION: u32 = 1;
/// How far in the future `issued_at` may be, for a signer whose clock runs ahead.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// DER prefix of a PKCS#8 v1 Ed25519 private key (RFC 8410): SEQUENCE { version 0,
/// AlgorithmIdentifier { 1.3.101.112 }, OCTET STRING { OCTET STRING (32 bytes) } }.
const PKCS8_V1_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];
/// DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410).
const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

fn pem_wrap(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + 80);
    out.push_str("-----BEGIN ");
    out.push_str(label);
    out.push_str("-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or(""));
        out.push('\n');
    }
    out.push_str("-----END ");
    out.push_str(label);
    out.push_str("-----\n");
    let mut b64 = b64;
    b64.zeroize();
    out
}

/// RFC 8785 bytes of a value built from strings and integers, which cannot fail to encode; the
/// fallback only exists so that no panic path is reachable.
fn canonical<S: serde::Serialize>(value: &S) -> Vec<u8> {
    serde_json_canonicalizer::to_vec(value).unwrap_or_default()
}

/// Hand-written RFC 8785 for the two fixed shapes hashed and signed here (keys written in JCS
/// order, strings escaped as serde_json does, which is what JCS prescribes, integers in decimal).
/// `serde_json_canonicalizer` takes ~10 µs per call on the gate's hot path; this takes well under
/// one. Integers beyond ±(2^53-1) would need JCS's float formatting, so those fall back to the
/// crate; tests check both paths give the same bytes.
mod jcs {
    use std::io::Write as _;

    use crate::money::MAX_MINOR;

    pub(super) fn safe(i: i64) -> bool {
        (-MAX_MINOR..=MAX_MINOR).contains(&i)
    }

    pub(super) fn str(out: &mut Vec<u8>, s: &str) {
        // Writing into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }

    pub(super) fn int(out: &mut Vec<u8>, i: i64) {
        let _ = write!(out, "{i}");
    }

    pub(super) fn key(out: &mut Vec<u8>, first: bool, k: &str) {
        if !first {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b"\":");
    }
}

/// Every approval field but `signature`, in the shape the reference encoder serialises.
#[derive(serde::Serialize)]
struct SignedFields<'a> {
    version: u32,
    request_id: &'a str,
    digest: &'a str,
    decision: &'a str,
    merchant: &'a str,
    checkout_id: &'a str,
    currency: &'a str,
    total: i64,
    issued_at: &'a str,
    expires_at: &'a str,
    nonce: &'a str,
    note: &'a str,
    key_id: &'a str,
}

#[derive(serde::Serialize)]
struct BasketLine<'a> {
    id: &'a str,
    item_id: &'a str,
    quantity: i64,
    title: &'a str,
    unit_price: i64,
}

#[derive(serde::Serialize)]
struct BasketTotal<'a> {
    amount: i64,
    #[serde(rename = "type")]
    kind: &'a str,
}

#[derive(serde::Serialize)]
struct BasketInstrument<'a> {
    handler_id: &'a str,
    id: Option<&'a str>,
}

#[derive(serde::Serialize)]
struct Basket<'a> {
    checkout_id: &'a str,
    currency: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    fulfillment: Option<serde_json::Value>,
    instruments: Vec<BasketInstrument<'a>>,
    line_items: Vec<BasketLine<'a>>,
    merchant: Option<&'a str>,
    totals: Vec<BasketTotal<'a>>,
}

/// The basket's RFC 8785 bytes via `serde_json_canonicalizer` (reference and out-of-range fallback).
fn basket_reference(quote: &Quote, instruments: &[Instrument]) -> Vec<u8> {
    canonical(&Basket {
        checkout_id: &quote.checkout_id,
        currency: &quote.currency,
        fulfillment: quote
            .fulfillment
            .as_deref()
            .map(|f| serde_json::from_str(f).unwrap_or(serde_json::Value::Null)),
        instruments: instruments
            .iter()
            .map(|i| BasketInstrument {
                handler_id: &i.handler_id,
                id: i.id.as_deref(),
            })
            .collect(),
        line_items: quote
            .line_items
            .iter()
            .map(|l| BasketLine {
                id: &l.id,
                item_id: &l.item_id,
                quantity: l.quantity,
                title: &l.title,
                unit_price: l.unit_price,
            })
            .collect(),
        merchant: quote.merchant.as_deref(),
        totals: quote
            .totals
            .iter()
            .map(|t| BasketTotal {
                amount: t.amount,
                kind: &t.kind,
            })
            .collect(),
    })
}

/// The basket's RFC 8785 bytes, written by hand (keys in JCS order); only for safe integers.
/// `quote.fulfillment` is already RFC 8785 text (the quote canonicalised it) and goes in as is.
fn basket_fast(quote: &Quote, instruments: &[Instrument]) -> Vec<u8> {
    use jcs::{int, key, str};
    let mut out = Vec::with_capacity(160 + 96 * quote.line_items.len());
    out.push(b'{');
    key(&mut out, true, "checkout_id");
    str(&mut out, &quote.checkout_id);
    key(&mut out, false, "currency");
    str(&mut out, &quote.currency);
    if let Some(fulfillment) = &quote.fulfillment {
        key(&mut out, false, "fulfillment");
        out.extend_from_slice(fulfillment.as_bytes());
    }
    key(&mut out, false, "instruments");
    out.push(b'[');
    for (i, inst) in instruments.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        key(&mut out, true, "handler_id");
        str(&mut out, &inst.handler_id);
        key(&mut out, false, "id");
        match &inst.id {
            Some(id) => str(&mut out, id),
            None => out.extend_from_slice(b"null"),
        }
        out.push(b'}');
    }
    out.push(b']');
    key(&mut out, false, "line_items");
    out.push(b'[');
    for (i, l) in quote.line_items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        key(&mut out, true, "id");
        str(&mut out, &l.id);
        key(&mut out, false, "item_id");
        str(&mut out, &l.item_id);
        key(&mut out, false, "quantity");
        int(&mut out, l.quantity);
        key(&mut out, false, "title");
        str(&mut out, &l.title);
        key(&mut out, false, "unit_price");
        int(&mut out, l.unit_price);
        out.push(b'}');
    }
    out.push(b']');
    key(&mut out, false, "merchant");
    match &quote.merchant {
        Some(m) => str(&mut out, m),
        None => out.extend_from_slice(b"null"),
    }
    key(&mut out, false, "totals");
    out.push(b'[');
    for (i, t) in quote.totals.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        key(&mut out, true, "amount");
        int(&mut out, t.amount);
        key(&mut out, false, "type");
        str(&mut out, &t.kind);
        out.push(b'}');
    }
    out.push(b']');
    out.push(b'}');
    out
}

/// SHA-256 over the RFC 8785 encoding of what SPEC §6 binds a request to: merchant, checkout id,
/// currency, every `totals[]` entry, the line items (line id, item id, item title, quantity, unit
/// price), the fulfillment destinations when there are any, and the complete request's payment
/// instruments (id and handler id, never the credential). The title is in it so that an approval
/// for one product never pays for another at the same price on the same line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BasketDigest([u8; 32]);

impl BasketDigest {
    pub fn of(quote: &Quote, instruments: &[Instrument]) -> BasketDigest {
        let all_safe = quote.totals.iter().all(|t| jcs::safe(t.amount))
            && quote
                .line_items
                .iter()
                .all(|l| jcs::safe(l.quantity) && jcs::safe(l.unit_price));
        let bytes = if all_safe {
            basket_fast(quote, instruments)
        } else {
            basket_reference(quote, instruments)
        };
        BasketDigest(Sha256::digest(bytes).into())
    }
    /// A digest from its 32 bytes (as stored).
    pub const fn from_bytes(bytes: [u8; 32]) -> BasketDigest {
        BasketDigest(bytes)
    }
    /// The 32 digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    pub fn request_id(&self) -> RequestId {
        RequestId(format!("cg-{}", hex::encode(&self.0[..8])))
    }

    /// Parses the 64 lower-case hex digits of [`BasketDigest::to_hex`].
    pub fn from_hex(text: &str) -> Option<BasketDigest> {
        if text.len() != 64 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(BasketDigest(out))
    }
}

/// `cg-` and the first 16 hex digits of the basket digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(String);

impl RequestId {
    /// Accepts exactly `cg-` + 16 lower-case hex digits (safe as a file name).
    pub fn parse(text: &str) -> Result<RequestId, Error> {
        let ok = text.len() == 19
            && text.starts_with("cg-")
            && text
                .bytes()
                .skip(3)
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if ok {
            Ok(RequestId(text.to_owned()))
        } else {
            Err(Error::ApprovalFormat(
                "not a request id: expected `cg-` and 16 lower-case hex digits, as printed by the gate".to_owned(),
            ))
        }
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
        // Reads v1 (OpenSSL) and v2 (with the public key, which must then match).
        let pair = KeypairBytes::from_pkcs8_pem(pem.trim()).map_err(|_| {
            Error::Key(
                "not an Ed25519 private key in PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`):                  create one with `cajaguard keygen`"
                    .to_owned(),
            )
        })?;
        let key = ed25519_dalek::SigningKey::try_from(&pair).map_err(|_| {
            Error::Key("the PKCS#8 key's embedded public key does not match its private key: the file is damaged".to_owned())
        })?;
        Ok(SigningKey(key))
    }
    /// PKCS#8 v1 PEM (OpenSSL 3.0 reads v1, not dalek's default v2).
    pub fn to_pkcs8_pem(&self) -> zeroize::Zeroizing<String> {
        // Encoded by hand: the v1 structure is a fixed prefix and the seed, so there is no error
        // path and no intermediate copy that escapes zeroization.
        let mut der = zeroize::Zeroizing::new([0u8; 48]);
        der[..16].copy_from_slice(&PKCS8_V1_PREFIX);
        let mut seed = self.0.to_bytes();
        der[16..].copy_from_slice(&seed);
        seed.zeroize();
        zeroize::Zeroizing::new(pem_wrap("PRIVATE KEY", der.as_ref()))
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
    pub fn to_pem(&self) -> String {
        let mut der = [0u8; 44];
        der[..12].copy_from_slice(&SPKI_PREFIX);
        der[12..].copy_from_slice(self.0.as_bytes());
        pem_wrap("PUBLIC KEY", &der)
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
        serde_json::from_str(text).map_err(|e| {
            Error::ApprovalFormat(format!(
                "not a CajaGuard approval file (line {}, column {}: {}): write approvals with `cajaguard approve`",
                e.line(),
                e.column(),
                classify_serde(&e)
            ))
        })
    }
    pub fn to_json_pretty(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The exact bytes the signature covers.
    pub fn signed_message(&self) -> Vec<u8> {
        use jcs::{int, key, str};
        let mut msg = Vec::with_capacity(SIGNING_CONTEXT.len() + 512);
        msg.extend_from_slice(SIGNING_CONTEXT);
        if !jcs::safe(self.total) {
            msg.extend_from_slice(&canonical(&self.signed_fields()));
            return msg;
        }
        msg.push(b'{');
        key(&mut msg, true, "checkout_id");
        str(&mut msg, &self.checkout_id);
        key(&mut msg, false, "currency");
        str(&mut msg, &self.currency);
        key(&mut msg, false, "decision");
        str(&mut msg, &self.decision);
        key(&mut msg, false, "digest");
        str(&mut msg, &self.digest);
        key(&mut msg, false, "expires_at");
        str(&mut msg, &self.expires_at);
        key(&mut msg, false, "issued_at");
        str(&mut msg, &self.issued_at);
        key(&mut msg, false, "key_id");
        str(&mut msg, &self.key_id);
        key(&mut msg, false, "merchant");
        str(&mut msg, &self.merchant);
        key(&mut msg, false, "nonce");
        str(&mut msg, &self.nonce);
        key(&mut msg, false, "note");
        str(&mut msg, &self.note);
        key(&mut msg, false, "request_id");
        str(&mut msg, &self.request_id);
        key(&mut msg, false, "total");
        int(&mut msg, self.total);
        key(&mut msg, false, "version");
        int(&mut msg, i64::from(self.version));
        msg.push(b'}');
        msg
    }

    /// The signed message built with `serde_json_canonicalizer`, the reference the hand-written
    /// encoding is tested against.
    #[cfg(test)]
    fn signed_message_reference(&self) -> Vec<u8> {
        let mut msg = SIGNING_CONTEXT.to_vec();
        msg.extend_from_slice(&canonical(&self.signed_fields()));
        msg
    }

    fn signed_fields(&self) -> SignedFields<'_> {
        SignedFields {
            version: self.version,
            request_id: &self.request_id,
            digest: &self.digest,
            decision: &self.decision,
            merchant: &self.merchant,
            checkout_id: &self.checkout_id,
            currency: &self.currency,
            total: self.total,
            issued_at: &self.issued_at,
            expires_at: &self.expires_at,
            nonce: &self.nonce,
            note: &self.note,
            key_id: &self.key_id,
        }
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

/// Signs `terms`. Times are written in UTC to the second; a clock outside years 0-9999 yields
/// timestamps that [`verify`] refuses as malformed rather than a panic.
pub fn sign(key: &SigningKey, terms: &ApprovalTerms) -> ApprovalDocument {
    let issued = terms
        .issued_at
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(terms.issued_at);
    let ttl = time::Duration::try_from(terms.ttl).unwrap_or(time::Duration::ZERO);
    let expires = issued.checked_add(ttl).unwrap_or(issued);
    let mut doc = ApprovalDocument {
        version: APPROVAL_VERSION,
        request_id: terms.request_id.as_str().to_owned(),
        digest: terms.digest.to_hex(),
        decision: match terms.decision {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        }
        .to_owned(),
        merchant: terms.merchant.clone(),
        checkout_id: terms.checkout_id.clone(),
        currency: terms.currency.clone(),
        total: terms.total,
        issued_at: issued.format(&Rfc3339).unwrap_or_default(),
        expires_at: expires.format(&Rfc3339).unwrap_or_default(),
        nonce: hex::encode(terms.nonce),
        note: terms.note.clone(),
        key_id: key.public_key().key_id(),
        signature: String::new(),
    };
    let sig = ed25519_dalek::Signer::sign(&key.0, &doc.signed_message());
    doc.signature = base64::engine::general_purpose::STANDARD.encode(sig.to_bytes());
    doc
}

/// A serde error's category without the offending input (an approval file is not secret, but a
/// message should not echo arbitrary text either).
fn classify_serde(e: &serde_json::Error) -> &'static str {
    use serde_json::error::Category;
    match e.classify() {
        Category::Io => "unreadable",
        Category::Syntax => "invalid JSON",
        Category::Data => "a field is missing, unknown or of the wrong type",
        Category::Eof => "the file ends early",
    }
}

fn parse_utc(text: &str) -> Option<OffsetDateTime> {
    let t = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    (t.offset() == time::UtcOffset::UTC).then_some(t)
}

fn lower_hex(text: &str) -> bool {
    text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
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
    // 1. Well-formed.
    if doc.version != APPROVAL_VERSION {
        return Err(Rejection::Malformed);
    }
    let decision = match doc.decision.as_str() {
        "approve" => Decision::Approve,
        "deny" => Decision::Deny,
        _ => return Err(Rejection::Malformed),
    };
    let (Some(issued_at), Some(expires_at)) =
        (parse_utc(&doc.issued_at), parse_utc(&doc.expires_at))
    else {
        return Err(Rejection::Malformed);
    };
    if doc.nonce.len() < 32
        || doc.nonce.len() > 128
        || !doc.nonce.len().is_multiple_of(2)
        || !lower_hex(&doc.nonce)
    {
        return Err(Rejection::Malformed);
    }
    if doc.key_id.len() != 16 || !lower_hex(&doc.key_id) {
        return Err(Rejection::Malformed);
    }
    let mut sig_bytes = [0u8; 64];
    match base64::engine::general_purpose::STANDARD.decode(doc.signature.as_bytes()) {
        Ok(b) if b.len() == 64 => sig_bytes.copy_from_slice(&b),
        _ => return Err(Rejection::Malformed),
    }
    let signature = ed25519_dalek::Signature::from_bytes(&sig_bytes);

    // 2-3. A trusted key with this id, and a signature that verifies under it.
    let mut candidates = trusted
        .0
        .iter()
        .filter(|k| k.key_id() == doc.key_id)
        .peekable();
    if candidates.peek().is_none() {
        return Err(Rejection::UntrustedKey);
    }
    let message = doc.signed_message();
    if !candidates.any(|k| k.0.verify_strict(&message, &signature).is_ok()) {
        return Err(Rejection::BadSignature);
    }

    // 4. For this basket.
    if doc.digest != expected.to_hex() || doc.request_id != expected.request_id().as_str() {
        return Err(Rejection::OtherBasket);
    }

    // 5-7. Lifetime, expiry, and an issue time not (much) in the future.
    let lifetime = expires_at - issued_at;
    if lifetime <= time::Duration::ZERO {
        return Err(Rejection::Malformed);
    }
    if lifetime > max_ttl {
        return Err(Rejection::TtlTooLong);
    }
    if now >= expires_at {
        return Err(Rejection::Expired);
    }
    if issued_at - now > MAX_CLOCK_SKEW {
        return Err(Rejection::Malformed);
    }
    Ok(VerifiedApproval {
        decision,
        nonce: doc.nonce.clone(),
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quote::{QuoteLine, QuoteTotal};
    use proptest::prelude::*;

    fn any_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[a-z0-9_\\-\"\\\\/\u{0}-\u{1f}\u{7f}\u{2028}é€😀]{0,20}"
        ]
    }

    proptest! {
        #[test]
        fn hand_written_jcs_equals_serde_json_canonicalizer(
            merchant in proptest::option::of(any_text()),
            checkout_id in any_text(),
            currency in any_text(),
            total in -MAX_SAFE..=MAX_SAFE,
            lines in proptest::collection::vec((any_text(), any_text(), any_text(), 1i64..=MAX_SAFE, 0i64..=MAX_SAFE), 0..4),
            totals in proptest::collection::vec((any_text(), -MAX_SAFE..=MAX_SAFE), 0..4),
            instruments in proptest::collection::vec((proptest::option::of(any_text()), any_text()), 0..3),
            fulfillment in proptest::option::of(any_text()),
            note in any_text(),
        ) {
            let quote = Quote {
                checkout_id: checkout_id.clone(),
                status: "ready_for_complete".into(),
                currency: currency.clone(),
                total,
                line_items: lines.into_iter().map(|(id, item_id, title, quantity, unit_price)| QuoteLine {
                    id, item_id, title, quantity, unit_price,
                }).collect(),
                merchant: merchant.clone(),
                totals: totals.into_iter().map(|(kind, amount)| QuoteTotal { kind, amount }).collect(),
                // The quote holds it canonicalised; any JSON value stands in for destinations.
                fulfillment: fulfillment.map(|text| {
                    serde_json_canonicalizer::to_string(&serde_json::json!([{"type": "shipping", "destinations": [{"address": text}]}])).unwrap()
                }),
            };
            let instruments: Vec<Instrument> = instruments
                .into_iter()
                .map(|(id, handler_id)| Instrument { id, handler_id })
                .collect();
            prop_assert_eq!(basket_fast(&quote, &instruments), basket_reference(&quote, &instruments));
            let doc = ApprovalDocument {
                version: 1, request_id: checkout_id.clone(), digest: currency.clone(), decision: note.clone(),
                merchant: merchant.unwrap_or_default(), checkout_id, currency, total,
                issued_at: note.clone(), expires_at: String::new(), nonce: "00".into(), note, key_id: "k".into(),
                signature: String::new(),
            };
            prop_assert_eq!(doc.signed_message(), doc.signed_message_reference());
        }
    }

    const MAX_SAFE: i64 = crate::money::MAX_MINOR;

    #[test]
    fn out_of_range_integers_fall_back_to_the_reference_encoder() {
        let quote = Quote {
            checkout_id: "c".into(),
            status: "s".into(),
            currency: "USD".into(),
            total: i64::MAX,
            totals: vec![QuoteTotal {
                kind: "total".into(),
                amount: i64::MAX,
            }],
            ..Quote::default()
        };
        let d = BasketDigest::of(&quote, &[]);
        assert_eq!(
            *d.as_bytes(),
            <[u8; 32]>::from(Sha256::digest(basket_reference(&quote, &[])))
        );
    }
}

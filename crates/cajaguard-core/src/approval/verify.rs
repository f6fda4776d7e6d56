//! [`verify`]: whether a signed approval may pay for this basket now, and [`VerifiedApproval`],
//! which only it builds.

use std::time::Duration;

use base64::Engine as _;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::document::{ApprovalDocument, Decision};
use super::keys::TrustedKeys;
use super::{APPROVAL_VERSION, MAX_CLOCK_SKEW};
use crate::digest::BasketDigest;

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

/// Whether `doc` carries a valid signature by one of `trusted`, whatever else holds (its expiry,
/// its basket): what `audit verify` needs before it takes an approval's checkpoint as evidence.
pub fn signed_by_trusted(doc: &ApprovalDocument, trusted: &TrustedKeys) -> bool {
    let Ok(signature) = base64::engine::general_purpose::STANDARD.decode(doc.signature.as_bytes())
    else {
        return false;
    };
    let message = doc.signed_message();
    trusted
        .0
        .iter()
        .filter(|k| k.key_id() == doc.key_id)
        .any(|k| k.verify_raw(&message, &signature))
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
    let signature = match base64::engine::general_purpose::STANDARD.decode(doc.signature.as_bytes())
    {
        Ok(b) if b.len() == 64 => b,
        _ => return Err(Rejection::Malformed),
    };

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
    if !candidates.any(|k| k.verify_raw(&message, &signature)) {
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

fn parse_utc(text: &str) -> Option<OffsetDateTime> {
    let t = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    (t.offset() == time::UtcOffset::UTC).then_some(t)
}

fn lower_hex(text: &str) -> bool {
    text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

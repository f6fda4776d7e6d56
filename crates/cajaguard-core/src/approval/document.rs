//! The signed approval file (SPEC §6) and [`sign`].
//!
//! **Signature encoding.** The signed message is the ASCII bytes `cajaguard-approval-v1`, one NUL
//! byte, then the RFC 8785 (JCS) canonical JSON of every document field except `signature`. The
//! prefix keeps a CajaGuard signature from ever being valid for another protocol that uses the same
//! key; JCS makes the bytes independent of key order and whitespace in the file, so a human may
//! pretty-print or reorder an approval without breaking it, while any change of value breaks it.
//! Every field is signed, `note` included: nothing in the file is unauthenticated.

use std::time::Duration;

use base64::Engine as _;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::jcs::{self, canonical};
use super::keys::SigningKey;
use super::{APPROVAL_VERSION, SIGNING_CONTEXT};
use crate::Error;
use crate::digest::{BasketDigest, RequestId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny,
}

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
    /// The audit log checkpoint (SPEC §8, a C2SP signed note) the human approved against. Absent
    /// in approvals made before the log; signed like every other field when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
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
        if let Some(checkpoint) = &self.checkpoint {
            key(&mut msg, false, "checkpoint");
            str(&mut msg, checkpoint);
        }
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
            checkpoint: self.checkpoint.as_deref(),
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
    /// The latest audit log checkpoint (`Store::checkpoint`), which the approval commits to.
    pub checkpoint: Option<String>,
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
        checkpoint: terms.checkpoint.clone(),
        key_id: key.public_key().key_id(),
        signature: String::new(),
    };
    doc.signature =
        base64::engine::general_purpose::STANDARD.encode(key.sign_raw(&doc.signed_message()));
    doc
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
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoint: Option<&'a str>,
    key_id: &'a str,
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX_SAFE: i64 = crate::money::MAX_MINOR;

    fn any_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[a-z0-9_\\-\"\\\\/\u{0}-\u{1f}\u{7f}\u{2028}é€😀]{0,20}"
        ]
    }

    proptest! {
        #[test]
        fn hand_written_signed_message_equals_serde_json_canonicalizer(
            merchant in any_text(),
            checkout_id in any_text(),
            currency in any_text(),
            total in -MAX_SAFE..=MAX_SAFE,
            note in any_text(),
            checkpoint in proptest::option::of(any_text()),
        ) {
            let doc = ApprovalDocument {
                version: 1, request_id: checkout_id.clone(), digest: currency.clone(), decision: note.clone(),
                merchant, checkout_id, currency, total,
                issued_at: note.clone(), expires_at: String::new(), nonce: "00".into(), note, checkpoint,
                key_id: "k".into(), signature: String::new(),
            };
            prop_assert_eq!(doc.signed_message(), doc.signed_message_reference());
        }
    }
}

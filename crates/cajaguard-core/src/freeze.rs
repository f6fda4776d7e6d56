//! The kill switch (SPEC §7): while payments are frozen every `complete_checkout` is refused.
//! Anyone may freeze; only a human unfreezes, with an unfreeze document signed by an approver key
//! and bound to the very freeze it lifts, so a document made for an earlier freeze cannot lift a
//! later one, and none can be used twice.
//!
//! **Signature encoding.** `cajaguard-unfreeze-v1`, one NUL byte, then the RFC 8785 JSON of every
//! field but `signature`: the same construction as approvals, under its own prefix, so an approval
//! signature can never pass for an unfreeze or the other way round.

use std::time::Duration;

use base64::Engine as _;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::Error;
use crate::approval::{SigningKey, TrustedKeys};

/// Domain separation for unfreeze signatures.
pub const UNFREEZE_CONTEXT: &[u8] = b"cajaguard-unfreeze-v1\0";
/// The only unfreeze document version this code reads and writes.
pub const UNFREEZE_VERSION: u32 = 1;
/// How long a signed unfreeze stays usable: it is made and used by one command.
pub const UNFREEZE_TTL: Duration = Duration::from_secs(5 * 60);

/// Payments are frozen: since when (the store's time, to the microsecond) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frozen {
    pub at: OffsetDateTime,
    /// Free text from whoever froze (a human, an agent, or CajaGuard itself); shown, never trusted.
    pub reason: String,
}

impl Frozen {
    /// The freeze's identity as an unfreeze document names it: RFC 3339 with microseconds.
    pub fn stamp(&self) -> String {
        self.at
            .to_offset(time::UtcOffset::UTC)
            .format(&Rfc3339)
            .unwrap_or_default()
    }
}

/// A signed unfreeze. Field names are the document format.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnfreezeDocument {
    pub version: u32,
    /// [`Frozen::stamp`] of the freeze this lifts.
    pub frozen_at: String,
    pub issued_at: String,
    pub expires_at: String,
    /// Hex, 128 bits from the caller's randomness; recorded as used when the unfreeze applies.
    pub nonce: String,
    pub note: String,
    pub key_id: String,
    /// Base64 Ed25519 over [`UNFREEZE_CONTEXT`] + RFC 8785 of every other field.
    pub signature: String,
}

#[derive(serde::Serialize)]
struct Signed<'a> {
    expires_at: &'a str,
    frozen_at: &'a str,
    issued_at: &'a str,
    key_id: &'a str,
    nonce: &'a str,
    note: &'a str,
    version: u32,
}

impl UnfreezeDocument {
    pub fn from_json(text: &str) -> Result<UnfreezeDocument, Error> {
        serde_json::from_str(text).map_err(|e| {
            Error::ApprovalFormat(format!(
                "not a CajaGuard unfreeze document (line {}, column {}): make one with `cajaguard unfreeze`",
                e.line(),
                e.column()
            ))
        })
    }

    fn signed_message(&self) -> Vec<u8> {
        let mut message = UNFREEZE_CONTEXT.to_vec();
        let fields = Signed {
            expires_at: &self.expires_at,
            frozen_at: &self.frozen_at,
            issued_at: &self.issued_at,
            key_id: &self.key_id,
            nonce: &self.nonce,
            note: &self.note,
            version: self.version,
        };
        // Strings and a small integer always encode.
        message.extend_from_slice(&serde_json_canonicalizer::to_vec(&fields).unwrap_or_default());
        message
    }
}

/// Signs an unfreeze of `frozen`, issued `now`, usable for [`UNFREEZE_TTL`].
pub fn sign_unfreeze(
    key: &SigningKey,
    frozen: &Frozen,
    now: OffsetDateTime,
    nonce: [u8; 16],
    note: &str,
) -> UnfreezeDocument {
    let issued = now
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(now);
    let ttl = time::Duration::try_from(UNFREEZE_TTL).unwrap_or(time::Duration::ZERO);
    let mut doc = UnfreezeDocument {
        version: UNFREEZE_VERSION,
        frozen_at: frozen.stamp(),
        issued_at: issued.format(&Rfc3339).unwrap_or_default(),
        expires_at: (issued + ttl).format(&Rfc3339).unwrap_or_default(),
        nonce: hex::encode(nonce),
        note: note.to_owned(),
        key_id: key.public_key().key_id(),
        signature: String::new(),
    };
    let signature = key.sign_raw(&doc.signed_message());
    doc.signature = base64::engine::general_purpose::STANDARD.encode(signature);
    doc
}

/// Why an unfreeze document was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UnfreezeRejection {
    #[error("it is not a well-formed unfreeze document")]
    Malformed,
    #[error("it is signed by a key that is not in approvals.trusted_keys")]
    UntrustedKey,
    #[error("its signature does not verify (it was edited or damaged)")]
    BadSignature,
    #[error("it was made for another freeze than the one in force")]
    OtherFreeze,
    #[error("it has expired; make a new one")]
    Expired,
}

/// An unfreeze that passed [`verify_unfreeze`]: only that function builds one.
#[derive(Debug, Clone)]
pub struct VerifiedUnfreeze {
    nonce: String,
}

impl VerifiedUnfreeze {
    pub fn nonce(&self) -> &str {
        &self.nonce
    }
}

/// Accepts `doc` only if it is well formed, signed by a trusted key, names `frozen` and is
/// within its lifetime at `now`. Single use is the store's part (the nonce).
pub fn verify_unfreeze(
    doc: &UnfreezeDocument,
    trusted: &TrustedKeys,
    frozen: &Frozen,
    now: OffsetDateTime,
) -> Result<VerifiedUnfreeze, UnfreezeRejection> {
    let parse = |text: &str| OffsetDateTime::parse(text, &Rfc3339).ok();
    let (Some(issued), Some(expires)) = (parse(&doc.issued_at), parse(&doc.expires_at)) else {
        return Err(UnfreezeRejection::Malformed);
    };
    let hex_of = |text: &str, len: usize| {
        text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if doc.version != UNFREEZE_VERSION || !hex_of(&doc.nonce, 32) || !hex_of(&doc.key_id, 16) {
        return Err(UnfreezeRejection::Malformed);
    }
    let signature = match base64::engine::general_purpose::STANDARD.decode(&doc.signature) {
        Ok(bytes) => bytes,
        Err(_) => return Err(UnfreezeRejection::Malformed),
    };
    let mut keys = trusted
        .0
        .iter()
        .filter(|k| k.key_id() == doc.key_id)
        .peekable();
    if keys.peek().is_none() {
        return Err(UnfreezeRejection::UntrustedKey);
    }
    let message = doc.signed_message();
    if !keys.any(|k| k.verify_raw(&message, &signature)) {
        return Err(UnfreezeRejection::BadSignature);
    }
    if doc.frozen_at != frozen.stamp() {
        return Err(UnfreezeRejection::OtherFreeze);
    }
    let lifetime = expires - issued;
    let longest = time::Duration::try_from(UNFREEZE_TTL).unwrap_or(time::Duration::ZERO);
    if lifetime <= time::Duration::ZERO || lifetime > longest {
        return Err(UnfreezeRejection::Malformed);
    }
    let skew =
        time::Duration::try_from(crate::approval::MAX_CLOCK_SKEW).unwrap_or(time::Duration::ZERO);
    if now >= expires || issued - now > skew {
        return Err(UnfreezeRejection::Expired);
    }
    Ok(VerifiedUnfreeze {
        nonce: doc.nonce.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn setup() -> (SigningKey, TrustedKeys, Frozen) {
        let key = SigningKey::from_seed(&[7; 32]);
        let trusted = TrustedKeys(vec![key.public_key()]);
        let frozen = Frozen {
            at: datetime!(2026-12-01 10:00:00.123456 UTC),
            reason: "charged_differs".into(),
        };
        (key, trusted, frozen)
    }

    #[test]
    fn a_signed_unfreeze_lifts_only_its_own_freeze() {
        let (key, trusted, frozen) = setup();
        let now = datetime!(2026-12-01 10:05 UTC);
        let doc = sign_unfreeze(&key, &frozen, now, [1; 16], "checked the order");
        assert!(verify_unfreeze(&doc, &trusted, &frozen, now).is_ok());

        let later = Frozen {
            at: datetime!(2026-12-01 10:00:00.123457 UTC),
            ..frozen.clone()
        };
        assert_eq!(
            verify_unfreeze(&doc, &trusted, &later, now).unwrap_err(),
            UnfreezeRejection::OtherFreeze
        );
        assert_eq!(
            verify_unfreeze(&doc, &trusted, &frozen, now + time::Duration::minutes(6)).unwrap_err(),
            UnfreezeRejection::Expired
        );
    }

    #[test]
    fn edited_or_foreign_unfreezes_are_refused() {
        let (key, trusted, frozen) = setup();
        let now = datetime!(2026-12-01 10:05 UTC);
        let mut doc = sign_unfreeze(&key, &frozen, now, [1; 16], "");
        doc.note = "edited".into();
        assert_eq!(
            verify_unfreeze(&doc, &trusted, &frozen, now).unwrap_err(),
            UnfreezeRejection::BadSignature
        );
        let stranger = SigningKey::from_seed(&[8; 32]);
        let doc = sign_unfreeze(&stranger, &frozen, now, [1; 16], "");
        assert_eq!(
            verify_unfreeze(&doc, &trusted, &frozen, now).unwrap_err(),
            UnfreezeRejection::UntrustedKey
        );
    }
}

//! Passkey approvals (SPEC §6): the terms a human approves or denies, the WebAuthn challenge that
//! commits to them, and the document that keeps both with the assertion, verifiable offline.

use std::time::Duration;

use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::assertion::{PasskeyAssertion, verify_assertion};
use super::registration::{PasskeyRegistry, RegisteredPasskey};
use super::{
    APPROVAL_CHALLENGE_CONTEXT, PASSKEY_DOCUMENT_VERSION, PasskeyRejection, RelyingParty, b64,
};
use crate::approval::{ApprovalTerms, BasketDigest, Decision, RequestId};

/// Everything the passkey's signature commits to. Field names are the document format; every
/// field is in the challenge, `note` and `checkpoint` included, so nothing in the document is
/// unauthenticated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeyApprovalTerms {
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
    /// RFC 3339 UTC, to the second.
    pub issued_at: String,
    pub expires_at: String,
    /// Hex, at least 128 bits, from the server's randomness; the store marks it used.
    pub nonce: String,
    pub note: String,
    /// The audit log checkpoint of SPEC §8 the human approved against (the C2SP signed note, as
    /// text). The audit log (issue 16) is not built yet, so this is `None` until it is; it is in
    /// the challenge either way (`null` then), so adding it later cannot be done by editing a
    /// document after the fact.
    pub checkpoint: Option<String>,
}

impl PasskeyApprovalTerms {
    /// The terms for `terms` (as `cajaguard approve` would sign them) and the log checkpoint.
    /// Times are written in UTC to the second.
    pub fn new(terms: &ApprovalTerms, checkpoint: Option<String>) -> PasskeyApprovalTerms {
        let issued = terms
            .issued_at
            .to_offset(time::UtcOffset::UTC)
            .replace_nanosecond(0)
            .unwrap_or(terms.issued_at);
        let ttl = time::Duration::try_from(terms.ttl).unwrap_or(time::Duration::ZERO);
        let expires = issued.checked_add(ttl).unwrap_or(issued);
        PasskeyApprovalTerms {
            version: PASSKEY_DOCUMENT_VERSION,
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
            checkpoint,
        }
    }

    /// The WebAuthn challenge: SHA-256 of [`APPROVAL_CHALLENGE_CONTEXT`] ‖ RFC 8785 of the terms.
    pub fn challenge(&self) -> [u8; 32] {
        if !(-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&self.total) {
            return challenge(APPROVAL_CHALLENGE_CONTEXT, self);
        }
        let sorted = SortedApprovalTerms {
            checkout_id: &self.checkout_id,
            checkpoint: self.checkpoint.as_deref(),
            currency: &self.currency,
            decision: &self.decision,
            digest: &self.digest,
            expires_at: &self.expires_at,
            issued_at: &self.issued_at,
            merchant: &self.merchant,
            nonce: &self.nonce,
            note: &self.note,
            request_id: &self.request_id,
            total: self.total,
            version: self.version,
        };
        sorted_challenge(APPROVAL_CHALLENGE_CONTEXT, &sorted)
    }

    /// The challenge as the page hands it to `navigator.credentials.get` (base64url).
    pub fn challenge_b64url(&self) -> String {
        b64::encode(&self.challenge())
    }
}

/// Integers JSON carries exactly (±(2^53-1)); RFC 8785 writes them in plain decimal.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// The approval terms with their keys in RFC 8785 order (ASCII keys: byte order).
#[derive(serde::Serialize)]
struct SortedApprovalTerms<'a> {
    checkout_id: &'a str,
    checkpoint: Option<&'a str>,
    currency: &'a str,
    decision: &'a str,
    digest: &'a str,
    expires_at: &'a str,
    issued_at: &'a str,
    merchant: &'a str,
    nonce: &'a str,
    note: &'a str,
    request_id: &'a str,
    total: i64,
    version: u32,
}

/// The challenge over a struct whose fields are declared in RFC 8785 key order and hold only
/// strings, null and safe integers. `serde_json` writes those exactly as RFC 8785 does (strings
/// escaped the same way, integers in decimal), so its output is the canonical form, in a small
/// part of the time `serde_json_canonicalizer` takes on the gate's path; tests check both agree.
pub(crate) fn sorted_challenge<T: serde::Serialize>(context: &[u8], sorted: &T) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(context);
    hasher.update(serde_json::to_vec(sorted).unwrap_or_default());
    hasher.finalize().into()
}

/// SHA-256 of `context` and the RFC 8785 bytes of `terms`, by `serde_json_canonicalizer`: the
/// reference, and the path for totals outside the safe integers. The terms are strings, integers and
/// null, which always encode; the empty fallback only keeps a panic path unreachable, and a
/// challenge over it matches no assertion made for real terms.
pub(crate) fn challenge<T: serde::Serialize>(context: &[u8], terms: &T) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(context);
    hasher.update(serde_json_canonicalizer::to_vec(terms).unwrap_or_default());
    hasher.finalize().into()
}

/// A passkey approval: the terms and the assertion over them. Anyone with the registered public
/// key can check it offline.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeyApproval {
    pub terms: PasskeyApprovalTerms,
    pub assertion: PasskeyAssertion,
}

impl PasskeyApproval {
    pub fn from_json(text: &str) -> Result<PasskeyApproval, PasskeyRejection> {
        serde_json::from_str(text)
            .map_err(|e| PasskeyRejection::Malformed(super::serde_category(&e)))
    }
    pub fn to_json_pretty(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// A passkey approval that passed every check of SPEC §6 but single use. Only
/// [`verify_passkey_approval`] builds one.
#[derive(Debug, Clone)]
pub struct VerifiedPasskeyApproval {
    decision: Decision,
    nonce: String,
    expires_at: OffsetDateTime,
    credential_id: Vec<u8>,
    sign_count: u32,
}

impl VerifiedPasskeyApproval {
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
    /// The passkey that approved.
    pub fn credential_id(&self) -> &[u8] {
        &self.credential_id
    }
    /// The signature counter the store must now keep for that passkey (compare-and-set against
    /// the value it handed to [`PasskeyRegistry::new`]).
    pub fn sign_count(&self) -> u32 {
        self.sign_count
    }
}

/// Whether `doc`'s assertion is a registered passkey's over exactly its terms on `rp` (user
/// present and verified), whatever its expiry, basket or counter now: what `audit verify` needs
/// before it takes a passkey approval's checkpoint as evidence. The counters are set aside (an
/// old approval's counter is behind the passkey's by now); the signature is not.
pub fn signed_by_registered(
    doc: &PasskeyApproval,
    registered: &[RegisteredPasskey],
    rp: &RelyingParty,
) -> bool {
    let counters_aside: Vec<RegisteredPasskey> = registered
        .iter()
        .map(|p| RegisteredPasskey {
            sign_count: 0,
            ..p.clone()
        })
        .collect();
    let Ok(registry) = PasskeyRegistry::new(&counters_aside) else {
        return false;
    };
    verify_assertion(rp, &registry, &doc.assertion, &doc.terms.challenge()).is_ok()
}

/// Well-formed terms; a registered passkey's assertion over exactly these terms on this relying
/// party (see [`super::assertion`]); terms for `expected`; `issued_at <= now < expires_at` (small
/// clock skew allowed on `issued_at`) and a lifetime of at most `max_ttl`. "Not used yet" is the
/// store's fact and the gate's check.
pub fn verify_passkey_approval(
    doc: &PasskeyApproval,
    passkeys: &PasskeyRegistry,
    rp: &RelyingParty,
    expected: &BasketDigest,
    now: OffsetDateTime,
    max_ttl: Duration,
) -> Result<VerifiedPasskeyApproval, PasskeyRejection> {
    let terms = &doc.terms;
    if terms.version != PASSKEY_DOCUMENT_VERSION {
        return Err(PasskeyRejection::Malformed("unknown version"));
    }
    let decision = match terms.decision.as_str() {
        "approve" => Decision::Approve,
        "deny" => Decision::Deny,
        _ => return Err(PasskeyRejection::Malformed("decision")),
    };
    if !super::nonce_ok(&terms.nonce) {
        return Err(PasskeyRejection::Malformed("nonce"));
    }
    if RequestId::parse(&terms.request_id).is_err()
        || BasketDigest::from_hex(&terms.digest).is_none()
    {
        return Err(PasskeyRejection::Malformed("request_id/digest"));
    }

    let verified = verify_assertion(rp, passkeys, &doc.assertion, &terms.challenge())?;

    if terms.digest != expected.to_hex() || terms.request_id != expected.request_id().as_str() {
        return Err(PasskeyRejection::OtherBasket);
    }
    let expires_at = super::check_lifetime(&terms.issued_at, &terms.expires_at, now, max_ttl)?;
    Ok(VerifiedPasskeyApproval {
        decision,
        nonce: terms.nonce.clone(),
        expires_at,
        credential_id: verified.credential_id().to_vec(),
        sign_count: verified.sign_count(),
    })
}

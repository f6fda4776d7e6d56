//! Unfreezing by passkey (SPEC §7 `unfreeze`): the same assertion checks as an approval, over
//! unfreeze terms bound to the very freeze they lift, under their own challenge prefix.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::approval::sorted_challenge;
use super::assertion::{PasskeyAssertion, verify_assertion};
use super::registration::PasskeyRegistry;
use super::{
    PASSKEY_DOCUMENT_VERSION, PasskeyRejection, RelyingParty, UNFREEZE_CHALLENGE_CONTEXT, b64,
};
use crate::freeze::{Frozen, UNFREEZE_TTL};

/// What a passkey unfreeze commits to. Field names are the document format; all are in the
/// challenge.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeyUnfreezeTerms {
    pub version: u32,
    /// [`Frozen::stamp`] of the freeze this lifts.
    pub frozen_at: String,
    pub issued_at: String,
    pub expires_at: String,
    /// Hex, 128 bits from the server's randomness; recorded as used when the unfreeze applies.
    pub nonce: String,
    pub note: String,
    /// The audit log checkpoint (SPEC §8); `None` until the log exists (issue 16), in the
    /// challenge either way.
    pub checkpoint: Option<String>,
}

impl PasskeyUnfreezeTerms {
    /// Terms lifting `frozen`, valid for [`UNFREEZE_TTL`] from `now` (UTC, to the second).
    pub fn new(
        frozen: &Frozen,
        now: OffsetDateTime,
        nonce: [u8; 16],
        note: &str,
        checkpoint: Option<String>,
    ) -> PasskeyUnfreezeTerms {
        let issued = now
            .to_offset(time::UtcOffset::UTC)
            .replace_nanosecond(0)
            .unwrap_or(now);
        let ttl = time::Duration::try_from(UNFREEZE_TTL).unwrap_or(time::Duration::ZERO);
        let expires = issued.checked_add(ttl).unwrap_or(issued);
        PasskeyUnfreezeTerms {
            version: PASSKEY_DOCUMENT_VERSION,
            frozen_at: frozen.stamp(),
            issued_at: issued.format(&Rfc3339).unwrap_or_default(),
            expires_at: expires.format(&Rfc3339).unwrap_or_default(),
            nonce: hex::encode(nonce),
            note: note.to_owned(),
            checkpoint,
        }
    }
    /// SHA-256 of [`UNFREEZE_CHALLENGE_CONTEXT`] ‖ RFC 8785 of the terms.
    pub fn challenge(&self) -> [u8; 32] {
        let sorted = SortedUnfreezeTerms {
            checkpoint: self.checkpoint.as_deref(),
            expires_at: &self.expires_at,
            frozen_at: &self.frozen_at,
            issued_at: &self.issued_at,
            nonce: &self.nonce,
            note: &self.note,
            version: self.version,
        };
        sorted_challenge(UNFREEZE_CHALLENGE_CONTEXT, &sorted)
    }
    pub fn challenge_b64url(&self) -> String {
        b64::encode(&self.challenge())
    }
}

/// The unfreeze terms with their keys in RFC 8785 order (see [`sorted_challenge`]).
#[derive(serde::Serialize)]
struct SortedUnfreezeTerms<'a> {
    checkpoint: Option<&'a str>,
    expires_at: &'a str,
    frozen_at: &'a str,
    issued_at: &'a str,
    nonce: &'a str,
    note: &'a str,
    version: u32,
}

/// A passkey unfreeze: the terms and the assertion over them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeyUnfreeze {
    pub terms: PasskeyUnfreezeTerms,
    pub assertion: PasskeyAssertion,
}

/// An unfreeze that passed every check but single use. Only [`verify_passkey_unfreeze`] builds one.
#[derive(Debug, Clone)]
pub struct VerifiedPasskeyUnfreeze {
    nonce: String,
    credential_id: Vec<u8>,
    sign_count: u32,
}

impl VerifiedPasskeyUnfreeze {
    pub fn nonce(&self) -> &str {
        &self.nonce
    }
    pub fn credential_id(&self) -> &[u8] {
        &self.credential_id
    }
    /// The counter the store must now keep for the passkey.
    pub fn sign_count(&self) -> u32 {
        self.sign_count
    }
}

/// A registered passkey's assertion over these terms, for the freeze in force (`frozen`), not
/// expired at `now`, with a lifetime of at most [`UNFREEZE_TTL`].
pub fn verify_passkey_unfreeze(
    doc: &PasskeyUnfreeze,
    passkeys: &PasskeyRegistry,
    rp: &RelyingParty,
    frozen: &Frozen,
    now: OffsetDateTime,
) -> Result<VerifiedPasskeyUnfreeze, PasskeyRejection> {
    let terms = &doc.terms;
    if terms.version != PASSKEY_DOCUMENT_VERSION {
        return Err(PasskeyRejection::Malformed("unknown version"));
    }
    if !super::nonce_ok(&terms.nonce) {
        return Err(PasskeyRejection::Malformed("nonce"));
    }
    let verified = verify_assertion(rp, passkeys, &doc.assertion, &terms.challenge())?;
    if terms.frozen_at != frozen.stamp() {
        return Err(PasskeyRejection::OtherFreeze);
    }
    super::check_lifetime(&terms.issued_at, &terms.expires_at, now, UNFREEZE_TTL)?;
    Ok(VerifiedPasskeyUnfreeze {
        nonce: terms.nonce.clone(),
        credential_id: verified.credential_id().to_vec(),
        sign_count: verified.sign_count(),
    })
}

//! Approving a new passkey with a registered one (SPEC §6 "Registration": the first passkey is
//! trusted on first use, every later one must be approved with an existing passkey). The same
//! assertion checks as an approval, over terms bound to the new passkey's credential id and key,
//! under their own challenge prefix.

use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::approval::sorted_challenge;
use super::assertion::{PasskeyAssertion, verify_assertion};
use super::registration::{PasskeyRegistry, RegisteredPasskey};
use super::{PASSKEY_DOCUMENT_VERSION, PasskeyRejection, RelyingParty, b64};

/// Domain separation for enrolment challenges.
pub const ENROL_CHALLENGE_CONTEXT: &[u8] = b"cajaguard-passkey-enrol-v1\0";
/// How long the approving passkey has to answer.
pub const ENROL_TTL: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// What approving a new passkey commits to: which passkey (its credential id and the SHA-256 of
/// its COSE key, so the approval cannot be moved to another key), its name, and the lifetime.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeyEnrolTerms {
    pub version: u32,
    /// The new passkey's credential id, base64url.
    pub credential_id: String,
    /// Hex SHA-256 of the new passkey's COSE key.
    pub key_sha256: String,
    pub name: String,
    pub issued_at: String,
    pub expires_at: String,
    /// Hex, 128 bits from the server's randomness.
    pub nonce: String,
}

impl PasskeyEnrolTerms {
    /// Terms approving `new`, valid for [`ENROL_TTL`] from `now` (UTC, to the second).
    pub fn new(new: &RegisteredPasskey, now: OffsetDateTime, nonce: [u8; 16]) -> PasskeyEnrolTerms {
        let issued = now
            .to_offset(time::UtcOffset::UTC)
            .replace_nanosecond(0)
            .unwrap_or(now);
        let ttl = time::Duration::try_from(ENROL_TTL).unwrap_or(time::Duration::ZERO);
        let expires = issued.checked_add(ttl).unwrap_or(issued);
        PasskeyEnrolTerms {
            version: PASSKEY_DOCUMENT_VERSION,
            credential_id: b64::encode(&new.credential_id),
            key_sha256: hex::encode(Sha256::digest(&new.public_key)),
            name: new.name.clone(),
            issued_at: issued.format(&Rfc3339).unwrap_or_default(),
            expires_at: expires.format(&Rfc3339).unwrap_or_default(),
            nonce: hex::encode(nonce),
        }
    }
    /// SHA-256 of [`ENROL_CHALLENGE_CONTEXT`] ‖ RFC 8785 of the terms.
    pub fn challenge(&self) -> [u8; 32] {
        // Keys in RFC 8785 (byte) order; strings and a small integer only (see `sorted_challenge`).
        #[derive(serde::Serialize)]
        struct Sorted<'a> {
            credential_id: &'a str,
            expires_at: &'a str,
            issued_at: &'a str,
            key_sha256: &'a str,
            name: &'a str,
            nonce: &'a str,
            version: u32,
        }
        sorted_challenge(
            ENROL_CHALLENGE_CONTEXT,
            &Sorted {
                credential_id: &self.credential_id,
                expires_at: &self.expires_at,
                issued_at: &self.issued_at,
                key_sha256: &self.key_sha256,
                name: &self.name,
                nonce: &self.nonce,
                version: self.version,
            },
        )
    }
    pub fn challenge_b64url(&self) -> String {
        b64::encode(&self.challenge())
    }
}

/// A registered passkey's approval of a new one. Only [`verify_passkey_enrolment`] builds one.
#[derive(Debug, Clone)]
pub struct VerifiedPasskeyEnrolment {
    approver: Vec<u8>,
    sign_count: u32,
}

impl VerifiedPasskeyEnrolment {
    /// The registered passkey that approved.
    pub fn approver(&self) -> &[u8] {
        &self.approver
    }
    /// The counter the store must now keep for the approver (compare-and-set).
    pub fn sign_count(&self) -> u32 {
        self.sign_count
    }
}

/// A registered passkey's assertion over `terms`, which name exactly `new`, not expired at `now`.
pub fn verify_passkey_enrolment(
    terms: &PasskeyEnrolTerms,
    assertion: &PasskeyAssertion,
    passkeys: &PasskeyRegistry,
    rp: &RelyingParty,
    new: &RegisteredPasskey,
    now: OffsetDateTime,
) -> Result<VerifiedPasskeyEnrolment, PasskeyRejection> {
    if terms.version != PASSKEY_DOCUMENT_VERSION || !super::nonce_ok(&terms.nonce) {
        return Err(PasskeyRejection::Malformed("version/nonce"));
    }
    let verified = verify_assertion(rp, passkeys, assertion, &terms.challenge())?;
    if terms.credential_id != b64::encode(&new.credential_id)
        || terms.key_sha256 != hex::encode(Sha256::digest(&new.public_key))
    {
        return Err(PasskeyRejection::ChallengeMismatch);
    }
    super::check_lifetime(&terms.issued_at, &terms.expires_at, now, ENROL_TTL)?;
    Ok(VerifiedPasskeyEnrolment {
        approver: verified.credential_id().to_vec(),
        sign_count: verified.sign_count(),
    })
}

//! Passkey (WebAuthn) registration and approval verification (SPEC §6 "Approvals an agent cannot
//! make"), pure: the server-issued registration challenge, the clock and the stored passkeys come in
//! as arguments; nothing here reads a file, the network, the clock or randomness.
//!
//! - [`registration::verify_registration`] checks a `navigator.credentials.create` response and
//!   yields a [`RegisteredPasskey`], the record the store keeps.
//! - [`approval::verify_passkey_approval`] checks a [`PasskeyApproval`]: the approval terms and the
//!   `navigator.credentials.get` assertion whose challenge commits to them. Only it builds a
//!   [`VerifiedPasskeyApproval`].
//! - [`unfreeze::verify_passkey_unfreeze`] does the same for lifting a freeze.
//!
//! **Challenge encoding.** An approval's WebAuthn challenge is SHA-256 of the ASCII bytes
//! `cajaguard-passkey-approval-v1`, one NUL byte, then the RFC 8785 (JCS) JSON of the terms; an
//! unfreeze's uses `cajaguard-passkey-unfreeze-v1`. The prefixes keep an assertion made for one kind
//! of document from ever passing for the other, or for a key-file signature; JCS makes the bytes
//! independent of how the document is laid out. The passkey signs its authenticator data and the
//! hash of the client data, which holds the challenge, so the signature covers every term.
//!
//! **What is not checked here.** Single use (an approval's nonce, an unfreeze's nonce) is the store's
//! fact and the gate's check, as for key-file approvals; so is persisting the grown signature counter
//! this returns (with a compare-and-set, so two concurrent uses cannot both pass the counter check).
//! Attestation statements are not verified: the page asks for `attestation: "none"`, and trust in a
//! passkey comes from the human registering it (the first on first use, later ones approved with an
//! existing passkey), not from its maker.

pub mod approval;
pub mod assertion;
mod authdata;
mod client_data;
mod cose;
pub mod enrol;
pub mod registration;
pub mod unfreeze;

#[cfg(any(test, feature = "soft-authenticator"))]
pub mod soft_authenticator;
#[cfg(test)]
mod tests;

pub use approval::{
    PasskeyApproval, PasskeyApprovalTerms, VerifiedPasskeyApproval, signed_by_registered,
    verify_passkey_approval,
};
pub use assertion::{BrowserAssertion, PasskeyAssertion};
pub use cose::Algorithm;
pub use enrol::{PasskeyEnrolTerms, VerifiedPasskeyEnrolment, verify_passkey_enrolment};
pub use registration::{
    PasskeyRegistry, RegisteredPasskey, RegistrationResponse, verify_registration,
};
pub use unfreeze::{
    PasskeyUnfreeze, PasskeyUnfreezeTerms, VerifiedPasskeyUnfreeze, verify_passkey_unfreeze,
};

use sha2::{Digest as _, Sha256};

/// Domain separation for approval challenges (see the module docs).
pub const APPROVAL_CHALLENGE_CONTEXT: &[u8] = b"cajaguard-passkey-approval-v1\0";
/// Domain separation for unfreeze challenges.
pub const UNFREEZE_CHALLENGE_CONTEXT: &[u8] = b"cajaguard-passkey-unfreeze-v1\0";
/// The only passkey document version this code reads and writes.
pub const PASSKEY_DOCUMENT_VERSION: u32 = 1;

/// Who the passkeys are for: the RP ID (`localhost`) and the one origin the page is served from
/// (`http://localhost:8377`). Built once from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelyingParty {
    rp_id: String,
    origin: String,
    rp_id_hash: [u8; 32],
}

impl RelyingParty {
    /// `origin` must be `http` or `https`, with a host equal to `rp_id` or under it, and nothing
    /// after the port: browsers write it in that serialised form, and it is compared byte for byte.
    pub fn new(rp_id: &str, origin: &str) -> Result<RelyingParty, PasskeyRejection> {
        let url = url::Url::parse(origin).map_err(|_| PasskeyRejection::BadRelyingParty)?;
        let host_ok = url.host_str().is_some_and(|host| {
            host == rp_id
                || host
                    .strip_suffix(rp_id)
                    .is_some_and(|rest| rest.ends_with('.'))
        });
        let serialised = url.origin().ascii_serialization();
        if rp_id.is_empty()
            || !matches!(url.scheme(), "http" | "https")
            || !host_ok
            || serialised != origin
        {
            return Err(PasskeyRejection::BadRelyingParty);
        }
        Ok(RelyingParty {
            rp_id: rp_id.to_owned(),
            origin: serialised,
            rp_id_hash: Sha256::digest(rp_id.as_bytes()).into(),
        })
    }
    /// RP ID `localhost`, origin `http://localhost:<port>`: the local approval page.
    pub fn localhost(port: u16) -> RelyingParty {
        let origin = format!("http://localhost:{port}");
        RelyingParty {
            rp_id: "localhost".to_owned(),
            // Port 80 is the scheme's default, which browsers leave out of the origin.
            origin: if port == 80 {
                "http://localhost".to_owned()
            } else {
                origin
            },
            rp_id_hash: Sha256::digest(b"localhost").into(),
        }
    }
    pub fn rp_id(&self) -> &str {
        &self.rp_id
    }
    pub fn origin(&self) -> &str {
        &self.origin
    }
    pub(crate) fn rp_id_hash(&self) -> &[u8; 32] {
        &self.rp_id_hash
    }
}

/// Why a passkey registration, approval or unfreeze was not accepted. Each message says what
/// happened and what to do next; none echoes the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PasskeyRejection {
    #[error(
        "the passkey document is malformed ({0}): approve again on the approval page rather than editing it"
    )]
    Malformed(&'static str),
    #[error(
        "the passkey that signed this is not registered here: register it with `cajaguard passkey add`, or approve with a registered one"
    )]
    UnregisteredCredential,
    #[error(
        "the client data is of type {found} where {expected} was expected: a registration cannot stand in for an approval or the other way round; start again on the page"
    )]
    WrongClientDataType {
        expected: &'static str,
        found: &'static str,
    },
    #[error(
        "the client data is not what a browser writes (not JSON, a repeated or mistyped member): it was altered; approve again on the page"
    )]
    TamperedClientData,
    #[error(
        "the passkey signed another challenge: it approved another basket, another decision or other terms; approve this request itself on the page"
    )]
    ChallengeMismatch,
    #[error(
        "the passkey was used on another origin (or inside another site's frame): approve only on the CajaGuard page at the configured address"
    )]
    WrongOrigin,
    #[error(
        "the passkey signed for another relying party (RP ID hash differs): use a passkey registered for this CajaGuard's RP ID"
    )]
    WrongRpIdHash,
    #[error(
        "the authenticator did not report the user present (UP flag): touch the authenticator when asked"
    )]
    UserNotPresent,
    #[error(
        "the authenticator did not verify the user (UV flag: PIN, fingerprint or face): use an authenticator that verifies you, with verification on"
    )]
    UserNotVerified,
    #[error(
        "the passkey signature does not verify over the authenticator data and client data: the document was altered after it was signed; approve again"
    )]
    BadSignature,
    #[error(
        "the signature counter did not grow ({presented} after {stored}): the passkey may have been cloned or the assertion replayed; check the authenticator, remove the passkey if in doubt"
    )]
    CounterNotGrown { stored: u32, presented: u32 },
    /// The document is honest but for another basket: the gate ignores it, as for key-file approvals.
    #[error(
        "the approval is for another basket (digest or request id differ): approve the request the gate named"
    )]
    OtherBasket,
    #[error("the unfreeze is for another freeze: unfreeze again on the page")]
    OtherFreeze,
    #[error("the approval has expired: approve again on the page")]
    Expired,
    #[error(
        "the approval's lifetime is longer than approvals.max_ttl_minutes allows: approve again with a shorter lifetime"
    )]
    LifetimeTooLong,
    #[error(
        "the passkey uses an algorithm CajaGuard does not accept: register a passkey that offers ES256 or EdDSA"
    )]
    UnsupportedAlgorithm,
    #[error(
        "approvals.web: the origin must be http(s)://HOST[:PORT] with HOST the RP ID or under it, and nothing after the port"
    )]
    BadRelyingParty,
}

/// Base64url without padding, as WebAuthn's `toJSON()` writes it; padded input is read too.
pub(crate) mod b64 {
    use base64::Engine as _;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

    pub(crate) const ENGINE: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        GeneralPurposeConfig::new()
            .with_encode_padding(false)
            .with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );

    pub(crate) fn encode(bytes: &[u8]) -> String {
        ENGINE.encode(bytes)
    }

    pub(crate) fn serialize<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&ENGINE.encode(bytes))
    }

    pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text: std::borrow::Cow<'de, str> = serde::Deserialize::deserialize(d)?;
        ENGINE
            .decode(text.as_bytes())
            .map_err(|_| serde::de::Error::custom("not base64url"))
    }
}

/// A serde error's category without the offending input.
pub(crate) fn serde_category(e: &serde_json::Error) -> &'static str {
    use serde_json::error::Category;
    match e.classify() {
        Category::Io => "unreadable",
        Category::Syntax => "invalid JSON",
        Category::Data => "a field is missing, unknown or of the wrong type",
        Category::Eof => "the document ends early",
    }
}

/// RFC 3339 in UTC, as the documents write times.
pub(crate) fn parse_utc(text: &str) -> Option<time::OffsetDateTime> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    (t.offset() == time::UtcOffset::UTC).then_some(t)
}

/// A nonce as the documents write it: lower-case hex, 128 to 512 bits.
pub(crate) fn nonce_ok(text: &str) -> bool {
    (32..=128).contains(&text.len())
        && text.len().is_multiple_of(2)
        && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The checks on a document's `issued_at`/`expires_at` every passkey document shares: a positive
/// lifetime of at most `max_ttl`, not expired at `now`, and issued no later than a small clock skew
/// ahead of `now`.
pub(crate) fn check_lifetime(
    issued_at: &str,
    expires_at: &str,
    now: time::OffsetDateTime,
    max_ttl: std::time::Duration,
) -> Result<time::OffsetDateTime, PasskeyRejection> {
    let (Some(issued), Some(expires)) = (parse_utc(issued_at), parse_utc(expires_at)) else {
        return Err(PasskeyRejection::Malformed("issued_at/expires_at"));
    };
    let lifetime = expires - issued;
    if lifetime <= time::Duration::ZERO {
        return Err(PasskeyRejection::Malformed(
            "expires_at is not after issued_at",
        ));
    }
    if lifetime > max_ttl {
        return Err(PasskeyRejection::LifetimeTooLong);
    }
    if now >= expires {
        return Err(PasskeyRejection::Expired);
    }
    if issued - now > crate::approval::MAX_CLOCK_SKEW {
        return Err(PasskeyRejection::Malformed("issued_at is in the future"));
    }
    Ok(expires)
}

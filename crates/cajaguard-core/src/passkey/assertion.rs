//! Assertions (WebAuthn §7.2): the part of approval and unfreeze verification that does not
//! depend on what the challenge commits to.

use sha2::{Digest as _, Sha256};

use super::authdata::{AuthenticatorData, FLAG_AT};
use super::client_data::{self, TYPE_GET};
use super::registration::PasskeyRegistry;
use super::{PasskeyRejection, RelyingParty, b64};

/// Authenticator data bigger than this is not an assertion's.
const MAX_AUTH_DATA: usize = 4096;

/// A `navigator.credentials.get` assertion as a passkey document keeps it, base64url.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeyAssertion {
    #[serde(with = "b64")]
    pub credential_id: Vec<u8>,
    #[serde(with = "b64")]
    pub authenticator_data: Vec<u8>,
    #[serde(with = "b64")]
    pub client_data_json: Vec<u8>,
    /// ES256: ASN.1 DER; EdDSA: 64 raw bytes.
    #[serde(with = "b64")]
    pub signature: Vec<u8>,
}

/// The response part of a `PublicKeyCredential` from `navigator.credentials.get`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct BrowserAssertionResponse {
    #[serde(rename = "clientDataJSON", with = "b64")]
    pub client_data_json: Vec<u8>,
    #[serde(rename = "authenticatorData", with = "b64")]
    pub authenticator_data: Vec<u8>,
    #[serde(with = "b64")]
    pub signature: Vec<u8>,
}

/// What the approval page posts: the shape of `PublicKeyCredential.toJSON()` (other members,
/// `userHandle` among them, are ignored: the credential id names the passkey).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct BrowserAssertion {
    #[serde(with = "b64")]
    pub id: Vec<u8>,
    pub response: BrowserAssertionResponse,
}

impl BrowserAssertion {
    pub fn from_json(text: &str) -> Result<BrowserAssertion, PasskeyRejection> {
        serde_json::from_str(text)
            .map_err(|e| PasskeyRejection::Malformed(super::serde_category(&e)))
    }
    pub fn into_assertion(self) -> PasskeyAssertion {
        PasskeyAssertion {
            credential_id: self.id,
            authenticator_data: self.response.authenticator_data,
            client_data_json: self.response.client_data_json,
            signature: self.response.signature,
        }
    }
}

/// An assertion that verified: which passkey, and the counter the store must now keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedAssertion {
    credential_id: Vec<u8>,
    sign_count: u32,
}

impl VerifiedAssertion {
    pub fn credential_id(&self) -> &[u8] {
        &self.credential_id
    }
    /// The counter to store for the passkey (unchanged 0 for authenticators that keep none).
    pub fn sign_count(&self) -> u32 {
        self.sign_count
    }
}

/// Registered credential; client data of type `webauthn.get` with `challenge` and the configured
/// origin; the RP ID hash; UP and UV; the signature over authenticator data ‖ SHA-256(client
/// data); a counter that grew unless both it and the stored one are 0 (WebAuthn §7.2 step 22).
pub(crate) fn verify_assertion(
    rp: &RelyingParty,
    passkeys: &PasskeyRegistry,
    assertion: &PasskeyAssertion,
    challenge: &[u8; 32],
) -> Result<VerifiedAssertion, PasskeyRejection> {
    let passkey = passkeys
        .find(&assertion.credential_id)
        .ok_or(PasskeyRejection::UnregisteredCredential)?;
    client_data::check(&assertion.client_data_json, TYPE_GET, challenge, rp)?;
    if assertion.authenticator_data.len() > MAX_AUTH_DATA {
        return Err(PasskeyRejection::Malformed(
            "the authenticator data is too long",
        ));
    }
    let data = AuthenticatorData::parse(&assertion.authenticator_data)?;
    if data.flags & FLAG_AT != 0 {
        return Err(PasskeyRejection::Malformed(
            "an assertion carries no attested credential (AT flag set)",
        ));
    }
    data.check_rp_and_user(rp.rp_id_hash())?;

    let mut message = Vec::with_capacity(assertion.authenticator_data.len() + 32);
    message.extend_from_slice(&assertion.authenticator_data);
    message.extend_from_slice(&Sha256::digest(&assertion.client_data_json));
    if !passkey.key.verify(&message, &assertion.signature) {
        return Err(PasskeyRejection::BadSignature);
    }

    let (stored, presented) = (passkey.sign_count, data.sign_count);
    if (stored != 0 || presented != 0) && presented <= stored {
        return Err(PasskeyRejection::CounterNotGrown { stored, presented });
    }
    Ok(VerifiedAssertion {
        credential_id: assertion.credential_id.clone(),
        sign_count: presented,
    })
}

//! Registration (WebAuthn §7.1): a `navigator.credentials.create` response checked against the
//! server-issued challenge, the RP ID and the origin; the result is the record the store keeps.

use ciborium::value::Value;

use super::authdata::{AuthenticatorData, FLAG_BE};
use super::client_data::{self, TYPE_CREATE};
use super::cose::{Algorithm, CredentialKey, read_item};
use super::{PasskeyRejection, RelyingParty, b64};

/// An attestation object bigger than this is not an authenticator's (`none` makes it small).
const MAX_ATTESTATION_OBJECT: usize = 16 * 1024;
/// Shorter server challenges are refused: WebAuthn asks for at least 16 random bytes.
pub const MIN_CHALLENGE_LEN: usize = 16;

/// The response part of a `PublicKeyCredential` from `navigator.credentials.create`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttestationResponse {
    #[serde(rename = "clientDataJSON", with = "b64")]
    pub client_data_json: Vec<u8>,
    #[serde(rename = "attestationObject", with = "b64")]
    pub attestation_object: Vec<u8>,
}

/// What the registration page posts: the shape of `PublicKeyCredential.toJSON()` (members this
/// does not read, such as `transports` or `clientExtensionResults`, are ignored).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RegistrationResponse {
    /// The credential id (`rawId`), base64url.
    #[serde(with = "b64")]
    pub id: Vec<u8>,
    #[serde(rename = "type", default = "public_key_type")]
    pub kind: String,
    pub response: AttestationResponse,
}

fn public_key_type() -> String {
    "public-key".to_owned()
}

impl RegistrationResponse {
    pub fn from_json(text: &str) -> Result<RegistrationResponse, PasskeyRejection> {
        serde_json::from_str(text)
            .map_err(|e| PasskeyRejection::Malformed(super::serde_category(&e)))
    }
}

/// A registered passkey as the store keeps it. Nothing in it is secret.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisteredPasskey {
    /// The credential id, base64url: how an assertion names its passkey.
    #[serde(with = "b64")]
    pub credential_id: Vec<u8>,
    /// The human's label (`cajaguard passkey add --name`).
    pub name: String,
    pub algorithm: Algorithm,
    /// The COSE_Key exactly as the authenticator wrote it, base64url.
    #[serde(with = "b64")]
    pub public_key: Vec<u8>,
    /// The last signature counter seen; 0 for authenticators that keep none.
    pub sign_count: u32,
    /// The authenticator model (hex; all zeros under attestation `none`). Shown, never trusted.
    pub aaguid: String,
    /// The BE flag: the passkey may be synced to other devices.
    pub backup_eligible: bool,
}

/// Checks a registration response: client data of type `webauthn.create` with `challenge` (the
/// one the server issued for this registration) and the configured origin; an attestation object
/// whose authenticator data has this RP ID's hash, the UP and UV flags, and an ES256 or EdDSA key;
/// a credential id equal to the response's. The attestation statement itself is not verified
/// (see the module docs).
pub fn verify_registration(
    rp: &RelyingParty,
    challenge: &[u8],
    response: &RegistrationResponse,
    name: &str,
) -> Result<RegisteredPasskey, PasskeyRejection> {
    if challenge.len() < MIN_CHALLENGE_LEN {
        return Err(PasskeyRejection::Malformed(
            "the server's registration challenge is shorter than 16 bytes",
        ));
    }
    if response.kind != "public-key" {
        return Err(PasskeyRejection::Malformed(
            "the credential is not of type public-key",
        ));
    }
    client_data::check(
        &response.response.client_data_json,
        TYPE_CREATE,
        challenge,
        rp,
    )?;
    let auth_data = attestation_auth_data(&response.response.attestation_object)?;
    let data = AuthenticatorData::parse(&auth_data)?;
    data.check_rp_and_user(rp.rp_id_hash())?;
    let Some(attested) = data.attested else {
        return Err(PasskeyRejection::Malformed(
            "the authenticator data holds no credential (AT flag unset)",
        ));
    };
    if attested.credential_id != response.id {
        return Err(PasskeyRejection::Malformed(
            "the credential id differs from the authenticator data's",
        ));
    }
    Ok(RegisteredPasskey {
        credential_id: attested.credential_id,
        name: name.to_owned(),
        algorithm: attested.public_key.algorithm(),
        public_key: attested.public_key_cose,
        sign_count: data.sign_count,
        aaguid: hex::encode(attested.aaguid),
        backup_eligible: data.flags & FLAG_BE != 0,
    })
}

/// The `authData` of an attestation object (a CBOR map of `fmt`, `attStmt`, `authData`).
fn attestation_auth_data(object: &[u8]) -> Result<Vec<u8>, PasskeyRejection> {
    const BAD: PasskeyRejection = PasskeyRejection::Malformed(
        "the attestation object is not a CBOR map of fmt, attStmt and authData",
    );
    if object.len() > MAX_ATTESTATION_OBJECT {
        return Err(BAD);
    }
    let Some((Value::Map(entries), [])) = read_item(object) else {
        return Err(BAD);
    };
    let (mut fmt, mut stmt, mut auth_data) = (None, None, None);
    for (key, value) in entries {
        let slot = match key.as_text() {
            Some("fmt") => &mut fmt,
            Some("attStmt") => &mut stmt,
            Some("authData") => &mut auth_data,
            _ => return Err(BAD),
        };
        if slot.replace(value).is_some() {
            return Err(BAD);
        }
    }
    match (fmt, stmt, auth_data) {
        (Some(Value::Text(_)), Some(Value::Map(_)), Some(Value::Bytes(bytes))) => Ok(bytes),
        _ => Err(BAD),
    }
}

/// A registered passkey with its key parsed, ready to check assertions.
#[derive(Debug, Clone)]
pub(crate) struct TrustedPasskey {
    pub(crate) credential_id: Vec<u8>,
    pub(crate) key: CredentialKey,
    pub(crate) sign_count: u32,
}

/// The registered passkeys, parsed once when the store hands them over.
#[derive(Debug, Clone, Default)]
pub struct PasskeyRegistry {
    passkeys: Vec<TrustedPasskey>,
}

impl PasskeyRegistry {
    /// Parses every stored key; a record whose key no longer parses, or whose algorithm disagrees
    /// with its key, is refused (the store holds only what [`verify_registration`] produced).
    pub fn new(registered: &[RegisteredPasskey]) -> Result<PasskeyRegistry, PasskeyRejection> {
        let passkeys = registered
            .iter()
            .map(|p| {
                let key = CredentialKey::from_cose(&p.public_key)?;
                if key.algorithm() != p.algorithm {
                    return Err(PasskeyRejection::Malformed(
                        "a stored passkey's algorithm differs from its key's",
                    ));
                }
                Ok(TrustedPasskey {
                    credential_id: p.credential_id.clone(),
                    key,
                    sign_count: p.sign_count,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PasskeyRegistry { passkeys })
    }
    pub(crate) fn find(&self, credential_id: &[u8]) -> Option<&TrustedPasskey> {
        self.passkeys
            .iter()
            .find(|p| p.credential_id == credential_id)
    }
    pub fn len(&self) -> usize {
        self.passkeys.len()
    }
    pub fn is_empty(&self) -> bool {
        self.passkeys.is_empty()
    }
}

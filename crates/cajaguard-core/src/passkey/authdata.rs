//! Authenticator data (WebAuthn §6.1): RP ID hash, flags, signature counter, and at registration
//! the attested credential data (AAGUID, credential id, COSE public key).

use ciborium::value::Value;

use super::PasskeyRejection;
use super::cose::{CredentialKey, read_item};

pub(crate) const FLAG_UP: u8 = 0x01;
pub(crate) const FLAG_UV: u8 = 0x04;
pub(crate) const FLAG_BE: u8 = 0x08;
pub(crate) const FLAG_AT: u8 = 0x40;
pub(crate) const FLAG_ED: u8 = 0x80;
/// WebAuthn caps credential ids at 1023 bytes.
const MAX_CREDENTIAL_ID: usize = 1023;

/// Attested credential data, present only at registration.
#[derive(Debug)]
pub(crate) struct AttestedCredential {
    pub(crate) aaguid: [u8; 16],
    pub(crate) credential_id: Vec<u8>,
    /// The COSE_Key exactly as the authenticator wrote it (what the store keeps).
    pub(crate) public_key_cose: Vec<u8>,
    pub(crate) public_key: CredentialKey,
}

#[derive(Debug)]
pub(crate) struct AuthenticatorData {
    pub(crate) rp_id_hash: [u8; 32],
    pub(crate) flags: u8,
    pub(crate) sign_count: u32,
    pub(crate) attested: Option<AttestedCredential>,
}

impl AuthenticatorData {
    /// Parses the whole structure: fixed header, attested credential data if the AT flag says so,
    /// an extensions map if ED says so, and nothing after.
    pub(crate) fn parse(bytes: &[u8]) -> Result<AuthenticatorData, PasskeyRejection> {
        const SHORT: PasskeyRejection =
            PasskeyRejection::Malformed("the authenticator data is truncated");
        let (header, mut rest) = bytes.split_at_checked(37).ok_or(SHORT)?;
        let mut rp_id_hash = [0u8; 32];
        rp_id_hash.copy_from_slice(&header[..32]);
        let flags = header[32];
        let sign_count = u32::from_be_bytes([header[33], header[34], header[35], header[36]]);

        let attested = if flags & FLAG_AT != 0 {
            let (aaguid, after) = rest.split_at_checked(16).ok_or(SHORT)?;
            let (len, after) = after.split_at_checked(2).ok_or(SHORT)?;
            let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
            if len == 0 || len > MAX_CREDENTIAL_ID {
                return Err(PasskeyRejection::Malformed(
                    "the credential id is empty or longer than 1023 bytes",
                ));
            }
            let (credential_id, key_bytes) = after.split_at_checked(len).ok_or(SHORT)?;
            let (key, after) = read_item(key_bytes).ok_or(PasskeyRejection::Malformed(
                "the credential public key is not CBOR",
            ))?;
            let public_key_cose = key_bytes[..key_bytes.len() - after.len()].to_vec();
            let public_key = CredentialKey::from_value(&key)?;
            let mut id = [0u8; 16];
            id.copy_from_slice(aaguid);
            rest = after;
            Some(AttestedCredential {
                aaguid: id,
                credential_id: credential_id.to_vec(),
                public_key_cose,
                public_key,
            })
        } else {
            None
        };

        if flags & FLAG_ED != 0 {
            match read_item(rest) {
                Some((Value::Map(_), after)) => rest = after,
                _ => {
                    return Err(PasskeyRejection::Malformed(
                        "the authenticator extensions are not a CBOR map",
                    ));
                }
            }
        }
        if !rest.is_empty() {
            return Err(PasskeyRejection::Malformed(
                "bytes after the end of the authenticator data",
            ));
        }
        Ok(AuthenticatorData {
            rp_id_hash,
            flags,
            sign_count,
            attested,
        })
    }

    /// The checks registration and assertion share, in WebAuthn's order: RP ID hash, UP, UV.
    pub(crate) fn check_rp_and_user(&self, rp_id_hash: &[u8; 32]) -> Result<(), PasskeyRejection> {
        if &self.rp_id_hash != rp_id_hash {
            return Err(PasskeyRejection::WrongRpIdHash);
        }
        if self.flags & FLAG_UP == 0 {
            return Err(PasskeyRejection::UserNotPresent);
        }
        if self.flags & FLAG_UV == 0 {
            return Err(PasskeyRejection::UserNotVerified);
        }
        Ok(())
    }
}

//! Collected client data (WebAuthn §5.8.1): the JSON the browser writes and the authenticator
//! signs the hash of. Read member by member, so that a repeated member — on which JSON parsers
//! disagree, and so a way to show one reader a challenge and another a different one — is refused.

use serde::de::{Deserializer, MapAccess, Visitor};

use super::{PasskeyRejection, RelyingParty, b64};

/// Client data longer than this is not a browser's.
const MAX_CLIENT_DATA: usize = 4096;

pub(crate) const TYPE_CREATE: &str = "webauthn.create";
pub(crate) const TYPE_GET: &str = "webauthn.get";

/// The members CajaGuard reads; others (browsers add some) are ignored, as WebAuthn asks.
#[derive(Debug, Default)]
struct ClientData {
    kind: Option<String>,
    challenge: Option<String>,
    origin: Option<String>,
    cross_origin: Option<bool>,
    top_origin: Option<String>,
}

struct ClientDataVisitor;

/// A repeated member or a member of the wrong type.
fn tampered<E: serde::de::Error>() -> E {
    E::custom("tampered")
}

fn once<'de, A: MapAccess<'de>, T: serde::Deserialize<'de>>(
    slot: &mut Option<T>,
    map: &mut A,
) -> Result<(), A::Error> {
    if slot.is_some() {
        return Err(tampered());
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

impl<'de> Visitor<'de> for ClientDataVisitor {
    type Value = ClientData;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a WebAuthn client data object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ClientData, A::Error> {
        let mut out = ClientData::default();
        let mut others = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "type" => once(&mut out.kind, &mut map)?,
                "challenge" => once(&mut out.challenge, &mut map)?,
                "origin" => once(&mut out.origin, &mut map)?,
                "crossOrigin" => once(&mut out.cross_origin, &mut map)?,
                "topOrigin" => once(&mut out.top_origin, &mut map)?,
                _ => {
                    if !others.insert(key) {
                        return Err(tampered());
                    }
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// Checks client data against what the ceremony expects, in WebAuthn's order: type, challenge,
/// origin (with no cross-origin frame).
pub(crate) fn check(
    json: &[u8],
    expected_type: &'static str,
    expected_challenge: &[u8],
    rp: &RelyingParty,
) -> Result<(), PasskeyRejection> {
    if json.len() > MAX_CLIENT_DATA {
        return Err(PasskeyRejection::TamperedClientData);
    }
    let mut de = serde_json::Deserializer::from_slice(json);
    let data = de
        .deserialize_map(ClientDataVisitor)
        .and_then(|d| de.end().map(|()| d))
        .map_err(|_| PasskeyRejection::TamperedClientData)?;
    let (Some(kind), Some(challenge), Some(origin)) = (data.kind, data.challenge, data.origin)
    else {
        return Err(PasskeyRejection::TamperedClientData);
    };
    if kind != expected_type {
        return Err(PasskeyRejection::WrongClientDataType {
            expected: expected_type,
            found: match kind.as_str() {
                TYPE_CREATE => TYPE_CREATE,
                TYPE_GET => TYPE_GET,
                _ => "another type",
            },
        });
    }
    let challenge_ok = base64::Engine::decode(&b64::ENGINE, challenge.as_bytes())
        .is_ok_and(|bytes| bytes == expected_challenge);
    if !challenge_ok {
        return Err(PasskeyRejection::ChallengeMismatch);
    }
    if origin != rp.origin() || data.cross_origin == Some(true) || data.top_origin.is_some() {
        return Err(PasskeyRejection::WrongOrigin);
    }
    Ok(())
}

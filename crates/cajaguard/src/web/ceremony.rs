//! Ceremonies: each page that can change something is issued with a random, single-use,
//! short-lived nonce naming terms the server keeps; a POST names the nonce and carries the
//! WebAuthn response, and the terms come from here, never from the request.

use super::*;

/// What a ceremony's nonce stands for: the terms or challenge the server issued with the page.
#[derive(Debug, Clone)]
pub(super) enum Ceremony {
    Decide {
        request_id: RequestId,
        terms: PasskeyApprovalTerms,
    },
    Register {
        link_token: String,
        name: String,
        challenge: [u8; 32],
    },
    Unfreeze {
        frozen: Frozen,
        terms: PasskeyUnfreezeTerms,
    },
    /// A new passkey, verified, waiting for a registered one to approve it.
    Enrol {
        link_token: String,
        record: passkey::RegisteredPasskey,
        terms: PasskeyEnrolTerms,
    },
}

pub(super) struct Issued {
    pub(super) ceremony: Ceremony,
    pub(super) expires: OffsetDateTime,
    /// Issue order, to drop the oldest past [`MAX_CEREMONIES`].
    pub(super) serial: u64,
}

/// Random bytes, or a refusal: without randomness no ceremony can be issued (fail closed).
pub(super) fn random<const N: usize>() -> Result<[u8; N], Response> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|_| Response::text(500, "no randomness available; nothing was issued"))?;
    Ok(bytes)
}

impl WebApp {
    /// Keeps `ceremony` under a fresh nonce, dropping expired ones and the oldest past the cap.
    pub(super) fn issue(&self, ceremony: Ceremony) -> Result<String, Response> {
        let nonce = hex::encode(random::<16>()?);
        let now = self.now();
        let mut guard = self.ceremonies.lock().unwrap_or_else(|p| p.into_inner());
        let (serial, map) = &mut *guard;
        map.retain(|_, issued| issued.expires > now);
        while map.len() >= MAX_CEREMONIES {
            let Some(oldest) = map
                .iter()
                .min_by_key(|(_, issued)| issued.serial)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            map.remove(&oldest);
        }
        *serial += 1;
        map.insert(
            nonce.clone(),
            Issued {
                ceremony,
                expires: now + CEREMONY_TTL,
                serial: *serial,
            },
        );
        Ok(nonce)
    }

    /// Takes the ceremony `nonce` names: once, and only before it expires.
    pub(super) fn take(&self, nonce: &str) -> Option<Ceremony> {
        let now = self.now();
        let mut guard = self.ceremonies.lock().unwrap_or_else(|p| p.into_inner());
        let issued = guard.1.remove(nonce)?;
        (issued.expires > now).then_some(issued.ceremony)
    }

    /// The ceremony a POST names, taken (once, whatever follows), and its WebAuthn response.
    pub(super) fn posted(&self, body: &[u8]) -> Result<(Ceremony, Value), Response> {
        let Some((nonce, credential)) = ceremony_body(body) else {
            return Err(Response::refused(
                400,
                "the request is not {\"nonce\", \"credential\"}: use the page's buttons",
            ));
        };
        match self.take(&nonce) {
            Some(ceremony) => Ok((ceremony, credential)),
            None => Err(Response::refused(
                409,
                "this form was used, has expired (5 minutes) or was not issued by this page: reload the page and try again",
            )),
        }
    }
}

/// A `navigator.credentials.get` answer as the page posts it.
pub(super) fn assertion_of(credential: &Value) -> Result<passkey::PasskeyAssertion, Response> {
    BrowserAssertion::from_json(&credential.to_string())
        .map(BrowserAssertion::into_assertion)
        .map_err(|e| Response::refused(400, e.to_string()))
}

/// `{"nonce": "<hex>", "credential": {...}}`, or `None`.
pub(super) fn ceremony_body(body: &[u8]) -> Option<(String, Value)> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let nonce = value.get("nonce")?.as_str()?.to_owned();
    let credential = value.get("credential")?.clone();
    credential.is_object().then_some((nonce, credential))
}

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

impl Ceremony {
    /// The challenge an authenticator signs to answer this form, or `None` for a registration
    /// (whose challenge the page passes to `credentials.create` as bytes).
    fn assertion_challenge(&self) -> Option<String> {
        match self {
            Ceremony::Decide { terms, .. } => Some(terms.challenge_b64url()),
            Ceremony::Unfreeze { terms, .. } => Some(terms.challenge_b64url()),
            Ceremony::Enrol { terms, .. } => Some(terms.challenge_b64url()),
            Ceremony::Register { .. } => None,
        }
    }
}

/// What a form that any load of a page issues is for. Loading that page again hands out the
/// form already open for it rather than a new one; see [`WebApp::issue_for`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Purpose {
    /// Approving or denying a request.
    Decide(RequestId, Decision),
    /// Lifting the freeze of this stamp ([`Frozen::stamp`]).
    Unfreeze(String),
}

pub(super) struct Issued {
    pub(super) ceremony: Ceremony,
    pub(super) expires: OffsetDateTime,
    /// How long it was issued for (see [`WebApp::form_lifetime`]).
    pub(super) lifetime: Duration,
    /// What the form is for, when loading a page again may hand it out again; `None` for one
    /// made once (a registration, behind its secret link; an enrolment, after a registration).
    pub(super) purpose: Option<Purpose>,
}

/// Random bytes, or a refusal: without randomness no ceremony can be issued (fail closed).
pub(super) fn random<const N: usize>() -> Result<[u8; N], Response> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|_| Response::text(500, "no randomness available; nothing was issued"))?;
    Ok(bytes)
}

/// The form open for `purpose` that still has half its life to run (so the page a human loads
/// always leaves them that long to touch their authenticator), as its nonce and what it stands
/// for.
fn open_for(
    issued: &HashMap<String, Issued>,
    purpose: &Purpose,
    now: OffsetDateTime,
) -> Option<(String, Ceremony)> {
    issued
        .iter()
        .filter(|(_, i)| i.purpose.as_ref() == Some(purpose) && i.expires >= now + i.lifetime / 2)
        .max_by_key(|(_, i)| i.expires)
        .map(|(nonce, i)| (nonce.clone(), i.ceremony.clone()))
}

impl WebApp {
    /// The form for `purpose`, as its nonce and the challenge to sign: the one already open for it
    /// while it has half its life to run, else a new one `make` makes.
    ///
    /// Why not a new form each load, dropping the oldest past [`MAX_CEREMONIES`]: a local process
    /// that loaded `/requests/<id>` or `/status` in a loop pushed the human's open form out, and
    /// their click was refused (409). With one form a purpose (two while one is in its last half)
    /// such a loop takes no room at all, and no form is ever dropped to make room for another
    /// ([`WebApp::keep`]). Every load of a page shows the same nonce, so a process can read it;
    /// that is why a POST uses a form up only once its answer verified ([`WebApp::posted`]).
    ///
    /// `Ok(None)` when a new form was needed and [`MAX_CEREMONIES`] are open: the page is shown
    /// without it (so that one filled by loads of many requests' pages still shows the others).
    pub(super) fn issue_for(
        &self,
        purpose: Purpose,
        make: impl FnOnce() -> Result<Ceremony, Response>,
    ) -> Result<Option<(String, String)>, Response> {
        let open = {
            let now = self.now();
            let issued = self.ceremonies.lock().unwrap_or_else(|p| p.into_inner());
            open_for(&issued, &purpose, now)
        };
        let (nonce, ceremony) = match open {
            Some(open) => open,
            // Made outside the lock: a decision's terms take a checkpoint from the store.
            None => match self.keep(make()?, Some(purpose))? {
                Some(kept) => kept,
                None => return Ok(None),
            },
        };
        let challenge = ceremony
            .assertion_challenge()
            .ok_or_else(|| Response::text(500, "this form has no challenge; nothing was issued"))?;
        Ok(Some((nonce, challenge)))
    }

    /// Keeps `ceremony`, made once, under a fresh nonce.
    pub(super) fn issue(&self, ceremony: Ceremony) -> Result<String, Response> {
        match self.keep(ceremony, None)? {
            Some((nonce, _)) => Ok(nonce),
            None => Err(Response::text(
                503,
                "too many forms are open on this page: use one already open, or try again in a few minutes (each lasts 5)",
            )),
        }
    }

    /// Keeps `ceremony` under a fresh nonce, dropping expired forms; past [`MAX_CEREMONIES`] open
    /// ones, keeps nothing (`None`) rather than drop one a human may be about to use.
    fn keep(
        &self,
        ceremony: Ceremony,
        purpose: Option<Purpose>,
    ) -> Result<Option<(String, Ceremony)>, Response> {
        let nonce = hex::encode(random::<16>()?);
        let now = self.now();
        let mut issued = self.ceremonies.lock().unwrap_or_else(|p| p.into_inner());
        issued.retain(|_, i| i.expires > now);
        // Another load of the page may have issued one meanwhile: that one is handed out.
        if let Some(purpose) = &purpose
            && let Some(open) = open_for(&issued, purpose, now)
        {
            return Ok(Some(open));
        }
        if issued.len() >= MAX_CEREMONIES {
            return Ok(None);
        }
        let lifetime = self.form_lifetime(&ceremony);
        issued.insert(
            nonce.clone(),
            Issued {
                ceremony: ceremony.clone(),
                expires: now + lifetime,
                lifetime,
                purpose,
            },
        );
        Ok(Some((nonce, ceremony)))
    }

    /// How long a form is open: [`CEREMONY_TTL`], or less when what it signs expires sooner (an
    /// approval under a short `approvals.max_ttl`), since a form handed out again after its
    /// terms expired could only be refused. A second less: the terms' times are to the second.
    fn form_lifetime(&self, ceremony: &Ceremony) -> Duration {
        let terms = match ceremony {
            Ceremony::Decide { .. } => APPROVAL_TTL.min(self.policy.approvals.max_ttl),
            Ceremony::Unfreeze { .. } => cajaguard_core::freeze::UNFREEZE_TTL,
            Ceremony::Enrol { .. } => cajaguard_core::passkey::enrol::ENROL_TTL,
            Ceremony::Register { .. } => CEREMONY_TTL,
        };
        CEREMONY_TTL.min(terms.saturating_sub(Duration::from_secs(1)))
    }

    /// The form a POST names (its nonce and what it stands for) and its WebAuthn response. The
    /// form stays open: the handler uses it up with [`WebApp::use_up`] once the answer verified,
    /// so a forged answer posted with a nonce read from the page cannot spend the human's form.
    pub(super) fn posted(&self, body: &[u8]) -> Result<(String, Ceremony, Value), Response> {
        let Some((nonce, credential)) = ceremony_body(body) else {
            return Err(Response::refused(
                400,
                "the request is not {\"nonce\", \"credential\"}: use the page's buttons",
            ));
        };
        let now = self.now();
        let open = {
            let issued = self.ceremonies.lock().unwrap_or_else(|p| p.into_inner());
            issued
                .get(&nonce)
                .filter(|i| i.expires > now)
                .map(|i| i.ceremony.clone())
        };
        match open {
            Some(ceremony) => Ok((nonce, ceremony, credential)),
            None => Err(Self::not_open()),
        }
    }

    /// Uses up the form `nonce` whose answer verified: once, and only before it expires. `Err`
    /// when another answer used it meanwhile (two posts of one form).
    pub(super) fn use_up(&self, nonce: &str) -> Result<(), Response> {
        let now = self.now();
        let mut issued = self.ceremonies.lock().unwrap_or_else(|p| p.into_inner());
        match issued.remove(nonce) {
            Some(i) if i.expires > now => Ok(()),
            _ => Err(Self::not_open()),
        }
    }

    fn not_open() -> Response {
        Response::refused(
            409,
            "this form was used, has expired (5 minutes) or was not issued by this page: reload the page and try again",
        )
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

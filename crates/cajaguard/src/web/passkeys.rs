//! Passkeys: the list, registration from a one-time link (the first trusted on first use, every
//! later one approved with a registered passkey), and keeping what was registered.

use super::*;

impl WebApp {
    pub(super) fn registry(
        &self,
    ) -> Result<(Vec<crate::store::PasskeyRow>, PasskeyRegistry), Response> {
        let rows = self.store.passkeys().map_err(|e| Self::store_failed(&e))?;
        let records: Vec<_> = rows.iter().map(|r| r.passkey.clone()).collect();
        let registry = PasskeyRegistry::new(&records)
            .map_err(|e| Response::text(500, format!("a stored passkey is unusable: {e}")))?;
        Ok((rows, registry))
    }

    pub(super) fn passkeys_page(&self) -> Result<Response, Response> {
        let (rows, _) = self.registry()?;
        html::passkeys(&rows, &self.policy)
    }

    pub(super) fn register_page(&self, query: &str) -> Result<Response, Response> {
        let Some(token) = query_param(query, "token") else {
            return Ok(Response::text(
                400,
                "open the link `cajaguard passkey add --config FILE --name NAME` printed",
            ));
        };
        let now = self.now();
        let name = match self
            .store
            .registration_link(&token, now)
            .map_err(|e| Self::store_failed(&e))?
        {
            LinkState::Open { name } => name,
            LinkState::Closed => {
                return Ok(Response::text(
                    410,
                    "this registration link is unknown, used or expired (links last 5 minutes): run `cajaguard passkey add` again",
                ));
            }
        };
        let first = self
            .store
            .passkey_first_use()
            .map_err(|e| Self::store_failed(&e))?;
        let (rows, _) = self.registry()?;
        let challenge = random::<32>()?;
        let user_id = random::<16>()?;
        // Later passkeys are approved by a registered one; with none left (all removed) nothing
        // can approve, and trust on first use does not come back.
        let nonce = if first || !rows.is_empty() {
            Some(self.issue(Ceremony::Register {
                link_token: token,
                name: name.clone(),
                challenge,
            })?)
        } else {
            None
        };
        html::register(&html::RegisterView {
            name: &name,
            nonce: nonce.as_deref(),
            challenge: &challenge,
            user_id: &user_id,
            rp_id: self.rp.rp_id(),
            existing: &rows,
            first,
        })
    }

    /// POST `/passkeys/register` `{"nonce", "credential"}`.
    pub(super) fn register(&self, body: &[u8]) -> Response {
        let (nonce, ceremony, credential) = match self.posted(body) {
            Ok(posted) => posted,
            Err(refused) => return refused,
        };
        let Ceremony::Register {
            link_token,
            name,
            challenge,
        } = ceremony
        else {
            return Response::refused(409, "the form is for another action: reload the page");
        };
        let response = match RegistrationResponse::from_json(&credential.to_string()) {
            Ok(r) => r,
            Err(e) => return Response::refused(400, e.to_string()),
        };
        let record = match passkey::verify_registration(&self.rp, &challenge, &response, &name) {
            Ok(r) => r,
            Err(why) => return Response::refused(403, format!("not registered: {why}")),
        };
        if let Err(refused) = self.use_up(&nonce) {
            return refused;
        }
        let now = self.now();
        match self.store.passkey_first_use() {
            Ok(true) => self.keep_passkey(&link_token, &record, None, now),
            Ok(false) => {
                // Not trusted on first use: a registered passkey must approve this very one.
                let terms = match random::<16>() {
                    Ok(nonce) => PasskeyEnrolTerms::new(&record, now, nonce),
                    Err(r) => return r,
                };
                let challenge = terms.challenge_b64url();
                let nonce = match self.issue(Ceremony::Enrol {
                    link_token,
                    record,
                    terms,
                }) {
                    Ok(nonce) => nonce,
                    Err(r) => return r,
                };
                Response {
                    status: 200,
                    content_type: "application/json",
                    body: json!({
                        "ok": false,
                        "message": "now approve the new passkey with one already registered",
                        "approve": { "nonce": nonce, "challenge": challenge, "post": "/passkeys/enrol" },
                    })
                    .to_string(),
                    csp_nonce: String::new(),
                }
            }
            Err(e) => Self::store_failed(&e),
        }
    }

    /// POST `/passkeys/enrol` `{"nonce", "credential"}`: a registered passkey approves the new one.
    pub(super) fn enrol(&self, body: &[u8]) -> Response {
        let (nonce, ceremony, credential) = match self.posted(body) {
            Ok(posted) => posted,
            Err(refused) => return refused,
        };
        let Ceremony::Enrol {
            link_token,
            record,
            terms,
        } = ceremony
        else {
            return Response::refused(409, "the form is for another action: reload the page");
        };
        let assertion = match assertion_of(&credential) {
            Ok(assertion) => assertion,
            Err(refused) => return refused,
        };
        let (rows, registry) = match self.registry() {
            Ok(found) => found,
            Err(r) => return r,
        };
        let now = self.now();
        let verified = match passkey::verify_passkey_enrolment(
            &terms, &assertion, &registry, &self.rp, &record, now,
        ) {
            Ok(v) => v,
            Err(why) => return Response::refused(403, format!("not approved: {why}")),
        };
        if let Err(refused) = self.use_up(&nonce) {
            return refused;
        }
        let Some(from) = rows
            .iter()
            .find(|r| r.passkey.credential_id == verified.approver())
            .map(|r| r.passkey.sign_count)
        else {
            return Response::refused(403, "the approving passkey is no longer registered");
        };
        let counter = cajaguard_core::effect::PasskeyCounter {
            credential_id: verified.approver().to_vec(),
            from,
            to: verified.sign_count(),
        };
        self.keep_passkey(&link_token, &record, Some(&counter), now)
    }

    /// Registers `record` through the link (audited), trusted on first use or approved by the
    /// passkey whose counter moves as `approver` says.
    pub(super) fn keep_passkey(
        &self,
        link_token: &str,
        record: &passkey::RegisteredPasskey,
        approver: Option<&cajaguard_core::effect::PasskeyCounter>,
        now: OffsetDateTime,
    ) -> Response {
        let how = match approver {
            None => "trusted on first use".to_owned(),
            Some(c) => format!("approved by passkey {}", hex::encode(&c.credential_id)),
        };
        let audit = AuditRecord {
            note: Some(format!(
                "passkey {} ({}, {:?}), {how}",
                hex::encode(&record.credential_id),
                display::audit(&record.name),
                record.algorithm
            )),
            ..AuditRecord::new(now, "web")
        };
        match self
            .store
            .register_passkey(link_token, record, approver, now, &audit)
        {
            Ok(()) => Response::outcome(
                200,
                true,
                format!(
                    "registered passkey \"{}\": it can approve payments now",
                    display::terminal(&record.name)
                ),
            ),
            Err(StoreError::PasskeyRefused(why)) => Response::refused(409, why),
            Err(e) => Self::store_failed(&e),
        }
    }
}

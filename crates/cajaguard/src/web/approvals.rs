//! The pending requests and one request's page: the basket as recorded and as the shop re-reads
//! it, approved or denied with a passkey.

use super::*;

impl WebApp {
    pub(super) fn pending_page(&self) -> Result<Response, Response> {
        // What `cajaguard pending` lists: requests without a valid decision of a counted kind.
        let waiting = self
            .store
            .awaiting_decision(
                &self.counted_keys(),
                self.policy.approvals.passkey_relying_party().as_ref(),
                self.now(),
                self.policy.approvals.max_ttl,
                None,
            )
            .map_err(|e| Self::store_failed(&e))?;
        html::pending(&waiting, &self.policy)
    }

    /// The approver keys whose approvals count: none under `require: "passkey"`.
    pub(super) fn counted_keys(&self) -> cajaguard_core::approval::TrustedKeys {
        crate::keys::counted_trusted_keys(&self.policy).unwrap_or_default()
    }

    /// Whether `row` carries a valid decision already (an approval not used yet, or a deny), of
    /// a kind the gate counts.
    pub(super) fn decided(&self, row: &PendingRow) -> Result<bool, Response> {
        let status = self
            .store
            .approval_status(
                &row.request.request_id,
                &self.counted_keys(),
                self.policy.approvals.passkey_relying_party().as_ref(),
                self.now(),
                self.policy.approvals.max_ttl,
            )
            .map_err(|e| Self::store_failed(&e))?;
        Ok(matches!(
            status,
            crate::store::ApprovalStatus::Approved | crate::store::ApprovalStatus::Denied
        ))
    }

    pub(super) fn request_page(&self, id: &str) -> Result<Response, Response> {
        let Ok(id) = RequestId::parse(id) else {
            return Ok(Response::text(404, "not a request id (cg-<hex>)"));
        };
        let Some(pending) = self
            .store
            .pending_request(&id)
            .map_err(|e| Self::store_failed(&e))?
        else {
            return Ok(Response::text(
                404,
                "no such request (a newer block on the same checkout replaces one): see the list of pending requests",
            ));
        };
        let reread = self.read_back(&id, &pending);
        let now = self.now();
        let differs = match &reread {
            Ok(quote) => {
                quote.status != "ready_for_complete"
                    || BasketDigest::of_request(
                        quote,
                        &pending.request.instruments,
                        pending.request.agent.as_ref(),
                    ) != pending.request.digest
            }
            Err(_) => true,
        };
        let (rows, _) = self.registry()?;
        let decided = self.decided(&pending)?;
        // Approve is offered only for the basket the gate recorded, as the shop still has it;
        // deny is always offered (refusing fails closed).
        let mut ceremonies = Vec::new();
        let mut forms_full = false;
        let decisions: &[Decision] = if differs || decided {
            &[Decision::Deny]
        } else {
            &[Decision::Approve, Decision::Deny]
        };
        if !rows.is_empty() && !decided && self.policy.approvals.require.accepts_passkey() {
            for decision in decisions {
                // The request id names the basket, so the form open for it still stands for
                // what this page shows.
                let issued = self.issue_for(Purpose::Decide(id.clone(), *decision), || {
                    Ok(Ceremony::Decide {
                        request_id: id.clone(),
                        terms: self.terms(&pending, *decision, now)?,
                    })
                })?;
                match issued {
                    Some((nonce, challenge)) => ceremonies.push((*decision, nonce, challenge)),
                    None => forms_full = true,
                }
            }
        }
        html::request(&html::RequestView {
            policy: &self.policy,
            pending: &pending,
            reread: &reread,
            differs,
            decided,
            ceremonies: &ceremonies,
            forms_full,
            passkeys: &rows,
            rp_id: self.rp.rp_id(),
        })
    }

    pub(super) fn terms(
        &self,
        pending: &PendingRow,
        decision: Decision,
        now: OffsetDateTime,
    ) -> Result<PasskeyApprovalTerms, Response> {
        let request = &pending.request;
        let terms = ApprovalTerms {
            request_id: request.request_id.clone(),
            digest: request.digest,
            decision,
            merchant: request.merchant.clone(),
            checkout_id: request.checkout_id.clone(),
            currency: request.currency.clone(),
            total: request.total,
            issued_at: now,
            ttl: APPROVAL_TTL.min(self.policy.approvals.max_ttl),
            nonce: random::<16>()?,
            note: "approved on the CajaGuard page".to_owned(),
            checkpoint: None,
        };
        // The human's approval commits to the log as it is now (SPEC §8): a fresh checkpoint.
        let checkpoint = self
            .store
            .checkpoint(now)
            .map_err(|e| WebApp::store_failed(&e))?;
        Ok(PasskeyApprovalTerms::new(&terms, Some(checkpoint)))
    }

    /// POST `/requests/<id>/decide` `{"nonce", "credential"}`: the assertion over the terms the
    /// nonce names is verified by the core and the document filed; the gate uses it once.
    pub(super) fn decide(&self, id: &str, body: &[u8]) -> Response {
        if !self.policy.approvals.require.accepts_passkey() {
            return Response::refused(
                409,
                "approvals.require is \"key\": the gate counts no passkey approval; set it to \"passkey\" or \"any\"",
            );
        }
        let (nonce, ceremony, credential) = match self.posted(body) {
            Ok(posted) => posted,
            Err(refused) => return refused,
        };
        let Ceremony::Decide { request_id, terms } = ceremony else {
            return Response::refused(409, "the form is for another action: reload the page");
        };
        if request_id.as_str() != id {
            return Response::refused(409, "the form is for another request: reload the page");
        }
        let assertion = match assertion_of(&credential) {
            Ok(assertion) => assertion,
            Err(refused) => return refused,
        };
        let document = PasskeyApproval { terms, assertion };
        let registry = match self.registry() {
            Ok((_, registry)) => registry,
            Err(r) => return r,
        };
        let Some(digest) = BasketDigest::from_hex(&document.terms.digest) else {
            return Response::refused(500, "the issued terms hold no digest");
        };
        let now = self.now();
        if let Err(why) = passkey::verify_passkey_approval(
            &document,
            &registry,
            &self.rp,
            &digest,
            now,
            self.policy.approvals.max_ttl,
        ) {
            return Response::refused(403, format!("not accepted: {why}"));
        }
        if let Err(refused) = self.use_up(&nonce) {
            return refused;
        }
        if let Err(e) = self.store.file_passkey_approval(&document, now) {
            return Self::store_failed(&e);
        }
        let what = if document.terms.decision == "approve" {
            "approved: the agent's next attempt pays it, once"
        } else {
            "denied: the agent's next attempt is refused"
        };
        Response::outcome(200, true, format!("{} {what}", document.terms.request_id))
    }
}

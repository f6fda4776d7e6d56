//! The status view (each currency's window, recent decisions, the freeze) and unfreezing by
//! passkey.

use super::*;

impl WebApp {
    pub(super) fn status_page(&self) -> Result<Response, Response> {
        let now = self.now();
        let doc = crate::status::document(&self.policy, &self.store, now)
            .map_err(|e| Self::store_failed(&e))?;
        let frozen = self.store.frozen().map_err(|e| Self::store_failed(&e))?;
        let (rows, _) = self.registry()?;
        // Unfreezing is offered with a passkey whatever approvals.require says: a passkey is the
        // human at the machine, as the approver key on the terminal is (SPEC §7).
        // No form when too many are open: the page still shows the freeze and the command.
        let ceremony = match frozen {
            Some(frozen) if !rows.is_empty() => {
                // By the freeze's stamp: a form open for an earlier freeze lifts nothing.
                self.issue_for(Purpose::Unfreeze(frozen.stamp()), || {
                    let terms = PasskeyUnfreezeTerms::new(
                        &frozen,
                        now,
                        random::<16>()?,
                        "unfrozen on the CajaGuard page",
                        None,
                    );
                    Ok(Ceremony::Unfreeze { frozen, terms })
                })?
            }
            _ => None,
        };
        let recent = self
            .store
            .recent_decisions(RECENT_DECISIONS)
            .map_err(|e| Self::store_failed(&e))?;
        html::status(&html::StatusView {
            doc: &doc,
            policy: &self.policy,
            unfreeze: ceremony.as_ref(),
            passkeys: &rows,
            rp_id: self.rp.rp_id(),
            recent: &recent,
        })
    }

    /// POST `/unfreeze` `{"nonce", "credential"}`: lifts the very freeze the page showed.
    pub(super) fn unfreeze(&self, body: &[u8]) -> Response {
        let (nonce, ceremony, credential) = match self.posted(body) {
            Ok(posted) => posted,
            Err(refused) => return refused,
        };
        let Ceremony::Unfreeze { frozen, terms } = ceremony else {
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
        let document = PasskeyUnfreeze { terms, assertion };
        let now = self.now();
        let verified =
            match passkey::verify_passkey_unfreeze(&document, &registry, &self.rp, &frozen, now) {
                Ok(v) => v,
                Err(why) => return Response::refused(403, format!("not accepted: {why}")),
            };
        if let Err(refused) = self.use_up(&nonce) {
            return refused;
        }
        let Some(from) = rows
            .iter()
            .find(|r| r.passkey.credential_id == verified.credential_id())
            .map(|r| r.passkey.sign_count)
        else {
            return Response::refused(403, "the passkey is no longer registered");
        };
        let audit = AuditRecord {
            note: Some(format!("passkey {}", hex::encode(verified.credential_id()))),
            ..AuditRecord::new(now, "web")
        };
        match self
            .store
            .unfreeze_by_passkey(&frozen, &verified, from, now, &audit)
        {
            Ok(()) => Response::outcome(200, true, "payments are no longer frozen"),
            Err(StoreError::NotThatFreeze) => Response::refused(
                409,
                "payments were unfrozen or frozen again meanwhile; nothing changed: reload the page",
            ),
            Err(e) => Self::store_failed(&e),
        }
    }
}

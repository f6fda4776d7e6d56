//! `cajaguard web`: the local approval page (SPEC §6 "Approvals an agent cannot make").
//!
//! The page is where a human approves or denies a blocked payment with a passkey, registers
//! passkeys and looks at the spend. Everything here is written for a browser on the same machine
//! and against anything else on it that can send HTTP requests (an agent with a shell, another
//! site's page in that browser):
//!
//! - **Host.** A request's `Host` must be exactly `localhost:<port>` of the configured origin, or
//!   it is refused (421) before anything else: a DNS-rebinding page on `evil.example` that resolves
//!   to 127.0.0.1 sends its own host name.
//! - **Origin.** Every POST must carry `Origin: http://localhost:<port>` (403 otherwise), and the
//!   page sends no CORS headers, so another site's script can neither post with our origin nor
//!   read an answer.
//! - **A fresh server-issued nonce and the passkey itself.** Each ceremony (approve, deny,
//!   register) is issued by the server when it renders the page: a random, single-use, 5-minute
//!   nonce naming terms the server keeps. A POST names the nonce and carries the WebAuthn
//!   response; the terms come from the server's memory, never from the request, and nothing is
//!   filed unless the pure core verifies the passkey's signature over them. So a request forged
//!   without the human's authenticator (and user verification) changes nothing, even one that
//!   gets past the header checks (a local process can write any header).
//! - **What is shown.** Shop and agent text goes through `display::terminal` (control, invisible
//!   and ANSI characters removed) and is HTML-escaped; the Content-Security-Policy allows only the
//!   page's own inline script (by a per-response nonce) and same-origin requests: nothing is
//!   loaded from the network.
//!
//! The routing and the rules are plain functions over [`Request`] and [`Response`] ([`WebApp::
//! handle`]), so tests drive them without a socket; `server.rs` is the HTTP shell (axum).

mod html;
mod server;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cajaguard_core::approval::{ApprovalTerms, BasketDigest, Decision, RequestId};
use cajaguard_core::display;
use cajaguard_core::freeze::Frozen;
use cajaguard_core::money::{self, Currency};
use cajaguard_core::passkey::{
    self, BrowserAssertion, PasskeyApproval, PasskeyApprovalTerms, PasskeyEnrolTerms,
    PasskeyRegistry, PasskeyUnfreeze, PasskeyUnfreezeTerms, RegistrationResponse, RelyingParty,
};
use cajaguard_core::policy::{Policy, WebPolicy};
use cajaguard_core::quote::Quote;
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::store::{AuditRecord, LinkState, PendingRow, Store, StoreError};

pub use server::serve;

/// How long a ceremony issued with a page stays usable.
const CEREMONY_TTL: Duration = Duration::from_secs(5 * 60);
/// At most this many ceremonies are outstanding; past it the oldest are dropped. Rendering pages
/// in a loop must not grow the server's memory without bound.
const MAX_CEREMONIES: usize = 256;
/// A POST body larger than this is not a WebAuthn response.
pub const MAX_BODY: usize = 64 * 1024;
/// How many of the latest decisions the status view lists.
const RECENT_DECISIONS: i64 = 12;
/// How long a passkey approval made on the page stays valid (at most `approvals.max_ttl`).
const APPROVAL_TTL: Duration = Duration::from_secs(15 * 60);

/// One HTTP request as the handlers see it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The query string without `?` (empty if none).
    pub query: String,
    pub host: Option<String>,
    pub origin: Option<String>,
    pub body: Vec<u8>,
}

/// One HTTP response. [`Response::headers`] adds the security headers every answer carries.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// The nonce the page's inline script and style carry (CSP `'nonce-…'`).
    pub csp_nonce: String,
}

impl Response {
    fn html(status: u16, body: String, csp_nonce: String) -> Response {
        Response {
            status,
            content_type: "text/html; charset=utf-8",
            body,
            csp_nonce,
        }
    }
    fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
            csp_nonce: String::new(),
        }
    }
    /// The answer to a ceremony's POST: `{"ok", "message"}`.
    fn outcome(status: u16, ok: bool, message: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "application/json",
            body: json!({ "ok": ok, "message": message.into() }).to_string(),
            csp_nonce: String::new(),
        }
    }
    fn refused(status: u16, message: impl Into<String>) -> Response {
        Response::outcome(status, false, message)
    }

    /// The headers every answer carries: no CORS header ever; a CSP that loads nothing from
    /// anywhere (scripts and styles only inline, by nonce; requests only to this origin); no
    /// framing, sniffing, caching or referrer.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let nonce = if self.csp_nonce.is_empty() {
            "'none'".to_owned()
        } else {
            format!("'nonce-{}'", self.csp_nonce)
        };
        vec![
            ("Content-Type", self.content_type.to_owned()),
            (
                "Content-Security-Policy",
                format!(
                    "default-src 'none'; script-src {nonce}; style-src {nonce}; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
                ),
            ),
            ("X-Frame-Options", "DENY".to_owned()),
            ("X-Content-Type-Options", "nosniff".to_owned()),
            ("Referrer-Policy", "no-referrer".to_owned()),
            ("Cache-Control", "no-store".to_owned()),
            ("Cross-Origin-Opener-Policy", "same-origin".to_owned()),
            ("Cross-Origin-Resource-Policy", "same-origin".to_owned()),
        ]
    }
}

/// What a ceremony's nonce stands for: the terms or challenge the server issued with the page.
#[derive(Debug, Clone)]
enum Ceremony {
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

struct Issued {
    ceremony: Ceremony,
    expires: OffsetDateTime,
    /// Issue order, to drop the oldest past [`MAX_CEREMONIES`].
    serial: u64,
}

/// Reads a pending request's checkout back from the shop, as `cajaguard approve` does.
pub type Reread = dyn Fn(&Policy, &PendingRow) -> Result<Quote, String> + Send + Sync;
/// The clock and the randomness, passed in so tests can fix them.
pub type Clock = dyn Fn() -> OffsetDateTime + Send + Sync;

/// The approval page's state: the policy, the store, the ceremonies issued and not yet used.
pub struct WebApp {
    policy: Policy,
    web: WebPolicy,
    rp: RelyingParty,
    store: Arc<Store>,
    reread: Box<Reread>,
    clock: Box<Clock>,
    ceremonies: Mutex<(u64, HashMap<String, Issued>)>,
}

/// Random bytes, or a refusal: without randomness no ceremony can be issued (fail closed).
fn random<const N: usize>() -> Result<[u8; N], Response> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|_| Response::text(500, "no randomness available; nothing was issued"))?;
    Ok(bytes)
}

impl WebApp {
    /// The page for `policy`, which must configure `approvals.web`.
    pub fn new(
        policy: Policy,
        store: Arc<Store>,
        reread: Box<Reread>,
        clock: Box<Clock>,
    ) -> Result<WebApp, String> {
        let Some(web) = policy.approvals.web else {
            return Err(format!(
                "{} has no approvals.web: add \"web\": {{\"listen\": \"127.0.0.1:8377\"}} under approvals",
                policy.source.display()
            ));
        };
        Ok(WebApp {
            rp: web.relying_party(),
            web,
            policy,
            store,
            reread,
            clock,
            ceremonies: Mutex::new((0, HashMap::new())),
        })
    }

    /// The shop read back through the configured downstream, as `cajaguard approve` does.
    pub fn shop_reread() -> Box<Reread> {
        Box::new(|policy, pending| {
            crate::cli::approve::read_back(policy, pending).map_err(|f| f.message)
        })
    }

    pub fn web(&self) -> &WebPolicy {
        &self.web
    }

    /// Routes one request, after the Host and Origin checks.
    pub fn handle(&self, req: &Request) -> Response {
        if req.host.as_deref() != Some(self.web.host().as_str()) {
            return Response::text(
                421,
                format!(
                    "this page answers only at {} (the Host header differs); open that address",
                    self.web.origin()
                ),
            );
        }
        let post = req.method == "POST";
        if post && req.origin.as_deref() != Some(self.web.origin().as_str()) {
            return Response::text(
                403,
                "refused: a change must come from this page itself (the Origin header differs)",
            );
        }
        let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        let result = match (req.method.as_str(), segments.as_slice()) {
            ("GET", [""]) => self.pending_page(),
            ("GET", ["requests", id]) => self.request_page(id),
            ("POST", ["requests", id, "decide"]) => Ok(self.decide(id, &req.body)),
            ("GET", ["passkeys"]) => self.passkeys_page(),
            ("GET", ["passkeys", "register"]) => self.register_page(&req.query),
            ("POST", ["passkeys", "register"]) => Ok(self.register(&req.body)),
            ("POST", ["passkeys", "enrol"]) => Ok(self.enrol(&req.body)),
            ("GET", ["status"]) => self.status_page(),
            ("POST", ["unfreeze"]) => Ok(self.unfreeze(&req.body)),
            (_, _) => Ok(Response::text(404, "no such page")),
        };
        result.unwrap_or_else(|e| e)
    }

    fn now(&self) -> OffsetDateTime {
        (self.clock)()
    }

    fn store_failed(e: &StoreError) -> Response {
        tracing::warn!(error = %e, "the approval page could not use the store");
        Response::text(503, format!("the store failed: {e}"))
    }

    /// Keeps `ceremony` under a fresh nonce, dropping expired ones and the oldest past the cap.
    fn issue(&self, ceremony: Ceremony) -> Result<String, Response> {
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
    fn take(&self, nonce: &str) -> Option<Ceremony> {
        let now = self.now();
        let mut guard = self.ceremonies.lock().unwrap_or_else(|p| p.into_inner());
        let issued = guard.1.remove(nonce)?;
        (issued.expires > now).then_some(issued.ceremony)
    }

    fn pending_page(&self) -> Result<Response, Response> {
        // What `cajaguard pending` lists: requests without a valid decision of a counted kind.
        let waiting = self
            .store
            .awaiting_decision(
                &self.counted_keys(),
                self.policy.approvals.passkey_relying_party().as_ref(),
                self.now(),
                self.policy.approvals.max_ttl,
            )
            .map_err(|e| Self::store_failed(&e))?;
        html::pending(&waiting, &self.policy)
    }

    /// The approver keys whose approvals count: none under `require: "passkey"`.
    fn counted_keys(&self) -> cajaguard_core::approval::TrustedKeys {
        if self.policy.approvals.require.accepts_key_file() {
            crate::keys::load_trusted_keys(&self.policy.approvals.trusted_keys).unwrap_or_default()
        } else {
            cajaguard_core::approval::TrustedKeys::default()
        }
    }

    /// Whether `row` carries a valid decision already (an approval not used yet, or a deny), of
    /// a kind the gate counts.
    fn decided(&self, row: &PendingRow) -> Result<bool, Response> {
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

    fn registry(&self) -> Result<(Vec<crate::store::PasskeyRow>, PasskeyRegistry), Response> {
        let rows = self.store.passkeys().map_err(|e| Self::store_failed(&e))?;
        let records: Vec<_> = rows.iter().map(|r| r.passkey.clone()).collect();
        let registry = PasskeyRegistry::new(&records)
            .map_err(|e| Response::text(500, format!("a stored passkey is unusable: {e}")))?;
        Ok((rows, registry))
    }

    fn request_page(&self, id: &str) -> Result<Response, Response> {
        let Ok(id) = RequestId::parse(id) else {
            return Ok(Response::text(404, "not a request id (cg-<hex>)"));
        };
        let Some(pending) = self
            .store
            .pending_request(&id)
            .map_err(|e| Self::store_failed(&e))?
        else {
            return Ok(Response::text(404, "no such request"));
        };
        let reread = (self.reread)(&self.policy, &pending);
        let now = self.now();
        let differs = match &reread {
            Ok(quote) => {
                quote.status != "ready_for_complete"
                    || BasketDigest::of(quote, &pending.request.instruments)
                        != pending.request.digest
            }
            Err(_) => true,
        };
        let (rows, _) = self.registry()?;
        let decided = self.decided(&pending)?;
        // Approve is offered only for the basket the gate recorded, as the shop still has it;
        // deny is always offered (refusing fails closed).
        let mut ceremonies = Vec::new();
        let decisions: &[Decision] = if differs || decided {
            &[Decision::Deny]
        } else {
            &[Decision::Approve, Decision::Deny]
        };
        if !rows.is_empty() && !decided && self.policy.approvals.require.accepts_passkey() {
            for decision in decisions {
                let terms = self.terms(&pending, *decision, now)?;
                let challenge = terms.challenge_b64url();
                let nonce = self.issue(Ceremony::Decide {
                    request_id: id.clone(),
                    terms,
                })?;
                ceremonies.push((*decision, nonce, challenge));
            }
        }
        html::request(&html::RequestView {
            policy: &self.policy,
            pending: &pending,
            reread: &reread,
            differs,
            decided,
            ceremonies: &ceremonies,
            passkeys: &rows,
            rp_id: self.rp.rp_id(),
        })
    }

    fn terms(
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
        };
        Ok(PasskeyApprovalTerms::new(&terms, None))
    }

    /// POST `/requests/<id>/decide` `{"nonce", "credential"}`: the assertion over the terms the
    /// nonce names is verified by the core and the document filed; the gate uses it once.
    fn decide(&self, id: &str, body: &[u8]) -> Response {
        if !self.policy.approvals.require.accepts_passkey() {
            return Response::refused(
                409,
                "approvals.require is \"key\": the gate counts no passkey approval; set it to \"passkey\" or \"any\"",
            );
        }
        let (ceremony, credential) = match self.posted(body) {
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

    fn passkeys_page(&self) -> Result<Response, Response> {
        let (rows, _) = self.registry()?;
        html::passkeys(&rows, &self.policy)
    }

    fn register_page(&self, query: &str) -> Result<Response, Response> {
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
    fn register(&self, body: &[u8]) -> Response {
        let (ceremony, credential) = match self.posted(body) {
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
    fn enrol(&self, body: &[u8]) -> Response {
        let (ceremony, credential) = match self.posted(body) {
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
    fn keep_passkey(
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

    fn status_page(&self) -> Result<Response, Response> {
        let now = self.now();
        let doc = crate::status::document(&self.policy, &self.store, now)
            .map_err(|e| Self::store_failed(&e))?;
        let frozen = self.store.frozen().map_err(|e| Self::store_failed(&e))?;
        let (rows, _) = self.registry()?;
        // Unfreezing is offered with a passkey whatever approvals.require says: a passkey is the
        // human at the machine, as the approver key on the terminal is (SPEC §7).
        let ceremony = match frozen {
            Some(frozen) if !rows.is_empty() => {
                let terms = PasskeyUnfreezeTerms::new(
                    &frozen,
                    now,
                    random::<16>()?,
                    "unfrozen on the CajaGuard page",
                    None,
                );
                let challenge = terms.challenge_b64url();
                let nonce = self.issue(Ceremony::Unfreeze { frozen, terms })?;
                Some((nonce, challenge))
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
    fn unfreeze(&self, body: &[u8]) -> Response {
        let (ceremony, credential) = match self.posted(body) {
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

impl WebApp {
    /// The ceremony a POST names, taken (once, whatever follows), and its WebAuthn response.
    fn posted(&self, body: &[u8]) -> Result<(Ceremony, Value), Response> {
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
fn assertion_of(credential: &Value) -> Result<passkey::PasskeyAssertion, Response> {
    BrowserAssertion::from_json(&credential.to_string())
        .map(BrowserAssertion::into_assertion)
        .map_err(|e| Response::refused(400, e.to_string()))
}

/// `{"nonce": "<hex>", "credential": {...}}`, or `None`.
fn ceremony_body(body: &[u8]) -> Option<(String, Value)> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let nonce = value.get("nonce")?.as_str()?.to_owned();
    let credential = value.get("credential")?.clone();
    credential.is_object().then_some((nonce, credential))
}

/// The value of `name` in a query string of `a=b&c=d` (no percent-decoding: the values this
/// page reads are hex).
fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name && !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric()))
            .then(|| v.to_owned())
    })
}

/// An amount in major units with its currency, or the minor units when the code is unknown.
fn amount(minor: i64, currency: &str) -> String {
    match Currency::from_code(currency) {
        Ok(c) => money::display(minor, c),
        Err(_) => format!("{minor} (minor units of {})", display::terminal(currency)),
    }
}

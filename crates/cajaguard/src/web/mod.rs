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
//! - **A server-issued nonce and the passkey itself.** Each ceremony (approve, deny,
//!   register) is issued by the server when it renders the page: a random, single-use, 5-minute
//!   nonce naming terms the server keeps. A POST names the nonce and carries the WebAuthn
//!   response; the terms come from the server's memory, never from the request, and nothing is
//!   filed unless the pure core verifies the passkey's signature over them. So a request forged
//!   without the human's authenticator (and user verification) changes nothing, even one that
//!   gets past the header checks (a local process can write any header). Loading a request's
//!   page or the status page again shows the form already open for the same purpose (while it
//!   has half its life left), and a form is used up only by an answer that verifies: a process
//!   loading pages in a loop, or posting forged answers, cannot take the human's open form.
//! - **What is shown.** Shop and agent text goes through `display::terminal` (control, invisible
//!   and ANSI characters removed) and is HTML-escaped; the Content-Security-Policy allows only the
//!   page's own inline script (by a per-response nonce) and same-origin requests: nothing is
//!   loaded from the network.
//!
//! The routing and the rules are plain functions over [`Request`] and [`Response`] ([`WebApp::
//! handle`]), so tests drive them without a socket; `server.rs` is the HTTP shell (axum).
//!
//! Layout: `mod.rs` routes ([`WebApp::handle`]); `http` is the request and response with the
//! headers every answer carries; `ceremony` the server-issued, single-use nonces and what they
//! stand for; `approvals`, `passkeys` and `status` the pages and their POSTs; `html` renders.

mod approvals;
mod ceremony;
mod html;
mod http;
mod passkeys;
mod server;
mod status;

use ceremony::{Ceremony, Issued, Purpose, assertion_of, random};
pub use http::{Fetch, Request, Response};

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

pub use server::{Limits, serve, serve_with};

/// How long a ceremony issued with a page stays usable.
const CEREMONY_TTL: Duration = Duration::from_secs(5 * 60);
/// At most this many ceremonies are outstanding; past it no new one is issued (none is dropped to
/// make room: that was how a page loaded in a loop took the human's open form). Rendering pages
/// in a loop must not grow the server's memory without bound.
const MAX_CEREMONIES: usize = 256;
/// A POST body larger than this is not a WebAuthn response.
pub const MAX_BODY: usize = 64 * 1024;
/// How many of the latest decisions the status view lists.
const RECENT_DECISIONS: i64 = 12;
/// How long a passkey approval made on the page stays valid (at most `approvals.max_ttl`).
const APPROVAL_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a request page shows its checkout's read-back again without asking the shop.
const REREAD_FRESH_FOR: time::Duration = time::Duration::seconds(2);
/// The most read-backs kept at once (one per request shown in the last [`REREAD_FRESH_FOR`]).
const MAX_REREADS_KEPT: usize = 64;
/// A read-back still under way after this long is taken for lost (its thread panicked, say).
const READING_AT_MOST: time::Duration = time::Duration::minutes(5);

/// Reads a pending request's checkout back from the shop, as `cajaguard approve` does.
pub type Reread = dyn Fn(&Policy, &PendingRow) -> Result<Quote, String> + Send + Sync;
/// A request's checkout as read back and when, or `None` while it is being read (since when).
type ReadBack = (OffsetDateTime, Option<Result<Quote, String>>);
/// The clock and the randomness, passed in so tests can fix them.
pub type Clock = dyn Fn() -> OffsetDateTime + Send + Sync;

/// The approval page's state: the policy, the store, the ceremonies issued and not yet used.
pub struct WebApp {
    policy: Policy,
    web: WebPolicy,
    rp: RelyingParty,
    store: Arc<Store>,
    reread: Box<Reread>,
    /// The latest read-back of each request shown, with when it was made (see
    /// [`WebApp::read_back`]).
    read_backs: Mutex<HashMap<RequestId, ReadBack>>,
    clock: Box<Clock>,
    ceremonies: Mutex<HashMap<String, Issued>>,
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
            read_backs: Mutex::new(HashMap::new()),
            clock,
            ceremonies: Mutex::new(HashMap::new()),
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
        if let Some(refused) = self.refusal(req) {
            return refused;
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

    /// The refusal of a request whose headers the page does not take (`Host`, `Fetch Metadata`,
    /// `Origin`), or `None`: a check of the headers alone, so the HTTP shell makes it before it
    /// reads a body.
    pub fn refusal(&self, req: &Request) -> Option<Response> {
        if req.host.as_deref() != Some(self.web.host().as_str()) {
            return Some(Response::text(
                421,
                format!(
                    "this page answers only at {} (the Host header differs); open that address",
                    self.web.origin()
                ),
            ));
        }
        // Reading a request's page reads the shop and writes an audit checkpoint, and the status
        // page issues an unfreeze ceremony: another site's page must not make those happen (260
        // image requests used up the ceremonies, so the human's open form failed).
        if req.fetch.from_another_site() {
            return Some(Response::text(
                403,
                "refused: another site's page made this request; open this page yourself",
            ));
        }
        let post = req.method == "POST";
        if post && req.origin.as_deref() != Some(self.web.origin().as_str()) {
            return Some(Response::text(
                403,
                "refused: a change must come from this page itself (the Origin header differs)",
            ));
        }
        None
    }

    fn now(&self) -> OffsetDateTime {
        (self.clock)()
    }

    /// `pending`'s checkout as the shop has it, read back at most once every
    /// [`REREAD_FRESH_FOR`] per request, one read-back of a request at a time, at most
    /// [`MAX_REREADS_KEPT`] requests' at once. A read-back is a call on the shop's credential,
    /// and for a stdio shop a new shop process: a local process loading the page in a loop would
    /// otherwise make one per load. The page's approve form binds the basket the gate recorded,
    /// and the gate reads the shop again before paying, so a read-back two seconds old misleads
    /// no one. The lock is not held over the shop's call: a shop that hangs holds up only the
    /// loads of that request, which are answered at once meanwhile.
    pub(super) fn read_back(&self, id: &RequestId, pending: &PendingRow) -> Result<Quote, String> {
        {
            let mut kept = self.read_backs.lock().unwrap_or_else(|p| p.into_inner());
            let now = self.now();
            let within = |at: &OffsetDateTime, span| *at <= now && now - *at < span;
            kept.retain(|_, (at, read)| match read {
                Some(_) => within(at, REREAD_FRESH_FOR),
                None => within(at, READING_AT_MOST),
            });
            match kept.get(id) {
                Some((_, Some(read))) => return read.clone(),
                Some((_, None)) => {
                    return Err(
                        "the shop is being asked for this checkout already: reload the page in a moment"
                            .to_owned(),
                    );
                }
                None if kept.len() >= MAX_REREADS_KEPT => {
                    return Err(
                        "the page is reading many checkouts back at once: reload it in a moment"
                            .to_owned(),
                    );
                }
                None => {}
            }
            kept.insert(id.clone(), (now, None));
        }
        let read = (self.reread)(&self.policy, pending);
        let mut kept = self.read_backs.lock().unwrap_or_else(|p| p.into_inner());
        kept.insert(id.clone(), (self.now(), Some(read.clone())));
        read
    }

    pub(super) fn store_failed(e: &StoreError) -> Response {
        tracing::warn!(error = %e, "the approval page could not use the store");
        Response::text(503, format!("the store failed: {e}"))
    }
}

impl WebApp {}

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

//! The shop as an MCP Streamable HTTP endpoint (MCP 2025-06-18 "Streamable HTTP" transport, client
//! side), written here over a blocking HTTP client rather than taken from rmcp: rmcp's client
//! works on typed messages, which is what lost unknown fields in the first place (ARCHITECTURE.md).
//!
//! Every JSON-RPC message is one POST with `Accept: application/json, text/event-stream`. A request
//! is answered with one JSON message, or with an event stream carrying notifications (progress)
//! and then the answer; a notification is answered `202 Accepted`. The `Mcp-Session-Id` the shop
//! gives at `initialize` goes on every later message, with `MCP-Protocol-Version`. The messages
//! themselves are passed on as the shop wrote them, except that line breaks (which JSON allows
//! only as whitespace) become spaces, because the agent side is newline-delimited.
//!
//! [`endpoint`] holds the URL and the token, [`answer`] reads what the shop answered, [`drain`]
//! reads an event stream's end after its answer (so its connection is used again), [`retry`]
//! retries a throttled read; this file holds the session and sends the messages.

mod answer;
mod drain;
mod endpoint;
mod retry;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cajaguard_wire::jsonrpc;

use super::{Link, NotificationSink, Reply, ShopError, lock};

pub use endpoint::Endpoint;

const ACCEPT: &str = "application/json, text/event-stream";
const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// Closing a session is a courtesy; it must not hold up shutting down.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// One MCP session with the endpoint (or none, for a shop that gives no session id).
pub struct HttpLink {
    endpoint: Arc<Endpoint>,
    max_message_bytes: usize,
    notifications: NotificationSink,
    session: Mutex<Option<String>>,
    protocol_version: Mutex<Option<String>>,
    next_id: AtomicU64,
    alive: AtomicBool,
}

/// What one POST came back with, before it is read as MCP.
enum Posted {
    Answer(Reply),
    Accepted,
    /// 429 or 503: the shop (or a gateway in front of it) is busy, and may say when to come back.
    /// A read is retried; a write's outcome is unknown (a gateway may have passed it on).
    Throttled {
        status: u16,
        retry_after: Option<Duration>,
    },
}

impl HttpLink {
    pub fn new(
        endpoint: Arc<Endpoint>,
        max_message_bytes: usize,
        notifications: NotificationSink,
    ) -> HttpLink {
        HttpLink {
            endpoint,
            max_message_bytes,
            notifications,
            session: Mutex::new(None),
            protocol_version: Mutex::new(None),
            next_id: AtomicU64::new(1),
            alive: AtomicBool::new(true),
        }
    }

    /// One POST of one message. `id` is the request's id (`None` for a notification or an answer).
    fn post(&self, body: &str, id: Option<u64>, timeout: Duration) -> Result<Posted, ShopError> {
        let mut request = self
            .endpoint
            .agent
            .post(&self.endpoint.url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", "application/json")
            .header("Accept", ACCEPT);
        let session = lock(&self.session).clone();
        request = self.session_headers(request, session.as_deref());
        for (name, value) in &self.endpoint.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request
            .send(body.as_bytes())
            .map_err(|e| self.transport_error(e, timeout))?;
        self.read_response(response, id, session.is_some(), timeout)
    }

    /// What every message of the session carries: the token, the session id once the shop gave
    /// one, and the protocol version agreed in the handshake.
    fn session_headers<B>(
        &self,
        mut request: ureq::RequestBuilder<B>,
        session: Option<&str>,
    ) -> ureq::RequestBuilder<B> {
        if let Some(value) = self.endpoint.authorization() {
            request = request.header("Authorization", value);
        }
        if let Some(session) = session {
            request = request.header(SESSION_HEADER, session);
        }
        if let Some(version) = lock(&self.protocol_version).clone() {
            request = request.header(VERSION_HEADER, version.as_str());
        }
        request
    }
}

impl Link for HttpLink {
    fn request(
        &self,
        method: &str,
        params: Option<&str>,
        timeout: Duration,
        sent: &mut dyn FnMut(u64),
    ) -> Result<Reply, ShopError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = jsonrpc::request(id, method, params);
        sent(id);
        self.post_request(&body, id, retry::is_read(method, params), timeout)
    }

    fn notify(&self, line: &str) -> Result<(), ShopError> {
        // Notifications get a short bound of their own: nothing waits on their effect.
        self.post(line, None, Duration::from_secs(10)).map(|_| ())
    }

    fn notify_in_background(&self, line: &str) {
        // A POST can take a while; the caller is the agent's reader, which must keep reading.
        let link = HttpLink {
            endpoint: self.endpoint.clone(),
            max_message_bytes: self.max_message_bytes,
            notifications: self.notifications.clone(),
            session: Mutex::new(lock(&self.session).clone()),
            protocol_version: Mutex::new(lock(&self.protocol_version).clone()),
            next_id: AtomicU64::new(0),
            alive: AtomicBool::new(true),
        };
        let line = line.to_owned();
        let spawned = std::thread::Builder::new()
            .name("shop-notify".into())
            .spawn(move || {
                if let Err(e) = link.notify(&line) {
                    tracing::debug!("a notification to the shop failed: {e}");
                }
            });
        if spawned.is_err() {
            tracing::warn!("cannot start a thread to notify the shop; notification dropped");
        }
    }

    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Ends the session politely (`DELETE`), when it is still believed alive.
    fn close(&self) {
        if !self.alive.swap(false, Ordering::AcqRel) {
            return;
        }
        let Some(session) = lock(&self.session).clone() else {
            return;
        };
        let request = self
            .endpoint
            .agent
            .delete(&self.endpoint.url)
            .config()
            .timeout_global(Some(CLOSE_TIMEOUT))
            .build();
        let _ = self.session_headers(request, Some(&session)).call();
    }

    fn set_protocol_version(&self, version: &str) {
        *lock(&self.protocol_version) = Some(version.to_owned());
    }
}

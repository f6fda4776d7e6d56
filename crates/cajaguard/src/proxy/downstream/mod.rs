//! The shop, over either transport: a child process on stdio (`stdio.rs`) or an MCP Streamable
//! HTTP endpoint (`http/`). Connected on demand, handshaken once per connection, reconnected on
//! the next call after it is lost. Every call is bounded by the configured timeout and every
//! message from the shop by the configured size; a shop that breaks either is a failed call,
//! never a hang. Both transports carry the same raw JSON-RPC: nothing is re-encoded on the way.
//! `error.rs` says what each failure means, `handshake.rs` how a connection starts.

mod error;
mod handshake;
mod http;
mod stdio;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cajaguard_core::policy::{Downstream as DownstreamPolicy, DownstreamTransport};
use cajaguard_wire::era::{self, Era};
use cajaguard_wire::jsonrpc;
use serde_json::value::RawValue;

pub use error::ShopError;

/// The shop's answer to one request.
#[derive(Debug)]
pub enum Reply {
    Result(Box<RawValue>),
    Error(Box<RawValue>),
}

/// What the proxy does with messages the shop sends on its own (notifications such as progress).
pub type NotificationSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Called once with the answer to a detached request, on the link's reader thread.
pub type Done = Box<dyn FnOnce(Result<Reply, ShopError>) + Send>;

/// One live connection to the shop: a child process, or an HTTP endpoint with its MCP session.
/// Requests carry ids the link assigns; `sent` is told the id once the request is on its way (for
/// forwarding cancellations).
trait Link: Send + Sync {
    fn request(
        &self,
        method: &str,
        params: Option<&str>,
        timeout: Duration,
        sent: &mut dyn FnMut(u64),
    ) -> Result<Reply, ShopError>;
    /// Sends a request whose answer `done` receives on the link's own reader thread, when the
    /// transport has one; gives `done` back when it cannot (the caller then waits on a thread).
    fn request_detached(
        self: Arc<Self>,
        _method: &str,
        _params: Option<&str>,
        _timeout: Duration,
        _sent: &mut dyn FnMut(u64),
        done: Done,
    ) -> Result<(), Done> {
        Err(done)
    }
    /// Sends a notification and returns once it is delivered (the handshake needs the order).
    fn notify(&self, line: &str) -> Result<(), ShopError>;
    /// Sends a notification without making the caller wait (cancellations from the agent's reader).
    fn notify_in_background(&self, line: &str);
    fn alive(&self) -> bool;
    fn close(&self);
    /// The version agreed in the handshake, for transports that repeat it on every message.
    fn set_protocol_version(&self, _version: &str) {}
}

/// How to reach the shop, resolved from the policy once.
enum Transport {
    Stdio(stdio::Launch),
    Http(Arc<http::Endpoint>),
}

/// The shop's identity after the handshake.
#[derive(Debug, Clone)]
pub struct Handshake {
    pub protocol_version: String,
    /// Legacy when the shop accepted `initialize`; modern when it only answers `server/discover`.
    pub era: Era,
    /// Every tool the shop lists, raw (unknown fields such as `execution` survive).
    pub tools: Vec<Box<RawValue>>,
}

pub struct Shop {
    transport: Transport,
    timeout: Duration,
    max_message_bytes: usize,
    notifications: NotificationSink,
    current: Mutex<Option<Arc<Connection>>>,
}

/// A link and what its handshake learnt.
struct Connection {
    link: Arc<dyn Link>,
    handshake: Handshake,
    /// The names in `handshake.tools`, asked on every forwarded call.
    offered: HashSet<String>,
}

impl Shop {
    /// Resolves the downstream from the policy. For HTTP this reads the bearer token from the
    /// environment, now, once: a missing variable is reported at start, not at the first payment.
    pub fn new(
        policy: &DownstreamPolicy,
        notifications: NotificationSink,
    ) -> Result<Shop, ShopError> {
        let transport = match &policy.transport {
            DownstreamTransport::Stdio(stdio) => {
                Transport::Stdio(stdio::Launch::from_policy(stdio)?)
            }
            DownstreamTransport::Http(endpoint) => {
                Transport::Http(Arc::new(http::Endpoint::from_policy(endpoint, |name| {
                    std::env::var_os(name)
                })?))
            }
        };
        Ok(Shop {
            transport,
            timeout: policy.timeout,
            max_message_bytes: policy.max_message_bytes,
            notifications,
            current: Mutex::new(None),
        })
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The handshake of the connected shop, connecting if needed.
    pub fn handshake(&self) -> Result<Handshake, ShopError> {
        Ok(self.connection()?.handshake.clone())
    }

    /// Whether the shop lists a tool of this name, connecting if needed.
    pub fn offers(&self, tool: &str) -> Result<bool, ShopError> {
        Ok(self.connection()?.offered.contains(tool))
    }

    /// Whether the live connection (if any) lists this tool; never connects.
    pub fn offers_live(&self, tool: &str) -> bool {
        lock(&self.current)
            .as_ref()
            .is_some_and(|c| c.link.alive() && c.offered.contains(tool))
    }

    /// The forwarding fast path: sends the request on the live connection and returns at once;
    /// `done` gets the answer (or the timeout) on the link's reader. `done` comes back when there is
    /// no live connection or the transport has no reader of its own (HTTP): use [`Shop::request`].
    pub fn request_detached(
        &self,
        method: &str,
        params: Option<&str>,
        sent: &mut dyn FnMut(u64),
        done: Done,
    ) -> Result<(), Done> {
        let live = lock(&self.current)
            .as_ref()
            .filter(|c| c.link.alive())
            .cloned();
        let Some(connection) = live else {
            return Err(done);
        };
        let shop_params = era::params_for_shop(connection.handshake.era, params);
        connection.link.clone().request_detached(
            method,
            shop_params.as_deref(),
            self.timeout,
            sent,
            done,
        )
    }

    /// Sends one request and waits for its answer, at most the configured timeout. `sent` is told
    /// the shop-side id once the request is written (for forwarding cancellations).
    ///
    /// A request refused because the shop forgot its HTTP session is sent once more on a new
    /// session: the shop never processed it, so even `complete_checkout` may go again (with the
    /// same bytes, so the same idempotency key). Nothing else is resent here: a timeout or a
    /// dropped connection is an unknown outcome, left to the caller (SPEC §4.13).
    pub fn request(
        &self,
        method: &str,
        params: Option<&str>,
        sent: &mut dyn FnMut(u64),
    ) -> Result<Reply, ShopError> {
        self.request_by(None, method, params, sent)
    }

    /// [`Shop::request`] that writes the request only before `answered_by`, and waits for its
    /// answer no longer than that: a payment is written within the shop's timeout of its
    /// reservation, whatever a new connection's handshake took, so that it has its answer (or
    /// gave up) before reconciliation may take the reservation for stale (`reconcile.rs`).
    pub fn request_by(
        &self,
        answered_by: Option<Instant>,
        method: &str,
        params: Option<&str>,
        sent: &mut dyn FnMut(u64),
    ) -> Result<Reply, ShopError> {
        let mut resent = false;
        loop {
            let connection = self.connection()?;
            let timeout = match answered_by {
                None => self.timeout,
                Some(by) => {
                    let left = by.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        // After a 404 the first write's word stands: it was not processed.
                        return Err(if resent {
                            ShopError::SessionExpired
                        } else {
                            ShopError::TooLateToSend(self.timeout)
                        });
                    }
                    left.min(self.timeout)
                }
            };
            let shop_params = era::params_for_shop(connection.handshake.era, params);
            let reply = connection
                .link
                .request(method, shop_params.as_deref(), timeout, sent);
            if let Err(e) = &reply {
                if e.drops_connection() {
                    self.discard(&connection);
                }
                if matches!(e, ShopError::SessionExpired) && !resent {
                    tracing::info!(
                        "the shop forgot the MCP session; re-initializing and resending once"
                    );
                    resent = true;
                    continue;
                }
            }
            return reply;
        }
    }

    /// Sends a notification (e.g. a cancellation) to the connected shop, if any, without waiting.
    pub fn notify(&self, line: &str) {
        let current = lock(&self.current).clone();
        if let Some(connection) = current
            && connection.link.alive()
        {
            connection.link.notify_in_background(line);
        }
    }

    fn connection(&self) -> Result<Arc<Connection>, ShopError> {
        let mut current = lock(&self.current);
        if let Some(connection) = current.as_ref() {
            if connection.link.alive() {
                return Ok(connection.clone());
            }
            connection.link.close();
        }
        *current = None;
        let connection = Arc::new(self.connect()?);
        *current = Some(connection.clone());
        Ok(connection)
    }

    fn discard(&self, connection: &Arc<Connection>) {
        connection.link.close();
        let mut current = lock(&self.current);
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, connection)) {
            *current = None;
        }
    }

    fn connect(&self) -> Result<Connection, ShopError> {
        let link: Arc<dyn Link> = match &self.transport {
            Transport::Stdio(launch) => {
                stdio::start(launch, self.max_message_bytes, self.notifications.clone())?
            }
            Transport::Http(endpoint) => Arc::new(http::HttpLink::new(
                endpoint.clone(),
                self.max_message_bytes,
                self.notifications.clone(),
            )),
        };
        match self.initialize(link.as_ref()) {
            Ok(handshake) => {
                let offered = handshake
                    .tools
                    .iter()
                    .filter_map(|tool| super::tools::tool_name(tool))
                    .collect();
                Ok(Connection {
                    link,
                    handshake,
                    offered,
                })
            }
            Err(e) => {
                link.close();
                Err(e)
            }
        }
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        if let Some(connection) = lock(&self.current).take() {
            connection.link.close();
        }
    }
}

/// A JSON-RPC answer's `result` or `error`, as the shop wrote it.
fn reply_of(
    result: Option<Box<RawValue>>,
    error: Option<Box<RawValue>>,
) -> Result<Reply, ShopError> {
    match (result, error) {
        (Some(result), None) => Ok(Reply::Result(result)),
        (None, Some(error)) => Ok(Reply::Error(error)),
        (None, None) => Err(ShopError::Garbled(
            "an answer with neither result nor error".into(),
        )),
        // Not an answer JSON-RPC allows: neither half can be taken as what the shop did.
        (Some(_), Some(_)) => Err(ShopError::Garbled(
            "an answer with both result and error".into(),
        )),
    }
}

/// Requests from the shop to its client (sampling, elicitation, roots) are not offered through
/// the gate; `ping` is answered so the shop does not think its client is gone.
fn answer_to_shop_request(method: &str, id: &RawValue) -> String {
    if method == "ping" {
        jsonrpc::result(id, "{}")
    } else {
        jsonrpc::error(
            Some(id),
            jsonrpc::METHOD_NOT_FOUND,
            "not offered through CajaGuard",
        )
    }
}

/// Name-value pairs (environment variables, HTTP headers) as `Debug` may show them: the names,
/// each value `<redacted>`, since any of them may be a credential.
fn names_only(pairs: &[(String, String)]) -> Vec<(&str, &'static str)> {
    pairs
        .iter()
        .map(|(name, _)| (name.as_str(), "<redacted>"))
        .collect()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic in another thread must not wedge the proxy; the data behind these locks stays valid.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

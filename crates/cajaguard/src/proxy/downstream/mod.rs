//! The shop, over either transport: a child process on stdio (`stdio.rs`) or an MCP Streamable
//! HTTP endpoint (`http.rs`). Connected on demand, handshaken once per connection, reconnected on
//! the next call after it is lost. Every call is bounded by the configured timeout and every
//! message from the shop by the configured size; a shop that breaks either is a failed call,
//! never a hang. Both transports carry the same raw JSON-RPC: nothing is re-encoded on the way.

mod http;
mod stdio;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cajaguard_core::policy::{Downstream as DownstreamPolicy, DownstreamTransport};
use serde_json::value::RawValue;

use cajaguard_wire::era::{self, Era};
use cajaguard_wire::jsonrpc;

/// The protocol version the proxy asks the shop for; the shop may answer with another it speaks.
const PROTOCOL_VERSION: &str = "2025-11-25";

#[derive(Debug, thiserror::Error)]
pub enum ShopError {
    #[error("cannot start the shop `{}`: {source}; check downstream.command in the config", program.display())]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the shop `{0}` was not found next to cajaguard or on PATH; check downstream.command in the config"
    )]
    NotFound(String),
    #[error("the shop did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the shop stopped ({0}); it is reconnected on the next call")]
    Died(String),
    #[error(
        "the shop's answer to this call was over the {0}-byte limit (downstream.max_message_bytes); \
         only this call failed"
    )]
    TooLarge(usize),
    #[error("the shop broke the MCP handshake: {0}")]
    Handshake(String),
    /// The shop answered a request, but not in a form that says what happened (neither `result`
    /// nor `error`, an unexpected content type): it may have acted on it.
    #[error("the shop's answer is unusable ({0}); it may have acted on the request")]
    Garbled(String),
    /// `downstream.bearer_token_env` names a variable that is not set (or is empty) in the
    /// environment `cajaguard` was started with.
    #[error(
        "the shop's bearer token is missing: ${0} is not set (downstream.bearer_token_env); export it \
         in the environment that starts cajaguard (for MCP clients: in the server's \"env\" block)"
    )]
    MissingToken(String),
    #[error(
        "${0} holds characters that cannot go in an HTTP header; put the bare token in it (no \
         \"Bearer \" prefix, no newline)"
    )]
    BadToken(String),
    /// 401/403. Names the variable, never its value.
    #[error("{}", unauthorized_message(*status, var.as_deref()))]
    Unauthorized { status: u16, var: Option<String> },
    /// The request never reached the shop (refused connection, DNS, TLS): nothing happened there.
    #[error("cannot reach the shop at {url}: {why}; check that it is up and downstream.url")]
    Unreachable { url: String, why: String },
    /// An HTTP status that is not an MCP answer. `unknown` when the shop may have acted on the
    /// request before failing (5xx other than 503).
    #[error("the shop answered HTTP {status}{}", if *unknown { " (it may have acted on the request)" } else { "" })]
    Http { status: u16, unknown: bool },
    /// HTTP 404 on a request carrying a session id: the shop forgot the session and did not
    /// process the request. `Shop::request` re-initializes and resends once.
    #[error("the shop forgot the MCP session (HTTP 404) twice in a row; it was not processed")]
    SessionExpired,
}

fn unauthorized_message(status: u16, var: Option<&str>) -> String {
    match var {
        Some(var) => format!(
            "the shop refused the token in ${var} ({status}): check it (and that it may use the UCP MCP endpoint)"
        ),
        None => format!(
            "the shop requires authorization ({status}): put its token in an environment variable and \
             name it in downstream.bearer_token_env"
        ),
    }
}

impl ShopError {
    /// The message already says what to do, so the CLI adds no hint that repeats it.
    pub fn says_what_to_do(&self) -> bool {
        matches!(
            self,
            ShopError::Spawn { .. }
                | ShopError::NotFound(_)
                | ShopError::MissingToken(_)
                | ShopError::BadToken(_)
                | ShopError::Unauthorized { .. }
                | ShopError::Unreachable { .. }
        )
    }

    /// True when a request may have reached the shop and its effect is unknown.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            ShopError::Timeout(_)
            | ShopError::Died(_)
            | ShopError::TooLarge(_)
            | ShopError::Garbled(_) => true,
            ShopError::Http { unknown, .. } => *unknown,
            _ => false,
        }
    }

    /// Failures that happened before the request could be written: the shop cannot have acted.
    /// (An HTTP status, even a 4xx, is the shop's answer: it is read as a refusal to be confirmed.)
    pub fn never_sent(&self) -> bool {
        matches!(
            self,
            ShopError::Spawn { .. }
                | ShopError::NotFound(_)
                | ShopError::MissingToken(_)
                | ShopError::BadToken(_)
                | ShopError::Unreachable { .. }
                | ShopError::SessionExpired
        )
    }

    /// Failures after which the connection is not trusted again: the next call reconnects.
    fn drops_connection(&self) -> bool {
        matches!(
            self,
            ShopError::Died(_) | ShopError::SessionExpired | ShopError::Unreachable { .. }
        )
    }

    /// Failures that are fixed in the config or the environment, not by waiting (exit 2 at start).
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            ShopError::NotFound(_)
                | ShopError::Spawn { .. }
                | ShopError::MissingToken(_)
                | ShopError::BadToken(_)
                | ShopError::Unauthorized { .. }
        )
    }
}

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
        let mut resent = false;
        loop {
            let connection = self.connection()?;
            let shop_params = era::params_for_shop(connection.handshake.era, params);
            let reply = connection
                .link
                .request(method, shop_params.as_deref(), self.timeout, sent);
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

    /// `initialize` first (every shop of the 2025 eras); a shop that refuses it but answers
    /// `server/discover` with 2026-07-28 is spoken to in that era, with an envelope on every request.
    fn initialize(&self, link: &dyn Link) -> Result<Handshake, ShopError> {
        let params = format!(
            r#"{{"protocolVersion":"{PROTOCOL_VERSION}","capabilities":{{}},"clientInfo":{}}}"#,
            era::client_info()
        );
        let answer = link.request("initialize", Some(&params), self.timeout, &mut |_| {})?;
        let (protocol_version, shop_era) = match answer {
            Reply::Result(result) => {
                #[derive(serde::Deserialize)]
                struct Initialized {
                    #[serde(rename = "protocolVersion")]
                    protocol_version: String,
                }
                let initialized: Initialized = serde_json::from_str(result.get()).map_err(|e| {
                    ShopError::Handshake(format!("unreadable initialize result: {e}"))
                })?;
                link.set_protocol_version(&initialized.protocol_version);
                link.notify(&jsonrpc::notification("notifications/initialized", None))?;
                (initialized.protocol_version, Era::Legacy)
            }
            Reply::Error(_) => (self.discover(link)?, Era::Modern),
        };
        let list = |params: Option<String>| {
            let params = era::params_for_shop(shop_era, params.as_deref());
            link.request("tools/list", params.as_deref(), self.timeout, &mut |_| {})
        };

        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        // A shop that pages forever is cut off: 100 pages of tools is far beyond any real shop.
        for _ in 0..100 {
            let params = cursor
                .as_ref()
                .map(|c| format!(r#"{{"cursor":{}}}"#, jsonrpc::quote(c)));
            let Reply::Result(result) = list(params)? else {
                return Err(ShopError::Handshake("the shop refused tools/list".into()));
            };
            #[derive(serde::Deserialize)]
            struct Page {
                tools: Vec<Box<RawValue>>,
                #[serde(rename = "nextCursor", default)]
                next_cursor: Option<String>,
            }
            let page: Page = serde_json::from_str(result.get())
                .map_err(|e| ShopError::Handshake(format!("unreadable tools/list result: {e}")))?;
            tools.extend(page.tools);
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        Ok(Handshake {
            protocol_version,
            era: shop_era,
            tools,
        })
    }

    fn discover(&self, link: &dyn Link) -> Result<String, ShopError> {
        // Over HTTP the 2026-07-28 era repeats the version in a header on every message.
        link.set_protocol_version(era::MODERN_VERSION);
        let params = era::params_for_shop(Era::Modern, None);
        let answer = link.request(
            "server/discover",
            params.as_deref(),
            self.timeout,
            &mut |_| {},
        )?;
        let refused =
            || ShopError::Handshake("the shop refused both initialize and server/discover".into());
        let Reply::Result(result) = answer else {
            return Err(refused());
        };
        #[derive(serde::Deserialize)]
        struct Discovered {
            #[serde(rename = "supportedVersions", default)]
            supported_versions: Vec<String>,
        }
        let discovered: Discovered = serde_json::from_str(result.get())
            .map_err(|e| ShopError::Handshake(format!("unreadable server/discover result: {e}")))?;
        if discovered
            .supported_versions
            .iter()
            .any(|v| v == era::MODERN_VERSION)
        {
            Ok(era::MODERN_VERSION.to_owned())
        } else {
            Err(ShopError::Handshake(format!(
                "the shop speaks none of the protocol versions CajaGuard knows ({:?})",
                discovered.supported_versions
            )))
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
        (_, Some(error)) => Ok(Reply::Error(error)),
        (None, None) => Err(ShopError::Garbled(
            "an answer with neither result nor error".into(),
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

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic in another thread must not wedge the proxy; the data behind these locks stays valid.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

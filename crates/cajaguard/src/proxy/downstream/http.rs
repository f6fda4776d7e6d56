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

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cajaguard_core::policy::HttpDownstream;
use ureq::http::{HeaderValue, Response, StatusCode};
use zeroize::Zeroize;

use super::super::jsonrpc::{self, Envelope, Line};
use super::{Link, NotificationSink, Reply, ShopError, lock};

const ACCEPT: &str = "application/json, text/event-stream";
const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// Reads are retried on 429/503 at most this many times, and never past the call's timeout.
const MAX_READ_RETRIES: u32 = 3;
/// First backoff; doubled on each retry.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// A `Retry-After` longer than this is not waited for: the caller gets the error instead.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(5);
/// Closing a session is a courtesy; it must not hold up shutting down.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// UCP tools that only read. Only these (and the handshake) are retried after 429/503: a retry of
/// anything that writes could act twice.
const READ_TOOLS: &[&str] = &[
    "get_checkout",
    "get_cart",
    "get_order",
    "get_product",
    "search_catalog",
    "lookup_catalog",
];

/// The `Authorization` header value, wiped when dropped. Deliberately without `Debug` or
/// `Display`: it cannot end up in a log line or an error by accident.
struct BearerToken {
    header: String,
}

impl BearerToken {
    fn header_value(&self) -> Option<HeaderValue> {
        let mut value = HeaderValue::from_str(&self.header).ok()?;
        // Hidden from the http crate's Debug output. The copy in the header itself cannot be
        // wiped (it lives in the HTTP client's buffers until they are reused).
        value.set_sensitive(true);
        Some(value)
    }
}

impl Drop for BearerToken {
    fn drop(&mut self) {
        self.header.zeroize();
    }
}

/// Where the shop is and how to authenticate, resolved once at start.
pub struct Endpoint {
    url: String,
    /// The URL without its query, for messages.
    shown: String,
    token: Option<(String, BearerToken)>,
    headers: Vec<(String, String)>,
    agent: ureq::Agent,
}

impl Endpoint {
    /// Reads the bearer token from the environment (`env` is injected for tests). A variable that
    /// is named but unset is an error now, not at the first call.
    pub fn from_policy(
        http: &HttpDownstream,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Endpoint, ShopError> {
        let token = match &http.bearer_token_env {
            None => None,
            Some(var) => {
                let Some(mut raw) = env(var).filter(|v| !v.is_empty()) else {
                    return Err(ShopError::MissingToken(var.clone()));
                };
                let text = raw.to_str().map(str::to_owned);
                raw.clear();
                let Some(mut text) = text else {
                    return Err(ShopError::BadToken(var.clone()));
                };
                let token = BearerToken {
                    header: format!("Bearer {text}"),
                };
                let printable = text.bytes().all(|b| (0x21..0x7f).contains(&b));
                text.zeroize();
                if !printable || token.header_value().is_none() {
                    return Err(ShopError::BadToken(var.clone()));
                }
                Some((var.clone(), token))
            }
        };
        let loopback = match http.url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            _ => false,
        };
        let config = ureq::Agent::config_builder()
            // Statuses are MCP signals here (404 session gone, 401 token, 429 slow down).
            .http_status_as_error(false)
            // A redirect would carry the payment call and the token somewhere the config does not name.
            .max_redirects(0)
            .user_agent(format!("cajaguard/{}", env!("CARGO_PKG_VERSION")))
            .accept(ACCEPT)
            .max_idle_age(Duration::from_secs(30));
        // A loopback endpoint is never reached through a proxy from the environment.
        let config = if loopback { config.proxy(None) } else { config };
        let mut shown = http.url.clone();
        shown.set_query(None);
        Ok(Endpoint {
            url: http.url.to_string(),
            shown: shown.to_string(),
            token,
            headers: http
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            agent: config.build().new_agent(),
        })
    }

    fn token_var(&self) -> Option<String> {
        self.token.as_ref().map(|(var, _)| var.clone())
    }
}

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
    /// 429 or 503: the shop did not take the message, and may say when to come back.
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
        if let Some((_, token)) = &self.endpoint.token
            && let Some(value) = token.header_value()
        {
            request = request.header("Authorization", value);
        }
        let session = lock(&self.session).clone();
        if let Some(session) = &session {
            request = request.header(SESSION_HEADER, session.as_str());
        }
        if let Some(version) = lock(&self.protocol_version).clone() {
            request = request.header(VERSION_HEADER, version.as_str());
        }
        for (name, value) in &self.endpoint.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request
            .send(body.as_bytes())
            .map_err(|e| self.transport_error(e, timeout))?;
        self.read_response(response, id, session.is_some(), timeout)
    }

    fn read_response(
        &self,
        response: Response<ureq::Body>,
        id: Option<u64>,
        sent_session: bool,
        timeout: Duration,
    ) -> Result<Posted, ShopError> {
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(ShopError::Unauthorized {
                status: status.as_u16(),
                var: self.endpoint.token_var(),
            });
        }
        if status == StatusCode::NOT_FOUND && sent_session {
            // The MCP rule: 404 to a request with a session id means the session is gone and the
            // request was not processed; the client must start a new session.
            self.alive.store(false, Ordering::Release);
            return Err(ShopError::SessionExpired);
        }
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            return Ok(Posted::Throttled {
                status: status.as_u16(),
                retry_after,
            });
        }
        if id.is_none() && status.is_success() {
            return Ok(Posted::Accepted);
        }
        if status == StatusCode::ACCEPTED {
            // A request accepted without an answer on this stream: the shop has it, and the
            // answer would come on a stream the proxy does not open. Its outcome is unknown.
            return Err(ShopError::Http {
                status: 202,
                unknown: true,
            });
        }
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.to_ascii_lowercase())
            .unwrap_or_default();
        let session = response
            .headers()
            .get(SESSION_HEADER)
            .map(|v| v.as_bytes().to_vec());
        let body = response.into_body().into_reader();
        if !status.is_success() {
            // A JSON-RPC error in an HTTP error (e.g. 400 for a malformed request) is passed on as
            // the shop's error; anything else is the status.
            if status.is_client_error()
                && content_type.starts_with("application/json")
                && let Ok(Some(Reply::Error(error))) = self.read_json(body, id, timeout)
            {
                return Ok(Posted::Answer(Reply::Error(error)));
            }
            return Err(ShopError::Http {
                status: status.as_u16(),
                // A 5xx may come after the shop acted (a gateway timing out on it); 503 is the
                // shop saying it could not take the request at all.
                unknown: status.is_server_error(),
            });
        }
        if let Some(session) = session {
            // Only `initialize` opens a session; visible ASCII only (MCP), so it is safe to send back.
            if session.is_empty()
                || session.len() > 1024
                || !session.iter().all(|b| (0x21..0x7f).contains(b))
            {
                return Err(ShopError::Garbled(
                    "the shop gave an unusable Mcp-Session-Id".into(),
                ));
            }
            let mut current = lock(&self.session);
            if current.is_none() {
                *current = Some(String::from_utf8_lossy(&session).into_owned());
            }
        }
        let reply = if content_type.starts_with("text/event-stream") {
            self.read_events(body, id, timeout)?
        } else if content_type.starts_with("application/json") {
            self.read_json(body, id, timeout)?
        } else {
            return Err(ShopError::Garbled(format!(
                "Content-Type `{}`, not application/json or text/event-stream",
                content_type.chars().take(80).collect::<String>()
            )));
        };
        match reply {
            Some(reply) => Ok(Posted::Answer(reply)),
            None => Err(ShopError::Died(
                "it ended its answer without answering the request".into(),
            )),
        }
    }

    /// One JSON message as the whole body.
    fn read_json(
        &self,
        body: impl Read,
        id: Option<u64>,
        timeout: Duration,
    ) -> Result<Option<Reply>, ShopError> {
        let limit = self.max_message_bytes;
        let mut bytes = Vec::new();
        body.take(limit as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| body_error(&e, timeout))?;
        if bytes.len() > limit {
            return Err(ShopError::TooLarge(limit));
        }
        let text = String::from_utf8_lossy(&bytes);
        Ok(self.handle_message(&one_line(&text), id))
    }

    /// An event stream: each event's data is one JSON-RPC message. Notifications go to the agent
    /// as they arrive; the stream is read until the answer to `id`.
    fn read_events(
        &self,
        body: impl Read,
        id: Option<u64>,
        timeout: Duration,
    ) -> Result<Option<Reply>, ShopError> {
        let mut events = SseReader::new(BufReader::with_capacity(64 * 1024, body));
        loop {
            let data = match events.next_event(self.max_message_bytes) {
                Ok(Some(Event::Message(data))) => data,
                Ok(Some(Event::TooLarge)) => {
                    return Err(ShopError::TooLarge(self.max_message_bytes));
                }
                Ok(None) => return Ok(None),
                Err(e) => return Err(body_error(&e, timeout)),
            };
            if let Some(reply) = self.handle_message(&one_line(&data), id) {
                return Ok(Some(reply));
            }
        }
    }

    /// Routes one message from the shop; returns the answer to `id` when this is it.
    fn handle_message(&self, line: &str, id: Option<u64>) -> Option<Reply> {
        if line.trim().is_empty() {
            return None;
        }
        let Ok(envelope) = Envelope::parse(line) else {
            tracing::warn!("the shop sent a message that is not JSON-RPC; ignored");
            return None;
        };
        match (&envelope.method, &envelope.id) {
            (None, Some(answer_id)) => {
                let ours = id.is_some_and(|id| answer_id.get() == id.to_string());
                // A JSON-RPC error with a null id is the shop refusing the request it could not read.
                let unread = answer_id.get() == "null" && envelope.error.is_some();
                if ours || unread {
                    super::reply_of(envelope.result, envelope.error).ok()
                } else {
                    tracing::warn!("the shop answered an id the proxy never sent; ignored");
                    None
                }
            }
            (Some(method), Some(shop_id)) => {
                let answer = super::answer_to_shop_request(method, shop_id);
                self.notify_in_background(&answer);
                None
            }
            (Some(_), None) => {
                (self.notifications)(line);
                None
            }
            (None, None) => {
                tracing::warn!("the shop sent a message with neither id nor method; ignored");
                None
            }
        }
    }

    /// A failure before any answer arrived. Refused connections, DNS and TLS failures mean the
    /// request never reached the shop; anything later may have.
    fn transport_error(&self, e: ureq::Error, timeout: Duration) -> ShopError {
        use std::io::ErrorKind;
        let unreachable = |why: String| {
            self.alive.store(false, Ordering::Release);
            ShopError::Unreachable {
                url: self.endpoint.shown.clone(),
                why,
            }
        };
        match e {
            ureq::Error::Timeout(ureq::Timeout::Resolve | ureq::Timeout::Connect) => {
                unreachable("connecting timed out".into())
            }
            ureq::Error::Timeout(_) => ShopError::Timeout(timeout),
            ureq::Error::HostNotFound => unreachable("host not found".into()),
            ureq::Error::ConnectionFailed => unreachable("connection failed".into()),
            ureq::Error::Io(io)
                if matches!(
                    io.kind(),
                    ErrorKind::ConnectionRefused
                        | ErrorKind::AddrNotAvailable
                        | ErrorKind::HostUnreachable
                        | ErrorKind::NetworkUnreachable
                ) =>
            {
                unreachable(io.to_string())
            }
            ureq::Error::Io(io) if io.kind() == ErrorKind::TimedOut => ShopError::Timeout(timeout),
            ureq::Error::Rustls(tls) => unreachable(format!("TLS failed: {tls}")),
            other => {
                self.alive.store(false, Ordering::Release);
                ShopError::Died(other.to_string())
            }
        }
    }

    fn is_read(method: &str, params: Option<&str>) -> bool {
        match method {
            "initialize" | "server/discover" | "tools/list" | "ping" => true,
            "tools/call" => {
                #[derive(serde::Deserialize)]
                struct Call<'a> {
                    #[serde(borrow)]
                    name: std::borrow::Cow<'a, str>,
                }
                params
                    .and_then(|p| serde_json::from_str::<Call<'_>>(p).ok())
                    .is_some_and(|call| READ_TOOLS.contains(&call.name.as_ref()))
            }
            _ => false,
        }
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
        let read = Self::is_read(method, params);
        let deadline = Instant::now() + timeout;
        sent(id);
        let mut retries = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ShopError::Timeout(timeout));
            }
            match self.post(&body, Some(id), left) {
                Ok(Posted::Answer(reply)) => return Ok(reply),
                Ok(Posted::Accepted) => {
                    return Err(ShopError::Http {
                        status: 202,
                        unknown: true,
                    });
                }
                Ok(Posted::Throttled {
                    status,
                    retry_after,
                }) => {
                    let wait = wait_before_retry(retries, retry_after);
                    let give_up = !read
                        || retries >= MAX_READ_RETRIES
                        || wait.is_none_or(|w| Instant::now() + w >= deadline);
                    if give_up {
                        return Err(ShopError::Http {
                            status,
                            unknown: false,
                        });
                    }
                    if let Some(wait) = wait {
                        std::thread::sleep(wait);
                    }
                    retries += 1;
                }
                Err(e) => return Err(e),
            }
        }
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
        let mut request = self
            .endpoint
            .agent
            .delete(&self.endpoint.url)
            .config()
            .timeout_global(Some(CLOSE_TIMEOUT))
            .build()
            .header(SESSION_HEADER, session.as_str());
        if let Some((_, token)) = &self.endpoint.token
            && let Some(value) = token.header_value()
        {
            request = request.header("Authorization", value);
        }
        if let Some(version) = lock(&self.protocol_version).clone() {
            request = request.header(VERSION_HEADER, version.as_str());
        }
        let _ = request.call();
    }

    fn set_protocol_version(&self, version: &str) {
        *lock(&self.protocol_version) = Some(version.to_owned());
    }
}

/// How long to wait before retry number `retries + 1`: the shop's `Retry-After` when it gave one
/// (`None` if over the cap: not worth waiting for), else an exponential backoff.
fn wait_before_retry(retries: u32, retry_after: Option<Duration>) -> Option<Duration> {
    match retry_after {
        Some(after) if after > RETRY_AFTER_CAP => None,
        Some(after) => Some(after),
        None => Some(FIRST_BACKOFF * 2u32.saturating_pow(retries)),
    }
}

/// `Retry-After` in seconds. The HTTP-date form is not read (the backoff applies instead).
fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// A failure while reading an answer's body: the request reached the shop.
fn body_error(e: &std::io::Error, timeout: Duration) -> ShopError {
    let timed_out = e.kind() == std::io::ErrorKind::TimedOut
        || e.get_ref()
            .and_then(|inner| inner.downcast_ref::<ureq::Error>())
            .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)));
    if timed_out {
        ShopError::Timeout(timeout)
    } else {
        ShopError::Died(e.to_string())
    }
}

/// JSON allows line breaks only between tokens, so turning them into spaces changes no value and
/// keeps every other byte; the agent side needs one message per line.
fn one_line(text: &str) -> String {
    if text.contains(['\n', '\r']) {
        text.replace(['\n', '\r'], " ")
    } else {
        text.to_owned()
    }
}

/// One dispatched server-sent event.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// The data of a `message` event (its `data:` lines joined with `\n`).
    Message(String),
    /// An event whose data or a line of which was over the limit; its data was discarded.
    TooLarge,
}

/// Server-sent events as the WHATWG HTML standard parses them: lines of `field: value`, `data`
/// lines joined with `\n`, comments (`:`) ignored, an event dispatched at a blank line. Only
/// events of the default type `message` (what MCP sends) are returned.
struct SseReader<R> {
    reader: R,
    started: bool,
}

impl<R: BufRead> SseReader<R> {
    fn new(reader: R) -> SseReader<R> {
        SseReader {
            reader,
            started: false,
        }
    }

    /// The next event, or `None` at the end of the stream. `max` bounds an event's data.
    fn next_event(&mut self, max: usize) -> std::io::Result<Option<Event>> {
        let mut data = String::new();
        let mut has_data = false;
        let mut kind = String::new();
        let mut too_large = false;
        loop {
            // A line may hold a whole message plus `data: `.
            let mut line = match jsonrpc::read_line(&mut self.reader, max + 16)? {
                Line::Eof => return Ok(None),
                Line::TooLong { .. } => {
                    too_large = true;
                    continue;
                }
                Line::Message(line) => line,
            };
            if !self.started {
                self.started = true;
                if let Some(rest) = line.strip_prefix('\u{feff}') {
                    line = rest.to_owned();
                }
            }
            if line.is_empty() {
                if too_large {
                    return Ok(Some(Event::TooLarge));
                }
                if has_data && (kind.is_empty() || kind == "message") {
                    return Ok(Some(Event::Message(data)));
                }
                data.clear();
                has_data = false;
                kind.clear();
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line.as_str(), ""),
            };
            match field {
                "data" => {
                    if has_data {
                        data.push('\n');
                    }
                    data.push_str(value);
                    has_data = true;
                    if data.len() > max {
                        too_large = true;
                        data.clear();
                    }
                }
                "event" => kind = value.to_owned(),
                // `id` and `retry` serve reconnecting a dropped stream, which the proxy does not do:
                // a dropped answer is an unknown outcome, not something to resume.
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(stream: &str, max: usize) -> Vec<Event> {
        let mut reader = SseReader::new(std::io::BufReader::with_capacity(3, stream.as_bytes()));
        let mut out = Vec::new();
        while let Some(event) = reader.next_event(max).unwrap() {
            out.push(event);
        }
        out
    }

    #[test]
    fn sse_data_lines_are_joined_and_events_split_at_blank_lines() {
        let stream = "\u{feff}: keep-alive\r\nid: 1\r\nretry: 3000\r\ndata:\r\n\r\n\
                      data: {\"a\":\ndata:1}\n\nevent: message\ndata:{\"b\":2}\n\n\
                      event: other\ndata: x\n\ndata: last-without-blank-line";
        assert_eq!(
            events(stream, 1024),
            vec![
                Event::Message(String::new()),
                Event::Message("{\"a\":\n1}".into()),
                Event::Message("{\"b\":2}".into()),
            ]
        );
    }

    #[test]
    fn an_sse_event_over_the_limit_is_reported_and_the_stream_stays_in_step() {
        let big = "x".repeat(100);
        let stream = format!("data: {big}\n\ndata: {big}\ndata: {big}\n\ndata: ok\n\n");
        assert_eq!(
            events(&stream, 150),
            vec![
                Event::Message(big.clone()),
                Event::TooLarge,
                Event::Message("ok".into())
            ]
        );
    }

    #[test]
    fn line_breaks_in_json_become_spaces_and_nothing_else_changes() {
        assert_eq!(
            one_line("{\n  \"a\" : 1.0,\r\n  \"b\":\"x\"\n}"),
            "{   \"a\" : 1.0,    \"b\":\"x\" }"
        );
    }

    #[test]
    fn only_reads_are_retried() {
        assert!(HttpLink::is_read("tools/list", None));
        assert!(HttpLink::is_read(
            "tools/call",
            Some(r#"{"name":"get_checkout","arguments":{}}"#)
        ));
        for write in [
            "complete_checkout",
            "create_checkout",
            "update_checkout",
            "cancel_checkout",
        ] {
            let params = format!(r#"{{"name":"{write}","arguments":{{}}}}"#);
            assert!(!HttpLink::is_read("tools/call", Some(&params)), "{write}");
        }
    }

    #[test]
    fn retry_after_is_honoured_up_to_a_cap() {
        assert_eq!(parse_retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        let one = Some(Duration::from_secs(1));
        assert_eq!(wait_before_retry(0, one), one);
        assert_eq!(wait_before_retry(0, Some(Duration::from_secs(60))), None);
        assert_eq!(wait_before_retry(2, None), Some(FIRST_BACKOFF * 4));
    }

    fn downstream(var: Option<&str>) -> HttpDownstream {
        HttpDownstream {
            url: url::Url::parse("http://127.0.0.1:9/mcp?k=v").unwrap(),
            bearer_token_env: var.map(str::to_owned),
            headers: Default::default(),
        }
    }

    #[test]
    fn the_token_comes_from_the_environment_and_never_shows() {
        let err = Endpoint::from_policy(&downstream(Some("SHOP_TOKEN")), |_| None)
            .err()
            .unwrap();
        assert!(matches!(err, ShopError::MissingToken(_)));
        assert!(err.to_string().contains("$SHOP_TOKEN"), "{err}");
        let secret = "shpat_0123456789abcdef";
        let bad = format!("{secret}\n");
        let err = Endpoint::from_policy(&downstream(Some("SHOP_TOKEN")), |_| {
            Some(bad.clone().into())
        })
        .err()
        .unwrap();
        assert!(matches!(err, ShopError::BadToken(_)));
        assert!(!err.to_string().contains(secret), "{err}");
        let endpoint =
            Endpoint::from_policy(&downstream(Some("SHOP_TOKEN")), |_| Some(secret.into()))
                .unwrap();
        assert_eq!(endpoint.shown, "http://127.0.0.1:9/mcp");
        let header = endpoint.token.as_ref().unwrap().1.header_value().unwrap();
        assert!(!format!("{header:?}").contains(secret));
        let refused = ShopError::Unauthorized {
            status: 401,
            var: endpoint.token_var(),
        };
        assert_eq!(
            refused.to_string(),
            "the shop refused the token in $SHOP_TOKEN (401): check it (and that it may use the UCP MCP endpoint)"
        );
    }
}

//! One message to the service and what comes back: the headers every message carries, the
//! answer (one JSON message or an event stream, each message passed to the client as one line),
//! and every failure as the error the client is told, saying whether the service can have acted.

use std::io::{BufReader, Read};
use std::time::Duration;

use cajaguard_wire::era::{Era, MODERN_VERSION};
use cajaguard_wire::jsonrpc::{self, Envelope, one_line};
use cajaguard_wire::sse::{Event, SseReader};
use serde_json::value::RawValue;
use ureq::http::{Response, StatusCode};

use super::{
    ACCEPT, Bridge, CALL_TIMEOUT, CLOSE_TIMEOUT, MAX_ANSWER_BYTES, NOTIFY_TIMEOUT, Request,
    Service, lock,
};

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// Why a request got no answer from the service.
#[derive(Debug)]
enum Failed {
    /// The request never reached the service.
    Unreachable(String),
    /// No answer in time: the service may have acted.
    Timeout(Duration),
    /// The connection failed after the request was sent: the service may have acted.
    Dropped(String),
    /// 401: the token (or its absence) was refused.
    Unauthorized,
    /// 403.
    Forbidden,
    /// 404 to a request with the session id: the session is gone, the request was not processed.
    SessionGone,
    /// 404 without a session: no MCP endpoint at that URL.
    NotFound,
    /// 429 or 503: not taken.
    Busy(u16),
    /// Another HTTP error status.
    Status(u16),
    /// 202 to a request: taken, with its answer nowhere the bridge listens.
    Accepted,
    Garbled(String),
    TooLarge,
    /// The answer ended without answering the request.
    NoAnswer,
}

impl Failed {
    fn message(&self, service: &Service) -> String {
        let url = &service.shown;
        let maybe = "the call may have been processed: check before repeating it";
        match self {
            Failed::Unreachable(why) => format!(
                "cannot reach the CajaGuard service at {url} ({why}); the call was not sent: check that `cajaguard serve` runs there"
            ),
            Failed::Timeout(after) => format!(
                "no answer from the CajaGuard service at {url} within {}s; {maybe}",
                after.as_secs()
            ),
            Failed::Dropped(why) => format!(
                "the connection to the CajaGuard service at {url} failed before its answer ({why}); {maybe}"
            ),
            Failed::Unauthorized => match service.token_var() {
                Some(var) => format!("the service refused the token in ${var} (401): check it"),
                None => format!(
                    "the service at {url} needs a token (401): start the bridge with --token-env VAR, the agent's token in VAR"
                ),
            },
            Failed::Forbidden => match service.token_var() {
                Some(var) => format!(
                    "the service refused this call (403): the token in ${var} may not make it"
                ),
                None => "the service refused this call (403)".to_owned(),
            },
            Failed::SessionGone => "the service no longer knows this session (404), so it did not process the call: restart this MCP server in the client to open a new session".to_owned(),
            Failed::NotFound => format!(
                "no MCP endpoint at {url} (404): check the URL (`cajaguard serve` serves /mcp)"
            ),
            Failed::Busy(status) => {
                format!("the service is busy ({status}) and did not take the call: retry later")
            }
            Failed::Status(status) if *status >= 500 => {
                format!("the service failed (HTTP {status}); {maybe}")
            }
            Failed::Status(status) => format!("the service refused the call (HTTP {status})"),
            Failed::Accepted => format!(
                "the service accepted the call (202) without answering it; {maybe}"
            ),
            Failed::Garbled(what) => format!("the service answered with {what}, not MCP; {maybe}"),
            Failed::TooLarge => format!(
                "the service's answer was over {MAX_ANSWER_BYTES} bytes and CajaGuard's bridge refused it; {maybe}"
            ),
            Failed::NoAnswer => format!("the service ended its answer without answering the call; {maybe}"),
        }
    }
}

impl Bridge {
    /// Sends one request and passes on what comes back; a failure becomes its error answer.
    pub(super) fn request(&self, request: &Request) {
        // `initialize` opens a session of its own.
        let session = if request.method == "initialize" {
            None
        } else {
            lock(&self.session).clone()
        };
        let mut post = self.post(CALL_TIMEOUT, session.as_deref(), request.era);
        if request.era == Era::Modern {
            // 2026-07-28 mirrors the method and its target in headers, for gateways on the way.
            if plain_header(&request.method) {
                post = post.header("Mcp-Method", request.method.as_str());
            }
            if let Some(name) = &request.name {
                post = post.header("Mcp-Name", name.as_str());
            }
        }
        let outcome = post
            .send(request.line.as_bytes())
            .map_err(|e| transport_failure(e, CALL_TIMEOUT))
            .and_then(|response| self.answer(response, request, session.as_deref()));
        if let Err(failed) = outcome {
            let message = failed.message(&self.service);
            if self.was_cancelled(&request.id) {
                tracing::debug!("a cancelled call ended without an answer: {message}");
                return;
            }
            tracing::warn!(
                method = %cajaguard_core::display::name(&request.method),
                "{message}"
            );
            self.send(&jsonrpc::error(
                Some(&request.id),
                jsonrpc::SHOP_UNAVAILABLE,
                &message,
            ));
        }
    }

    /// Sends a notification or an answer of the client's; the service answers 202 with no body.
    /// A failure has no request to answer: it is logged.
    pub(super) fn notify(&self, line: &str) {
        let session = lock(&self.session).clone();
        let failed = match self
            .post(NOTIFY_TIMEOUT, session.as_deref(), Era::Legacy)
            .send(line.as_bytes())
        {
            Err(e) => Some(transport_failure(e, NOTIFY_TIMEOUT)),
            Ok(response) => match response.status() {
                status if status.is_success() => None,
                StatusCode::UNAUTHORIZED => Some(Failed::Unauthorized),
                StatusCode::FORBIDDEN => Some(Failed::Forbidden),
                StatusCode::NOT_FOUND if session.is_some() => {
                    self.forget_session(session.as_deref());
                    Some(Failed::SessionGone)
                }
                status => Some(Failed::Status(status.as_u16())),
            },
        };
        if let Some(failed) = failed {
            tracing::warn!(
                "a notification to the service was not delivered: {}",
                failed.message(&self.service)
            );
        }
    }

    /// Ends the session (`DELETE`), best effort: a service may not allow it (405).
    pub(super) fn close(&self) {
        let Some(session) = lock(&self.session).take() else {
            return;
        };
        let request = self
            .service
            .agent
            .delete(&self.service.url)
            .config()
            .timeout_global(Some(CLOSE_TIMEOUT))
            .build();
        match self.headers(request, Some(&session), Era::Legacy).call() {
            Ok(response) => tracing::debug!(status = response.status().as_u16(), "session closed"),
            Err(e) => tracing::debug!("closing the session failed: {e}"),
        }
    }

    fn post(
        &self,
        timeout: Duration,
        session: Option<&str>,
        era: Era,
    ) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let request = self
            .service
            .agent
            .post(&self.service.url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", "application/json")
            .header("Accept", ACCEPT);
        self.headers(request, session, era)
    }

    /// What every message carries: the token, the session id, and the protocol version (the one
    /// `initialize` agreed on, or 2026-07-28 for a request of that era, which has no handshake).
    fn headers<B>(
        &self,
        mut request: ureq::RequestBuilder<B>,
        session: Option<&str>,
        era: Era,
    ) -> ureq::RequestBuilder<B> {
        if let Some(value) = self.service.authorization() {
            request = request.header("Authorization", value);
        }
        match era {
            Era::Modern => request = request.header(VERSION_HEADER, MODERN_VERSION),
            Era::Legacy => {
                if let Some(session) = session {
                    request = request.header(SESSION_HEADER, session);
                }
                if let Some(version) = lock(&self.protocol_version).clone() {
                    request = request.header(VERSION_HEADER, version.as_str());
                }
            }
        }
        request
    }

    /// Forgets the session the service no longer knows, unless a newer `initialize` replaced it.
    fn forget_session(&self, gone: Option<&str>) {
        let mut session = lock(&self.session);
        if session.as_deref() == gone {
            *session = None;
        }
    }

    /// Reads the service's answer to `request`, passing each message on to the client.
    fn answer(
        &self,
        response: Response<ureq::Body>,
        request: &Request,
        sent_session: Option<&str>,
    ) -> Result<(), Failed> {
        let status = response.status();
        match status {
            StatusCode::UNAUTHORIZED => return Err(Failed::Unauthorized),
            StatusCode::FORBIDDEN => return Err(Failed::Forbidden),
            // MCP: 404 to a request with a session id means the session is gone and the request
            // was not processed; the client must start a new session. Never resent here: the
            // client decides.
            StatusCode::NOT_FOUND if sent_session.is_some() => {
                self.forget_session(sent_session);
                return Err(Failed::SessionGone);
            }
            StatusCode::NOT_FOUND => return Err(Failed::NotFound),
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                return Err(Failed::Busy(status.as_u16()));
            }
            StatusCode::ACCEPTED => return Err(Failed::Accepted),
            _ => {}
        }
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        let session = response
            .headers()
            .get(SESSION_HEADER)
            .map(|v| v.as_bytes().to_vec());
        let body = response.into_body().into_reader();
        if !status.is_success() {
            // A JSON-RPC error for this request in an HTTP error (400 for a header mismatch, say)
            // is the service's own answer: passed on as written.
            if status.is_client_error()
                && content_type.starts_with("application/json")
                && let Ok(text) = read_bounded(body)
                && let line = one_line(text.trim())
                && let Ok(envelope) = Envelope::parse(&line)
                && envelope.error.is_some()
                && envelope
                    .id
                    .as_deref()
                    .is_some_and(|id| same_id(id, &request.id))
            {
                self.send(&line);
                return Ok(());
            }
            return Err(Failed::Status(status.as_u16()));
        }
        if request.method == "initialize"
            && let Some(session) = session
        {
            // Visible ASCII only (MCP), so it is safe to send back.
            if session.is_empty()
                || session.len() > 1024
                || !session.iter().all(|b| (0x21..0x7f).contains(b))
            {
                return Err(Failed::Garbled("an unusable Mcp-Session-Id".into()));
            }
            *lock(&self.session) = Some(String::from_utf8_lossy(&session).into_owned());
        }
        if content_type.starts_with("text/event-stream") {
            self.read_events(body, request)
        } else if content_type.starts_with("application/json") {
            let text = read_bounded(body)?;
            let line = one_line(text.trim());
            if Envelope::parse(&line).is_err() {
                return Err(Failed::Garbled("a body that is not JSON-RPC".into()));
            }
            if self.pass_on(&line, request) {
                Ok(())
            } else {
                Err(Failed::NoAnswer)
            }
        } else {
            Err(Failed::Garbled(format!(
                "Content-Type `{}`",
                cajaguard_core::display::name(&content_type.chars().take(80).collect::<String>())
            )))
        }
    }

    /// An event stream: each event's data is one message (notifications, requests of the
    /// service's, then the answer), passed on as it arrives; read until the answer.
    fn read_events(&self, body: impl Read, request: &Request) -> Result<(), Failed> {
        let mut events = SseReader::new(BufReader::with_capacity(64 * 1024, body));
        loop {
            match events.next_event(MAX_ANSWER_BYTES) {
                Ok(Some(Event::Message(data))) => {
                    let line = one_line(data.trim());
                    if line.is_empty() {
                        continue;
                    }
                    if Envelope::parse(&line).is_err() {
                        tracing::warn!("the service sent an event that is not JSON-RPC; ignored");
                        continue;
                    }
                    if self.pass_on(&line, request) {
                        return Ok(());
                    }
                }
                Ok(Some(Event::TooLarge)) => return Err(Failed::TooLarge),
                Ok(None) => return Err(Failed::NoAnswer),
                Err(e) => return Err(body_failure(&e)),
            }
        }
    }

    /// Writes one message of the service's to the client; whether it answers `request`. The
    /// version an `initialize` answer agrees on is kept before the client sees it, so that the
    /// client's next message carries it.
    fn pass_on(&self, line: &str, request: &Request) -> bool {
        let Ok(envelope) = Envelope::parse(line) else {
            return false;
        };
        let answers = envelope.method.is_none()
            && envelope
                .id
                .as_deref()
                .is_some_and(|id| same_id(id, &request.id));
        if answers && request.method == "initialize" {
            self.note_version(envelope.result.as_deref());
        }
        self.send(line);
        answers
    }

    fn note_version(&self, result: Option<&RawValue>) {
        #[derive(serde::Deserialize)]
        struct Initialized {
            #[serde(rename = "protocolVersion")]
            protocol_version: String,
        }
        let Some(version) = result
            .and_then(|r| serde_json::from_str::<Initialized>(r.get()).ok())
            .map(|r| r.protocol_version)
        else {
            return;
        };
        if plain_header(&version) && version.len() <= 64 {
            *lock(&self.protocol_version) = Some(version);
        }
    }
}

/// The same JSON-RPC id, however the service wrote it (`"a"` and `"\u0061"` are one id).
fn same_id(a: &RawValue, b: &RawValue) -> bool {
    a.get() == b.get()
        || serde_json::from_str::<serde_json::Value>(a.get()).ok()
            == serde_json::from_str::<serde_json::Value>(b.get()).ok()
}

fn plain_header(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| (0x21..0x7f).contains(&b))
}

/// A whole JSON body, at most [`MAX_ANSWER_BYTES`].
fn read_bounded(body: impl Read) -> Result<String, Failed> {
    let mut bytes = Vec::new();
    body.take(MAX_ANSWER_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| body_failure(&e))?;
    if bytes.len() > MAX_ANSWER_BYTES {
        return Err(Failed::TooLarge);
    }
    String::from_utf8(bytes).map_err(|_| Failed::Garbled("a body that is not UTF-8".into()))
}

/// A failure before any answer arrived. Refused connections, DNS and TLS failures mean the
/// request never reached the service; anything later may have.
fn transport_failure(e: ureq::Error, timeout: Duration) -> Failed {
    use std::io::ErrorKind;
    match e {
        ureq::Error::Timeout(ureq::Timeout::Resolve | ureq::Timeout::Connect) => {
            Failed::Unreachable("connecting timed out".into())
        }
        ureq::Error::Timeout(_) => Failed::Timeout(timeout),
        ureq::Error::HostNotFound => Failed::Unreachable("host not found".into()),
        ureq::Error::ConnectionFailed => Failed::Unreachable("connection failed".into()),
        ureq::Error::Io(io)
            if matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::AddrNotAvailable
                    | ErrorKind::HostUnreachable
                    | ErrorKind::NetworkUnreachable
            ) =>
        {
            Failed::Unreachable(io.to_string())
        }
        ureq::Error::Io(io) if io.kind() == ErrorKind::TimedOut => Failed::Timeout(timeout),
        ureq::Error::Rustls(tls) => Failed::Unreachable(format!("TLS failed: {tls}")),
        other => Failed::Dropped(other.to_string()),
    }
}

/// A failure while reading an answer's body: the request reached the service.
fn body_failure(e: &std::io::Error) -> Failed {
    let timed_out = e.kind() == std::io::ErrorKind::TimedOut
        || e.get_ref()
            .and_then(|inner| inner.downcast_ref::<ureq::Error>())
            .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)));
    if timed_out {
        Failed::Timeout(CALL_TIMEOUT)
    } else {
        Failed::Dropped(e.to_string())
    }
}

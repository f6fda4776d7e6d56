//! What the shop's HTTP answer means: its status read as an MCP signal (401 a token refused, 404 a
//! session gone, 429/503 slow down, 202 an outcome unknown), its body as one JSON message or an
//! event stream, and a transport failure as a request that did or did not reach the shop.

use std::io::{BufReader, Read};
use std::sync::atomic::Ordering;
use std::time::Duration;

use cajaguard_wire::jsonrpc::{Envelope, one_line};
use cajaguard_wire::sse::{Event, SseReader};
use ureq::http::{Response, StatusCode};

use super::super::{Link, Reply, ShopError, lock};
use super::retry::parse_retry_after;
use super::{HttpLink, Posted, SESSION_HEADER};

impl HttpLink {
    pub(super) fn read_response(
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
                // Not the shop's word on the request (SPEC §4.13: an unexpected status is an
                // unknown outcome): a 5xx may come after the shop acted (a gateway timing out on
                // it), and so may a 408 or a 3xx from something in between, or a 4xx without a
                // JSON-RPC error. (429 and 503, the shop saying it could not take the request at
                // all, were handled above.)
                unknown: true,
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
        body: impl Read + Send + 'static,
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
                self.endpoint.drain.finish(Box::new(events.into_inner()));
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
                    super::super::reply_of(envelope.result, envelope.error).ok()
                } else {
                    tracing::warn!("the shop answered an id the proxy never sent; ignored");
                    None
                }
            }
            (Some(method), Some(shop_id)) => {
                let answer = super::super::answer_to_shop_request(method, shop_id);
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
    pub(super) fn transport_error(&self, e: ureq::Error, timeout: Duration) -> ShopError {
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

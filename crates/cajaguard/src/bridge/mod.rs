//! `cajaguard mcp --connect URL [--token-env VAR]`: a thin bridge from an MCP client that speaks
//! only stdio to a CajaGuard service (`cajaguard serve`, SPEC §13) over MCP Streamable HTTP.
//!
//! Each line the client writes is checked as JSON-RPC (an invalid one is answered here, like the
//! proxy does) and POSTed as written, byte for byte, with `Authorization: Bearer` (the token read
//! once from `VAR`), the `Mcp-Session-Id` the service gave at `initialize`, and
//! `MCP-Protocol-Version`. What comes back, one JSON message or an event stream, goes to stdout one
//! message per line. Requests run on threads of their own (at most [`MAX_CALLS_IN_FLIGHT`]), so a
//! slow call holds up no other; `initialize`, notifications and the client's answers are sent in
//! order on the reading thread, so the service sees `initialize` and `notifications/initialized`
//! before anything else. A request that fails on the way is answered with a JSON-RPC error that
//! says whether the service can have acted on it; nothing is resent. At end of input the bridge
//! waits (bounded) for the calls in flight, ends the session with `DELETE`, and exits 0.
//!
//! [`service`] holds the URL and the token; [`answer`] sends one message and reads its answer.

mod answer;
mod service;

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cajaguard_wire::era::{self, Era};
use cajaguard_wire::jsonrpc::{self, Envelope, Line, Sink};
use serde_json::value::RawValue;

pub use service::{Service, SetupError};

use crate::proxy::MAX_AGENT_MESSAGE_BYTES;

const ACCEPT: &str = "application/json, text/event-stream";
/// Calls in flight at once, like the proxy's bound; more are answered with an error, not a thread.
pub const MAX_CALLS_IN_FLIGHT: usize = 64;
/// The largest message taken from the service (like `downstream.max_message_bytes`' default).
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// How long one request may take, approvals and slow shops included.
const CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// Notifications and the client's answers: nothing waits on their effect.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);
/// Closing the session is a courtesy; it must not hold up exiting.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long end of input waits for the calls still in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// One bridge: the service, the session, and the calls in flight.
pub struct Bridge {
    service: Service,
    out: Sink,
    /// The `Mcp-Session-Id` of the last `initialize`, until the service forgets it.
    session: Mutex<Option<String>>,
    /// The protocol version the last `initialize` agreed on.
    protocol_version: Mutex<Option<String>>,
    in_flight: Mutex<InFlight>,
    idle: Condvar,
}

/// The requests on their threads: how many, and by id whether the client cancelled them.
#[derive(Default)]
struct InFlight {
    count: usize,
    cancelled: HashMap<String, bool>,
}

/// One request of the client's, as it is forwarded.
struct Request {
    id: Box<RawValue>,
    method: String,
    /// The client's line, exactly as written.
    line: String,
    era: Era,
    /// `Mcp-Name` for a 2026-07-28 request that names its target (`tools/call`, `prompts/get`,
    /// `resources/read`).
    name: Option<String>,
}

impl Bridge {
    pub fn new(service: Service, output: Box<dyn Write + Send>) -> Arc<Bridge> {
        Arc::new(Bridge {
            service,
            out: Sink::new(output),
            session: Mutex::new(None),
            protocol_version: Mutex::new(None),
            in_flight: Mutex::new(InFlight::default()),
            idle: Condvar::new(),
        })
    }

    /// Relays the client's messages until end of input, then waits for the calls in flight and
    /// closes the session.
    pub fn serve(self: &Arc<Bridge>, mut input: Box<dyn BufRead + Send>) -> io::Result<()> {
        tracing::info!(service = %self.service.shown, "cajaguard bridging stdio to the service");
        loop {
            match jsonrpc::read_line(&mut input, MAX_AGENT_MESSAGE_BYTES)? {
                Line::Eof => break,
                Line::TooLong { id } => {
                    let id = id.and_then(|id| RawValue::from_string(id).ok());
                    self.send(&jsonrpc::error(
                        id.as_deref(),
                        jsonrpc::INVALID_REQUEST,
                        &format!(
                            "message over {MAX_AGENT_MESSAGE_BYTES} bytes refused by CajaGuard"
                        ),
                    ));
                }
                Line::Message(line) => self.dispatch(line),
            }
        }
        if !self.drain(DRAIN_TIMEOUT) {
            tracing::warn!(
                "calls still in flight after {}s; exiting without their answers",
                DRAIN_TIMEOUT.as_secs()
            );
        }
        self.close();
        Ok(())
    }

    fn dispatch(self: &Arc<Bridge>, line: String) {
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            return;
        }
        if trimmed.starts_with('[') {
            self.send(&jsonrpc::error(
                None,
                jsonrpc::INVALID_REQUEST,
                "JSON-RPC batches are not part of MCP; send one message per line",
            ));
            return;
        }
        let envelope = match Envelope::parse_agent(&line, &|_| false) {
            Ok(envelope) => envelope,
            Err(invalid) => return self.send(&invalid.line()),
        };
        let (method, id) = match (envelope.method, envelope.id) {
            (Some(method), Some(id)) => (method, id),
            (method, _) => {
                // A notification or the client's answer to the service: in order, on this thread.
                if method.as_deref() == Some("notifications/cancelled") {
                    self.note_cancelled(envelope.params.as_deref());
                }
                self.notify(&line);
                return;
            }
        };
        let era = era::of_request(Some(&id), envelope.params.as_deref()).unwrap_or(Era::Legacy);
        let name = match era {
            Era::Modern => target_name(&method, envelope.params.as_deref()),
            Era::Legacy => None,
        };
        let request = Request {
            id,
            method,
            line,
            era,
            name,
        };
        if request.method == "initialize" {
            // The session it opens must be known before the next line is sent.
            self.request(&request);
            return;
        }
        if !self.take_slot(&request.id) {
            self.send(&jsonrpc::error(
                Some(&request.id),
                jsonrpc::OVERLOADED,
                &format!(
                    "more than {MAX_CALLS_IN_FLIGHT} calls in flight; CajaGuard refused this one, retry later"
                ),
            ));
            return;
        }
        let bridge = self.clone();
        let id = request.id.clone();
        let spawned = std::thread::Builder::new()
            .name("bridge-call".into())
            .spawn(move || {
                // A bug must not leave the client waiting for an answer that never comes.
                let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    bridge.request(&request);
                }));
                if done.is_err() {
                    bridge.send(&jsonrpc::error(
                        Some(&request.id),
                        jsonrpc::INTERNAL_ERROR,
                        "the call failed inside CajaGuard's bridge; it may have reached the service",
                    ));
                }
                bridge.release_slot(&request.id);
            });
        if spawned.is_err() {
            self.release_slot(&id);
            self.send(&jsonrpc::error(
                Some(&id),
                jsonrpc::INTERNAL_ERROR,
                "CajaGuard cannot start a thread for this call; it was not sent, retry later",
            ));
        }
    }

    /// Writes one whole line to the client; a client that went away is only logged.
    fn send(&self, line: &str) {
        if let Err(e) = self.out.send(line) {
            tracing::debug!("cannot write to the client: {e}");
        }
    }

    fn take_slot(&self, id: &RawValue) -> bool {
        let mut in_flight = lock(&self.in_flight);
        if in_flight.count >= MAX_CALLS_IN_FLIGHT {
            return false;
        }
        in_flight.count += 1;
        in_flight.cancelled.insert(jsonrpc::id_key(id), false);
        true
    }

    fn release_slot(&self, id: &RawValue) {
        let mut in_flight = lock(&self.in_flight);
        in_flight.count = in_flight.count.saturating_sub(1);
        in_flight.cancelled.remove(&jsonrpc::id_key(id));
        if in_flight.count == 0 {
            self.idle.notify_all();
        }
    }

    /// `notifications/cancelled` for a request in flight: MCP says it gets no answer, so its
    /// failure is not reported either (an answer the service sends anyway is passed on).
    fn note_cancelled(&self, params: Option<&RawValue>) {
        #[derive(serde::Deserialize)]
        struct Cancelled {
            #[serde(rename = "requestId")]
            request_id: Box<RawValue>,
        }
        let Some(cancelled) = params.and_then(|p| serde_json::from_str::<Cancelled>(p.get()).ok())
        else {
            return;
        };
        let key = jsonrpc::id_key(&cancelled.request_id);
        if let Some(flag) = lock(&self.in_flight).cancelled.get_mut(&key) {
            *flag = true;
        }
    }

    fn was_cancelled(&self, id: &RawValue) -> bool {
        lock(&self.in_flight)
            .cancelled
            .get(&jsonrpc::id_key(id))
            .copied()
            .unwrap_or(false)
    }

    /// Waits until no call is in flight, at most `timeout`; whether they all finished.
    fn drain(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut in_flight = lock(&self.in_flight);
        while in_flight.count > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            in_flight = match self.idle.wait_timeout(in_flight, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        true
    }
}

/// The target a 2026-07-28 request names, for the `Mcp-Name` header (`era::target_name`, which
/// the service checks the header against). Only a plain header value is sent.
fn target_name(method: &str, params: Option<&RawValue>) -> Option<String> {
    let value = cajaguard_wire::era::target_name(method, params)?;
    let plain = !value.is_empty()
        && value.len() <= 1024
        && value.bytes().all(|b| (0x21..0x7f).contains(&b));
    plain.then_some(value)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic in a call's thread must not wedge the bridge; the data behind these locks stays valid.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

//! `cajaguard mcp`: an MCP server on stdio in front of the shop.
//!
//! This is a small JSON-RPC relay rather than an MCP SDK server: the envelope is decoded, everything
//! else is forwarded as the peer wrote it (see docs/ARCHITECTURE.md for the measurement behind this
//! choice). Only `complete_checkout` is decoded fully, and only to be gated; it is forwarded with the
//! agent's bytes. Each tool call runs on its own thread, so a slow shop call never stalls the others.
//!
//! This file reads the agent's lines and routes each; `calls.rs` runs tool calls in flight,
//! `complete.rs` gates `complete_checkout`, `update.rs` forwards checkout changes under a lease,
//! `own_tools.rs` serves CajaGuard's tools, `agents.rs` keeps each service agent to its own
//! checkouts, carts and orders, `reconcile.rs` settles payments left in flight,
//! `answer.rs` shapes answers, and `downstream/` is the shop. The wire formats are the
//! `cajaguard-wire` crate's.

#![deny(clippy::print_stdout)]

mod agents;
mod answer;
mod calls;
pub mod checkout;
mod complete;
mod downstream;
mod elicit;
mod own_tools;
mod reconcile;
mod tools;
mod update;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use cajaguard_core::agent::AgentId;
use cajaguard_core::approval::TrustedKeys;
use cajaguard_core::gate;
use cajaguard_core::policy::Policy;
use cajaguard_core::verdict::{Reason, Ruling};
use serde::Deserialize;
use serde_json::value::RawValue;
use time::OffsetDateTime;

pub use answer::{Answer, refusal};
pub(crate) use answer::{shop_failure, tool_result};
use cajaguard_wire::era::{self, Era, ResultKind};
use cajaguard_wire::jsonrpc::{self, Envelope, Line, Sink};
use cajaguard_wire::rawjson;
use calls::CallState;
pub use downstream::{Handshake, Reply, Shop, ShopError};

use crate::store::{AuditEvent, AuditRecord, Store};

/// The clock, injected so that tests decide what "now" is.
pub type Clock = Arc<dyn Fn() -> OffsetDateTime + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(OffsetDateTime::now_utc)
}

/// The largest message accepted from the agent. Arguments of a shopping call are a few KiB.
pub const MAX_AGENT_MESSAGE_BYTES: usize = 1024 * 1024;

/// How deep the JSON of a call may nest: serde_json's own recursion limit, which every parse of
/// agent or shop JSON into a tree goes through (the envelope and raw values are skipped without
/// recursion), so no walk over a parsed value can be deeper.
pub const MAX_JSON_DEPTH: usize = 128;

/// Told to the agent at `initialize` and `server/discover`.
pub const INSTRUCTIONS: &str = "UCP shopping tools pass through CajaGuard. complete_checkout is gated by caps, a merchant allowlist and human approvals; a refusal comes back as a tool result with structuredContent.cajaguard (verdict, reason, detail, next).";

/// One agent's MCP session in front of the shop. `cajaguard mcp` has one; `cajaguard serve` makes
/// one per agent session ([`Proxy::session`]), all sharing the policy, the store, the clock and the
/// one shop link of the process.
pub struct Proxy {
    policy: Arc<Policy>,
    trusted: Arc<TrustedKeys>,
    store: Arc<Store>,
    shop: Arc<Shop>,
    clock: Clock,
    /// The agent this session is (the service's token or OAuth subject); `None` on stdio.
    agent: Option<AgentId>,
    out: Sink,
    calls: Mutex<HashMap<String, CallState>>,
    calls_in_flight: AtomicUsize,
    /// URL-mode elicitation (SPEC §6): what the client declared, and the requests sent already.
    elicitation: elicit::Elicitation,
    /// When this process last wrote an audit log checkpoint (see `Proxy::checkpoint`).
    last_checkpoint: Arc<Mutex<Option<time::OffsetDateTime>>>,
    /// Decisions and latencies, shared by every session (the service's `/metrics`).
    metrics: Arc<crate::metrics::Metrics>,
}

impl Proxy {
    /// Starts the shop (initialize + tools/list) and returns a proxy ready to serve.
    pub fn start(
        policy: Arc<Policy>,
        trusted: TrustedKeys,
        store: Arc<Store>,
        clock: Clock,
        output: Box<dyn Write + Send>,
    ) -> Result<Arc<Proxy>, ShopError> {
        let out = Sink::new(output);
        let forward = out.clone();
        let shop = Shop::new(
            &policy.downstream,
            Arc::new(move |line: &str| {
                let _ = forward.send(line);
            }),
        )?;
        shop.handshake()?;
        let proxy = Arc::new(Proxy {
            policy,
            trusted: Arc::new(trusted),
            store,
            shop: Arc::new(shop),
            clock,
            agent: None,
            out,
            calls: Mutex::new(HashMap::new()),
            calls_in_flight: AtomicUsize::new(0),
            elicitation: elicit::Elicitation::default(),
            last_checkpoint: Arc::new(Mutex::new(None)),
            metrics: Arc::new(crate::metrics::Metrics::new()),
        });
        // Reservations a crash or a silent shop left in flight (SPEC §4.13).
        proxy.spawn_reconciler();
        Ok(proxy)
    }

    /// A new agent session on the same shop link, store and policy (the service, SPEC §13): its
    /// own answers (`output`), calls in flight and elicitation, and `agent` as the payer of every
    /// `complete_checkout` it gates.
    pub fn session(&self, agent: AgentId, output: Box<dyn Write + Send>) -> Arc<Proxy> {
        Arc::new(Proxy {
            policy: self.policy.clone(),
            trusted: self.trusted.clone(),
            store: self.store.clone(),
            shop: self.shop.clone(),
            clock: self.clock.clone(),
            agent: Some(agent),
            out: Sink::new(output),
            calls: Mutex::new(HashMap::new()),
            calls_in_flight: AtomicUsize::new(0),
            elicitation: elicit::Elicitation::default(),
            last_checkpoint: self.last_checkpoint.clone(),
            metrics: self.metrics.clone(),
        })
    }

    /// The agent this session is, if any.
    pub fn agent(&self) -> Option<&AgentId> {
        self.agent.as_ref()
    }

    /// What `/metrics` serves: this process's decisions and latencies, and the store's gauges.
    pub fn metrics_text(&self) -> String {
        self.metrics
            .render(&self.policy, &self.store, (self.clock)())
    }

    /// The store this proxy gates with (the service reads agent tokens and metrics from it).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// One message from the agent, as one line of `cajaguard mcp`'s stdio would carry it. Its
    /// answer (if any) is written to the session's output, at once or from the call's thread.
    pub fn handle_message(self: &Arc<Proxy>, message: String) {
        self.dispatch(message, CallsOn::OwnThread);
    }

    /// [`Proxy::handle_message`] for a caller that gave this message a thread of its own (the
    /// service, on the thread that read it, one message per admission): a tool call runs here, to its
    /// end, instead of on a thread started for it. Returns once the answer (if any) is written.
    pub fn handle_message_here(self: &Arc<Proxy>, message: String) {
        self.dispatch(message, CallsOn::ThisThread);
    }

    /// Writes an audit log checkpoint now (the service at shutdown).
    pub fn checkpoint_now(&self) {
        self.checkpoint(true);
    }

    /// Reads the agent's messages until end of input. Returns when the agent hangs up.
    pub fn serve(self: &Arc<Proxy>, mut input: Box<dyn BufRead + Send>) -> std::io::Result<()> {
        loop {
            let line = match jsonrpc::read_line(&mut input, MAX_AGENT_MESSAGE_BYTES)? {
                Line::Eof => {
                    self.checkpoint(true);
                    return Ok(());
                }
                Line::TooLong { id } => {
                    let id = id.and_then(|id| RawValue::from_string(id).ok());
                    self.send(&jsonrpc::error(
                        id.as_deref(),
                        jsonrpc::INVALID_REQUEST,
                        &format!(
                            "message over {MAX_AGENT_MESSAGE_BYTES} bytes refused by CajaGuard"
                        ),
                    ));
                    continue;
                }
                Line::Message(line) => line,
            };
            self.dispatch(line, CallsOn::OwnThread);
        }
    }

    fn dispatch(self: &Arc<Proxy>, line: String, calls_on: CallsOn) {
        // A line break is JSON whitespace between tokens, but to a stdio shop it ends a message:
        // one left in `params` would make the rest of the line a request of its own, forwarded
        // past the gate. So none ever gets that far (a `\r` inside a stdio line included; an
        // HTTP body may hold any number). Spaces change no JSON value.
        let line = if line.contains(['\n', '\r']) {
            jsonrpc::one_line(&line)
        } else {
            line
        };
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            return;
        }
        if trimmed.starts_with('[') {
            self.send(&jsonrpc::error(
                None,
                jsonrpc::INVALID_REQUEST,
                "JSON-RPC batches are refused by CajaGuard",
            ));
            return;
        }
        let envelope = match Envelope::parse_agent(&line, &known_method) {
            Ok(envelope) => envelope,
            Err(invalid) => return self.send(&invalid.line()),
        };
        let Some(method) = envelope.method.as_deref() else {
            // An answer to a request the proxy never makes of the agent.
            return;
        };
        let Some(id) = envelope.id.as_deref() else {
            self.notification(method, envelope.params.as_deref());
            return;
        };
        let era = match era::of_request(Some(id), envelope.params.as_deref()) {
            Ok(era) => era,
            Err(era::EnvelopeError(line)) => return self.send(&line),
        };
        let answer = match method {
            "initialize" => self.initialize(envelope.params.as_deref()),
            "server/discover" => Answer::Result(era::discover_result(&server_info(), INSTRUCTIONS)),
            "ping" => Answer::Result("{}".to_owned()),
            "tools/list" => self.list_tools(id),
            "tools/call" => return self.spawn_call(envelope, era, calls_on),
            _ => Answer::ErrorLine(jsonrpc::error(
                Some(id),
                jsonrpc::METHOD_NOT_FOUND,
                &format!(
                    "{} is not offered through CajaGuard",
                    cajaguard_core::display::name(method)
                ),
            )),
        };
        let kind = if method == "tools/list" {
            ResultKind::List
        } else {
            ResultKind::Other
        };
        self.respond(id, answer, era, kind);
    }

    /// Sends an answer in the agent's era: a modern agent gets the fields its era requires.
    fn respond(&self, id: &RawValue, answer: Answer, era: Era, kind: ResultKind) {
        let line = match answer {
            Answer::Result(result) if era == Era::Modern => {
                jsonrpc::result(id, &era::modern_result(&result, kind))
            }
            Answer::Result(result) => jsonrpc::result(id, &result),
            Answer::ForwardedError(error) => jsonrpc::raw_error(id, &error),
            Answer::ErrorLine(line) => line,
        };
        self.send(&line);
    }

    fn initialize(&self, params: Option<&RawValue>) -> Answer {
        #[derive(serde::Deserialize)]
        struct Requested {
            #[serde(rename = "protocolVersion")]
            protocol_version: Option<String>,
        }
        self.elicitation.declare(params);
        let requested = params
            .and_then(|p| serde_json::from_str::<Requested>(p.get()).ok())
            .and_then(|r| r.protocol_version);
        let version = requested
            .as_deref()
            .and_then(|v| era::LEGACY_VERSIONS.iter().find(|known| **known == v))
            .copied()
            .unwrap_or(era::LEGACY_VERSIONS[0]);
        Answer::Result(format!(
            r#"{{"protocolVersion":"{version}","capabilities":{{"tools":{{"listChanged":false}}}},"serverInfo":{},"instructions":{}}}"#,
            server_info(),
            jsonrpc::quote(INSTRUCTIONS)
        ))
    }

    fn list_tools(&self, id: &RawValue) -> Answer {
        let handshake = match self.shop.handshake() {
            Ok(handshake) => handshake,
            Err(e) => {
                return Answer::ErrorLine(jsonrpc::error(
                    Some(id),
                    jsonrpc::SHOP_UNAVAILABLE,
                    &e.to_string(),
                ));
            }
        };
        let mut list = String::from(r#"{"tools":["#);
        let offered = handshake
            .tools
            .iter()
            .filter(|tool| tools::tool_name(tool).is_some_and(|name| tools::is_ucp_tool(&name)))
            .map(|tool| tool.get());
        for (i, tool) in offered.chain(tools::own_tools()).enumerate() {
            if i > 0 {
                list.push(',');
            }
            list.push_str(tool);
        }
        list.push_str("]}");
        Answer::Result(list)
    }

    /// One `tools/call`.
    fn call_tool(&self, id: &RawValue, params: Option<&RawValue>) -> Answer {
        #[derive(serde::Deserialize)]
        struct Call {
            name: String,
            #[serde(default)]
            arguments: Option<serde_json::Value>,
        }
        let Some(params) = params else {
            return Answer::ErrorLine(jsonrpc::error(
                Some(id),
                jsonrpc::INVALID_PARAMS,
                "tools/call needs params",
            ));
        };
        let parsed = serde_json::from_str::<serde_json::Value>(params.get())
            .and_then(|whole| Call::deserialize(&whole).map(|call| (whole, call)));
        let (whole, call) = match parsed {
            Ok(parsed) => parsed,
            Err(e) => {
                // serde_json stops at 128 levels of nesting, before any recursive walk of ours
                // (duplicate keys, tripwire) could run out of stack; say so plainly.
                let message = if rawjson::is_too_deep(&e) {
                    format!(
                        "tools/call params nested more than {MAX_JSON_DEPTH} levels deep are refused by CajaGuard"
                    )
                } else {
                    format!("bad tools/call params: {e}")
                };
                return Answer::ErrorLine(jsonrpc::error(
                    Some(id),
                    jsonrpc::INVALID_PARAMS,
                    &message,
                ));
            }
        };
        if let Some(ruling) = inexact_call_key(&whole) {
            self.audit_refusal(&cajaguard_core::display::name(&call.name), &ruling);
            return refusal(&ruling);
        }
        let arguments = call.arguments.unwrap_or(serde_json::Value::Null);
        if !(arguments.is_object() || arguments.is_null()) {
            // MCP's `arguments` is an object; a shop that decoded a string or an array would
            // read what none of the checks here did.
            let ruling = Ruling::new(
                Reason::BadRequest,
                "tools/call `arguments` must be a JSON object",
            );
            self.audit_refusal(&cajaguard_core::display::name(&call.name), &ruling);
            return refusal(&ruling);
        }
        if let Some(ruling) = self.foreign_object_refusal(&call.name, &arguments) {
            self.audit_refusal(&call.name, &ruling);
            return refusal(&ruling);
        }
        match call.name.as_str() {
            tools::STATUS_TOOL => self.status_tool(),
            tools::APPROVAL_STATUS_TOOL => self.approval_status_tool(&arguments),
            tools::FREEZE_TOOL => self.freeze_tool(&arguments),
            tools::GATED_TOOL => {
                self.mark_payment(id);
                self.complete_checkout(id, params, &whole, &arguments)
            }
            name if tools::is_ucp_tool(name) && self.shop_offers(name) => {
                if let Some(ruling) = self.forwarding_refusal(params, &whole) {
                    self.audit_refusal(&call.name, &ruling);
                    return refusal(&ruling);
                }
                // A service session's were checked with its binding, above.
                if self.agent.is_none()
                    && let Some(ruling) = agents::argument_refusal(name, &arguments)
                {
                    self.audit_refusal(&call.name, &ruling);
                    return refusal(&ruling);
                }
                if tools::changes_checkout(name) {
                    return self.forward_update(id, name, params.get(), &arguments);
                }
                let answer = self.forward(id, params.get());
                if name == "get_checkout" {
                    self.bind_order_shown(&arguments, &answer);
                }
                self.bind_made(name, answer)
            }
            _ => {
                let ruling = Ruling::new(
                    Reason::ToolNotAllowed,
                    "this tool is not one of the UCP shopping tools CajaGuard passes through",
                );
                self.audit_refusal(&cajaguard_core::display::name(&call.name), &ruling);
                refusal(&ruling)
            }
        }
    }

    /// What refuses any call before it is forwarded, whatever the tool: a duplicate key anywhere
    /// (the shop's parser might keep the copy the tripwire did not read), then the tripwire on the
    /// whole `params` (SPEC §3, §5).
    fn forwarding_refusal(&self, params: &RawValue, whole: &serde_json::Value) -> Option<Ruling> {
        match rawjson::find_duplicate_key(params.get()) {
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => {
                // The key is not named: it could be anything the agent sent.
                return Some(Ruling::new(
                    Reason::BadRequest,
                    "the call holds a duplicate JSON key; the shop might read the other copy",
                ));
            }
        }
        gate::tripwire_params_ruling(&self.policy, params.get(), whole)
    }

    fn shop_offers(&self, name: &str) -> bool {
        self.shop.offers(name).unwrap_or(false)
    }

    /// Forwards a call unchanged and passes the shop's answer back unchanged.
    fn forward(&self, id: &RawValue, params: &str) -> Answer {
        match self.shop_request(id, "tools/call", params, None) {
            Ok(Reply::Result(result)) => Answer::Result(result.get().to_owned()),
            Ok(Reply::Error(error)) => Answer::ForwardedError(error),
            Err(e) => shop_failure(&e),
        }
    }

    /// An audit record for `tool` at the current time, the rest to be filled by the caller.
    /// A checkpoint of the audit log after a write batch (SPEC §8): after a payment, at most once
    /// a second (the next one covers whatever came between; records without a checkpoint yet
    /// still verify, they are only not anchored), and always when `force` (the agent hung up).
    /// Outside the gate's transaction, so it costs the decision nothing; a failure is logged,
    /// never a refusal (the records it would cover are already committed).
    fn checkpoint(&self, force: bool) {
        let now = (self.clock)();
        {
            let mut last = lock(&self.last_checkpoint);
            // A clock that went back counts as time passed, not as a reason never to checkpoint.
            if !force && last.is_some_and(|at| now >= at && now - at < time::Duration::SECOND) {
                return;
            }
            *last = Some(now);
        }
        if let Err(e) = self.store.checkpoint_in_passing(now) {
            tracing::warn!(error = %e, "cannot write an audit log checkpoint");
        }
    }

    /// A record for `tool` now, of this session's agent (through the service).
    fn audit_record(&self, tool: &str) -> AuditRecord {
        let mut record = AuditRecord::new((self.clock)(), tool);
        record.agent = self.agent.as_ref().map(|a| a.as_str().to_owned());
        record
    }

    fn audit_refusal(&self, tool: &str, ruling: &Ruling) {
        let mut record = self.audit_record(tool);
        record.request_id = ruling.request_id().as_ref().map(|r| r.as_str().to_owned());
        if let Err(e) = self
            .store
            .audit(AuditEvent::Ruled(ruling.reason()), &record)
        {
            tracing::error!("audit record not written: {e}");
        }
    }

    fn send(&self, line: &str) {
        if let Err(e) = self.out.send(line) {
            tracing::error!("cannot write to the agent: {e}");
        }
    }
}

/// Where a tool call runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallsOn {
    /// A thread of its own (or inline to a stdio shop): the caller is a reader that must go on
    /// reading.
    OwnThread,
    /// The caller's thread, which is the message's own.
    ThisThread,
}

/// Methods the proxy serves (bad `params` for them are -32602, not -32600).
pub(crate) fn known_method(method: &str) -> bool {
    matches!(
        method,
        "initialize" | "server/discover" | "ping" | "tools/list" | "tools/call"
    ) || method.starts_with("notifications/")
}

fn server_info() -> String {
    format!(
        r#"{{"name":"cajaguard","title":"CajaGuard spend gate","version":"{}"}}"#,
        env!("CARGO_PKG_VERSION")
    )
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The refusal of `tools/call` params holding a key that a case-insensitive parser reads as
/// `name` or `arguments` but that is not it (`Arguments`, `NAME`): such a shop would take its
/// tool or arguments from what no check here read (the copy read here is then absent).
fn inexact_call_key(whole: &serde_json::Value) -> Option<Ruling> {
    let object = whole.as_object()?;
    let key = object.keys().find(|key| {
        !matches!(key.as_str(), "name" | "arguments")
            && matches!(rawjson::folded(key).as_str(), "name" | "arguments")
    })?;
    Some(Ruling::new(
        Reason::BadRequest,
        format!(
            "tools/call params hold `{}`, which a shop that reads keys ignoring case takes for `{}`; send it as written in MCP",
            cajaguard_core::display::name(key),
            rawjson::folded(key)
        ),
    ))
}

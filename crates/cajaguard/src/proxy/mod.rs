//! `cajaguard mcp`: an MCP server on stdio in front of the shop.
//!
//! This is a small JSON-RPC relay rather than an MCP SDK server: the envelope is decoded, everything
//! else is forwarded as the peer wrote it (see docs/ARCHITECTURE.md for the measurement behind this
//! choice). Only `complete_checkout` is decoded fully, and only to be gated; it is forwarded with the
//! agent's bytes. Each tool call runs on its own thread, so a slow shop call never stalls the others.

#![deny(clippy::print_stdout)]

pub mod checkout;
mod complete;
mod downstream;
mod reconcile;
mod tools;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cajaguard_core::approval::{RequestId, TrustedKeys};
use cajaguard_core::gate::{self, Reason, Ruling};
use cajaguard_core::policy::Policy;
use serde::Deserialize;
use serde_json::value::RawValue;
use time::OffsetDateTime;

use cajaguard_wire::era::{self, Era, ResultKind};
use cajaguard_wire::jsonrpc::{self, Envelope, Line, Sink};
use cajaguard_wire::rawjson::{self, RawObject};
use downstream::Done;
pub use downstream::{Handshake, Reply, Shop, ShopError};

use crate::store::{ApprovalStatus, AuditRecord, Conflict, Store};

/// The clock, injected so that tests decide what "now" is.
pub type Clock = Arc<dyn Fn() -> OffsetDateTime + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(OffsetDateTime::now_utc)
}

/// Agents may not keep more tool calls than this in flight at once: a call storm is answered with
/// errors instead of threads.
const MAX_CALLS_IN_FLIGHT: usize = 64;

/// The largest message accepted from the agent. Arguments of a shopping call are a few KiB.
pub const MAX_AGENT_MESSAGE_BYTES: usize = 1024 * 1024;

/// How deep the JSON of a call may nest: serde_json's own recursion limit, which every parse of
/// agent or shop JSON into a tree goes through (the envelope and raw values are skipped without
/// recursion), so no walk over a parsed value can be deeper.
pub const MAX_JSON_DEPTH: usize = 128;

/// Told to the agent at `initialize` and `server/discover`.
pub const INSTRUCTIONS: &str = "UCP shopping tools pass through CajaGuard. complete_checkout is gated by caps, a merchant allowlist and human approvals; a refusal comes back as a tool result with structuredContent.cajaguard (verdict, reason, detail, next).";

/// What one request is answered with, before the era's envelope is applied.
pub enum Answer {
    /// A result object (JSON).
    Result(String),
    /// An error object the shop sent, passed on unchanged.
    ShopError(Box<RawValue>),
    /// A whole error line made by the proxy.
    ErrorLine(String),
}

pub struct Proxy {
    policy: Arc<Policy>,
    trusted: TrustedKeys,
    store: Store,
    shop: Shop,
    clock: Clock,
    out: Sink,
    calls: Mutex<HashMap<String, CallState>>,
    calls_in_flight: AtomicUsize,
}

#[derive(Default)]
struct CallState {
    shop_id: Option<u64>,
    cancelled: bool,
}

impl Proxy {
    /// Starts the shop (initialize + tools/list) and returns a proxy ready to serve.
    pub fn start(
        policy: Arc<Policy>,
        trusted: TrustedKeys,
        store: Store,
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
            trusted,
            store,
            shop,
            clock,
            out,
            calls: Mutex::new(HashMap::new()),
            calls_in_flight: AtomicUsize::new(0),
        });
        // Reservations a crash or a silent shop left in flight (SPEC §4.13).
        proxy.spawn_reconciler();
        Ok(proxy)
    }

    /// Reads the agent's messages until end of input. Returns when the agent hangs up.
    pub fn serve(self: &Arc<Proxy>, mut input: Box<dyn BufRead + Send>) -> std::io::Result<()> {
        loop {
            let line = match jsonrpc::read_line(&mut input, MAX_AGENT_MESSAGE_BYTES)? {
                Line::Eof => return Ok(()),
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
            self.dispatch(line);
        }
    }

    fn dispatch(self: &Arc<Proxy>, line: String) {
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
            "tools/call" => return self.spawn_call(envelope, era),
            _ => Answer::ErrorLine(jsonrpc::error(
                Some(id),
                jsonrpc::METHOD_NOT_FOUND,
                &format!(
                    "{} is not offered through CajaGuard",
                    sanitize_tool_name(method)
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
            Answer::ShopError(error) => jsonrpc::raw_error(id, &error),
            Answer::ErrorLine(line) => line,
        };
        self.send(&line);
    }

    fn notification(&self, method: &str, params: Option<&RawValue>) {
        if method != "notifications/cancelled" {
            return;
        }
        let Some(raw) = params else { return };
        // Forwarded to the shop, so held to what a call is: no duplicate key, nothing the
        // tripwire refuses. Dropped quietly (a notification has no answer), never logged with
        // its content.
        let clean = serde_json::from_str::<serde_json::Value>(raw.get())
            .is_ok_and(|whole| self.forwarding_refusal(raw, &whole).is_none());
        if !clean {
            tracing::warn!(
                "a cancellation the tripwire or the duplicate-key check refused was not forwarded"
            );
            return;
        }
        let Some(mut params) = RawObject::parse(raw.get()) else {
            return;
        };
        let Some(request_id) = params.get("requestId").map(jsonrpc::id_key) else {
            return;
        };
        let shop_id = {
            let mut calls = lock(&self.calls);
            let Some(call) = calls.get_mut(&request_id) else {
                return;
            };
            call.cancelled = true;
            call.shop_id
        };
        if let Some(shop_id) = shop_id {
            // The shop knows the request by the proxy's id; everything else (reason) is the agent's.
            if let Ok(id) = RawValue::from_string(shop_id.to_string()) {
                params.set("requestId", id);
                self.shop.notify(&jsonrpc::notification(
                    "notifications/cancelled",
                    Some(&params.to_json()),
                ));
            }
        }
    }

    fn initialize(&self, params: Option<&RawValue>) -> Answer {
        #[derive(serde::Deserialize)]
        struct Requested {
            #[serde(rename = "protocolVersion")]
            protocol_version: Option<String>,
        }
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

    fn spawn_call(self: &Arc<Proxy>, envelope: Envelope, era: Era) {
        let Some(id) = envelope.id else { return };
        if self.calls_in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_CALLS_IN_FLIGHT {
            self.calls_in_flight.fetch_sub(1, Ordering::AcqRel);
            self.send(&jsonrpc::error(
                Some(&id),
                jsonrpc::OVERLOADED,
                &format!("more than {MAX_CALLS_IN_FLIGHT} calls in flight; CajaGuard refused this one, retry later"),
            ));
            return;
        }
        lock(&self.calls).insert(jsonrpc::id_key(&id), CallState::default());
        let params = envelope.params;
        if let Some(raw) = params.as_deref()
            && self.forward_inline(&id, raw, era)
        {
            return;
        }
        let proxy = self.clone();
        let call_id = id.clone();
        let spawned = std::thread::Builder::new()
            .name("tool-call".into())
            .spawn(move || {
                // A bug must not leave the agent waiting for an answer that never comes: a panic is
                // answered as an internal error (a payment already reserved stays counted).
                let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    proxy.call_tool(&call_id, params.as_deref())
                }))
                .unwrap_or_else(|_| {
                    tracing::error!(
                        "a tool call failed inside CajaGuard; answered as an internal error"
                    );
                    Answer::ErrorLine(jsonrpc::error(
                        Some(&call_id),
                        jsonrpc::INTERNAL_ERROR,
                        "CajaGuard failed on this call; nothing was forwarded after the failure",
                    ))
                });
                proxy.finish_call(&call_id, answer, era);
            });
        if spawned.is_err() {
            tracing::error!("cannot start a thread for a tool call");
            self.finish_call(
                &id,
                Answer::ErrorLine(jsonrpc::error(
                    Some(&id),
                    jsonrpc::OVERLOADED,
                    "CajaGuard cannot take this call now (no thread); retry later",
                )),
                era,
            );
        }
    }

    /// The fast path for a plain forwarded call (not gated, not ours, tripwire clean, shop live over
    /// stdio): written to the shop from this thread, answered to the agent from the shop's reader,
    /// with no thread started and no hand-off in between. `false`: take the ordinary path.
    fn forward_inline(self: &Arc<Proxy>, id: &RawValue, params: &RawValue, era: Era) -> bool {
        let Ok(whole) = serde_json::from_str::<serde_json::Value>(params.get()) else {
            return false;
        };
        let Some(name) = whole.get("name").and_then(serde_json::Value::as_str) else {
            return false;
        };
        // The gated tool and the ones that change a checkout (they take a lease in the store)
        // take the ordinary path.
        if name == tools::GATED_TOOL || tools::changes_checkout(name) || !tools::is_ucp_tool(name) {
            return false;
        }
        // A refusal is audited, which writes to the store: not on the agent's reader.
        if self.forwarding_refusal(params, &whole).is_some() {
            return false;
        }
        let key = jsonrpc::id_key(id);
        let Ok(id) = RawValue::from_string(id.get().to_owned()) else {
            return false;
        };
        let proxy = self.clone();
        let done: Done = Box::new(move |reply| {
            let answer = match reply {
                Ok(Reply::Result(result)) => Answer::Result(result.get().to_owned()),
                Ok(Reply::Error(error)) => Answer::ShopError(error),
                Err(e) => shop_failure(&e),
            };
            proxy.finish_call(&id, answer, era);
        });
        if !self.shop.offers_live(name) {
            return false;
        }
        let sent = self.shop.request_detached(
            "tools/call",
            Some(params.get()),
            &mut |shop_id| {
                if let Some(call) = lock(&self.calls).get_mut(&key) {
                    call.shop_id = Some(shop_id);
                }
            },
            done,
        );
        sent.is_ok()
    }

    /// Answers a tool call unless the agent cancelled it (MCP: no answer to a cancelled request).
    fn finish_call(&self, id: &RawValue, answer: Answer, era: Era) {
        let cancelled = lock(&self.calls)
            .remove(&jsonrpc::id_key(id))
            .is_some_and(|c| c.cancelled);
        if !cancelled {
            self.respond(id, answer, era, ResultKind::Other);
        }
        self.calls_in_flight.fetch_sub(1, Ordering::AcqRel);
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
                let message = if e.to_string().contains("recursion limit") {
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
        let arguments = call.arguments.unwrap_or(serde_json::Value::Null);
        match call.name.as_str() {
            tools::STATUS_TOOL => self.status_tool(),
            tools::APPROVAL_STATUS_TOOL => self.approval_status_tool(&arguments),
            tools::FREEZE_TOOL => self.freeze_tool(&arguments),
            tools::GATED_TOOL => self.complete_checkout(id, params, &whole, &arguments),
            name if tools::is_ucp_tool(name) && self.shop_offers(name) => {
                if let Some(ruling) = self.forwarding_refusal(params, &whole) {
                    self.audit_refusal(&call.name, &ruling);
                    return refusal(&ruling);
                }
                if tools::changes_checkout(name) {
                    return self.forward_update(id, name, params.get(), &arguments);
                }
                self.forward(id, params.get())
            }
            _ => {
                let ruling = Ruling::new(
                    Reason::ToolNotAllowed,
                    "this tool is not one of the UCP shopping tools CajaGuard passes through",
                );
                self.audit_refusal(&sanitize_tool_name(&call.name), &ruling);
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
        gate::tripwire_params_ruling(&self.policy, whole)
    }

    fn shop_offers(&self, name: &str) -> bool {
        self.shop.offers(name).unwrap_or(false)
    }

    /// Forwards a call unchanged and passes the shop's answer back unchanged.
    fn forward(&self, id: &RawValue, params: &str) -> Answer {
        match self.shop_request(id, "tools/call", params) {
            Ok(Reply::Result(result)) => Answer::Result(result.get().to_owned()),
            Ok(Reply::Error(error)) => Answer::ShopError(error),
            Err(e) => shop_failure(&e),
        }
    }

    /// `update_checkout` / `cancel_checkout` (SPEC §4 step 3a): refused while a payment holds the
    /// checkout, and holding a lease in the store while on its way, so that no payment reads the
    /// checkout back while this call could still change it.
    fn forward_update(
        &self,
        id: &RawValue,
        tool: &str,
        params: &str,
        arguments: &serde_json::Value,
    ) -> Answer {
        // The id names the checkout the lease keeps payments off: any other shape could reach a
        // lenient shop as that checkout while no lease covers it.
        let checkout_id = match arguments.get("id").and_then(|v| v.as_str()) {
            Some(checkout_id) if cajaguard_core::request::is_plain_id(checkout_id) => checkout_id,
            _ => {
                let ruling = Ruling::new(
                    Reason::BadRequest,
                    format!(
                        "{tool} needs `id`, the checkout id, as a non-empty string without spaces or control characters"
                    ),
                );
                self.audit_refusal(tool, &ruling);
                return refusal(&ruling);
            }
        };
        // Longer than the call can take: a wait for the connection, a new handshake, one resend.
        let lasts = self.shop.timeout().saturating_mul(4);
        let mut leased =
            self.store
                .begin_update(checkout_id, (self.clock)(), lasts, self.stale_after());
        if let Ok(Err(Conflict::PaymentInFlight)) = &leased {
            // The payment's outcome may be known by now (completed, or stale and open).
            let agent = arguments
                .pointer("/meta/ucp-agent")
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            self.reconcile_checkout(checkout_id, &agent);
            leased =
                self.store
                    .begin_update(checkout_id, (self.clock)(), lasts, self.stale_after());
        }
        let lease = match leased {
            Ok(Ok(lease)) => lease,
            Ok(Err(_)) => {
                let ruling = Ruling::new(
                    Reason::PaymentInFlight,
                    format!(
                        "a payment of this checkout is in flight; {tool} is refused until it is settled, so the basket the shop completes is the basket the gate checked"
                    ),
                );
                self.audit_refusal(tool, &ruling);
                return refusal(&ruling);
            }
            Err(e) => {
                let ruling = Ruling::new(
                    Reason::StoreUnavailable,
                    format!("the CajaGuard store failed, so {tool} was not forwarded: {e}"),
                );
                self.audit_refusal(tool, &ruling);
                return refusal(&ruling);
            }
        };
        let reply = self.shop_request(id, "tools/call", params);
        // An update whose answer never came may still be applied by the shop: its lease then
        // lapses on its own, after any live call on it has given up.
        if !matches!(&reply, Err(e) if e.outcome_unknown())
            && let Err(e) = self.store.end_update(lease)
        {
            tracing::warn!("update lease not ended, it lapses on its own: {e}");
        }
        match reply {
            Ok(Reply::Result(result)) => Answer::Result(result.get().to_owned()),
            Ok(Reply::Error(error)) => Answer::ShopError(error),
            Err(e) => shop_failure(&e),
        }
    }

    /// `cajaguard_freeze`: an agent may stop payments; nothing an agent calls starts them again.
    fn freeze_tool(&self, arguments: &serde_json::Value) -> Answer {
        let reason = arguments
            .get("reason")
            .and_then(|v| v.as_str())
            .map(audit_text)
            .unwrap_or_else(|| "frozen by the agent".to_owned());
        let mut record = self.audit_record(tools::FREEZE_TOOL);
        record.verdict = "frozen".into();
        record.reason = "frozen_by_agent".into();
        record.note = Some(reason.clone());
        match self.store.freeze(&reason, (self.clock)(), &record) {
            Ok(frozen) => tool_result(
                &serde_json::json!({
                    "frozen": { "at": frozen.stamp(), "reason": frozen.reason },
                    "next": "a human runs `cajaguard unfreeze --config FILE` to let payments through again",
                }),
                false,
            ),
            Err(e) => tool_result(&serde_json::json!({"error": e.to_string()}), true),
        }
    }

    fn shop_request(&self, id: &RawValue, method: &str, params: &str) -> Result<Reply, ShopError> {
        let key = jsonrpc::id_key(id);
        self.shop.request(method, Some(params), &mut |shop_id| {
            if let Some(call) = lock(&self.calls).get_mut(&key) {
                call.shop_id = Some(shop_id);
            }
        })
    }

    fn status_tool(&self) -> Answer {
        match crate::status::document_with(&self.policy, &self.store, &self.trusted, (self.clock)())
        {
            Ok(document) => tool_result(&document, false),
            Err(e) => tool_result(&serde_json::json!({"error": e.to_string()}), true),
        }
    }

    fn approval_status_tool(&self, arguments: &serde_json::Value) -> Answer {
        let status = match arguments
            .get("request_id")
            .and_then(|v| v.as_str())
            .map(RequestId::parse)
        {
            Some(Ok(request_id)) => {
                match self.store.approval_status(
                    &request_id,
                    &self.trusted,
                    (self.clock)(),
                    self.policy.approvals.max_ttl,
                ) {
                    Ok(status) => status,
                    Err(e) => {
                        return tool_result(&serde_json::json!({"error": e.to_string()}), true);
                    }
                }
            }
            _ => ApprovalStatus::Invalid,
        };
        let status = match status {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Used => "used",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Invalid => "invalid",
        };
        tool_result(&serde_json::json!({ "status": status }), false)
    }

    /// An audit record for `tool` at the current time, the rest to be filled by the caller.
    fn audit_record(&self, tool: &str) -> AuditRecord {
        AuditRecord::new((self.clock)(), tool)
    }

    fn audit_refusal(&self, tool: &str, ruling: &Ruling) {
        let mut record = self.audit_record(tool);
        record.verdict = ruling.verdict.as_str().to_owned();
        record.reason = ruling.reason.as_str().to_owned();
        record.request_id = ruling.request_id.as_ref().map(|r| r.as_str().to_owned());
        if let Err(e) = self.store.audit(&record) {
            tracing::error!("audit record not written: {e}");
        }
    }

    fn send(&self, line: &str) {
        if let Err(e) = self.out.send(line) {
            tracing::error!("cannot write to the agent: {e}");
        }
    }
}

/// Methods the proxy serves (bad `params` for them are -32602, not -32600).
fn known_method(method: &str) -> bool {
    matches!(
        method,
        "initialize" | "server/discover" | "ping" | "tools/list" | "tools/call"
    ) || method.starts_with("notifications/")
}

/// A refusal as the agent sees it: a tool result with `isError`, the ruling in `structuredContent`
/// and, as JSON, in the text content.
pub fn refusal(ruling: &Ruling) -> Answer {
    tool_result(&ruling.to_json(), true)
}

pub(crate) fn tool_result(document: &serde_json::Value, is_error: bool) -> Answer {
    let text = document.to_string();
    let result = serde_json::json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": document,
        "isError": is_error,
    });
    Answer::Result(result.to_string())
}

/// A shop that failed to answer a forwarded call: a tool error the agent can read, never a hang.
pub(crate) fn shop_failure(error: &ShopError) -> Answer {
    let document = serde_json::json!({ "cajaguard": { "error": "shop_unavailable", "detail": error.to_string() } });
    tool_result(&document, true)
}

fn server_info() -> String {
    format!(
        r#"{{"name":"cajaguard","title":"CajaGuard spend gate","version":"{}"}}"#,
        env!("CARGO_PKG_VERSION")
    )
}

/// Names the agent chose (tools, methods) as they go into the audit log and error messages: at
/// most 64 characters, printable ASCII as is and everything else as `\u{..}`. MCP tool names are
/// ASCII, so nothing real is lost, while a control character, a bidi override, a zero-width space
/// or a homoglyph (`сomplete_checkout` with a Cyrillic `с`) shows as what it is instead of passing
/// for the real tool or rewriting a terminal.
pub(crate) fn sanitize_tool_name(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if i == 64 {
            out.push('…');
            break;
        }
        if c.is_ascii_graphic() || c == ' ' {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        }
    }
    out
}

/// Agent or shop text kept in the audit log (checkout ids, idempotency keys, currencies): control,
/// bidi and invisible formatting characters written as `\u{..}`, so that reading the log in a
/// terminal can neither run escape sequences nor show one id disguised as another. Other Unicode
/// stays as it is. At most 256 characters.
pub(crate) fn audit_text(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == 256 {
            out.push('…');
            break;
        }
        if is_invisible(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Control characters, and the format characters that change how text around them looks (bidi
/// overrides and isolates, zero-width joiners and spaces, the BOM, variation and tag characters).
pub(crate) fn is_invisible(c: char) -> bool {
    c.is_control()
        || matches!(u32::from(c),
            0xad | 0x34f | 0x61c | 0x115f..=0x1160 | 0x17b4..=0x17b5 | 0x180b..=0x180f
            | 0x200b..=0x200f | 0x2028..=0x202e | 0x2060..=0x206f | 0x3164 | 0xfe00..=0xfe0f
            | 0xfeff | 0xffa0 | 0xfff0..=0xfffb | 0xe0000..=0xe0fff)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

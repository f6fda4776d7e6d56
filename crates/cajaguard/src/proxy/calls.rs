//! Tool calls in flight: each on a thread of its own (or, for a plain forwarded call, written to
//! the shop and answered from its reader with no thread at all), at most [`MAX_CALLS_IN_FLIGHT`] at
//! once, and cancellable by the agent (MCP: a cancelled request gets no answer; the shop is told).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cajaguard_wire::era::{Era, ResultKind};
use cajaguard_wire::jsonrpc::{self, Envelope};
use cajaguard_wire::rawjson::RawObject;
use serde_json::value::RawValue;

use super::downstream::Done;
use super::{Answer, CallsOn, Proxy, Reply, ShopError, lock, shop_failure, tools};

/// Agents may not keep more tool calls than this in flight at once: a call storm is answered with
/// errors instead of threads.
const MAX_CALLS_IN_FLIGHT: usize = 64;

/// What the proxy knows of one call in flight, by the agent's id.
#[derive(Default)]
pub(super) struct CallState {
    shop_id: Option<u64>,
    cancelled: bool,
    /// A `complete_checkout`: its cancellation is never forwarded (see `notification`).
    payment: bool,
}

impl Proxy {
    /// Starts one `tools/call`: refused when too many are in flight; on the caller's thread when
    /// it is the message's own (`ThisThread`), else forwarded inline when it can be, else run on a
    /// thread of its own; answered (unless cancelled) by [`Proxy::finish_call`].
    pub(super) fn spawn_call(self: &Arc<Proxy>, envelope: Envelope, era: Era, calls_on: CallsOn) {
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
        {
            // An id still in flight names that call: taking it again would replace the call's
            // state (a payment's mark among it), so a cancellation sent for the second could then
            // cancel the payment at the shop, and two answers would claim one id.
            let mut calls = lock(&self.calls);
            let key = jsonrpc::id_key(&id);
            if calls.contains_key(&key) {
                drop(calls);
                self.calls_in_flight.fetch_sub(1, Ordering::AcqRel);
                self.send(&jsonrpc::error(
                    Some(&id),
                    jsonrpc::INVALID_REQUEST,
                    "a call with this id is still in flight; CajaGuard refused this one: give each request an id of its own",
                ));
                return;
            }
            calls.insert(key, CallState::default());
        }
        let params = envelope.params;
        if calls_on == CallsOn::ThisThread {
            // The caller's thread is this message's anyway; starting another (and waking it, and
            // being woken by it) was a large share of a forwarded call through the service.
            self.run_call(&id, params.as_deref(), era);
            return;
        }
        if let Some(raw) = params.as_deref()
            && self.forward_inline(&id, raw, era)
        {
            return;
        }
        let proxy = self.clone();
        let call_id = id.clone();
        let spawned = std::thread::Builder::new()
            .name("tool-call".into())
            .spawn(move || proxy.run_call(&call_id, params.as_deref(), era));
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

    /// Runs one call to its end and answers it. A bug must not leave the agent waiting for an
    /// answer that never comes: a panic is answered as an internal error (a payment already
    /// reserved stays counted).
    fn run_call(&self, id: &RawValue, params: Option<&RawValue>, era: Era) {
        let answer =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.call_tool(id, params)))
                .unwrap_or_else(|_| {
                    tracing::error!(
                        "a tool call failed inside CajaGuard; answered as an internal error"
                    );
                    Answer::ErrorLine(jsonrpc::error(
                        Some(id),
                        jsonrpc::INTERNAL_ERROR,
                        "CajaGuard failed on this call; nothing was forwarded after the failure",
                    ))
                });
        self.finish_call(id, answer, era);
    }

    /// The fast path for a plain forwarded call (not gated, not ours, tripwire clean, shop live over
    /// stdio): written to the shop from this thread, answered to the agent from the shop's reader,
    /// with no thread started and no hand-off in between. `false`: take the ordinary path.
    pub(super) fn forward_inline(
        self: &Arc<Proxy>,
        id: &RawValue,
        params: &RawValue,
        era: Era,
    ) -> bool {
        // A service session's calls are checked against its agent's checkouts, carts and
        // orders (`agents.rs`) on the ordinary path.
        if self.agent.is_some() {
            return false;
        }
        let Ok(whole) = serde_json::from_str::<serde_json::Value>(params.get()) else {
            return false;
        };
        let Some(name) = whole.get("name").and_then(serde_json::Value::as_str) else {
            return false;
        };
        // Refused on the ordinary path (`Proxy::call_tool`).
        if whole
            .get("arguments")
            .is_some_and(|a| !(a.is_object() || a.is_null()))
        {
            return false;
        }
        // The gated tool and the ones that change a checkout (they take a lease in the store)
        // take the ordinary path.
        if name == tools::GATED_TOOL || tools::changes_checkout(name) || !tools::is_ucp_tool(name) {
            return false;
        }
        // A refusal is audited, which writes to the store: not on the agent's reader.
        if self.forwarding_refusal(params, &whole).is_some()
            || super::inexact_call_key(&whole).is_some()
            || whole
                .get("arguments")
                .is_some_and(|arguments| super::agents::argument_refusal(name, arguments).is_some())
        {
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
                Ok(Reply::Error(error)) => Answer::ForwardedError(error),
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
    pub(super) fn finish_call(&self, id: &RawValue, answer: Answer, era: Era) {
        let cancelled = lock(&self.calls)
            .remove(&jsonrpc::id_key(id))
            .is_some_and(|c| c.cancelled);
        if !cancelled {
            self.respond(id, answer, era, ResultKind::Other);
        }
        self.calls_in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    pub(super) fn notification(&self, method: &str, params: Option<&RawValue>) {
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
            // Forwarded once: each forward may cost the shop link a thread and a connection.
            let first = !call.cancelled;
            call.cancelled = true;
            // A payment is not cancelled at the shop: a shop that then answered with an error
            // may have charged already, and that error would read as its refusal and release
            // the reservation. The payment runs to its answer and is settled from it; only the
            // agent is not answered, as MCP asks.
            if !first || call.payment {
                return;
            }
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

    /// Whether the call `id` (the JSON text of its id) has not finished yet.
    pub fn call_pending(&self, id: &str) -> bool {
        lock(&self.calls).contains_key(id)
    }

    /// Marks the call `id` as a payment (see [`CallState::payment`]).
    pub(super) fn mark_payment(&self, id: &RawValue) {
        if let Some(call) = lock(&self.calls).get_mut(&jsonrpc::id_key(id)) {
            call.payment = true;
        }
    }

    pub(super) fn shop_request(
        &self,
        id: &RawValue,
        method: &str,
        params: &str,
        answered_by: Option<std::time::Instant>,
    ) -> Result<Reply, ShopError> {
        let key = jsonrpc::id_key(id);
        let started = std::time::Instant::now();
        let reply = self
            .shop
            .request_by(answered_by, method, Some(params), &mut |shop_id| {
                if let Some(call) = lock(&self.calls).get_mut(&key) {
                    call.shop_id = Some(shop_id);
                }
            });
        self.metrics.shop_took(started.elapsed());
        reply
    }
}

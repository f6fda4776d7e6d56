//! The gated path of `complete_checkout` (SPEC §4): precheck, read the checkout back from the shop,
//! decide and reserve in one store transaction, forward the agent's bytes, settle.

use std::time::Instant;

use cajaguard_core::approval::BasketDigest;
use cajaguard_core::gate::{self, Effect, Facts, Reason, Ruling};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use cajaguard_core::settle::{self, Settlement};
use serde_json::Value;
use serde_json::value::RawValue;

use super::checkout;
use super::rawjson::RawObject;
use super::{Answer, Proxy, Reply, ShopError, refusal, shop_failure};
use crate::store::AuditRecord;

impl Proxy {
    pub(super) fn complete_checkout(
        &self,
        id: &RawValue,
        params: &RawValue,
        whole: &Value,
        arguments: &Value,
    ) -> Answer {
        let started = Instant::now();
        let mut audit = self.audit_record(super::tools::GATED_TOOL);
        if let Some(ruling) = self.forwarding_refusal(params, whole) {
            return self.refuse(&ruling, audit, started);
        }
        let request = match gate::precheck(&self.policy, arguments) {
            Ok(request) => request,
            Err(ruling) => return self.refuse(&ruling, audit, started),
        };
        audit.checkout_id = Some(super::audit_text(&request.checkout_id));
        audit.idempotency_key = Some(super::audit_text(&request.idempotency_key));

        let quote = match self.read_checkout(id, &request, arguments) {
            Ok(quote) => quote,
            Err(ruling) => return self.refuse(&ruling, audit, started),
        };
        audit.merchant = quote.merchant.clone();
        audit.currency = Some(super::audit_text(&quote.currency));
        audit.total = Some(quote.total);

        let digest = BasketDigest::of(&quote, &request.handler_ids);
        let request_id = digest.request_id();
        audit.request_id = Some(request_id.as_str().to_owned());
        let now = (self.clock)();
        audit.at = now;
        audit.latency = started.elapsed();
        let mut decide = |ledger: &gate::LedgerView, approvals: &[gate::ApprovalCandidate]| {
            let facts = Facts {
                request: &request,
                quote: &quote,
                ledger,
                approvals,
                trusted_keys: &self.trusted,
                now,
            };
            gate::decide(&self.policy, &facts)
        };
        let outcome = match self.store.gate(
            &request,
            &quote,
            &request_id,
            self.policy.window,
            now,
            &mut decide,
            &audit,
        ) {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::error!("store failed during the gate: {e}");
                let ruling = Ruling::new(
                    Reason::StoreUnavailable,
                    format!("the CajaGuard store failed, so nothing was paid: {e}"),
                );
                return self.refuse(&ruling, audit, started);
            }
        };
        if let Effect::Refuse { .. } = outcome.effect {
            return refusal(&outcome.ruling);
        }

        let answer = self.shop_request(id, "tools/call", params.get());
        let settlement = match &answer {
            Ok(Reply::Result(result)) => match serde_json::from_str::<Value>(result.get()) {
                Ok(value) => settle::classify(Ok(&value), quote.total),
                Err(_) => Settlement::Unknown,
            },
            Ok(Reply::Error(_)) => settle::classify(Err(false), quote.total),
            Err(e) => settle::classify(Err(e.outcome_unknown()), quote.total),
        };
        // A retry rides on an earlier attempt whose outcome is unknown: the shop's refusal of the
        // retry (an idempotency conflict, "already in progress", a crash) says nothing about that
        // first attempt, which may have charged. Only a completion ends it; anything else keeps
        // the reservation until reconciliation reads the checkout (SPEC §4.13: counted once).
        let settlement = match (&outcome.effect, settlement) {
            (Effect::Retry, Settlement::Released) => Settlement::Unknown,
            (_, settlement) => settlement,
        };
        self.record_settlement(&request, &quote, &settlement, &audit, started);
        match answer {
            Ok(Reply::Result(result)) => {
                Answer::Result(with_verdict(result.get(), &outcome.ruling))
            }
            Ok(Reply::Error(error)) => Answer::ShopError(error),
            Err(e) => unknown_outcome(&outcome.ruling, &e),
        }
    }

    /// SPEC §4.4: the shop's own `get_checkout`, never the agent's numbers. An earlier attempt on
    /// this checkout still in flight is reconciled from the same answer first (see `reconcile`).
    fn read_checkout(
        &self,
        id: &RawValue,
        request: &CompleteRequest,
        arguments: &Value,
    ) -> Result<Quote, Ruling> {
        let agent = arguments
            .pointer("/meta/ucp-agent")
            .cloned()
            .unwrap_or(Value::Null);
        let params = checkout::get_checkout_params(&agent, &request.checkout_id);
        let reply = self.shop_request(id, "tools/call", &params);
        if let Ok(Reply::Result(raw)) = &reply
            && let Ok(result) = serde_json::from_str::<Value>(raw.get())
        {
            self.reconcile_at_hand(request, &result, &agent);
        }
        checkout::quote_from_reply(reply, &request.checkout_id)
    }

    fn record_settlement(
        &self,
        request: &CompleteRequest,
        quote: &Quote,
        settlement: &Settlement,
        decided: &AuditRecord,
        started: Instant,
    ) {
        let now = (self.clock)();
        if let Err(e) = self.store.settle(
            &request.checkout_id,
            &request.idempotency_key,
            settlement,
            now,
        ) {
            // The reservation stays in flight: the spend still counts (fail closed).
            tracing::error!("settlement not recorded, the reservation stays: {e}");
        }
        let (reason, note) = match settlement {
            Settlement::Completed {
                charged,
                mismatch: true,
            } => (
                "completed",
                Some(format!(
                    "the shop charged {charged} minor units, more than the {} quoted",
                    quote.total
                )),
            ),
            Settlement::Completed { .. } => ("completed", None),
            Settlement::Released => ("released", None),
            Settlement::Unknown => (
                "outcome_unknown",
                Some("the reservation stays until the outcome is known".into()),
            ),
        };
        let mut record = decided.clone();
        record.at = now;
        record.verdict = "settled".into();
        record.reason = reason.into();
        record.note = note;
        record.latency = started.elapsed();
        if let Err(e) = self.store.audit(&record) {
            tracing::error!("audit record not written: {e}");
        }
    }

    fn refuse(&self, ruling: &Ruling, mut audit: AuditRecord, started: Instant) -> Answer {
        audit.verdict = ruling.verdict.as_str().into();
        audit.reason = ruling.reason.as_str().into();
        audit.request_id = ruling
            .request_id
            .as_ref()
            .map(|r| r.as_str().to_owned())
            .or(audit.request_id);
        audit.latency = started.elapsed();
        if let Err(e) = self.store.audit(&audit) {
            tracing::error!("audit record not written: {e}");
        }
        refusal(ruling)
    }
}

/// The shop's result unchanged but for `_meta.cajaguard`.
fn with_verdict(result: &str, ruling: &Ruling) -> String {
    let Some(mut object) = RawObject::parse(result) else {
        return result.to_owned();
    };
    let verdict = verdict_meta(ruling);
    let mut meta = object
        .get("_meta")
        .and_then(|meta| RawObject::parse(meta.get()))
        .unwrap_or_default();
    if let Ok(raw) = RawValue::from_string(verdict.to_string()) {
        meta.set("cajaguard", raw);
    }
    if let Ok(raw) = RawValue::from_string(meta.to_json()) {
        object.set("_meta", raw);
    }
    object.to_json()
}

fn verdict_meta(ruling: &Ruling) -> Value {
    let mut meta = serde_json::json!({
        "verdict": ruling.verdict.as_str(),
        "reason": ruling.reason.as_str(),
        "detail": ruling.detail,
    });
    if let Some(request_id) = &ruling.request_id {
        meta["request_id"] = Value::String(request_id.as_str().to_owned());
    }
    meta
}

/// The call was forwarded and the shop gave no usable answer: the agent learns the outcome is
/// unknown and that a retry with the same idempotency key is safe.
fn unknown_outcome(ruling: &Ruling, error: &ShopError) -> Answer {
    if !error.outcome_unknown() {
        return shop_failure(error);
    }
    let mut document = ruling.to_json();
    if let Some(inner) = document.get_mut("cajaguard") {
        inner["detail"] = Value::String(format!(
            "forwarded, but {error}; the outcome is unknown and the spend stays reserved; retry with the same idempotency-key"
        ));
    }
    super::tool_result(&document, true)
}

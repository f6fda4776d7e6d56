//! `update_checkout` and `cancel_checkout`: forwarded under a lease in the store, so that no payment
//! of the checkout reads it back while the change could still land (SPEC §4 step 3a).

use cajaguard_core::verdict::{Reason, Ruling};
use serde_json::value::RawValue;

use super::{Answer, Proxy, Reply, refusal, shop_failure};
use crate::store::Conflict;

impl Proxy {
    /// `update_checkout` / `cancel_checkout` (SPEC §4 step 3a): refused while a payment holds the
    /// checkout, and holding a lease in the store while on its way, so that no payment reads the
    /// checkout back while this call could still change it.
    pub(super) fn forward_update(
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
                tracing::error!("store failed taking {tool}'s lease: {e}");
                let ruling = Ruling::new(
                    Reason::StoreUnavailable,
                    format!("{tool} was not forwarded: {}", e.for_agent()),
                );
                self.audit_refusal(tool, &ruling);
                return refusal(&ruling);
            }
        };
        let reply = self.shop_request(id, "tools/call", params, None);
        // An update whose answer never came may still be applied by the shop: its lease then
        // lapses on its own, after any live call on it has given up.
        if !matches!(&reply, Err(e) if e.outcome_unknown())
            && let Err(e) = self.store.end_update(lease)
        {
            tracing::warn!("update lease not ended, it lapses on its own: {e}");
        }
        match reply {
            Ok(Reply::Result(result)) => Answer::Result(result.get().to_owned()),
            Ok(Reply::Error(error)) => Answer::ForwardedError(error),
            Err(e) => shop_failure(&e),
        }
    }
}

//! Learning how a payment ended when the proxy never heard (SPEC §4.13): the proxy was killed after
//! reserving, or the shop did not answer in time. Such a reservation stays in flight, counted
//! against the window (fail closed), until the shop's own `get_checkout` says how it ended:
//! `completed` settles it with the shop's total (the order's, when the checkout's cannot be read),
//! a checkout still open or canceled releases it, and anything unreadable keeps it.
//!
//! A release must never race a payment that is still running: another `cajaguard mcp` sharing the
//! home may be waiting for the shop's answer to the very call that reserved, and until the shop
//! finishes, its checkout still reads `ready_for_complete`. So a release needs the reservation to be
//! *stale*, older than twice the downstream timeout, by when any live proxy has given up on that
//! call. A completion is safe to record at any age: the live proxy would settle the same amount.
//!
//! Reconciliation runs at start (in the background, so a slow shop does not hold up the agent) over
//! every reservation in flight, then, for as long as the proxy lives, every twice the stale age
//! (at least 4 s) over the stale ones and the releases that may still land, and before each `complete_checkout` for the checkout at hand (where a checkout read
//! completed also counts a released reservation of it).

use std::sync::Arc;
use std::time::Duration;

use cajaguard_core::request::CompleteRequest;
use cajaguard_core::settle::{self, Settlement};
use serde_json::Value;
use time::OffsetDateTime;

use super::checkout;
use super::{Proxy, Reply};
use crate::store::{AuditRecord, InFlight};

/// The shortest pause between two background passes (see [`Proxy::revisit_every`]).
const REVISIT_AT_MOST_EVERY: Duration = Duration::from_secs(4);

/// The UCP agent identity CajaGuard uses when it reads a checkout back on its own account.
const RECONCILER_PROFILE: &str = "https://cajaguard.invalid/profiles/reconciler.json";

impl Proxy {
    /// Starts the background passes: one over every reservation in flight and every release that
    /// may still land, then one every [`Proxy::revisit_every`] for as long as the proxy lives (a
    /// long-running `cajaguard serve` would otherwise count a late charge only when it restarts).
    /// What the first pass covers is listed here, before the proxy serves: it then never reads a
    /// checkout this very process is paying (a payment of its own is settled by its own call).
    /// Later passes take only reservations already stale, which no live call still waits on.
    pub(super) fn spawn_reconciler(self: &Arc<Proxy>) {
        let (rows, released) = self.to_reconcile();
        let proxy = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("reconcile".into())
            .spawn(move || {
                if let Some(proxy) = proxy.upgrade() {
                    proxy.reconcile_in_flight(rows, released);
                }
                loop {
                    let pause = match proxy.upgrade() {
                        Some(proxy) => proxy.revisit_every(),
                        None => return,
                    };
                    std::thread::sleep(pause);
                    // The proxy is gone (its process is ending): so is this pass.
                    let Some(proxy) = proxy.upgrade() else { return };
                    let (rows, released) = proxy.to_reconcile();
                    let now = (proxy.clock)();
                    let stale: Vec<InFlight> = rows
                        .into_iter()
                        .filter(|row| proxy.is_stale(row, now))
                        .collect();
                    proxy.reconcile_rows(&stale, &released);
                }
            });
        if spawned.is_err() {
            // Not fatal: the reservations stay counted and the next call for each checkout reconciles it.
            tracing::warn!("cannot start the reconciliation thread");
        }
    }

    /// Every reservation in flight, and every one released as stale within the window: a slow
    /// shop may still have completed those, and their checkouts are read again.
    fn to_reconcile(&self) -> (Vec<InFlight>, Vec<InFlight>) {
        let rows = self.store.in_flight().unwrap_or_else(|e| {
            tracing::warn!("cannot list reservations in flight to reconcile them: {e}");
            Vec::new()
        });
        let released = self
            .store
            .released_by_reconcile(self.policy.window, (self.clock)())
            .unwrap_or_else(|e| {
                tracing::warn!("cannot list released reservations to revisit them: {e}");
                Vec::new()
            });
        (rows, released)
    }

    /// One pass at start; a second, over the same reservations, once those that were too young to
    /// release are stale.
    fn reconcile_in_flight(&self, rows: Vec<InFlight>, released: Vec<InFlight>) {
        let young = self.reconcile_rows(&rows, &released);
        if young.is_empty() {
            return;
        }
        std::thread::sleep(self.stale_after());
        // Only those still in flight and still the same attempt.
        let still: Vec<InFlight> = young
            .into_iter()
            .filter(|row| {
                matches!(self.store.in_flight_of(&row.checkout_id), Ok(Some(now))
                    if now.idempotency_key == row.idempotency_key && now.reserved_at == row.reserved_at)
            })
            .collect();
        self.reconcile_rows(&still, &[]);
    }

    /// Reads each row's checkout from the shop and records what it says; returns the in-flight rows
    /// that were too young to release.
    fn reconcile_rows(&self, rows: &[InFlight], released: &[InFlight]) -> Vec<InFlight> {
        let mut young = Vec::new();
        let revisits = released.iter().map(|row| (row, true));
        for (row, released) in rows.iter().map(|row| (row, false)).chain(revisits) {
            let now = (self.clock)();
            // A released row only ever becomes completed; its age says nothing then.
            let stale = !released && self.is_stale(row, now);
            if !released && !stale {
                young.push(row.clone());
            }
            // As the paying agent: a shop may refuse a profile it does not know.
            let agent = serde_json::json!({
                "profile": row.agent_profile.as_deref().unwrap_or(RECONCILER_PROFILE)
            });
            let params = checkout::get_checkout_params(&agent, &row.checkout_id);
            let result = match self.shop.request("tools/call", Some(&params), &mut |_| {}) {
                Ok(Reply::Result(raw)) => serde_json::from_str::<Value>(raw.get()).ok(),
                Ok(Reply::Error(_)) => None,
                Err(e) => {
                    // The shop is down or hanging: asking about the others would only wait
                    // again; the next call for each checkout tries once more.
                    tracing::warn!("reconciliation stopped: {e}");
                    return Vec::new();
                }
            };
            if let Some(result) = result {
                self.settle_from_reading(row, &result, &agent, stale);
            }
        }
        young
    }

    /// Before the gate decides on `request`'s checkout: if an earlier attempt on it is still in
    /// flight, `result` (the shop's fresh `get_checkout` answer) may say how it ended. A release
    /// of the same idempotency key is left to the retry path, which forwards that key again
    /// without a second approval, as SPEC §4.13 wants.
    pub(super) fn reconcile_at_hand(
        &self,
        request: &CompleteRequest,
        result: &Value,
        agent: &Value,
    ) {
        let row = match self.store.in_flight_of(&request.checkout_id) {
            Ok(Some(row)) => row,
            Ok(None) => return,
            Err(e) => {
                // The gate reads the same store next and refuses if it is broken.
                tracing::warn!("cannot read the reservation in flight: {e}");
                return;
            }
        };
        let may_release =
            row.idempotency_key != request.idempotency_key && self.is_stale(&row, (self.clock)());
        self.settle_from_reading(&row, result, agent, may_release);
    }

    /// Before the gate decides on a checkout the shop now says is completed: a reservation of it
    /// that was released (its answer was lost and the checkout later read open, or the shop
    /// refused and charged after all) was paid, and is counted from this reading before anything
    /// else is decided. Otherwise the charge would stay out of the window while the agent pays
    /// other checkouts.
    pub(super) fn count_late_completion(&self, checkout_id: &str, result: &Value, agent: &Value) {
        match self.store.released_of(checkout_id) {
            Ok(Some(row)) => self.settle_from_reading(&row, result, agent, false),
            Ok(None) => {}
            // The gate reads the same store next and refuses if it is broken.
            Err(e) => tracing::warn!("cannot read a released reservation: {e}"),
        }
    }

    /// Before a payment is refused because another one of its checkout is in flight: one fresh
    /// read of the checkout, which may show that payment ended (completed, or open and stale).
    pub(super) fn reconcile_checkout(&self, checkout_id: &str, agent: &Value) {
        let row = match self.store.in_flight_of(checkout_id) {
            Ok(Some(row)) => row,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!("cannot read the reservation in flight: {e}");
                return;
            }
        };
        let params = checkout::get_checkout_params(agent, checkout_id);
        let Ok(Reply::Result(raw)) = self.shop.request("tools/call", Some(&params), &mut |_| {})
        else {
            return;
        };
        let Ok(result) = serde_json::from_str::<Value>(raw.get()) else {
            return;
        };
        let stale = self.is_stale(&row, (self.clock)());
        self.settle_from_reading(&row, &result, agent, stale);
    }

    /// Reads the shop's answer for `row` and records what it says; a release only when `may_release`.
    fn settle_from_reading(
        &self,
        row: &InFlight,
        result: &Value,
        agent: &Value,
        may_release: bool,
    ) {
        let order_total = settle::checkout_in_result(result)
            .as_ref()
            .and_then(|checkout| settle::order_to_ask(checkout).map(str::to_owned))
            .and_then(|order_id| self.order_total(agent, &order_id));
        let settlement = settle::reconcile(
            result,
            &row.checkout_id,
            order_total,
            &settle::Reserved {
                total: row.total,
                currency: &row.currency,
                merchant: &row.merchant,
            },
        );
        let applies = match settlement {
            Settlement::Completed(_) => true,
            Settlement::Released => may_release,
            Settlement::Unknown => false,
        };
        if !applies {
            return;
        }
        let now = (self.clock)();
        let note = match &settlement {
            Settlement::Completed(charge) => charge.differs().then(|| {
                format!(
                    "the completed checkout differs from the reservation in {}: charged {} minor units, {} reserved; payments are frozen",
                    charge.differs.join(", "),
                    charge.amount,
                    row.total
                )
            }),
            Settlement::Released | Settlement::Unknown => None,
        };
        let record = AuditRecord {
            currency: Some(cajaguard_core::display::audit(&row.currency)),
            total: Some(row.total),
            idempotency_key: Some(cajaguard_core::display::audit(&row.idempotency_key)),
            checkout_id: Some(cajaguard_core::display::audit(&row.checkout_id)),
            note,
            ..AuditRecord::new(now, super::tools::GATED_TOOL)
        };
        if let Err(e) = self.store.settle_reconciled(row, &settlement, now, &record) {
            // Nothing changed (or, if the connection was lost after COMMIT, it did, and the
            // reservation is no longer in flight): the next pass asks the shop again if it is.
            tracing::error!("reconciliation not recorded, the reservation stays: {e}");
            return;
        }
        if let Settlement::Completed(charge) = &settlement
            && charge.differs()
        {
            self.audit_freeze(&format!(
                "charged_differs on {}: {}",
                cajaguard_core::display::audit(&row.checkout_id),
                charge.differs.join(", ")
            ));
        }
    }

    /// The single total of the order a completed checkout names, if the shop can tell.
    fn order_total(&self, agent: &Value, order_id: &str) -> Option<i64> {
        let params = serde_json::json!({
            "name": "get_order",
            "arguments": { "meta": { "ucp-agent": agent }, "id": order_id },
        })
        .to_string();
        let Ok(Reply::Result(raw)) = self.shop.request("tools/call", Some(&params), &mut |_| {})
        else {
            return None;
        };
        let result: Value = serde_json::from_str(raw.get()).ok()?;
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            return None;
        }
        settle::single_total(&settle::checkout_in_result(&result)?)
    }

    /// How often a live proxy reads again the reservations in flight and stale, and those
    /// released as stale within the window, so that a charge that lands late is counted within
    /// that long even if no agent touches its checkout again: twice the time after which a
    /// reservation is stale (at least [`REVISIT_AT_MOST_EVERY`]). Each pass costs one
    /// `get_checkout` per such reservation, and none when there is none.
    fn revisit_every(&self) -> Duration {
        self.stale_after()
            .saturating_mul(2)
            .max(REVISIT_AT_MOST_EVERY)
    }

    /// Twice the downstream timeout: by then a live proxy that reserved has settled or given up,
    /// since it writes the payment and waits for its answer within one timeout of the
    /// reservation, a new connection's handshake included (`Shop::request_by`).
    pub(super) fn stale_after(&self) -> Duration {
        self.shop.timeout().saturating_mul(2)
    }

    fn is_stale(&self, row: &InFlight, now: OffsetDateTime) -> bool {
        let age = now - row.reserved_at;
        age >= time::Duration::try_from(self.stale_after()).unwrap_or(time::Duration::MAX)
    }
}

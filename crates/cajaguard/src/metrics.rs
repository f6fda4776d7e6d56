//! What `GET /metrics` of the service serves (SPEC §13), in Prometheus text: decisions by verdict
//! and reason, store and shop latency, and, read from the store at each scrape, spend and
//! headroom per currency, approvals waiting and the freeze. Every label has a bounded set of
//! values (verdicts, reasons, the config's currencies): no merchant, checkout or agent label.
//! The endpoint needs no token, so it shows nothing an agent's own status would not show to
//! every agent: a label per agent would let anyone who reaches the port watch when each agent
//! pays and, beside the window's spend, how much.
//! Built on `prometheus-client`, the Prometheus project's Rust client (docs/DEPENDENCIES.md).

use std::sync::Mutex;
use std::time::Duration;

use cajaguard_core::policy::Policy;
use cajaguard_core::verdict::Ruling;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use time::OffsetDateTime;

use crate::store::Store;

type Labels = Vec<(&'static str, String)>;

pub struct Metrics {
    registry: Mutex<Registry>,
    decisions: Family<Labels, Counter>,
    store_seconds: Histogram,
    shop_seconds: Histogram,
    spent: Family<Labels, Gauge>,
    headroom: Family<Labels, Gauge>,
    approvals_waiting: Gauge,
    frozen: Gauge,
    store_up: Gauge,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("cajaguard");
        let decisions = Family::<Labels, Counter>::default();
        // 50 µs to ~1.6 s: a decision is a millisecond or so; a shop call up to its timeout.
        let store_seconds = Histogram::new(exponential_buckets(0.00005, 2.0, 16));
        let shop_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let spent = Family::<Labels, Gauge>::default();
        let headroom = Family::<Labels, Gauge>::default();
        let approvals_waiting = Gauge::default();
        let frozen = Gauge::default();
        let store_up = Gauge::default();
        registry.register(
            "decisions",
            "complete_checkout decisions by verdict and reason",
            decisions.clone(),
        );
        registry.register(
            "store_gate_seconds",
            "time in the store's gate transaction (decide and reserve)",
            store_seconds.clone(),
        );
        registry.register(
            "shop_request_seconds",
            "time of each request to the shop",
            shop_seconds.clone(),
        );
        registry.register(
            "window_spent_minor_units",
            "settled and in-flight spend over the window, per currency",
            spent.clone(),
        );
        registry.register(
            "window_headroom_minor_units",
            "what the window cap still allows, per currency",
            headroom.clone(),
        );
        registry.register(
            "approvals_waiting",
            "payments waiting for a human's approval",
            approvals_waiting.clone(),
        );
        registry.register("frozen", "1 while payments are frozen", frozen.clone());
        registry.register(
            "store_up",
            "1 when the last scrape could read the store",
            store_up.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            decisions,
            store_seconds,
            shop_seconds,
            spent,
            headroom,
            approvals_waiting,
            frozen,
            store_up,
        }
    }

    /// One decision.
    pub fn decided(&self, ruling: &Ruling) {
        let reason = ruling.reason();
        let verdict = reason.verdict().as_str().to_owned();
        self.decisions
            .get_or_create(&vec![
                ("verdict", verdict),
                ("reason", reason.as_str().to_owned()),
            ])
            .inc();
    }

    pub fn store_took(&self, took: Duration) {
        self.store_seconds.observe(took.as_secs_f64());
    }

    pub fn shop_took(&self, took: Duration) {
        self.shop_seconds.observe(took.as_secs_f64());
    }

    /// The text a scrape gets: the store's gauges read now, then everything encoded.
    pub fn render(&self, policy: &Policy, store: &Store, now: OffsetDateTime) -> String {
        let read = (|| -> Result<(), crate::store::StoreError> {
            let spend = store.window_spend(policy.window, now)?;
            for (currency, caps) in &policy.caps {
                let used = spend
                    .get(currency)
                    .map_or(0, |s| s.settled.saturating_add(s.in_flight));
                let labels = vec![("currency", currency.clone())];
                self.spent.get_or_create(&labels).set(used);
                self.headroom
                    .get_or_create(&labels)
                    .set(caps.window.saturating_sub(used).max(0));
            }
            let waiting = store.pending()?.len();
            self.approvals_waiting
                .set(i64::try_from(waiting).unwrap_or(i64::MAX));
            self.frozen.set(i64::from(store.frozen()?.is_some()));
            Ok(())
        })();
        self.store_up.set(i64::from(read.is_ok()));
        if let Err(e) = read {
            tracing::warn!(error = %e, "metrics: cannot read the store");
        }
        let mut out = String::new();
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if encode(&mut out, &registry).is_err() {
            return "# cajaguard: the metrics could not be encoded\n".to_owned();
        }
        out
    }
}

//! SPEC §10, once: the table of expected rulings ([`TABLE`], rows named in [`rows`]) and the flows
//! that produce them ([`FLOWS`]), end to end: `cajaguard mcp` as a real child process in front of
//! the real fixture shop, from a fresh home per flow, with real keys and the real store. "Reached
//! shop" is read from the fixture's own record of calls.
//!
//! A flow reports each attempt to an [`Observer`] under the row it stands for. The integration
//! tests (`tests/scenarios.rs` on stdio, `tests/scenarios_http.rs` over HTTP) observe by asserting
//! ([`Asserting`]); the report records what it saw beside what was expected. A flow also asserts
//! what the table has no column for (the next step a blocked answer names, say): a failing one
//! fails the test, and in the report the flow's rows.

mod flows;

use std::path::PathBuf;

use serde_json::Value;

use crate::ucp::SECRETS;
use crate::world::{Options, Transport, World};

use flows::*;
pub use flows::{approve, approve_blocked};

/// One row of SPEC §10: what the gate must answer for one attempt.
#[derive(Debug, PartialEq, Eq)]
pub struct Row {
    pub scenario: &'static str,
    /// The shop's total as the report prints it; `-` where the gate refuses before reading one,
    /// and `... each` for a row observed several times.
    pub total: &'static str,
    pub verdict: &'static str,
    pub reason: &'static str,
    pub reached_shop: bool,
}

impl Row {
    const fn new(
        scenario: &'static str,
        total: &'static str,
        verdict: &'static str,
        reason: &'static str,
        reached_shop: bool,
    ) -> Row {
        Row {
            scenario,
            total,
            verdict,
            reason,
            reached_shop,
        }
    }

    /// Whether an observation is this row's ruling (any total for a `-` row).
    pub fn matches(&self, observed: &Observed) -> bool {
        let total_ok = self.total == "-" || observed.total == self.total.trim_end_matches(" each");
        total_ok
            && observed.verdict == self.verdict
            && observed.reason == self.reason
            && observed.reached_shop == self.reached_shop
    }
}

/// The rows, named so that a flow and a reader address them by what they are (one line each, as
/// the table reads).
#[rustfmt::skip]
pub mod rows {
    use super::Row;

    pub const SOCKS: Row = Row::new("2 x Trail socks, test token", "USD 24.00", "allow", "within_caps", true);
    pub const PARKA: Row = Row::new("Down parka (over per-transaction cap)", "USD 219.00", "denied", "over_per_transaction_cap", false);
    pub const DAY_PACK_BLOCKED: Row = Row::new("Day pack, no approval yet", "USD 89.00", "blocked", "pending_approval", false);
    pub const DAY_PACK_APPROVED: Row = Row::new("Day pack + trusted signed approval", "USD 89.00", "allow_approved", "signed_approval", true);
    pub const NEXT_BASKET: Row = Row::new("next basket after that approval was used", "USD 60.00", "blocked", "pending_approval", false);
    pub const SHOP_DECLINES: Row = Row::new("approved, shop declines the test token", "USD 89.00", "allow_approved", "signed_approval", true);
    pub const REPLAY: Row = Row::new("retry with the same approval (replay)", "USD 89.00", "blocked", "approval_already_used", false);
    pub const UNTRUSTED_KEY: Row = Row::new("approval signed by an untrusted key", "USD 89.00", "blocked", "approval_untrusted_key", false);
    pub const EDITED_EXPIRY: Row = Row::new("real approval with edited expires_at", "USD 89.00", "blocked", "approval_bad_signature", false);
    pub const EXPIRED: Row = Row::new("approval 6 min after a 5 min TTL", "USD 89.00", "blocked", "approval_expired", false);
    pub const SIGNED_DENY: Row = Row::new("human signed a deny", "USD 89.00", "denied", "approval_denied", false);
    pub const BASKET_GREW: Row = Row::new("basket grew 5 -> 8 socks after approval", "USD 96.00", "blocked", "pending_approval", false);
    pub const MAJOR_UNITS: Row = Row::new("merchant reports 49.99 (major units)", "-", "denied", "amount_not_minor_units", false);
    pub const AGENT_TOTALS: Row = Row::new("agent sends totals: 120 for a USD 219.00 basket", "-", "denied", "request_field_not_allowed", false);
    pub const JPY_WITHOUT_CAPS: Row = Row::new("JPY 9800 checkout, only USD caps", "JPY 9800", "denied", "currency_not_allowed", false);
    pub const JPY: Row = Row::new("JPY 1800 checkout, JPY caps", "JPY 1800", "allow", "within_caps", true);
    pub const SPLIT_FIRST_THREE: Row = Row::new("split purchase 1/4, 2/4, 3/4: Rain shell", "USD 45.00 each", "allow", "within_caps", true);
    pub const SPLIT_FOURTH: Row = Row::new("split purchase 4/4: Rain shell", "USD 45.00", "denied", "over_window_cap", false);
    pub const MERCHANT_NOT_ALLOWED: Row = Row::new("merchant not on allowlist", "USD 79.00", "denied", "merchant_not_allowed", false);
    pub const SHOP_PAY: Row = Row::new("Shop Pay handler in test mode", "-", "denied", "test_mode_credential", false);
    pub const RAW_PAN: Row = Row::new("raw PAN credential in test mode", "-", "denied", "test_mode_credential", false);
    pub const LIVE_TOKEN: Row = Row::new("live-looking token in test mode", "-", "denied", "test_mode_credential", false);
    pub const LIVE_MODE: Row = Row::new("live mode, USD 12.00", "USD 12.00", "blocked", "pending_approval", false);
}

use rows::*;

/// SPEC §10 in the order the report prints it.
pub const TABLE: [&Row; 23] = [
    &SOCKS,
    &PARKA,
    &DAY_PACK_BLOCKED,
    &DAY_PACK_APPROVED,
    &NEXT_BASKET,
    &SHOP_DECLINES,
    &REPLAY,
    &UNTRUSTED_KEY,
    &EDITED_EXPIRY,
    &EXPIRED,
    &SIGNED_DENY,
    &BASKET_GREW,
    &MAJOR_UNITS,
    &AGENT_TOTALS,
    &JPY_WITHOUT_CAPS,
    &JPY,
    &SPLIT_FIRST_THREE,
    &SPLIT_FOURTH,
    &MERCHANT_NOT_ALLOWED,
    &SHOP_PAY,
    &RAW_PAN,
    &LIVE_TOKEN,
    &LIVE_MODE,
];

/// What one attempt got: the shop's total, the gate's ruling, whether it reached the shop, and
/// the whole answer (to look for secrets in).
#[derive(Debug, Clone)]
pub struct Observed {
    pub total: String,
    pub verdict: String,
    pub reason: String,
    pub reached_shop: bool,
    pub answer: Value,
}

impl Observed {
    /// The first of [`SECRETS`] the answer shows, if any.
    pub fn leaked_secret(&self) -> Option<&'static str> {
        let text = self.answer.to_string();
        SECRETS.iter().copied().find(|s| text.contains(s))
    }
}

/// Where a flow reports each attempt.
pub trait Observer {
    fn observe(&mut self, row: &'static Row, observed: Observed);
}

/// The tests' observer: every attempt must be its row's ruling, with no secret in the answer.
pub struct Asserting;

impl Observer for Asserting {
    fn observe(&mut self, row: &'static Row, observed: Observed) {
        assert!(
            row.matches(&observed),
            "{}: expected {row:?}, observed {observed:?}",
            row.scenario
        );
        if let Some(secret) = observed.leaked_secret() {
            panic!(
                "{}: {secret} leaked into the answer: {}",
                row.scenario, observed.answer
            );
        }
    }
}

/// Where and how a flow's worlds are made: the transport to the fixture, the scratch folder and
/// whether the proxies speak on stderr.
#[derive(Debug, Clone)]
pub struct Setup {
    pub transport: Transport,
    pub scratch: Option<PathBuf>,
    pub quiet: bool,
}

impl Setup {
    /// A test's setup: worlds in the temp folder, proxies' stderr shown.
    pub fn on(transport: Transport) -> Setup {
        Setup {
            transport,
            scratch: None,
            quiet: false,
        }
    }

    /// A world with `options` as this setup places it.
    pub fn world(&self, options: Options) -> World {
        World::with(Options {
            transport: self.transport,
            scratch: self.scratch.clone(),
            quiet: self.quiet,
            ..options
        })
    }

    fn default_world(&self) -> World {
        self.world(Options::default())
    }
}

/// A flow: its name (the test's), the rows it observes, and its body.
pub struct Flow {
    pub name: &'static str,
    pub rows: &'static [&'static Row],
    pub run: fn(&Setup, &mut dyn Observer),
}

/// Every flow; together they observe every row of [`TABLE`].
#[rustfmt::skip]
pub const FLOWS: [Flow; 17] = [
    Flow { name: "two_trail_socks_with_a_test_token_are_allowed", rows: &[&SOCKS], run: two_trail_socks_with_a_test_token_are_allowed },
    Flow { name: "down_parka_is_over_the_per_transaction_cap", rows: &[&PARKA], run: down_parka_is_over_the_per_transaction_cap },
    Flow { name: "day_pack_without_approval_is_blocked_then_allowed_with_one", rows: &[&DAY_PACK_BLOCKED, &DAY_PACK_APPROVED, &NEXT_BASKET], run: day_pack_without_approval_is_blocked_then_allowed_with_one },
    Flow { name: "approved_then_declined_by_the_shop_cannot_be_replayed", rows: &[&SHOP_DECLINES, &REPLAY], run: approved_then_declined_by_the_shop_cannot_be_replayed },
    Flow { name: "approval_signed_by_an_untrusted_key_is_refused", rows: &[&UNTRUSTED_KEY], run: approval_signed_by_an_untrusted_key_is_refused },
    Flow { name: "approval_with_an_edited_expiry_has_a_bad_signature", rows: &[&EDITED_EXPIRY], run: approval_with_an_edited_expiry_has_a_bad_signature },
    Flow { name: "approval_six_minutes_after_a_five_minute_ttl_has_expired", rows: &[&EXPIRED], run: approval_six_minutes_after_a_five_minute_ttl_has_expired },
    Flow { name: "a_signed_deny_denies", rows: &[&SIGNED_DENY], run: a_signed_deny_denies },
    Flow { name: "basket_grown_after_approval_needs_a_new_one", rows: &[&BASKET_GREW], run: basket_grown_after_approval_needs_a_new_one },
    Flow { name: "merchant_reporting_major_units_is_refused", rows: &[&MAJOR_UNITS], run: merchant_reporting_major_units_is_refused },
    Flow { name: "agent_sending_totals_is_refused", rows: &[&AGENT_TOTALS], run: agent_sending_totals_is_refused },
    Flow { name: "jpy_checkout_without_jpy_caps_is_refused", rows: &[&JPY_WITHOUT_CAPS], run: jpy_checkout_without_jpy_caps_is_refused },
    Flow { name: "jpy_checkout_within_jpy_caps_is_allowed", rows: &[&JPY], run: jpy_checkout_within_jpy_caps_is_allowed },
    Flow { name: "split_purchase_cannot_slip_past_the_window", rows: &[&SPLIT_FIRST_THREE, &SPLIT_FOURTH], run: split_purchase_cannot_slip_past_the_window },
    Flow { name: "merchant_not_on_the_allowlist_is_refused", rows: &[&MERCHANT_NOT_ALLOWED], run: merchant_not_on_the_allowlist_is_refused },
    Flow { name: "test_mode_tripwire_refuses_real_credentials", rows: &[&SHOP_PAY, &RAW_PAN, &LIVE_TOKEN], run: test_mode_tripwire_refuses_real_credentials },
    Flow { name: "live_mode_needs_an_approval_even_for_twelve_dollars", rows: &[&LIVE_MODE], run: live_mode_needs_an_approval_even_for_twelve_dollars },
];

/// Runs the flow named `name` on `transport`, asserting every row (one `#[test]` each).
pub fn assert_flow(name: &str, transport: Transport) {
    let flow = FLOWS
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no SPEC §10 flow named {name}"));
    (flow.run)(&Setup::on(transport), &mut Asserting);
}

/// One `#[test]` per flow of [`FLOWS`], run over `$transport` (each asserting its rows), and one
/// that fails if a flow has no test here.
#[macro_export]
macro_rules! spec_tests {
    ($transport:expr) => {
        $crate::spec_tests!(@each $transport;
            two_trail_socks_with_a_test_token_are_allowed,
            down_parka_is_over_the_per_transaction_cap,
            day_pack_without_approval_is_blocked_then_allowed_with_one,
            approved_then_declined_by_the_shop_cannot_be_replayed,
            approval_signed_by_an_untrusted_key_is_refused,
            approval_with_an_edited_expiry_has_a_bad_signature,
            approval_six_minutes_after_a_five_minute_ttl_has_expired,
            a_signed_deny_denies,
            basket_grown_after_approval_needs_a_new_one,
            merchant_reporting_major_units_is_refused,
            agent_sending_totals_is_refused,
            jpy_checkout_without_jpy_caps_is_refused,
            jpy_checkout_within_jpy_caps_is_allowed,
            split_purchase_cannot_slip_past_the_window,
            merchant_not_on_the_allowlist_is_refused,
            test_mode_tripwire_refuses_real_credentials,
            live_mode_needs_an_approval_even_for_twelve_dollars,
        );
    };
    (@each $transport:expr; $($flow:ident,)*) => {
        $(
            #[test]
            fn $flow() {
                $crate::spec::assert_flow(stringify!($flow), $transport);
            }
        )*

        #[test]
        fn every_spec_flow_has_a_test() {
            let tested = [$(stringify!($flow)),*];
            for flow in &$crate::spec::FLOWS {
                assert!(tested.contains(&flow.name), "no test runs the flow {}", flow.name);
            }
        }
    };
}

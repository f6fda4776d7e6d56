//! Every scenario of SPEC §10, and the project's own (racing processes, a lost answer, a raced
//! approval, a kill -9, a passkey approval), end to end: `cajaguard mcp` as a real child process in front of a real
//! shop, from a fresh home per flow, with keys made by `cajaguard keygen` and the real store.
//! "Reached shop" is read from the shop's own record of the calls it received.
//!
//! The SPEC table and its flows are `cajaguard_harness::spec` (the integration tests run the same
//! ones); here they are recorded, row by row, beside what the table expects.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use cajaguard_harness::spec::{self, FLOWS, Observed, Observer, Row, Setup, TABLE};
use cajaguard_harness::{
    Mcp, Options, Shop, Transport, World, complete_args, completed, money, race, shop_checkout,
    test_instrument, test_shop_script, uuid, verdict,
};
use serde::Serialize;
use serde_json::{Value, json};

#[derive(Debug, Clone, Serialize)]
pub struct Ruling {
    pub total: String,
    pub verdict: String,
    pub reason: String,
    pub reached_shop: bool,
}

impl Ruling {
    fn expected(row: &Row) -> Ruling {
        Ruling {
            total: row.total.to_owned(),
            verdict: row.verdict.to_owned(),
            reason: row.reason.to_owned(),
            reached_shop: row.reached_shop,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SpecRow {
    pub scenario: String,
    pub expected: Ruling,
    pub observed: Option<Ruling>,
    /// Why the row could not be observed, or what else was wrong (a secret in the answer).
    pub error: Option<String>,
    pub as_expected: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProjectRow {
    pub scenario: String,
    pub expected: String,
    pub observed: String,
    pub as_expected: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Scenarios {
    pub spec: Vec<SpecRow>,
    pub project: Vec<ProjectRow>,
}

impl Scenarios {
    pub fn passed(&self) -> usize {
        self.spec.iter().filter(|r| r.as_expected).count()
            + self.project.iter().filter(|r| r.as_expected).count()
    }

    pub fn total(&self) -> usize {
        self.spec.len() + self.project.len()
    }
}

/// What was seen of one SPEC row.
#[derive(Default)]
struct Seen {
    observed: Option<(Ruling, bool)>,
    error: Option<String>,
}

/// Observations of the SPEC rows, kept in the table's order and found by row.
struct Recorder {
    seen: Vec<Seen>,
}

impl Recorder {
    fn slot(&mut self, row: &Row) -> &mut Seen {
        let i = TABLE
            .iter()
            .position(|r| *r == row)
            .unwrap_or_else(|| unreachable!("every flow observes rows of the table"));
        &mut self.seen[i]
    }
}

impl Observer for Recorder {
    fn observe(&mut self, row: &'static Row, observed: Observed) {
        let matched = row.matches(&observed);
        let secret = observed.leaked_secret();
        let ruling = Ruling {
            total: observed.total,
            verdict: observed.verdict,
            reason: observed.reason,
            reached_shop: observed.reached_shop,
        };
        let seen = self.slot(row);
        if let Some(secret) = secret {
            seen.error = Some(format!(
                "a secret ({}…) appeared in the answer",
                &secret[..4]
            ));
        }
        // A row observed several times (the split purchase's first three) keeps its first
        // deviation from the expected ruling, else its last observation.
        let keep_old = seen.observed.as_ref().is_some_and(|(_, ok)| !ok);
        if !keep_old {
            seen.observed = Some((ruling, matched));
        }
    }
}

/// How the report places its worlds: under `scratch`, the fixture on stdio, proxies silent.
pub(crate) fn setup(scratch: &Path) -> Setup {
    Setup {
        transport: Transport::Stdio,
        scratch: Some(scratch.to_path_buf()),
        quiet: true,
    }
}

/// Runs `f`, whose helpers panic; a panic becomes its error.
pub(crate) fn caught<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    cajaguard_harness::caught(f).map_err(|panic| anyhow!("{panic}"))?
}

/// A project scenario: its observation in words, and whether it was as expected.
type ProjectFlow = fn(&Setup) -> Result<(String, bool)>;

pub fn run(scratch: &Path, progress: &dyn Fn(&str)) -> Scenarios {
    let setup = setup(scratch);
    let mut rec = Recorder {
        seen: TABLE.iter().map(|_| Seen::default()).collect(),
    };
    for flow in &FLOWS {
        progress(&format!("scenario: {}", flow.rows[0].scenario));
        if let Err(panic) = cajaguard_harness::caught(|| (flow.run)(&setup, &mut rec)) {
            for row in flow.rows {
                let seen = rec.slot(row);
                if seen.observed.is_none() && seen.error.is_none() {
                    seen.error = Some(panic.clone());
                }
            }
        }
    }
    let spec = TABLE
        .iter()
        .zip(rec.seen)
        .map(|(row, seen)| {
            let as_expected =
                seen.error.is_none() && seen.observed.as_ref().is_some_and(|(_, ok)| *ok);
            SpecRow {
                scenario: row.scenario.to_owned(),
                expected: Ruling::expected(row),
                observed: seen.observed.map(|(ruling, _)| ruling),
                error: seen.error,
                as_expected,
            }
        })
        .collect();
    let project_flows: [(&str, &str, ProjectFlow); 10] = [
        (
            "8 processes race split purchases (USD 45.00 each) on one home",
            "3 allow / 5 over_window_cap, 3 reached shop, USD 135.00 counted",
            race_split_purchases,
        ),
        (
            "idempotent retry after a lost answer (shop slower than timeout_seconds = 1)",
            "1st attempt allow_approved, outcome unknown, USD 89.00 in flight; retry (same key) allow/idempotent_retry with no new approval, reached shop; USD 89.00 counted once",
            retry_after_lost_answer,
        ),
        (
            "one approval raced by two proxies",
            "exactly one allow_approved, 1 complete reached shop, USD 89.00 counted",
            race_one_approval,
        ),
        (
            "kill -9 of the proxy between reservation and answer, then restart",
            "after restart USD 45.00 in flight; 45 + 45 allowed, next 45 over_window_cap; retry of the killed attempt forwarded; USD 135.00 counted, 0 in flight",
            kill_between_reservation_and_answer,
        ),
        (
            "update to a Down parka pipelined behind an allowed 2 x Trail socks, 20 offsets, same and second session",
            "no completed checkout holds another basket than the gate checked; counted = 24.00 per completion",
            crate::basket::swap_behind_an_allowed_complete,
        ),
        (
            "live mode: retry (same key) of a lost approved payment after the basket grew",
            "retry blocked/payment_in_flight, not forwarded; 1 complete at the shop",
            crate::basket::retry_with_another_basket,
        ),
        (
            "approved Day pack, then another product at the same price on the line",
            "blocked/pending_approval under a new request id, not forwarded",
            crate::basket::same_price_product_swap,
        ),
        (
            "shop charges, then answers with neither result nor error (4 x USD 48.00, window 150.00)",
            "3 within_caps kept in flight (USD 144.00 counted), 4th over_window_cap",
            crate::basket::malformed_answer_after_a_charge,
        ),
        (
            "shop completes USD 26.00 for a USD 24.00 quote",
            "mismatch [total], USD 26.00 counted, another process blocked/frozen, unfreeze needs the human (exit 2 without), then within_caps",
            crate::basket::mismatched_charge_freezes,
        ),
        (
            "a passkey-approved payment (approvals.require \"passkey\", Day pack USD 89.00)",
            "blocked/pending_approval, not forwarded; the agent's own key-file approval blocked/approval_untrusted_key (no approver key counts), not forwarded; an unregistered passkey refused by the page (403); the page's passkey approval (200), then the retry allow_approved/signed_approval, reached shop; 1 complete, USD 89.00 counted",
            crate::passkey::passkey_approved_payment,
        ),
    ];
    let project = project_flows
        .into_iter()
        .map(|(scenario, expected, flow)| {
            progress(&format!("scenario: {scenario}"));
            let (observed, as_expected) = match caught(|| flow(&setup)) {
                Ok(outcome) => outcome,
                Err(e) => (format!("error: {e:#}"), false),
            };
            ProjectRow {
                scenario: scenario.to_owned(),
                expected: expected.to_owned(),
                observed,
                as_expected,
            }
        })
        .collect();
    Scenarios { spec, project }
}

// ---- the project's own scenarios ----

/// The rulings of pipelined-at-once payments as `verdict/reason`.
fn shown(rulings: &[(String, String)]) -> Vec<String> {
    rulings.iter().map(|(v, r)| format!("{v}/{r}")).collect()
}

fn race_split_purchases(setup: &Setup) -> Result<(String, bool)> {
    const PROCESSES: usize = 8;
    let world = setup.world(Options::default());
    let mut agents = race::with_checkouts((0..PROCESSES).map(|_| world.proxy()), "rain-shell", 1);
    let rulings = race::pay_at_once(&mut agents);
    let count = |what: &str| shown(&rulings).iter().filter(|r| *r == what).count();
    let allowed = count("allow/within_caps");
    let over_window = count("denied/over_window_cap");
    let other: Vec<String> = shown(&rulings)
        .into_iter()
        .filter(|r| r != "allow/within_caps" && r != "denied/over_window_cap")
        .collect();
    let reached = world.fixture_completes();
    let (spent, in_flight) = world.spend("USD");
    let observed = format!(
        "{allowed} allow / {over_window} over_window_cap{}, {reached} reached shop, {} counted ({} in flight)",
        if other.is_empty() {
            String::new()
        } else {
            format!(" / other: {}", other.join(", "))
        },
        money("USD", spent + in_flight),
        money("USD", in_flight),
    );
    let ok = allowed == 3
        && over_window == 5
        && other.is_empty()
        && reached == 3
        && spent == 13_500
        && in_flight == 0;
    Ok((observed, ok))
}

/// A world whose test shop answers `ready` for any checkout and runs `completes` in order.
pub(crate) fn test_shop_world(
    setup: &Setup,
    options: Options,
    ready: &Value,
    completes: Vec<Value>,
) -> World {
    setup.world(Options {
        shop: Shop::Test(test_shop_script(ready, completes)),
        ..options
    })
}

/// Pays `checkout` with the test instrument under `key` (a retry when the key is reused).
pub(crate) fn pay_with_key(mcp: &mut Mcp, checkout: &str, key: &str) -> Value {
    mcp.complete(checkout, test_instrument(), key, json!({}))
}

/// One attempt and whether it reached the shop (the shop's count before and after).
pub(crate) fn attempt(
    world: &World,
    checkout: &str,
    call: impl FnOnce() -> Value,
) -> (Value, bool) {
    let before = world.completes_reaching_shop(checkout);
    let result = call();
    (result, world.completes_reaching_shop(checkout) > before)
}

fn retry_after_lost_answer(setup: &Setup) -> Result<(String, bool)> {
    let day_pack = shop_checkout("Day pack", 8900, 1, "ready_for_complete");
    let world = test_shop_world(
        setup,
        Options {
            timeout_seconds: 1,
            ..Options::default()
        },
        &day_pack,
        vec![json!({ "hang": true }), completed(&day_pack)],
    );
    let mut mcp = world.proxy();
    let checkout = "gid://fixture/Checkout/lost-answer";
    let key = uuid();
    spec::approve_blocked(&world, &pay_with_key(&mut mcp, checkout, &key));
    let started = Instant::now();
    let (first, first_reached) =
        attempt(&world, checkout, || pay_with_key(&mut mcp, checkout, &key));
    let waited = started.elapsed();
    let (_, in_flight_after_loss) = world.spend("USD");
    let (retry, retry_reached) =
        attempt(&world, checkout, || pay_with_key(&mut mcp, checkout, &key));
    let (spent, in_flight) = world.spend("USD");
    let reached_total = world.completes_reaching_shop(checkout);
    let (v1, r1, _) = verdict(&first);
    let (v2, r2, _) = verdict(&retry);
    let observed = format!(
        "1st {v1}/{r1} after {:.1} s (error: {}), reached shop: {}, {} in flight; retry {v2}/{r2}, reached shop: {}; {} completes at the shop, {} counted, {} in flight",
        waited.as_secs_f64(),
        first["isError"] == json!(true),
        yes_no(first_reached),
        money("USD", in_flight_after_loss),
        yes_no(retry_reached),
        reached_total,
        money("USD", spent),
        money("USD", in_flight),
    );
    let ok = (v1.as_str(), r1.as_str()) == ("allow_approved", "signed_approval")
        && first["isError"] == json!(true)
        && first_reached
        && in_flight_after_loss == 8900
        && (v2.as_str(), r2.as_str()) == ("allow", "idempotent_retry")
        && retry_reached
        && retry["isError"] != json!(true)
        && reached_total == 2
        && spent == 8900
        && in_flight == 0;
    Ok((observed, ok))
}

fn race_one_approval(setup: &Setup) -> Result<(String, bool)> {
    let world = setup.world(Options::default());
    let mut first = world.proxy();
    let second = world.proxy();
    let checkout = first.create_checkout("day-pack", 1);
    spec::approve_blocked(&world, &first.pay(&checkout));
    let rulings = race::pay_at_once(&mut [(first, checkout.clone()), (second, checkout.clone())]);
    let winners = rulings
        .iter()
        .filter(|(v, r)| v == "allow_approved" && r == "signed_approval")
        .count();
    let allowed = rulings
        .iter()
        .filter(|(v, _)| v.starts_with("allow"))
        .count();
    let reached = world.completes_reaching_shop(&checkout);
    let (spent, in_flight) = world.spend("USD");
    let observed = format!(
        "{}; {reached} complete reached shop, {} counted",
        shown(&rulings).join(" vs "),
        money("USD", spent + in_flight),
    );
    let ok = winners == 1 && allowed == 1 && reached == 1 && spent == 8900 && in_flight == 0;
    Ok((observed, ok))
}

fn kill_between_reservation_and_answer(setup: &Setup) -> Result<(String, bool)> {
    let rain_shell = shop_checkout("Rain shell", 4500, 1, "ready_for_complete");
    let world = test_shop_world(
        setup,
        Options {
            timeout_seconds: 30,
            ..Options::default()
        },
        &rain_shell,
        vec![json!({ "hang": true })],
    );
    let killed_checkout = "gid://fixture/Checkout/killed";
    let killed_key = uuid();
    let args =
        |checkout: &str, key: &str| complete_args(checkout, test_instrument(), key, json!({}));

    // The payment is reserved and forwarded; the shop never answers; the proxy dies.
    let mut doomed = world.proxy();
    doomed.send_request(
        "tools/call",
        json!({"name": "complete_checkout", "arguments": args(killed_checkout, &killed_key)}),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while world.completes_reaching_shop(killed_checkout) == 0 {
        if Instant::now() > deadline {
            bail!("the payment never reached the shop");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    doomed.kill();
    let (spent_after_kill, in_flight_after_kill) = world.spend("USD");

    // Restart, with a shop that now answers.
    world.set_test_shop_script(&test_shop_script(&rain_shell, vec![completed(&rain_shell)]));
    let mut mcp = world.proxy();
    let mut rulings = Vec::new();
    for n in 1..=3 {
        let checkout = format!("gid://fixture/Checkout/after-restart-{n}");
        let (v, r, _) = verdict(&mcp.call("complete_checkout", args(&checkout, &uuid())));
        rulings.push(format!("{v}/{r}"));
    }
    let retry = mcp.call("complete_checkout", args(killed_checkout, &killed_key));
    let (rv, rr, _) = verdict(&retry);
    let reached = world.completes_reaching_shop(killed_checkout);
    let (spent, in_flight) = world.spend("USD");
    let observed = format!(
        "after kill: {} counted, {} in flight; after restart: {}; retry of the killed attempt {rv}/{rr} ({reached} completes at the shop); {} counted, {} in flight",
        money("USD", spent_after_kill),
        money("USD", in_flight_after_kill),
        rulings.join(", "),
        money("USD", spent),
        money("USD", in_flight),
    );
    let ok = spent_after_kill == 0
        && in_flight_after_kill == 4500
        && rulings
            == [
                "allow/within_caps",
                "allow/within_caps",
                "denied/over_window_cap",
            ]
        && (rv.as_str(), rr.as_str()) == ("allow", "idempotent_retry")
        && reached == 2
        && spent == 13_500
        && in_flight == 0;
    Ok((observed, ok))
}

pub(crate) fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

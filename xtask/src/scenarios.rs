//! Every scenario of SPEC §10, and the project's own (racing processes, a lost answer, a raced
//! approval, a kill -9), end to end: `cajaguard mcp` as a real child process in front of a real
//! shop, from a fresh home per flow, with keys made by `cajaguard keygen` and the real store.
//! "Reached shop" is read from the shop's own record of the calls it received.

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use serde_json::{Value, json};

use crate::world::{self, Bins, Mcp, Options, Shop, World, instrument, uuid, verdict};

/// SPEC §10, row by row: scenario, total, verdict, reason, reached shop.
const SPEC: [(&str, &str, &str, &str, bool); 23] = [
    (
        "2 x Trail socks, test token",
        "USD 24.00",
        "allow",
        "within_caps",
        true,
    ),
    (
        "Down parka (over per-transaction cap)",
        "USD 219.00",
        "denied",
        "over_per_transaction_cap",
        false,
    ),
    (
        "Day pack, no approval yet",
        "USD 89.00",
        "blocked",
        "pending_approval",
        false,
    ),
    (
        "Day pack + trusted signed approval",
        "USD 89.00",
        "allow_approved",
        "signed_approval",
        true,
    ),
    (
        "next basket after that approval was used",
        "USD 60.00",
        "blocked",
        "pending_approval",
        false,
    ),
    (
        "approved, shop declines the test token",
        "USD 89.00",
        "allow_approved",
        "signed_approval",
        true,
    ),
    (
        "retry with the same approval (replay)",
        "USD 89.00",
        "blocked",
        "approval_already_used",
        false,
    ),
    (
        "approval signed by an untrusted key",
        "USD 89.00",
        "blocked",
        "approval_untrusted_key",
        false,
    ),
    (
        "real approval with edited expires_at",
        "USD 89.00",
        "blocked",
        "approval_bad_signature",
        false,
    ),
    (
        "approval 6 min after a 5 min TTL",
        "USD 89.00",
        "blocked",
        "approval_expired",
        false,
    ),
    (
        "human signed a deny",
        "USD 89.00",
        "denied",
        "approval_denied",
        false,
    ),
    (
        "basket grew 5 -> 8 socks after approval",
        "USD 96.00",
        "blocked",
        "pending_approval",
        false,
    ),
    (
        "merchant reports 49.99 (major units)",
        "-",
        "denied",
        "amount_not_minor_units",
        false,
    ),
    (
        "agent sends totals: 120 for a USD 219.00 basket",
        "-",
        "denied",
        "request_field_not_allowed",
        false,
    ),
    (
        "JPY 9800 checkout, only USD caps",
        "JPY 9800",
        "denied",
        "currency_not_allowed",
        false,
    ),
    (
        "JPY 1800 checkout, JPY caps",
        "JPY 1800",
        "allow",
        "within_caps",
        true,
    ),
    (
        "split purchase 1/4, 2/4, 3/4: Rain shell",
        "USD 45.00 each",
        "allow",
        "within_caps",
        true,
    ),
    (
        "split purchase 4/4: Rain shell",
        "USD 45.00",
        "denied",
        "over_window_cap",
        false,
    ),
    (
        "merchant not on allowlist",
        "USD 79.00",
        "denied",
        "merchant_not_allowed",
        false,
    ),
    (
        "Shop Pay handler in test mode",
        "-",
        "denied",
        "test_mode_credential",
        false,
    ),
    (
        "raw PAN credential in test mode",
        "-",
        "denied",
        "test_mode_credential",
        false,
    ),
    (
        "live-looking token in test mode",
        "-",
        "denied",
        "test_mode_credential",
        false,
    ),
    (
        "live mode, USD 12.00",
        "USD 12.00",
        "blocked",
        "pending_approval",
        false,
    ),
];

/// Strings that must never appear in an answer (SPEC §11.4).
const SECRETS: [&str; 3] = [world::TEST_TOKEN, "4111111111111111", "sk_live_51"];

#[derive(Debug, Clone, Serialize)]
pub struct Ruling {
    pub total: String,
    pub verdict: String,
    pub reason: String,
    pub reached_shop: bool,
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

pub(crate) struct Ctx<'a> {
    bins: &'a Bins,
    scratch: &'a Path,
}

impl Ctx<'_> {
    pub(crate) fn world(&self, options: Options) -> Result<World> {
        World::new(self.bins, self.scratch, options)
    }
}

/// Observations of the SPEC rows, by index.
struct Recorder {
    observed: Vec<Option<Ruling>>,
    errors: Vec<Option<String>>,
}

impl Recorder {
    fn record(&mut self, row: usize, total: &str, result: &Value, reached: bool) {
        let (verdict, reason, _) = verdict(result);
        let observed = Ruling {
            total: total.to_owned(),
            verdict,
            reason,
            reached_shop: reached,
        };
        let text = result.to_string();
        if let Some(secret) = SECRETS.iter().find(|s| text.contains(*s)) {
            self.errors[row] = Some(format!(
                "a secret ({}…) appeared in the answer",
                &secret[..4]
            ));
        }
        // A row observed several times (the split purchase's first three) keeps its first
        // deviation from the expected ruling, else its last observation.
        let keep_old = self.observed[row]
            .as_ref()
            .is_some_and(|old| !matches(row, old));
        if !keep_old {
            self.observed[row] = Some(observed);
        }
    }
}

fn matches(row: usize, observed: &Ruling) -> bool {
    let (_, total, verdict, reason, reached) = SPEC[row];
    let total_ok = total == "-" || observed.total == total.trim_end_matches(" each");
    total_ok
        && observed.verdict == verdict
        && observed.reason == reason
        && observed.reached_shop == reached
}

/// One attempt and whether it reached the shop (the shop's count before and after).
pub(crate) fn attempt(
    world: &World,
    checkout: &str,
    call: impl FnOnce() -> Result<Value>,
) -> Result<(Value, bool)> {
    let before = world.completes_reaching_shop(checkout)?;
    let result = call()?;
    let after = world.completes_reaching_shop(checkout)?;
    Ok((result, after > before))
}

type Flow = fn(&Ctx, &mut Recorder) -> Result<()>;
/// A project scenario: its observation in words, and whether it was as expected.
type ProjectFlow = fn(&Ctx) -> Result<(String, bool)>;

pub fn run(bins: &Bins, scratch: &Path, progress: &dyn Fn(&str)) -> Scenarios {
    let ctx = Ctx { bins, scratch };
    let mut rec = Recorder {
        observed: vec![None; SPEC.len()],
        errors: vec![None; SPEC.len()],
    };
    let flows: [(&[usize], Flow); 19] = [
        (&[0], flow_socks),
        (&[1], flow_parka),
        (&[2, 3, 4], flow_day_pack),
        (&[5, 6], flow_decline_then_replay),
        (&[7], flow_untrusted_key),
        (&[8], flow_edited_expiry),
        (&[9], flow_expired),
        (&[10], flow_signed_deny),
        (&[11], flow_basket_grew),
        (&[12], flow_major_units),
        (&[13], flow_agent_totals),
        (&[14], flow_jpy_without_caps),
        (&[15], flow_jpy),
        (&[16, 17], flow_split_purchase),
        (&[18], flow_merchant_not_allowed),
        (&[19], |ctx, rec| flow_tripwire(ctx, rec, 19)),
        (&[20], |ctx, rec| flow_tripwire(ctx, rec, 20)),
        (&[21], |ctx, rec| flow_tripwire(ctx, rec, 21)),
        (&[22], flow_live_mode),
    ];
    for (rows, flow) in flows {
        progress(&format!("scenario: {}", SPEC[rows[0]].0));
        if let Err(e) = flow(&ctx, &mut rec) {
            for &row in rows {
                if rec.observed[row].is_none() && rec.errors[row].is_none() {
                    rec.errors[row] = Some(format!("{e:#}"));
                }
            }
        }
    }
    let spec = SPEC
        .iter()
        .enumerate()
        .map(|(i, &(scenario, total, verdict, reason, reached))| {
            let observed = rec.observed[i].clone();
            let error = rec.errors[i].clone();
            let as_expected = error.is_none() && observed.as_ref().is_some_and(|o| matches(i, o));
            SpecRow {
                scenario: scenario.to_owned(),
                expected: Ruling {
                    total: total.to_owned(),
                    verdict: verdict.to_owned(),
                    reason: reason.to_owned(),
                    reached_shop: reached,
                },
                observed,
                error,
                as_expected,
            }
        })
        .collect();

    let project_flows: [(&str, &str, ProjectFlow); 9] = [
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
    ];
    let project = project_flows
        .into_iter()
        .map(|(scenario, expected, flow)| {
            progress(&format!("scenario: {scenario}"));
            let (observed, as_expected) = match flow(&ctx) {
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

// ---- SPEC §10 flows ----

fn flow_socks(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    simple_buy(ctx, rec, Options::default(), "trail-socks", 2, 0)
}

fn flow_parka(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    simple_buy(ctx, rec, Options::default(), "down-parka", 1, 1)
}

fn flow_major_units(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    simple_buy(ctx, rec, Options::default(), "water-bottle", 1, 12)
}

fn flow_jpy_without_caps(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    let options = Options {
        caps: json!({ "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } }),
        ..Options::default()
    };
    simple_buy(ctx, rec, options, "tea-set", 1, 14)
}

fn flow_jpy(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    simple_buy(ctx, rec, Options::default(), "sencha-tin", 1, 15)
}

fn flow_merchant_not_allowed(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    simple_buy(ctx, rec, Options::default(), "camp-stove", 1, 18)
}

fn flow_live_mode(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    let options = Options {
        mode: "live",
        ..Options::default()
    };
    simple_buy(ctx, rec, options, "trail-socks", 1, 22)
}

/// A fresh world, one checkout, one payment with the test token.
fn simple_buy(
    ctx: &Ctx,
    rec: &mut Recorder,
    options: Options,
    slug: &str,
    quantity: u64,
    row: usize,
) -> Result<()> {
    let world = ctx.world(options)?;
    let mut mcp = world.proxy()?;
    let (checkout, total) = mcp.create_checkout(slug, quantity)?;
    let (result, reached) = attempt(&world, &checkout, || mcp.pay(&checkout))?;
    rec.record(row, &total, &result, reached);
    Ok(())
}

/// A day pack blocked for approval: the checkout, its total, the blocked answer and its request id.
fn blocked_day_pack(world: &World, mcp: &mut Mcp) -> Result<(String, String, Value, bool, String)> {
    let (checkout, total) = mcp.create_checkout("day-pack", 1)?;
    let (result, reached) = attempt(world, &checkout, || mcp.pay(&checkout))?;
    let request_id = verdict(&result)
        .2
        .ok_or_else(|| anyhow!("the day pack was not blocked with a request id"))?;
    Ok((checkout, total, result, reached, request_id))
}

/// Approves the request a blocked payment named (`cajaguard approve --yes`); its id.
pub(crate) fn approve_blocked(world: &World, blocked: &Value) -> Result<String> {
    let request_id = verdict(blocked)
        .2
        .ok_or_else(|| anyhow!("the payment was not blocked: {:?}", verdict(blocked)))?;
    approve(world, &request_id, &[])?;
    Ok(request_id)
}

pub(crate) fn approve(world: &World, request_id: &str, extra: &[&str]) -> Result<()> {
    let mut args = vec!["approve", request_id, "--yes"];
    args.extend_from_slice(extra);
    let out = world.cli(&args)?;
    if !out.status.success() {
        bail!(
            "cajaguard approve failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn flow_day_pack(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    let world = ctx.world(Options::default())?;
    let mut mcp = world.proxy()?;
    let (checkout, total, blocked, reached, request_id) = blocked_day_pack(&world, &mut mcp)?;
    rec.record(2, &total, &blocked, reached);
    approve(&world, &request_id, &[])?;
    let (result, reached) = attempt(&world, &checkout, || mcp.pay(&checkout))?;
    rec.record(3, &total, &result, reached);
    let (next, total) = mcp.create_checkout("trail-socks", 5)?;
    let (result, reached) = attempt(&world, &next, || mcp.pay(&next))?;
    rec.record(4, &total, &result, reached);
    Ok(())
}

fn flow_decline_then_replay(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    let world = ctx.world(Options::default())?;
    let mut mcp = world.proxy()?;
    let (checkout, total, _, _, request_id) = blocked_day_pack(&world, &mut mcp)?;
    approve(&world, &request_id, &[])?;
    let (declined, reached) = attempt(&world, &checkout, || {
        mcp.complete(
            &checkout,
            instrument(world::TEST_HANDLER, "cg_test_decline_0001"),
            &uuid()?,
            json!({}),
        )
    })?;
    rec.record(5, &total, &declined, reached);
    let (replay, reached) = attempt(&world, &checkout, || mcp.pay(&checkout))?;
    rec.record(6, &total, &replay, reached);
    Ok(())
}

fn flow_untrusted_key(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    let world = ctx.world(Options::default())?;
    let mut mcp = world.proxy()?;
    let (checkout, total, _, _, request_id) = blocked_day_pack(&world, &mut mcp)?;
    let stranger = world.dir.path().join("stranger");
    let stranger_text = stranger.to_string_lossy().into_owned();
    let out = std::process::Command::new(&world.bins.cajaguard)
        .args(["keygen", "--out", &stranger_text])
        .env("HOME", world.dir.path())
        .output()?;
    if !out.status.success() {
        bail!("keygen of the untrusted key failed");
    }
    approve(&world, &request_id, &["--key-dir", &stranger_text])?;
    let (result, reached) = attempt(&world, &checkout, || mcp.pay(&checkout))?;
    rec.record(7, &total, &result, reached);
    Ok(())
}

/// The one approval file in the world's `approvals/`.
fn approval_file(world: &World) -> Result<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(world.home.join("approvals"))? {
        files.push(entry?.path());
    }
    match files.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!("expected one approval file, found {}", files.len()),
    }
}

fn flow_edited_expiry(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    let world = ctx.world(Options::default())?;
    let mut mcp = world.proxy()?;
    let (checkout, total, _, _, request_id) = blocked_day_pack(&world, &mut mcp)?;
    approve(&world, &request_id, &["--ttl", "5m"])?;
    let path = approval_file(&world)?;
    let mut document: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    document["expires_at"] = json!("2099-01-01T00:00:00Z");
    std::fs::write(&path, serde_json::to_string_pretty(&document)?)?;
    let (result, reached) = attempt(&world, &checkout, || mcp.pay(&checkout))?;
    rec.record(8, &total, &result, reached);
    Ok(())
}

fn flow_expired(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    use cajaguard_core::approval::{self, ApprovalTerms, Decision, RequestId};
    let world = ctx.world(Options::default())?;
    let mut mcp = world.proxy()?;
    let (checkout, total, _, _, request_id) = blocked_day_pack(&world, &mut mcp)?;
    // Signed by the trusted key, issued 6 minutes ago with a 5 minute lifetime.
    let store = cajaguard::store::Store::open(&world.home)?;
    let id = RequestId::parse(&request_id).map_err(|e| anyhow!("{e}"))?;
    let pending = store
        .pending_request(&id)?
        .ok_or_else(|| anyhow!("the blocked request is not pending"))?;
    let key = cajaguard::keys::load_signing_key(&world.key_dir.join("approver.key.pem"))?;
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| anyhow!("no randomness: {e}"))?;
    let terms = ApprovalTerms {
        request_id: id,
        digest: pending.request.digest,
        decision: Decision::Approve,
        merchant: pending.request.merchant.clone(),
        checkout_id: pending.request.checkout_id.clone(),
        currency: pending.request.currency.clone(),
        total: pending.request.total,
        issued_at: time::OffsetDateTime::now_utc() - time::Duration::minutes(6),
        ttl: Duration::from_secs(300),
        nonce,
        note: "report: expired".to_owned(),
    };
    store.write_approval(&approval::sign(&key, &terms))?;
    let (result, reached) = attempt(&world, &checkout, || mcp.pay(&checkout))?;
    rec.record(9, &total, &result, reached);
    Ok(())
}

fn flow_signed_deny(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    let world = ctx.world(Options::default())?;
    let mut mcp = world.proxy()?;
    let (checkout, total, _, _, request_id) = blocked_day_pack(&world, &mut mcp)?;
    let out = world.cli(&["deny", &request_id, "--yes"])?;
    if !out.status.success() {
        bail!("cajaguard deny failed");
    }
    let (result, reached) = attempt(&world, &checkout, || mcp.pay(&checkout))?;
    rec.record(10, &total, &result, reached);
    Ok(())
}

fn flow_basket_grew(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    let world = ctx.world(Options::default())?;
    let mut mcp = world.proxy()?;
    let (checkout, _) = mcp.create_checkout("trail-socks", 5)?;
    let first = mcp.pay(&checkout)?;
    let request_id = verdict(&first)
        .2
        .ok_or_else(|| anyhow!("5 socks were not blocked with a request id"))?;
    approve(&world, &request_id, &[])?;
    let total = mcp.set_quantity(&checkout, "trail-socks", 8)?;
    let (result, reached) = attempt(&world, &checkout, || mcp.pay(&checkout))?;
    if verdict(&result).2.as_deref() == Some(request_id.as_str()) {
        bail!("the grown basket kept the old request id");
    }
    rec.record(11, &total, &result, reached);
    Ok(())
}

fn flow_agent_totals(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    let world = ctx.world(Options::default())?;
    let mut mcp = world.proxy()?;
    let (checkout, total) = mcp.create_checkout("down-parka", 1)?;
    let (result, reached) = attempt(&world, &checkout, || {
        mcp.complete(
            &checkout,
            instrument(world::TEST_HANDLER, world::TEST_TOKEN),
            &uuid()?,
            json!({ "totals": [{ "type": "total", "amount": 120 }] }),
        )
    })?;
    rec.record(13, &total, &result, reached);
    Ok(())
}

fn flow_split_purchase(ctx: &Ctx, rec: &mut Recorder) -> Result<()> {
    let world = ctx.world(Options::default())?;
    let mut mcp = world.proxy()?;
    for _ in 0..3 {
        let (checkout, total) = mcp.create_checkout("rain-shell", 1)?;
        let (result, reached) = attempt(&world, &checkout, || mcp.pay(&checkout))?;
        rec.record(16, &total, &result, reached);
    }
    let (checkout, total) = mcp.create_checkout("rain-shell", 1)?;
    let (result, reached) = attempt(&world, &checkout, || mcp.pay(&checkout))?;
    rec.record(17, &total, &result, reached);
    Ok(())
}

fn flow_tripwire(ctx: &Ctx, rec: &mut Recorder, row: usize) -> Result<()> {
    let instrument = match row {
        19 => instrument("com.shopify.shop_pay", world::TEST_TOKEN),
        20 => json!({ "id": "pi_1", "handler_id": world::TEST_HANDLER, "type": "card",
                      "credential": { "type": "card", "number": "4111111111111111", "expiry_month": 12, "expiry_year": 2030 } }),
        _ => instrument(world::TEST_HANDLER, "sk_live_51HxYzAbCdEfGh"),
    };
    let world = ctx.world(Options::default())?;
    let mut mcp = world.proxy()?;
    let (checkout, total) = mcp.create_checkout("trail-socks", 1)?;
    let (result, reached) = attempt(&world, &checkout, || {
        mcp.complete(&checkout, instrument, &uuid()?, json!({}))
    })?;
    rec.record(row, &total, &result, reached);
    Ok(())
}

// ---- the project's own scenarios ----

fn race_split_purchases(ctx: &Ctx) -> Result<(String, bool)> {
    const PROCESSES: usize = 8;
    let world = ctx.world(Options::default())?;
    let mut agents = Vec::new();
    for _ in 0..PROCESSES {
        let mut mcp = world.proxy()?;
        let (checkout, _) = mcp.create_checkout("rain-shell", 1)?;
        agents.push((mcp, checkout));
    }
    let barrier = Arc::new(Barrier::new(PROCESSES));
    let handles: Vec<_> = agents
        .into_iter()
        .map(|(mut mcp, checkout)| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || -> Result<(String, String)> {
                barrier.wait();
                let result = mcp.pay(&checkout)?;
                let (verdict, reason, _) = verdict(&result);
                Ok((verdict, reason))
            })
        })
        .collect();
    let mut allowed = 0;
    let mut over_window = 0;
    let mut other = Vec::new();
    for handle in handles {
        let (verdict, reason) = handle
            .join()
            .map_err(|_| anyhow!("an agent thread panicked"))??;
        match (verdict.as_str(), reason.as_str()) {
            ("allow", "within_caps") => allowed += 1,
            ("denied", "over_window_cap") => over_window += 1,
            _ => other.push(format!("{verdict}/{reason}")),
        }
    }
    let reached = count_fixture_completes(&world)?;
    let (spent, in_flight) = world.spend("USD")?;
    let observed = format!(
        "{allowed} allow / {over_window} over_window_cap{}, {reached} reached shop, {} counted ({} in flight)",
        if other.is_empty() {
            String::new()
        } else {
            format!(" / other: {}", other.join(", "))
        },
        world::money("USD", spent + in_flight),
        world::money("USD", in_flight),
    );
    let ok = allowed == 3
        && over_window == 5
        && other.is_empty()
        && reached == 3
        && spent == 13_500
        && in_flight == 0;
    Ok((observed, ok))
}

/// Every `complete_checkout` the fixture recorded.
fn count_fixture_completes(world: &World) -> Result<usize> {
    let path = world.dir.path().join("shop").join("calls.jsonl");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|call| call["tool"] == "complete_checkout")
        .count())
}

fn retry_after_lost_answer(ctx: &Ctx) -> Result<(String, bool)> {
    let day_pack = world::shop_checkout("Day pack", 8900, 1, "ready_for_complete");
    let script = world::test_shop_script(
        &day_pack,
        vec![json!({ "hang": true }), world::completed(&day_pack)],
    );
    let world = ctx.world(Options {
        timeout_seconds: 1,
        shop: Shop::Test(script),
        ..Options::default()
    })?;
    let mut mcp = world.proxy()?;
    let checkout = "gid://fixture/Checkout/lost-answer";
    let key = uuid()?;
    let pay = |mcp: &mut Mcp| {
        mcp.complete(
            checkout,
            instrument(world::TEST_HANDLER, world::TEST_TOKEN),
            &key,
            json!({}),
        )
    };
    approve_blocked(&world, &pay(&mut mcp)?)?;
    let started = Instant::now();
    let (first, first_reached) = attempt(&world, checkout, || pay(&mut mcp))?;
    let waited = started.elapsed();
    let (_, in_flight_after_loss) = world.spend("USD")?;
    let (retry, retry_reached) = attempt(&world, checkout, || pay(&mut mcp))?;
    let (spent, in_flight) = world.spend("USD")?;
    let reached_total = world.completes_reaching_shop(checkout)?;
    let (v1, r1, _) = verdict(&first);
    let (v2, r2, _) = verdict(&retry);
    let observed = format!(
        "1st {v1}/{r1} after {:.1} s (error: {}), reached shop: {}, {} in flight; retry {v2}/{r2}, reached shop: {}; {} completes at the shop, {} counted, {} in flight",
        waited.as_secs_f64(),
        first["isError"] == json!(true),
        yes_no(first_reached),
        world::money("USD", in_flight_after_loss),
        yes_no(retry_reached),
        reached_total,
        world::money("USD", spent),
        world::money("USD", in_flight),
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

fn race_one_approval(ctx: &Ctx) -> Result<(String, bool)> {
    let world = ctx.world(Options::default())?;
    let mut first = world.proxy()?;
    let second = world.proxy()?;
    let (checkout, _, _, _, request_id) = blocked_day_pack(&world, &mut first)?;
    approve(&world, &request_id, &[])?;
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = [first, second]
        .into_iter()
        .map(|mut mcp| {
            let barrier = Arc::clone(&barrier);
            let checkout = checkout.clone();
            std::thread::spawn(move || -> Result<(String, String)> {
                barrier.wait();
                let result = mcp.pay(&checkout)?;
                let (verdict, reason, _) = verdict(&result);
                Ok((verdict, reason))
            })
        })
        .collect();
    let mut rulings = Vec::new();
    for handle in handles {
        rulings.push(
            handle
                .join()
                .map_err(|_| anyhow!("an agent thread panicked"))??,
        );
    }
    let winners = rulings
        .iter()
        .filter(|(v, r)| v == "allow_approved" && r == "signed_approval")
        .count();
    let allowed = rulings
        .iter()
        .filter(|(v, _)| v.starts_with("allow"))
        .count();
    let reached = world.completes_reaching_shop(&checkout)?;
    let (spent, in_flight) = world.spend("USD")?;
    let observed = format!(
        "{}; {reached} complete reached shop, {} counted",
        rulings
            .iter()
            .map(|(v, r)| format!("{v}/{r}"))
            .collect::<Vec<_>>()
            .join(" vs "),
        world::money("USD", spent + in_flight),
    );
    let ok = winners == 1 && allowed == 1 && reached == 1 && spent == 8900 && in_flight == 0;
    Ok((observed, ok))
}

fn kill_between_reservation_and_answer(ctx: &Ctx) -> Result<(String, bool)> {
    let rain_shell = world::shop_checkout("Rain shell", 4500, 1, "ready_for_complete");
    let world = ctx.world(Options {
        timeout_seconds: 30,
        shop: Shop::Test(world::test_shop_script(
            &rain_shell,
            vec![json!({ "hang": true })],
        )),
        ..Options::default()
    })?;
    let killed_checkout = "gid://fixture/Checkout/killed";
    let killed_key = uuid()?;
    let args = |checkout: &str, key: &str| {
        Mcp::complete_args(
            checkout,
            instrument(world::TEST_HANDLER, world::TEST_TOKEN),
            key,
            json!({}),
        )
    };

    // The payment is reserved and forwarded; the shop never answers; the proxy dies.
    let mut doomed = world.proxy()?;
    doomed.send_request(
        "tools/call",
        json!({"name": "complete_checkout", "arguments": args(killed_checkout, &killed_key)}),
    )?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while world.completes_reaching_shop(killed_checkout)? == 0 {
        if Instant::now() > deadline {
            bail!("the payment never reached the shop");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    doomed.kill()?;
    let (spent_after_kill, in_flight_after_kill) = world.spend("USD")?;

    // Restart, with a shop that now answers.
    world.rewrite_script(&world::test_shop_script(
        &rain_shell,
        vec![world::completed(&rain_shell)],
    ))?;
    let mut mcp = world.proxy()?;
    let mut rulings = Vec::new();
    for n in 1..=3 {
        let checkout = format!("gid://fixture/Checkout/after-restart-{n}");
        let result = mcp.call("complete_checkout", args(&checkout, &uuid()?))?;
        let (v, r, _) = verdict(&result);
        rulings.push(format!("{v}/{r}"));
    }
    let retry = mcp.call("complete_checkout", args(killed_checkout, &killed_key))?;
    let (rv, rr, _) = verdict(&retry);
    let reached = world.completes_reaching_shop(killed_checkout)?;
    let (spent, in_flight) = world.spend("USD")?;
    let observed = format!(
        "after kill: {} counted, {} in flight; after restart: {}; retry of the killed attempt {rv}/{rr} ({reached} completes at the shop); {} counted, {} in flight",
        world::money("USD", spent_after_kill),
        world::money("USD", in_flight_after_kill),
        rulings.join(", "),
        world::money("USD", spent),
        world::money("USD", in_flight),
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

//! The flows of SPEC §10: each makes its worlds through a [`Setup`], pays as an agent would and
//! reports every attempt to the [`Observer`] under the row it stands for.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::rows::*;
use super::{Observed, Observer, Row, Setup};
use crate::bins::cajaguard_bin;
use crate::mcp::Mcp;
use crate::ucp::{TEST_HANDLER, TEST_TOKEN, instrument, raw_card_instrument, uuid, verdict};
use crate::world::{Options, World, read_json};

/// One `complete_checkout` with `call`, observed as `row`; the answer, for what else a flow checks.
fn attempt(
    world: &World,
    obs: &mut dyn Observer,
    row: &'static Row,
    checkout: &str,
    total: &str,
    call: impl FnOnce() -> Value,
) -> Value {
    let before = world.completes_reaching_shop(checkout);
    let answer = call();
    let reached_shop = world.completes_reaching_shop(checkout) > before;
    let (verdict, reason, _) = verdict(&answer);
    obs.observe(
        row,
        Observed {
            total: total.to_owned(),
            verdict,
            reason,
            reached_shop,
            answer: answer.clone(),
        },
    );
    answer
}

/// Pays `checkout` with the test instrument, observed as `row`.
fn pay(
    world: &World,
    mcp: &mut Mcp,
    obs: &mut dyn Observer,
    row: &'static Row,
    checkout: &str,
    total: &str,
) -> Value {
    attempt(world, obs, row, checkout, total, || mcp.pay(checkout))
}

/// A fresh world, one checkout, one payment with the test token.
fn simple_buy(
    world: World,
    obs: &mut dyn Observer,
    row: &'static Row,
    slug: &str,
    quantity: u64,
) -> Value {
    let mut mcp = world.proxy();
    let (checkout, total) = mcp.create_priced(slug, quantity);
    pay(&world, &mut mcp, obs, row, &checkout, &total)
}

/// A default world whose proxy has a day pack blocked for approval (observed as such): the
/// world, the session, the checkout, its total and the request id.
fn blocked_day_pack(setup: &Setup, obs: &mut dyn Observer) -> (World, Mcp, String, String, String) {
    let world = setup.default_world();
    let mut mcp = world.proxy();
    let (checkout, total) = mcp.create_priced("day-pack", 1);
    let blocked = pay(&world, &mut mcp, obs, &DAY_PACK_BLOCKED, &checkout, &total);
    let request_id = verdict(&blocked)
        .2
        .expect("a blocked payment names its request id");
    let next = blocked["structuredContent"]["cajaguard"]["next"]
        .as_str()
        .unwrap_or_default();
    assert!(
        next.contains(&format!("cajaguard approve {request_id}")),
        "next step: {next}"
    );
    (world, mcp, checkout, total, request_id)
}

/// `cajaguard approve REQUEST --yes EXTRA...`, which must succeed; its stderr.
pub fn approve(world: &World, request_id: &str, extra: &[&str]) -> String {
    let mut args = vec!["approve", request_id, "--yes"];
    args.extend_from_slice(extra);
    let out = world.cli(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "approve failed: {stderr}");
    stderr
}

/// Approves the request a blocked payment named; its id.
pub fn approve_blocked(world: &World, blocked: &Value) -> String {
    let request_id = verdict(blocked)
        .2
        .unwrap_or_else(|| panic!("the payment was not blocked: {blocked}"));
    approve(world, &request_id, &[]);
    request_id
}

/// The one approval file in the world's `approvals/`.
pub(super) fn approval_file(world: &World) -> PathBuf {
    let files: Vec<_> = std::fs::read_dir(world.approvals_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "one approval file expected: {files:?}");
    files[0].clone()
}

pub(super) fn two_trail_socks_with_a_test_token_are_allowed(setup: &Setup, obs: &mut dyn Observer) {
    let result = simple_buy(setup.default_world(), obs, &SOCKS, "trail-socks", 2);
    assert_eq!(
        result["structuredContent"]["status"], "completed",
        "{result}"
    );
}

pub(super) fn down_parka_is_over_the_per_transaction_cap(setup: &Setup, obs: &mut dyn Observer) {
    let result = simple_buy(setup.default_world(), obs, &PARKA, "down-parka", 1);
    assert_eq!(result["isError"], true, "{result}");
}

pub(super) fn day_pack_without_approval_is_blocked_then_allowed_with_one(
    setup: &Setup,
    obs: &mut dyn Observer,
) {
    let (world, mut mcp, checkout, total, request_id) = blocked_day_pack(setup, obs);
    approve(&world, &request_id, &[]);
    let result = pay(&world, &mut mcp, obs, &DAY_PACK_APPROVED, &checkout, &total);
    assert_eq!(
        result["structuredContent"]["status"], "completed",
        "{result}"
    );

    // The next basket over the threshold needs its own approval.
    let (next, total) = mcp.create_priced("trail-socks", 5);
    pay(&world, &mut mcp, obs, &NEXT_BASKET, &next, &total);
}

pub(super) fn approved_then_declined_by_the_shop_cannot_be_replayed(
    setup: &Setup,
    obs: &mut dyn Observer,
) {
    let (world, mut mcp, checkout, total, request_id) = blocked_day_pack(setup, obs);
    approve(&world, &request_id, &[]);
    let declined = attempt(&world, obs, &SHOP_DECLINES, &checkout, &total, || {
        mcp.complete(
            &checkout,
            instrument(TEST_HANDLER, "cg_test_decline_0001"),
            &uuid(),
            json!({}),
        )
    });
    assert_eq!(declined["isError"], true, "the shop declined: {declined}");
    pay(&world, &mut mcp, obs, &REPLAY, &checkout, &total);
}

pub(super) fn approval_signed_by_an_untrusted_key_is_refused(
    setup: &Setup,
    obs: &mut dyn Observer,
) {
    let (world, mut mcp, checkout, total, request_id) = blocked_day_pack(setup, obs);
    let stranger = world.dir.path().join("stranger");
    let stranger = stranger.to_string_lossy();
    let out = std::process::Command::new(cajaguard_bin())
        .args(["keygen", "--out", &stranger])
        .env("HOME", world.dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "keygen of the untrusted key: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let warned = approve(&world, &request_id, &["--key-dir", &stranger]);
    assert!(
        warned.contains("not in approvals.trusted_keys"),
        "approve warns about the key: {warned}"
    );
    pay(&world, &mut mcp, obs, &UNTRUSTED_KEY, &checkout, &total);
}

pub(super) fn approval_with_an_edited_expiry_has_a_bad_signature(
    setup: &Setup,
    obs: &mut dyn Observer,
) {
    let (world, mut mcp, checkout, total, request_id) = blocked_day_pack(setup, obs);
    approve(&world, &request_id, &["--ttl", "5m"]);
    let path = approval_file(&world);
    let mut document = read_json(&path);
    document["expires_at"] = json!("2099-01-01T00:00:00Z");
    std::fs::write(&path, serde_json::to_string_pretty(&document).unwrap()).unwrap();
    pay(&world, &mut mcp, obs, &EDITED_EXPIRY, &checkout, &total);
}

pub(super) fn approval_six_minutes_after_a_five_minute_ttl_has_expired(
    setup: &Setup,
    obs: &mut dyn Observer,
) {
    use cajaguard_core::approval::{self, ApprovalTerms, Decision, RequestId};
    let (world, mut mcp, checkout, total, request_id) = blocked_day_pack(setup, obs);
    // Signed by the trusted key, issued 6 minutes ago with a 5 minute lifetime.
    let store = cajaguard::store::Store::open(&world.home).unwrap();
    let id = RequestId::parse(&request_id).unwrap();
    let pending = store
        .pending_request(&id)
        .unwrap()
        .expect("the blocked request is pending");
    let key = cajaguard::keys::load_signing_key(&world.key_dir.join("approver.key.pem")).unwrap();
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).unwrap();
    let terms = ApprovalTerms {
        request_id: id,
        digest: pending.request.digest,
        decision: Decision::Approve,
        merchant: pending.request.merchant.clone(),
        checkout_id: pending.request.checkout_id.clone(),
        currency: pending.request.currency.clone(),
        total: pending.request.total,
        issued_at: time::OffsetDateTime::now_utc() - time::Duration::minutes(6),
        ttl: std::time::Duration::from_secs(300),
        nonce,
        note: "expired on purpose".to_owned(),
        checkpoint: None,
    };
    store.write_approval(&approval::sign(&key, &terms)).unwrap();
    pay(&world, &mut mcp, obs, &EXPIRED, &checkout, &total);
}

pub(super) fn a_signed_deny_denies(setup: &Setup, obs: &mut dyn Observer) {
    let (world, mut mcp, checkout, total, request_id) = blocked_day_pack(setup, obs);
    let out = world.cli(&["deny", &request_id, "--yes"]);
    assert!(
        out.status.success(),
        "deny failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    pay(&world, &mut mcp, obs, &SIGNED_DENY, &checkout, &total);
}

pub(super) fn basket_grown_after_approval_needs_a_new_one(setup: &Setup, obs: &mut dyn Observer) {
    let world = setup.default_world();
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("trail-socks", 5);
    // Five socks are over the approval threshold too (the row the day pack's flow observes).
    let before = world.completes_reaching_shop(&checkout);
    let first = mcp.pay(&checkout);
    assert_eq!(
        verdict(&first).1,
        "pending_approval",
        "five socks wait for a human: {first}"
    );
    assert_eq!(world.completes_reaching_shop(&checkout), before);
    let first = approve_blocked(&world, &first);
    let total = mcp.set_quantity(&checkout, "trail-socks", 8);
    let result = pay(&world, &mut mcp, obs, &BASKET_GREW, &checkout, &total);
    assert_ne!(
        verdict(&result).2.as_deref(),
        Some(first.as_str()),
        "a changed basket is a new request"
    );
}

pub(super) fn merchant_reporting_major_units_is_refused(setup: &Setup, obs: &mut dyn Observer) {
    simple_buy(setup.default_world(), obs, &MAJOR_UNITS, "water-bottle", 1);
}

pub(super) fn agent_sending_totals_is_refused(setup: &Setup, obs: &mut dyn Observer) {
    let world = setup.default_world();
    let mut mcp = world.proxy();
    let (checkout, total) = mcp.create_priced("down-parka", 1);
    let result = attempt(&world, obs, &AGENT_TOTALS, &checkout, &total, || {
        mcp.complete(
            &checkout,
            instrument(TEST_HANDLER, TEST_TOKEN),
            &uuid(),
            json!({ "totals": [{ "type": "total", "amount": 120 }] }),
        )
    });
    let detail = result["structuredContent"]["cajaguard"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        detail.contains("totals"),
        "the refusal names the field: {result}"
    );
}

pub(super) fn jpy_checkout_without_jpy_caps_is_refused(setup: &Setup, obs: &mut dyn Observer) {
    let world = setup.world(Options {
        caps: json!({ "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } }),
        ..Options::default()
    });
    simple_buy(world, obs, &JPY_WITHOUT_CAPS, "tea-set", 1);
}

pub(super) fn jpy_checkout_within_jpy_caps_is_allowed(setup: &Setup, obs: &mut dyn Observer) {
    simple_buy(setup.default_world(), obs, &JPY, "sencha-tin", 1);
}

pub(super) fn split_purchase_cannot_slip_past_the_window(setup: &Setup, obs: &mut dyn Observer) {
    let world = setup.default_world();
    let mut mcp = world.proxy();
    for row in [
        &SPLIT_FIRST_THREE,
        &SPLIT_FIRST_THREE,
        &SPLIT_FIRST_THREE,
        &SPLIT_FOURTH,
    ] {
        let (checkout, total) = mcp.create_priced("rain-shell", 1);
        pay(&world, &mut mcp, obs, row, &checkout, &total);
    }
}

pub(super) fn merchant_not_on_the_allowlist_is_refused(setup: &Setup, obs: &mut dyn Observer) {
    simple_buy(
        setup.default_world(),
        obs,
        &MERCHANT_NOT_ALLOWED,
        "camp-stove",
        1,
    );
}

pub(super) fn test_mode_tripwire_refuses_real_credentials(setup: &Setup, obs: &mut dyn Observer) {
    let world = setup.default_world();
    let mut mcp = world.proxy();
    let cases = [
        (&SHOP_PAY, instrument("com.shopify.shop_pay", TEST_TOKEN)),
        (&RAW_PAN, raw_card_instrument()),
        (
            &LIVE_TOKEN,
            instrument(TEST_HANDLER, "sk_live_51HxYzAbCdEfGh"),
        ),
    ];
    for (row, instrument) in cases {
        let (checkout, total) = mcp.create_priced("trail-socks", 1);
        attempt(&world, obs, row, &checkout, &total, || {
            mcp.complete(&checkout, instrument, &uuid(), json!({}))
        });
    }
}

pub(super) fn live_mode_needs_an_approval_even_for_twelve_dollars(
    setup: &Setup,
    obs: &mut dyn Observer,
) {
    let world = setup.world(Options {
        mode: "live",
        ..Options::default()
    });
    simple_buy(world, obs, &LIVE_MODE, "trail-socks", 1);
}

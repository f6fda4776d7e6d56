//! SPEC §10: every scenario of the seed's report, end to end: `cajaguard mcp` as a real child process
//! in front of the real fixture shop, from a fresh home each, with real keys and the real store.
//! "Reached shop" is read from the fixture's own record of calls.
//!
//! The bodies live here once and run over each transport: `tests/scenarios.rs` (the fixture on
//! stdio) and `tests/scenarios_http.rs` (the fixture over MCP Streamable HTTP with a bearer token),
//! each through [`spec_scenarios!`].

use serde_json::{Value, json};

use crate::support::*;

/// Asserts the verdict and reason of a complete_checkout result and whether that attempt reached
/// the shop (by the shop's count of complete calls for the checkout before and after).
fn expect(
    world: &World,
    checkout: &str,
    before: usize,
    result: &Value,
    verdict_: &str,
    reason: &str,
    reached: bool,
) {
    let (v, r, _) = verdict(result);
    assert_eq!(
        (v.as_str(), r.as_str()),
        (verdict_, reason),
        "unexpected ruling: {result}"
    );
    let after = world.completes_reaching_shop(checkout);
    assert_eq!(
        after > before,
        reached,
        "reached shop should be {reached}: {result}"
    );
    let text = result.to_string();
    assert!(
        !text.contains(TEST_TOKEN),
        "the token leaked into the answer: {text}"
    );
}

fn attempt(world: &World, mcp: &mut Mcp, checkout: &str) -> (usize, Value) {
    let before = world.completes_reaching_shop(checkout);
    (before, mcp.pay(checkout))
}

/// A blocked day pack and its request id.
fn blocked_day_pack(world: &World, mcp: &mut Mcp) -> (String, String) {
    let checkout = mcp.create_checkout("day-pack", 1);
    let (before, result) = attempt(world, mcp, &checkout);
    expect(
        world,
        &checkout,
        before,
        &result,
        "blocked",
        "pending_approval",
        false,
    );
    let request_id = verdict(&result)
        .2
        .expect("a blocked payment names its request id");
    let next = result["structuredContent"]["cajaguard"]["next"]
        .as_str()
        .unwrap();
    assert!(
        next.contains(&format!("cajaguard approve {request_id}")),
        "next step: {next}"
    );
    (checkout, request_id)
}

fn approve(world: &World, request_id: &str, extra: &[&str]) {
    let mut args = vec!["approve", request_id, "--yes"];
    args.extend_from_slice(extra);
    let out = world.cli(&args);
    assert!(
        out.status.success(),
        "approve failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn approval_file(world: &World) -> std::path::PathBuf {
    let files: Vec<_> = std::fs::read_dir(world.approvals_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "one approval file expected: {files:?}");
    files[0].clone()
}

pub fn two_trail_socks_with_a_test_token_are_allowed(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("trail-socks", 2);
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "allow",
        "within_caps",
        true,
    );
    assert_eq!(
        result["structuredContent"]["status"], "completed",
        "{result}"
    );
}

pub fn down_parka_is_over_the_per_transaction_cap(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("down-parka", 1);
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "denied",
        "over_per_transaction_cap",
        false,
    );
    assert_eq!(result["isError"], true);
}

pub fn day_pack_without_approval_is_blocked_then_allowed_with_one(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let (checkout, request_id) = blocked_day_pack(&world, &mut mcp);
    approve(&world, &request_id, &[]);
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "allow_approved",
        "signed_approval",
        true,
    );
    assert_eq!(result["structuredContent"]["status"], "completed");

    // The next basket over the threshold needs its own approval.
    let next = mcp.create_checkout("trail-socks", 5);
    let (before, result) = attempt(&world, &mut mcp, &next);
    expect(
        &world,
        &next,
        before,
        &result,
        "blocked",
        "pending_approval",
        false,
    );
}

pub fn approved_then_declined_by_the_shop_cannot_be_replayed(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let (checkout, request_id) = blocked_day_pack(&world, &mut mcp);
    approve(&world, &request_id, &[]);
    let before = world.completes_reaching_shop(&checkout);
    let declined = mcp.complete(
        &checkout,
        instrument(TEST_HANDLER, "cg_test_decline_0001"),
        &uuid(),
        json!({}),
    );
    expect(
        &world,
        &checkout,
        before,
        &declined,
        "allow_approved",
        "signed_approval",
        true,
    );
    assert_eq!(declined["isError"], true, "the shop declined: {declined}");

    let (before, replay) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &replay,
        "blocked",
        "approval_already_used",
        false,
    );
}

pub fn approval_signed_by_an_untrusted_key_is_refused(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let (checkout, request_id) = blocked_day_pack(&world, &mut mcp);
    let stranger = world.dir.path().join("stranger");
    let out = std::process::Command::new(cajaguard_bin())
        .args(["keygen", "--out"])
        .arg(&stranger)
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = std::process::Command::new(cajaguard_bin())
        .args(["approve", &request_id, "--yes", "--key-dir"])
        .arg(&stranger)
        .arg("--config")
        .arg(&world.config)
        .env(TOKEN_VAR, SHOP_TOKEN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not in approvals.trusted_keys"),
        "approve warns about the key"
    );
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "blocked",
        "approval_untrusted_key",
        false,
    );
}

pub fn approval_with_an_edited_expiry_has_a_bad_signature(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let (checkout, request_id) = blocked_day_pack(&world, &mut mcp);
    approve(&world, &request_id, &["--ttl", "5m"]);
    let path = approval_file(&world);
    let mut document = read_json(&path);
    document["expires_at"] = json!("2099-01-01T00:00:00Z");
    std::fs::write(&path, serde_json::to_string_pretty(&document).unwrap()).unwrap();
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "blocked",
        "approval_bad_signature",
        false,
    );
}

pub fn approval_six_minutes_after_a_five_minute_ttl_has_expired(transport: Transport) {
    use cajaguard_core::approval::{self, ApprovalTerms, BasketDigest, Decision, RequestId};
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let (checkout, request_id) = blocked_day_pack(&world, &mut mcp);
    // Signed by the trusted key, issued 6 minutes ago with a 5 minute lifetime.
    let store = cajaguard::store::Store::open(&world.home).unwrap();
    let id = RequestId::parse(&request_id).unwrap();
    let pending = store
        .pending_request(&id)
        .unwrap()
        .expect("the blocked request is pending");
    let key = cajaguard::keys::load_signing_key(&world.key_dir.join("approver.key.pem")).unwrap();
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
        nonce: [7; 16],
        note: String::new(),
    };
    let _: BasketDigest = terms.digest;
    store.write_approval(&approval::sign(&key, &terms)).unwrap();
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "blocked",
        "approval_expired",
        false,
    );
}

pub fn a_signed_deny_denies(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let (checkout, request_id) = blocked_day_pack(&world, &mut mcp);
    let out = world.cli(&["deny", &request_id, "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "denied",
        "approval_denied",
        false,
    );
}

pub fn basket_grown_after_approval_needs_a_new_one(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("trail-socks", 5);
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "blocked",
        "pending_approval",
        false,
    );
    let first = verdict(&result).2.unwrap();
    approve(&world, &first, &[]);
    mcp.set_quantity(&checkout, "trail-socks", 8);
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "blocked",
        "pending_approval",
        false,
    );
    assert_ne!(
        verdict(&result).2.unwrap(),
        first,
        "a changed basket is a new request"
    );
}

pub fn merchant_reporting_major_units_is_refused(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("water-bottle", 1);
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "denied",
        "amount_not_minor_units",
        false,
    );
}

pub fn agent_sending_totals_is_refused(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("down-parka", 1);
    let before = world.completes_reaching_shop(&checkout);
    let result = mcp.complete(
        &checkout,
        instrument(TEST_HANDLER, TEST_TOKEN),
        &uuid(),
        json!({ "totals": [{ "type": "total", "amount": 120 }] }),
    );
    expect(
        &world,
        &checkout,
        before,
        &result,
        "denied",
        "request_field_not_allowed",
        false,
    );
    assert!(
        result["structuredContent"]["cajaguard"]["detail"]
            .as_str()
            .unwrap()
            .contains("totals")
    );
}

pub fn jpy_checkout_without_jpy_caps_is_refused(transport: Transport) {
    let world = World::with(Options {
        caps: json!({ "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } }),
        transport,
        ..Options::default()
    });
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("tea-set", 1);
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "denied",
        "currency_not_allowed",
        false,
    );
}

pub fn jpy_checkout_within_jpy_caps_is_allowed(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("sencha-tin", 1);
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "allow",
        "within_caps",
        true,
    );
}

pub fn split_purchase_cannot_slip_past_the_window(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    for _ in 0..3 {
        let checkout = mcp.create_checkout("rain-shell", 1);
        let (before, result) = attempt(&world, &mut mcp, &checkout);
        expect(
            &world,
            &checkout,
            before,
            &result,
            "allow",
            "within_caps",
            true,
        );
    }
    let checkout = mcp.create_checkout("rain-shell", 1);
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "denied",
        "over_window_cap",
        false,
    );
}

pub fn merchant_not_on_the_allowlist_is_refused(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("camp-stove", 1);
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "denied",
        "merchant_not_allowed",
        false,
    );
}

pub fn test_mode_tripwire_refuses_real_credentials(transport: Transport) {
    let world = World::on(transport);
    let mut mcp = world.proxy();
    let cases = [
        (
            "shop pay handler",
            instrument("com.shopify.shop_pay", TEST_TOKEN),
        ),
        (
            "raw PAN",
            json!({ "id": "pi_1", "handler_id": TEST_HANDLER, "type": "card",
                    "credential": { "type": "card", "number": "4111111111111111", "expiry_month": 12, "expiry_year": 2030 } }),
        ),
        (
            "live token",
            instrument(TEST_HANDLER, "sk_live_51HxYzAbCdEfGh"),
        ),
    ];
    for (name, instrument) in cases {
        let checkout = mcp.create_checkout("trail-socks", 1);
        let before = world.completes_reaching_shop(&checkout);
        let result = mcp.complete(&checkout, instrument, &uuid(), json!({}));
        expect(
            &world,
            &checkout,
            before,
            &result,
            "denied",
            "test_mode_credential",
            false,
        );
        let text = result.to_string();
        assert!(
            !text.contains("4111111111111111") && !text.contains("sk_live_51"),
            "{name}: secret in answer: {text}"
        );
    }
}

pub fn live_mode_needs_an_approval_even_for_twelve_dollars(transport: Transport) {
    let world = World::with(Options {
        mode: "live",
        transport,
        ..Options::default()
    });
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("trail-socks", 1);
    let (before, result) = attempt(&world, &mut mcp, &checkout);
    expect(
        &world,
        &checkout,
        before,
        &result,
        "blocked",
        "pending_approval",
        false,
    );
}

/// One `#[test]` per scenario, run over `$transport`.
macro_rules! spec_scenarios {
    ($transport:expr) => {
        #[test]
        fn two_trail_socks_with_a_test_token_are_allowed() {
            spec_scenarios::two_trail_socks_with_a_test_token_are_allowed($transport)
        }
        #[test]
        fn down_parka_is_over_the_per_transaction_cap() {
            spec_scenarios::down_parka_is_over_the_per_transaction_cap($transport)
        }
        #[test]
        fn day_pack_without_approval_is_blocked_then_allowed_with_one() {
            spec_scenarios::day_pack_without_approval_is_blocked_then_allowed_with_one($transport)
        }
        #[test]
        fn approved_then_declined_by_the_shop_cannot_be_replayed() {
            spec_scenarios::approved_then_declined_by_the_shop_cannot_be_replayed($transport)
        }
        #[test]
        fn approval_signed_by_an_untrusted_key_is_refused() {
            spec_scenarios::approval_signed_by_an_untrusted_key_is_refused($transport)
        }
        #[test]
        fn approval_with_an_edited_expiry_has_a_bad_signature() {
            spec_scenarios::approval_with_an_edited_expiry_has_a_bad_signature($transport)
        }
        #[test]
        fn approval_six_minutes_after_a_five_minute_ttl_has_expired() {
            spec_scenarios::approval_six_minutes_after_a_five_minute_ttl_has_expired($transport)
        }
        #[test]
        fn a_signed_deny_denies() {
            spec_scenarios::a_signed_deny_denies($transport)
        }
        #[test]
        fn basket_grown_after_approval_needs_a_new_one() {
            spec_scenarios::basket_grown_after_approval_needs_a_new_one($transport)
        }
        #[test]
        fn merchant_reporting_major_units_is_refused() {
            spec_scenarios::merchant_reporting_major_units_is_refused($transport)
        }
        #[test]
        fn agent_sending_totals_is_refused() {
            spec_scenarios::agent_sending_totals_is_refused($transport)
        }
        #[test]
        fn jpy_checkout_without_jpy_caps_is_refused() {
            spec_scenarios::jpy_checkout_without_jpy_caps_is_refused($transport)
        }
        #[test]
        fn jpy_checkout_within_jpy_caps_is_allowed() {
            spec_scenarios::jpy_checkout_within_jpy_caps_is_allowed($transport)
        }
        #[test]
        fn split_purchase_cannot_slip_past_the_window() {
            spec_scenarios::split_purchase_cannot_slip_past_the_window($transport)
        }
        #[test]
        fn merchant_not_on_the_allowlist_is_refused() {
            spec_scenarios::merchant_not_on_the_allowlist_is_refused($transport)
        }
        #[test]
        fn test_mode_tripwire_refuses_real_credentials() {
            spec_scenarios::test_mode_tripwire_refuses_real_credentials($transport)
        }
        #[test]
        fn live_mode_needs_an_approval_even_for_twelve_dollars() {
            spec_scenarios::live_mode_needs_an_approval_even_for_twelve_dollars($transport)
        }
    };
}
pub(crate) use spec_scenarios;

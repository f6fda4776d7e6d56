//! Per-agent caps in the gate (SPEC §13): an agent's own caps (`serve.agents[].caps`) or the
//! shared `agent_caps` hold on top of the global caps, checked by the same `decide`; the agent is
//! bound into the request digest. One table through one helper, [`run`], like `gate_table.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use cajaguard_core::agent::AgentId;
use cajaguard_core::approval::{BasketDigest, TrustedKeys};
use cajaguard_core::effect::{CheckoutLedger, Effect, LedgerView, Outcome};
use cajaguard_core::gate::{self, Facts};
use cajaguard_core::quote::Quote;
use cajaguard_core::verdict::{Reason, Verdict};
use common::*;
use serde_json::{Value, json};

/// Global USD 50 / 100 / 150 and JPY; `ci-bot` has its own USD caps 20 / 60 / 80, `roomy` its own
/// USD caps above the global threshold (60 / 100 / 150), and every other agent `agent_caps`, USD
/// 30 / 70 / 90. No agent's caps list JPY.
fn agents_config(c: &mut Value) {
    c["serve"] = json!({
        "listen": "127.0.0.1:8376",
        "agents": [
            { "name": "ci-bot", "caps": { "USD": { "approval_above": "20.00", "per_transaction": "60.00", "window": "80.00" } } },
            { "name": "roomy", "caps": { "USD": { "approval_above": "60.00", "per_transaction": "100.00", "window": "150.00" } } },
            { "name": "listed" }
        ]
    });
    c["agent_caps"] = json!({ "USD": { "approval_above": "30.00", "per_transaction": "70.00", "window": "90.00" } });
}

/// Only `serve` with an agent without caps, and no `agent_caps`: only the global caps hold.
fn serve_without_caps(c: &mut Value) {
    c["serve"] = json!({ "listen": "127.0.0.1:8376", "agents": [{ "name": "ci-bot" }] });
}

struct Case {
    name: &'static str,
    config: fn(&mut Value),
    agent: Option<&'static str>,
    shop: Value,
    /// Global and the agent's own spend in the window (before this payment).
    window_spent: i64,
    agent_window_spent: i64,
    expect: (Verdict, Reason),
}

fn case(
    name: &'static str,
    agent: Option<&'static str>,
    shop: Value,
    expect: (Verdict, Reason),
) -> Case {
    Case {
        name,
        config: agents_config,
        agent,
        shop,
        window_spent: 0,
        agent_window_spent: 0,
        expect,
    }
}

const ALLOW: (Verdict, Reason) = (Verdict::Allow, Reason::WithinCaps);
const PENDING: (Verdict, Reason) = (Verdict::Blocked, Reason::PendingApproval);
const OVER_TX: (Verdict, Reason) = (Verdict::Denied, Reason::OverPerTransactionCap);
const OVER_WINDOW: (Verdict, Reason) = (Verdict::Denied, Reason::OverWindowCap);
const NO_CURRENCY: (Verdict, Reason) = (Verdict::Denied, Reason::CurrencyNotAllowed);

fn jpy(product: (&str, &str, i64), qty: i64) -> Value {
    shop_checkout(
        "tokyo-tea.example",
        "JPY",
        product,
        qty,
        "ready_for_complete",
    )
}

/// The one helper: precheck, quote and decide for `case.agent`, with the digest bound to it.
fn run(case: &Case) -> Outcome {
    let mut config = config_json();
    (case.config)(&mut config);
    let policy = policy_from(&config);
    let trusted = TrustedKeys(vec![trusted_key().public_key()]);
    let request = gate::precheck(&policy, &complete_args()).unwrap();
    let quote = Quote::from_shop(&case.shop).unwrap();
    let agent = case.agent.map(|a| AgentId::parse(a).unwrap());
    let digest = BasketDigest::of_request(&quote, &request.instruments, agent.as_ref());
    let ledger = LedgerView {
        window_spent: case.window_spent,
        agent_window_spent: case.agent_window_spent,
        checkout: CheckoutLedger::Fresh,
        frozen: None,
    };
    let outcome = gate::decide(
        &policy,
        &Facts {
            request: &request,
            quote: &quote,
            digest: &digest,
            ledger: &ledger,
            approvals: &[],
            passkey_approvals: &[],
            trusted_keys: &trusted,
            agent: agent.as_ref(),
            now: NOW,
        },
    );
    let name = case.name;
    let ruling = &outcome.ruling;
    assert_eq!(
        (ruling.verdict(), ruling.reason()),
        case.expect,
        "{name}: {}",
        ruling.detail()
    );
    assert!(!ruling.detail().is_empty(), "{name}: empty detail");
    match &outcome.effect {
        Effect::Forward { digest: d, .. } => assert_eq!(*d, digest, "{name}"),
        Effect::Refuse { pending: Some(p) } => {
            assert_eq!(
                p.agent, agent,
                "{name}: the pending request names its agent"
            );
            assert_eq!(p.digest, digest, "{name}");
            assert_eq!(Some(&p.request_id), ruling.request_id(), "{name}");
        }
        Effect::Refuse { pending: None } => {}
        Effect::Retry => panic!("{name}: a fresh checkout is never a retry"),
    }
    outcome
}

#[test]
fn agent_caps_hold_on_top_of_the_global_ones() {
    let cases = vec![
        // Per-transaction: 89.00 is within the global 100.00 (it would wait for approval).
        case("no agent: global only", None, usd(PACK, 1), PENDING),
        case("own per_transaction", Some("ci-bot"), usd(PACK, 1), OVER_TX),
        case(
            "agent_caps per_transaction",
            Some("other"),
            usd(STOVE, 1),
            OVER_TX,
        ),
        case(
            "agent_caps for a listed agent without caps",
            Some("listed"),
            usd(STOVE, 1),
            OVER_TX,
        ),
        case(
            "within own caps, under every threshold",
            Some("ci-bot"),
            usd(SOCKS, 1),
            ALLOW,
        ),
        // The agent's own window: global spend is far from 150.00.
        Case {
            window_spent: 4000,
            agent_window_spent: 4000,
            ..case("own window", Some("ci-bot"), usd(SHELL, 1), OVER_WINDOW)
        },
        Case {
            window_spent: 5000,
            agent_window_spent: 5000,
            ..case(
                "agent_caps window",
                Some("other"),
                usd(SHELL, 1),
                OVER_WINDOW,
            )
        },
        Case {
            window_spent: 5000,
            agent_window_spent: 3000,
            ..case("own window with room", Some("ci-bot"), usd(SOCKS, 1), ALLOW)
        },
        Case {
            window_spent: 14000,
            agent_window_spent: 0,
            ..case(
                "the global window still holds",
                Some("roomy"),
                usd(SOCKS, 1),
                OVER_WINDOW,
            )
        },
        Case {
            window_spent: 0,
            agent_window_spent: 100_000,
            ..case(
                "no agent: its window is not read",
                None,
                usd(SOCKS, 1),
                ALLOW,
            )
        },
        // An agent with caps pays only in the currencies they list (global JPY caps exist).
        case(
            "own caps without JPY",
            Some("ci-bot"),
            jpy(SENCHA, 1),
            NO_CURRENCY,
        ),
        case(
            "agent_caps without JPY",
            Some("other"),
            jpy(SENCHA, 1),
            NO_CURRENCY,
        ),
        case(
            "no agent: JPY is capped globally",
            None,
            jpy(SENCHA, 1),
            ALLOW,
        ),
        // Approval above the lower of the two thresholds.
        case(
            "own lower threshold",
            Some("ci-bot"),
            usd(SHELL, 1),
            PENDING,
        ),
        case(
            "agent_caps lower threshold",
            Some("other"),
            usd(SHELL, 1),
            PENDING,
        ),
        case(
            "no agent: under the global threshold",
            None,
            usd(SHELL, 1),
            ALLOW,
        ),
        // 60.00: over the global 50.00, not over roomy's own 60.00: the global one counts.
        case(
            "global threshold lower than the agent's",
            Some("roomy"),
            usd(SOCKS, 5),
            PENDING,
        ),
        // No agent caps configured at all: an agent is capped globally only.
        Case {
            config: serve_without_caps,
            agent_window_spent: 100_000,
            ..case(
                "agent without any caps",
                Some("ci-bot"),
                usd(PACK, 1),
                PENDING,
            )
        },
        Case {
            config: serve_without_caps,
            ..case(
                "agent without any caps, JPY",
                Some("ci-bot"),
                jpy(SENCHA, 1),
                ALLOW,
            )
        },
    ];
    for c in &cases {
        run(c);
    }
}

#[test]
fn the_agent_is_bound_into_the_request_digest() {
    let request = gate::precheck(&policy(), &complete_args()).unwrap();
    let quote = Quote::from_shop(&usd(SHELL, 1)).unwrap();
    let a = AgentId::parse("ci-bot").unwrap();
    let b = AgentId::parse("other").unwrap();
    let plain = BasketDigest::of(&quote, &request.instruments);
    assert_eq!(
        BasketDigest::of_request(&quote, &request.instruments, None),
        plain,
        "without an agent the request digest is the basket's (old approvals still match)"
    );
    let of_a = BasketDigest::of_request(&quote, &request.instruments, Some(&a));
    let of_b = BasketDigest::of_request(&quote, &request.instruments, Some(&b));
    assert_ne!(of_a, plain);
    assert_ne!(
        of_a, of_b,
        "another agent's identical basket is another request"
    );
    assert_ne!(of_a.request_id(), of_b.request_id());
    assert_eq!(
        of_a,
        BasketDigest::of_request(&quote, &request.instruments, Some(&a)),
        "stable"
    );
    // The same agent with another basket is another request too.
    let other_basket = Quote::from_shop(&usd(SOCKS, 1)).unwrap();
    assert_ne!(
        of_a,
        BasketDigest::of_request(&other_basket, &request.instruments, Some(&a))
    );

    // Blocked requests of two agents for one basket get two request ids.
    let blocked = |agent| {
        run(&case("digest", agent, usd(SHELL, 1), PENDING))
            .ruling
            .request_id()
            .cloned()
            .unwrap()
    };
    assert_ne!(blocked(Some("ci-bot")), blocked(Some("other")));
    assert_eq!(blocked(Some("ci-bot")), of_a.request_id());
}

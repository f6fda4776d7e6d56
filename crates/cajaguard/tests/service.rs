//! `cajaguard serve` end to end (SPEC §13): a real service process in front of the fixture shop,
//! agents over MCP Streamable HTTP with their own tokens and caps.

#![allow(clippy::unwrap_used)]

use cajaguard::store::{AuditRecord, Store};
use cajaguard_core::agent::AgentId;
use cajaguard_harness::service::{HttpMcp, Reply, Served, add_serve, post, send};
use cajaguard_harness::{World, verdict};
use serde_json::json;

const ALICE: &str = "cg_agent_alice_test_token_0123456789";
const BOB: &str = "cg_agent_bob_test_token_9876543210";

/// A world whose config serves two agents: alice with tight caps of her own, bob under
/// `agent_caps`; both tokens in the store.
fn two_agents() -> (World, Served) {
    let world = World::new();
    let url = add_serve(
        &world.config,
        json!({
            "allowed_origins": ["http://localhost:6274"],
            "agents": [{ "name": "alice", "caps": {
                "USD": { "approval_above": "25.00", "per_transaction": "30.00", "window": "40.00" }
            } }]
        }),
        json!({ "agent_caps": {
            "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" }
        } }),
    );
    let store = Store::open(&world.home).unwrap();
    let now = time::OffsetDateTime::now_utc();
    for (name, token) in [("alice", ALICE), ("bob", BOB)] {
        let agent = AgentId::parse(name).unwrap();
        assert!(
            store
                .add_agent(&agent, token, now, &AuditRecord::new(now, "agent add"))
                .unwrap()
        );
    }
    drop(store);
    let served = Served::start(&world.config, &url, &[]);
    (world, served)
}

fn create_body() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "create_checkout",
        "arguments": { "meta": cajaguard_harness::meta(), "checkout": { "line_items": cajaguard_harness::line_items("trail-socks", 1) } }
    }})
    .to_string()
}

#[test]
fn every_token_failure_is_a_401_that_reaches_nothing() {
    let (world, served) = two_agents();
    let body = create_body();
    let cases: &[(&str, Option<&str>)] = &[
        ("missing", None),
        ("empty", Some("Bearer ")),
        ("not bearer", Some("Basic YWxpY2U6cHc=")),
        ("unknown", Some("Bearer cg_agent_nobody_0000000000000000")),
        (
            "alice's with a byte changed",
            Some("Bearer cg_agent_alice_test_token_0123456788"),
        ),
        // A JWT when no issuer is configured: nothing can verify it.
        (
            "jwt without oauth",
            Some("Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9."),
        ),
    ];
    for (what, auth) in cases {
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
        let reply = post(&served.url, &headers, &body);
        assert_eq!(reply.status, 401, "{what}: {reply:?}");
        let challenge = reply.header("www-authenticate").unwrap_or_default();
        assert!(
            challenge.starts_with("Bearer resource_metadata=\"http://127.0.0.1:")
                && challenge.contains("/.well-known/oauth-protected-resource\""),
            "{what}: {challenge}"
        );
        assert_eq!(
            challenge.contains("invalid_token"),
            auth.is_some_and(|a| a.starts_with("Bearer ") && a.len() > 7),
            "{what}: {challenge}"
        );
        assert!(
            !reply.body.contains("cg_agent"),
            "{what}: the token came back: {}",
            reply.body
        );
    }
    assert_eq!(
        world.shop_calls().len(),
        0,
        "a refused request reached the shop"
    );
    // The metadata the challenge points to is served.
    let metadata = send(
        "GET",
        &served
            .url
            .replace("/mcp", "/.well-known/oauth-protected-resource"),
        &[],
        None,
    );
    assert_eq!(metadata.status, 200);
    assert_eq!(
        metadata.json()["bearer_methods_supported"],
        json!(["header"])
    );
}

#[test]
fn a_foreign_origin_is_refused_before_anything_else() {
    let (world, served) = two_agents();
    let body = create_body();
    let auth = format!("Bearer {ALICE}");
    for origin in ["http://evil.example", "http://localhost:6275", "null"] {
        let reply = post(
            &served.url,
            &[("authorization", &auth), ("origin", origin)],
            &body,
        );
        assert_eq!(reply.status, 403, "{origin}: {reply:?}");
    }
    assert_eq!(world.shop_calls().len(), 0);
    // The configured origin passes (here a stateless call, which needs no session).
    let modern = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": { "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    }}});
    let reply = post(
        &served.url,
        &[
            ("authorization", &auth),
            ("origin", "http://localhost:6274"),
        ],
        &modern.to_string(),
    );
    assert_eq!(reply.status, 200, "{reply:?}");
    let answer = reply.json();
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
}

#[test]
fn each_agent_spends_under_its_own_caps_and_identity() {
    let (world, served) = two_agents();
    let mut alice = HttpMcp::connect(&served.url, ALICE);
    let mut bob = HttpMcp::connect(&served.url, BOB);
    assert!(alice.tool_names().contains(&"complete_checkout".to_owned()));

    // 2 x 12.00 = 24.00: within alice's 30.00 per payment and 40.00 window.
    let first = alice.create_checkout("trail-socks", 2);
    assert_eq!(verdict(&alice.pay(&first)).0, "allow");
    // Another 24.00 would bring alice to 48.00, over her own window of 40.00 (the global and
    // bob's would allow it).
    let second = alice.create_checkout("trail-socks", 2);
    let (v, reason, _) = verdict(&alice.pay(&second));
    assert_eq!((v.as_str(), reason.as_str()), ("denied", "over_window_cap"));
    // 3 x 12.00 = 36.00 is over her per-payment cap.
    let third = alice.create_checkout("trail-socks", 3);
    let (_, reason, _) = verdict(&alice.pay(&third));
    assert_eq!(reason, "over_per_transaction_cap");
    // Bob's spend is his own: the same 24.00 passes for him.
    let bobs = bob.create_checkout("trail-socks", 2);
    assert_eq!(verdict(&bob.pay(&bobs)).0, "allow");

    // Alice cannot ride bob's session: another agent's session id is unknown to her.
    let mut stolen = HttpMcp::connect(&served.url, ALICE);
    stolen.session = bob.session.clone();
    let reply = stolen.post_message(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}));
    assert_eq!(reply.status, 404, "{reply:?}");

    // Two payments reached the shop, once each.
    assert_eq!(world.completes_reaching_shop(&first), 1);
    assert_eq!(world.completes_reaching_shop(&second), 0);
    assert_eq!(world.completes_reaching_shop(&bobs), 1);
    assert_eq!(alice.close(), 200);
    assert_eq!(alice.close(), 404, "a closed session is gone");

    // Graceful shutdown; then the audit log, with the agents in it, verifies.
    let status = served.terminate();
    assert!(status.success(), "serve exited with {status}");
    let verify = world.cli(&["audit", "verify"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
}

/// Regression (found by the Python SDK's streamable HTTP client in tests/clients): the refusals
/// before the message (403, 401, 404, 405) were `text/plain`, and the SDK shows any non-JSON
/// error body as "Server returned an error response", so the agent's operator never learned
/// why. Each is now a JSON-RPC error (`id: null`) in `application/json`, its message intact.
#[test]
fn every_refusal_is_a_json_rpc_error_a_client_can_show() {
    let (world, served) = two_agents();
    let auth = format!("Bearer {ALICE}");
    let body = create_body();
    let cases: Vec<(&str, Reply, u16, &str)> = vec![
        (
            "foreign origin",
            post(
                &served.url,
                &[("authorization", &auth), ("origin", "http://evil.example")],
                &body,
            ),
            403,
            "serve.allowed_origins",
        ),
        (
            "no token",
            post(&served.url, &[], &body),
            401,
            "cajaguard agent add",
        ),
        (
            "unknown token",
            post(
                &served.url,
                &[("authorization", "Bearer cg_agent_nobody_0000000000000000")],
                &body,
            ),
            401,
            "cajaguard agent add",
        ),
        (
            "unknown session",
            post(
                &served.url,
                &[
                    ("authorization", &auth),
                    ("mcp-session-id", "0123456789abcdef0123456789abcdef"),
                    ("mcp-protocol-version", "2025-11-25"),
                ],
                &body,
            ),
            404,
            "initialize again",
        ),
        (
            "DELETE of an unknown session",
            send(
                "DELETE",
                &served.url,
                &[
                    ("authorization", &auth),
                    ("mcp-session-id", "0123456789abcdef0123456789abcdef"),
                ],
                None,
            ),
            404,
            "no such session",
        ),
        (
            "GET (no event stream)",
            send(
                "GET",
                &served.url,
                &[("authorization", &auth), ("accept", "text/event-stream")],
                None,
            ),
            405,
            "this gate opens no event stream",
        ),
    ];
    for (what, reply, status, hint) in &cases {
        assert_eq!(reply.status, *status, "{what}: {reply:?}");
        assert_eq!(
            reply.header("content-type"),
            Some("application/json"),
            "{what}: {reply:?}"
        );
        let answer = reply.json();
        assert_eq!(answer["jsonrpc"], "2.0", "{what}: {answer}");
        assert_eq!(answer["id"], serde_json::Value::Null, "{what}: {answer}");
        assert_eq!(answer["error"]["code"], -32600, "{what}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(hint), "{what}: {message}");
        assert!(!reply.body.contains("cg_agent"), "{what}: {}", reply.body);
    }
    // The 401s still carry the challenge a client's OAuth support reads.
    for (what, reply, status, _) in &cases {
        if *status == 401 {
            assert!(
                reply
                    .header("www-authenticate")
                    .is_some_and(|c| c.starts_with("Bearer resource_metadata=")),
                "{what}: {reply:?}"
            );
        }
    }
    assert_eq!(reply_allow(&cases), Some("POST, DELETE".to_owned()));
    assert_eq!(
        world.shop_calls().len(),
        0,
        "a refused request reached the shop"
    );
}

fn reply_allow(cases: &[(&str, Reply, u16, &str)]) -> Option<String> {
    cases
        .iter()
        .find(|(_, _, status, _)| *status == 405)
        .and_then(|(_, reply, _, _)| reply.header("allow").map(str::to_owned))
}

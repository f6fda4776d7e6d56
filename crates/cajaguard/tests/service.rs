//! `cajaguard serve` end to end (SPEC §13): a real service process in front of the fixture shop,
//! agents over MCP Streamable HTTP with their own tokens and caps.

#![allow(clippy::unwrap_used)]

use cajaguard::store::{AuditRecord, ShopObject, Store};
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
    add_alice_and_bob(&world);
    let served = Served::start(&world.config, &url, &[]);
    (world, served)
}

/// Gives alice and bob their tokens in `world`'s store; the store, for more setup.
fn add_alice_and_bob(world: &World) -> Store {
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
    store
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
    // An Origin that is not text (no browser sends one) is not an absent one.
    let mut raw = std::net::TcpStream::connect(
        served
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp"),
    )
    .unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {auth}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\nOrigin: http://evil.example",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(b"\xff\r\n\r\n");
    request.extend_from_slice(body.as_bytes());
    std::io::Write::write_all(&mut raw, &request).unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut raw, &mut answer);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
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

    // The metrics count the decisions and the spend, with no agent or checkout in any label.
    let metrics =
        cajaguard_harness::service::send("GET", &served.url.replace("/mcp", "/metrics"), &[], None);
    assert_eq!(metrics.status, 200);
    // A page (say, one whose name was rebound to this host) is refused: browsers send no
    // `Origin` on a same-origin read, but mark it in `Sec-Fetch-Site`.
    let metrics_url = served.url.replace("/mcp", "/metrics");
    for site in ["same-origin", "same-site", "cross-site"] {
        let from_a_page = cajaguard_harness::service::send(
            "GET",
            &metrics_url,
            &[("sec-fetch-site", site)],
            None,
        );
        assert_eq!(from_a_page.status, 403, "{site}: {from_a_page:?}");
    }
    let typed =
        cajaguard_harness::service::send("GET", &metrics_url, &[("sec-fetch-site", "none")], None);
    assert_eq!(typed.status, 200, "an address a human typed: {typed:?}");
    let text = metrics.body;
    for line in [
        r#"cajaguard_decisions_total{verdict="allow",reason="within_caps"} 2"#,
        r#"cajaguard_decisions_total{verdict="denied",reason="over_window_cap"} 1"#,
        r#"cajaguard_decisions_total{verdict="denied",reason="over_per_transaction_cap"} 1"#,
        r#"cajaguard_window_spent_minor_units{currency="USD"} 4800"#,
        r#"cajaguard_window_headroom_minor_units{currency="USD"} 10200"#,
        "cajaguard_approvals_waiting 0",
        "cajaguard_frozen 0",
        "cajaguard_store_up 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    assert!(
        text.contains("cajaguard_store_gate_seconds_count 4"),
        "{text}"
    );
    // No label names an agent (the endpoint needs no token), a checkout or a merchant.
    for private in ["alice", "bob", &first, "demo-outfitters"] {
        assert!(!text.contains(private), "{private} is in the metrics");
    }

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

/// The agents share the service's one shop link, so the shop cannot tell them apart: an agent
/// that learned another's checkout id could otherwise move its shipping address or swap its
/// basket just before the other pays it (under the other's caps), cancel it, or read it.
#[test]
fn an_agent_reaches_only_the_checkouts_it_made_through_the_service() {
    let (world, served) = two_agents();
    let mut alice = HttpMcp::connect(&served.url, ALICE);
    let mut bob = HttpMcp::connect(&served.url, BOB);
    let bobs = bob.create_checkout("trail-socks", 2);
    let at_shop = |world: &World| {
        world
            .shop_calls()
            .iter()
            .filter(|(_, args)| args["id"] == bobs.as_str())
            .count()
    };
    let before = at_shop(&world);
    let never_made_here = "gid://fixture/Checkout/never-made-through-the-service";
    let attempts = [
        ("get_checkout", cajaguard_harness::get_args(&bobs)),
        (
            "update_checkout",
            cajaguard_harness::update_args(&bobs, "day-pack", 1),
        ),
        ("cancel_checkout", cajaguard_harness::get_args(&bobs)),
        (
            "complete_checkout",
            cajaguard_harness::complete_args(
                &bobs,
                cajaguard_harness::test_instrument(),
                &cajaguard_harness::uuid(),
                json!({}),
            ),
        ),
        ("get_checkout", cajaguard_harness::get_args(never_made_here)),
        ("get_checkout", json!({ "meta": cajaguard_harness::meta() })),
    ];
    for (tool, arguments) in attempts {
        let answer = alice.call(tool, arguments.clone());
        assert_eq!(
            answer["isError"],
            json!(true),
            "{tool} {arguments}: {answer}"
        );
        let (v, reason, _) = verdict(&answer);
        assert_eq!(
            (v.as_str(), reason.as_str()),
            ("denied", "bad_request"),
            "{tool}: {answer}"
        );
        // Whose checkout it is, or whether it exists, is not told.
        let detail = answer["structuredContent"]["cajaguard"]["detail"].to_string();
        assert!(
            !detail.contains("bob") && !detail.contains(&bobs),
            "{detail}"
        );
    }
    assert_eq!(
        at_shop(&world),
        before,
        "alice's calls on bob's checkout reached the shop"
    );

    // Bob's checkout is as he left it, and his.
    let read = bob.call("get_checkout", cajaguard_harness::get_args(&bobs));
    assert_eq!(read["isError"], json!(false), "{read}");
    assert_eq!(
        read["structuredContent"]["line_items"][0]["quantity"],
        json!(2),
        "{read}"
    );
    let paid = bob.pay(&bobs);
    assert_eq!(verdict(&paid).0, "allow");
    assert_eq!(world.completes_reaching_shop(&bobs), 1);
    // Alice's own checkouts are hers as before.
    let hers = alice.create_checkout("trail-socks", 1);
    assert_eq!(verdict(&alice.pay(&hers)).0, "allow");
    // Bob cannot reach hers either.
    let (_, reason, _) = verdict(&bob.call("get_checkout", cajaguard_harness::get_args(&hers)));
    assert_eq!(reason, "bad_request");

    // The order bob's payment placed is his: alice cannot read it.
    let order = paid["structuredContent"]["order"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no order in {paid}"))
        .to_owned();
    let refused = |answer: &serde_json::Value| {
        answer["isError"] == json!(true) && verdict(answer).1 == "bad_request"
    };
    assert!(refused(
        &alice.call("get_order", cajaguard_harness::get_args(&order))
    ));
    let read = bob.call("get_order", cajaguard_harness::get_args(&order));
    assert_eq!(read["isError"], json!(false), "{read}");

    // Carts likewise: a cart's contents and buyer become the checkout made from it, so alice can
    // neither change bob's cart nor make a checkout from it.
    let cart = bob.call(
        "create_cart",
        json!({ "meta": cajaguard_harness::meta(), "cart": { "line_items": cajaguard_harness::line_items("trail-socks", 1) } }),
    );
    let cart = cart["structuredContent"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no cart id in {cart}"))
        .to_owned();
    let alices = alice.create_checkout("trail-socks", 1);
    let alices_cart = alice.call(
        "create_cart",
        json!({ "meta": cajaguard_harness::meta(), "cart": { "line_items": cajaguard_harness::line_items("trail-socks", 1) } }),
    );
    let alices_cart = alices_cart["structuredContent"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no cart id in {alices_cart}"))
        .to_owned();
    let before = world.shop_calls().len();
    for (tool, arguments) in [
        // Arguments a shop might decode from a string: nothing here could have read them.
        (
            "create_checkout",
            json!(
                json!({ "meta": cajaguard_harness::meta(), "checkout": { "cart_id": cart } })
                    .to_string()
            ),
        ),
        ("get_cart", cajaguard_harness::get_args(&cart)),
        (
            "update_cart",
            json!({ "meta": cajaguard_harness::meta(), "id": cart, "cart": { "line_items": cajaguard_harness::line_items("day-pack", 1) } }),
        ),
        ("cancel_cart", cajaguard_harness::get_args(&cart)),
        (
            "create_checkout",
            json!({ "meta": cajaguard_harness::meta(), "checkout": { "cart_id": cart } }),
        ),
        // A shop that reads keys ignoring case (Go's encoding/json) takes these for `cart_id`.
        (
            "create_checkout",
            json!({ "meta": cajaguard_harness::meta(), "checkout": { "CART_ID": cart } }),
        ),
        (
            "create_checkout",
            json!({ "meta": cajaguard_harness::meta(), "checkout": { "cart_id": alices_cart, "Cart_Id": cart } }),
        ),
    ] {
        let answer = alice.call(tool, arguments);
        assert!(refused(&answer), "{tool}: {answer}");
    }
    // An argument the pinned tool does not take, or a field the shop sets (the schemas say a
    // request omits it), which a shop might read an id from. A shop that read `cart_id` on an
    // update would copy bob's cart, buyer and all, into alice's checkout; one that read
    // `checkout.id` (or, ignoring case, `ID`) would update bob's.
    let with_line_items = |field: &str, value: &str| json!({ "line_items": cajaguard_harness::line_items("day-pack", 1), field: value });
    for (tool, arguments) in [
        (
            "update_checkout",
            json!({ "meta": cajaguard_harness::meta(), "id": alices, "checkout": { "cart_id": cart } }),
        ),
        (
            "update_checkout",
            json!({ "meta": cajaguard_harness::meta(), "id": alices, "checkout": with_line_items("id", &bobs) }),
        ),
        (
            "update_checkout",
            json!({ "meta": cajaguard_harness::meta(), "id": alices, "checkout": with_line_items("ID", &bobs) }),
        ),
        (
            "create_checkout",
            json!({ "meta": cajaguard_harness::meta(), "checkout": with_line_items("id", &bobs) }),
        ),
        (
            "update_cart",
            json!({ "meta": cajaguard_harness::meta(), "id": "x", "cart": with_line_items("Id", &cart) }),
        ),
        (
            "get_checkout",
            json!({ "meta": cajaguard_harness::meta(), "id": alices, "checkout_id": bobs }),
        ),
        (
            "get_cart",
            json!({ "meta": cajaguard_harness::meta(), "id": "x", "cart_id": cart }),
        ),
    ] {
        let answer = alice.call(tool, arguments);
        assert_eq!(answer["isError"], json!(true), "{tool}: {answer}");
        assert_eq!(verdict(&answer).1, "request_field_not_allowed", "{answer}");
    }
    assert_eq!(
        world.shop_calls().len(),
        before,
        "alice's cart calls reached the shop"
    );
    let from_cart = bob.call(
        "create_checkout",
        json!({ "meta": cajaguard_harness::meta(), "checkout": { "cart_id": cart } }),
    );
    assert_eq!(from_cart["isError"], json!(false), "{from_cart}");
    let checkout = from_cart["structuredContent"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(verdict(&bob.pay(&checkout)).0, "allow");
}

/// What an odd shop can do to the binding: hand two agents the same new checkout id (the second
/// agent is refused it), and answer a payment without saying how it went (the order is bound
/// when its agent reads the checkout again, and only then readable by that agent).
#[test]
fn a_shop_that_repeats_ids_or_loses_an_answer_leaves_each_object_with_one_agent() {
    let ready = cajaguard_harness::shop_checkout("Trail socks", 1200, 2, "ready_for_complete");
    let mut done = ready.clone();
    done["status"] = json!("completed");
    done["order"] = json!({ "id": "gid://fixture/Order/77", "permalink_url": "https://demo-outfitters.example/orders/77" });
    let script = json!({ "on": {
        // Every create answers the same id.
        "create_checkout": [{ "checkout": ready }],
        // The gate's read-back, then every later read: completed, with its order.
        "get_checkout": [{ "checkout": ready, "echo_id": true }, { "checkout": done, "echo_id": true }],
        // A result that does not say whether it paid.
        "complete_checkout": [{ "result": { "content": [{ "type": "text", "text": "accepted" }], "isError": false } }],
        "get_order": [{ "result": { "content": [], "structuredContent": { "id": "gid://fixture/Order/77" }, "isError": false } }],
    }});
    let world = World::with_test_shop(script);
    let url = add_serve(&world.config, json!({}), json!({}));
    add_alice_and_bob(&world);
    let served = Served::start(&world.config, &url, &[]);
    let mut alice = HttpMcp::connect(&served.url, ALICE);
    let mut bob = HttpMcp::connect(&served.url, BOB);

    let checkout = bob.create_checkout("trail-socks", 2);
    let create = json!({ "meta": cajaguard_harness::meta(), "checkout": { "line_items": cajaguard_harness::line_items("trail-socks", 2) } });
    let again = alice.call("create_checkout", create);
    assert_eq!(again["isError"], json!(true), "{again}");
    assert_eq!(verdict(&again).1, "bad_request", "{again}");
    assert!(
        !again.to_string().contains(&checkout),
        "the id was handed over: {again}"
    );

    // Bob's payment: the shop's answer says nothing of the outcome, and no order.
    let paid = bob.pay(&checkout);
    assert_eq!(verdict(&paid).0, "allow", "{paid}");
    let order = cajaguard_harness::get_args("gid://fixture/Order/77");
    let refused = |answer: &serde_json::Value| {
        answer["isError"] == json!(true) && verdict(answer).1 == "bad_request"
    };
    assert!(
        refused(&bob.call("get_order", order.clone())),
        "not bound yet"
    );
    // Bob reads his checkout: completed, with its order, which is his from then on.
    let read = bob.call("get_checkout", cajaguard_harness::get_args(&checkout));
    assert_eq!(
        read["structuredContent"]["order"]["id"], "gid://fixture/Order/77",
        "{read}"
    );
    let mine = bob.call("get_order", order.clone());
    assert_eq!(mine["isError"], json!(false), "{mine}");
    assert!(refused(&alice.call("get_order", order)));
    assert!(refused(
        &alice.call("get_checkout", cajaguard_harness::get_args(&checkout))
    ));
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

mod oauth {
    //! The same service with `serve.oauth`: JWT access tokens from the team's issuer, checked
    //! against a JWKS file, every failure a 401 that reaches nothing.

    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use p256::ecdsa::signature::Signer as _;
    use serde_json::{Value, json};
    use sha2::Digest as _;

    use super::*;

    const ISSUER: &str = "https://issuer.example";
    const AUDIENCE: &str = "https://gate.example/mcp";

    fn b64(bytes: impl AsRef<[u8]>) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn key() -> p256::ecdsa::SigningKey {
        p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap()
    }

    fn jwk() -> Value {
        let point = key()
            .verifying_key()
            .to_sec1_point(false)
            .as_bytes()
            .to_vec();
        json!({ "kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig",
                "x": b64(&point[1..33]), "y": b64(&point[33..65]) })
    }

    fn now() -> i64 {
        time::OffsetDateTime::now_utc().unix_timestamp()
    }

    fn claims(sub: &str) -> Value {
        json!({ "iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now() + 600, "nbf": now() - 10 })
    }

    fn es256(claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64(json!({"alg": "ES256", "kid": "k1", "typ": "JWT"}).to_string()),
            b64(claims.to_string())
        );
        let signature: p256::ecdsa::Signature = key().sign(input.as_bytes());
        format!("{input}.{}", b64(signature.to_bytes()))
    }

    /// HMAC-SHA256 (RFC 2104) over `message`, for the key-confusion token.
    fn hmac(key: &[u8], message: &[u8]) -> Vec<u8> {
        let mut block = [0u8; 64];
        block[..key.len().min(64)].copy_from_slice(&key[..key.len().min(64)]);
        let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
        let inner = sha2::Sha256::digest([pad(0x36), message.to_vec()].concat());
        sha2::Sha256::digest([pad(0x5c), inner.to_vec()].concat()).to_vec()
    }

    fn served() -> (World, Served) {
        let world = World::new();
        let jwks = world.dir.path().join("jwks.json");
        std::fs::write(&jwks, json!({ "keys": [jwk()] }).to_string()).unwrap();
        let url = add_serve(
            &world.config,
            json!({ "oauth": { "issuer": ISSUER, "audience": AUDIENCE, "jwks_file": "jwks.json" } }),
            json!({}),
        );
        let served = Served::start(&world.config, &url, &[]);
        (world, served)
    }

    #[test]
    fn a_valid_token_names_the_agent_and_every_bad_one_is_a_401() {
        let (world, served) = served();
        let good = es256(&claims("carol"));
        let mut carol = HttpMcp::connect(&served.url, &good);
        assert!(carol.tool_names().contains(&"complete_checkout".to_owned()));
        let checkout = carol.create_checkout("trail-socks", 1);
        assert_eq!(verdict(&carol.pay(&checkout)).0, "allow");
        let shop_calls = world.shop_calls().len();

        let header_none = b64(json!({"alg": "none", "typ": "JWT"}).to_string());
        let body = b64(claims("carol").to_string());
        let hs_input = format!(
            "{}.{body}",
            b64(json!({"alg": "HS256", "kid": "k1"}).to_string())
        );
        let public_x = jwk()["x"].as_str().unwrap().to_owned();
        let bad: Vec<(&str, String)> = vec![
            (
                "expired",
                es256(
                    &json!({ "iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "exp": now() - 3600 }),
                ),
            ),
            (
                "wrong iss",
                es256(
                    &json!({ "iss": "https://other.example", "aud": AUDIENCE, "sub": "carol", "exp": now() + 600 }),
                ),
            ),
            (
                "wrong aud",
                es256(
                    &json!({ "iss": ISSUER, "aud": "https://other.example/mcp", "sub": "carol", "exp": now() + 600 }),
                ),
            ),
            ("alg none", format!("{header_none}.{body}.")),
            (
                "HMAC with the public key",
                format!(
                    "{hs_input}.{}",
                    b64(hmac(public_x.as_bytes(), hs_input.as_bytes()))
                ),
            ),
            ("a signature of another token", {
                let other = es256(&claims("dave"));
                let good_parts: Vec<&str> = good.split('.').collect();
                let sig = other.rsplit('.').next().unwrap();
                format!("{}.{}.{sig}", good_parts[0], good_parts[1])
            }),
        ];
        for (what, token) in &bad {
            let auth = format!("Bearer {token}");
            let reply = post(&served.url, &[("authorization", &auth)], &create_body());
            assert_eq!(reply.status, 401, "{what}: {reply:?}");
            assert!(
                reply
                    .header("www-authenticate")
                    .unwrap_or_default()
                    .contains("invalid_token"),
                "{what}"
            );
        }
        assert_eq!(
            world.shop_calls().len(),
            shop_calls,
            "a refused token reached the shop"
        );
    }
}

#[test]
fn ids_and_protocol_versions_that_cannot_be_answered_are_refused() {
    let (world, served) = two_agents();
    let auth = format!("Bearer {ALICE}");
    let modern_meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    for id in [json!({"a": 1}), json!([1]), json!(1.5), json!(true)] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"_meta": modern_meta}});
        let reply = post(&served.url, &[("authorization", &auth)], &body.to_string());
        assert_eq!(reply.status, 400, "id {id}: {reply:?}");
    }
    let body = json!({"jsonrpc": "2.0", "id": "s-1", "method": "tools/list", "params": {"_meta": modern_meta}});
    let reply = post(
        &served.url,
        &[
            ("authorization", &auth),
            ("mcp-protocol-version", "2024-01-01"),
        ],
        &body.to_string(),
    );
    assert_eq!(reply.status, 400, "{reply:?}");
    // A string id is answered under the same id.
    let reply = post(&served.url, &[("authorization", &auth)], &body.to_string());
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.json()["id"], "s-1");
    assert_eq!(world.shop_calls().len(), 0);
}

/// Red-team finding: a line break is JSON whitespace, so an HTTP body may hold many; forwarded
/// as written to a stdio shop, the rest of a line would be a message of its own — a
/// `complete_checkout` past the gate. Every break becomes a space before anything is read.
#[test]
fn a_line_break_in_a_body_never_smuggles_a_message_to_the_shop() {
    let (world, served) = two_agents();
    let mut alice = HttpMcp::connect(&served.url, ALICE);
    let checkout = alice.create_checkout("trail-socks", 1);
    let smuggled = json!({"jsonrpc": "2.0", "id": 987654, "method": "tools/call", "params": {
        "name": "complete_checkout",
        "arguments": cajaguard_harness::complete_args(&checkout, cajaguard_harness::test_instrument(), "k-smuggled", json!({}))
    }});
    for brk in ["\n", "\r", "\r\n"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{{"name":"get_checkout","arguments":{{"meta":{{"ucp-agent":{{"profile":"{}"}}}},"id":"{checkout}","x":[{brk}{smuggled}{brk}]}}}}}}"#,
            cajaguard_harness::AGENT
        );
        let reply = alice.post_message_raw(&body);
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.json()["id"], 42, "{}", reply.body);
    }
    assert_eq!(
        world.completes_reaching_shop(&checkout),
        0,
        "a complete_checkout reached the shop past the gate"
    );
    // The shop link is fine: the checkout still pays through the gate.
    assert_eq!(verdict(&alice.pay(&checkout)).0, "allow");
    assert_eq!(world.completes_reaching_shop(&checkout), 1);
}

/// Red-team finding: a message that is JSON to the grammar but holds a value no reader can
/// parse (an unpaired surrogate escape, a truncated emoji; a number past a double's range), or a
/// duplicated envelope member, was answered by the proxy with `id: null`, which the service
/// could match to no waiting request: the POST hung for `answer_within` and kept its slot. It is
/// answered at once, under its own id where it has one, and nothing reaches the shop.
#[test]
fn a_message_no_reader_can_parse_is_answered_at_once_under_its_id() {
    let (world, served) = two_agents();
    let alice = HttpMcp::connect(&served.url, ALICE);
    let bodies = [
        (
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":72,"method":"tools/list"}"#,
            json!(null),
        ),
        (
            r#"{"jsonrpc":"2.0","id":71,"method":"tools/call","params":{"name":"search_catalog","arguments":{"query":"\ud83d"}}}"#,
            json!(71),
        ),
        (
            r#"{"jsonrpc":"2.0","id":"n","method":"tools/call","params":{"name":"search_catalog","arguments":{"limit":1e400}}}"#,
            json!("n"),
        ),
    ];
    for (body, id) in bodies {
        // Before the fix: 504 once `answer_within` (3 x the shop timeout + 10 s) ran out.
        let reply = alice.post_message_raw(body);
        assert_eq!(reply.status, 400, "{body}: {reply:?}");
        let answer = reply.json();
        assert_eq!(answer["id"], id, "{body}: {answer}");
        assert!(answer["error"]["code"].is_i64(), "{body}: {answer}");
    }
    // The same ids are free again: nothing was left waiting under them.
    let reply = alice.post_message(&json!({"jsonrpc": "2.0", "id": 71, "method": "tools/list"}));
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(world.shop_calls().len(), 0);
}

#[test]
fn a_response_from_the_client_is_taken_without_waiting() {
    let (_world, served) = two_agents();
    let alice = HttpMcp::connect(&served.url, ALICE);
    let reply = alice.post_message(&json!({"jsonrpc": "2.0", "id": "x".repeat(200), "result": {}}));
    assert_eq!(reply.status, 202, "{reply:?}");
    let long = alice
        .post_message(&json!({"jsonrpc": "2.0", "id": "x".repeat(300), "method": "tools/list"}));
    assert_eq!(long.status, 400, "{long:?}");
}

const HELD_AT_THE_SHOP: &str = "gid://fixture/Checkout/held-at-the-shop";
const IN_FLIGHT_AT_SHUTDOWN: &str = "gid://fixture/Checkout/in-flight-at-shutdown";

/// A service whose shop answers the read-back at once and takes `delay_ms` to complete; bob and
/// alice have tokens, and bob the two checkouts above.
fn slow_shop_service(delay_ms: u64) -> (World, Served) {
    let ready = cajaguard_harness::shop_checkout("Trail socks", 1200, 2, "ready_for_complete");
    let mut slow = cajaguard_harness::completed(&ready);
    slow["delay_ms"] = json!(delay_ms);
    let world = World::with_test_shop(cajaguard_harness::test_shop_script(&ready, vec![slow]));
    let url = add_serve(&world.config, json!({}), json!({}));
    let store = add_alice_and_bob(&world);
    let now = time::OffsetDateTime::now_utc();
    // The test shop makes no checkouts: bob's are recorded as his, as his create_checkout
    // through the service would have.
    let bob = AgentId::parse("bob").unwrap();
    for checkout in [HELD_AT_THE_SHOP, IN_FLIGHT_AT_SHUTDOWN] {
        assert!(
            store
                .bind_to_agent(ShopObject::Checkout, checkout, &bob, now)
                .unwrap()
        );
    }
    drop(store);
    let served = Served::start(&world.config, &url, &[]);
    (world, served)
}

/// Waits until the shop has received a `complete_checkout`.
fn wait_until_at_shop(world: &World) {
    let waited = std::time::Instant::now();
    while !world
        .test_shop_lines()
        .iter()
        .any(|line| line.contains("\"complete_checkout\""))
    {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(20),
            "the payment never reached the shop"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_payment_held_at_a_slow_shop_holds_up_no_other_request() {
    // Each message runs on the thread that read it; the runtime's reading must go on elsewhere.
    let (world, served) = slow_shop_service(3000);
    let mut bob = HttpMcp::connect(&served.url, BOB);
    let paying = std::thread::spawn(move || bob.pay(HELD_AT_THE_SHOP));
    wait_until_at_shop(&world);
    let mut alice = HttpMcp::connect(&served.url, ALICE);
    let status = alice.call("cajaguard_status", json!({}));
    let refused = send(
        "POST",
        &served.url,
        &[("authorization", "Bearer cg_agent_nobody_0000000000000000")],
        Some(&create_body()),
    );
    assert!(
        !paying.is_finished(),
        "bob's payment left the shop before alice's calls were answered"
    );
    assert_eq!(status["isError"], json!(false), "{status}");
    assert_eq!(refused.status, 401);
    let (v, r, _) = verdict(&paying.join().unwrap());
    assert_eq!((v.as_str(), r.as_str()), ("allow", "within_caps"));
}

#[test]
fn a_terminated_service_finishes_the_payment_in_flight_before_it_exits() {
    // The shop takes 1.5 s to complete: SIGTERM arrives while the payment is at the shop.
    let (world, served) = slow_shop_service(1500);
    let mut mcp = HttpMcp::connect(&served.url, BOB);
    let paying = std::thread::spawn(move || mcp.pay(IN_FLIGHT_AT_SHUTDOWN));
    wait_until_at_shop(&world);
    let status = served.terminate();
    let answer = paying.join().unwrap();
    assert!(status.success(), "serve exited with {status}");
    let (v, r, _) = verdict(&answer);
    assert_eq!(
        (v.as_str(), r.as_str()),
        ("allow", "within_caps"),
        "the call in flight was answered: {answer}"
    );
    // And settled before the exit: nothing is left in flight for the next start to reconcile.
    let store = Store::open(&world.home).unwrap();
    let usd = store
        .window_spend(
            std::time::Duration::from_secs(24 * 3600),
            time::OffsetDateTime::now_utc(),
        )
        .unwrap()["USD"];
    assert_eq!((usd.settled, usd.in_flight), (2400, 0));
}

/// The threads of process `pid` (Linux).
fn threads_of(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// A session that declared URL-mode elicitation is sent nothing it could not receive, and its
/// blocked payments start no watcher: one agent opening session after session, each blocked on
/// a payment needing approval, must not grow the service's threads (each watcher held one, and
/// a store connection, for twice the approval lifetime, past its session's end), which would
/// exhaust them for every agent.
#[test]
fn blocked_payments_in_many_sessions_start_no_threads() {
    let world = World::new();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&world.config).unwrap()).unwrap();
    config["approvals"]["web"] = json!({ "listen": "127.0.0.1:8395" });
    config["approvals"]["require"] = json!("any");
    std::fs::write(&world.config, config.to_string()).unwrap();
    let url = add_serve(&world.config, json!({}), json!({}));
    add_alice_and_bob(&world);
    let served = Served::start(&world.config, &url, &[]);
    let declaring = json!({ "elicitation": { "url": {} } });
    let mut first = HttpMcp::connect_declaring(&served.url, ALICE, declaring.clone());
    let day_pack = first.create_checkout("day-pack", 1);
    assert_eq!(verdict(&first.pay(&day_pack)).0, "blocked");
    let before = threads_of(served.pid());
    for _ in 0..12 {
        let mut session = HttpMcp::connect_declaring(&served.url, ALICE, declaring.clone());
        assert_eq!(verdict(&session.pay(&day_pack)).0, "blocked");
    }
    let after = threads_of(served.pid());
    assert!(
        after < before + 6,
        "the service went from {before} to {after} threads over 12 blocked sessions"
    );
}

/// A client that opens connections and never finishes a request's headers (no token needed)
/// holds them only for the header read timeout, not for as long as it likes: the service
/// closes them, and serves an agent meanwhile.
#[test]
fn a_connection_that_never_finishes_its_headers_is_closed() {
    use std::io::{Read, Write};
    let (_world, served) = two_agents();
    let address = served
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let mut idle: Vec<std::net::TcpStream> = (0..20)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(&address).unwrap();
            stream
                .write_all(b"GET /mcp HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .unwrap();
            stream
        })
        .collect();
    let mut alice = HttpMcp::connect(&served.url, ALICE);
    let status = alice.call("cajaguard_status", json!({}));
    assert_eq!(status["isError"], json!(false), "{status}");
    let started = std::time::Instant::now();
    for stream in &mut idle {
        let mut buffer = [0u8; 256];
        // Closed by the service: end of stream, or the 408 hyper sends first, then the end.
        loop {
            match stream.read(&mut buffer) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => panic!("the connection stayed open: {e}"),
            }
        }
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(25),
        "closed only after {:?}",
        started.elapsed()
    );
}

/// A request its agent cancels is answered as cancelled once its call ends, and its id and its
/// place in flight are free again at once: they stayed taken until the answer time ran out, so
/// an agent whose SDK cancels on timeout ran out of places, and could not reuse the id.
#[test]
fn a_cancelled_request_frees_its_id_and_its_place_at_once() {
    let world = World::with_test_shop(json!({ "on": {
        "search_catalog": [{ "result": { "content": [], "isError": false }, "delay_ms": 1200 }],
    }}));
    let url = add_serve(&world.config, json!({}), json!({}));
    add_alice_and_bob(&world);
    let served = Served::start(&world.config, &url, &[]);
    let alice = HttpMcp::connect(&served.url, ALICE);
    let search = json!({"jsonrpc": "2.0", "id": 1000, "method": "tools/call",
        "params": {"name": "search_catalog", "arguments": {"meta": cajaguard_harness::meta(), "catalog": {"query": "socks"}}}});
    let started = std::time::Instant::now();
    let answer = std::thread::scope(|scope| {
        let call = scope.spawn(|| alice.post_message(&search));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let cancelled = alice.post_message(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1000}}),
        );
        assert_eq!(cancelled.status, 202, "{cancelled:?}");
        call.join().unwrap()
    });
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "answered only after {:?}",
        started.elapsed()
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.json()["error"]["code"], json!(-32800), "{answer:?}");
    // The id is free again.
    let again = alice.post_message(&search);
    assert_eq!(again.status, 200, "{again:?}");
    assert!(again.json().get("result").is_some(), "{again:?}");
}

/// The `Mcp-Method` and `Mcp-Name` headers of the 2026-07-28 era must say what the body says: a
/// gateway in front may route or authorize by them, while the gate reads the body.
#[test]
fn headers_that_disagree_with_the_body_are_refused() {
    let (world, served) = two_agents();
    let auth = format!("Bearer {ALICE}");
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "cajaguard_status", "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }
    }})
    .to_string();
    let with = |method: &str, name: &str| {
        post(
            &served.url,
            &[
                ("authorization", &auth),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", method),
                ("mcp-name", name),
            ],
            &call,
        )
    };
    for (method, name) in [
        ("ping", "cajaguard_status"),
        ("tools/call", "search_catalog"),
    ] {
        let reply = with(method, name);
        assert_eq!(reply.status, 400, "{method} {name}: {reply:?}");
        assert_eq!(reply.json()["error"]["code"], json!(-32020), "{reply:?}");
    }
    let agreed = with("tools/call", "cajaguard_status");
    assert_eq!(agreed.status, 200, "{agreed:?}");
    assert!(agreed.json().get("result").is_some(), "{agreed:?}");
    assert_eq!(world.shop_calls().len(), 0);
}

/// A source address of this machine other than loopback (the one its default route would use),
/// or `None` on a machine with no such route. No packet is sent.
fn non_loopback_address() -> Option<std::net::IpAddr> {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    probe.connect("198.51.100.1:9").ok()?;
    let address = probe.local_addr().ok()?.ip();
    (!address.is_loopback() && !address.is_unspecified()).then_some(address)
}

/// One remote address cannot take every connection (a client that opens connections and sends
/// nothing would shut every agent out): past its 128, its new ones are closed unanswered, while
/// others still get in. Through the real service, reached on this machine's own non-loopback
/// address (loopback has no share of its own).
#[test]
fn one_remote_address_holds_at_most_its_share_of_connections() {
    use std::io::{Read, Write};
    let Some(local) = non_loopback_address() else {
        eprintln!(
            "SKIPPED one_remote_address_holds_at_most_its_share_of_connections: this machine has no address but loopback"
        );
        return;
    };
    let world = World::new();
    let url = add_serve(&world.config, json!({}), json!({}));
    let port: u16 = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&world.config).unwrap()).unwrap();
    config["serve"]["listen"] = json!(format!("0.0.0.0:{port}"));
    std::fs::write(&world.config, config.to_string()).unwrap();
    add_alice_and_bob(&world);
    let served = Served::start(&world.config, &url, &[]);

    let remote = std::net::SocketAddr::new(local, port);
    let held: Vec<std::net::TcpStream> = (0..128)
        .map(|_| std::net::TcpStream::connect(remote).unwrap())
        .collect();
    let mut past_its_share = std::net::TcpStream::connect(remote).unwrap();
    past_its_share
        .set_read_timeout(Some(std::time::Duration::from_secs(8)))
        .unwrap();
    // A whole request: served, it would be answered at once, and then closed.
    let _ =
        past_its_share.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::new();
    let read = past_its_share.read_to_end(&mut answer);
    assert!(
        read.is_ok()
            || read
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "neither answered nor closed: {read:?}"
    );
    assert!(
        answer.is_empty(),
        "the 129th connection from one address was served: {}",
        String::from_utf8_lossy(&answer)
    );
    let mut alice = HttpMcp::connect(&served.url, ALICE);
    let status = alice.call("cajaguard_status", json!({}));
    assert_eq!(status["isError"], json!(false), "{status}");
    drop(held);
}

/// A 2026-07-28 `prompts/get` or `resources/read` through the bridge (`cajaguard mcp
/// --connect`), which mirrors the prompt's name or the resource's URI in `Mcp-Name` as SEP-2243
/// asks, is answered as the gate answers it (it has neither: -32601), not refused as a header
/// mismatch (-32020): the service read `Mcp-Name` for `tools/call` only. A header that names
/// another prompt is still a mismatch.
#[test]
fn a_prompt_or_resource_request_through_the_bridge_is_not_a_header_mismatch() {
    use std::io::Write as _;
    let (_world, served) = two_agents();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
            "params": {"name": "code_review", "_meta": meta}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
            "params": {"uri": "file:///etc/hostname", "_meta": meta}}),
    ];
    let mut bridge = std::process::Command::new(cajaguard_harness::cajaguard_bin())
        .args([
            "mcp",
            "--connect",
            &served.url,
            "--token-env",
            "CG_TEST_TOKEN",
        ])
        .env("CG_TEST_TOKEN", ALICE)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
    bridge
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = bridge.wait_with_output().unwrap();
    let answers: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        answers.len(),
        2,
        "{answers:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for answer in &answers {
        assert_eq!(answer["error"]["code"], json!(-32601), "{answer}");
    }

    let auth = format!("Bearer {ALICE}");
    let other = post(
        &served.url,
        &[
            ("authorization", &auth),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "prompts/get"),
            ("mcp-name", "another_prompt"),
        ],
        &requests[0].to_string(),
    );
    assert_eq!(other.status, 400, "{other:?}");
    assert_eq!(other.json()["error"]["code"], json!(-32020), "{other:?}");
}

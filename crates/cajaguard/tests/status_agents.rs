//! What an agent of the service sees of the store (SPEC §13: "its own caps and headroom and the
//! global ones, never another agent's requests"): `status::document_for_agent`, and the
//! `cajaguard_status` and `cajaguard_approval_status` tools of a `Proxy::session`, in process, in
//! front of the real fixture shop. The stdio document (no agent) stays as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cajaguard::proxy::{Clock, Proxy};
use cajaguard::store::{AuditRecord, ShopObject, Store};
use cajaguard_core::agent::AgentId;
use cajaguard_core::approval::{BasketDigest, RequestId, TrustedKeys};
use cajaguard_core::effect::{Effect, Outcome, PendingRequest};
use cajaguard_core::policy::{ConfigOrigin, Policy};
use cajaguard_core::request::Instrument;
use cajaguard_core::verdict::{Reason, Ruling};
use cajaguard_harness::fixtures;
use cajaguard_harness::world::World;
use serde_json::{Value, json};
use time::OffsetDateTime;

const DAY: Duration = Duration::from_secs(24 * 3600);

/// The world's config with a service: `ci-bot` capped USD 20 / 60 / 80 of its own, every other
/// agent `agent_caps` USD 30 / 70 / 90.
fn policy(world: &World) -> Policy {
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&world.config).unwrap()).unwrap();
    config["serve"] = json!({
        "listen": "127.0.0.1:8376",
        "agents": [{ "name": "ci-bot", "caps": { "USD": { "approval_above": "20.00", "per_transaction": "60.00", "window": "80.00" } } }]
    });
    config["agent_caps"] = json!({ "USD": { "approval_above": "30.00", "per_transaction": "70.00", "window": "90.00" } });
    std::fs::write(&world.config, config.to_string()).unwrap();
    Policy::parse(
        &config.to_string(),
        &ConfigOrigin {
            path: &world.config,
            user_home: None,
        },
    )
    .unwrap()
}

fn agent(name: &str) -> AgentId {
    AgentId::parse(name).unwrap()
}

/// `agent` pays `total` on `checkout` (let through, in flight).
fn pay(store: &Store, agent: Option<&AgentId>, checkout: &str, total: i64, now: OffsetDateTime) {
    let digest = BasketDigest::of_request(
        &fixtures::quote(checkout, total),
        &fixtures::request(checkout).instruments,
        agent,
    );
    fixtures::claim_and_gate_as(
        store,
        agent,
        &fixtures::request(checkout),
        &fixtures::quote(checkout, total),
        DAY,
        now,
        &mut |_, _| fixtures::forward(total, digest, None),
    )
    .unwrap();
}

/// `agent`'s payment of `total` on `checkout` is blocked for approval: its request id.
fn block(
    store: &Store,
    agent: Option<&AgentId>,
    checkout: &str,
    total: i64,
    now: OffsetDateTime,
) -> RequestId {
    let quote = fixtures::quote(checkout, total);
    let request = fixtures::request(checkout);
    let digest = BasketDigest::of_request(&quote, &request.instruments, agent);
    let pending = PendingRequest {
        request_id: digest.request_id(),
        digest,
        merchant: fixtures::MERCHANT.to_owned(),
        checkout_id: checkout.to_owned(),
        currency: "USD".to_owned(),
        total,
        instruments: vec![Instrument::of_handler(cajaguard_harness::ucp::TEST_HANDLER)],
        agent: agent.cloned(),
    };
    let id = pending.request_id.clone();
    fixtures::claim_and_gate_as(store, agent, &request, &quote, DAY, now, &mut |_, _| {
        Outcome {
            ruling: Ruling::new(Reason::PendingApproval, ""),
            effect: Effect::Refuse {
                pending: Some(pending.clone()),
            },
        }
    })
    .unwrap();
    id
}

fn pending_ids(document: &Value) -> Vec<String> {
    document["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["request_id"].as_str().unwrap().to_owned())
        .collect()
}

struct Seeded {
    a: AgentId,
    b: AgentId,
    a_request: RequestId,
    b_request: RequestId,
    stdio_request: RequestId,
}

/// ci-bot pays 10.00 and waits on 45.00; shopper pays 25.00 and waits on 40.00; a stdio payment
/// of 5.00 and a stdio request of 60.00.
fn seed(store: &Store, now: OffsetDateTime) -> Seeded {
    let (a, b) = (agent("ci-bot"), agent("shopper"));
    pay(store, Some(&a), "gid://fixture/Checkout/a1", 1000, now);
    pay(store, Some(&b), "gid://fixture/Checkout/b1", 2500, now);
    pay(store, None, "gid://fixture/Checkout/s1", 500, now);
    let a_request = block(store, Some(&a), "gid://fixture/Checkout/a2", 4500, now);
    let b_request = block(store, Some(&b), "gid://fixture/Checkout/b2", 4000, now);
    let stdio_request = block(store, None, "gid://fixture/Checkout/s2", 6000, now);
    Seeded {
        a,
        b,
        a_request,
        b_request,
        stdio_request,
    }
}

#[test]
fn an_agents_document_has_its_own_caps_and_requests_and_the_global_caps() {
    let world = World::new();
    let policy = policy(&world);
    let store = Store::for_policy(&policy).unwrap();
    let now = OffsetDateTime::now_utc();
    let s = seed(&store, now);
    let trusted = TrustedKeys(Vec::new());

    let of_a = cajaguard::status::document_for_agent(&policy, &store, &trusted, &s.a, now).unwrap();
    assert_eq!(pending_ids(&of_a), [s.a_request.as_str()]);
    // The global caps, with every payment's spend.
    assert_eq!(of_a["caps"]["USD"]["in_flight_minor"], 4000);
    assert_eq!(of_a["caps"]["USD"]["remaining_minor"], 15000 - 4000);
    // Its own: its caps, its spend only.
    let own = &of_a["agent"];
    assert_eq!(own["id"], "ci-bot");
    assert_eq!(own["caps_from"], "serve.agents[].caps");
    assert_eq!(own["caps"]["USD"]["window"], "80.00");
    assert_eq!(own["caps"]["USD"]["approval_above"], "20.00");
    assert_eq!(own["caps"]["USD"]["in_flight_minor"], 1000);
    assert_eq!(own["caps"]["USD"]["remaining_minor"], 8000 - 1000);
    assert!(!of_a.to_string().contains(s.b_request.as_str()));
    assert!(!of_a.to_string().contains("shopper"));

    let of_b = cajaguard::status::document_for_agent(&policy, &store, &trusted, &s.b, now).unwrap();
    assert_eq!(pending_ids(&of_b), [s.b_request.as_str()]);
    assert_eq!(of_b["agent"]["caps_from"], "agent_caps");
    assert_eq!(of_b["agent"]["caps"]["USD"]["window"], "90.00");
    assert_eq!(of_b["agent"]["caps"]["USD"]["in_flight_minor"], 2500);

    // The stdio document is the one it always was: every request, no `agent`.
    let stdio = cajaguard::status::document_with(&policy, &store, &trusted, now).unwrap();
    let mut all = pending_ids(&stdio);
    all.sort();
    let mut expected = vec![
        s.a_request.as_str().to_owned(),
        s.b_request.as_str().to_owned(),
        s.stdio_request.as_str().to_owned(),
    ];
    expected.sort();
    assert_eq!(all, expected);
    assert!(stdio.get("agent").is_none());
    let mut without_agent = of_a.clone();
    without_agent.as_object_mut().unwrap().remove("agent");
    without_agent["pending"] = stdio["pending"].clone();
    assert_eq!(without_agent, stdio, "the rest of the document is the same");

    // Only global caps (no serve caps, no agent_caps): `caps` is null, the rest as before.
    let bare = Policy {
        serve: None,
        agent_caps: None,
        ..policy.clone()
    };
    let plain = cajaguard::status::document_for_agent(&bare, &store, &trusted, &s.a, now).unwrap();
    assert_eq!(plain["agent"]["caps"], Value::Null);
    assert_eq!(plain["agent"]["caps_from"], Value::Null);
    assert_eq!(pending_ids(&plain), [s.a_request.as_str()]);
}

/// A session's answers, as the lines it wrote.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    /// The answer to request `id`, waiting for it.
    fn answer(&self, id: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            for line in text.lines() {
                let message: Value = serde_json::from_str(line).unwrap();
                if message["id"] == json!(id) {
                    return message;
                }
            }
            assert!(Instant::now() < deadline, "no answer to {id}: {text}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

struct Session {
    proxy: Arc<Proxy>,
    out: Lines,
    next: u64,
}

impl Session {
    fn new(proxy: Arc<Proxy>, out: Lines) -> Session {
        let mut session = Session {
            proxy,
            out,
            next: 0,
        };
        let init = session.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        );
        assert!(init.get("result").is_some(), "{init}");
        session.proxy.handle_message(
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        );
        session
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        self.proxy.handle_message(
            json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params})
                .to_string(),
        );
        self.out.answer(self.next)
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        answer["result"]["structuredContent"].clone()
    }

    fn approval_status(&mut self, id: &RequestId) -> String {
        self.call(
            "cajaguard_approval_status",
            json!({ "request_id": id.as_str() }),
        )["status"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

#[test]
fn a_session_sees_its_own_status_and_never_another_agents_request() {
    let world = World::new();
    let policy = Arc::new(policy(&world));
    let store = Store::for_policy(&policy).unwrap();
    let now = OffsetDateTime::now_utc();
    let s = seed(&store, now);
    store
        .add_agent(&s.a, "cg_agent_t", now, &AuditRecord::new(now, "agent add"))
        .unwrap();
    let clock: Clock = Arc::new(OffsetDateTime::now_utc);
    let stdio_out = Lines::default();
    let proxy = Proxy::start(
        policy.clone(),
        cajaguard::keys::counted_trusted_keys(&policy).unwrap(),
        Arc::new(store),
        clock,
        Box::new(stdio_out.clone()),
    )
    .unwrap();

    let a_out = Lines::default();
    let mut a = Session::new(proxy.session(s.a.clone(), Box::new(a_out.clone())), a_out);
    let status = a.call("cajaguard_status", json!({}));
    assert_eq!(pending_ids(&status), [s.a_request.as_str()]);
    assert_eq!(status["agent"]["id"], "ci-bot");
    assert_eq!(status["agent"]["caps"]["USD"]["in_flight_minor"], 1000);
    assert_eq!(status["caps"]["USD"]["in_flight_minor"], 4000);
    assert_eq!(a.approval_status(&s.a_request), "pending");
    assert_eq!(
        a.approval_status(&s.b_request),
        "invalid",
        "another agent's request reads as unknown"
    );
    assert_eq!(a.approval_status(&s.stdio_request), "invalid");

    let b_out = Lines::default();
    let mut b = Session::new(proxy.session(s.b.clone(), Box::new(b_out.clone())), b_out);
    assert_eq!(
        pending_ids(&b.call("cajaguard_status", json!({}))),
        [s.b_request.as_str()]
    );
    assert_eq!(b.approval_status(&s.b_request), "pending");
    assert_eq!(b.approval_status(&s.a_request), "invalid");
    // `handle_message` (a stdio shop's fast path, which skips `call_tool`) still holds an agent's
    // session to its own checkouts: one no agent made is refused before the shop.
    let read = b.call(
        "get_checkout",
        cajaguard_harness::get_args("gid://fixture/Checkout/1"),
    );
    assert_eq!(read["cajaguard"]["reason"], "bad_request", "{read}");

    // stdio (no agent): every request, as before.
    let mut stdio = Session::new(proxy.clone(), stdio_out);
    let status = stdio.call("cajaguard_status", json!({}));
    assert_eq!(pending_ids(&status).len(), 3);
    assert!(status.get("agent").is_none());
    assert_eq!(stdio.approval_status(&s.a_request), "pending");
    assert_eq!(stdio.approval_status(&s.b_request), "pending");
}

/// Which thread wrote each line a session answered.
#[derive(Clone, Default)]
struct Writers(Arc<Mutex<Vec<std::thread::ThreadId>>>);

impl Write for Writers {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().push(std::thread::current().id());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The service gives each message a blocking-pool thread of its own and runs it there with
/// `handle_message_here`: a tool call, forwarded or CajaGuard's own, is answered on that thread
/// before it returns, with no thread started for it.
#[test]
fn a_message_given_its_own_thread_has_its_tool_call_answered_on_it() {
    let world = World::new();
    let policy = Arc::new(policy(&world));
    let store = Store::for_policy(&policy).unwrap();
    // Forwarded, not refused as another's: the checkout is the session's agent's.
    assert!(
        store
            .bind_to_agent(
                ShopObject::Checkout,
                "gid://fixture/Checkout/none",
                &agent("ci-bot"),
                OffsetDateTime::now_utc()
            )
            .unwrap()
    );
    let clock: Clock = Arc::new(OffsetDateTime::now_utc);
    let proxy = Proxy::start(
        policy.clone(),
        cajaguard::keys::counted_trusted_keys(&policy).unwrap(),
        Arc::new(store),
        clock,
        Box::new(Lines::default()),
    )
    .unwrap();
    let writers = Writers::default();
    let session = proxy.session(agent("ci-bot"), Box::new(writers.clone()));
    session.handle_message_here(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
            .to_string(),
    );
    session.handle_message_here(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
    );
    let here = std::thread::current().id();
    let calls = [
        json!({"name": "get_checkout", "arguments": cajaguard_harness::get_args("gid://fixture/Checkout/none")}),
        json!({"name": "cajaguard_status", "arguments": {}}),
    ];
    for (n, params) in calls.into_iter().enumerate() {
        let before = writers.0.lock().unwrap().len();
        session.handle_message_here(
            json!({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call", "params": params})
                .to_string(),
        );
        let written = writers.0.lock().unwrap()[before..].to_vec();
        assert_eq!(
            written,
            [here],
            "call {n}: answered once, on the caller's thread, before handle_message_here returned"
        );
    }
}

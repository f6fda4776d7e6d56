//! Issue 7: the shop over MCP Streamable HTTP when things go wrong: a wrong or missing token, a shop
//! down at start, a shop dying mid-call, a forgotten session, a shop slower than the timeout, and
//! 429/503. The real fixture is used where it can show the behaviour (tokens, restart); the rest
//! uses a scripted HTTP shop below (std::net on 127.0.0.1, one request per connection).
//!
//! Over 500 lines as one idea: the HTTP transport's failures, with the scripted shop they share.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{HashMap, VecDeque};
use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

// ---------------------------------------------------------------------------------------------
// Start-up failures, against the real fixture over HTTP.

fn start_failure(world: &World, edit: impl FnOnce(&mut std::process::Command)) -> (i32, String) {
    let mut command = world.mcp_command();
    edit(&mut command);
    let out = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains(SHOP_TOKEN),
        "the token leaked into stderr: {stderr}"
    );
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn a_wrong_token_stops_the_start_naming_the_variable_not_the_value() {
    let world = World::on(Transport::Http);
    let wrong = "cg-wrong-bearer-0000";
    let (code, stderr) = start_failure(&world, |c| {
        c.env(TOKEN_VAR, wrong);
    });
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("the shop refused the token in ${TOKEN_VAR} (401)")),
        "{stderr}"
    );
    assert!(!stderr.contains(wrong), "{stderr}");
}

#[test]
fn a_missing_token_variable_is_a_config_error_at_start() {
    let world = World::on(Transport::Http);
    let (code, stderr) = start_failure(&world, |c| {
        c.env_remove(TOKEN_VAR);
    });
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("${TOKEN_VAR} is not set")),
        "{stderr}"
    );
}

#[test]
fn a_shop_down_at_start_is_a_clear_error() {
    let mut world = World::on(Transport::Http);
    let url = world.fixture.as_ref().unwrap().url();
    world.fixture.as_mut().unwrap().stop();
    let (code, stderr) = start_failure(&world, |_| {});
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach the shop at {url}")),
        "{stderr}"
    );
}

#[test]
fn a_restarted_shop_has_forgotten_the_session_and_the_proxy_starts_a_new_one() {
    let mut world = World::on(Transport::Http);
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("trail-socks", 2);
    // The fixture restarts on the same port: the proxy's session id now gets 404.
    world.fixture.as_mut().unwrap().restart();
    let result = mcp.pay(&checkout);
    assert_eq!(verdict(&result).0, "allow", "{result}");
    assert_eq!(
        result["structuredContent"]["status"], "completed",
        "{result}"
    );
    assert_eq!(world.completes_reaching_shop(&checkout), 1);
}

// ---------------------------------------------------------------------------------------------
// A scripted HTTP shop.

/// What the scripted shop does with one `tools/call`.
#[derive(Clone, Debug)]
enum Act {
    /// Answer as a good shop would (an event stream with a progress notification for reads).
    Answer,
    /// Read the request, then close the connection without a word.
    HangUp,
    /// Wait, then answer.
    Slow(Duration),
    /// Answer with this HTTP status (and `Retry-After: 0`).
    Status(u16),
    /// Forget every session (as a restart would), then answer this request with 404.
    ForgetSessions,
    /// Wait this long, then as `ForgetSessions`; and take as long again to answer the next
    /// `initialize`.
    ForgetSessionsThenHandshakeSlowly(Duration),
    /// Answer with a JSON body of this many bytes.
    Huge(usize),
    /// Charge (as a completion would), then answer 200 with this content type and that body.
    Garbled(&'static str),
    /// Charge, then answer a JSON-RPC message with the request's id but neither result nor error.
    Bare,
    /// Charge, then answer a JSON-RPC message with both a result and an error.
    Both,
}

/// One message the scripted shop received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    tool: Option<String>,
    session: Option<String>,
    authorized: bool,
    body: String,
}

#[derive(Clone)]
struct ScriptedShop {
    addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Arc<Mutex<HashMap<String, VecDeque<Act>>>>,
    session: Arc<AtomicU64>,
    /// How long the next `initialize` waits before its answer.
    slow_initialize: Arc<Mutex<Option<Duration>>>,
}

impl ScriptedShop {
    /// `script`: per tool, the acts for its successive calls; after the last, `Answer`.
    fn start(script: &[(&str, Vec<Act>)]) -> ScriptedShop {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let shop = ScriptedShop {
            addr: listener.local_addr().unwrap().to_string(),
            seen: Arc::default(),
            script: Arc::new(Mutex::new(
                script
                    .iter()
                    .map(|(tool, acts)| ((*tool).to_owned(), acts.iter().cloned().collect()))
                    .collect(),
            )),
            session: Arc::new(AtomicU64::new(0)),
            slow_initialize: Arc::default(),
        };
        let server = shop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let server = server.clone();
                std::thread::spawn(move || server.serve(stream));
            }
        });
        shop
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn calls_of(&self, tool: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.tool.as_deref() == Some(tool))
            .collect()
    }

    fn serve(&self, stream: TcpStream) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let Some(request) = http_request::read_request(&mut reader) else {
            return;
        };
        let headers = &request.headers;
        let body = String::from_utf8(request.body.clone()).unwrap();
        let mut out = stream;
        if request.method() == "DELETE" {
            return respond(&mut out, 200, &[], "");
        }
        let message: Value = serde_json::from_str(&body).unwrap();
        let method = message["method"].as_str().unwrap_or("").to_owned();
        let tool = message["params"]["name"].as_str().map(str::to_owned);
        let session = headers.get("mcp-session-id").cloned();
        self.seen.lock().unwrap().push(Seen {
            method: method.clone(),
            tool: tool.clone(),
            session: session.clone(),
            authorized: headers.get("authorization").map(String::as_str)
                == Some(&format!("Bearer {SHOP_TOKEN}")),
            body: body.clone(),
        });
        let current = format!("s{}", self.session.load(Ordering::SeqCst));
        if method == "initialize" {
            if let Some(wait) = self.slow_initialize.lock().unwrap().take() {
                std::thread::sleep(wait);
            }
            let id = format!("s{}", self.session.fetch_add(1, Ordering::SeqCst) + 1);
            let result = json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                "serverInfo": {"name": "scripted", "version": "0"}});
            let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
            return respond(
                &mut out,
                200,
                &[
                    ("Content-Type", "application/json"),
                    ("Mcp-Session-Id", &id),
                ],
                &answer.to_string(),
            );
        }
        if session.as_deref() != Some(current.as_str()) {
            return respond(&mut out, 404, &[], "unknown session");
        }
        if message.get("id").is_none() {
            return respond(&mut out, 202, &[], "");
        }
        let id = message["id"].clone();
        let result = match method.as_str() {
            "tools/list" => {
                let tools: Vec<Value> = ["get_checkout", "complete_checkout", "search_catalog"]
                    .iter()
                    .map(|name| json!({"name": name, "inputSchema": {"type": "object"}}))
                    .collect();
                json!({"tools": tools})
            }
            "tools/call" => {
                let tool = tool.unwrap_or_default();
                let act = {
                    let mut script = self.script.lock().unwrap();
                    script
                        .get_mut(&tool)
                        .and_then(VecDeque::pop_front)
                        .unwrap_or(Act::Answer)
                };
                match act {
                    Act::Answer => {}
                    Act::HangUp => return,
                    Act::Slow(wait) => std::thread::sleep(wait),
                    Act::Status(code) => {
                        return respond(&mut out, code, &[("Retry-After", "0")], "busy");
                    }
                    Act::ForgetSessions => {
                        self.session.fetch_add(1, Ordering::SeqCst);
                        return respond(&mut out, 404, &[], "unknown session");
                    }
                    Act::ForgetSessionsThenHandshakeSlowly(wait) => {
                        std::thread::sleep(wait);
                        *self.slow_initialize.lock().unwrap() = Some(wait);
                        self.session.fetch_add(1, Ordering::SeqCst);
                        return respond(&mut out, 404, &[], "unknown session");
                    }
                    Act::Garbled(content_type) => {
                        return respond(
                            &mut out,
                            200,
                            &[("Content-Type", content_type)],
                            "charged; see you",
                        );
                    }
                    Act::Both => {
                        let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"content": []},
                                            "error": {"code": -32000, "message": "declined"}});
                        return respond(
                            &mut out,
                            200,
                            &[("Content-Type", "application/json")],
                            &answer.to_string(),
                        );
                    }
                    Act::Bare => {
                        let answer = json!({"jsonrpc": "2.0", "id": id});
                        return respond(
                            &mut out,
                            200,
                            &[("Content-Type", "application/json")],
                            &answer.to_string(),
                        );
                    }
                    Act::Huge(bytes) => {
                        let text = "x".repeat(bytes);
                        let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}});
                        return respond(
                            &mut out,
                            200,
                            &[("Content-Type", "application/json")],
                            &answer.to_string(),
                        );
                    }
                }
                let arguments = &message["params"]["arguments"];
                match tool.as_str() {
                    "get_checkout" => {
                        let checkout = ready_checkout(arguments["id"].as_str().unwrap_or(""));
                        let result = tool_result(&checkout);
                        // An event stream: a progress notification, then the answer in two data lines.
                        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                                              "params": {"progressToken": "p", "progress": 1}});
                        let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
                        let text = answer.to_string();
                        let (first, second) = text.split_at(text.len() / 2);
                        let stream = format!(
                            ": priming\nid: 1\ndata: {progress}\n\ndata: {first}\ndata: {second}\n\n"
                        );
                        return respond(
                            &mut out,
                            200,
                            &[("Content-Type", "text/event-stream")],
                            &stream,
                        );
                    }
                    "complete_checkout" => {
                        let mut checkout = ready_checkout(arguments["id"].as_str().unwrap_or(""));
                        checkout["status"] = json!("completed");
                        checkout["order"] = json!({"id": "gid://scripted/Order/1"});
                        tool_result(&checkout)
                    }
                    _ => json!({"content": [], "structuredContent": {"products": []}}),
                }
            }
            _ => {
                let error =
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}});
                return respond(
                    &mut out,
                    200,
                    &[("Content-Type", "application/json")],
                    &error.to_string(),
                );
            }
        };
        // Pretty-printed on purpose: line breaks inside a JSON body must not break the relay.
        let answer =
            serde_json::to_string_pretty(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
                .unwrap();
        respond(
            &mut out,
            200,
            &[("Content-Type", "application/json")],
            &answer,
        );
    }
}

fn tool_result(structured: &Value) -> Value {
    json!({"content": [{"type": "text", "text": structured.to_string()}], "structuredContent": structured})
}

fn respond(out: &mut TcpStream, status: u16, headers: &[(&str, &str)], body: &str) {
    let mut text = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// A world whose proxy reaches `shop` over HTTP with the world's token.
fn world_with(shop: &ScriptedShop, options: Options) -> World {
    let timeout = options.timeout_seconds;
    let world = World::with(Options {
        merchants: vec!["demo-outfitters.example", "127.0.0.1"],
        ..options
    });
    world.set_downstream(json!({
        "url": shop.url(),
        "bearer_token_env": TOKEN_VAR,
        "timeout_seconds": timeout,
    }));
    world
}

fn in_flight_usd(mcp: &mut Mcp) -> i64 {
    let status = mcp.call("cajaguard_status", json!({}));
    status["structuredContent"]["caps"]["USD"]["in_flight_minor"]
        .as_i64()
        .unwrap()
}

fn complete_with_key(mcp: &mut Mcp, checkout: &str, key: &str) -> Value {
    mcp.complete(
        checkout,
        instrument(TEST_HANDLER, TEST_TOKEN),
        key,
        json!({}),
    )
}

#[test]
fn the_relay_speaks_streamable_http_headers_and_event_streams() {
    let shop = ScriptedShop::start(&[]);
    let world = world_with(&shop, Options::default());
    let mut mcp = world.proxy();
    let checkout = "gid://scripted/Checkout/1";
    let result = mcp.pay(checkout);
    assert_eq!(verdict(&result).0, "allow", "{result}");
    let seen = shop.seen();
    assert_eq!(seen[0].method, "initialize");
    assert_eq!(seen[0].session, None);
    assert_eq!(seen[1].method, "notifications/initialized");
    assert!(
        seen[1..]
            .iter()
            .all(|s| s.session.as_deref() == Some("s1") && s.authorized),
        "{seen:?}"
    );
    assert!(seen.iter().all(|s| s.authorized), "{seen:?}");
    // complete_checkout went out with the agent's bytes inside a JSON-RPC request.
    let complete = &shop.calls_of("complete_checkout")[0];
    assert!(complete.body.contains(TEST_TOKEN), "{}", complete.body);
}

#[test]
fn a_complete_checkout_refused_for_a_stale_session_is_resent_once_on_a_new_one() {
    let shop = ScriptedShop::start(&[("complete_checkout", vec![Act::ForgetSessions])]);
    let world = world_with(&shop, Options::default());
    let mut mcp = world.proxy();
    let result = mcp.pay("gid://scripted/Checkout/1");
    assert_eq!(verdict(&result).0, "allow", "{result}");
    assert_eq!(
        result["structuredContent"]["status"], "completed",
        "{result}"
    );
    let completes = shop.calls_of("complete_checkout");
    assert_eq!(completes.len(), 2, "{completes:?}");
    assert_eq!(completes[0].session.as_deref(), Some("s1"));
    assert_ne!(completes[1].session, completes[0].session);
    let initializes = shop
        .seen()
        .iter()
        .filter(|s| s.method == "initialize")
        .count();
    assert_eq!(initializes, 2, "one new session, not more");
    // The very same request (same idempotency key, same bytes but the JSON-RPC id).
    let arguments = |s: &Seen| serde_json::from_str::<Value>(&s.body).unwrap()["params"].clone();
    assert_eq!(arguments(&completes[0]), arguments(&completes[1]));
    assert_eq!(in_flight_usd(&mut mcp), 0);
}

/// The shop forgot the session twice: it says it did not take the payment, but the bytes went out
/// twice, so the reservation is released only after a fresh read of the checkout says it is still
/// open (as for any refusal), never on the 404 alone.
#[test]
fn a_payment_refused_for_a_stale_session_twice_is_released_only_after_a_fresh_read() {
    let shop = ScriptedShop::start(&[(
        "complete_checkout",
        vec![Act::ForgetSessions, Act::ForgetSessions],
    )]);
    let world = world_with(&shop, Options::default());
    let mut mcp = world.proxy();
    let result = mcp.pay("gid://scripted/Checkout/1");
    assert_eq!(result["isError"], json!(true), "{result}");
    assert_eq!(shop.calls_of("complete_checkout").len(), 2);
    let reads = shop.calls_of("get_checkout");
    assert_eq!(
        reads.len(),
        2,
        "the gate's read-back, then the read that confirms the refusal: {reads:?}"
    );
    assert_eq!(in_flight_usd(&mut mcp), 0, "the read found it open");
}

/// Red-team finding: a payment's resend on a new session went out whenever the new handshake
/// ended, though reconciliation takes a reservation older than twice the shop's timeout for one
/// whose payment never came, and releases it. A payment is written within the shop's timeout of
/// its reservation or not at all.
#[test]
fn a_payment_is_not_resent_after_the_shops_timeout_has_passed_since_its_reservation() {
    let shop = ScriptedShop::start(&[(
        "complete_checkout",
        vec![Act::ForgetSessionsThenHandshakeSlowly(
            Duration::from_millis(1500),
        )],
    )]);
    // 3 s: each step (the first answer, the handshake) well within it, both together past it,
    // with 1.5 s to spare for the gate on a busy machine.
    let world = world_with(
        &shop,
        Options {
            timeout_seconds: 3,
            ..Options::default()
        },
    );
    let mut mcp = world.proxy();
    let result = mcp.pay("gid://scripted/Checkout/1");
    assert_eq!(result["isError"], json!(true), "{result}");
    assert_eq!(
        shop.calls_of("complete_checkout").len(),
        1,
        "the resend was not written"
    );
    // The one write was refused for its session: released after a fresh read, as any refusal.
    assert_eq!(shop.calls_of("get_checkout").len(), 2);
    assert_eq!(in_flight_usd(&mut mcp), 0);
}

/// Regression (issue 13): an answer over `max_message_bytes` dropped the whole connection (and
/// its MCP session). Now that response alone fails; the session is kept and the next payment on
/// it completes.
#[test]
fn an_oversized_answer_over_http_fails_only_that_call_and_keeps_the_session() {
    let shop = ScriptedShop::start(&[("search_catalog", vec![Act::Huge(200_000)])]);
    let world = world_with(&shop, Options::default());
    let mut downstream = read_json(&world.config)["downstream"].clone();
    downstream["max_message_bytes"] = json!(65_536);
    world.set_downstream(downstream);
    let mut mcp = world.proxy();
    let read = mcp.call("search_catalog", json!({"query": "socks"}));
    assert_eq!(read["isError"], true, "{read}");
    assert!(read.to_string().contains("only this call failed"), "{read}");
    let paid = mcp.pay("gid://scripted/Checkout/1");
    assert_eq!(verdict(&paid).0, "allow", "{paid}");
    let initializes = shop
        .seen()
        .iter()
        .filter(|s| s.method == "initialize")
        .count();
    assert_eq!(initializes, 1, "the same session throughout");
    assert_eq!(in_flight_usd(&mut mcp), 0);
}

/// SPEC §4.13: a 200 with an unexpected content type, an answer with neither result nor error
/// (or with both), or an unexpected HTTP status (a 4xx without a JSON-RPC error, a gateway's
/// 408, a redirect) may follow a charge: each is an unknown outcome, and none passes as free.
#[test]
fn garbled_answers_over_http_keep_the_spend_counted() {
    for act in [
        Act::Garbled("text/plain"),
        Act::Garbled("text/html; charset=utf-8"),
        Act::Bare,
        Act::Both,
        Act::Status(400),
        Act::Status(408),
        Act::Status(302),
    ] {
        let shop = ScriptedShop::start(&[("complete_checkout", vec![act.clone()])]);
        let world = world_with(&shop, Options::default());
        let mut mcp = world.proxy();
        let result = complete_with_key(&mut mcp, "gid://scripted/Checkout/1", &uuid());
        let detail = result["structuredContent"]["cajaguard"]["detail"]
            .as_str()
            .unwrap_or_default();
        assert!(detail.contains("outcome is unknown"), "{act:?}: {result}");
        assert_eq!(
            in_flight_usd(&mut mcp),
            2400,
            "{act:?}: the reservation stays"
        );
    }
}

#[test]
fn a_shop_dying_mid_call_is_an_unknown_outcome_and_a_retry_with_the_same_key_goes_through() {
    let shop = ScriptedShop::start(&[("complete_checkout", vec![Act::HangUp])]);
    let world = world_with(&shop, Options::default());
    let mut mcp = world.proxy();
    let checkout = "gid://scripted/Checkout/1";
    let key = uuid();
    let result = complete_with_key(&mut mcp, checkout, &key);
    assert_eq!(result["isError"], json!(true), "{result}");
    let detail = result["structuredContent"]["cajaguard"]["detail"]
        .as_str()
        .unwrap();
    assert!(detail.contains("outcome is unknown"), "{detail}");
    assert_eq!(shop.calls_of("complete_checkout").len(), 1);
    assert_eq!(in_flight_usd(&mut mcp), 2400, "the reservation stays");
    let retry = complete_with_key(&mut mcp, checkout, &key);
    assert_eq!(verdict(&retry).0, "allow", "{retry}");
    assert_eq!(shop.calls_of("complete_checkout").len(), 2);
    assert_eq!(in_flight_usd(&mut mcp), 0);
}

#[test]
fn a_shop_slower_than_the_timeout_keeps_the_reservation_and_the_retry_needs_no_new_approval() {
    let shop = ScriptedShop::start(&[(
        "complete_checkout",
        vec![Act::Slow(Duration::from_millis(2500))],
    )]);
    let world = world_with(
        &shop,
        Options {
            caps: json!({ "USD": { "approval_above": "10.00", "per_transaction": "100.00", "window": "150.00" } }),
            timeout_seconds: 1,
            ..Options::default()
        },
    );
    let mut mcp = world.proxy();
    let checkout = "gid://scripted/Checkout/1";
    let blocked = mcp.pay(checkout);
    let (v, _, request_id) = verdict(&blocked);
    assert_eq!(v, "blocked", "{blocked}");
    // `cajaguard approve` reads the checkout back over HTTP too.
    let out = world.cli(&["approve", &request_id.unwrap(), "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = uuid();
    let slow = complete_with_key(&mut mcp, checkout, &key);
    assert_eq!(slow["isError"], json!(true), "{slow}");
    let detail = slow["structuredContent"]["cajaguard"]["detail"]
        .as_str()
        .unwrap();
    assert!(
        detail.contains("did not answer within") && detail.contains("outcome is unknown"),
        "{detail}"
    );
    assert_eq!(in_flight_usd(&mut mcp), 2400, "the reservation stays");
    // The approval is used; the retry with the same key is still forwarded.
    let retry = complete_with_key(&mut mcp, checkout, &key);
    assert!(verdict(&retry).0.starts_with("allow"), "{retry}");
    assert_eq!(shop.calls_of("complete_checkout").len(), 2);
    assert_eq!(in_flight_usd(&mut mcp), 0);
    // A new key is a new payment, and this checkout is paid: refused, not forwarded.
    let again = mcp.pay(checkout);
    assert_eq!(verdict(&again).0, "denied", "{again}");
    assert_eq!(shop.calls_of("complete_checkout").len(), 2);
}

#[test]
fn reads_are_retried_after_503_and_429_but_complete_checkout_is_not_and_stays_counted() {
    for status in [503, 429] {
        let shop = ScriptedShop::start(&[
            ("search_catalog", vec![Act::Status(503), Act::Status(429)]),
            ("complete_checkout", vec![Act::Status(status)]),
        ]);
        let world = world_with(&shop, Options::default());
        let mut mcp = world.proxy();
        let search = mcp.call(
            "search_catalog",
            json!({"meta": {"ucp-agent": {"profile": AGENT}}, "catalog": {"query": "socks"}}),
        );
        assert_ne!(search["isError"], json!(true), "{search}");
        assert_eq!(shop.calls_of("search_catalog").len(), 3);
        let result = mcp.pay("gid://scripted/Checkout/1");
        assert_eq!(result["isError"], json!(true), "{result}");
        assert!(
            result.to_string().contains(&format!("HTTP {status}")),
            "{result}"
        );
        assert_eq!(shop.calls_of("complete_checkout").len(), 1);
        // A 429 or 503 on a payment may come from a gateway that passed it on (SPEC §4.13: an
        // unexpected status is an unknown outcome): the reservation stays until the shop's word
        // is learnt.
        assert_eq!(in_flight_usd(&mut mcp), 2400, "HTTP {status}");
    }
}

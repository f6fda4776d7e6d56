//! Hostile agents (SPEC §3, §11.1, §11.5): malformed JSON-RPC, oversized and deeply nested
//! messages, call storms and look-alike tool names get a clear error or refusal, never reach the
//! shop, never crash the proxy, and never put raw control characters into the audit log or an
//! error. Shop text with terminal escapes is shown sanitised by `cajaguard approve`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::*;

fn alive(mcp: &mut Mcp) {
    let pong = mcp.request("ping", json!({}));
    assert_eq!(pong["result"], json!({}), "{pong}");
}

fn error_message(answer: &Value) -> String {
    answer["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {answer}"))
        .to_owned()
}

/// No raw control, bidi or zero-width character anywhere in the text.
fn clean(text: &str) -> bool {
    !text.chars().any(|c| {
        c.is_control()
            || matches!(u32::from(c), 0x200b..=0x200f | 0x202a..=0x202e | 0x2066..=0x2069 | 0xfeff)
    })
}

fn audit_texts(world: &World) -> Vec<String> {
    let conn = rusqlite::Connection::open(world.home.join("cajaguard.db")).unwrap();
    let mut stmt = conn
        .prepare("SELECT tool, verdict, reason, COALESCE(checkout_id, ''), COALESCE(idempotency_key, ''), COALESCE(note, '') FROM audit")
        .unwrap();
    stmt.query_map([], |r| {
        Ok((0..6)
            .map(|i| r.get::<_, String>(i))
            .collect::<Result<Vec<_>, _>>()?
            .join(" | "))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

#[test]
fn malformed_json_rpc_is_answered_and_the_proxy_stays_up() {
    let world = World::with_test_shop(json!({}));
    let mut mcp = world.proxy();
    for line in [
        "{",
        "nonsense",
        "null",
        "42",
        "\"a string\"",
        "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":7}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":5}}",
        "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
    ] {
        mcp.send_line(line);
        let answer = mcp.read_message();
        assert!(answer.get("error").is_some(), "{line}: {answer}");
    }
    // Not UTF-8, a response nobody asked for, a notification with no method: no answer, no harm.
    mcp.send_line(&String::from_utf8_lossy(
        b"{\"id\":1,\"method\":\"\xff\xfe\"}",
    ));
    let _ = mcp.read_message();
    mcp.send_line("{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}");
    mcp.send_line("{\"jsonrpc\":\"2.0\"}");
    alive(&mut mcp);
}

#[test]
fn oversized_and_deeply_nested_messages_get_a_clear_error() {
    let world = World::with_test_shop(json!({}));
    let mut mcp = world.proxy();

    // Over the 1 MiB limit: refused, and the stream stays in step.
    let big = "x".repeat(2 * 1024 * 1024);
    mcp.send_line(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search_catalog", "arguments": {"q": big}}})
            .to_string(),
    );
    let answer = mcp.read_message();
    assert!(error_message(&answer).contains("1048576 bytes"), "{answer}");
    alive(&mut mcp);

    // 200 and 300,000 levels of nesting in the arguments of both a plain and the gated tool.
    for depth in [200, 300_000] {
        for tool in ["search_catalog", "complete_checkout"] {
            let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            mcp.send_line(&format!(
                r#"{{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{{"name":"{tool}","arguments":{{"meta":{nested}}}}}}}"#
            ));
            let answer = mcp.read_message();
            let message = error_message(&answer);
            assert!(
                message.contains("nested more than 128 levels"),
                "{tool} {depth}: {message}"
            );
        }
        alive(&mut mcp);
    }
    // Deep nesting inside a string is only text: scanned (linear) and forwarded.
    let text = "[".repeat(100_000);
    let result = mcp.call(
        "search_catalog",
        json!({"meta": {"ucp-agent": {"profile": AGENT}}, "catalog": {"query": text}}),
    );
    assert_ne!(result["isError"], true, "{result}");
    assert!(
        !world
            .test_shop_lines()
            .iter()
            .any(|l| l.contains("\"deep\"")),
        "nothing nested too deep reached the shop"
    );
}

#[test]
fn a_call_storm_is_bounded_and_every_call_is_answered() {
    let options = Options {
        timeout_seconds: 1,
        ..Options::default()
    };
    let world = World::with_options_and_test_shop(
        options,
        json!({ "on": { "search_catalog": [{"hang": true}] } }),
    );
    let mut mcp = world.proxy();
    let calls = 150;
    let ids: Vec<u64> = (0..calls)
        .map(|_| {
            mcp.send_request(
                "tools/call",
                json!({"name": "search_catalog", "arguments": {"meta": {"ucp-agent": {"profile": AGENT}}, "catalog": {"query": "x"}}}),
            )
        })
        .collect();
    let mut overloaded = 0;
    let mut answered = std::collections::BTreeSet::new();
    let started = std::time::Instant::now();
    while answered.len() < ids.len() {
        let message = mcp.read_message();
        let Some(id) = message.get("id").and_then(Value::as_u64) else {
            continue;
        };
        if message["error"]["code"] == json!(-32002) {
            overloaded += 1;
        }
        answered.insert(id);
    }
    // At most 64 in flight: the others were refused at once, none was dropped.
    assert!(overloaded >= calls - 64, "{overloaded} refused");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    alive(&mut mcp);
}

#[test]
fn look_alike_tool_names_are_refused_and_kept_out_of_the_audit_log_raw() {
    let world = World::with_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout("gid://test/Checkout/1")}],
    }}));
    let mut mcp = world.proxy();
    let names = [
        "complete_checkout\u{200b}",
        "\u{202e}tuokcehc_etelpmoc",
        "\u{441}omplete_checkout", // Cyrillic с
        "complete_checkout ",
        "COMPLETE_CHECKOUT",
        "complete\u{0}checkout",
        "complete\u{1b}[2Jcheckout",
        "\u{ff43}\u{ff4f}\u{ff4d}\u{ff50}lete_checkout", // full-width
        "complete_checkout\u{feff}",
        "get_checkout\u{200d}",
    ];
    let args = Mcp::complete_arguments("gid://test/Checkout/1", &uuid());
    for name in names {
        let answer = mcp.call(name, args.clone());
        assert_eq!(verdict(&answer).1, "tool_not_allowed", "{name:?}: {answer}");
        assert!(clean(&answer.to_string()), "{name:?}: {answer}");
    }
    // An unknown method named with escapes: its error message shows them escaped.
    let answer = mcp.request("\u{202e}tools/call\u{1b}[31m", json!({}));
    assert!(clean(&error_message(&answer)), "{answer}");
    // A checkout id and key with escapes reach the audit log escaped.
    let odd = mcp.complete(
        "gid://test/\u{1b}[2J\u{202e}1",
        instrument(TEST_HANDLER, TEST_TOKEN),
        "key-\u{7}\u{200b}",
        json!({}),
    );
    assert_eq!(odd["isError"], true, "{odd}");

    let lines = world.test_shop_lines();
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("\"tools/call\"") && l.contains("complete_checkout")),
        "no look-alike reached the shop as a payment: {lines:?}"
    );
    let audit = audit_texts(&world);
    assert!(audit.len() >= names.len(), "{audit:?}");
    for row in &audit {
        assert!(
            clean(row),
            "raw control characters in the audit log: {row:?}"
        );
    }
    assert!(
        audit.iter().any(|r| r.contains("\\u{441}omplete_checkout")),
        "the homoglyph is visible as such: {audit:?}"
    );
}

/// Text an agent chooses that is kept (an unknown tool's name, a freeze's reason, an
/// idempotency key) never keeps a card number or a live key, in any mode (SPEC §11.4): the audit
/// log, the freeze and the status show that something was withheld instead.
#[test]
fn a_card_number_or_live_key_an_agent_sends_is_kept_out_of_the_audit_log_and_status() {
    let world = World::with_test_shop(json!({ "on": {
        "get_checkout": [{"checkout": ready_checkout("gid://test/Checkout/1")}],
    }}));
    let mut mcp = world.proxy();
    let secrets = [
        "4111111111111111",
        "4111 1111 1111 1111",
        "sk_live_abcdef0123456789",
    ];
    for secret in secrets {
        let answer = mcp.call(secret, json!({}));
        assert_eq!(verdict(&answer).1, "tool_not_allowed", "{answer}");
    }
    let frozen = mcp.call(
        "cajaguard_freeze",
        json!({ "reason": "card 4111 1111 1111 1111, key sk_live_abcdef0123456789" }),
    );
    assert_eq!(frozen["isError"], json!(false), "{frozen}");
    let shown = |text: &str| text.contains("4111") || text.contains("sk_live");
    assert!(!shown(&frozen.to_string()), "{frozen}");
    let status = mcp.call("cajaguard_status", json!({}));
    assert!(!shown(&status.to_string()), "{status}");
    let cli = world.cli(&["status"]);
    assert!(
        !shown(&String::from_utf8_lossy(&cli.stdout)),
        "{}",
        String::from_utf8_lossy(&cli.stdout)
    );

    let audit = audit_texts(&world);
    assert!(audit.len() > secrets.len(), "{audit:?}");
    let withheld = audit
        .iter()
        .filter(|row| row.contains(cajaguard_core::tripwire::WITHHELD))
        .count();
    assert_eq!(withheld, secrets.len() + 1, "{audit:?}");
    for row in &audit {
        assert!(!shown(row), "a secret in the audit log: {row:?}");
    }
    // The log still verifies: what was withheld is what was hashed.
    let verified = world.cli(&["audit", "verify"]);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
}

#[test]
fn approve_shows_shop_text_without_terminal_escapes() {
    let mut checkout = ready_checkout("gid://test/Checkout/evil");
    let title =
        "Day pack\u{1b}[2J\u{1b}[31m\u{1b}]0;owned\u{7}\u{202e}kcap\r\nmerchant: trusted.example";
    checkout["line_items"][0]["item"]["title"] = json!(title);
    checkout["line_items"][0]["item"]["price"] = json!(8900);
    checkout["line_items"][0]["quantity"] = json!(1);
    checkout["line_items"][0]["totals"] = json!([{"type": "total", "amount": 8900}]);
    checkout["totals"] =
        json!([{"type": "subtotal", "amount": 8900}, {"type": "total", "amount": 8900}]);
    let world =
        World::with_test_shop(json!({ "on": { "get_checkout": [{"checkout": checkout}] } }));
    let mut mcp = world.proxy();
    let blocked = mcp.complete(
        "gid://test/Checkout/evil",
        instrument(TEST_HANDLER, TEST_TOKEN),
        &uuid(),
        json!({}),
    );
    let (_, reason, request_id) = verdict(&blocked);
    assert_eq!(reason, "pending_approval", "{blocked}");
    let out = world.cli(&[
        "approve",
        &request_id.unwrap(),
        "--yes",
        "--note",
        "ok\u{1b}[8m hidden \u{202e}",
    ]);
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.chars().all(|c| c == '\n' || !c.is_control()) && !shown.contains('\u{202e}'),
        "escapes reached the terminal: {shown:?}"
    );
    assert!(shown.contains("Day pack"), "{shown}");
    // The injected newline cannot fake a line of its own.
    assert!(
        !shown.lines().any(|l| l.starts_with("merchant: trusted")),
        "{shown}"
    );
}

/// SPEC §3, JSON-RPC conformance (regression, issue 13: several of these got no answer at all).
/// Each invalid line gets its error code with the line's id when it is a valid id, else `null`;
/// nothing reaches the shop; the next valid call works.
#[test]
fn every_invalid_json_rpc_line_gets_its_error_and_the_next_call_works() {
    let world = World::with_test_shop(json!({}));
    let mut mcp = world.proxy();
    let before = world.test_shop_lines().len();
    let search =
        r#""method":"tools/call","params":{"name":"search_catalog","arguments":{"query":"socks"}}"#;
    let cases: Vec<(String, i64, Value)> = vec![
        (
            format!(r#"{{"jsonrpc":"1.0","id":1,{search}}}"#),
            -32600,
            json!(1),
        ),
        (format!(r#"{{"id":"two",{search}}}"#), -32600, json!("two")),
        (
            format!(r#"{{"jsonrpc":2.0,"id":3,{search}}}"#),
            -32600,
            json!(3),
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","id":null,{search}}}"#),
            -32600,
            Value::Null,
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","id":1.5,{search}}}"#),
            -32600,
            Value::Null,
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","id":{{}},{search}}}"#),
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"method":7}"#.into(),
            -32600,
            json!(7),
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":"search_catalog"}"#.into(),
            -32602,
            json!(8),
        ),
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":42}"#.into(),
            -32602,
            json!(9),
        ),
        (
            r#"{"jsonrpc":"2.0","id":10,"method":"no/such","params":true}"#.into(),
            -32600,
            json!(10),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#.into(),
            -32602,
            Value::Null,
        ),
        (r#"{"jsonrpc":"2.0","id":11}"#.into(), -32600, json!(11)),
        (
            r#"{"jsonrpc":"2.0","id":12,"method":"ping","method":"tools/call"}"#.into(),
            -32600,
            Value::Null,
        ),
        ("42".into(), -32600, Value::Null),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":13,".into(),
            -32700,
            Value::Null,
        ),
        ("not json".into(), -32700, Value::Null),
    ];
    for (line, code, id) in &cases {
        mcp.send_line(line);
        let answer = mcp.read_message();
        assert_eq!(answer["jsonrpc"], "2.0", "{line}: {answer}");
        assert_eq!(answer["error"]["code"], json!(code), "{line}: {answer}");
        assert_eq!(&answer["id"], id, "{line}: {answer}");
        assert!(answer.get("result").is_none(), "{line}: {answer}");
        // The next valid call still works.
        let ok = mcp.request(
            "tools/call",
            json!({"name": "search_catalog", "arguments": {"query": "socks"}}),
        );
        assert!(ok.get("result").is_some(), "after {line}: {ok}");
    }
    let forwarded = world.test_shop_lines()[before..]
        .iter()
        .filter(|l| l.contains("search_catalog"))
        .count();
    assert_eq!(
        forwarded,
        cases.len(),
        "only the valid calls reached the shop"
    );
}

//! `cajaguard mcp --connect URL --token-env VAR`, the stdio bridge to a CajaGuard service, run as
//! the real binary: against the fixture shop serving MCP Streamable HTTP with a bearer token
//! (what an MCP server over HTTP looks like from the bridge), and against a scripted HTTP server
//! below (std::net on 127.0.0.1) that records every request's headers and body exactly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// Longer than any answer takes on a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(60);

/// The bridge as a child process: its stdout read line by line on a thread.
struct Bridge {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Bridge {
    fn start(url: &str, env: &[(&str, &str)]) -> Bridge {
        let mut command = bridge_command(url);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            loop {
                let mut line = String::new();
                match stdout.read_line(&mut line) {
                    Ok(n) if n > 0 => {
                        if tx.send(line).is_err() {
                            return;
                        }
                    }
                    _ => return,
                }
            }
        });
        Bridge {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, message: &Value) {
        self.send_line(&message.to_string());
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line on stdout, as JSON; each must be one whole JSON-RPC message.
    fn read(&mut self) -> Value {
        let line = match self.lines.recv_timeout(DEADLINE) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => panic!("the bridge sent nothing for {DEADLINE:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the bridge closed its output"),
        };
        assert!(line.ends_with('\n'), "a line cut short: {line}");
        let message: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not JSON from the bridge ({e}): {line}"));
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
        message
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let answer = self.read();
        assert_eq!(answer["id"], json!(id), "{answer}");
        answer
    }

    /// Closes stdin (the client hangs up) and waits for the exit: code, and every line still
    /// unread on stdout, and stderr.
    fn hang_up(mut self) -> (i32, Vec<String>, String) {
        drop(self.stdin.take());
        let deadline = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the bridge did not exit at EOF");
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader thread may still hold the last lines: read until it sees the pipe close.
        let mut rest = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(10)) {
            rest.push(line);
        }
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        (status.code().unwrap_or(-1), rest, stderr)
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bridge_command(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cajaguard"));
    command
        .args(["mcp", "--connect", url, "--token-env", TOKEN_VAR])
        .env_remove(TOKEN_VAR)
        .env("CAJAGUARD_LOG", "cajaguard=info");
    command
}

fn initialize(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bridge-test", "version": "0"}}})
}

fn fixture(dir: &tempfile::TempDir) -> FixtureServer {
    FixtureServer::start(
        &dir.path().join("shop"),
        &dir.path().join("port"),
        "127.0.0.1:0",
    )
}

// ---------------------------------------------------------------------------------------------
// Against the fixture shop over MCP Streamable HTTP (rmcp's server: sessions, event streams,
// `Authorization: Bearer` required).

#[test]
fn a_session_through_the_bridge_initializes_lists_and_calls_and_ends_at_eof() {
    let dir = tempfile::tempdir().unwrap();
    let shop = fixture(&dir);
    let mut bridge = Bridge::start(&shop.url(), &[(TOKEN_VAR, SHOP_TOKEN)]);
    bridge.send(&initialize(1));
    let init = bridge.read();
    assert_eq!(init["id"], 1, "{init}");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    // A notification is answered 202 by the service: nothing comes back for it.
    bridge.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // rmcp refuses a request without the session's id: these prove the bridge echoes it.
    let list = bridge.request(2, "tools/list", json!({}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list failed: {list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"create_checkout"), "{names:?}");
    let call = bridge.request(
        3,
        "tools/call",
        json!({"name": "create_checkout", "arguments": {
            "meta": meta(), "checkout": {"line_items": line_items("trail-socks", 2)}}}),
    );
    assert_ne!(call["result"]["isError"], json!(true), "{call}");
    assert!(
        call["result"]["structuredContent"]["id"].is_string(),
        "{call}"
    );
    let sessions = std::fs::read_to_string(dir.path().join("shop/sessions.jsonl")).unwrap();
    assert_eq!(sessions.lines().count(), 1, "one session: {sessions}");
    let (code, rest, stderr) = bridge.hang_up();
    assert_eq!(code, 0, "{stderr}");
    assert!(rest.is_empty(), "no line for the notification: {rest:?}");
    assert!(
        !stderr.contains(SHOP_TOKEN),
        "the token in the logs: {stderr}"
    );
}

#[test]
fn a_refused_token_is_an_error_for_that_request_naming_the_variable_not_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let shop = fixture(&dir);
    let wrong = "cg-wrong-bearer-0000";
    let mut bridge = Bridge::start(&shop.url(), &[(TOKEN_VAR, wrong)]);
    bridge.send(&initialize(7));
    let answer = bridge.read();
    assert_eq!(answer["id"], 7, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_else(|| {
        panic!("a JSON-RPC error expected: {answer}");
    });
    assert_eq!(
        message,
        format!("the service refused the token in ${TOKEN_VAR} (401): check it")
    );
    let (code, rest, stderr) = bridge.hang_up();
    assert_eq!(code, 0, "{stderr}");
    assert!(rest.is_empty(), "{rest:?}");
    assert!(!stderr.contains(wrong) && !answer.to_string().contains(wrong));
}

#[test]
fn a_missing_or_empty_token_variable_is_a_usage_error_naming_it() {
    for env in [vec![], vec![(TOKEN_VAR, "")]] {
        let mut command = bridge_command("http://127.0.0.1:9/mcp");
        for (k, v) in &env {
            command.env(k, v);
        }
        let out = command.stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("${TOKEN_VAR} is not set")),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "stdout is only MCP");
    }
}

#[test]
fn the_command_line_takes_one_of_config_or_connect_and_only_safe_urls() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_cajaguard"))
            .args(args)
            .env(TOKEN_VAR, SHOP_TOKEN)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let url = "http://127.0.0.1:9/mcp";
    for args in [
        vec!["mcp"],
        vec!["mcp", "--config", "x.json", "--connect", url],
        vec!["mcp", "--config", "x.json", "--token-env", TOKEN_VAR],
    ] {
        let (code, stderr) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
    }
    let (code, stderr) = run(&["mcp", "--connect", "http://10.1.2.3/mcp"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("non-loopback"), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// Against a scripted server, which shows what goes over the wire.

/// One request the scripted server received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    headers: HashMap<String, String>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
    fn rpc_method(&self) -> Option<String> {
        let body: Value = serde_json::from_str(&self.body).ok()?;
        body["method"].as_str().map(str::to_owned)
    }
}

const SCRIPTED_TOKEN: &str = "cg-scripted-token-1234";

/// A Streamable HTTP server with a session (`sess-1`, then `sess-2` after a second `initialize`):
/// it negotiates 2025-06-18 whatever is offered, answers `tools/list` with an event stream that
/// carries a progress notification first, `tools/call` by name (`slow` after 1.5 s, `forget`
/// with 404 as a server that lost the session, `vanish` with a stream that ends without an
/// answer after 0.5 s, anything else at once), notifications with 202,
/// and every request without the token with 401.
fn scripted_server() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sessions = Arc::new(Mutex::new(0u32));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let record = record.clone();
            let sessions = sessions.clone();
            std::thread::spawn(move || serve_one(stream, &record, &sessions));
        }
    });
    (url, seen)
}

fn serve_one(mut stream: TcpStream, seen: &Mutex<Vec<Seen>>, sessions: &Mutex<u32>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let Some(request) = http_request::read_request(&mut reader) else {
        return;
    };
    let seen_now = Seen {
        method: request.method().to_owned(),
        body: String::from_utf8(request.body).unwrap(),
        headers: request.headers,
    };
    seen.lock().unwrap().push(seen_now.clone());
    let mut reply = |status: &str, headers: &[(&str, String)], body: &str| {
        let mut head = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(body.as_bytes());
    };
    if seen_now.header("authorization") != Some(&format!("Bearer {SCRIPTED_TOKEN}")) {
        return reply("401 Unauthorized", &[], "no");
    }
    if seen_now.method == "DELETE" {
        return reply("200 OK", &[], "");
    }
    let message: Value = serde_json::from_str(&seen_now.body).unwrap();
    let Some(id) = message.get("id") else {
        return reply("202 Accepted", &[], "");
    };
    let json = vec![("Content-Type", "application/json".to_owned())];
    let answer = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
    match message["method"].as_str().unwrap_or("") {
        "initialize" => {
            let mut n = sessions.lock().unwrap();
            *n += 1;
            let mut headers = json.clone();
            headers.push(("Mcp-Session-Id", format!("sess-{n}")));
            let result = json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "serverInfo": {"name": "scripted", "version": "0"}});
            reply("200 OK", &headers, &answer(result));
        }
        "tools/list" => {
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": 1}});
            // A multi-line data field: one message, one line on stdout.
            let events = format!(
                ": keep-alive\n\nevent: message\ndata: {progress}\n\ndata: {{\"jsonrpc\":\"2.0\",\ndata: \"id\":{id},\"result\":{{\"tools\":[]}}}}\n\n"
            );
            let headers = [("Content-Type", "text/event-stream".to_owned())];
            reply("200 OK", &headers, &events);
        }
        "tools/call" => match message["params"]["name"].as_str().unwrap_or("") {
            "slow" => {
                std::thread::sleep(Duration::from_millis(1500));
                reply(
                    "200 OK",
                    &json,
                    &answer(json!({"content": [], "tag": "slow"})),
                );
            }
            "vanish" => {
                // A stream that ends without the answer, as for a cancelled request.
                std::thread::sleep(Duration::from_millis(500));
                let headers = [("Content-Type", "text/event-stream".to_owned())];
                reply("200 OK", &headers, ": bye\n\n");
            }
            "forget" if seen_now.header("mcp-session-id").is_some() => {
                reply("404 Not Found", &[], "session not found");
            }
            _ => reply(
                "200 OK",
                &json,
                &answer(json!({"content": [], "tag": "fast"})),
            ),
        },
        _ => reply("400 Bad Request", &[], "unexpected"),
    }
}

#[test]
fn the_bridge_sends_the_clients_bytes_with_token_session_and_version_and_deletes_the_session_at_eof()
 {
    let (url, seen) = scripted_server();
    let mut bridge = Bridge::start(&url, &[(TOKEN_VAR, SCRIPTED_TOKEN)]);
    bridge.send(&initialize(1));
    assert_eq!(bridge.read()["result"]["protocolVersion"], "2025-06-18");
    bridge.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // Spacing, member order and escapes as the client wrote them: forwarded byte for byte.
    let odd = r#"{ "params" : {"name":"echo","arguments":{"t":"caf\u00e9", "n": 1.50}} ,"id":"q-2","method":"tools/call","jsonrpc":"2.0"}"#;
    bridge.send_line(odd);
    let answer = bridge.read();
    assert_eq!(answer["id"], "q-2", "{answer}");
    assert_eq!(answer["result"]["tag"], "fast", "{answer}");
    // An event stream: the notification, then the answer, each one line.
    bridge.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    let progress = bridge.read();
    assert_eq!(progress["method"], "notifications/progress", "{progress}");
    let list = bridge.read();
    assert_eq!(list["id"], 3, "{list}");
    assert_eq!(list["result"]["tools"], json!([]), "{list}");
    let (code, rest, stderr) = bridge.hang_up();
    assert_eq!(code, 0, "{stderr}");
    assert!(rest.is_empty(), "nothing for the notification: {rest:?}");
    assert!(!stderr.contains(SCRIPTED_TOKEN), "{stderr}");

    let seen = seen.lock().unwrap().clone();
    let methods: Vec<String> = seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.rpc_method().unwrap_or_default()))
        .collect();
    assert_eq!(
        methods,
        [
            "POST initialize",
            "POST notifications/initialized",
            "POST tools/call",
            "POST tools/list",
            "DELETE "
        ]
    );
    for s in &seen {
        assert_eq!(
            s.header("authorization"),
            Some(format!("Bearer {SCRIPTED_TOKEN}").as_str())
        );
    }
    let init = &seen[0];
    assert_eq!(init.header("content-type"), Some("application/json"));
    assert_eq!(
        init.header("accept"),
        Some("application/json, text/event-stream")
    );
    assert_eq!(init.header("mcp-session-id"), None);
    for s in &seen[1..] {
        assert_eq!(s.header("mcp-session-id"), Some("sess-1"), "{s:?}");
        // The version the service chose, not the one the client offered.
        assert_eq!(
            s.header("mcp-protocol-version"),
            Some("2025-06-18"),
            "{s:?}"
        );
    }
    assert_eq!(seen[2].body, odd, "the client's bytes, unchanged");
}

#[test]
fn a_slow_call_does_not_hold_up_a_fast_one() {
    let (url, _seen) = scripted_server();
    let mut bridge = Bridge::start(&url, &[(TOKEN_VAR, SCRIPTED_TOKEN)]);
    bridge.send(&initialize(1));
    bridge.read();
    let call = |id: u64, name: &str| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name}});
    bridge.send(&call(2, "slow"));
    bridge.send(&call(3, "fast"));
    let first = bridge.read();
    let second = bridge.read();
    assert_eq!(
        (first["id"].clone(), second["id"].clone()),
        (json!(3), json!(2))
    );
    assert_eq!(second["result"]["tag"], "slow", "{second}");
    // Both answered before EOF, and EOF waits for a call still in flight.
    bridge.send(&call(4, "slow"));
    let (code, rest, stderr) = bridge.hang_up();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        rest.len(),
        1,
        "the call in flight is answered before exit: {rest:?}"
    );
    assert!(rest[0].contains(r#""tag":"slow""#), "{rest:?}");
}

#[test]
fn a_forgotten_session_is_an_error_for_that_call_and_is_dropped_not_resent() {
    let (url, seen) = scripted_server();
    let mut bridge = Bridge::start(&url, &[(TOKEN_VAR, SCRIPTED_TOKEN)]);
    bridge.send(&initialize(1));
    bridge.read();
    let answer = bridge.request(2, "tools/call", json!({"name": "forget"}));
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no longer knows this session"), "{answer}");
    // The session is gone: the next call goes without it, and the client may initialize again.
    let next = bridge.request(3, "tools/call", json!({"name": "forget"}));
    assert_eq!(next["result"]["tag"], "fast", "{next}");
    bridge.send(&initialize(4));
    bridge.read();
    let (code, _, stderr) = bridge.hang_up();
    assert_eq!(code, 0, "{stderr}");
    let seen = seen.lock().unwrap().clone();
    let calls: Vec<Option<&str>> = seen
        .iter()
        .filter(|s| s.rpc_method().as_deref() == Some("tools/call"))
        .map(|s| s.header("mcp-session-id"))
        .collect();
    assert_eq!(
        calls,
        [Some("sess-1"), None],
        "sent once each, never resent"
    );
    let last = seen.last().unwrap();
    assert_eq!(last.method, "DELETE");
    assert_eq!(last.header("mcp-session-id"), Some("sess-2"));
}

#[test]
fn a_service_that_is_down_is_an_error_for_each_request() {
    // A port that was just free: nothing listens there.
    let url = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/mcp", listener.local_addr().unwrap())
    };
    let mut bridge = Bridge::start(&url, &[(TOKEN_VAR, SCRIPTED_TOKEN)]);
    bridge.send(&initialize(1));
    let answer = bridge.read();
    assert_eq!(answer["id"], 1, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("cannot reach the CajaGuard service"),
        "{answer}"
    );
    assert!(message.contains("was not sent"), "{answer}");
    let (code, _, stderr) = bridge.hang_up();
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_2026_07_28_request_carries_its_version_method_and_name_in_headers_without_a_handshake() {
    let (url, seen) = scripted_server();
    let mut bridge = Bridge::start(&url, &[(TOKEN_VAR, SCRIPTED_TOKEN)]);
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let answer = bridge.request(
        1,
        "tools/call",
        json!({"name": "search_catalog", "arguments": {}, "_meta": meta}),
    );
    assert_eq!(answer["result"]["tag"], "fast", "{answer}");
    let (code, _, stderr) = bridge.hang_up();
    assert_eq!(code, 0, "{stderr}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "no session, so no DELETE: {seen:?}");
    assert_eq!(seen[0].header("mcp-protocol-version"), Some("2026-07-28"));
    assert_eq!(seen[0].header("mcp-method"), Some("tools/call"));
    assert_eq!(seen[0].header("mcp-name"), Some("search_catalog"));
    assert_eq!(seen[0].header("mcp-session-id"), None);
}

#[test]
fn a_stream_ending_without_the_answer_is_an_error_unless_the_client_cancelled_the_call() {
    let (url, _seen) = scripted_server();
    let mut bridge = Bridge::start(&url, &[(TOKEN_VAR, SCRIPTED_TOKEN)]);
    let call = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "vanish"}});
    bridge.send(&call(1));
    let answer = bridge.read();
    assert_eq!(answer["id"], 1, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("without answering the call")
            && message.contains("may have been processed"),
        "{answer}"
    );
    // Cancelled: MCP says no answer comes, so no error either.
    bridge.send(&call(2));
    bridge.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "user"}}),
    );
    let (code, rest, stderr) = bridge.hang_up();
    assert_eq!(code, 0, "{stderr}");
    assert!(rest.is_empty(), "nothing for the cancelled call: {rest:?}");
}

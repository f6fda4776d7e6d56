//! The fixture shop as a real child process, spoken to with raw JSON-RPC lines over stdio.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

pub const PROFILE: &str = "https://agent.example/profile";

pub fn meta() -> Value {
    json!({"ucp-agent": {"profile": PROFILE}})
}

pub fn meta_key(key: &str) -> Value {
    json!({"ucp-agent": {"profile": PROFILE}, "idempotency-key": key})
}

pub fn uuid(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

pub struct Shop {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    next_id: u64,
    pub dir: PathBuf,
    pub protocol_version: String,
}

impl Shop {
    pub fn start(dir: &Path) -> Self {
        Self::start_with(dir, "2025-06-18")
    }

    pub fn start_with(dir: &Path, protocol_version: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cajaguard-fixture-shop"))
            .arg("--state")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cajaguard-fixture-shop");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shop = Self {
            child,
            stdin,
            lines: rx,
            next_id: 0,
            dir: dir.to_path_buf(),
            protocol_version: String::new(),
        };
        let init = shop.request(
            "initialize",
            json!({"protocolVersion": protocol_version, "capabilities": {},
                   "clientInfo": {"name": "fixture-tests", "version": "0"}}),
        );
        shop.protocol_version = init["result"]["protocolVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        shop.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        shop
    }

    pub fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").expect("write to the shop");
        self.stdin.flush().expect("flush");
    }

    pub fn send_raw(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to the shop");
        self.stdin.flush().expect("flush");
    }

    /// Waits for the response with this id (10 s at most: a wedged shop fails the test).
    pub fn wait_for(&mut self, id: u64) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(10))
                .expect("the shop answered within 10 s");
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("the shop wrote a non-JSON line {line:?}: {e}"));
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    /// Sends a request and returns the whole JSON-RPC response.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.wait_for(id)
    }

    /// `tools/call`: the JSON-RPC response.
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// `tools/call` that must succeed: its `structuredContent`, after checking the text content
    /// holds the same JSON.
    pub fn ok(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self.call(tool, arguments.clone());
        let result = &response["result"];
        assert_eq!(
            result["isError"],
            json!(false),
            "{tool}({arguments}) failed: {response}"
        );
        check_text_matches(result);
        result["structuredContent"].clone()
    }

    /// `tools/call` that must fail as a tool result: its `structuredContent`.
    pub fn fails(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self.call(tool, arguments.clone());
        let result = &response["result"];
        assert_eq!(
            result["isError"],
            json!(true),
            "{tool}({arguments}) should fail: {response}"
        );
        check_text_matches(result);
        result["structuredContent"].clone()
    }

    pub fn calls(&self) -> Vec<Value> {
        read_jsonl(&self.dir.join("calls.jsonl"))
    }
}

pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn check_text_matches(result: &Value) {
    let text = result["content"][0]["text"].as_str().expect("text content");
    let parsed: Value = serde_json::from_str(text).expect("text content is JSON");
    assert_eq!(
        parsed, result["structuredContent"],
        "text and structuredContent differ"
    );
}

/// The first error message's code in a UCP error response or checkout.
pub fn code(structured: &Value) -> String {
    structured["messages"][0]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn line(id: &str, qty: u64) -> Value {
    json!({"item": {"id": id}, "quantity": qty})
}

pub fn instrument(token: &str) -> Value {
    json!({"id": "pi_1", "handler_id": "fixture_test_handler", "type": "card",
           "credential": {"type": "token", "token": token}})
}

pub fn complete_args(key: &str, checkout_id: &str, token: &str) -> Value {
    json!({"meta": meta_key(key), "id": checkout_id,
           "checkout": {"payment": {"instruments": [instrument(token)]}}})
}

pub const SOCKS: &str = "gid://fixture/Product/trail-socks";
pub const TEA_SET: &str = "gid://fixture/Product/tea-set";
pub const BOTTLE: &str = "gid://fixture/Product/water-bottle";

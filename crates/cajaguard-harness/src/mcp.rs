//! An MCP client over a child's stdio (newline-delimited JSON-RPC): requests, notifications,
//! pipelined answers, and the UCP calls the tests and the report make most.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use serde_json::{Value, json};

use crate::ucp::{complete_args, line_items, meta, test_instrument, total_of, update_args, uuid};

/// Longer than any call takes on a loaded 2-core machine (shop timeouts are 1-30 s).
const ANSWER_DEADLINE: Duration = Duration::from_secs(120);

pub struct Mcp {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    next_id: u64,
}

impl Mcp {
    /// Starts `command` (an MCP server: `cajaguard mcp`, or a shop) with piped stdin and stdout,
    /// before any message. Its stderr is as `command` says (inherited unless set).
    pub fn spawn(mut command: Command) -> Mcp {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the MCP server: {e}"));
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        // Lines arrive on a thread so that a missing answer fails the caller instead of hanging.
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
        Mcp {
            child,
            stdin,
            lines,
            next_id: 0,
        }
    }

    /// `command` started and past the legacy handshake, as most agents open.
    pub fn initialized(command: Command) -> Mcp {
        let mut mcp = Mcp::spawn(command);
        mcp.initialize();
        mcp
    }

    /// `initialize`, then `notifications/initialized`.
    pub fn initialize(&mut self) {
        let init = self.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}),
        );
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        self.notify("notifications/initialized", json!({}));
    }

    pub fn send_line(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// SIGKILL, as a crash would: nothing is flushed, nothing is settled.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a request without waiting for its answer; returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send_line(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        id
    }

    /// Waits for the answer to request `id` (skipping other messages).
    pub fn answer_to(&mut self, id: u64) -> Value {
        loop {
            let message = self.read_message();
            if message.get("id") == Some(&json!(id)) {
                return message;
            }
        }
    }

    /// The answers to several pipelined requests, in the order of `ids`, whatever order they come
    /// in (skipping other messages).
    pub fn answers_to(&mut self, ids: &[u64]) -> Vec<Value> {
        let mut found: Vec<Option<Value>> = vec![None; ids.len()];
        while found.iter().any(Option::is_none) {
            let message = self.read_message();
            if let Some(i) = ids
                .iter()
                .position(|id| message.get("id") == Some(&json!(id)))
            {
                found[i] = Some(message);
            }
        }
        found.into_iter().flatten().collect()
    }

    pub fn read_message(&mut self) -> Value {
        let line = match self.lines.recv_timeout(ANSWER_DEADLINE) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("the server sent nothing for {ANSWER_DEADLINE:?}: a request went unanswered")
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the server closed its output"),
        };
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not JSON from the server ({e}): {line}"))
    }

    /// Sends a request and returns the response with its id (skipping notifications).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.answer_to(id)
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send_line(&json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string());
    }

    /// `tools/call`; returns the result object (panics on a JSON-RPC error).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("{tool} answered with a JSON-RPC error: {response}"),
        }
    }

    pub fn tool_names(&mut self) -> Vec<String> {
        let response = self.request("tools/list", json!({}));
        response["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Creates a checkout for `quantity` x the product with this fixture slug; returns its id.
    pub fn create_checkout(&mut self, slug: &str, quantity: u64) -> String {
        self.create_priced(slug, quantity).0
    }

    /// Creates a checkout for `quantity` x the fixture product `slug`: its id and the shop's total.
    pub fn create_priced(&mut self, slug: &str, quantity: u64) -> (String, String) {
        let result = self.call(
            "create_checkout",
            json!({ "meta": meta(), "checkout": { "line_items": line_items(slug, quantity) } }),
        );
        assert_ne!(
            result["isError"],
            json!(true),
            "create_checkout failed: {result}"
        );
        let id = result["structuredContent"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("create_checkout answered without an id: {result}"))
            .to_owned();
        (id, total_of(&result["structuredContent"]))
    }

    /// Replaces the checkout's line items (the basket changes); the shop's new total.
    pub fn set_quantity(&mut self, checkout_id: &str, slug: &str, quantity: u64) -> String {
        let result = self.call("update_checkout", update_args(checkout_id, slug, quantity));
        assert_ne!(
            result["isError"],
            json!(true),
            "update_checkout failed: {result}"
        );
        total_of(&result["structuredContent"])
    }

    /// The arguments of `complete_checkout` with the test instrument.
    pub fn complete_arguments(checkout_id: &str, key: &str) -> Value {
        complete_args(checkout_id, test_instrument(), key, json!({}))
    }

    /// `complete_checkout` with one instrument; `extra` is merged into `checkout`.
    pub fn complete(
        &mut self,
        checkout_id: &str,
        instrument: Value,
        key: &str,
        extra: Value,
    ) -> Value {
        self.call(
            "complete_checkout",
            complete_args(checkout_id, instrument, key, extra),
        )
    }

    /// Pays with the test instrument under a fresh idempotency key.
    pub fn pay(&mut self, checkout_id: &str) -> Value {
        self.complete(checkout_id, test_instrument(), &uuid(), json!({}))
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

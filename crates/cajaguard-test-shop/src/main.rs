//! `cajaguard-test-shop --script FILE --record FILE`: an MCP server on stdio that does exactly what
//! its script says, including what no good shop does (floats, hangs, crashes, huge or broken
//! answers). CajaGuard's tests put it behind the proxy to check fidelity and failure handling.
//! It speaks raw JSON-RPC on purpose: an SDK would refuse to send most of what it must send.
//!
//! The script is JSON:
//! ```json
//! { "tools": [ {..raw tool..} ],            // default: the 13 UCP tools and `admin_refund`
//!   "initialize": "ok" | "refuse" | "hang",  // default "ok"
//!   "on": { "<tool>": [ action, ... ] } }    // consumed in order; the last one repeats
//! ```
//! An action is one of `{"result": {...}}` (a tools/call result object, sent as written),
//! `{"checkout": {...}}` (a result with this checkout as structuredContent and text),
//! `{"error": {...}}` (a JSON-RPC error object), `{"hang": true}`, `{"exit": N}`,
//! `{"raw": "..."}` (a line sent as is, with the request's id nowhere), `{"bare": true}` (an
//! answer with the request's id but neither result nor error), `{"huge": BYTES}` (a result
//! with a text part of that size), and any of them may carry `"progress": N` to send N progress
//! notifications first (for the request's `_meta.progressToken`) and `"delay_ms": N` to wait first.
//! A `checkout` action with `"echo_id": true` answers with the call's `arguments.id` as the
//! checkout's `id` (one script then serves any number of checkouts, as the report's throughput run
//! needs).
//!
//! A stateful shop, for crash tests, keeps which checkouts it completed in the directory
//! `"state"` names (one file per checkout, so several shop processes may share it):
//! `{"stateful_get": true}` answers `get_checkout` with the first `"checkouts"` template whose key
//! prefixes the requested id (with that id), `completed` with an `order` once completed;
//! `{"stateful_complete": true, "after_ms": N}` records the completion (the first idempotency key
//! wins; another key is refused as already completed), waits `after_ms`, then answers it.
//! Every line received is appended to the record file before it is handled.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::process::ExitCode;

use serde_json::{Value, json};

const UCP_TOOLS: &[&str] = &[
    "create_checkout",
    "get_checkout",
    "update_checkout",
    "complete_checkout",
    "cancel_checkout",
    "create_cart",
    "get_cart",
    "update_cart",
    "cancel_cart",
    "search_catalog",
    "lookup_catalog",
    "get_product",
    "get_order",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let (Some(script), Some(record)) = (flag("--script"), flag("--record")) else {
        eprintln!("usage: cajaguard-test-shop --script FILE --record FILE");
        return ExitCode::from(2);
    };
    let script: Value = match std::fs::read_to_string(&script).map(|t| serde_json::from_str(&t)) {
        Ok(Ok(script)) => script,
        _ => {
            eprintln!("cajaguard-test-shop: cannot read the script {script}");
            return ExitCode::from(2);
        }
    };
    let Ok(mut record) = OpenOptions::new().create(true).append(true).open(&record) else {
        eprintln!("cajaguard-test-shop: cannot open the record {record}");
        return ExitCode::from(2);
    };
    let mut shop = Shop {
        script,
        served: HashMap::new(),
        out: std::io::stdout(),
    };
    for line in BufReader::new(std::io::stdin()).lines() {
        let Ok(line) = line else { break };
        let _ = writeln!(record, "{line}");
        let _ = record.flush();
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Some(code) = shop.handle(&message) {
            return ExitCode::from(code);
        }
    }
    ExitCode::SUCCESS
}

struct Shop {
    script: Value,
    served: HashMap<String, usize>,
    out: std::io::Stdout,
}

impl Shop {
    fn send(&mut self, message: &Value) {
        self.send_line(&message.to_string());
    }

    fn send_line(&mut self, line: &str) {
        let mut out = self.out.lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    /// `Some(code)` when the script says to exit.
    fn handle(&mut self, message: &Value) -> Option<u8> {
        let (Some(id), Some(method)) = (
            message.get("id"),
            message.get("method").and_then(Value::as_str),
        ) else {
            return None;
        };
        let id = id.clone();
        match method {
            "initialize" => match self.script["initialize"].as_str().unwrap_or("ok") {
                "refuse" => self.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600, "message": "no"}})),
                "hang" => {}
                _ => self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": message["params"]["protocolVersion"].clone(),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "test-shop", "version": "0"}}})),
            },
            "tools/list" => {
                let tools = match self.script.get("tools") {
                    Some(tools) => tools.clone(),
                    None => default_tools(),
                };
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}}));
            }
            "tools/call" => {
                let tool = message["params"]["name"].as_str().unwrap_or("").to_owned();
                let token = message["params"]["_meta"]["progressToken"].clone();
                let mut action = self.next_action(&tool);
                if action["echo_id"] == json!(true)
                    && let (Some(checkout), Some(asked)) = (
                        action.get_mut("checkout").and_then(Value::as_object_mut),
                        message["params"]["arguments"].get("id"),
                    )
                {
                    checkout.insert("id".to_owned(), asked.clone());
                }
                let arguments = message["params"]["arguments"].clone();
                return self.act(&id, &tool, &token, &action, &arguments);
            }
            "ping" => self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {}})),
            _ => self.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "unknown method"}})),
        }
        None
    }

    fn next_action(&mut self, tool: &str) -> Value {
        let actions = self.script["on"][tool]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let n = self.served.entry(tool.to_owned()).or_insert(0);
        let action = actions.get(*n).or(actions.last()).cloned();
        *n += 1;
        action.unwrap_or_else(|| json!({"result": {"content": [{"type": "text", "text": "ok"}]}}))
    }

    fn act(
        &mut self,
        id: &Value,
        tool: &str,
        token: &Value,
        action: &Value,
        arguments: &Value,
    ) -> Option<u8> {
        if let Some(ms) = action.get("delay_ms").and_then(Value::as_u64) {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        for i in 0..action["progress"].as_u64().unwrap_or(0) {
            self.send(&json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": i + 1, "message": format!("{tool} step {}", i + 1)}}));
        }
        if let Some(result) = action.get("result") {
            self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
        } else if let Some(checkout) = action.get("checkout") {
            let result = json!({"content": [{"type": "text", "text": checkout.to_string()}], "structuredContent": checkout});
            self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
        } else if let Some(error) = action.get("error") {
            self.send(&json!({"jsonrpc": "2.0", "id": id, "error": error}));
        } else if let Some(raw) = action.get("raw").and_then(Value::as_str) {
            self.send_line(raw);
        } else if action.get("bare").is_some() {
            // An answer to the request with neither `result` nor `error`.
            self.send(&json!({"jsonrpc": "2.0", "id": id}));
        } else if let Some(bytes) = action.get("huge").and_then(Value::as_u64) {
            let text = "x".repeat(usize::try_from(bytes).unwrap_or(0));
            self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}}));
        } else if action.get("stateful_get").is_some() {
            let answer = self.stateful_checkout(arguments["id"].as_str().unwrap_or(""));
            self.send_checkout(id, answer);
        } else if action.get("stateful_complete").is_some() {
            let answer = self.stateful_complete(arguments);
            if let Some(ms) = action.get("after_ms").and_then(Value::as_u64) {
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            match answer {
                Ok(checkout) => self.send_checkout(id, checkout),
                Err(message) => self.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": message}})),
            }
        } else if let Some(code) = action.get("exit").and_then(Value::as_u64) {
            return Some(u8::try_from(code).unwrap_or(1));
        }
        // `hang`: answer nothing.
        None
    }
}

impl Shop {
    fn send_checkout(&mut self, id: &Value, checkout: Value) {
        let result = json!({"content": [{"type": "text", "text": checkout.to_string()}], "structuredContent": checkout});
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    fn state_file(&self, checkout_id: &str) -> Option<std::path::PathBuf> {
        let dir = self.script["state"].as_str()?;
        let name: String = checkout_id.bytes().map(|b| format!("{b:02x}")).collect();
        Some(std::path::Path::new(dir).join(name))
    }

    /// The template for `checkout_id`, open, or completed (with its order) if the state says so.
    fn stateful_checkout(&self, checkout_id: &str) -> Value {
        let template = self.script["checkouts"]
            .as_object()
            .and_then(|t| {
                t.iter()
                    .find(|(prefix, _)| checkout_id.starts_with(prefix.as_str()))
            })
            .map(|(_, c)| c.clone());
        let Some(mut checkout) = template else {
            return json!({"ucp": {"version": "2026-08-25", "status": "error"},
                          "messages": [{"type": "error", "code": "not_found", "content": "no such checkout"}]});
        };
        checkout["id"] = json!(checkout_id);
        let completed = self
            .state_file(checkout_id)
            .and_then(|f| std::fs::read_to_string(f).ok());
        if completed.is_some() {
            checkout["status"] = json!("completed");
            checkout["order"] = json!({"id": format!("{checkout_id}/order"), "permalink_url": "https://shop.example/orders/1"});
        }
        checkout
    }

    /// Records the completion durably before answering: a shop killed after this line has charged.
    fn stateful_complete(&self, arguments: &Value) -> Result<Value, String> {
        let checkout_id = arguments["id"].as_str().unwrap_or("");
        let key = arguments["meta"]["idempotency-key"].as_str().unwrap_or("");
        let checkout = self.stateful_checkout(checkout_id);
        if checkout.get("status").and_then(Value::as_str) != Some("ready_for_complete")
            && checkout.get("status").and_then(Value::as_str) != Some("completed")
        {
            return Err("not found".into());
        }
        let Some(file) = self.state_file(checkout_id) else {
            return Err("the script has no state directory".into());
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)
        {
            Ok(mut f) => {
                let _ = f.write_all(key.as_bytes());
                let _ = f.sync_all();
            }
            Err(_) => {
                // Already completed: the same key gets the same answer, another key a refusal.
                if std::fs::read_to_string(&file).ok().as_deref() != Some(key) {
                    return Err("checkout already completed".into());
                }
            }
        }
        Ok(self.stateful_checkout(checkout_id))
    }
}

fn default_tools() -> Value {
    let mut tools: Vec<Value> = UCP_TOOLS
        .iter()
        .map(|name| json!({"name": name, "description": format!("UCP {name}"), "inputSchema": {"type": "object"}}))
        .collect();
    tools.push(json!({"name": "admin_refund", "description": "not a UCP tool", "inputSchema": {"type": "object"}}));
    Value::Array(tools)
}

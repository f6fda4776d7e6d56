//! A keyless world for the report: a fresh directory with a config, an approver key made by
//! `cajaguard keygen`, a shop (the fixture, or the scriptable test shop), `cajaguard mcp` as a real
//! child process, and the shop's own record of the calls it received. Errors are returned, never
//! unwrapped: a broken world makes its scenario fail, not the report crash.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

pub const AGENT: &str = "https://agent.example/profiles/report.json";
pub const TEST_TOKEN: &str = "cg_test_report_token_01";
pub const TEST_HANDLER: &str = "fixture_test_handler";

/// The binaries the report drives, from one build profile.
#[derive(Debug, Clone)]
pub struct Bins {
    pub cajaguard: PathBuf,
    pub fixture: PathBuf,
    pub test_shop: PathBuf,
}

#[derive(Debug, Clone)]
pub enum Shop {
    /// The fixture shop (`--state <dir>/shop`); its record is `<dir>/shop/calls.jsonl`.
    Fixture,
    /// The scriptable test shop (`--script <dir>/shop-script.json --record <dir>/shop-record.jsonl`).
    Test(Value),
}

#[derive(Debug, Clone)]
pub struct Options {
    pub mode: &'static str,
    pub caps: Value,
    pub merchants: Vec<&'static str>,
    pub timeout_seconds: u64,
    pub shop: Shop,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            mode: "test",
            caps: json!({
                "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" },
                "JPY": { "approval_above": "5000", "per_transaction": "12000", "window": "20000" }
            }),
            merchants: vec!["demo-outfitters.example", "tokyo-tea.example"],
            timeout_seconds: 10,
            shop: Shop::Fixture,
        }
    }
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub bins: Bins,
    pub config: PathBuf,
    pub home: PathBuf,
    pub key_dir: PathBuf,
    shop: Shop,
}

impl World {
    /// A fresh world under `scratch` (on the disk whose costs the report measures).
    pub fn new(bins: &Bins, scratch: &Path, options: Options) -> Result<World> {
        let dir = tempfile::Builder::new()
            .prefix("world-")
            .tempdir_in(scratch)
            .with_context(|| format!("cannot create a world under {}", scratch.display()))?;
        let root = dir.path().to_path_buf();
        let key_dir = root.join("keys");
        let out = Command::new(&bins.cajaguard)
            .args(["keygen", "--out"])
            .arg(&key_dir)
            .env_remove("CAJAGUARD_KEY_DIR")
            .env("HOME", &root)
            .env("XDG_CONFIG_HOME", root.join("xdg"))
            .output()
            .context("cannot run cajaguard keygen")?;
        if !out.status.success() {
            bail!("keygen failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let (command, args) = match &options.shop {
            Shop::Fixture => (&bins.fixture, json!(["--state", root.join("shop")])),
            Shop::Test(script) => {
                std::fs::write(root.join("shop-script.json"), script.to_string())?;
                (
                    &bins.test_shop,
                    json!([
                        "--script",
                        root.join("shop-script.json"),
                        "--record",
                        root.join("shop-record.jsonl")
                    ]),
                )
            }
        };
        let document = json!({
            "mode": options.mode,
            "home": "home",
            "downstream": { "command": command, "args": args, "timeout_seconds": options.timeout_seconds },
            "merchants": options.merchants,
            "caps": options.caps,
            "window_hours": 24,
            "approvals": { "trusted_keys": ["keys/approver.pub.pem"], "max_ttl_minutes": 15 },
            "test_mode": { "handler_ids": [TEST_HANDLER], "token_pattern": "^cg_test_[A-Za-z0-9_]{8,}$" },
        });
        let config = root.join("cajaguard.json");
        std::fs::write(&config, serde_json::to_string_pretty(&document)?)?;
        Ok(World {
            home: root.join("home"),
            key_dir,
            config,
            bins: bins.clone(),
            shop: options.shop,
            dir,
        })
    }

    /// `cajaguard mcp --config FILE` as a child process, initialized.
    pub fn proxy(&self) -> Result<Mcp> {
        let mut command = Command::new(&self.bins.cajaguard);
        command
            .args(["mcp", "--config"])
            .arg(&self.config)
            .env("HOME", self.dir.path());
        let mut mcp = Mcp::spawn(command)?;
        mcp.initialize()?;
        Ok(mcp)
    }

    /// Runs `cajaguard ARGS --config FILE` with the world's key dir.
    pub fn cli(&self, args: &[&str]) -> Result<Output> {
        Command::new(&self.bins.cajaguard)
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .env("CAJAGUARD_KEY_DIR", &self.key_dir)
            .env("HOME", self.dir.path())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run cajaguard {}", args.join(" ")))
    }

    /// `cajaguard status --json`: the same document as the `cajaguard_status` tool.
    pub fn status(&self) -> Result<Value> {
        let out = self.cli(&["status", "--json"])?;
        if !out.status.success() {
            bail!("status failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        serde_json::from_slice(&out.stdout).context("status --json printed no JSON")
    }

    /// `(spent_minor, in_flight_minor)` in `currency`, from `cajaguard status --json`.
    pub fn spend(&self, currency: &str) -> Result<(i64, i64)> {
        let status = self.status()?;
        let caps = &status["caps"][currency];
        match (
            caps["spent_minor"].as_i64(),
            caps["in_flight_minor"].as_i64(),
        ) {
            (Some(spent), Some(in_flight)) => Ok((spent, in_flight)),
            _ => bail!("status has no {currency} spend: {status}"),
        }
    }

    /// Replaces the test shop's script (read by each test shop process when it starts).
    pub fn rewrite_script(&self, script: &Value) -> Result<()> {
        std::fs::write(self.dir.path().join("shop-script.json"), script.to_string())?;
        Ok(())
    }

    /// How many `complete_checkout` calls for this checkout reached the shop, by the shop's own
    /// record (`calls.jsonl` of the fixture; every line received, for the test shop).
    pub fn completes_reaching_shop(&self, checkout_id: &str) -> Result<usize> {
        let (path, tool, id): (PathBuf, &str, &str) = match self.shop {
            Shop::Fixture => (
                self.dir.path().join("shop").join("calls.jsonl"),
                "/tool",
                "/arguments/id",
            ),
            Shop::Test(_) => (
                self.dir.path().join("shop-record.jsonl"),
                "/params/name",
                "/params/arguments/id",
            ),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let mut n = 0;
        for line in text.lines() {
            let Ok(call) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if call.pointer(tool) == Some(&json!("complete_checkout"))
                && call.pointer(id) == Some(&json!(checkout_id))
            {
                n += 1;
            }
        }
        Ok(n)
    }
}

/// An MCP client over a child's stdio (newline-delimited JSON-RPC).
pub struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Mcp {
    pub fn spawn(mut command: Command) -> Result<Mcp> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start the MCP server")?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("the MCP server has no pipes");
        };
        Ok(Mcp {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            next_id: 0,
        })
    }

    pub fn initialize(&mut self) -> Result<()> {
        let init = self.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "cajaguard-report", "version": "0"}}),
        )?;
        if init.get("result").is_none() {
            bail!("initialize failed: {init}");
        }
        self.notify("notifications/initialized", json!({}))
    }

    fn send_line(&mut self, line: &str) -> Result<()> {
        self.stdin.write_all(line.as_bytes())?;
        self.stdin.write_all(b"\n")?;
        self.stdin.flush()?;
        Ok(())
    }

    /// Sends a request without waiting for its answer; returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> Result<u64> {
        self.next_id += 1;
        let id = self.next_id;
        self.send_line(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        )?;
        Ok(id)
    }

    /// Reads messages until the response with this id (skipping notifications).
    pub fn wait_response(&mut self, id: u64) -> Result<Value> {
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line)? == 0 {
                bail!("the MCP server closed its output");
            }
            let message: Value = serde_json::from_str(&line)
                .map_err(|e| anyhow!("not JSON from the MCP server ({e})"))?;
            if message.get("id") == Some(&json!(id)) {
                return Ok(message);
            }
        }
    }

    /// The responses to several pipelined requests, in the order of `ids`, whatever order they
    /// come in (skipping notifications).
    pub fn wait_responses(&mut self, ids: &[u64]) -> Result<Vec<Value>> {
        let mut found: Vec<Option<Value>> = vec![None; ids.len()];
        while found.iter().any(Option::is_none) {
            let mut line = String::new();
            if self.stdout.read_line(&mut line)? == 0 {
                bail!("the MCP server closed its output");
            }
            let message: Value = serde_json::from_str(&line)
                .map_err(|e| anyhow!("not JSON from the MCP server ({e})"))?;
            if let Some(i) = ids
                .iter()
                .position(|id| message.get("id") == Some(&json!(id)))
            {
                found[i] = Some(message);
            }
        }
        Ok(found.into_iter().flatten().collect())
    }

    pub fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.send_request(method, params)?;
        self.wait_response(id)
    }

    pub fn notify(&mut self, method: &str, params: Value) -> Result<()> {
        self.send_line(&json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string())
    }

    /// `tools/call`; the result object (a JSON-RPC error is an error here).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Result<Value> {
        let response = self.request("tools/call", json!({"name": tool, "arguments": arguments}))?;
        match response.get("result") {
            Some(result) => Ok(result.clone()),
            None => bail!("{tool} answered with a JSON-RPC error: {response}"),
        }
    }

    /// Creates a checkout for `quantity` x the fixture product `slug`: its id and total.
    pub fn create_checkout(&mut self, slug: &str, quantity: u64) -> Result<(String, String)> {
        let result = self.call(
            "create_checkout",
            json!({
                "meta": { "ucp-agent": { "profile": AGENT }, "idempotency-key": uuid()? },
                "checkout": { "line_items": [{ "item": { "id": format!("gid://fixture/Product/{slug}") }, "quantity": quantity }] },
            }),
        )?;
        if result["isError"] == json!(true) {
            bail!("create_checkout {slug} failed");
        }
        let id = result["structuredContent"]["id"]
            .as_str()
            .ok_or_else(|| anyhow!("create_checkout answered without an id"))?
            .to_owned();
        Ok((id, total_of(&result["structuredContent"])))
    }

    /// Replaces the checkout's line items; the new total.
    pub fn set_quantity(&mut self, checkout_id: &str, slug: &str, quantity: u64) -> Result<String> {
        let result = self.call(
            "update_checkout",
            json!({
                "meta": { "ucp-agent": { "profile": AGENT }, "idempotency-key": uuid()? },
                "id": checkout_id,
                "checkout": { "line_items": [{ "item": { "id": format!("gid://fixture/Product/{slug}") }, "quantity": quantity }] },
            }),
        )?;
        if result["isError"] == json!(true) {
            bail!("update_checkout failed");
        }
        Ok(total_of(&result["structuredContent"]))
    }

    /// `complete_checkout` arguments with one instrument; `extra` is merged into `checkout`.
    pub fn complete_args(checkout_id: &str, instrument: Value, key: &str, extra: Value) -> Value {
        let mut checkout = json!({ "payment": { "instruments": [instrument] } });
        if let (Some(target), Some(extra)) = (checkout.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                target.insert(k.clone(), v.clone());
            }
        }
        json!({
            "meta": { "ucp-agent": { "profile": AGENT }, "idempotency-key": key },
            "id": checkout_id,
            "checkout": checkout,
        })
    }

    pub fn complete(
        &mut self,
        checkout_id: &str,
        instrument: Value,
        key: &str,
        extra: Value,
    ) -> Result<Value> {
        self.call(
            "complete_checkout",
            Mcp::complete_args(checkout_id, instrument, key, extra),
        )
    }

    /// Pays with the test handler and token under a fresh idempotency key.
    pub fn pay(&mut self, checkout_id: &str) -> Result<Value> {
        self.complete(
            checkout_id,
            instrument(TEST_HANDLER, TEST_TOKEN),
            &uuid()?,
            json!({}),
        )
    }

    /// SIGKILL, no goodbye (the report's crash scenario).
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn instrument(handler: &str, token: &str) -> Value {
    json!({ "id": "pi_1", "handler_id": handler, "type": "card", "credential": { "type": "token", "token": token } })
}

/// A random v4-shaped UUID for idempotency keys.
pub fn uuid() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| anyhow!("no randomness: {e}"))?;
    let h = hex::encode(bytes);
    Ok(format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    ))
}

/// `(verdict, reason, request_id)` of a complete_checkout result: `structuredContent.cajaguard`
/// when refused (or forwarded without an answer), `_meta.cajaguard` when the shop answered.
pub fn verdict(result: &Value) -> (String, String, Option<String>) {
    let gate = match result["structuredContent"].get("cajaguard") {
        Some(gate) => gate,
        None => &result["_meta"]["cajaguard"],
    };
    let text = |v: &Value| v.as_str().unwrap_or("(none)").to_owned();
    (
        text(&gate["verdict"]),
        text(&gate["reason"]),
        gate["request_id"].as_str().map(str::to_owned),
    )
}

/// `USD 24.00` from a UCP checkout's currency and `total` entry (`-` when it is not minor units).
pub fn total_of(checkout: &Value) -> String {
    let currency = checkout["currency"].as_str().unwrap_or("?");
    let total = checkout["totals"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["type"] == "total")
        .and_then(|t| t["amount"].as_i64());
    match total {
        Some(minor) => money(currency, minor),
        None => "-".to_owned(),
    }
}

/// Minor units in major units for the two currencies the fixture sells in.
pub fn money(currency: &str, minor: i64) -> String {
    match currency {
        "JPY" => format!("JPY {minor}"),
        _ => format!(
            "{currency} {}.{:02}",
            minor.div_euclid(100),
            minor.rem_euclid(100)
        ),
    }
}

/// A ready checkout as a good shop reports it (for the test shop; `id` is echoed per call).
pub fn shop_checkout(title: &str, price: i64, quantity: i64, status: &str) -> Value {
    let total = price * quantity;
    json!({
        "ucp": { "version": "2026-08-25", "status": "success" },
        "id": "gid://fixture/Checkout/echo",
        "status": status,
        "currency": "USD",
        "line_items": [{ "id": "li_1", "item": { "id": format!("gid://fixture/Product/{title}"), "title": title, "price": price }, "quantity": quantity,
                         "totals": [{ "type": "subtotal", "amount": total }, { "type": "total", "amount": total }] }],
        "totals": [{ "type": "subtotal", "amount": total }, { "type": "total", "amount": total }],
        "links": [{ "type": "terms_of_service", "url": "https://demo-outfitters.example/policies/terms" }],
        "continue_url": "https://demo-outfitters.example/checkouts/echo",
    })
}

/// A test shop script: `get_checkout` answers `ready` (any id), `complete_checkout` runs `completes`
/// in order (the last repeats).
pub fn test_shop_script(ready: &Value, completes: Vec<Value>) -> Value {
    json!({ "on": {
        "get_checkout": [{ "checkout": ready, "echo_id": true }],
        "complete_checkout": completes,
    }})
}

/// A `complete_checkout` action that answers the checkout as completed.
pub fn completed(ready: &Value) -> Value {
    let mut done = ready.clone();
    done["status"] = json!("completed");
    json!({ "checkout": done, "echo_id": true })
}

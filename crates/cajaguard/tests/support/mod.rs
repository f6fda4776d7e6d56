//! A keyless world for end-to-end tests: a fresh temp dir with a config, an approver key made by
//! `cajaguard keygen`, the real fixture shop behind a real `cajaguard mcp` child process, and the
//! shop's own record of every call it received. The fixture is reached over stdio (a child of the
//! proxy) or over MCP Streamable HTTP (a server the world starts on a free loopback port, with a
//! bearer token), as [`Transport`] says.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};

use serde_json::{Value, json};

pub const AGENT: &str = "https://agent.example/profiles/test.json";
pub const TEST_TOKEN: &str = "cg_test_e2e_token_01";
pub const TEST_HANDLER: &str = "fixture_test_handler";

pub fn cajaguard_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cajaguard"))
}

/// The fixture is another package's binary: `cargo test --workspace` builds it before any test
/// runs; `cargo test -p cajaguard` does not, so it is built here once if missing.
pub fn fixture_bin() -> PathBuf {
    sibling_bin("cajaguard-fixture-shop")
}

/// A binary of another workspace package, beside `cajaguard` in the same target folder.
fn sibling_bin(package: &str) -> PathBuf {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let path = cajaguard_bin().with_file_name(package);
    let _guard = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "-p", package, "--bin", package]);
        if cajaguard_bin()
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == "release")
        {
            build.arg("--release");
        }
        let status = build.status().unwrap();
        assert!(
            status.success() && path.is_file(),
            "cannot build {package}: run `cargo build --workspace` first"
        );
    }
    path
}

/// The demo agent (`crates/cajaguard-demo`), found like the fixture.
#[allow(dead_code)]
pub fn demo_bin() -> PathBuf {
    sibling_bin("cajaguard-demo")
}

/// The scriptable misbehaving shop (`crates/cajaguard-test-shop`), found like the fixture.
pub fn test_shop_bin() -> PathBuf {
    sibling_bin("cajaguard-test-shop")
}

/// A checkout as a well-behaved shop reports it (2 x Trail socks, USD 24.00, ready).
pub fn ready_checkout(id: &str) -> Value {
    json!({
        "ucp": { "version": "2026-08-25", "status": "success" },
        "id": id,
        "status": "ready_for_complete",
        "currency": "USD",
        "line_items": [{ "id": "li_1", "item": { "id": "gid://fixture/Product/trail-socks", "title": "Trail socks", "price": 1200 }, "quantity": 2,
                         "totals": [{ "type": "subtotal", "amount": 2400 }, { "type": "total", "amount": 2400 }] }],
        "totals": [{ "type": "subtotal", "amount": 2400 }, { "type": "total", "amount": 2400 }],
        "links": [{ "type": "terms_of_service", "url": "https://demo-outfitters.example/policies/terms" }],
        "continue_url": "https://demo-outfitters.example/checkouts/1",
    })
}

/// The environment variable the HTTP world's config names for the shop's bearer token.
pub const TOKEN_VAR: &str = "CG_E2E_SHOP_TOKEN";
/// The fixture's bearer token in the HTTP world (a test value, not a secret).
pub const SHOP_TOKEN: &str = "cg-e2e-bearer-7f3a9c";

/// How the proxy reaches the fixture shop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    Http,
}

/// The fixture shop serving MCP Streamable HTTP on a loopback port, killed on drop.
pub struct FixtureServer {
    child: Option<Child>,
    pub addr: String,
    state: PathBuf,
    port_file: PathBuf,
}

impl FixtureServer {
    /// Starts the fixture on `listen` (`127.0.0.1:0` for any free port) and waits until it listens.
    pub fn start(state: &Path, port_file: &Path, listen: &str) -> FixtureServer {
        FixtureServer::start_or_exit(state, port_file, listen)
            .unwrap_or_else(|| panic!("the fixture could not listen on {listen}"))
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Stops the server (its sessions are lost, like a shop restarting).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server and starts a new one on the same address: old session ids are unknown to it.
    pub fn restart(&mut self) {
        self.stop();
        let addr = self.addr.clone();
        // The port was just freed; a retry covers the short moment before the OS lets go of it.
        for _ in 0..50 {
            let next = FixtureServer::start_or_exit(&self.state, &self.port_file, &addr);
            if let Some(next) = next {
                *self = next;
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the fixture could not listen on {addr} again");
    }

    fn start_or_exit(state: &Path, port_file: &Path, listen: &str) -> Option<FixtureServer> {
        let _ = std::fs::remove_file(port_file);
        let mut child = Command::new(fixture_bin())
            .arg("--state")
            .arg(state)
            .args([
                "--listen",
                listen,
                "--bearer-token-env",
                TOKEN_VAR,
                "--port-file",
            ])
            .arg(port_file)
            .env(TOKEN_VAR, SHOP_TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if let Ok(addr) = std::fs::read_to_string(port_file) {
                return Some(FixtureServer {
                    child: Some(child),
                    addr,
                    state: state.to_path_buf(),
                    port_file: port_file.to_path_buf(),
                });
            }
            if let Ok(Some(_)) = child.try_wait() {
                return None;
            }
            assert!(std::time::Instant::now() < deadline, "the fixture hung");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        self.stop();
    }
}

pub struct World {
    /// Declared before `dir` so the server stops before its state directory is removed.
    pub fixture: Option<FixtureServer>,
    pub transport: Transport,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub home: PathBuf,
    pub shop_state: PathBuf,
    pub key_dir: PathBuf,
    /// The config as written, for [`World::host`].
    document: Value,
}

/// Another host's CajaGuard in the same world: its own config and home, the same shop, keys and
/// (through `store`) a shared database.
pub struct Host {
    pub config: PathBuf,
    pub home: PathBuf,
    dir: PathBuf,
    key_dir: PathBuf,
    env: Vec<(String, String)>,
}

pub struct Options {
    pub mode: &'static str,
    pub caps: Value,
    pub merchants: Vec<&'static str>,
    pub max_ttl_minutes: u64,
    pub timeout_seconds: u64,
    pub transport: Transport,
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
            max_ttl_minutes: 15,
            timeout_seconds: 10,
            transport: Transport::Stdio,
        }
    }
}

impl World {
    pub fn new() -> World {
        World::with(Options::default())
    }

    /// A default world whose fixture is reached over `transport`.
    pub fn on(transport: Transport) -> World {
        World::with(Options {
            transport,
            ..Options::default()
        })
    }

    pub fn with(options: Options) -> World {
        World::build(options, None)
    }

    /// A world whose shop is the scripted test shop (see `crates/cajaguard-test-shop`).
    pub fn with_test_shop(script: Value) -> World {
        World::build(Options::default(), Some(script))
    }

    /// A world with these options whose shop is the scripted test shop.
    pub fn with_options_and_test_shop(options: Options, script: Value) -> World {
        World::build(options, Some(script))
    }

    /// Replaces the test shop's script; shops started from now on (each proxy starts its own) read it.
    pub fn set_test_shop_script(&self, script: &Value) {
        std::fs::write(self.dir.path().join("shop-script.json"), script.to_string()).unwrap();
    }

    /// A test-shop world with a 1 s shop timeout, so an unanswered payment is stale (releasable)
    /// after 2 s.
    pub fn fast_test_shop(script: Value) -> World {
        World::with_options_and_test_shop(
            Options {
                timeout_seconds: 1,
                ..Options::default()
            },
            script,
        )
    }

    /// Every line the test shop received, in order.
    pub fn test_shop_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("shop-record.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn build(options: Options, test_shop: Option<Value>) -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let key_dir = root.join("keys");
        let status = Command::new(cajaguard_bin())
            .args(["keygen", "--out"])
            .arg(&key_dir)
            .env_remove("CAJAGUARD_KEY_DIR")
            .env("HOME", &root)
            .env("XDG_CONFIG_HOME", root.join("xdg"))
            .output()
            .unwrap();
        assert!(
            status.status.success(),
            "keygen failed: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        let config = root.join("cajaguard.json");
        let mut merchants = options.merchants.clone();
        let mut fixture = None;
        let downstream = match (test_shop, options.transport) {
            (None, Transport::Stdio) => json!({
                "command": fixture_bin(),
                "args": ["--state", root.join("shop")],
                "timeout_seconds": options.timeout_seconds,
            }),
            (None, Transport::Http) => {
                let server = FixtureServer::start(
                    &root.join("shop"),
                    &root.join("shop.addr"),
                    "127.0.0.1:0",
                );
                let url = server.url();
                fixture = Some(server);
                // An HTTP shop's own host must be a listed merchant (config rule, issue 7).
                merchants.push("127.0.0.1");
                json!({
                    "url": url,
                    "bearer_token_env": TOKEN_VAR,
                    "timeout_seconds": options.timeout_seconds,
                })
            }
            (Some(script), _) => {
                std::fs::write(root.join("shop-script.json"), script.to_string()).unwrap();
                json!({
                    "command": test_shop_bin(),
                    "args": [
                        "--script",
                        root.join("shop-script.json"),
                        "--record",
                        root.join("shop-record.jsonl")
                    ],
                    "timeout_seconds": options.timeout_seconds,
                })
            }
        };
        let document = json!({
            "mode": options.mode,
            "home": "home",
            "downstream": downstream,
            "merchants": merchants,
            "caps": options.caps,
            "window_hours": 24,
            "approvals": { "trusted_keys": ["keys/approver.pub.pem"], "max_ttl_minutes": options.max_ttl_minutes },
            "test_mode": { "handler_ids": [TEST_HANDLER], "token_pattern": "^cg_test_[A-Za-z0-9_]{8,}$" },
        });
        std::fs::write(&config, serde_json::to_string_pretty(&document).unwrap()).unwrap();
        World {
            fixture,
            transport: options.transport,
            home: root.join("home"),
            shop_state: root.join("shop"),
            key_dir,
            config,
            dir,
            document,
        }
    }

    /// Host `name`: a config `NAME.json` with its own home `NAME-home`, `store` set as given, and
    /// `env` for its processes (say, the variable `store.url_env` names).
    pub fn host(&self, name: &str, store: Value, env: &[(&str, &str)]) -> Host {
        let mut document = self.document.clone();
        document["home"] = json!(format!("{name}-home"));
        document["store"] = store;
        let config = self.dir.path().join(format!("{name}.json"));
        std::fs::write(&config, serde_json::to_string_pretty(&document).unwrap()).unwrap();
        Host {
            config,
            home: self.dir.path().join(format!("{name}-home")),
            dir: self.dir.path().to_path_buf(),
            key_dir: self.key_dir.clone(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    /// Rewrites the config's `downstream` (e.g. to point at a test HTTP server).
    pub fn set_downstream(&self, downstream: Value) {
        let mut document = read_json(&self.config);
        document["downstream"] = downstream;
        std::fs::write(
            &self.config,
            serde_json::to_string_pretty(&document).unwrap(),
        )
        .unwrap();
    }

    /// `cajaguard mcp --config FILE` ready to spawn, with the shop's token in its environment.
    pub fn mcp_command(&self) -> Command {
        let mut command = Command::new(cajaguard_bin());
        command
            .args(["mcp", "--config"])
            .arg(&self.config)
            .env("HOME", self.dir.path())
            .env(TOKEN_VAR, SHOP_TOKEN);
        command
    }

    /// `cajaguard mcp --config FILE` as a child process, initialized.
    pub fn proxy(&self) -> Mcp {
        initialized(self.proxy_uninitialized())
    }

    /// `cajaguard mcp --config FILE` before any message.
    pub fn proxy_uninitialized(&self) -> Mcp {
        spawn_uninitialized(self.mcp_command())
    }

    /// Runs `cajaguard ARGS --config FILE` with the world's key dir.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(cajaguard_bin())
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .env("CAJAGUARD_KEY_DIR", &self.key_dir)
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path().join(".config"))
            .env(TOKEN_VAR, SHOP_TOKEN)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Every call the shop received, in order: `(tool, arguments)`.
    pub fn shop_calls(&self) -> Vec<(String, Value)> {
        let Ok(text) = std::fs::read_to_string(self.shop_state.join("calls.jsonl")) else {
            return Vec::new();
        };
        text.lines()
            .map(|line| {
                let v: Value = serde_json::from_str(line).unwrap();
                (
                    v["tool"].as_str().unwrap().to_owned(),
                    v["arguments"].clone(),
                )
            })
            .collect()
    }

    /// How many `complete_checkout` calls for this checkout reached the shop.
    pub fn completes_reaching_shop(&self, checkout_id: &str) -> usize {
        self.shop_calls()
            .iter()
            .filter(|(tool, args)| tool == "complete_checkout" && args["id"] == checkout_id)
            .count()
    }

    pub fn approvals_dir(&self) -> PathBuf {
        self.home.join("approvals")
    }
}

/// `cajaguard mcp --config CONFIG` as a child process, past `initialize`.
/// Starts `command` (a `cajaguard mcp`) with piped stdio, before any message.
fn spawn_uninitialized(mut command: Command) -> Mcp {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    // Lines arrive on a thread so that a missing answer fails the test instead of hanging the run.
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

/// The legacy handshake, as most agents open.
fn initialized(mut mcp: Mcp) -> Mcp {
    let init = mcp.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}),
    );
    assert!(init.get("result").is_some(), "initialize failed: {init}");
    mcp.notify("notifications/initialized", json!({}));
    mcp
}

impl Host {
    /// `cajaguard mcp` for this host, initialized.
    pub fn proxy(&self) -> Mcp {
        initialized(self.proxy_uninitialized())
    }

    /// `cajaguard mcp` for this host, before any message.
    pub fn proxy_uninitialized(&self) -> Mcp {
        let mut command = Command::new(cajaguard_bin());
        command
            .args(["mcp", "--config"])
            .arg(&self.config)
            .env("HOME", &self.dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        spawn_uninitialized(command)
    }

    /// `cajaguard ARGS --config FILE` on this host, with the world's key dir.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(cajaguard_bin())
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .env("CAJAGUARD_KEY_DIR", &self.key_dir)
            .env("HOME", &self.dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

pub struct Mcp {
    child: Child,
    stdin: ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    next_id: u64,
}

/// Longer than any call in these tests takes on a loaded 2-core machine (timeouts are 1-10 s).
const ANSWER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

impl Mcp {
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

    /// The proxy's process id.
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

    pub fn read_message(&mut self) -> Value {
        let line = match self.lines.recv_timeout(ANSWER_DEADLINE) {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("the proxy sent nothing for {ANSWER_DEADLINE:?}: a request went unanswered")
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("the proxy closed its output")
            }
        };
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not JSON from the proxy ({e}): {line}"))
    }

    /// Sends a request and returns the response with its id (skipping notifications).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send_line(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        loop {
            let message = self.read_message();
            if message.get("id") == Some(&json!(id)) {
                return message;
            }
        }
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
        let result = self.call(
            "create_checkout",
            json!({
                "meta": { "ucp-agent": { "profile": AGENT }, "idempotency-key": uuid() },
                "checkout": { "line_items": [{ "item": { "id": format!("gid://fixture/Product/{slug}") }, "quantity": quantity }] },
            }),
        );
        assert_ne!(
            result["isError"],
            json!(true),
            "create_checkout failed: {result}"
        );
        result["structuredContent"]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Replaces the checkout's line items (the basket changes).
    pub fn set_quantity(&mut self, checkout_id: &str, slug: &str, quantity: u64) {
        let result = self.call(
            "update_checkout",
            json!({
                "meta": { "ucp-agent": { "profile": AGENT }, "idempotency-key": uuid() },
                "id": checkout_id,
                "checkout": { "line_items": [{ "item": { "id": format!("gid://fixture/Product/{slug}") }, "quantity": quantity }] },
            }),
        );
        assert_ne!(
            result["isError"],
            json!(true),
            "update_checkout failed: {result}"
        );
    }

    /// The arguments of `complete_checkout` with one test instrument.
    pub fn complete_arguments(checkout_id: &str, key: &str) -> Value {
        json!({
            "meta": { "ucp-agent": { "profile": AGENT }, "idempotency-key": key },
            "id": checkout_id,
            "checkout": { "payment": { "instruments": [instrument(TEST_HANDLER, TEST_TOKEN)] } },
        })
    }

    /// `complete_checkout` with one instrument; `extra` is merged into `checkout`.
    pub fn complete(
        &mut self,
        checkout_id: &str,
        instrument: Value,
        key: &str,
        extra: Value,
    ) -> Value {
        let mut checkout = json!({ "payment": { "instruments": [instrument] } });
        if let (Some(target), Some(extra)) = (checkout.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                target.insert(k.clone(), v.clone());
            }
        }
        self.call(
            "complete_checkout",
            json!({
                "meta": { "ucp-agent": { "profile": AGENT }, "idempotency-key": key },
                "id": checkout_id,
                "checkout": checkout,
            }),
        )
    }

    pub fn pay(&mut self, checkout_id: &str) -> Value {
        self.complete(
            checkout_id,
            instrument(TEST_HANDLER, TEST_TOKEN),
            &uuid(),
            json!({}),
        )
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

/// A random v4-shaped UUID (tests need unique idempotency keys, not cryptographic ones).
pub fn uuid() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    let h = hex::encode(bytes);
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// `(verdict, reason, request_id)` from a complete_checkout result: `_meta.cajaguard` when the
/// call went through, `structuredContent.cajaguard` when it was refused.
pub fn verdict(result: &Value) -> (String, String, Option<String>) {
    let gate = if result["structuredContent"].get("cajaguard").is_some() {
        &result["structuredContent"]["cajaguard"]
    } else {
        &result["_meta"]["cajaguard"]
    };
    (
        gate["verdict"]
            .as_str()
            .unwrap_or_else(|| panic!("no verdict in {result}"))
            .to_owned(),
        gate["reason"].as_str().unwrap_or("").to_owned(),
        gate["request_id"].as_str().map(str::to_owned),
    )
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `(settled, in flight)` in USD over the last day, as the store counts it.
pub fn usd_spend(world: &World) -> (i64, i64) {
    let store = cajaguard::store::Store::open(&world.home).unwrap();
    let usd = store
        .window_spend(
            std::time::Duration::from_secs(24 * 3600),
            time::OffsetDateTime::now_utc(),
        )
        .unwrap()
        .get("USD")
        .copied()
        .unwrap_or_default();
    (usd.settled, usd.in_flight)
}

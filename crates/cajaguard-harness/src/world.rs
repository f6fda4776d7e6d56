//! A keyless world: a fresh folder with a config, an approver key made by `cajaguard keygen`, a
//! shop (the real fixture, or the scriptable test shop), `cajaguard mcp` as a real child process,
//! and the shop's own record of every call it received. The fixture is reached over stdio (a child
//! of the proxy) or over MCP Streamable HTTP (a server the world starts on a free loopback port,
//! with a bearer token), as [`Transport`] says.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::bins::{cajaguard_bin, fixture_bin, test_shop_bin};
pub use crate::fixture_server::FixtureServer;
use crate::mcp::Mcp;
use crate::ucp::TEST_HANDLER;

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

pub struct World {
    /// Declared before `dir` so the server stops before its state directory is removed.
    pub fixture: Option<FixtureServer>,
    pub transport: Transport,
    /// Which shop the proxy starts (the fixture is the default).
    pub shop: Shop,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub home: PathBuf,
    pub shop_state: PathBuf,
    pub key_dir: PathBuf,
    /// The config as written, for [`World::host`].
    document: Value,
    /// Proxies and CLI runs get no stderr (the report's output is its own).
    quiet: bool,
}

/// The shop behind the proxy.
#[derive(Debug, Clone, PartialEq)]
pub enum Shop {
    /// The fixture shop (`--state <dir>/shop`); its record is `<dir>/shop/calls.jsonl`.
    Fixture,
    /// The scriptable test shop (`--script <dir>/shop-script.json --record <dir>/shop-record.jsonl`).
    Test(Value),
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

#[derive(Debug, Clone)]
pub struct Options {
    pub mode: &'static str,
    pub caps: Value,
    pub merchants: Vec<&'static str>,
    pub max_ttl_minutes: u64,
    pub timeout_seconds: u64,
    pub transport: Transport,
    pub shop: Shop,
    /// Where the world's folder goes (the system's temp folder when `None`); the report puts it
    /// on the disk whose costs it measures.
    pub scratch: Option<PathBuf>,
    /// Proxies and CLI runs get no stderr.
    pub quiet: bool,
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
            shop: Shop::Fixture,
            scratch: None,
            quiet: false,
        }
    }
}

impl World {
    /// A default world (no `Default`: making one runs keygen and writes files).
    #[allow(clippy::new_without_default)]
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

    /// A world whose shop is the scripted test shop (see `crates/cajaguard-test-shop`).
    pub fn with_test_shop(script: Value) -> World {
        World::with_options_and_test_shop(Options::default(), script)
    }

    /// A world with these options whose shop is the scripted test shop.
    pub fn with_options_and_test_shop(options: Options, script: Value) -> World {
        World::with(Options {
            shop: Shop::Test(script),
            ..options
        })
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

    pub fn with(options: Options) -> World {
        let dir = match &options.scratch {
            Some(scratch) => tempfile::Builder::new()
                .prefix("world-")
                .tempdir_in(scratch)
                .unwrap_or_else(|e| {
                    panic!("cannot create a world under {}: {e}", scratch.display())
                }),
            None => tempfile::tempdir().unwrap(),
        };
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
        let downstream = match (&options.shop, options.transport) {
            (Shop::Fixture, Transport::Stdio) => json!({
                "command": fixture_bin(),
                "args": ["--state", root.join("shop")],
                "timeout_seconds": options.timeout_seconds,
            }),
            (Shop::Fixture, Transport::Http) => {
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
            (Shop::Test(script), _) => {
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
            shop: options.shop,
            quiet: options.quiet,
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
        if self.quiet {
            command.stderr(Stdio::null());
        }
        command
    }

    /// `cajaguard mcp --config FILE` as a child process, initialized.
    pub fn proxy(&self) -> Mcp {
        Mcp::initialized(self.mcp_command())
    }

    /// `cajaguard mcp --config FILE` before any message.
    pub fn proxy_uninitialized(&self) -> Mcp {
        Mcp::spawn(self.mcp_command())
    }

    /// Runs `cajaguard ARGS --config FILE` with the world's key dir.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_with(&self.config, args)
    }

    /// Runs `cajaguard ARGS --config CONFIG` as [`World::cli`] does, with another config (one an
    /// agent wrote for itself, say).
    pub fn cli_with(&self, config: &Path, args: &[&str]) -> Output {
        let xdg = self.dir.path().join(".config");
        cli(args, config, self.dir.path(), &self.key_dir)
            .env("XDG_CONFIG_HOME", xdg)
            .env(TOKEN_VAR, SHOP_TOKEN)
            .output()
            .unwrap()
    }

    /// `cajaguard status --json`: the same document as the `cajaguard_status` tool.
    pub fn status(&self) -> Value {
        let out = self.cli(&["status", "--json"]);
        assert!(
            out.status.success(),
            "status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
    }

    /// `(spent_minor, in_flight_minor)` in `currency`, from `cajaguard status --json`.
    pub fn spend(&self, currency: &str) -> (i64, i64) {
        let status = self.status();
        let caps = &status["caps"][currency];
        match (
            caps["spent_minor"].as_i64(),
            caps["in_flight_minor"].as_i64(),
        ) {
            (Some(spent), Some(in_flight)) => (spent, in_flight),
            _ => panic!("status has no {currency} spend: {status}"),
        }
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

    /// How many `complete_checkout` calls for this checkout reached the shop, by the shop's own
    /// record (`calls.jsonl` of the fixture; every line received, for the test shop).
    pub fn completes_reaching_shop(&self, checkout_id: &str) -> usize {
        match self.shop {
            Shop::Fixture => self
                .shop_calls()
                .iter()
                .filter(|(tool, args)| tool == "complete_checkout" && args["id"] == checkout_id)
                .count(),
            Shop::Test(_) => self
                .test_shop_lines()
                .iter()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .filter(|call| {
                    call["params"]["name"] == "complete_checkout"
                        && call["params"]["arguments"]["id"] == checkout_id
                })
                .count(),
        }
    }

    /// Every `complete_checkout` the fixture recorded, for any checkout.
    pub fn fixture_completes(&self) -> usize {
        self.shop_calls()
            .iter()
            .filter(|(tool, _)| tool == "complete_checkout")
            .count()
    }

    pub fn approvals_dir(&self) -> PathBuf {
        self.home.join("approvals")
    }

    /// Whether no approval file was written (the folder missing or empty).
    pub fn no_approval_files(&self) -> bool {
        std::fs::read_dir(self.approvals_dir()).map_or(true, |mut files| files.next().is_none())
    }

    /// Waits (up to a minute) until a line the test shop received contains `needle`: the call is
    /// with the shop.
    pub fn wait_for_test_shop_line(&self, needle: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !self.test_shop_lines().iter().any(|l| l.contains(needle)) {
            assert!(
                std::time::Instant::now() < deadline,
                "{needle} never reached the shop"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

impl Host {
    /// `cajaguard mcp` for this host, initialized.
    pub fn proxy(&self) -> Mcp {
        Mcp::initialized(self.mcp_command())
    }

    /// `cajaguard mcp` for this host, before any message.
    pub fn proxy_uninitialized(&self) -> Mcp {
        Mcp::spawn(self.mcp_command())
    }

    fn mcp_command(&self) -> Command {
        let mut command = Command::new(cajaguard_bin());
        command
            .args(["mcp", "--config"])
            .arg(&self.config)
            .env("HOME", &self.dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// `cajaguard ARGS --config FILE` on this host, with the world's key dir.
    pub fn cli(&self, args: &[&str]) -> Output {
        cli(args, &self.config, &self.dir, &self.key_dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap()
    }
}

/// `cajaguard ARGS --config CONFIG` with `HOME` and the key dir set and no stdin (so nothing
/// waits for a human).
fn cli(args: &[&str], config: &Path, home: &Path, key_dir: &Path) -> Command {
    let mut command = Command::new(cajaguard_bin());
    command
        .args(args)
        .arg("--config")
        .arg(config)
        .env("CAJAGUARD_KEY_DIR", key_dir)
        .env("HOME", home)
        .stdin(Stdio::null());
    command
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

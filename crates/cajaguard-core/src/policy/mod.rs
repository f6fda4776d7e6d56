//! The config file (SPEC §2), parsed once into a validated [`Policy`]. Nothing downstream re-validates.
//!
//! The file is walked by hand over a `serde_json::Value` rather than derived with serde so that every
//! error can name the exact JSON path (`$.caps.USD.window`) and say what to do, and so that an unknown
//! field at any level is refused: a typo must never silently drop a rule.
//!
//! `mod.rs` holds the validated types and the top level of the file; `read` the path-naming JSON
//! readers every section uses; `sections` merchants, caps, approvals, store and test mode;
//! `downstream` the shop's transport, its types and its rules.

use sha2::Digest as _;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::Error;
use crate::agent::AgentId;
use crate::money::Currency;

mod downstream;
mod read;
mod sections;
mod serve;

pub use downstream::{Command, Downstream, DownstreamTransport, HttpDownstream, StdioDownstream};
use read::Cx;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Test,
    Live,
}

/// Caps for one currency, in minor units. Invariant: `approval_above <= per_transaction <= window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub currency: Currency,
    pub approval_above: i64,
    pub per_transaction: i64,
    pub window: i64,
}

/// `serve` (SPEC §13): where the service listens, which browser origins may call it, and how
/// agents authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServePolicy {
    /// A parsed address only (`core::net`: no socket is opened here). The endpoint is `/mcp`.
    pub listen: core::net::SocketAddr,
    /// Exact origins (`scheme://host[:port]`, lower case) a request's `Origin` header may name;
    /// a request without `Origin` (not from a browser) is not refused for it.
    pub allowed_origins: BTreeSet<String>,
    /// `agents[]`: per-agent settings by id. Tokens are not here: `cajaguard agent add` keeps
    /// their SHA-256 in the store, out of the config an agent might read.
    pub agents: BTreeMap<AgentId, AgentPolicy>,
    /// `oauth`: OAuth 2.1 access tokens (JWT) from the team's issuer.
    pub oauth: Option<OauthPolicy>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentPolicy {
    /// `caps`, same shape as the global `caps`; `None`: `agent_caps` applies.
    pub caps: Option<BTreeMap<String, Caps>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OauthPolicy {
    pub issuer: String,
    /// This gate's resource URL, which a token's `aud` must contain.
    pub audience: String,
    pub jwks: JwksSource,
    /// The claim that names the agent (default `sub`).
    pub agent_claim: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    File(PathBuf),
    /// https, or http to a loopback IP (checked at load).
    Url(url::Url),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// Paths of trusted public keys (`~` and relative paths already resolved). Loaded at the edge.
    pub trusted_keys: Vec<PathBuf>,
    pub max_ttl: Duration,
    /// `approvals.web`: the local approval page; `None` when not configured.
    pub web: Option<WebPolicy>,
    /// `approvals.require`: which approvals the gate counts.
    pub require: RequiredApproval,
}

impl ApprovalPolicy {
    /// The relying party passkey approvals are checked against, when they count: the page is
    /// configured and `require` accepts passkeys.
    pub fn passkey_relying_party(&self) -> Option<crate::passkey::RelyingParty> {
        self.web
            .filter(|_| self.require.accepts_passkey())
            .map(|web| web.relying_party())
    }

    /// Whether the gate's decision reads passkey approvals at all: only with the page, the one
    /// relying party a passkey could have signed for (`gate::decide` looks at none without it).
    /// Not only when `require` accepts them: under `"key"` a passkey deny filed earlier still
    /// refuses (a deny of any kind does), and a passkey approve is named in the refusal as the
    /// kind that does not count. When this is false the store does not read them, which saves a
    /// query on every decision of the default config.
    pub fn reads_passkey_approvals(&self) -> bool {
        self.web.is_some()
    }
}

/// `approvals.require` (SPEC §6): which kinds of approval the gate accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequiredApproval {
    /// Key-file approvals only (the default, as before passkeys).
    #[default]
    Key,
    /// Passkey approvals only: a key file on the agent's disk approves nothing.
    Passkey,
    /// Either kind.
    Any,
}

impl RequiredApproval {
    pub fn accepts_key_file(self) -> bool {
        matches!(self, RequiredApproval::Key | RequiredApproval::Any)
    }
    pub fn accepts_passkey(self) -> bool {
        matches!(self, RequiredApproval::Passkey | RequiredApproval::Any)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            RequiredApproval::Key => "key",
            RequiredApproval::Passkey => "passkey",
            RequiredApproval::Any => "any",
        }
    }
}

/// `approvals.web` (SPEC §6): where the approval page listens. Invariant: a loopback address
/// with a non-zero port; the origin is `http://localhost:<port>` and the RP ID `localhost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebPolicy {
    /// A parsed address only (`core::net`: no socket is opened here).
    pub listen: core::net::SocketAddr,
}

impl WebPolicy {
    pub fn port(&self) -> u16 {
        self.listen.port()
    }
    /// The relying party every passkey on this page is registered for.
    pub fn relying_party(&self) -> crate::passkey::RelyingParty {
        crate::passkey::RelyingParty::localhost(self.port())
    }
    /// The one origin the page is served from, as browsers serialise it.
    pub fn origin(&self) -> String {
        self.relying_party().origin().to_owned()
    }
    /// The `Host` header a browser sends for [`WebPolicy::origin`]: `localhost:<port>` (plain
    /// `localhost` on port 80, which browsers leave out).
    pub fn host(&self) -> String {
        match self.port() {
            80 => "localhost".to_owned(),
            port => format!("localhost:{port}"),
        }
    }
    /// The page of one pending request.
    pub fn request_url(&self, request_id: &str) -> String {
        format!("{}/requests/{request_id}", self.origin())
    }
}

#[derive(Debug, Clone)]
pub struct TestModePolicy {
    pub handler_ids: BTreeSet<String>,
    pub token_pattern: regex::Regex,
}

impl TestModePolicy {
    /// The SPEC §2 example's test handler and token pattern, used when `test_mode` is absent.
    pub fn spec_default() -> TestModePolicy {
        TestModePolicy {
            handler_ids: DEFAULT_TEST_HANDLERS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            token_pattern: compile_token_pattern(DEFAULT_TOKEN_PATTERN)
                .unwrap_or_else(|_| never_matches()),
        }
    }
}

/// Only reached if the `regex` crate refused a trivially valid pattern; a pattern that never
/// matches keeps the tripwire closed.
fn never_matches() -> regex::Regex {
    #[allow(clippy::expect_used)]
    regex::Regex::new("[^\\s\\S]").expect("a constant, valid regex")
}

/// Where the store lives (`store` in the config). Absent: the embedded SQLite database in `home`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// `<home>/cajaguard.db` (SQLite, WAL) and approval files in `<home>/approvals/`.
    Sqlite,
    /// A PostgreSQL database shared by every host: ledger, pending requests, approvals, audit.
    Postgres { url: StoreUrl },
}

/// Where the PostgreSQL URL comes from. It may carry a password, so it is read at the edge (the
/// core reads no environment) and never shown: `Debug` prints only what [`redact_url`] keeps.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `store.url`, as written in the config.
    Literal(zeroize::Zeroizing<String>),
    /// `store.url_env`: the name of an environment variable holding the URL, so the secret need
    /// not sit in the config file.
    Env(String),
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Literal(url) => write!(f, "Literal({})", redact_url(url)),
            StoreUrl::Env(name) => write!(f, "Env({name})"),
        }
    }
}

/// A database URL fit for a log line: scheme, host, port and database only. User, password and
/// query parameters (which may hold `password=`) are dropped; anything that does not parse as a URL
/// is shown as `<unparsable URL>`.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) => {
            let host = parsed.host_str().unwrap_or("");
            let port = parsed.port().map(|p| format!(":{p}")).unwrap_or_default();
            format!("{}://{host}{port}{}", parsed.scheme(), parsed.path())
        }
        Err(_) => "<unparsable URL>".to_owned(),
    }
}

#[derive(Debug, Clone)]
pub struct Policy {
    /// The config file this came from (absolute), for messages such as `cajaguard approve ID --config FILE`.
    pub source: PathBuf,
    pub mode: Mode,
    /// The state directory, resolved.
    pub home: PathBuf,
    pub downstream: Downstream,
    /// Lower-case hosts, matched exactly.
    pub merchants: BTreeSet<String>,
    /// Keyed by currency code (`"USD"`).
    pub caps: BTreeMap<String, Caps>,
    pub window: Duration,
    pub approvals: ApprovalPolicy,
    pub test_mode: TestModePolicy,
    /// `store`; [`StoreConfig::Sqlite`] when absent.
    pub store: StoreConfig,
    /// `agent_caps`: the caps of every agent of the service without caps of its own (SPEC §13).
    pub agent_caps: Option<BTreeMap<String, Caps>>,
    /// `serve`: the service (`cajaguard serve`, SPEC §13); `None` when not configured.
    pub serve: Option<ServePolicy>,
    /// SHA-256 of the config text this was parsed from: every process that loads it says so in
    /// the audit log (SPEC §8), so the log shows which policy each decision was made under.
    pub config_sha256: [u8; 32],
}

/// Where a config came from: its absolute path (relative paths in it resolve against its directory)
/// and the user's home directory for `~` (`None`: a `~` in the config is an error).
#[derive(Debug, Clone)]
pub struct ConfigOrigin<'a> {
    pub path: &'a Path,
    pub user_home: Option<&'a Path>,
}

pub const DEFAULT_WINDOW_HOURS: u64 = 24;
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 30;
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
pub const DEFAULT_MAX_TTL_MINUTES: u64 = 15;
pub const DEFAULT_TEST_HANDLERS: &[&str] = &["fixture_test_handler"];
pub const DEFAULT_TOKEN_PATTERN: &str = "^cg_test_[A-Za-z0-9_]{8,}$";

/// Bounds a config-supplied pattern so a hostile or careless pattern cannot exhaust memory.
const TOKEN_PATTERN_SIZE_LIMIT: usize = 1 << 20;

fn compile_token_pattern(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .size_limit(TOKEN_PATTERN_SIZE_LIMIT)
        .dfa_size_limit(TOKEN_PATTERN_SIZE_LIMIT)
        .build()
}

impl Policy {
    /// Parses and validates a config file's text. Every error is [`Error::Config`] naming the file,
    /// the JSON path and what is wrong. Unknown fields are errors.
    pub fn parse(text: &str, origin: &ConfigOrigin<'_>) -> Result<Policy, Error> {
        let cx = Cx { origin };
        let root: Value = serde_json::from_str(text).map_err(|e| {
            cx.err(
                "$",
                format!(
                    "not valid JSON (line {}, column {}): fix the syntax; the file must be one JSON object",
                    e.line(),
                    e.column()
                ),
            )
        })?;
        let root = cx.object(&root, "$")?;
        cx.only(
            root,
            "$",
            &[
                "mode",
                "home",
                "downstream",
                "merchants",
                "caps",
                "window_hours",
                "approvals",
                "test_mode",
                "store",
                "serve",
                "agent_caps",
            ],
        )?;

        let mode = match cx.string(cx.required(root, "$", "mode")?, "$.mode")? {
            "test" => Mode::Test,
            "live" => Mode::Live,
            _ => return Err(cx.err("$.mode", "must be \"test\" or \"live\"")),
        };
        let home = cx.path(
            cx.string(cx.required(root, "$", "home")?, "$.home")?,
            "$.home",
        )?;
        let downstream = cx.downstream(cx.required(root, "$", "downstream")?)?;
        let merchants = cx.merchants(cx.required(root, "$", "merchants")?)?;
        let caps = cx.caps(cx.required(root, "$", "caps")?, "$.caps")?;
        let window_hours = match root.get("window_hours") {
            None => DEFAULT_WINDOW_HOURS,
            Some(v) => cx.bounded_int(v, "$.window_hours", 1, 24 * 366 * 10)?,
        };
        let approvals = match root.get("approvals") {
            None => ApprovalPolicy {
                trusted_keys: Vec::new(),
                max_ttl: Duration::from_secs(DEFAULT_MAX_TTL_MINUTES * 60),
                web: None,
                require: RequiredApproval::Key,
            },
            Some(v) => cx.approvals(v)?,
        };
        let test_mode = match root.get("test_mode") {
            None => TestModePolicy::spec_default(),
            Some(v) => cx.test_mode(v)?,
        };
        // Checked here, at load, rather than when connecting: a shop endpoint outside the allowlist
        // is a mistake in the file, best reported before anything runs (exit 2, naming the path),
        // and the policy stays the one place that says which hosts CajaGuard deals with. It
        // complements, not replaces, the per-checkout merchant check (SPEC §4.6).
        if let DownstreamTransport::Http(http) = &downstream.transport {
            let host = http
                .url
                .host_str()
                .map(str::to_ascii_lowercase)
                .unwrap_or_default();
            if !merchants.contains(&host) {
                return Err(cx.err(
                    "$.downstream.url",
                    format!(
                        "its host `{host}` is not in merchants: add it to merchants if this is the \
                         shop you mean to pay, or fix the URL"
                    ),
                ));
            }
        }
        let store = match root.get("store") {
            None => StoreConfig::Sqlite,
            Some(v) => cx.store(v)?,
        };

        let agent_caps = match root.get("agent_caps") {
            None => None,
            Some(v) => Some(cx.agent_caps(v, "$.agent_caps", &caps)?),
        };
        let serve = match root.get("serve") {
            None => None,
            Some(v) => Some(cx.serve(v, &caps)?),
        };

        Ok(Policy {
            source: origin.path.to_path_buf(),
            mode,
            home,
            downstream,
            merchants,
            caps,
            window: Duration::from_secs(window_hours * 3600),
            approvals,
            test_mode,
            store,
            agent_caps,
            serve,
            config_sha256: sha2::Sha256::digest(text.as_bytes()).into(),
        })
    }

    pub fn caps_for(&self, currency_code: &str) -> Option<&Caps> {
        self.caps.get(currency_code)
    }

    /// The caps that hold for `agent` on top of the global ones: its own (`serve.agents[].caps`),
    /// else `agent_caps`; `None` when neither is configured (only the global caps hold). An agent
    /// with caps pays only in the currencies they list.
    pub fn agent_caps(&self, agent: &AgentId) -> Option<&BTreeMap<String, Caps>> {
        self.serve
            .as_ref()
            .and_then(|serve| serve.agents.get(agent))
            .and_then(|own| own.caps.as_ref())
            .or(self.agent_caps.as_ref())
    }
}

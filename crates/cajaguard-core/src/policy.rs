//! The config file (SPEC §2), parsed once into a validated [`Policy`]. Nothing downstream re-validates.
//!
//! The file is walked by hand over a `serde_json::Value` rather than derived with serde so that every
//! error can name the exact JSON path (`$.caps.USD.window`) and say what to do, and so that an unknown
//! field at any level is refused: a typo must never silently drop a rule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::Error;
use crate::money::{self, Currency};

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

/// How to find the downstream program. A command with a slash was resolved against the config
/// file's directory; a bare name is resolved at the edge (next to the running executable, then `PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Path(PathBuf),
    Bare(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioDownstream {
    pub command: Command,
    pub args: Vec<String>,
    /// Resolved against the config file's directory; absent in the file means the config file's directory.
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}

/// A shop reached over MCP Streamable HTTP. The bearer token itself is never in the config: only
/// the name of the environment variable that holds it, read by the proxy when it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpDownstream {
    /// `https://...`, or `http://` to a loopback IP literal. No user info, no fragment.
    pub url: url::Url,
    /// The environment variable holding the bearer token (`None`: no `Authorization` header).
    pub bearer_token_env: Option<String>,
    /// Extra request headers, validated names and values. Headers the transport owns
    /// (`Authorization`, `Mcp-Session-Id`, `MCP-Protocol-Version`, `Accept`, `Content-Type`, ...)
    /// are refused here.
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownstreamTransport {
    Stdio(StdioDownstream),
    Http(HttpDownstream),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downstream {
    pub transport: DownstreamTransport,
    /// `downstream.timeout_seconds`, default 30 s.
    pub timeout: Duration,
    /// `downstream.max_message_bytes`, default 4 MiB.
    pub max_message_bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// Paths of trusted public keys (`~` and relative paths already resolved). Loaded at the edge.
    pub trusted_keys: Vec<PathBuf>,
    pub max_ttl: Duration,
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

/// Headers the HTTP transport sets itself; a config naming one is refused, so that neither a token
/// in the file nor a forged session or protocol header can slip in.
const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "accept",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "host",
];

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
        let caps = cx.caps(cx.required(root, "$", "caps")?)?;
        let window_hours = match root.get("window_hours") {
            None => DEFAULT_WINDOW_HOURS,
            Some(v) => cx.bounded_int(v, "$.window_hours", 1, 24 * 366 * 10)?,
        };
        let approvals = match root.get("approvals") {
            None => ApprovalPolicy {
                trusted_keys: Vec::new(),
                max_ttl: Duration::from_secs(DEFAULT_MAX_TTL_MINUTES * 60),
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
        })
    }

    pub fn caps_for(&self, currency_code: &str) -> Option<&Caps> {
        self.caps.get(currency_code)
    }
}

/// `.key` for plain keys, `["..."]` (JSON-escaped) for anything else, so a path is unambiguous.
fn push_key(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key.len() <= 64
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        format!("{path}.{key}")
    } else {
        let shown: String = key.chars().take(64).collect();
        let quoted = serde_json::to_string(&shown).unwrap_or_else(|_| "\"?\"".to_owned());
        format!("{path}[{quoted}]")
    }
}

struct Cx<'o, 'a> {
    origin: &'o ConfigOrigin<'a>,
}

impl Cx<'_, '_> {
    fn err(&self, json_path: &str, message: impl Into<String>) -> Error {
        Error::Config {
            file: self.origin.path.to_path_buf(),
            json_path: json_path.to_owned(),
            message: message.into(),
        }
    }

    fn dir(&self) -> PathBuf {
        self.origin
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    fn object<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Map<String, Value>, Error> {
        v.as_object()
            .ok_or_else(|| self.err(path, format!("must be a JSON object, not {}", kind(v))))
    }

    fn string<'v>(&self, v: &'v Value, path: &str) -> Result<&'v str, Error> {
        v.as_str()
            .ok_or_else(|| self.err(path, format!("must be a string, not {}", kind(v))))
    }

    fn array<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Vec<Value>, Error> {
        v.as_array()
            .ok_or_else(|| self.err(path, format!("must be an array, not {}", kind(v))))
    }

    fn required<'v>(
        &self,
        obj: &'v Map<String, Value>,
        path: &str,
        key: &str,
    ) -> Result<&'v Value, Error> {
        obj.get(key).ok_or_else(|| {
            self.err(
                &push_key(path, key),
                "is required: add it (see SPEC §2 for an example)",
            )
        })
    }

    fn only(&self, obj: &Map<String, Value>, path: &str, allowed: &[&str]) -> Result<(), Error> {
        for key in obj.keys() {
            if !allowed.contains(&key.as_str()) {
                return Err(self.err(
                    &push_key(path, key),
                    format!(
                        "unknown field: remove it or fix its spelling (allowed here: {})",
                        allowed.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    fn bounded_int(&self, v: &Value, path: &str, min: u64, max: u64) -> Result<u64, Error> {
        match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(self.err(path, format!("must be a whole number from {min} to {max}"))),
        }
    }

    /// `~` and `~/x` expand to the user's home; other relative paths resolve against the config's directory.
    fn path(&self, text: &str, json_path: &str) -> Result<PathBuf, Error> {
        if text.is_empty() {
            return Err(self.err(json_path, "must not be empty: give a path"));
        }
        if text.contains('\0') {
            return Err(self.err(json_path, "must not contain a NUL character"));
        }
        if let Some(rest) = text.strip_prefix('~') {
            let rest = if rest.is_empty() {
                ""
            } else if let Some(r) = rest.strip_prefix('/') {
                r
            } else {
                return Err(self.err(
                    json_path,
                    "`~user` is not supported: write `~/...` or a full path",
                ));
            };
            let Some(home) = self.origin.user_home else {
                return Err(self.err(json_path, "starts with `~` but the home directory is unknown: set HOME or write a full path"));
            };
            return Ok(if rest.is_empty() {
                home.to_path_buf()
            } else {
                home.join(rest)
            });
        }
        let p = Path::new(text);
        Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.dir().join(p)
        })
    }

    fn downstream(&self, v: &Value) -> Result<Downstream, Error> {
        let p = "$.downstream";
        let obj = self.object(v, p)?;
        self.only(
            obj,
            p,
            &[
                "command",
                "args",
                "cwd",
                "env",
                "url",
                "bearer_token_env",
                "headers",
                "timeout_seconds",
                "max_message_bytes",
            ],
        )?;
        let transport = match (obj.contains_key("command"), obj.contains_key("url")) {
            (true, true) => {
                return Err(self.err(
                    p,
                    "has both `command` (a shop started as a child process) and `url` (a shop reached \
                     over HTTP): keep exactly one",
                ));
            }
            (false, false) => {
                return Err(self.err(
                    p,
                    "needs `command` (a shop started as a child process) or `url` (a shop reached over \
                     MCP Streamable HTTP)",
                ));
            }
            (true, false) => {
                self.not_with(obj, p, "command", &["bearer_token_env", "headers"])?;
                DownstreamTransport::Stdio(self.stdio_downstream(obj)?)
            }
            (false, true) => {
                self.not_with(obj, p, "url", &["args", "cwd", "env"])?;
                DownstreamTransport::Http(self.http_downstream(obj)?)
            }
        };
        let timeout = match obj.get("timeout_seconds") {
            None => DEFAULT_TIMEOUT_SECONDS,
            Some(t) => self.bounded_int(t, "$.downstream.timeout_seconds", 1, 86_400)?,
        };
        let max_message_bytes = match obj.get("max_message_bytes") {
            None => DEFAULT_MAX_MESSAGE_BYTES,
            Some(m) => {
                let n = self.bounded_int(m, "$.downstream.max_message_bytes", 1024, 1 << 30)?;
                usize::try_from(n).map_err(|_| {
                    self.err(
                        "$.downstream.max_message_bytes",
                        "is too large for this machine",
                    )
                })?
            }
        };
        Ok(Downstream {
            transport,
            timeout: Duration::from_secs(timeout),
            max_message_bytes,
        })
    }

    /// Fields of one transport given with the other are refused rather than ignored.
    fn not_with(
        &self,
        obj: &Map<String, Value>,
        path: &str,
        chosen: &str,
        other: &[&str],
    ) -> Result<(), Error> {
        match other.iter().find(|key| obj.contains_key(**key)) {
            Some(key) => Err(self.err(
                &push_key(path, key),
                format!("does not apply to a downstream given by `{chosen}`: remove it"),
            )),
            None => Ok(()),
        }
    }

    fn stdio_downstream(&self, obj: &Map<String, Value>) -> Result<StdioDownstream, Error> {
        let p = "$.downstream";
        let command_text =
            self.string(self.required(obj, p, "command")?, "$.downstream.command")?;
        let command = if command_text.trim().is_empty() {
            return Err(self.err(
                "$.downstream.command",
                "must not be empty: name the shop's MCP server program",
            ));
        } else if command_text.contains('/') || command_text.starts_with('~') {
            Command::Path(self.path(command_text, "$.downstream.command")?)
        } else if command_text.contains('\0') {
            return Err(self.err("$.downstream.command", "must not contain a NUL character"));
        } else {
            Command::Bare(command_text.to_owned())
        };
        let mut args = Vec::new();
        if let Some(a) = obj.get("args") {
            for (i, item) in self.array(a, "$.downstream.args")?.iter().enumerate() {
                args.push(
                    self.string(item, &format!("$.downstream.args[{i}]"))?
                        .to_owned(),
                );
            }
        }
        let cwd = match obj.get("cwd") {
            None => self.dir(),
            Some(c) => self.path(self.string(c, "$.downstream.cwd")?, "$.downstream.cwd")?,
        };
        let mut env = BTreeMap::new();
        if let Some(e) = obj.get("env") {
            for (k, val) in self.object(e, "$.downstream.env")? {
                let kp = push_key("$.downstream.env", k);
                if k.is_empty() || k.contains('=') || k.contains('\0') {
                    return Err(self.err(&kp, "is not a valid environment variable name"));
                }
                env.insert(k.clone(), self.string(val, &kp)?.to_owned());
            }
        }
        Ok(StdioDownstream {
            command,
            args,
            cwd,
            env,
        })
    }

    fn http_downstream(&self, obj: &Map<String, Value>) -> Result<HttpDownstream, Error> {
        let up = "$.downstream.url";
        let text = self.string(self.required(obj, "$.downstream", "url")?, up)?;
        let example = "write the shop's MCP endpoint, like \"https://shop.example/api/ucp/mcp\"";
        let url = url::Url::parse(text)
            .map_err(|e| self.err(up, format!("is not a URL ({e}): {example}")))?;
        let host = match url.host() {
            Some(host) => host,
            None => return Err(self.err(up, format!("has no host: {example}"))),
        };
        match url.scheme() {
            "https" => {}
            "http" => {
                // Plain HTTP would carry the bearer token and the payment call in clear text; on a
                // loopback address it never leaves the machine. Only IP literals count: a name such
                // as `localhost` is whatever the resolver says it is.
                let loopback = match host {
                    url::Host::Ipv4(ip) => ip.is_loopback(),
                    url::Host::Ipv6(ip) => ip.is_loopback(),
                    url::Host::Domain(_) => false,
                };
                if !loopback {
                    return Err(self.err(
                        up,
                        "uses plain http:// to a non-loopback address: use https:// (http:// is \
                         allowed only to 127.0.0.1 or [::1], for local tests)",
                    ));
                }
            }
            other => {
                return Err(self.err(
                    up,
                    format!("has the scheme `{other}`: use https:// ({example})"),
                ));
            }
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(self.err(
                up,
                "holds a user name or password: remove it; put the token in an environment variable \
                 and name it in downstream.bearer_token_env",
            ));
        }
        if url.fragment().is_some() {
            return Err(self.err(up, "has a #fragment: remove it"));
        }
        let bearer_token_env = match obj.get("bearer_token_env") {
            None => None,
            Some(v) => {
                let bp = "$.downstream.bearer_token_env";
                let name = self.string(v, bp)?;
                let valid = !name.is_empty()
                    && !name.starts_with(|c: char| c.is_ascii_digit())
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !valid {
                    return Err(self.err(
                        bp,
                        "must be the NAME of an environment variable (letters, digits, `_`), such as \
                         \"SHOP_TOKEN\"; the token itself never goes in the config file",
                    ));
                }
                Some(name.to_owned())
            }
        };
        let mut headers = BTreeMap::new();
        if let Some(h) = obj.get("headers") {
            for (name, value) in self.object(h, "$.downstream.headers")? {
                let hp = push_key("$.downstream.headers", name);
                let token = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if !token {
                    return Err(self.err(&hp, "is not a valid HTTP header name"));
                }
                if RESERVED_HEADERS
                    .iter()
                    .any(|reserved| reserved.eq_ignore_ascii_case(name))
                {
                    return Err(self.err(
                        &hp,
                        "is set by CajaGuard itself: remove it (a bearer token goes in an environment \
                         variable named by downstream.bearer_token_env)",
                    ));
                }
                let value = self.string(value, &hp)?;
                if !value
                    .bytes()
                    .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
                {
                    return Err(self.err(
                        &hp,
                        "must be printable ASCII on one line (no control characters)",
                    ));
                }
                headers.insert(name.clone(), value.to_owned());
            }
        }
        Ok(HttpDownstream {
            url,
            bearer_token_env,
            headers,
        })
    }

    fn merchants(&self, v: &Value) -> Result<BTreeSet<String>, Error> {
        let mut out = BTreeSet::new();
        for (i, item) in self.array(v, "$.merchants")?.iter().enumerate() {
            let p = format!("$.merchants[{i}]");
            let text = self.string(item, &p)?;
            let host = text.to_ascii_lowercase();
            let what = "write a bare host name such as \"demo-outfitters.example\" (no scheme, port or path)";
            let stray = |c: char| {
                matches!(c, '/' | '\\' | ':' | '?' | '#' | '@' | '%' | '[' | ']')
                    || c.is_whitespace()
                    || c.is_control()
            };
            if host.is_empty() || host.chars().any(stray) {
                return Err(self.err(&p, format!("is not a host name: {what}")));
            }
            let parsed = url::Url::parse(&format!("https://{host}/"))
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned));
            // Stored as the URL parser writes hosts (IDNs in punycode), which is how the gate
            // reads the shop's `continue_url`, so both sides compare the same form.
            let Some(parsed) = parsed.filter(|h| !h.is_empty() && !h.starts_with('[')) else {
                return Err(self.err(&p, format!("is not a valid host name: {what}")));
            };
            out.insert(parsed);
        }
        Ok(out)
    }

    fn caps(&self, v: &Value) -> Result<BTreeMap<String, Caps>, Error> {
        let obj = self.object(v, "$.caps")?;
        let mut out = BTreeMap::new();
        for (code, entry) in obj {
            let cp = push_key("$.caps", code);
            let currency = Currency::from_code(code).map_err(|e| self.err(&cp, format!("{e}")))?;
            let fields = self.object(entry, &cp)?;
            self.only(
                fields,
                &cp,
                &["approval_above", "per_transaction", "window"],
            )?;
            let amount = |key: &str| -> Result<i64, Error> {
                let fp = push_key(&cp, key);
                let raw = self.required(fields, &cp, key)?;
                let text = raw.as_str().ok_or_else(|| {
                    self.err(
                        &fp,
                        format!(
                            "must be a string in major units, like \"50.00\", not {}",
                            kind(raw)
                        ),
                    )
                })?;
                money::parse_major(text, currency).map_err(|e| self.err(&fp, format!("{e}")))
            };
            let approval_above = amount("approval_above")?;
            let per_transaction = amount("per_transaction")?;
            let window = amount("window")?;
            if approval_above > per_transaction {
                return Err(self.err(
                    &cp,
                    "approval_above is over per_transaction: lower approval_above or raise per_transaction \
                     (approval_above <= per_transaction <= window)",
                ));
            }
            if per_transaction > window {
                return Err(self.err(
                    &cp,
                    "per_transaction is over window: raise window or lower per_transaction \
                     (approval_above <= per_transaction <= window)",
                ));
            }
            out.insert(
                code.clone(),
                Caps {
                    currency,
                    approval_above,
                    per_transaction,
                    window,
                },
            );
        }
        Ok(out)
    }

    fn approvals(&self, v: &Value) -> Result<ApprovalPolicy, Error> {
        let p = "$.approvals";
        let obj = self.object(v, p)?;
        self.only(obj, p, &["trusted_keys", "max_ttl_minutes"])?;
        let mut trusted_keys = Vec::new();
        if let Some(k) = obj.get("trusted_keys") {
            for (i, item) in self
                .array(k, "$.approvals.trusted_keys")?
                .iter()
                .enumerate()
            {
                let ip = format!("$.approvals.trusted_keys[{i}]");
                trusted_keys.push(self.path(self.string(item, &ip)?, &ip)?);
            }
        }
        let minutes = match obj.get("max_ttl_minutes") {
            None => DEFAULT_MAX_TTL_MINUTES,
            Some(m) => self.bounded_int(m, "$.approvals.max_ttl_minutes", 1, 7 * 24 * 60)?,
        };
        Ok(ApprovalPolicy {
            trusted_keys,
            max_ttl: Duration::from_secs(minutes * 60),
        })
    }

    /// `store`: exactly one of `url` (a `postgres://` URL) or `url_env` (the name of a variable
    /// holding one). Messages never repeat the URL: it may carry a password.
    fn store(&self, v: &Value) -> Result<StoreConfig, Error> {
        let p = "$.store";
        let obj = self.object(v, p)?;
        self.only(obj, p, &["url", "url_env"])?;
        match (obj.get("url"), obj.get("url_env")) {
            (Some(_), Some(_)) => Err(self.err(
                p,
                "has both url and url_env: keep one (url_env keeps the password out of the file)",
            )),
            (None, None) => Err(self.err(
                p,
                "needs url or url_env (a postgres:// URL); leave store out for the embedded SQLite in home",
            )),
            (Some(url), None) => {
                let url = self.string(url, "$.store.url")?;
                let scheme_ok = ["postgres://", "postgresql://"]
                    .iter()
                    .any(|s| {
                        url.len() > s.len()
                            && url.get(..s.len()).is_some_and(|head| head.eq_ignore_ascii_case(s))
                    });
                if !scheme_ok {
                    return Err(self.err(
                        "$.store.url",
                        "must be a PostgreSQL URL (postgres://user@host:5432/dbname); leave store out for the embedded SQLite in home",
                    ));
                }
                Ok(StoreConfig::Postgres {
                    url: StoreUrl::Literal(zeroize::Zeroizing::new(url.to_owned())),
                })
            }
            (None, Some(name)) => {
                let name = self.string(name, "$.store.url_env")?;
                let valid = name
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && name.len() <= 128
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !valid {
                    return Err(self.err(
                        "$.store.url_env",
                        "must name an environment variable, like \"CAJAGUARD_STORE_URL\"",
                    ));
                }
                Ok(StoreConfig::Postgres {
                    url: StoreUrl::Env(name.to_owned()),
                })
            }
        }
    }

    fn test_mode(&self, v: &Value) -> Result<TestModePolicy, Error> {
        let p = "$.test_mode";
        let obj = self.object(v, p)?;
        self.only(obj, p, &["handler_ids", "token_pattern"])?;
        let handler_ids = match obj.get("handler_ids") {
            None => DEFAULT_TEST_HANDLERS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            Some(h) => {
                let mut set = BTreeSet::new();
                for (i, item) in self.array(h, "$.test_mode.handler_ids")?.iter().enumerate() {
                    let ip = format!("$.test_mode.handler_ids[{i}]");
                    let id = self.string(item, &ip)?;
                    if id.is_empty() {
                        return Err(
                            self.err(&ip, "must not be empty: name a test payment handler id")
                        );
                    }
                    set.insert(id.to_owned());
                }
                set
            }
        };
        let pattern = match obj.get("token_pattern") {
            None => DEFAULT_TOKEN_PATTERN,
            Some(t) => self.string(t, "$.test_mode.token_pattern")?,
        };
        let token_pattern = compile_token_pattern(pattern).map_err(|e| {
            let reason = match e {
                regex::Error::CompiledTooBig(_) => "is too large".to_owned(),
                other => format!("does not compile ({})", last_line(&other.to_string())),
            };
            self.err(
                "$.test_mode.token_pattern",
                format!("{reason}: fix the regular expression (Rust `regex` syntax)"),
            )
        })?;
        Ok(TestModePolicy {
            handler_ids,
            token_pattern,
        })
    }
}

fn last_line(s: &str) -> String {
    s.lines()
        .last()
        .unwrap_or("")
        .trim()
        .chars()
        .take(120)
        .collect()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

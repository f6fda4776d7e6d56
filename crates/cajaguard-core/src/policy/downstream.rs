//! The shop CajaGuard fronts (`downstream` in the config): a child process on stdio or an MCP
//! Streamable HTTP endpoint, its types and its rules. Environment values and header values may be
//! secrets (an `X-Api-Key`), so `Debug` shows their names only.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use super::read::{Cx, push_key};
use super::{DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TIMEOUT_SECONDS};
use crate::Error;

/// How to find the downstream program. A command with a slash was resolved against the config
/// file's directory; a bare name is resolved at the edge (next to the running executable, then `PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Path(PathBuf),
    Bare(String),
}

#[derive(Clone, PartialEq, Eq)]
pub struct StdioDownstream {
    pub command: Command,
    pub args: Vec<String>,
    /// Resolved against the config file's directory; absent in the file means the config file's directory.
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}

/// A shop reached over MCP Streamable HTTP. The bearer token itself is never in the config: only
/// the name of the environment variable that holds it, read by the proxy when it starts.
#[derive(Clone, PartialEq, Eq)]
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

/// Arguments and environment values may hold secrets (`--api-key …`): names and counts only.
impl std::fmt::Debug for StdioDownstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioDownstream")
            .field("command", &self.command)
            .field("args", &format_args!("<{} redacted>", self.args.len()))
            .field("cwd", &self.cwd)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Header values may be secrets (`X-Api-Key`) and a query may carry a token: header names and
/// the URL without its query only.
impl std::fmt::Debug for HttpDownstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpDownstream")
            .field("url", &super::redact_url(self.url.as_str()))
            .field("bearer_token_env", &self.bearer_token_env)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
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

impl Cx<'_, '_> {
    pub(super) fn downstream(&self, v: &Value) -> Result<Downstream, Error> {
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
    pub(super) fn not_with(
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

    pub(super) fn stdio_downstream(
        &self,
        obj: &Map<String, Value>,
    ) -> Result<StdioDownstream, Error> {
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

    pub(super) fn http_downstream(
        &self,
        obj: &Map<String, Value>,
    ) -> Result<HttpDownstream, Error> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_header_value_argument_or_environment_value() {
        let http = HttpDownstream {
            url: url::Url::parse("https://shop.example/mcp?token=sekrit-query").unwrap(),
            bearer_token_env: Some("SHOP_TOKEN".into()),
            headers: BTreeMap::from([("X-Api-Key".to_owned(), "sekrit-header".to_owned())]),
        };
        let stdio = StdioDownstream {
            command: Command::Bare("shop".into()),
            args: vec!["--api-key".into(), "sekrit-arg".into()],
            cwd: PathBuf::from("/tmp"),
            env: BTreeMap::from([("SHOP_KEY".to_owned(), "sekrit-env".to_owned())]),
        };
        let shown = format!("{http:?} {stdio:?}");
        assert!(!shown.contains("sekrit"), "{shown}");
        assert!(
            shown.contains("X-Api-Key") && shown.contains("SHOP_KEY"),
            "{shown}"
        );
    }
}

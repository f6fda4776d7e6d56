//! The sections of the config besides the downstream: merchants, caps, approvals, store and test
//! mode.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;

use super::read::{Cx, kind, last_line, push_key};
use super::*;
use crate::Error;
use crate::money::{self, Currency};

impl Cx<'_, '_> {
    pub(super) fn merchants(&self, v: &Value) -> Result<BTreeSet<String>, Error> {
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

    pub(super) fn caps(&self, v: &Value, path: &str) -> Result<BTreeMap<String, Caps>, Error> {
        let obj = self.object(v, path)?;
        let mut out = BTreeMap::new();
        for (code, entry) in obj {
            let cp = push_key(path, code);
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

    pub(super) fn approvals(&self, v: &Value) -> Result<ApprovalPolicy, Error> {
        let p = "$.approvals";
        let obj = self.object(v, p)?;
        self.only(
            obj,
            p,
            &["trusted_keys", "max_ttl_minutes", "web", "require"],
        )?;
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
        let web = obj.get("web").map(|w| self.web(w)).transpose()?;
        let require = match obj.get("require") {
            None => RequiredApproval::Key,
            Some(r) => match self.string(r, "$.approvals.require")? {
                "key" => RequiredApproval::Key,
                "passkey" => RequiredApproval::Passkey,
                "any" => RequiredApproval::Any,
                _ => {
                    return Err(self.err(
                        "$.approvals.require",
                        "must be \"key\" (approver key files), \"passkey\" (passkeys on the approval page) or \"any\"",
                    ));
                }
            },
        };
        // A passkey-only gate without the page could never approve anything: every payment above
        // the approval threshold would block for good. Said at load rather than found at checkout.
        if require == RequiredApproval::Passkey && web.is_none() {
            return Err(self.err(
                "$.approvals.require",
                "is \"passkey\" but approvals.web is not set: add \"web\": {\"listen\": \"127.0.0.1:8377\"} so a human can approve on the page",
            ));
        }
        Ok(ApprovalPolicy {
            trusted_keys,
            max_ttl: Duration::from_secs(minutes * 60),
            web,
            require,
        })
    }

    /// `approvals.web`: `{"listen": "IP:PORT"}` on a loopback address. The page is for the human
    /// at this machine; WebAuthn's origin is `http://localhost:<port>`, which only a loopback
    /// listener serves without TLS, and nothing off the machine should reach it.
    fn web(&self, v: &Value) -> Result<WebPolicy, Error> {
        let p = "$.approvals.web";
        let obj = self.object(v, p)?;
        self.only(obj, p, &["listen"])?;
        let lp = "$.approvals.web.listen";
        let text = self.string(self.required(obj, p, "listen")?, lp)?;
        let Ok(listen) = text.parse::<core::net::SocketAddr>() else {
            return Err(self.err(
                lp,
                "must be a loopback IP and port, like \"127.0.0.1:8377\" or \"[::1]:8377\"",
            ));
        };
        if !listen.ip().is_loopback() {
            return Err(self.err(
                lp,
                "must be a loopback address (127.0.0.1 or ::1): the approval page is for the human at this machine, never the network",
            ));
        }
        if listen.port() == 0 {
            return Err(self.err(
                lp,
                "needs a fixed port (not 0): passkeys are bound to the page's origin http://localhost:<port>",
            ));
        }
        Ok(WebPolicy { listen })
    }

    /// `store`: exactly one of `url` (a `postgres://` URL) or `url_env` (the name of a variable
    /// holding one). Messages never repeat the URL: it may carry a password.
    pub(super) fn store(&self, v: &Value) -> Result<StoreConfig, Error> {
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

    pub(super) fn test_mode(&self, v: &Value) -> Result<TestModePolicy, Error> {
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

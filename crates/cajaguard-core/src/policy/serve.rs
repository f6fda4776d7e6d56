//! The service's sections (SPEC §13): `serve` (listen address, allowed origins, agents, OAuth)
//! and `agent_caps`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::read::{Cx, push_key};
use super::*;
use crate::Error;
use crate::agent::AgentId;

impl Cx<'_, '_> {
    /// Agent caps: the global `caps` shape, each currency also capped globally (an agent's caps
    /// only ever narrow what the global caps allow).
    pub(super) fn agent_caps(
        &self,
        v: &Value,
        path: &str,
        global: &BTreeMap<String, Caps>,
    ) -> Result<BTreeMap<String, Caps>, Error> {
        let caps = self.caps(v, path)?;
        if let Some(code) = caps.keys().find(|code| !global.contains_key(*code)) {
            return Err(self.err(
                &push_key(path, code),
                "has no global caps in $.caps: add the currency to caps first (an agent's caps \
                 only narrow the global ones)",
            ));
        }
        Ok(caps)
    }

    pub(super) fn serve(
        &self,
        v: &Value,
        global: &BTreeMap<String, Caps>,
    ) -> Result<ServePolicy, Error> {
        let p = "$.serve";
        let obj = self.object(v, p)?;
        self.only(obj, p, &["listen", "allowed_origins", "agents", "oauth"])?;
        let lp = "$.serve.listen";
        let text = self.string(self.required(obj, p, "listen")?, lp)?;
        let listen = text.parse::<core::net::SocketAddr>().map_err(|_| {
            self.err(
                lp,
                "must be an IP and port, like \"127.0.0.1:8376\" (put a TLS-terminating proxy in \
                 front for other hosts)",
            )
        })?;
        let mut allowed_origins = BTreeSet::new();
        if let Some(list) = obj.get("allowed_origins") {
            for (i, item) in self
                .array(list, "$.serve.allowed_origins")?
                .iter()
                .enumerate()
            {
                let ip = format!("$.serve.allowed_origins[{i}]");
                allowed_origins.insert(self.origin(self.string(item, &ip)?, &ip)?);
            }
        }
        let mut agents = BTreeMap::new();
        if let Some(list) = obj.get("agents") {
            for (i, item) in self.array(list, "$.serve.agents")?.iter().enumerate() {
                let ap = format!("$.serve.agents[{i}]");
                let entry = self.object(item, &ap)?;
                self.only(entry, &ap, &["name", "caps"])?;
                let np = push_key(&ap, "name");
                let name = AgentId::parse(self.string(self.required(entry, &ap, "name")?, &np)?)
                    .map_err(|e| self.err(&np, e.to_string()))?;
                let caps = match entry.get("caps") {
                    None => None,
                    Some(c) => Some(self.agent_caps(c, &push_key(&ap, "caps"), global)?),
                };
                if agents.insert(name, AgentPolicy { caps }).is_some() {
                    return Err(self.err(&np, "names an agent listed before: list each agent once"));
                }
            }
        }
        let oauth = match obj.get("oauth") {
            None => None,
            Some(o) => Some(self.oauth(o)?),
        };
        Ok(ServePolicy {
            listen,
            allowed_origins,
            agents,
            oauth,
        })
    }

    /// An origin as browsers send it: `scheme://host[:port]`, nothing after.
    fn origin(&self, text: &str, path: &str) -> Result<String, Error> {
        let what = "write an origin as a browser sends it, like \"http://localhost:6274\" (scheme, host, optional port; no path)";
        let url = url::Url::parse(text)
            .map_err(|_| self.err(path, format!("is not an origin: {what}")))?;
        let bare = matches!(url.scheme(), "http" | "https")
            && url.host_str().is_some()
            && url.path() == "/"
            && !text.ends_with('/')
            && url.query().is_none()
            && url.fragment().is_none()
            && url.username().is_empty()
            && url.password().is_none();
        if !bare {
            return Err(self.err(path, format!("is not an origin: {what}")));
        }
        Ok(url.origin().ascii_serialization())
    }

    fn oauth(&self, v: &Value) -> Result<OauthPolicy, Error> {
        let p = "$.serve.oauth";
        let obj = self.object(v, p)?;
        self.only(
            obj,
            p,
            &["issuer", "audience", "jwks_file", "jwks_url", "agent_claim"],
        )?;
        let text = |key: &str| -> Result<String, Error> {
            let kp = push_key(p, key);
            let value = self.string(self.required(obj, p, key)?, &kp)?;
            if value.is_empty() {
                return Err(self.err(&kp, "must not be empty"));
            }
            Ok(value.to_owned())
        };
        let issuer = text("issuer")?;
        let audience = text("audience")?;
        let jwks = match (obj.get("jwks_file"), obj.get("jwks_url")) {
            (Some(_), Some(_)) => {
                return Err(self.err(p, "has both jwks_file and jwks_url: keep one"));
            }
            (None, None) => {
                return Err(self.err(
                    p,
                    "needs jwks_file (a JWKS JSON file) or jwks_url (the issuer's JWKS endpoint)",
                ));
            }
            (Some(file), None) => {
                let fp = "$.serve.oauth.jwks_file";
                JwksSource::File(self.path(self.string(file, fp)?, fp)?)
            }
            (None, Some(url)) => {
                JwksSource::Url(self.jwks_url(self.string(url, "$.serve.oauth.jwks_url")?)?)
            }
        };
        let agent_claim = match obj.get("agent_claim") {
            None => "sub".to_owned(),
            Some(_) => text("agent_claim")?,
        };
        Ok(OauthPolicy {
            issuer,
            audience,
            jwks,
            agent_claim,
        })
    }

    fn jwks_url(&self, text: &str) -> Result<url::Url, Error> {
        let up = "$.serve.oauth.jwks_url";
        let url = url::Url::parse(text).map_err(|e| {
            self.err(
                up,
                format!("is not a URL ({e}): write the issuer's JWKS URL"),
            )
        })?;
        let loopback = match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            _ => false,
        };
        match url.scheme() {
            "https" if url.host().is_some() => Ok(url),
            // Keys fetched in clear text could be swapped on the way; on loopback they never leave
            // the machine. Only IP literals count, as for downstream.url.
            "http" if loopback => Ok(url),
            _ => Err(self.err(
                up,
                "must be https:// (http:// only to 127.0.0.1 or [::1]): the keys that say who an agent is must not travel in clear text",
            )),
        }
    }
}

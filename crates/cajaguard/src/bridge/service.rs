//! Where the service is and how the bridge authenticates: the URL (https, or plain http to a
//! loopback IP only, the rule `downstream.url` follows), the bearer token read once from the
//! environment, and the HTTP client configured for MCP.

use std::ffi::OsString;
use std::time::Duration;

use crate::bearer::BearerToken;
use ureq::http::HeaderValue;

use super::ACCEPT;

/// What stops the bridge before it starts: all fixed on the command line or in the environment.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("--connect {url}: {why}")]
    Url { url: String, why: String },
    #[error("--token-env {0:?} is not the name of an environment variable (letters, digits, `_`)")]
    VarName(String),
    #[error("${0} is not set (or is empty): the bridge reads the service's bearer token from it")]
    MissingToken(String),
    #[error("${0} does not hold a usable bearer token (printable ASCII, no spaces or line breaks)")]
    BadToken(String),
}

impl SetupError {
    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            SetupError::Url { .. } => {
                "pass the service's MCP endpoint, like --connect https://gate.example/mcp (http:// only to 127.0.0.1 or [::1])"
            }
            SetupError::VarName(_) => "name the variable, like --token-env CAJAGUARD_TOKEN",
            SetupError::MissingToken(_) | SetupError::BadToken(_) => {
                "set the variable to the agent's token (`cajaguard agent add <name>` prints it once), in the MCP client's `env` for this server"
            }
        }
    }
}

/// The service, resolved once at start.
pub struct Service {
    pub(super) url: String,
    /// The URL without its query, for messages.
    pub(super) shown: String,
    /// The variable the token came from, and the token.
    token: Option<(String, BearerToken)>,
    pub(super) agent: ureq::Agent,
}

impl Service {
    /// Checks the URL and reads the token from `token_env` (`env` is injected for tests).
    pub fn new(
        url: &str,
        token_env: Option<&str>,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Service, SetupError> {
        let parsed = checked_url(url)?;
        let token = match token_env {
            None => None,
            Some(var) => Some((var.to_owned(), read_token(var, env)?)),
        };
        let loopback = matches!(
            parsed.host(),
            Some(url::Host::Ipv4(ip)) if ip.is_loopback()
        ) || matches!(parsed.host(), Some(url::Host::Ipv6(ip)) if ip.is_loopback());
        let config = ureq::Agent::config_builder()
            // Statuses are MCP signals here (401 token, 404 session gone, 202 accepted).
            .http_status_as_error(false)
            // A redirect would carry the agent's calls and its token somewhere it did not name.
            .max_redirects(0)
            .user_agent(format!("cajaguard/{}", env!("CARGO_PKG_VERSION")))
            .accept(ACCEPT)
            .timeout_connect(Some(Duration::from_secs(10)))
            .max_idle_age(Duration::from_secs(30));
        // A loopback service is never reached through a proxy from the environment.
        let config = if loopback { config.proxy(None) } else { config };
        let mut shown = parsed.clone();
        shown.set_query(None);
        Ok(Service {
            url: parsed.to_string(),
            shown: shown.to_string(),
            token,
            agent: config.build().new_agent(),
        })
    }

    /// The variable the token came from, for messages (never the token).
    pub(super) fn token_var(&self) -> Option<&str> {
        self.token.as_ref().map(|(var, _)| var.as_str())
    }

    /// The `Authorization` header to send, if a token was given.
    pub(super) fn authorization(&self) -> Option<HeaderValue> {
        self.token
            .as_ref()
            .and_then(|(_, token)| token.header_value())
    }
}

/// `https://...`, or `http://` to a loopback IP literal (a name such as `localhost` is whatever
/// the resolver says it is); no user info, no fragment.
fn checked_url(text: &str) -> Result<url::Url, SetupError> {
    let fail = |why: &str| SetupError::Url {
        url: shown_url(text),
        why: why.to_owned(),
    };
    let url = url::Url::parse(text).map_err(|e| fail(&format!("is not a URL ({e})")))?;
    let Some(host) = url.host() else {
        return Err(fail("has no host"));
    };
    match url.scheme() {
        "https" => {}
        "http" => {
            let loopback = match host {
                url::Host::Ipv4(ip) => ip.is_loopback(),
                url::Host::Ipv6(ip) => ip.is_loopback(),
                url::Host::Domain(_) => false,
            };
            if !loopback {
                return Err(fail(
                    "uses plain http:// to a non-loopback address, which would carry the token in clear text: use https://",
                ));
            }
        }
        other => return Err(fail(&format!("has the scheme `{other}`: use https://"))),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(fail(
            "holds a user name or password: remove it and pass the token with --token-env",
        ));
    }
    if url.fragment().is_some() {
        return Err(fail("has a #fragment: remove it"));
    }
    Ok(url)
}

/// The URL as it may be shown: without its query or user info, which may hold credentials.
fn shown_url(text: &str) -> String {
    match url::Url::parse(text) {
        Ok(mut url) => {
            url.set_query(None);
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.to_string()
        }
        Err(_) => cajaguard_core::display::name(text.split(['?', '@']).next().unwrap_or("")),
    }
}

/// Reads the token once. A variable that is unset or empty is an error now, not at the first call.
fn read_token(
    var: &str,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<BearerToken, SetupError> {
    let name_ok = !var.is_empty()
        && !var.starts_with(|c: char| c.is_ascii_digit())
        && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !name_ok {
        return Err(SetupError::VarName(cajaguard_core::display::name(var)));
    }
    let Some(raw) = env(var).filter(|v| !v.is_empty()) else {
        return Err(SetupError::MissingToken(var.to_owned()));
    };
    BearerToken::from_env_value(raw).ok_or_else(|| SetupError::BadToken(var.to_owned()))
}

/// Names the variable, never the token.
impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("url", &self.shown)
            .field("token_env", &self.token_var())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(url: &str) -> Result<Service, SetupError> {
        Service::new(url, None, |_| None)
    }

    #[test]
    fn https_anywhere_and_http_only_to_a_loopback_ip() {
        assert!(service("https://gate.example/mcp").is_ok());
        assert!(service("http://127.0.0.1:8376/mcp").is_ok());
        assert!(service("http://[::1]:8376/mcp").is_ok());
        for bad in [
            "http://localhost:8376/mcp",
            "http://10.0.0.2/mcp",
            "ftp://gate.example/mcp",
            "https://user:pw@gate.example/mcp",
            "https://gate.example/mcp#x",
            "not a url",
        ] {
            let err = service(bad).err().unwrap();
            assert!(matches!(err, SetupError::Url { .. }), "{bad}: {err}");
            assert!(!err.to_string().contains("pw@"), "{err}");
        }
        let shown = service("https://gate.example/mcp?key=sekrit").unwrap();
        assert_eq!(shown.shown, "https://gate.example/mcp");
    }

    #[test]
    fn the_token_comes_from_the_variable_and_never_shows() {
        let url = "https://gate.example/mcp";
        let err = Service::new(url, Some("CG_TOKEN"), |_| None).err().unwrap();
        assert!(matches!(err, SetupError::MissingToken(_)));
        assert!(err.to_string().contains("$CG_TOKEN"), "{err}");
        let err = Service::new(url, Some("CG_TOKEN"), |_| Some("".into()))
            .err()
            .unwrap();
        assert!(matches!(err, SetupError::MissingToken(_)));
        let secret = "cg_agent_0123456789";
        let err = Service::new(url, Some("CG_TOKEN"), |_| {
            Some(format!("{secret}\n").into())
        })
        .err()
        .unwrap();
        assert!(matches!(err, SetupError::BadToken(_)));
        assert!(!err.to_string().contains(secret), "{err}");
        let err = Service::new(url, Some("1-BAD"), |_| Some(secret.into()))
            .err()
            .unwrap();
        assert!(matches!(err, SetupError::VarName(_)));
        let ok = Service::new(url, Some("CG_TOKEN"), |v| {
            (v == "CG_TOKEN").then(|| secret.into())
        })
        .unwrap();
        assert_eq!(ok.token_var(), Some("CG_TOKEN"));
        let header = ok.authorization().unwrap();
        assert_eq!(header.to_str().unwrap(), format!("Bearer {secret}"));
        assert!(!format!("{header:?}").contains(secret));
        assert!(!format!("{ok:?}").contains(secret));
    }
}

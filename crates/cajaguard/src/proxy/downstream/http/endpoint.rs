//! Where the shop is and how to authenticate: the URL, the extra headers and the bearer token read
//! from the environment once at start, and the HTTP client configured for MCP.

use std::ffi::OsString;
use std::time::Duration;

use crate::bearer::BearerToken;
use cajaguard_core::policy::HttpDownstream;
use ureq::http::HeaderValue;

use super::super::{ShopError, names_only};
use super::ACCEPT;

/// The largest status line and headers a shop may answer with: 32 KiB is far beyond what an MCP
/// endpoint sends (nginx refuses a request whose header line is over 8 KiB).
const SHOP_INPUT_BUFFER: usize = 32 * 1024;
/// Holds the request's headers; its body passes through in pieces of this size.
const SHOP_OUTPUT_BUFFER: usize = 16 * 1024;

/// Where the shop is and how to authenticate, resolved once at start.
pub struct Endpoint {
    pub(super) url: String,
    /// The URL without its query, for messages.
    pub(super) shown: String,
    /// The variable the token came from, and the token.
    token: Option<(String, BearerToken)>,
    /// `downstream.headers`: their values may be credentials too (`X-Api-Key`).
    pub(super) headers: Vec<(String, String)>,
    pub(super) agent: ureq::Agent,
    /// Finishes event streams after their answers, so that `agent` can use their connections again.
    pub(super) drain: super::drain::Drain,
}

impl Endpoint {
    /// Reads the bearer token from the environment (`env` is injected for tests). A variable that
    /// is named but unset is an error now, not at the first call.
    pub fn from_policy(
        http: &HttpDownstream,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Endpoint, ShopError> {
        let token = match &http.bearer_token_env {
            None => None,
            Some(var) => {
                let Some(raw) = env(var).filter(|v| !v.is_empty()) else {
                    return Err(ShopError::MissingToken(var.clone()));
                };
                let token = BearerToken::from_env_value(raw)
                    .ok_or_else(|| ShopError::BadToken(var.clone()))?;
                Some((var.clone(), token))
            }
        };
        let loopback = match http.url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            _ => false,
        };
        let config = ureq::Agent::config_builder()
            // Statuses are MCP signals here (404 session gone, 401 token, 429 slow down).
            .http_status_as_error(false)
            // A redirect would carry the payment call and the token somewhere the config does not name.
            .max_redirects(0)
            .user_agent(format!("cajaguard/{}", env!("CARGO_PKG_VERSION")))
            .accept(ACCEPT)
            .max_idle_age(Duration::from_secs(30))
            // Buffers are allocated (and zeroed) per connection: ureq's 128 KiB each way cost
            // the relay tens of microseconds per new connection. Bodies stream through them in
            // pieces; only the answer's status line and headers must fit whole.
            .input_buffer_size(SHOP_INPUT_BUFFER)
            .max_response_header_size(SHOP_INPUT_BUFFER)
            .output_buffer_size(SHOP_OUTPUT_BUFFER);
        // A loopback endpoint is never reached through a proxy from the environment.
        let config = if loopback { config.proxy(None) } else { config };
        let mut shown = http.url.clone();
        shown.set_query(None);
        Ok(Endpoint {
            url: http.url.to_string(),
            shown: shown.to_string(),
            token,
            headers: http
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            drain: super::drain::Drain::default(),
            agent: ureq::Agent::with_parts(
                config.build(),
                ureq::unversioned::transport::DefaultConnector::default(),
                LiteralFirst,
            ),
        })
    }

    pub(super) fn token_var(&self) -> Option<String> {
        self.token.as_ref().map(|(var, _)| var.clone())
    }

    /// The `Authorization` header to send, if the config names a token.
    pub(super) fn authorization(&self) -> Option<HeaderValue> {
        self.token
            .as_ref()
            .and_then(|(_, token)| token.header_value())
    }
}

/// Names the variable and the header names, never a value: a header such as `X-Api-Key` holds a
/// credential as surely as the token does.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.shown)
            .field("bearer_token_env", &self.token_var())
            .field("headers", &names_only(&self.headers))
            .finish_non_exhaustive()
    }
}

/// ureq's resolver, except that an IP address in the URL is used as it is. ureq resolves on a
/// thread of its own whenever a timeout applies (every call here has one), even an IP literal:
/// a thread started and joined for each new connection, which on a loopback shop whose event
/// streams end late (so no connection is reused) was a thread per forwarded call.
#[derive(Debug)]
struct LiteralFirst;

impl ureq::unversioned::resolver::Resolver for LiteralFirst {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let literal = uri.host().and_then(|host| {
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .ok()
        });
        let port = uri.port_u16().or_else(|| match uri.scheme_str() {
            Some("https") => Some(443),
            Some("http") => Some(80),
            _ => None,
        });
        if let (Some(ip), Some(port)) = (literal, port) {
            let mut addrs = self.empty();
            addrs.push(std::net::SocketAddr::new(ip, port));
            return Ok(addrs);
        }
        ureq::unversioned::resolver::DefaultResolver::default().resolve(uri, config, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn downstream(var: Option<&str>) -> HttpDownstream {
        HttpDownstream {
            url: url::Url::parse("http://127.0.0.1:9/mcp?k=v").unwrap(),
            bearer_token_env: var.map(str::to_owned),
            headers: Default::default(),
        }
    }

    #[test]
    fn the_token_comes_from_the_environment_and_never_shows() {
        let err = Endpoint::from_policy(&downstream(Some("SHOP_TOKEN")), |_| None)
            .err()
            .unwrap();
        assert!(matches!(err, ShopError::MissingToken(_)));
        assert!(err.to_string().contains("$SHOP_TOKEN"), "{err}");
        let secret = "shpat_0123456789abcdef";
        let bad = format!("{secret}\n");
        let err = Endpoint::from_policy(&downstream(Some("SHOP_TOKEN")), |_| {
            Some(bad.clone().into())
        })
        .err()
        .unwrap();
        assert!(matches!(err, ShopError::BadToken(_)));
        assert!(!err.to_string().contains(secret), "{err}");
        let endpoint =
            Endpoint::from_policy(&downstream(Some("SHOP_TOKEN")), |_| Some(secret.into()))
                .unwrap();
        assert_eq!(endpoint.shown, "http://127.0.0.1:9/mcp");
        let header = endpoint.authorization().unwrap();
        assert!(!format!("{header:?}").contains(secret));
        let refused = ShopError::Unauthorized {
            status: 401,
            var: endpoint.token_var(),
        };
        assert_eq!(
            refused.to_string(),
            "the shop refused the token in $SHOP_TOKEN (401): check it (and that it may use the UCP MCP endpoint)"
        );
    }

    #[test]
    fn debug_names_headers_and_the_variable_but_shows_no_value() {
        let mut http = downstream(Some("SHOP_TOKEN"));
        http.headers
            .insert("X-Api-Key".into(), "key_live_0123456789".into());
        let endpoint = Endpoint::from_policy(&http, |_| Some("shpat_secret_token".into())).unwrap();
        let shown = format!("{endpoint:?}");
        assert!(
            shown.contains("X-Api-Key") && shown.contains("SHOP_TOKEN"),
            "{shown}"
        );
        assert!(!shown.contains("key_live_0123456789"), "{shown}");
        assert!(!shown.contains("shpat_secret_token"), "{shown}");
        assert!(!shown.contains("k=v"), "the query is not shown: {shown}");
    }

    #[test]
    fn an_ip_literal_is_its_own_address_without_a_lookup() {
        use ureq::unversioned::resolver::Resolver;
        use ureq::unversioned::transport::NextTimeout;
        use ureq::unversioned::transport::time::Duration as Budget;
        let config = ureq::config::Config::default();
        // A budget already spent: ureq's own resolver would start its lookup thread and could
        // report a timeout; a literal needs no lookup at all.
        let spent = || NextTimeout {
            after: Budget::Exact(Duration::ZERO),
            reason: ureq::Timeout::Resolve,
            per_read: None,
            per_write: None,
        };
        for (url, want) in [
            ("http://127.0.0.1:8080/mcp", "127.0.0.1:8080"),
            ("http://127.0.0.1/mcp", "127.0.0.1:80"),
            ("https://[::1]:9443/mcp", "[::1]:9443"),
        ] {
            let uri: ureq::http::Uri = url.parse().unwrap();
            let addrs = LiteralFirst.resolve(&uri, &config, spent()).unwrap();
            let got: Vec<String> = addrs.iter().map(ToString::to_string).collect();
            assert_eq!(got, [want], "{url}");
        }
    }
}

//! `cajaguard serve` (SPEC §13): the gate as an MCP Streamable HTTP server for many agents.
//!
//! Every request is authenticated to an agent (a token from `cajaguard agent add`, or an OAuth
//! access token) before anything else reads it; the agent's session is a [`Proxy`] session on the
//! process's one shop link, so the gate, the relay and the store are exactly `cajaguard mcp`'s,
//! with the agent's id in every decision. `http.rs` is the axum shell; `session.rs` routes a
//! session's answers back to the request that asked.

pub(crate) mod connections;
mod http;
pub mod oauth;
mod session;
mod tokens;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cajaguard_core::agent::AgentId;
use cajaguard_core::policy::{Policy, ServePolicy};

use crate::proxy::Proxy;
pub use http::serve;
use session::Session;
pub use tokens::TOKEN_RECHECK;
use tokens::Tokens;

/// The most sessions (legacy eras) one agent may hold; its oldest idle one goes first.
pub const MAX_SESSIONS_PER_AGENT: usize = 32;
/// The most sessions in all: a new one beyond it is refused (503) until others end or expire.
pub const MAX_SESSIONS: usize = 4096;
/// The most messages one agent may have in flight at once, over all its sessions: beyond it, 503.
/// One agent cannot take every thread and connection the others need.
pub const MAX_IN_FLIGHT_PER_AGENT: usize = 64;
/// The most messages in flight in all.
pub const MAX_IN_FLIGHT: usize = 512;

/// A session unused this long is forgotten (the client starts a new one with `initialize`).
pub const SESSION_IDLE: Duration = Duration::from_secs(3600);

/// What an OAuth subject's agent id starts with (`oauth:<claim>`); `agent add` refuses it.
pub const OAUTH_PREFIX: &str = cajaguard_core::agent::OAUTH_PREFIX;

/// Checks an OAuth access token at a time (Unix seconds): the agent claim's value, or why not.
/// Made from `serve.oauth` by the CLI (`service::oauth`), injected so tests choose the clock.
pub type VerifyJwt = dyn Fn(&str, i64) -> Result<String, String> + Send + Sync;

/// Why a request has no agent: each is a 401 with `WWW-Authenticate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unauthenticated {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A token this gate does not know, or one that fails verification (the reason, for the
    /// log; never the token).
    Invalid(String),
}

pub struct Service {
    base: Arc<Proxy>,
    serve: ServePolicy,
    jwt: Option<Box<VerifyJwt>>,
    clock: crate::proxy::Clock,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The store's connection for token lookups, apart from the gate's: a lookup never waits
    /// behind a payment's transactions (nor, on PostgreSQL, behind the currency lock another
    /// host holds), and a payment never waits behind a lookup. `None`: the gate's own.
    tokens: Option<crate::store::Store>,
    /// Agent tokens the store confirmed less than [`TOKEN_RECHECK`] ago.
    confirmed: Tokens,
    /// Messages in flight, per agent and in all (see [`Service::admit`]).
    in_flight: Arc<Mutex<InFlight>>,
}

#[derive(Default)]
struct InFlight {
    total: usize,
    by_agent: HashMap<AgentId, usize>,
}

/// One admitted message; dropping it lets the next in.
pub struct Admitted {
    in_flight: Arc<Mutex<InFlight>>,
    agent: AgentId,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut counts = lock(&self.in_flight);
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.by_agent.get_mut(&self.agent) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.by_agent.remove(&self.agent);
            }
        }
    }
}

impl Service {
    /// `base` is the process's proxy (its shop link started); `jwt` checks OAuth tokens when
    /// `serve.oauth` is configured.
    pub fn new(
        base: Arc<Proxy>,
        policy: Arc<Policy>,
        jwt: Option<Box<VerifyJwt>>,
        clock: crate::proxy::Clock,
    ) -> Result<Service, String> {
        let Some(serve) = policy.serve.clone() else {
            return Err("the config has no serve object (SPEC §13)".to_owned());
        };
        let tokens = match crate::store::Store::for_policy(&policy) {
            Ok(store) => Some(store),
            Err(e) => {
                tracing::warn!(error = %e, "no second store connection for token lookups; they share the gate's");
                None
            }
        };
        Ok(Service {
            base,
            serve,
            jwt,
            clock,
            sessions: Mutex::new(HashMap::new()),
            tokens,
            confirmed: Tokens::new(Arc::new(Instant::now)),
            in_flight: Arc::default(),
        })
    }

    /// Lets one more message of `agent` in, unless it has [`MAX_IN_FLIGHT_PER_AGENT`] in flight
    /// already or the service [`MAX_IN_FLIGHT`].
    pub fn admit(&self, agent: &AgentId) -> Option<Admitted> {
        admit(&self.in_flight, agent)
    }

    fn serve_policy(&self) -> &ServePolicy {
        &self.serve
    }

    /// MCP's defence against DNS rebinding: a browser's request names its origin, and only the
    /// configured ones may call. A request without `Origin` is not from a page.
    pub fn origin_allowed(&self, origin: Option<&str>) -> bool {
        match origin {
            None => true,
            Some(origin) => {
                let origin = origin.trim().to_ascii_lowercase();
                self.serve_policy().allowed_origins.contains(&origin)
            }
        }
    }

    /// What can be decided about an `Authorization` header value without blocking: a missing or
    /// malformed one, or an agent token the store confirmed less than [`TOKEN_RECHECK`] ago.
    /// `None`: the store (or the OAuth check, which may fetch keys) must answer, through
    /// [`Service::authenticate`] on a thread that may block.
    pub fn authenticate_at_once(
        &self,
        authorization: Option<&str>,
    ) -> Option<Result<AgentId, Unauthenticated>> {
        match bearer(authorization) {
            Err(why) => Some(Err(why)),
            Ok(Credential::Jwt(_)) if self.jwt.is_none() => Some(Err(jwt_unconfigured())),
            Ok(Credential::Jwt(_)) => None,
            Ok(Credential::AgentToken(token)) => self.confirmed.cached(token).map(Ok),
        }
    }

    /// The agent an `Authorization` header value names. May block: an agent token the store has
    /// not confirmed within [`TOKEN_RECHECK`] is looked up in it.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<AgentId, Unauthenticated> {
        let token = match bearer(authorization)? {
            Credential::Jwt(token) => return self.authenticate_jwt(token),
            Credential::AgentToken(token) => token,
        };
        if let Some(agent) = self.confirmed.cached(token) {
            return Ok(agent);
        }
        let store = self.tokens.as_ref().unwrap_or_else(|| self.base.store());
        match self
            .confirmed
            .look_up(token, |token| store.agent_by_token(token))
        {
            Ok(Some(agent)) => Ok(agent),
            Ok(None) => Err(Unauthenticated::Invalid(
                "no agent has this token (removed, or never made by `cajaguard agent add`)"
                    .to_owned(),
            )),
            Err(e) => {
                // Fail closed: a store that cannot answer authenticates no one.
                tracing::error!(error = %e, "cannot read agent tokens");
                Err(Unauthenticated::Invalid(
                    "the store could not check the token".to_owned(),
                ))
            }
        }
    }

    fn authenticate_jwt(&self, token: &str) -> Result<AgentId, Unauthenticated> {
        let Some(jwt) = &self.jwt else {
            return Err(jwt_unconfigured());
        };
        let now = (self.clock)().unix_timestamp();
        let claim = jwt(token, now).map_err(Unauthenticated::Invalid)?;
        // OAuth subjects live in their own namespace: a token's claim `ci-bot` must never
        // become the agent `cajaguard agent add ci-bot` made (its caps, window, approvals).
        AgentId::parse(&format!("{OAUTH_PREFIX}{claim}")).map_err(|e| {
            Unauthenticated::Invalid(format!("the token's agent claim is unusable: {e}"))
        })
    }

    /// A new session for `agent` (legacy eras, after `initialize`): its id, or `None` when the
    /// service holds [`MAX_SESSIONS`] already.
    fn open_session(&self, agent: &AgentId) -> Option<(String, Arc<Session>)> {
        let mut sessions = lock(&self.sessions);
        let now = Instant::now();
        sessions.retain(|_, s| now.duration_since(s.idle_since()) < SESSION_IDLE);
        let mut own: Vec<(String, Instant)> = sessions
            .iter()
            .filter(|(_, s)| s.agent == *agent)
            .map(|(id, s)| (id.clone(), s.idle_since()))
            .collect();
        if own.len() >= MAX_SESSIONS_PER_AGENT {
            own.sort_by_key(|(_, at)| *at);
            for (id, _) in own.iter().take(own.len() + 1 - MAX_SESSIONS_PER_AGENT) {
                sessions.remove(id);
            }
        }
        if sessions.len() >= MAX_SESSIONS {
            return None;
        }
        let id = session_id()?;
        let session = Session::new(&self.base, agent.clone());
        sessions.insert(id.clone(), session.clone());
        Some((id, session))
    }

    /// The session `id` if it is `agent`'s (another agent's session reads as unknown).
    fn session(&self, id: &str, agent: &AgentId) -> Option<Arc<Session>> {
        let sessions = lock(&self.sessions);
        let session = sessions.get(id).filter(|s| s.agent == *agent)?.clone();
        session.touch();
        Some(session)
    }

    /// Ends session `id` if it is `agent`'s; `false` when there was none.
    fn end_session(&self, id: &str, agent: &AgentId) -> bool {
        let mut sessions = lock(&self.sessions);
        if sessions.get(id).is_some_and(|s| s.agent == *agent) {
            sessions.remove(id);
            return true;
        }
        false
    }

    /// A session for one request of the stateless era (2026-07-28): nothing outlives it.
    fn one_shot(&self, agent: &AgentId) -> Arc<Session> {
        Session::new(&self.base, agent.clone())
    }

    /// The RFC 9728 resource this gate is: `serve.oauth.audience` when configured.
    fn resource(&self, host: Option<&str>) -> String {
        match &self.serve_policy().oauth {
            Some(oauth) => oauth.audience.clone(),
            None => format!(
                "http://{}/mcp",
                host.unwrap_or(&self.serve_policy().listen.to_string())
            ),
        }
    }

    fn issuer(&self) -> Option<&str> {
        self.serve_policy()
            .oauth
            .as_ref()
            .map(|o| o.issuer.as_str())
    }

    pub fn base(&self) -> &Arc<Proxy> {
        &self.base
    }
}

/// What an `Authorization` header carries.
enum Credential<'a> {
    /// Three dot-separated parts: an OAuth access token.
    Jwt(&'a str),
    /// Anything else (`cg_agent_...`): looked up by its SHA-256.
    AgentToken(&'a str),
}

fn bearer(authorization: Option<&str>) -> Result<Credential<'_>, Unauthenticated> {
    let Some(value) = authorization else {
        return Err(Unauthenticated::Missing);
    };
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(Unauthenticated::Missing)?;
    if token.len() > 16 * 1024 {
        return Err(Unauthenticated::Invalid(
            "the token is over 16 KiB".to_owned(),
        ));
    }
    // A JWT has three dot-separated parts; an agent token (`cg_agent_...`) has none.
    if token.split('.').count() == 3 {
        return Ok(Credential::Jwt(token));
    }
    Ok(Credential::AgentToken(token))
}

fn jwt_unconfigured() -> Unauthenticated {
    Unauthenticated::Invalid("a JWT, but serve.oauth is not configured".to_owned())
}

fn admit(in_flight: &Arc<Mutex<InFlight>>, agent: &AgentId) -> Option<Admitted> {
    let mut counts = lock(in_flight);
    let own = counts.by_agent.get(agent).copied().unwrap_or(0);
    if own >= MAX_IN_FLIGHT_PER_AGENT || counts.total >= MAX_IN_FLIGHT {
        return None;
    }
    counts.total += 1;
    counts.by_agent.insert(agent.clone(), own + 1);
    Some(Admitted {
        in_flight: in_flight.clone(),
        agent: agent.clone(),
    })
}

/// 128 random bits, hex: unguessable, and visible ASCII as `Mcp-Session-Id` requires.
fn session_id() -> Option<String> {
    let mut bytes = [0u8; 16];
    match getrandom::fill(&mut bytes) {
        Ok(()) => Some(hex::encode(bytes)),
        Err(e) => {
            tracing::error!(error = %e, "no randomness for a session id");
            None
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_agent_cannot_take_every_slot_and_slots_come_back() {
        let in_flight = Arc::new(Mutex::new(InFlight::default()));
        let greedy = AgentId::parse("greedy").unwrap();
        let other = AgentId::parse("other").unwrap();
        let held: Vec<Admitted> = (0..MAX_IN_FLIGHT_PER_AGENT)
            .map(|_| admit(&in_flight, &greedy).unwrap())
            .collect();
        assert!(admit(&in_flight, &greedy).is_none(), "over its own limit");
        assert!(
            admit(&in_flight, &other).is_some(),
            "another agent still gets in"
        );
        drop(held);
        assert!(
            admit(&in_flight, &greedy).is_some(),
            "slots come back when answers go"
        );
        assert_eq!(lock(&in_flight).total, 0, "every guard gave its slot back");
    }

    #[test]
    fn the_service_as_a_whole_is_bounded() {
        let in_flight = Arc::new(Mutex::new(InFlight::default()));
        let mut held = Vec::new();
        for i in 0..MAX_IN_FLIGHT {
            let agent = AgentId::parse(&format!("a{}", i % 100)).unwrap();
            held.push(admit(&in_flight, &agent).unwrap());
        }
        assert!(admit(&in_flight, &AgentId::parse("late").unwrap()).is_none());
    }
}

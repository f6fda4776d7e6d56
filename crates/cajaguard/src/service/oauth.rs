//! OAuth 2.1 access tokens for `cajaguard serve` (SPEC §13): a JWT from the team's issuer,
//! checked against the issuer's JWKS, names the agent a request belongs to.
//!
//! What is checked, in order: the token's size and shape; the header's `alg`, from an allow-list
//! (ES256, EdDSA over Ed25519, RS256: never `none`, never HMAC, refused before any key is looked
//! at); the key (`kid` picks it when present, and its type, and its own `alg` if it states one,
//! must fit the token's `alg`); the signature; then the claims against the injected clock:
//! `iss` equal to the issuer, `aud` (a string or an array) containing the audience, `exp`
//! required and not past, `nbf` if present not ahead, each with [`CLOCK_LEEWAY_SECS`] of slack;
//! last the agent claim, which must be a string and is returned as it is (the caller checks it
//! is an agent name).
//!
//! `jsonwebtoken` (its RustCrypto backend) checks the signature and nothing else: its `decode`
//! reads the system clock for `exp`/`nbf` and parses the claims its own way, so it is not used;
//! the header, the allow-list, the key choice and the claims are checked here, against `now_unix`.
//!
//! Architecture invariant: [`TokenVerifier::verify`] never reads the clock; the time is passed in.
//! Architecture invariant: a key comes only from the configured JWKS, never from the token
//! (`jwk`, `jku`, `x5u` and `x5c` header parameters are ignored).

use std::fmt;
use std::io::Read;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Seconds of clock skew allowed between this host and the issuer, on `exp` and `nbf`.
pub const CLOCK_LEEWAY_SECS: i64 = 30;
/// A longer `Authorization` value is refused before it is parsed.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// A larger JWKS (file or URL) is refused.
pub const MAX_JWKS_BYTES: u64 = 1024 * 1024;
/// A JWKS with more usable keys is refused: a token without `kid` is tried under each of them.
pub const MAX_KEYS: usize = 32;
/// The JWKS URL is re-fetched on an unknown `kid` at most this often.
pub const JWKS_REFETCH_SECS: i64 = 60;
/// The whole fetch of a JWKS URL (connect, TLS, headers, body) must fit in this.
pub const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The claim that names the agent unless the config says otherwise.
pub const DEFAULT_AGENT_CLAIM: &str = "sub";

/// RSA moduli outside this range (in bits) are skipped: smaller is weak, larger is slow to check.
const RSA_MIN_BITS: usize = 2048;
const RSA_MAX_BITS: usize = 4096;

/// The `serve.oauth` part of the config, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OauthSettings {
    /// `iss` must equal this exactly.
    pub issuer: String,
    /// `aud` must contain this (the gate's resource URL).
    pub audience: String,
    pub jwks: JwksSource,
    /// The claim whose (string) value is the agent's name: [`DEFAULT_AGENT_CLAIM`] unless set.
    pub agent_claim: String,
}

impl OauthSettings {
    /// Settings with the default agent claim (`sub`).
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>, jwks: JwksSource) -> Self {
        OauthSettings {
            issuer: issuer.into(),
            audience: audience.into(),
            jwks,
            agent_claim: DEFAULT_AGENT_CLAIM.to_owned(),
        }
    }
}

/// Where the issuer's public keys are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// `jwks_file`: read once, at start.
    File(PathBuf),
    /// `jwks_url`: `https://`, or `http://` to a loopback IP literal; fetched at start and again
    /// (rate-limited) when a token names a `kid` the keys do not have.
    Url(url::Url),
}

impl fmt::Display for JwksSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwksSource::File(path) => write!(f, "jwks_file {}", path.display()),
            JwksSource::Url(url) => write!(f, "jwks_url {}", shown_url(url)),
        }
    }
}

/// A URL for messages: without credentials, query or fragment.
fn shown_url(url: &url::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// The config or the JWKS is unusable: `serve` does not start.
#[derive(Debug, thiserror::Error)]
pub enum OauthError {
    #[error("serve.oauth.{0} is empty: set it (see SPEC §13)")]
    EmptySetting(&'static str),
    #[error(
        "jsonwebtoken has no single crypto backend: this build enabled both or neither of its \
         rust_crypto and aws_lc_rs features; build cajaguard with rust_crypto only"
    )]
    NoCryptoBackend,
    #[error(
        "the JWKS URL {0} is refused: use https://, or http:// only to a loopback address \
         such as 127.0.0.1 or [::1]"
    )]
    InsecureJwksUrl(String),
    #[error("cannot read the JWKS ({source_name}): {reason}; check the path and its permissions")]
    JwksRead { source_name: String, reason: String },
    #[error(
        "cannot fetch the JWKS ({source_name}): {reason}; check the URL and that the issuer is up"
    )]
    JwksFetch { source_name: String, reason: String },
    #[error(
        "the JWKS ({source_name}) is not a JWK set: {reason}; it must be a JSON object with a \
         \"keys\" array (RFC 7517)"
    )]
    JwksParse { source_name: String, reason: String },
    #[error(
        "the JWKS ({source_name}) has no usable key: only EC P-256 (ES256), OKP Ed25519 (EdDSA) \
         and RSA 2048-4096 bit (RS256) signing keys are used, and {skipped} other key(s) were skipped"
    )]
    NoUsableKeys { source_name: String, skipped: usize },
    #[error(
        "the JWKS ({source_name}) has {count} usable keys, more than {MAX_KEYS}: publish only the \
         keys in use"
    )]
    TooManyKeys { source_name: String, count: usize },
}

/// Why a token was refused. A 401 for the agent in every case; the variants say what to fix.
/// No message carries the token or a claim's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRejected {
    #[error("the access token is longer than {MAX_TOKEN_BYTES} bytes")]
    TooLong,
    #[error("the access token is not a JWS compact JWT: {0}")]
    Malformed(&'static str),
    /// The header's `alg` (shortened, printable ASCII only) is not ES256, EdDSA or RS256.
    #[error("the access token's alg {0:?} is refused: only ES256, EdDSA and RS256 are accepted")]
    Algorithm(String),
    #[error("the access token's header names a critical extension (crit), which is not supported")]
    CriticalHeader,
    /// The token's `kid` is not in the JWKS (after a re-fetch, if one was allowed), or the token
    /// has no `kid` and the JWKS has no key for its `alg`.
    #[error("the access token's signing key is not in the issuer's JWKS")]
    UnknownKey,
    /// The key the `kid` names is of another type (or states another `alg`) than the token's `alg`.
    #[error("the access token's alg does not fit the key its kid names")]
    KeyMismatch,
    #[error("the access token's signature does not verify under the issuer's keys")]
    Signature,
    #[error("the access token is from another issuer (iss)")]
    Issuer,
    #[error("the access token is for another audience (aud)")]
    Audience,
    #[error("the access token has expired (exp)")]
    Expired,
    #[error("the access token is not valid yet (nbf)")]
    NotYetValid,
    /// The claim's name (from the config or the spec), never a value.
    #[error("the access token has no {0} claim")]
    MissingClaim(String),
    /// The claim's name: it is there but of the wrong type (`exp` not a number, the agent claim
    /// not a string...), or an agent claim that is empty or only white space.
    #[error("the access token's {0} claim has the wrong type or is empty")]
    InvalidClaim(String),
}

impl TokenRejected {
    /// A short fixed text for `WWW-Authenticate`'s `error_description`: nothing from the token.
    pub fn description(&self) -> &'static str {
        match self {
            TokenRejected::TooLong => "token too long",
            TokenRejected::Malformed(_) => "malformed token",
            TokenRejected::Algorithm(_) => "algorithm not accepted",
            TokenRejected::CriticalHeader => "unsupported critical header",
            TokenRejected::UnknownKey => "unknown signing key",
            TokenRejected::KeyMismatch => "algorithm does not fit the key",
            TokenRejected::Signature => "bad signature",
            TokenRejected::Issuer => "wrong issuer",
            TokenRejected::Audience => "wrong audience",
            TokenRejected::Expired => "token expired",
            TokenRejected::NotYetValid => "token not yet valid",
            TokenRejected::MissingClaim(_) => "missing claim",
            TokenRejected::InvalidClaim(_) => "claim of the wrong type or empty",
        }
    }
}

/// The algorithms a token may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alg {
    Es256,
    EdDsa,
    Rs256,
}

impl Alg {
    /// The header's `alg`, from the allow-list; everything else (`none`, `HS256`...) is refused.
    fn from_header(alg: &str) -> Result<Alg, TokenRejected> {
        match alg {
            "ES256" => Ok(Alg::Es256),
            "EdDSA" => Ok(Alg::EdDsa),
            "RS256" => Ok(Alg::Rs256),
            other => Err(TokenRejected::Algorithm(shown_alg(other))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Alg::Es256 => "ES256",
            Alg::EdDsa => "EdDSA",
            Alg::Rs256 => "RS256",
        }
    }

    fn jwt(self) -> Algorithm {
        match self {
            Alg::Es256 => Algorithm::ES256,
            Alg::EdDsa => Algorithm::EdDSA,
            Alg::Rs256 => Algorithm::RS256,
        }
    }
}

/// At most 16 printable ASCII characters of a token's `alg`, for a message.
fn shown_alg(alg: &str) -> String {
    let mut shown: String = alg
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(16)
        .collect();
    if alg.chars().count() > shown.len() {
        shown.push('…');
    }
    shown
}

/// One public key from the JWKS, checked at load.
struct VerifyKey {
    kid: Option<String>,
    alg: Alg,
    key: DecodingKey,
}

/// The usable keys of one JWKS.
struct KeySet {
    keys: Vec<VerifyKey>,
}

/// A JWK as it is read: every member optional, so a key of a type we do not use is skipped, not
/// an error for the whole set.
#[derive(Deserialize)]
struct RawJwk {
    kty: Option<String>,
    crv: Option<String>,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    key_use: Option<String>,
    key_ops: Option<Vec<String>>,
    x: Option<String>,
    y: Option<String>,
    n: Option<String>,
    e: Option<String>,
}

#[derive(Deserialize)]
struct RawJwks {
    keys: Vec<Value>,
}

/// Parses a JWKS; keys of other types (or malformed keys) are skipped and counted.
fn parse_jwks(bytes: &[u8], source: &JwksSource) -> Result<KeySet, OauthError> {
    let parse_error = |reason: String| OauthError::JwksParse {
        source_name: source.to_string(),
        reason,
    };
    let raw: RawJwks = serde_json::from_slice(bytes).map_err(|e| parse_error(e.to_string()))?;
    let mut keys = Vec::new();
    let mut skipped = 0;
    for value in raw.keys {
        let usable = serde_json::from_value::<RawJwk>(value)
            .ok()
            .and_then(|jwk| usable_key(&jwk));
        match usable {
            Some(key) => keys.push(key),
            None => skipped += 1,
        }
    }
    if keys.is_empty() {
        return Err(OauthError::NoUsableKeys {
            source_name: source.to_string(),
            skipped,
        });
    }
    if keys.len() > MAX_KEYS {
        return Err(OauthError::TooManyKeys {
            source_name: source.to_string(),
            count: keys.len(),
        });
    }
    if skipped > 0 {
        tracing::info!(
            "the JWKS ({source}) has {} usable key(s); {skipped} key(s) of other types were skipped",
            keys.len()
        );
    }
    Ok(KeySet { keys })
}

fn b64_len(field: &Option<String>) -> Option<usize> {
    let bytes = URL_SAFE_NO_PAD.decode(field.as_deref()?).ok()?;
    Some(bytes.len())
}

/// A signing key of a type we verify with, or `None` (skipped).
fn usable_key(jwk: &RawJwk) -> Option<VerifyKey> {
    if jwk.key_use.as_deref().is_some_and(|u| u != "sig") {
        return None;
    }
    if let Some(ops) = &jwk.key_ops
        && !ops.iter().any(|op| op == "verify")
    {
        return None;
    }
    let (alg, key) = match (jwk.kty.as_deref()?, jwk.crv.as_deref()) {
        ("EC", Some("P-256")) => {
            if b64_len(&jwk.x)? != 32 || b64_len(&jwk.y)? != 32 {
                return None;
            }
            let key = DecodingKey::from_ec_components(jwk.x.as_deref()?, jwk.y.as_deref()?).ok()?;
            (Alg::Es256, key)
        }
        ("OKP", Some("Ed25519")) => {
            // Exactly 32 bytes: the crate's Ed25519 verifier slices the first 32 and would panic
            // on fewer.
            if b64_len(&jwk.x)? != 32 {
                return None;
            }
            (
                Alg::EdDsa,
                DecodingKey::from_ed_components(jwk.x.as_deref()?).ok()?,
            )
        }
        ("RSA", _) => {
            let n = URL_SAFE_NO_PAD.decode(jwk.n.as_deref()?).ok()?;
            let first = n.iter().position(|b| *b != 0)?;
            let n = &n[first..];
            let bits = n.len() * 8 - n.first()?.leading_zeros() as usize;
            if !(RSA_MIN_BITS..=RSA_MAX_BITS).contains(&bits) {
                return None;
            }
            let e = URL_SAFE_NO_PAD.decode(jwk.e.as_deref()?).ok()?;
            if e.is_empty() || e.len() > 8 {
                return None;
            }
            (Alg::Rs256, DecodingKey::from_rsa_raw_components(n, &e))
        }
        _ => return None,
    };
    // A key that states its algorithm is used only with it (RFC 7517 §4.4).
    if jwk
        .alg
        .as_deref()
        .is_some_and(|stated| stated != alg.name())
    {
        return None;
    }
    // Build the verifier once now: EC points off the curve and bad Ed25519 keys fail here, not
    // on every token. (RSA keys are only parsed when a signature is checked.)
    if jsonwebtoken::crypto::verify("", b"", &key, alg.jwt()).is_err() {
        return None;
    }
    Some(VerifyKey {
        kid: jwk.kid.clone(),
        alg,
        key,
    })
}

/// Verifies access tokens. `Send + Sync`: share it behind an `Arc`.
pub struct TokenVerifier {
    issuer: String,
    audience: String,
    agent_claim: String,
    source: JwksSource,
    keys: RwLock<Arc<KeySet>>,
    /// For a URL source: the agent, and when (injected time) the last re-fetch was tried.
    fetcher: Option<Fetcher>,
}

struct Fetcher {
    url: url::Url,
    agent: ureq::Agent,
    last_refetch: Mutex<Option<i64>>,
}

impl fmt::Debug for TokenVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenVerifier")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("agent_claim", &self.agent_claim)
            .field("jwks", &self.source.to_string())
            .field("keys", &self.current_keys().keys.len())
            .finish()
    }
}

/// `https://`, or `http://` to a loopback IP literal (a name such as `localhost` could resolve
/// anywhere).
fn check_jwks_url(url: &url::Url) -> Result<bool, OauthError> {
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        _ => false,
    };
    match url.scheme() {
        "https" if url.host().is_some() => Ok(loopback),
        "http" if loopback => Ok(true),
        _ => Err(OauthError::InsecureJwksUrl(shown_url(url))),
    }
}

impl Fetcher {
    fn new(url: &url::Url) -> Result<Fetcher, OauthError> {
        let loopback = check_jwks_url(url)?;
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(JWKS_FETCH_TIMEOUT))
            .http_status_as_error(false)
            // A redirect could lead to a place the config does not name (or to plain http).
            .max_redirects(0)
            .https_only(!loopback)
            .user_agent(format!("cajaguard/{}", env!("CARGO_PKG_VERSION")))
            .accept("application/jwk-set+json, application/json");
        // A loopback issuer is never reached through a proxy from the environment.
        let config = if loopback { config.proxy(None) } else { config };
        Ok(Fetcher {
            url: url.clone(),
            agent: config.build().new_agent(),
            last_refetch: Mutex::new(None),
        })
    }

    fn fetch(&self, source: &JwksSource) -> Result<KeySet, OauthError> {
        let fetch_error = |reason: String| OauthError::JwksFetch {
            source_name: source.to_string(),
            reason,
        };
        let mut response = self
            .agent
            .get(self.url.as_str())
            .call()
            .map_err(|e| fetch_error(e.to_string()))?;
        if response.status() != ureq::http::StatusCode::OK {
            return Err(fetch_error(format!("HTTP status {}", response.status())));
        }
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_JWKS_BYTES)
            .read_to_vec()
            .map_err(|e| match e {
                ureq::Error::BodyExceedsLimit(_) => {
                    fetch_error(format!("the body is larger than {MAX_JWKS_BYTES} bytes"))
                }
                other => fetch_error(other.to_string()),
            })?;
        parse_jwks(&bytes, source)
    }

    /// Whether a re-fetch may be tried at `now`; if so, `now` is recorded before it is tried, so
    /// a flood of unknown `kid`s costs the issuer one request a minute at most. A clock that
    /// went back counts from the last attempt as well.
    fn may_refetch(&self, now: i64) -> bool {
        let mut last = self
            .last_refetch
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(then) = *last
            && now.saturating_sub(then).unsigned_abs() < JWKS_REFETCH_SECS.unsigned_abs()
        {
            return false;
        }
        *last = Some(now);
        true
    }
}

fn read_file(path: &std::path::Path, source: &JwksSource) -> Result<Vec<u8>, OauthError> {
    let read_error = |reason: String| OauthError::JwksRead {
        source_name: source.to_string(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| read_error(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_JWKS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| read_error(e.to_string()))?;
    if bytes.len() as u64 > MAX_JWKS_BYTES {
        return Err(read_error(format!("larger than {MAX_JWKS_BYTES} bytes")));
    }
    Ok(bytes)
}

/// A token split and decoded; nothing checked but its shape.
struct ParsedToken<'t> {
    alg: String,
    kid: Option<String>,
    /// `header.payload`, what the signature is over.
    signed: &'t str,
    /// The signature, still base64url (decoded once already, so it is valid).
    signature: &'t str,
    payload: Vec<u8>,
}

/// Checks the size and the compact form (three base64url parts) and reads the header.
fn parse_token(token: &str) -> Result<ParsedToken<'_>, TokenRejected> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenRejected::TooLong);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenRejected::Malformed("it does not have three parts"));
    };
    if header.is_empty() || payload.is_empty() {
        return Err(TokenRejected::Malformed("a part is empty"));
    }
    let signed = &token[..header.len() + 1 + payload.len()];
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part);
    let header =
        decode(header).map_err(|_| TokenRejected::Malformed("the header is not base64url"))?;
    let payload =
        decode(payload).map_err(|_| TokenRejected::Malformed("the payload is not base64url"))?;
    if decode(signature).is_err() {
        return Err(TokenRejected::Malformed("the signature is not base64url"));
    }
    let header: Map<String, Value> = serde_json::from_slice(&header)
        .map_err(|_| TokenRejected::Malformed("the header is not a JSON object"))?;
    let alg = match header.get("alg") {
        Some(Value::String(alg)) => alg.clone(),
        _ => return Err(TokenRejected::Malformed("the header has no alg")),
    };
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(TokenRejected::Malformed("the header's kid is not a string")),
    };
    // RFC 7515 §4.1.11: an extension the recipient does not understand must fail.
    if header.contains_key("crit") {
        return Err(TokenRejected::CriticalHeader);
    }
    Ok(ParsedToken {
        alg,
        kid,
        signed,
        signature,
        payload,
    })
}

/// A NumericDate (RFC 7519 §2), rounded the strict way (`up` for `nbf`, down for `exp`).
fn numeric_date(value: &Value, up: bool) -> Option<i64> {
    if let Some(int) = value.as_i64() {
        return Some(int);
    }
    let float = value.as_f64().filter(|f| f.is_finite())?;
    let rounded = if up { float.ceil() } else { float.floor() };
    // `as` saturates at the ends of i64.
    Some(rounded as i64)
}

impl TokenVerifier {
    /// Loads the JWKS: reads the file, or fetches the URL now (bounded by
    /// [`JWKS_FETCH_TIMEOUT`]). A JWKS that cannot be read or parsed, or has no usable key, is
    /// an error naming its source.
    pub fn new(settings: OauthSettings) -> Result<TokenVerifier, OauthError> {
        for (name, value) in [
            ("issuer", &settings.issuer),
            ("audience", &settings.audience),
            ("agent_claim", &settings.agent_claim),
        ] {
            if value.is_empty() {
                return Err(OauthError::EmptySetting(name));
            }
        }
        // One backend, chosen by the crate's features; two (aws_lc_rs unified in by another
        // crate) would leave it none, and every check would panic.
        if jsonwebtoken::crypto::CryptoProvider::try_get_default().is_none() {
            return Err(OauthError::NoCryptoBackend);
        }
        let source = settings.jwks;
        let (keys, fetcher) = match &source {
            JwksSource::File(path) => (parse_jwks(&read_file(path, &source)?, &source)?, None),
            JwksSource::Url(url) => {
                let fetcher = Fetcher::new(url)?;
                (fetcher.fetch(&source)?, Some(fetcher))
            }
        };
        Ok(TokenVerifier {
            issuer: settings.issuer,
            audience: settings.audience,
            agent_claim: settings.agent_claim,
            source,
            keys: RwLock::new(Arc::new(keys)),
            fetcher,
        })
    }

    /// Checks `token` (the bearer value, without `Bearer `) at `now_unix` (seconds) and returns
    /// the agent claim's value, unchecked as a name.
    ///
    /// With a JWKS URL, a `kid` the keys lack makes this re-fetch the JWKS, blocking for up to
    /// [`JWKS_FETCH_TIMEOUT`], at most once per [`JWKS_REFETCH_SECS`] of `now_unix`: call it off
    /// the async executor (`spawn_blocking`).
    pub fn verify(&self, token: &str, now_unix: i64) -> Result<String, TokenRejected> {
        let token = parse_token(token)?;
        let alg = Alg::from_header(&token.alg)?;
        match self.check_signature(&token, alg) {
            Err(TokenRejected::UnknownKey) if token.kid.is_some() && self.refetch(now_unix) => {
                self.check_signature(&token, alg)?
            }
            other => other?,
        }
        // Signed by the issuer; now what it says.
        let claims: Map<String, Value> = serde_json::from_slice(&token.payload)
            .map_err(|_| TokenRejected::Malformed("the payload is not a JSON object"))?;
        self.check_claims(&claims, now_unix)
    }

    fn current_keys(&self) -> Arc<KeySet> {
        self.keys
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Re-fetches the JWKS if the source is a URL and the rate limit allows; whether the keys
    /// were replaced. A failed fetch keeps the keys there were.
    fn refetch(&self, now: i64) -> bool {
        let Some(fetcher) = &self.fetcher else {
            return false;
        };
        if !fetcher.may_refetch(now) {
            return false;
        }
        match fetcher.fetch(&self.source) {
            Ok(keys) => {
                *self
                    .keys
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(keys);
                tracing::info!("re-fetched the JWKS ({}) for an unknown kid", self.source);
                true
            }
            Err(e) => {
                tracing::warn!("{e}; keeping the keys there were");
                false
            }
        }
    }

    /// The signature under a key of the JWKS: the one(s) `kid` names, or without `kid` each key
    /// of the alg's type.
    fn check_signature(&self, token: &ParsedToken<'_>, alg: Alg) -> Result<(), TokenRejected> {
        let keys = self.current_keys();
        let candidates: Vec<&VerifyKey> = match token.kid.as_deref() {
            Some(kid) => {
                let named: Vec<&VerifyKey> = keys
                    .keys
                    .iter()
                    .filter(|k| k.kid.as_deref() == Some(kid))
                    .collect();
                if named.is_empty() {
                    return Err(TokenRejected::UnknownKey);
                }
                let fitting: Vec<&VerifyKey> = named.into_iter().filter(|k| k.alg == alg).collect();
                if fitting.is_empty() {
                    return Err(TokenRejected::KeyMismatch);
                }
                fitting
            }
            None => {
                let fitting: Vec<&VerifyKey> = keys.keys.iter().filter(|k| k.alg == alg).collect();
                if fitting.is_empty() {
                    return Err(TokenRejected::UnknownKey);
                }
                fitting
            }
        };
        for key in candidates {
            // Err: a key the crate cannot use for this alg; Ok(false): a wrong signature.
            if let Ok(true) = jsonwebtoken::crypto::verify(
                token.signature,
                token.signed.as_bytes(),
                &key.key,
                alg.jwt(),
            ) {
                return Ok(());
            }
        }
        Err(TokenRejected::Signature)
    }

    /// `iss`, `aud`, `exp`, `nbf` and the agent claim, against `now`.
    fn check_claims(&self, claims: &Map<String, Value>, now: i64) -> Result<String, TokenRejected> {
        match claims.get("iss") {
            None => return Err(TokenRejected::MissingClaim("iss".into())),
            Some(Value::String(iss)) if *iss == self.issuer => {}
            Some(Value::String(_)) => return Err(TokenRejected::Issuer),
            Some(_) => return Err(TokenRejected::InvalidClaim("iss".into())),
        }
        match claims.get("aud") {
            None => return Err(TokenRejected::MissingClaim("aud".into())),
            Some(Value::String(aud)) => {
                if *aud != self.audience {
                    return Err(TokenRejected::Audience);
                }
            }
            Some(Value::Array(auds)) => {
                let mut found = false;
                for aud in auds {
                    match aud {
                        Value::String(aud) => found |= *aud == self.audience,
                        _ => return Err(TokenRejected::InvalidClaim("aud".into())),
                    }
                }
                if !found {
                    return Err(TokenRejected::Audience);
                }
            }
            Some(_) => return Err(TokenRejected::InvalidClaim("aud".into())),
        }
        let exp = claims
            .get("exp")
            .ok_or_else(|| TokenRejected::MissingClaim("exp".into()))?;
        let exp =
            numeric_date(exp, false).ok_or_else(|| TokenRejected::InvalidClaim("exp".into()))?;
        if now >= exp.saturating_add(CLOCK_LEEWAY_SECS) {
            return Err(TokenRejected::Expired);
        }
        if let Some(nbf) = claims.get("nbf") {
            let nbf =
                numeric_date(nbf, true).ok_or_else(|| TokenRejected::InvalidClaim("nbf".into()))?;
            if now.saturating_add(CLOCK_LEEWAY_SECS) < nbf {
                return Err(TokenRejected::NotYetValid);
            }
        }
        match claims.get(&self.agent_claim) {
            None => Err(TokenRejected::MissingClaim(self.agent_claim.clone())),
            // A blank name names no agent: every principal the issuer gives one would be the one
            // agent `oauth:`, sharing its caps, window, pending requests and approvals.
            Some(Value::String(agent)) if !agent.trim().is_empty() => Ok(agent.clone()),
            Some(_) => Err(TokenRejected::InvalidClaim(self.agent_claim.clone())),
        }
    }
}

/// RFC 9728 protected-resource metadata, served at `/.well-known/oauth-protected-resource`.
pub fn protected_resource_metadata(resource: &str, issuer: &str) -> String {
    serde_json::json!({
        "resource": resource,
        "authorization_servers": [issuer],
        "bearer_methods_supported": ["header"],
    })
    .to_string()
}

/// A quoted-string (RFC 9110 §5.6.4): `"` and `\` escaped, control characters dropped.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars().filter(|c| !c.is_control()) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The `WWW-Authenticate` value of a 401: the metadata's URL (RFC 9728 §5.1), and when a token
/// was sent and refused, `error="invalid_token"` (RFC 6750 §3.1) with a fixed description.
pub fn www_authenticate(resource_metadata_url: &str, rejected: Option<&TokenRejected>) -> String {
    let mut value = format!("Bearer resource_metadata={}", quoted(resource_metadata_url));
    if let Some(rejected) = rejected {
        value.push_str(", error=\"invalid_token\", error_description=");
        value.push_str(&quoted(rejected.description()));
    }
    value
}

#[cfg(test)]
mod tests;

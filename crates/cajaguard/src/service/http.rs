//! The service's HTTP shell (axum): `/mcp` (MCP Streamable HTTP), the RFC 9728 metadata, and
//! `/metrics`. Every `/mcp` request is checked in this order, and nothing later runs for one that
//! fails: `Origin` (403), the bearer token (401), the body as one valid JSON-RPC message (400: the
//! envelope check the proxy applies, answered here because the proxy's answer to an invalid
//! message may carry `id: null`, which no waiting request matches), the session (404), then the
//! message, which runs on the thread that read it, a tool call included, while the runtime's
//! worker role moves to another thread (the proxy and the store are synchronous; no transaction
//! sits in a future).
//! A token the store confirmed within [`super::TOKEN_RECHECK`] is checked without leaving the
//! runtime; any other is looked up on the blocking pool.
//!
//! Every refusal on `/mcp` is `application/json`: a JSON-RPC error whose message says what to do,
//! with `id: null` unless the body was read and its id could be (an invalid message's).
//! Streamable HTTP lets the body of an HTTP error carry one, and clients surface it: the Python
//! SDK shows only "Server returned an error response" for any other body, so an agent's operator
//! never saw why the gate refused.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde_json::value::RawValue;

use super::connections::{Bounds, Places, serve_connections};
use super::{Service, Unauthenticated};
use crate::proxy::MAX_AGENT_MESSAGE_BYTES;
use cajaguard_wire::era::MODERN_VERSION;
use cajaguard_wire::jsonrpc;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
/// The longest request id kept while its answer is awaited.
const MAX_ID_BYTES: usize = 256;

/// Serves until SIGINT or SIGTERM, then stops taking requests and answers those whose client
/// still waits. A call whose client hung up may outlive the process: its reservation stays
/// counted and is reconciled at the next start.
pub fn serve(
    service: Arc<Service>,
    listener: TcpListener,
    answer_within: Duration,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    // One worker for the async side: it reads headers and bodies and checks them; with two, a
    // request was often handed from one to the other, a context switch that cost more than the
    // work. A message then runs on the thread that read it ([`run_here`]): the worker hands its
    // place to a thread of the blocking pool and becomes that message's thread. Handing the
    // message to the pool instead cost two thread wake-ups per call (to the pool and back), each
    // tens of microseconds on a virtual machine whose idle cores halt, more than the proxy's work.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        // Every admitted message holds a thread until its answer (a tool call runs on it), so the
        // pool has one per admission, one for the worker that takes the place of a message's
        // thread, and as many again as one agent may hold for the short tasks outside admission
        // (token lookups): those never queue behind calls.
        .max_blocking_threads(super::MAX_IN_FLIGHT + super::MAX_IN_FLIGHT_PER_AGENT + 1)
        .enable_io()
        .enable_time()
        .build()?;
    runtime.block_on(async move {
        let state = Shared {
            service,
            answer_within,
        };
        let router = axum::Router::new()
            .route("/mcp", axum::routing::any(mcp))
            .route(METADATA_PATH, axum::routing::get(metadata))
            .route("/metrics", axum::routing::get(metrics))
            .route(
                &format!("{METADATA_PATH}/mcp"),
                axum::routing::get(metadata),
            )
            .layer(axum::extract::DefaultBodyLimit::max(
                MAX_AGENT_MESSAGE_BYTES,
            ))
            .with_state(state);
        let listener = tokio::net::TcpListener::from_std(listener)?;
        // Until SIGINT or SIGTERM; then the requests in flight are answered, within the time a
        // call may wait for its answer and a grace, even if a client never finishes its request.
        serve_connections(
            listener,
            router,
            Places::new(BOUNDS),
            shutdown(),
            answer_within.saturating_add(SHUTDOWN_GRACE),
        )
        .await;
        Ok(())
    })
}

/// `/mcp`'s connections: each remote address holds a share of them (`connections.rs`).
const BOUNDS: Bounds = Bounds {
    server: "cajaguard serve",
    connections: 512,
    header_read_timeout: Duration::from_secs(10),
};
/// How long an admitted request's body may take to arrive: it holds one of its agent's places
/// in flight meanwhile.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// After SIGTERM, how much longer than a call may wait for its answer the service waits for
/// the calls in flight to be answered before it exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

async fn shutdown() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("stopping: no new requests; answering those still awaited");
}

#[derive(Clone)]
struct Shared {
    service: Arc<Service>,
    /// How long a request waits for its answer (the shop's timeout bounds the call itself).
    answer_within: Duration,
}

fn text(status: StatusCode, message: &str) -> Response {
    let mut response = Response::new(Body::from(format!("{message}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A refusal on `/mcp` at this HTTP status: a JSON-RPC error (`id: null`) saying why.
fn refusal(status: StatusCode, code: i64, message: &str) -> Response {
    json(status, jsonrpc::error(None, code, message))
}

fn json(status: StatusCode, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// How the wait for a request's answer ended.
enum Waited {
    /// The answer, or `None` when it can no longer come.
    Answer(Option<String>),
    /// The message's handling panicked.
    Failed,
    /// The call finished without an answer: its client cancelled it.
    Cancelled,
}

/// Runs blocking work (a message through the proxy, which may call the store and the shop) on
/// this thread, while the runtime's worker role moves to another thread so that other requests
/// are still read. `Err` if it panicked: that request is answered as failed, and the service
/// goes on, as it did when the work ran as a task of its own.
fn run_here<T>(work: impl FnOnce() -> T) -> Result<T, ()> {
    tokio::task::block_in_place(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).map_err(|_| ())
    })
}

fn header_text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// What is wrong when the `Mcp-Method` or `Mcp-Name` header (which clients of the 2026-07-28
/// era send, and a gateway in front may route or authorize by) disagrees with the body: the
/// gate reads the body, so a header that says another method or target would mislead only what
/// reads the headers. Refused as the MCP SDK's own server refuses it (-32020). `Mcp-Name` names
/// the tool of `tools/call`, the prompt of `prompts/get` and the resource of `resources/read`
/// (SEP-2243), as the bridge sends it: read for `tools/call` alone, the header the bridge sent
/// with a prompt or a resource was a mismatch, where the gate's answer is that it has none.
fn header_mismatch(
    headers: &HeaderMap,
    method: Option<&str>,
    params: Option<&RawValue>,
) -> Option<String> {
    if let Some(said) = headers.get("mcp-method")
        && said.to_str().ok() != method
    {
        return Some("the Mcp-Method header does not name the body's method".to_owned());
    }
    let said = headers.get("mcp-name")?;
    let target = method.and_then(|method| cajaguard_wire::era::target_name(method, params));
    (said.to_str().ok() != target.as_deref())
        .then(|| "the Mcp-Name header does not name the body's tool, prompt or resource".to_owned())
}

/// The `Origin` header as `origin_allowed` takes it: one that is there but not readable text
/// is an origin no configuration allows, never an absent one.
fn origin_header(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("origin")
        .map(|v| v.to_str().unwrap_or("(an Origin that is not text)"))
}

async fn metadata(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let service = &state.service;
    let resource = service.resource(header_text(&headers, "host"));
    let body = serde_json::json!({
        "resource": resource,
        "authorization_servers": service.issuer().map(|i| vec![i.to_owned()]).unwrap_or_default(),
        "bearer_methods_supported": ["header"],
        "resource_name": "CajaGuard spend gate",
    });
    json(StatusCode::OK, body.to_string())
}

/// Prometheus text (SPEC §13). Not behind a token: it holds the global figures every agent's
/// `cajaguard_status` shows, and nothing per agent, merchant or checkout. `Origin` still holds,
/// and so does `Sec-Fetch-Site`: a browser sends no `Origin` on a same-origin GET, so a page
/// whose name was rebound to this host (DNS rebinding) could read the figures; every current
/// browser marks such a read `same-origin` (or `cross-site`), while a scraper sends no such
/// header and a human typing the address gets `none`.
async fn metrics(State(state): State<Shared>, headers: HeaderMap) -> Response {
    if !state.service.origin_allowed(origin_header(&headers)) {
        return text(
            StatusCode::FORBIDDEN,
            "this Origin may not read the metrics",
        );
    }
    if header_text(&headers, "sec-fetch-site").is_some_and(|site| site != "none") {
        return text(
            StatusCode::FORBIDDEN,
            "a web page may not read the metrics; scrape them with Prometheus or open the address yourself",
        );
    }
    let base = state.service.base().clone();
    match tokio::task::spawn_blocking(move || base.metrics_text()).await {
        Ok(body) => {
            let mut response = Response::new(Body::from(body));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "the metrics failed"),
    }
}

fn unauthorized(service: &Service, headers: &HeaderMap, why: &Unauthenticated) -> Response {
    let resource = service.resource(header_text(headers, "host"));
    let metadata_url = match url::Url::parse(&resource) {
        Ok(url) => format!("{}{METADATA_PATH}", url.origin().ascii_serialization()),
        Err(_) => METADATA_PATH.to_owned(),
    };
    let challenge = match why {
        Unauthenticated::Missing => format!("Bearer resource_metadata=\"{metadata_url}\""),
        Unauthenticated::Invalid(_) => {
            format!("Bearer resource_metadata=\"{metadata_url}\", error=\"invalid_token\"")
        }
    };
    if let Unauthenticated::Invalid(reason) = why {
        tracing::info!(reason = %reason, "a request with an invalid token was refused");
    }
    let mut response = refusal(
        StatusCode::UNAUTHORIZED,
        jsonrpc::INVALID_REQUEST,
        "a valid bearer token is needed: `cajaguard agent add <name>` makes one, or use the team's OAuth issuer",
    );
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

async fn mcp(State(state): State<Shared>, request: axum::extract::Request) -> Response {
    // The body is read only once the headers passed: an unauthenticated caller costs no more
    // than its headers.
    let (parts, body) = request.into_parts();
    let (method, headers) = (parts.method, parts.headers);
    let service = state.service.clone();
    if !service.origin_allowed(origin_header(&headers)) {
        return refusal(
            StatusCode::FORBIDDEN,
            jsonrpc::INVALID_REQUEST,
            "this Origin may not call the gate: add it to serve.allowed_origins if it should",
        );
    }
    // A token the store confirmed a moment ago is answered here; any other goes to the blocking
    // pool: it is looked up in the store (a PostgreSQL round trip), and an OAuth key set may be
    // fetched again for an unknown key id.
    let authorization = header_text(&headers, "authorization");
    let checked = match service.authenticate_at_once(authorization) {
        Some(checked) => checked,
        None => {
            let authorization = authorization.map(str::to_owned);
            let checking = service.clone();
            tokio::task::spawn_blocking(move || checking.authenticate(authorization.as_deref()))
                .await
                .unwrap_or_else(|_| {
                    Err(Unauthenticated::Invalid(
                        "the token check failed".to_owned(),
                    ))
                })
        }
    };
    let agent = match checked {
        Ok(agent) => agent,
        Err(why) => return unauthorized(&service, &headers, &why),
    };
    let session_id = header_text(&headers, SESSION_HEADER).map(str::to_owned);
    match method {
        Method::POST => {}
        Method::DELETE => {
            return match session_id {
                Some(id) if service.end_session(&id, &agent) => {
                    text(StatusCode::OK, "session ended")
                }
                _ => refusal(
                    StatusCode::NOT_FOUND,
                    jsonrpc::INVALID_REQUEST,
                    "no such session",
                ),
            };
        }
        // No server-initiated stream: Streamable HTTP lets a server answer GET with 405.
        _ => {
            let mut response = refusal(
                StatusCode::METHOD_NOT_ALLOWED,
                jsonrpc::INVALID_REQUEST,
                "POST one JSON-RPC message to /mcp; this gate opens no event stream",
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
            return response;
        }
    }
    let Some(admitted) = service.admit(&agent) else {
        return refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            jsonrpc::OVERLOADED,
            "too many of this agent's requests are in flight; wait for some to finish",
        );
    };
    let read = tokio::time::timeout(
        BODY_READ_TIMEOUT,
        axum::body::to_bytes(body, MAX_AGENT_MESSAGE_BYTES),
    );
    let body = match read.await {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => {
            return refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                jsonrpc::INVALID_REQUEST,
                "a message over 1 MiB (or a body cut short) is refused by CajaGuard",
            );
        }
        Err(_) => {
            return refusal(
                StatusCode::REQUEST_TIMEOUT,
                jsonrpc::INVALID_REQUEST,
                "the message's body did not arrive in time; send it whole",
            );
        }
    };
    if let Some(version) = header_text(&headers, VERSION_HEADER)
        && version != MODERN_VERSION
        && !cajaguard_wire::era::LEGACY_VERSIONS.contains(&version)
    {
        return refusal(
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_REQUEST,
            "unsupported MCP-Protocol-Version: this gate speaks 2025-06-18, 2025-11-25 and 2026-07-28",
        );
    }
    let Ok(message) = String::from_utf8(body.to_vec()) else {
        return json(
            StatusCode::BAD_REQUEST,
            jsonrpc::error(None, jsonrpc::PARSE_ERROR, "the body is not UTF-8"),
        );
    };
    #[derive(serde::Deserialize)]
    struct Peek<'a> {
        #[serde(borrow)]
        id: Option<&'a RawValue>,
        method: Option<String>,
        #[serde(borrow)]
        params: Option<&'a RawValue>,
    }
    if message.trim_start().starts_with('[') {
        return json(
            StatusCode::BAD_REQUEST,
            jsonrpc::error(
                None,
                jsonrpc::INVALID_REQUEST,
                "JSON-RPC batches are refused by CajaGuard",
            ),
        );
    }
    let Ok(peek) = serde_json::from_str::<Peek<'_>>(&message) else {
        return json(
            StatusCode::BAD_REQUEST,
            jsonrpc::error(
                None,
                jsonrpc::PARSE_ERROR,
                "the body is not one JSON-RPC message",
            ),
        );
    };
    // A request id is a string or an integer (JSON-RPC; MCP forbids null): anything else could
    // never be matched to its answer.
    if let Some(raw) = peek.id
        && !matches!(
            serde_json::from_str::<serde_json::Value>(raw.get()),
            Ok(serde_json::Value::String(_))
        )
        && serde_json::from_str::<i64>(raw.get()).is_err()
    {
        return json(
            StatusCode::BAD_REQUEST,
            jsonrpc::error(
                None,
                jsonrpc::INVALID_REQUEST,
                "a request id must be a string or an integer",
            ),
        );
    }
    if peek.id.is_some_and(|id| id.get().len() > MAX_ID_BYTES) {
        return json(
            StatusCode::BAD_REQUEST,
            jsonrpc::error(
                None,
                jsonrpc::INVALID_REQUEST,
                "a request id over 256 bytes is refused",
            ),
        );
    }
    // What the proxy would refuse as no valid message is answered here: its error may go out
    // with `id: null`, which no waiting request could be matched to (the request would wait out
    // `answer_within` and keep its slot and its id).
    if let Err(invalid) = jsonrpc::Envelope::parse_agent(&message, &crate::proxy::known_method) {
        return json(StatusCode::BAD_REQUEST, invalid.line());
    }
    if let Some(mismatch) = header_mismatch(&headers, peek.method.as_deref(), peek.params) {
        return json(
            StatusCode::BAD_REQUEST,
            jsonrpc::error(peek.id, jsonrpc::HEADER_MISMATCH, &mismatch),
        );
    }
    // Only a request (an id and a method) gets an answer; a response from the client (an id, no
    // method) is taken like a notification.
    let id = match peek.method {
        Some(_) => peek.id.map(|id| id.get().to_owned()),
        None => None,
    };
    let initialize = peek.method.as_deref() == Some("initialize");
    let modern = header_text(&headers, VERSION_HEADER) == Some(MODERN_VERSION)
        || peek
            .params
            .is_some_and(|p| p.get().contains("io.modelcontextprotocol/protocolVersion"));

    let (session, new_session_id) = match (&session_id, initialize) {
        (Some(_), true) => {
            return json(
                StatusCode::BAD_REQUEST,
                jsonrpc::error(
                    peek.id,
                    jsonrpc::INVALID_REQUEST,
                    "initialize starts a session: send it without Mcp-Session-Id",
                ),
            );
        }
        (Some(sid), false) => match service.session(sid, &agent) {
            Some(session) => (session, None),
            None => {
                return refusal(
                    StatusCode::NOT_FOUND,
                    jsonrpc::INVALID_REQUEST,
                    "no such session (ended, expired, or another agent's): initialize again",
                );
            }
        },
        (None, true) => match service.open_session(&agent) {
            Some((sid, session)) => (session, Some(sid)),
            None => {
                return refusal(
                    StatusCode::SERVICE_UNAVAILABLE,
                    jsonrpc::OVERLOADED,
                    "too many sessions; try again later",
                );
            }
        },
        (None, false) if modern => (service.one_shot(&agent), None),
        (None, false) => {
            return json(
                StatusCode::BAD_REQUEST,
                jsonrpc::error(
                    peek.id,
                    jsonrpc::INVALID_REQUEST,
                    "Mcp-Session-Id is required after initialize (or use protocol version 2026-07-28, which needs no session)",
                ),
            );
        }
    };

    let Some(id) = id else {
        // A notification or a response: nothing comes back.
        let _ = run_here(|| session.proxy.handle_message_here(message));
        drop(admitted);
        return Response::builder()
            .status(StatusCode::ACCEPTED)
            .body(Body::empty())
            .unwrap_or_else(|_| text(StatusCode::ACCEPTED, ""));
    };
    let Some(mut answer) = session.waiting.expect(&id, admitted) else {
        return json(
            StatusCode::BAD_REQUEST,
            jsonrpc::error(
                RawValue::from_string(id).ok().as_deref(),
                jsonrpc::INVALID_REQUEST,
                "a request with this id is still in flight in this session",
            ),
        );
    };
    // The message runs here, a tool call included; its answer is written before it returns. Its
    // own bounds (the shop's timeout on each call, the store's statement timeout) end it within
    // `answer_within`, which still bounds the wait for an answer written later.
    let started = Instant::now();
    let waited = match run_here(|| session.proxy.handle_message_here(message)) {
        Err(()) => Ok(Waited::Failed),
        Ok(()) => match answer.try_recv() {
            Ok(line) => Ok(Waited::Answer(Some(line))),
            // Finished without an answer: the agent cancelled it (MCP: no answer to a
            // cancelled request). Nothing will come, so its id and its slot are free now.
            Err(_) if !session.proxy.call_pending(&id) => Ok(Waited::Cancelled),
            Err(_) => {
                let left = state.answer_within.saturating_sub(started.elapsed());
                tokio::time::timeout(left, &mut answer)
                    .await
                    .map(|line| Waited::Answer(line.ok()))
            }
        },
    };
    let line = match waited {
        Ok(Waited::Answer(Some(line))) => line,
        Ok(Waited::Failed) => {
            session.waiting.forget(&id);
            return refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                jsonrpc::INTERNAL_ERROR,
                "the gate failed on this request",
            );
        }
        Ok(Waited::Cancelled) => {
            session.waiting.forget(&id);
            return json(
                StatusCode::OK,
                jsonrpc::error(
                    RawValue::from_string(id).ok().as_deref(),
                    jsonrpc::REQUEST_CANCELLED,
                    "the request was cancelled",
                ),
            );
        }
        Ok(Waited::Answer(None)) | Err(_) => {
            // The call may still be at the shop: its payment, if any, settles on its own; its
            // slot and its id stay taken until its answer comes.
            return refusal(
                StatusCode::GATEWAY_TIMEOUT,
                jsonrpc::SHOP_UNAVAILABLE,
                "no answer in time; a payment under way settles on its own: ask cajaguard_status",
            );
        }
    };
    let mut response = json(StatusCode::OK, line);
    if let Some(sid) = new_session_id
        && let Ok(value) = HeaderValue::from_str(&sid)
    {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

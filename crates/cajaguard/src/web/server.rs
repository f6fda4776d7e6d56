//! The HTTP shell of the approval page: axum on a small tokio runtime, one route that hands every
//! request to [`WebApp::handle`] on a blocking thread (the store is synchronous, and a store
//! transaction never sits inside a future). axum rather than a threaded server: `cajaguard serve`
//! (MCP Streamable HTTP for many agents) serves this page beside its MCP endpoint, and wants an
//! async server for its event streams; see docs/DEPENDENCIES.md.
//!
//! The connections are accepted by the loop `/mcp` is served by (`service/connections.rs`), with
//! bounds of the page's own ([`Limits`]): any local process can connect to the page, and with
//! `axum::serve` (no header read timeout, no cap) one that opened thousands of idle connections
//! took the process's descriptors, and `/mcp` with them.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};

use super::{Fetch, MAX_BODY, Request, Response, WebApp};
use crate::service::connections::{Bounds, Places, serve_connections};

/// How the page's connections are bounded.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once, on all the page's listeners together; past it a new one is
    /// closed at once. The page has one human as its user: a few tabs and a few requests each.
    pub connections: usize,
    /// How long a connection may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long a request's body may take to arrive (a WebAuthn response is a few KiB).
    pub body_read_timeout: Duration,
}

impl Limits {
    /// What `cajaguard web` and `cajaguard serve` use. With `/mcp`'s 512 the two stay well under
    /// the usual 1,024 descriptors a process may open.
    pub const PAGE: Limits = Limits {
        connections: 64,
        header_read_timeout: Duration::from_secs(10),
        body_read_timeout: Duration::from_secs(10),
    };
}

/// Serves `app` on every one of `listeners` until the process ends, bounded by [`Limits::PAGE`].
pub fn serve(app: Arc<WebApp>, listeners: Vec<TcpListener>) -> std::io::Result<()> {
    serve_with(app, listeners, Limits::PAGE)
}

/// [`serve`] within `limits`. Built on the caller's thread: a runtime with two workers (the page
/// has one human as its user) plus the blocking pool.
pub fn serve_with(
    app: Arc<WebApp>,
    listeners: Vec<TcpListener>,
    limits: Limits,
) -> std::io::Result<()> {
    for listener in &listeners {
        listener.set_nonblocking(true)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .enable_time()
        .build()?;
    runtime.block_on(async move {
        let body_read_timeout = limits.body_read_timeout;
        let router = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let app = Arc::clone(&app);
            async move { answer(app, req, body_read_timeout).await }
        });
        // One cap for both loopbacks: a flood on one must not double what it may take.
        let places = Places::new(Bounds {
            server: "the approval page",
            connections: limits.connections,
            header_read_timeout: limits.header_read_timeout,
        });
        let mut servers = tokio::task::JoinSet::new();
        for listener in listeners {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            // The page runs until the process ends: `cajaguard serve` stops on its own signal
            // handling, `cajaguard web` on the signal's default action.
            servers.spawn(serve_connections(
                listener,
                router.clone(),
                places.clone(),
                std::future::pending(),
                Duration::ZERO,
            ));
        }
        match servers.join_next().await {
            Some(Ok(())) | None => Ok(()),
            Some(Err(e)) => Err(std::io::Error::other(e)),
        }
    })
}

fn header_text(headers: &HeaderMap, name: HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn answer(
    app: Arc<WebApp>,
    req: axum::extract::Request,
    body_read_timeout: Duration,
) -> axum::response::Response {
    let (parts, body) = req.into_parts();
    // HTTP/1.1 puts the authority in Host; an absolute-form target (a proxy request) carries it
    // in the URI, which must then agree (hyper does not check).
    let host = header_text(&parts.headers, header::HOST);
    let uri_host = parts.uri.authority().map(|a| a.as_str().to_owned());
    let host = match (host, uri_host) {
        (Some(h), Some(u)) if h != u => None,
        (h, u) => h.or(u),
    };
    let mut request = Request {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or("").to_owned(),
        host,
        origin: header_text(&parts.headers, header::ORIGIN),
        fetch: Fetch {
            site: header_text(&parts.headers, HeaderName::from_static("sec-fetch-site")),
            mode: header_text(&parts.headers, HeaderName::from_static("sec-fetch-mode")),
            dest: header_text(&parts.headers, HeaderName::from_static("sec-fetch-dest")),
        },
        body: Vec::new(),
    };
    // The headers are checked before the body is read: a request the page would refuse holds
    // no connection while its body trickles in.
    if let Some(refused) = app.refusal(&request) {
        return into_axum(refused);
    }
    request.body = match tokio::time::timeout(body_read_timeout, to_bytes(body, MAX_BODY)).await {
        Ok(Ok(body)) => body.to_vec(),
        Ok(Err(_)) => return into_axum(Response::text(413, "the request body is too large")),
        Err(_) => {
            return into_axum(Response::text(
                408,
                "the request body did not arrive in time; send it whole",
            ));
        }
    };
    let response = tokio::task::spawn_blocking(move || app.handle(&request))
        .await
        .unwrap_or_else(|_| {
            Response::text(500, "the page failed on this request; nothing was changed")
        });
    into_axum(response)
}

fn into_axum(r: Response) -> axum::response::Response {
    let mut out = axum::response::Response::new(Body::from(r.body.clone()));
    *out.status_mut() = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in r.headers() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            out.headers_mut().insert(name, value);
        }
    }
    out
}

//! The HTTP shell of the approval page: axum on a small tokio runtime, one route that hands every
//! request to [`WebApp::handle`] on a blocking thread (the store is synchronous, and a store
//! transaction never sits inside a future). axum rather than a threaded server: issue 17's
//! `cajaguard serve` (MCP Streamable HTTP for many agents) will serve this page beside its MCP
//! endpoint, and wants an async server for its event streams; see docs/DEPENDENCIES.md.

use std::net::TcpListener;
use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};

use super::{Fetch, MAX_BODY, Request, Response, WebApp};

/// Serves `app` on every one of `listeners` until the process ends (or one of them fails).
/// Built on the caller's thread: a runtime with two workers (the page has one human as its user)
/// plus the blocking pool.
pub fn serve(app: Arc<WebApp>, listeners: Vec<TcpListener>) -> std::io::Result<()> {
    for listener in &listeners {
        listener.set_nonblocking(true)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()?;
    runtime.block_on(async move {
        let router = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let app = Arc::clone(&app);
            async move { answer(app, req).await }
        });
        let mut servers = tokio::task::JoinSet::new();
        for listener in listeners {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            let router = router.clone();
            servers.spawn(async move { axum::serve(listener, router).await });
        }
        match servers.join_next().await {
            Some(Ok(result)) => result,
            Some(Err(e)) => Err(std::io::Error::other(e)),
            None => Ok(()),
        }
    })
}

fn header_text(headers: &HeaderMap, name: HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn answer(app: Arc<WebApp>, req: axum::extract::Request) -> axum::response::Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = to_bytes(body, MAX_BODY).await else {
        return into_axum(Response::text(413, "the request body is too large"));
    };
    // HTTP/1.1 puts the authority in Host; an absolute-form target (a proxy request) carries it
    // in the URI, which must then agree (hyper does not check).
    let host = header_text(&parts.headers, header::HOST);
    let uri_host = parts.uri.authority().map(|a| a.as_str().to_owned());
    let host = match (host, uri_host) {
        (Some(h), Some(u)) if h != u => None,
        (h, u) => h.or(u),
    };
    let request = Request {
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
        body: body.to_vec(),
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

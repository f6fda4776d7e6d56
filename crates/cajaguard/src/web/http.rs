//! The request and response the handlers see, and the security headers every answer carries.

use serde_json::json;

/// One HTTP request as the handlers see it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The query string without `?` (empty if none).
    pub query: String,
    pub host: Option<String>,
    pub origin: Option<String>,
    /// The browser's `Sec-Fetch-Site`, `Sec-Fetch-Mode` and `Sec-Fetch-Dest`, when it sent them.
    pub fetch: Fetch,
    pub body: Vec<u8>,
}

/// How a browser says a request was made (Fetch Metadata), each header when sent.
#[derive(Debug, Clone, Default)]
pub struct Fetch {
    pub site: Option<String>,
    pub mode: Option<String>,
    pub dest: Option<String>,
}

impl Fetch {
    /// A request another site's page made without the human going there: an image, a script, a
    /// fetch or a frame (not a top-level navigation, which a link the human follows is, nor a
    /// request without the headers, which is not a browser's).
    pub fn from_another_site(&self) -> bool {
        let site = self.site.as_deref();
        let crossing = site.is_some_and(|s| s != "same-origin" && s != "none");
        let followed =
            self.mode.as_deref() == Some("navigate") && self.dest.as_deref() == Some("document");
        crossing && !followed
    }
}

/// One HTTP response. [`Response::headers`] adds the security headers every answer carries.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// The nonce the page's inline script and style carry (CSP `'nonce-…'`).
    pub csp_nonce: String,
}

impl Response {
    pub(super) fn html(status: u16, body: String, csp_nonce: String) -> Response {
        Response {
            status,
            content_type: "text/html; charset=utf-8",
            body,
            csp_nonce,
        }
    }
    pub(super) fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
            csp_nonce: String::new(),
        }
    }
    /// The answer to a ceremony's POST: `{"ok", "message"}`.
    pub(super) fn outcome(status: u16, ok: bool, message: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "application/json",
            body: json!({ "ok": ok, "message": message.into() }).to_string(),
            csp_nonce: String::new(),
        }
    }
    pub(super) fn refused(status: u16, message: impl Into<String>) -> Response {
        Response::outcome(status, false, message)
    }

    /// The headers every answer carries: no CORS header ever; a CSP that loads nothing from
    /// anywhere (scripts and styles only inline, by nonce; requests only to this origin); no
    /// framing, sniffing, caching or referrer.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let nonce = if self.csp_nonce.is_empty() {
            "'none'".to_owned()
        } else {
            format!("'nonce-{}'", self.csp_nonce)
        };
        vec![
            ("Content-Type", self.content_type.to_owned()),
            (
                "Content-Security-Policy",
                format!(
                    "default-src 'none'; script-src {nonce}; style-src {nonce}; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
                ),
            ),
            ("X-Frame-Options", "DENY".to_owned()),
            ("X-Content-Type-Options", "nosniff".to_owned()),
            ("Referrer-Policy", "no-referrer".to_owned()),
            ("Cache-Control", "no-store".to_owned()),
            ("Cross-Origin-Opener-Policy", "same-origin".to_owned()),
            ("Cross-Origin-Resource-Policy", "same-origin".to_owned()),
        ]
    }
}

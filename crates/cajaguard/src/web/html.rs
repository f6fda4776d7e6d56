//! The pages, rendered on the server. Every piece of shop or agent text passes through [`text`]
//! (`display::terminal`, then HTML escaping); data for the script goes in a JSON block whose `<`
//! are escaped, read with `JSON.parse`, never evaluated.
//!
//! One idea, kept in one file on purpose (it is a little over 500 lines): every page shares the
//! layout, the escaping and the one WebAuthn script, so a reviewer checks that no text reaches the
//! page unescaped by reading this file alone.

use std::fmt::Write as _;

use cajaguard_core::approval::{BasketDigest, Decision};
use cajaguard_core::display;
use cajaguard_core::policy::Policy;
use cajaguard_core::quote::Quote;
use serde_json::{Value, json};

use super::{Response, amount, random};
use crate::store::{PasskeyRow, PendingRow};

/// HTML-escapes `s` for text and attribute values.
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Shop or agent text as a person should see it: invisible characters and escapes removed, then
/// escaped for HTML.
pub(super) fn text(s: &str) -> String {
    escape(&display::terminal(s))
}

const STYLE: &str = "
body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:.7em 1.2em;display:flex;gap:1.4em;align-items:center}
header b{font-size:1.1em}header a{color:#cfd6e4;text-decoration:none}header a:hover{color:#fff}
main{max-width:52em;margin:1.2em auto;padding:0 1em}
.card{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:1em 1.2em;margin:0 0 1em}
h1{font-size:1.35em;margin:.2em 0 .6em}h2{font-size:1.1em;margin:.2em 0 .5em}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.3em .5em;border-bottom:1px solid #eef0f4;vertical-align:top}
th{color:#5b6475;font-weight:600;width:9em}
.warn{background:#fff4e5;border-color:#f0b45b}.bad{background:#fdecec;border-color:#e58c8c}.ok{background:#eaf7ee;border-color:#7cc59a}
button{font:inherit;padding:.55em 1.3em;border-radius:6px;border:1px solid #1d2330;cursor:pointer;margin-right:.6em}
button.approve{background:#1f7a45;border-color:#1f7a45;color:#fff}button.deny{background:#fff;color:#a12626;border-color:#a12626}
button:disabled{opacity:.5;cursor:default}
.bar{display:flex;height:1.3em;border-radius:4px;overflow:hidden;background:#e4e7ed;margin:.3em 0}
.bar span{display:block;height:100%}.settled{background:#2f5fb3}.inflight{background:#e59f2b}.remaining{background:#d8dee9}
.legend span{margin-right:1.2em}.sw{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.3em;vertical-align:-.05em}
code{background:#eef0f4;padding:.05em .3em;border-radius:3px}
#cg-message{min-height:1.4em;font-weight:600}
";

/// The one script: WebAuthn calls for the buttons the page has, and nothing else. Reads its data
/// from the `cg-data` JSON block; posts only to this origin.
const SCRIPT: &str = r#"
(() => {
  const el = document.getElementById('cg-data');
  if (!el) return;
  const D = JSON.parse(el.textContent);
  const msg = document.getElementById('cg-message');
  const enc = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  const dec = (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0));
  const say = (text, ok) => { msg.textContent = text; msg.className = ok ? 'ok' : 'bad'; };
  const buttons = () => document.querySelectorAll('button[data-ceremony]');
  const assertFor = async (c) => {
    const cred = await navigator.credentials.get({ publicKey: {
      challenge: dec(c.challenge), rpId: D.rpId, userVerification: 'required',
      allowCredentials: D.allow.map((id) => ({ type: 'public-key', id: dec(id) })),
      timeout: 120000 } });
    return { id: enc(cred.rawId), type: cred.type, response: {
      clientDataJSON: enc(cred.response.clientDataJSON),
      authenticatorData: enc(cred.response.authenticatorData),
      signature: enc(cred.response.signature) } };
  };
  const post = async (nonce, credential, url) => {
    const r = await fetch(url || D.post, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ nonce, credential }), credentials: 'same-origin' });
    const answer = await r.json();
    if (answer.approve) {
      // A later passkey: a registered one approves it, with the server's challenge.
      say(answer.message, true);
      await post(answer.approve.nonce, await assertFor(answer.approve), answer.approve.post);
      return;
    }
    say(answer.message, answer.ok);
    if (answer.ok) { document.body.dataset.done = 'ok'; }
    else { document.body.dataset.done = 'refused'; }
  };
  const run = async (c) => {
    buttons().forEach((b) => { b.disabled = true; });
    try {
      if (D.kind === 'register') {
        const cred = await navigator.credentials.create({ publicKey: {
          rp: { id: D.rpId, name: 'CajaGuard' },
          user: { id: dec(D.userId), name: D.name, displayName: D.name },
          challenge: dec(D.challenge),
          pubKeyCredParams: [{ type: 'public-key', alg: -7 }, { type: 'public-key', alg: -8 }],
          authenticatorSelection: { userVerification: 'required', residentKey: 'preferred' },
          attestation: 'none',
          excludeCredentials: D.exclude.map((id) => ({ type: 'public-key', id: dec(id) })),
          timeout: 120000 } });
        await post(c.nonce, { id: enc(cred.rawId), type: cred.type, response: {
          clientDataJSON: enc(cred.response.clientDataJSON),
          attestationObject: enc(cred.response.attestationObject) } });
      } else {
        await post(c.nonce, await assertFor(c));
      }
    } catch (e) {
      say('The passkey did not answer (' + e.name + '): nothing changed. Reload the page to try again.', false);
      document.body.dataset.done = 'error';
    }
  };
  buttons().forEach((b) => b.addEventListener('click', () => run(D.ceremonies[b.dataset.ceremony])));
})();
"#;

/// A whole page: header, `body`, and when `data` is given the JSON block and the script.
fn page(title: &str, body: &str, data: Option<Value>) -> Result<Response, Response> {
    styled_page(title, body, data, "")
}

/// [`page`] with `extra` CSS (the status bars' widths: inline `style` attributes are not allowed
/// under the CSP).
fn styled_page(
    title: &str,
    body: &str,
    data: Option<Value>,
    extra: &str,
) -> Result<Response, Response> {
    let nonce = hex::encode(random::<16>()?);
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{} · CajaGuard</title><style nonce=\"{nonce}\">{STYLE}{extra}</style></head><body>\
         <header><b>CajaGuard</b><a href=\"/\">Pending</a><a href=\"/status\">Status</a><a href=\"/passkeys\">Passkeys</a></header>\
         <main>{body}</main>",
        escape(title)
    );
    if let Some(data) = data {
        // `<` escaped inside the JSON: the block can never close itself early.
        let json = data.to_string().replace('<', "\\u003c");
        let _ = write!(
            out,
            "<script type=\"application/json\" id=\"cg-data\">{json}</script><script nonce=\"{nonce}\">{SCRIPT}</script>"
        );
    }
    out.push_str("</body></html>");
    Ok(Response::html(200, out, nonce))
}

pub(super) fn pending(rows: &[PendingRow], policy: &Policy) -> Result<Response, Response> {
    let mut body = String::from("<h1>Payments waiting for you</h1>");
    if rows.is_empty() {
        body.push_str("<div class=\"card\">Nothing is waiting for a decision.</div>");
    }
    for row in rows {
        let r = &row.request;
        let _ = write!(
            body,
            "<div class=\"card\"><h2><a href=\"/requests/{id}\">{amount}</a> at {merchant}</h2>\
             <table><tr><th>request</th><td><code>{id}</code></td></tr>\
             <tr><th>checkout</th><td>{checkout}</td></tr></table></div>",
            id = escape(r.request_id.as_str()),
            amount = escape(&amount(r.total, &r.currency)),
            merchant = text(&r.merchant),
            checkout = text(&r.checkout_id),
        );
    }
    let _ = write!(
        body,
        "<p>Config: <code>{}</code></p>",
        text(&policy.source.display().to_string())
    );
    page("Pending", &body, None)
}

/// What the request page shows.
pub(super) struct RequestView<'a> {
    pub policy: &'a Policy,
    pub pending: &'a PendingRow,
    pub reread: &'a Result<Quote, String>,
    pub differs: bool,
    pub decided: bool,
    /// (decision, nonce, challenge) of each ceremony issued with the page.
    pub ceremonies: &'a [(Decision, String, String)],
    /// A form could not be issued: too many are open.
    pub forms_full: bool,
    pub passkeys: &'a [PasskeyRow],
    pub rp_id: &'a str,
}

pub(super) fn request(v: &RequestView<'_>) -> Result<Response, Response> {
    let r = &v.pending.request;
    let mut body = format!(
        "<h1>{} at {}</h1>",
        escape(&amount(r.total, &r.currency)),
        text(&r.merchant)
    );
    let _ = write!(
        body,
        "<div class=\"card\"><h2>As the gate recorded it</h2><table>\
         <tr><th>request</th><td><code>{}</code></td></tr><tr><th>agent</th><td>{}</td></tr>\
         <tr><th>merchant</th><td>{}</td></tr><tr><th>checkout</th><td>{}</td></tr>\
         <tr><th>amount</th><td>{}</td></tr><tr><th>handlers</th><td>{}</td></tr></table></div>",
        escape(r.request_id.as_str()),
        r.agent.as_ref().map_or_else(
            || "this machine's agent (stdio)".to_owned(),
            |a| text(a.as_str())
        ),
        text(&r.merchant),
        text(&r.checkout_id),
        escape(&amount(r.total, &r.currency)),
        r.handler_ids()
            .iter()
            .map(|h| text(h))
            .collect::<Vec<_>>()
            .join(", ")
    );
    match v.reread {
        Ok(quote) => {
            let class = if v.differs { "card warn" } else { "card" };
            let _ = write!(
                body,
                "<div class=\"{class}\"><h2>As the shop has it now</h2>"
            );
            if v.differs {
                body.push_str(
                    "<p><b>Warning: the shop's checkout is not the basket the gate blocked</b> \
                     (items, amounts, merchant, currency or status changed). It cannot be \
                     approved; the agent's next attempt makes a new request.</p>",
                );
            }
            let _ = write!(
                body,
                "<table><tr><th>status</th><td>{}</td></tr><tr><th>total</th><td>{}</td></tr>",
                text(&quote.status),
                escape(&amount(quote.total, &quote.currency))
            );
            for line in &quote.line_items {
                let _ = write!(
                    body,
                    "<tr><th>item</th><td>{} × {} <code>{}</code> at {}</td></tr>",
                    line.quantity,
                    text(&line.title),
                    text(&line.item_id),
                    escape(&amount(line.unit_price, &quote.currency))
                );
            }
            // Where it goes is part of what is approved (the request digest binds it).
            for destination in quote.destinations() {
                let _ = write!(
                    body,
                    "<tr><th>delivery</th><td>{}</td></tr>",
                    text(&destination)
                );
            }
            for instrument in &r.instruments {
                let _ = write!(
                    body,
                    "<tr><th>pays with</th><td>{} <code>{}</code></td></tr>",
                    text(&instrument.handler_id),
                    instrument.id.as_deref().map_or_else(String::new, text)
                );
            }
            let fresh = BasketDigest::of_request(quote, &r.instruments, r.agent.as_ref());
            let _ = write!(
                body,
                "</table><p>{} (request id now <code>{}</code>)</p></div>",
                if v.differs {
                    "Differs from the basket the gate blocked"
                } else {
                    "The same basket the gate blocked"
                },
                escape(&fresh.request_id().to_string())
            );
        }
        Err(why) => {
            let _ = write!(
                body,
                "<div class=\"card warn\"><h2>As the shop has it now</h2><p><b>Warning: the shop \
                 could not be asked</b> ({}). It cannot be approved until it answers.</p></div>",
                text(why)
            );
        }
    }
    body.push_str("<div class=\"card\">");
    if v.decided {
        body.push_str("<p>This request is decided already (approved, denied or used).</p>");
    } else if v.passkeys.is_empty() {
        let _ = write!(
            body,
            "<p>No passkey is registered. Run <code>cajaguard passkey add --config {} --name NAME</code> and open the link it prints.</p>",
            text(&v.policy.source.display().to_string())
        );
    } else {
        for (decision, _, _) in v.ceremonies {
            let (key, label) = match decision {
                Decision::Approve => ("approve", "Approve with passkey"),
                Decision::Deny => ("deny", "Deny with passkey"),
            };
            let _ = write!(
                body,
                "<button class=\"{key}\" data-ceremony=\"{key}\" id=\"cg-{key}\">{label}</button>"
            );
        }
    }
    if v.forms_full {
        let _ = write!(
            body,
            "<p>Too many forms are open on this page right now (something may be loading pages in a loop): try again in a few minutes, or decide on the terminal with <code>cajaguard approve {} --config {}</code>.</p>",
            text(v.pending.request.request_id.as_str()),
            text(&v.policy.source.display().to_string())
        );
    }
    body.push_str("<p id=\"cg-message\"></p></div>");
    let ceremonies: serde_json::Map<String, Value> = v
        .ceremonies
        .iter()
        .map(|(decision, nonce, challenge)| {
            let key = match decision {
                Decision::Approve => "approve",
                Decision::Deny => "deny",
            };
            (
                key.to_owned(),
                json!({ "nonce": nonce, "challenge": challenge }),
            )
        })
        .collect();
    let data = json!({
        "kind": "decide",
        "rpId": v.rp_id,
        "post": format!("/requests/{}/decide", r.request_id),
        "allow": v.passkeys.iter().map(|p| b64(&p.passkey.credential_id)).collect::<Vec<_>>(),
        "ceremonies": ceremonies,
    });
    page(&format!("Request {}", r.request_id), &body, Some(data))
}

pub(super) fn passkeys(rows: &[PasskeyRow], policy: &Policy) -> Result<Response, Response> {
    let mut body = String::from("<h1>Passkeys</h1><div class=\"card\">");
    if rows.is_empty() {
        body.push_str("<p>No passkey is registered yet.</p>");
    } else {
        body.push_str(
            "<table><tr><th>name</th><th>id</th><th>algorithm</th><th>registered</th></tr>",
        );
        for row in rows {
            let _ = write!(
                body,
                "<tr><td>{}</td><td><code>{}</code></td><td>{:?}</td><td>{}</td></tr>",
                text(&row.passkey.name),
                escape(&row.id()),
                row.passkey.algorithm,
                escape(&row.created_at.to_string())
            );
        }
        body.push_str("</table>");
    }
    let config = text(&policy.source.display().to_string());
    let _ = write!(
        body,
        "</div><div class=\"card\"><p>Register one: <code>cajaguard passkey add --config {config} --name NAME</code> prints a one-time link (5 minutes). \
         Remove one: <code>cajaguard passkey remove ID --config {config}</code>.</p></div>"
    );
    page("Passkeys", &body, None)
}

pub(super) struct RegisterView<'a> {
    pub name: &'a str,
    /// `None`: registration is not open on this page (a passkey exists already).
    pub nonce: Option<&'a str>,
    pub challenge: &'a [u8; 32],
    pub user_id: &'a [u8; 16],
    pub rp_id: &'a str,
    pub existing: &'a [PasskeyRow],
    /// No passkey was ever registered: this one is trusted on first use.
    pub first: bool,
}

pub(super) fn register(v: &RegisterView<'_>) -> Result<Response, Response> {
    let mut body = format!(
        "<h1>Register a passkey</h1><div class=\"card\"><p>Name: <b>{}</b></p>",
        text(v.name)
    );
    let data = match v.nonce {
        Some(nonce) => {
            body.push_str(if v.first {
                "<p>This is the first passkey of this CajaGuard: it is trusted on first use. \
                 Your browser asks for your fingerprint, face, PIN or security key.</p>"
            } else {
                "<p>A passkey is registered already: after creating the new one, your browser asks \
                 you to approve it with a passkey that is registered.</p>"
            });
            body.push_str(
                "<button class=\"approve\" data-ceremony=\"register\" id=\"cg-register\">Register passkey</button>",
            );
            Some(json!({
                "kind": "register",
                "rpId": v.rp_id,
                "post": "/passkeys/register",
                "name": display::terminal(v.name),
                "challenge": b64(v.challenge),
                "userId": b64(v.user_id),
                "exclude": v.existing.iter().map(|p| b64(&p.passkey.credential_id)).collect::<Vec<_>>(),
                "allow": v.existing.iter().map(|p| b64(&p.passkey.credential_id)).collect::<Vec<_>>(),
                "ceremonies": { "register": { "nonce": nonce } },
            }))
        }
        None => {
            body.push_str(
                "<p class=\"bad\">Every passkey of this CajaGuard was removed, so none can approve a \
                 new one, and trust on first use does not come back. Set approvals.require to \
                 \"key\" or \"any\" to decide with the approver key meanwhile.</p>",
            );
            None
        }
    };
    body.push_str("<p id=\"cg-message\"></p></div>");
    page("Register a passkey", &body, data)
}

/// What the status view shows.
pub(super) struct StatusView<'a> {
    /// The status document (`cajaguard status --json`).
    pub doc: &'a Value,
    pub policy: &'a Policy,
    /// The unfreeze ceremony (nonce, challenge) while frozen and a passkey exists.
    pub unfreeze: Option<&'a (String, String)>,
    pub passkeys: &'a [PasskeyRow],
    pub rp_id: &'a str,
    pub recent: &'a [crate::store::Decided],
}

pub(super) fn status(v: &StatusView<'_>) -> Result<Response, Response> {
    let (doc, policy, unfreeze, passkeys, rp_id) =
        (v.doc, v.policy, v.unfreeze, v.passkeys, v.rp_id);
    let mut body = String::from("<h1>Status</h1>");
    let mut bars = std::collections::BTreeSet::new();
    match doc.get("frozen") {
        Some(Value::Object(f)) => {
            let _ = write!(
                body,
                "<div class=\"card bad\"><h2>Payments are frozen</h2><p>since {} — {}</p>\
                 <p>Look at what froze them first. A human lifts it here with a passkey, or with \
                 <code>cajaguard unfreeze --config {}</code>.</p>{}<p id=\"cg-message\"></p></div>",
                text(f.get("at").and_then(Value::as_str).unwrap_or("")),
                text(f.get("reason").and_then(Value::as_str).unwrap_or("")),
                text(&policy.source.display().to_string()),
                if unfreeze.is_some() {
                    "<button class=\"approve\" data-ceremony=\"unfreeze\" id=\"cg-unfreeze\">Unfreeze with passkey</button>"
                } else {
                    ""
                }
            );
        }
        _ => body.push_str("<div class=\"card ok\"><h2>Payments are not frozen</h2></div>"),
    }
    if let Some(Value::Object(caps)) = doc.get("caps") {
        for (code, cap) in caps {
            let minor = |k: &str| cap.get(k).and_then(Value::as_i64).unwrap_or(0);
            let (settled, in_flight, remaining) = (
                minor("spent_minor"),
                minor("in_flight_minor"),
                minor("remaining_minor"),
            );
            let whole = (settled + in_flight + remaining).max(1);
            // Permille of the window, one CSS class per width used.
            let mut pct = |n: i64| {
                let w = n.saturating_mul(1000) / whole;
                bars.insert(w);
                w
            };
            let widths = (pct(settled), pct(in_flight), pct(remaining));
            let major = |k: &str| text(cap.get(k).and_then(Value::as_str).unwrap_or(""));
            let _ = write!(
                body,
                "<div class=\"card\"><h2>{code} window ({} h): {} of {}</h2>\
                 <div class=\"bar\" role=\"img\" aria-label=\"settled {s}, in flight {f}, remaining {r}\">\
                 <span class=\"settled w{}\"></span><span class=\"inflight w{}\"></span><span class=\"remaining w{}\"></span></div>\
                 <div class=\"legend\"><span><i class=\"sw settled\"></i>settled {s}</span><span><i class=\"sw inflight\"></i>in flight {f}</span>\
                 <span><i class=\"sw remaining\"></i>remaining {r}</span></div>\
                 <p>Approval above {}, at most {} per payment.</p></div>",
                policy.window.as_secs() / 3600,
                major("remaining"),
                major("window"),
                widths.0,
                widths.1,
                widths.2,
                major("approval_above"),
                major("per_transaction"),
                code = text(code),
                s = major("spent"),
                f = major("in_flight"),
                r = major("remaining"),
            );
        }
    }
    let pending = doc
        .get("pending")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let _ = write!(
        body,
        "<div class=\"card\"><a href=\"/\">{pending} request(s) waiting for a decision</a></div>"
    );
    body.push_str("<div class=\"card\"><h2>Recent decisions</h2>");
    if v.recent.is_empty() {
        body.push_str("<p>None yet.</p>");
    } else {
        body.push_str("<table><tr><th>when</th><th>verdict</th><th>amount</th><th>merchant</th><th>request</th></tr>");
        for d in v.recent {
            let shown = match (d.total, d.currency.as_deref()) {
                (Some(total), Some(currency)) => escape(&amount(total, currency)),
                _ => String::new(),
            };
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{} <code>{}</code></td><td>{shown}</td><td>{}</td><td><code>{}</code></td></tr>",
                text(&d.at),
                text(&d.verdict),
                text(&d.reason),
                text(d.merchant.as_deref().unwrap_or("")),
                text(d.request_id.as_deref().unwrap_or("")),
            );
        }
        body.push_str("</table>");
    }
    body.push_str("</div>");
    let mut widths = String::new();
    for w in bars {
        let _ = write!(widths, ".w{w}{{width:{}.{}%}}", w / 10, w % 10);
    }
    let data = unfreeze.map(|(nonce, challenge)| {
        json!({
            "kind": "unfreeze",
            "rpId": rp_id,
            "post": "/unfreeze",
            "allow": passkeys.iter().map(|p| b64(&p.passkey.credential_id)).collect::<Vec<_>>(),
            "ceremonies": { "unfreeze": { "nonce": nonce, "challenge": challenge } },
        })
    });
    styled_page("Status", &body, data, &widths)
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

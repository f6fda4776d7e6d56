//! The report's passkey scenario (SPEC §6 "Approvals an agent cannot make"), end to end: under
//! `approvals.require: "passkey"` a Day pack over the threshold is blocked by a real `cajaguard
//! mcp`; a key-file approval the agent signs for itself is refused; the human approves on the
//! approval page with a passkey, and the agent's retry pays once.
//!
//! The page is the real one, driven without a socket: `WebApp` built as `cajaguard web` builds it
//! (`cli::load_policy`, `cli::open_store`, the shop re-read through the configured downstream), and
//! each browser step a request to `WebApp::handle`. So the approval is verified and filed by the
//! page's own POST handler, not written here. The browser's authenticator is the core's software
//! one (feature `soft-authenticator`), whose origin is `http://localhost:8377`.

use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use cajaguard::web::{Request, Response, WebApp};
use cajaguard_core::passkey::soft_authenticator::{ORIGIN, SoftAuthenticator};
use cajaguard_harness::spec::Setup;
use cajaguard_harness::{Options, money, verdict};
use serde_json::{Value, json};

use crate::scenarios::{attempt, yes_no};

/// The page's address: the software authenticator signs for this origin.
const LISTEN: &str = "127.0.0.1:8377";
const HOST: &str = "localhost:8377";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(text: &str) -> Result<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .with_context(|| format!("the page's challenge {text:?} is not base64url"))
}

/// The approval page of the world's config, as `cajaguard web --config FILE` makes it.
struct Page {
    app: WebApp,
}

impl Page {
    fn open(config: &std::path::Path) -> Result<Page> {
        let policy = cajaguard::cli::load_policy(config).map_err(|f| anyhow!(f.message))?;
        let store = Arc::new(cajaguard::cli::open_store(&policy).map_err(|f| anyhow!(f.message))?);
        let app = WebApp::new(
            policy,
            store,
            WebApp::shop_reread(),
            Box::new(time::OffsetDateTime::now_utc),
        )
        .map_err(|e| anyhow!(e))?;
        Ok(Page { app })
    }

    /// What a browser on the page's origin gets for `method path` (with `body`).
    fn send(&self, method: &str, path: &str, body: Option<&Value>) -> Response {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        self.app.handle(&Request {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            host: Some(HOST.to_owned()),
            origin: (method == "POST").then(|| ORIGIN.to_owned()),
            fetch: cajaguard::web::Fetch::default(),
            body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
        })
    }

    /// The data block a page's script reads (challenges and ceremony nonces).
    fn data(&self, path: &str) -> Result<Value> {
        let page = self.send("GET", path, None);
        if page.status != 200 {
            bail!("GET {path}: {} {}", page.status, page.body);
        }
        let marker = "id=\"cg-data\">";
        let start = page
            .body
            .find(marker)
            .map(|i| i + marker.len())
            .ok_or_else(|| anyhow!("GET {path}: the page has no data block"))?;
        let end = page.body[start..]
            .find("</script>")
            .map(|i| start + i)
            .ok_or_else(|| anyhow!("GET {path}: the data block is not closed"))?;
        serde_json::from_str(&page.body[start..end])
            .with_context(|| format!("GET {path}: the data block is not JSON"))
    }
}

/// The ceremony `name`'s challenge on a page's data block.
fn challenge(data: &Value, name: &str) -> Result<[u8; 32]> {
    let text = data["ceremonies"][name]["challenge"]
        .as_str()
        .ok_or_else(|| anyhow!("the page offers no {name} ceremony: {data}"))?;
    unb64(text)?
        .try_into()
        .map_err(|_| anyhow!("the {name} challenge is not 32 bytes"))
}

/// The browser's `navigator.credentials.get` answer for ceremony `name` of a request page.
fn assertion(auth: &mut SoftAuthenticator, data: &Value, name: &str) -> Result<Value> {
    let a = auth.assert(&challenge(data, name)?);
    Ok(json!({
        "nonce": data["ceremonies"][name]["nonce"],
        "credential": {
            "id": b64(&a.credential_id),
            "type": "public-key",
            "response": {
                "clientDataJSON": b64(&a.client_data_json),
                "authenticatorData": b64(&a.authenticator_data),
                "signature": b64(&a.signature),
            }
        }
    }))
}

/// Registers `auth` through the one-time link `cajaguard passkey add` prints (trust on first use).
fn register(world: &cajaguard_harness::World, page: &Page, auth: &SoftAuthenticator) -> Result<()> {
    let out = world.cli(&["passkey", "add", "--name", "report laptop"]);
    let link = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let Some(path) = link.strip_prefix(ORIGIN) else {
        bail!(
            "passkey add printed no link to the page: {link:?} ({})",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let data = page.data(path)?;
    let challenge = unb64(data["challenge"].as_str().unwrap_or_default())?;
    let credential = serde_json::to_value(auth.register(&challenge))?;
    let nonce = &data["ceremonies"]["register"]["nonce"];
    let r = page.send(
        "POST",
        "/passkeys/register",
        Some(&json!({ "nonce": nonce, "credential": credential })),
    );
    if r.status != 200 {
        bail!("registering the passkey: {} {}", r.status, r.body);
    }
    Ok(())
}

pub fn passkey_approved_payment(setup: &Setup) -> Result<(String, bool)> {
    let world = setup.world(Options::default());
    let mut config = cajaguard_harness::world::read_json(&world.config);
    config["approvals"]["web"] = json!({ "listen": LISTEN });
    config["approvals"]["require"] = json!("passkey");
    std::fs::write(&world.config, serde_json::to_string_pretty(&config)?)?;
    // The agent can write a config of its own, on the same home, that counts its key file.
    let agents_own = world.dir.path().join("agents-own.json");
    config["approvals"]["require"] = json!("key");
    std::fs::write(&agents_own, serde_json::to_string_pretty(&config)?)?;

    let mut mcp = world.proxy();
    let page = Page::open(&world.config)?;
    let mut auth = SoftAuthenticator::es256();
    register(&world, &page, &auth)?;

    let (checkout, total) = mcp.create_priced("day-pack", 1);
    let (blocked, blocked_reached) = attempt(&world, &checkout, || mcp.pay(&checkout));
    let (v1, r1, id) = verdict(&blocked);
    let id = id.ok_or_else(|| anyhow!("the Day pack was not blocked: {blocked}"))?;

    // Refused: the agent approves with its key file, through its own config.
    let signed = world.cli_with(&agents_own, &["approve", &id, "--yes"]);
    let key_file_written = signed.status.success();
    let (with_key_file, key_file_reached) = attempt(&world, &checkout, || mcp.pay(&checkout));
    // Under "passkey" the gate trusts no approver key (`keys::counted_trusted_keys`), so the
    // file is refused as signed by an untrusted key.
    let (v2, r2, _) = verdict(&with_key_file);

    // Refused: an approval signed by a passkey that is not registered files nothing.
    let request_page = format!("/requests/{id}");
    let decide = format!("/requests/{id}/decide");
    let mut stranger = SoftAuthenticator::eddsa();
    let forged = page.send(
        "POST",
        &decide,
        Some(&assertion(
            &mut stranger,
            &page.data(&request_page)?,
            "approve",
        )?),
    );

    // The human approves on the page, and the agent's retry pays, once.
    let approved = page.send(
        "POST",
        &decide,
        Some(&assertion(
            &mut auth,
            &page.data(&request_page)?,
            "approve",
        )?),
    );
    let (paid, paid_reached) = attempt(&world, &checkout, || mcp.pay(&checkout));
    let (v3, r3, _) = verdict(&paid);
    let completes = world.completes_reaching_shop(&checkout);
    let (spent, in_flight) = world.spend("USD");

    let observed = format!(
        "{total}: {v1}/{r1}, reached shop: {}; the agent's key-file approval (written: {}) {v2}/{r2}, reached shop: {}; unregistered passkey on the page: {}; passkey approval on the page: {}; retry {v3}/{r3}, reached shop: {}; {completes} complete at the shop, {} counted, {} in flight",
        yes_no(blocked_reached),
        yes_no(key_file_written),
        yes_no(key_file_reached),
        forged.status,
        approved.status,
        yes_no(paid_reached),
        money("USD", spent),
        money("USD", in_flight),
    );
    let ok = (v1.as_str(), r1.as_str()) == ("blocked", "pending_approval")
        && !blocked_reached
        && key_file_written
        && (v2.as_str(), r2.as_str()) == ("blocked", "approval_untrusted_key")
        && !key_file_reached
        && forged.status == 403
        && approved.status == 200
        && (v3.as_str(), r3.as_str()) == ("allow_approved", "signed_approval")
        && paid_reached
        && completes == 1
        && spent == 8900
        && in_flight == 0;
    Ok((observed, ok))
}

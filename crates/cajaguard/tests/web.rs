//! The approval page's handlers (SPEC §6 "Approvals an agent cannot make"), driven without a
//! socket through `WebApp::handle` with the core's software authenticator: registering the first
//! passkey through a one-time link, approving a blocked Day pack so that the gate's next decision
//! pays it once, and the defences — a foreign Host or Origin, a missing or reused nonce, and a
//! decision without a valid assertion — each of which changes nothing.
//!
//! One idea (the page's handlers and their defences) in one file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use cajaguard::store::{ApprovalStatus, AuditRecord, FrozenBy, Store};
use cajaguard::web::{Fetch, Request, Response, WebApp};
use cajaguard_core::approval::{BasketDigest, RequestId, TrustedKeys};
use cajaguard_core::effect::Outcome;
use cajaguard_core::gate::{self, Facts};
use cajaguard_core::passkey::soft_authenticator::{FLAG_UP, SoftAuthenticator};
use cajaguard_core::policy::{ConfigOrigin, Policy};
use cajaguard_core::quote::{Quote, QuoteLine, QuoteTotal};
use cajaguard_core::request::{CompleteRequest, Instrument};
use cajaguard_core::verdict::{Reason, Verdict};
use serde_json::{Value, json};
use time::OffsetDateTime;

const HOST: &str = "localhost:8377";
const ORIGIN: &str = "http://localhost:8377";
const CHECKOUT: &str = "gid://fixture/Checkout/1";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .unwrap()
}

fn day_pack(total: i64) -> Quote {
    Quote {
        checkout_id: CHECKOUT.to_owned(),
        status: "ready_for_complete".to_owned(),
        currency: "USD".to_owned(),
        total,
        line_items: vec![QuoteLine {
            id: "li_1".to_owned(),
            item_id: "day_pack".to_owned(),
            title: "Day pack\u{202e}kcap".to_owned(),
            quantity: 1,
            unit_price: total,
        }],
        merchant: Some("demo-outfitters.example".to_owned()),
        totals: vec![QuoteTotal {
            kind: "total".to_owned(),
            amount: total,
        }],
        fulfillment: None,
    }
}

fn complete_request(key: &str) -> CompleteRequest {
    CompleteRequest {
        checkout_id: CHECKOUT.to_owned(),
        idempotency_key: key.to_owned(),
        agent_profile: "https://agent.example/profile".to_owned(),
        handler_ids: vec!["fixture_test_handler".to_owned()],
        instruments: vec![Instrument::of_handler("fixture_test_handler")],
    }
}

struct World {
    _home: tempfile::TempDir,
    store: Arc<Store>,
    policy: Policy,
    app: WebApp,
    quote: Quote,
    /// How many times the page read the shop back.
    rereads: Arc<std::sync::atomic::AtomicUsize>,
}

impl World {
    fn shop_reads(&self) -> usize {
        self.rereads.load(std::sync::atomic::Ordering::SeqCst)
    }
}

fn policy(home: &Path, require: &str, max_ttl_minutes: Option<u64>) -> Policy {
    let mut config = json!({
        "mode": "test",
        "home": home,
        "downstream": { "command": "cajaguard-fixture-shop" },
        "merchants": ["demo-outfitters.example"],
        "caps": { "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } },
        "approvals": { "web": { "listen": "127.0.0.1:8377" }, "require": require }
    });
    if let Some(minutes) = max_ttl_minutes {
        config["approvals"]["max_ttl_minutes"] = json!(minutes);
    }
    let path = home.join("config.json");
    Policy::parse(
        &config.to_string(),
        &ConfigOrigin {
            path: &path,
            user_home: None,
        },
    )
    .unwrap()
}

/// A home with the page for `require`; the shop re-reads `shop_now` (the gate's basket if `None`).
fn world_with(require: &str, shop_now: Option<Quote>) -> World {
    world_on(require, shop_now, Box::new(OffsetDateTime::now_utc), None)
}

/// [`world_with`] on the page's clock `clock`, approvals lasting at most `max_ttl_minutes`.
fn world_on(
    require: &str,
    shop_now: Option<Quote>,
    clock: Box<cajaguard::web::Clock>,
    max_ttl_minutes: Option<u64>,
) -> World {
    let home = tempfile::tempdir().unwrap();
    let policy = policy(home.path(), require, max_ttl_minutes);
    let store = Arc::new(Store::open(home.path()).unwrap());
    let quote = day_pack(8900);
    let reread = shop_now.unwrap_or_else(|| quote.clone());
    let rereads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&rereads);
    let app = WebApp::new(
        policy.clone(),
        Arc::clone(&store),
        Box::new(move |_, _| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(reread.clone())
        }),
        clock,
    )
    .unwrap();
    World {
        _home: home,
        store,
        policy,
        app,
        quote,
        rereads,
    }
}

/// The passkey page on a clock the test moves by hand (starting now), approvals lasting at most
/// `max_ttl_minutes`.
fn world_on_a_hand_clock(
    max_ttl_minutes: Option<u64>,
) -> (World, Arc<std::sync::Mutex<OffsetDateTime>>) {
    let now = Arc::new(std::sync::Mutex::new(OffsetDateTime::now_utc()));
    let clock = Arc::clone(&now);
    let w = world_on(
        "passkey",
        None,
        Box::new(move || *clock.lock().unwrap()),
        max_ttl_minutes,
    );
    (w, now)
}

fn world() -> World {
    world_with("passkey", None)
}

fn request(method: &str, path: &str, body: Option<&Value>) -> Request {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    Request {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        host: Some(HOST.to_owned()),
        origin: (method == "POST").then(|| ORIGIN.to_owned()),
        fetch: Fetch::default(),
        body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
    }
}

fn get(w: &World, path: &str) -> Response {
    w.app.handle(&request("GET", path, None))
}

fn post(w: &World, path: &str, body: &Value) -> Response {
    w.app.handle(&request("POST", path, Some(body)))
}

fn json_of(r: &Response) -> Value {
    serde_json::from_str(&r.body).unwrap()
}

/// The page's data block, as the script reads it.
fn data(r: &Response) -> Value {
    assert_eq!(r.status, 200, "{}", r.body);
    let start = r.body.find("id=\"cg-data\">").expect("a data block") + "id=\"cg-data\">".len();
    let end = start + r.body[start..].find("</script>").unwrap();
    serde_json::from_str(&r.body[start..end]).unwrap()
}

/// The gate's decision for the Day pack, through the store as the proxy runs it.
fn gate(w: &World, key: &str) -> Outcome {
    let now = OffsetDateTime::now_utc();
    let request = complete_request(key);
    let digest = BasketDigest::of(&w.quote, &request.instruments);
    let claim = w
        .store
        .claim(CHECKOUT, key, now, Duration::from_secs(3600))
        .unwrap()
        .unwrap_or_else(|_| panic!("claimed"));
    let trusted = TrustedKeys(vec![]);
    let gated = w
        .store
        .gate(
            &claim,
            &request,
            &w.quote,
            &digest,
            None,
            w.policy.window,
            now,
            w.policy.approvals.reads_passkey_approvals(),
            &mut |ledger, approvals, passkey_approvals| {
                gate::decide(
                    &w.policy,
                    &Facts {
                        agent: None,
                        request: &request,
                        quote: &w.quote,
                        digest: &digest,
                        ledger,
                        approvals,
                        passkey_approvals,
                        trusted_keys: &trusted,
                        now,
                    },
                )
            },
            &AuditRecord::new(now, "complete_checkout"),
        )
        .unwrap();
    gated.outcome
}

/// Blocks the Day pack; returns its request id.
fn blocked(w: &World) -> RequestId {
    let outcome = gate(w, "k1");
    assert_eq!(outcome.ruling.reason(), Reason::PendingApproval);
    let id = outcome.ruling.request_id().unwrap().clone();
    assert_eq!(
        outcome.ruling.approval_url(),
        Some(format!("{ORIGIN}/requests/{id}").as_str())
    );
    id
}

fn link(w: &World, name: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    let token = hex::encode([NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed); 32]);
    let now = OffsetDateTime::now_utc();
    w.store
        .create_registration_link(&token, name, now, &AuditRecord::new(now, "cli"))
        .unwrap();
    format!("/passkeys/register?token={token}")
}

fn register(w: &World, auth: &SoftAuthenticator) -> Response {
    let page = data(&get(w, &link(w, "laptop")));
    let challenge = unb64(page["challenge"].as_str().unwrap());
    let credential = serde_json::to_value(auth.register(&challenge)).unwrap();
    let nonce = &page["ceremonies"]["register"]["nonce"];
    post(
        w,
        "/passkeys/register",
        &json!({ "nonce": nonce, "credential": credential }),
    )
}

/// The browser's `credentials.get` answer for `ceremony` of the request page `page`.
fn assertion(auth: &mut SoftAuthenticator, page: &Value, ceremony: &str) -> Value {
    let c = &page["ceremonies"][ceremony];
    let challenge: [u8; 32] = unb64(c["challenge"].as_str().unwrap()).try_into().unwrap();
    let a = auth.assert(&challenge);
    json!({
        "nonce": c["nonce"],
        "credential": {
            "id": b64(&a.credential_id),
            "type": "public-key",
            "response": {
                "clientDataJSON": b64(&a.client_data_json),
                "authenticatorData": b64(&a.authenticator_data),
                "signature": b64(&a.signature),
            }
        }
    })
}

fn decide_path(id: &RequestId) -> String {
    format!("/requests/{id}/decide")
}

#[test]
fn a_passkey_registered_on_first_use_approves_the_day_pack_once() {
    let w = world();
    let mut auth = SoftAuthenticator::es256();
    let r = register(&w, &auth);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(json_of(&r)["ok"], true);
    assert_eq!(w.store.passkeys().unwrap().len(), 1);

    let id = blocked(&w);
    assert!(get(&w, "/").body.contains(id.as_str()), "listed as waiting");
    let page = get(&w, &format!("/requests/{id}"));
    assert!(
        !page.body.contains('\u{202e}'),
        "shop text is shown without invisible characters"
    );
    let page = data(&page);
    let r = post(
        &w,
        &decide_path(&id),
        &assertion(&mut auth, &page, "approve"),
    );
    assert_eq!(r.status, 200, "{}", r.body);

    let paid = gate(&w, "k2");
    assert_eq!(
        paid.ruling.verdict(),
        Verdict::AllowApproved,
        "{}",
        paid.ruling.detail()
    );
    assert_eq!(
        w.store.passkeys().unwrap()[0].passkey.sign_count,
        1,
        "the gate moved the counter on"
    );
    assert_eq!(status(&w, &id), ApprovalStatus::Used);
    let page = get(&w, "/status");
    assert!(
        page.body.contains("Recent decisions") && page.body.contains("allow_approved"),
        "the status view lists the decision"
    );
}

/// What `cajaguard verify` reports for `id`.
fn status(w: &World, id: &RequestId) -> ApprovalStatus {
    w.store
        .approval_status(
            id,
            &TrustedKeys(vec![]),
            w.policy.approvals.passkey_relying_party().as_ref(),
            OffsetDateTime::now_utc(),
            w.policy.approvals.max_ttl,
        )
        .unwrap()
}

#[test]
fn with_require_key_the_page_offers_no_passkey_decision() {
    let w = world_with("key", None);
    assert_eq!(register(&w, &SoftAuthenticator::es256()).status, 200);
    let id = blocked_key(&w);
    let page = data(&get(&w, &format!("/requests/{id}")));
    assert_eq!(page["ceremonies"], json!({}));
}

/// Blocks the Day pack under `require: "key"` (no `approval_url` check: the terminal comes first).
fn blocked_key(w: &World) -> RequestId {
    let outcome = gate(w, "k1");
    assert_eq!(outcome.ruling.reason(), Reason::PendingApproval);
    outcome.ruling.request_id().unwrap().clone()
}

#[test]
fn a_second_passkey_must_be_approved_by_a_registered_one() {
    let w = world();
    let mut first = SoftAuthenticator::es256();
    assert_eq!(register(&w, &first).status, 200);

    // The new passkey verifies, but is not kept until a registered one approves it.
    let mut second = SoftAuthenticator::eddsa();
    let r = register(&w, &second);
    assert_eq!(r.status, 200, "{}", r.body);
    let answer = json_of(&r);
    assert_eq!(answer["ok"], false);
    assert_eq!(
        w.store.passkeys().unwrap().len(),
        1,
        "not trusted on first use"
    );
    let page = json!({ "ceremonies": { "enrol": answer["approve"].clone() } });

    // The new passkey cannot approve itself.
    let r = post(
        &w,
        "/passkeys/enrol",
        &assertion(&mut second, &page, "enrol"),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(w.store.passkeys().unwrap().len(), 1);

    // Approved by the first (a fresh ceremony: the refused one was used up).
    let r = register(&w, &second);
    let page = json!({ "ceremonies": { "enrol": json_of(&r)["approve"].clone() } });
    let r = post(
        &w,
        "/passkeys/enrol",
        &assertion(&mut first, &page, "enrol"),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(w.store.passkeys().unwrap().len(), 2);
}

#[test]
fn a_deny_on_the_page_refuses_the_payment() {
    let w = world();
    let mut auth = SoftAuthenticator::eddsa();
    assert_eq!(register(&w, &auth).status, 200);
    let id = blocked(&w);
    let page = data(&get(&w, &format!("/requests/{id}")));
    assert_eq!(
        post(&w, &decide_path(&id), &assertion(&mut auth, &page, "deny")).status,
        200
    );
    assert_eq!(gate(&w, "k2").ruling.reason(), Reason::ApprovalDenied);
}

#[test]
fn a_basket_the_shop_changed_is_shown_with_a_warning_and_cannot_be_approved() {
    let w = world_with("passkey", Some(day_pack(9900)));
    assert_eq!(register(&w, &SoftAuthenticator::es256()).status, 200);
    let id = blocked(&w);
    let page = get(&w, &format!("/requests/{id}"));
    assert!(page.body.contains("Warning: the shop"), "{}", page.body);
    let page = data(&page);
    assert!(page["ceremonies"].get("approve").is_none());
    assert!(page["ceremonies"].get("deny").is_some());
}

#[test]
fn a_foreign_host_is_refused_before_anything() {
    let w = world();
    for host in [
        None,
        Some("evil.example:8377"),
        Some("127.0.0.1:8377"),
        Some("localhost:9999"),
    ] {
        let mut req = request("GET", &link(&w, "x"), None);
        req.host = host.map(str::to_owned);
        let r = w.app.handle(&req);
        assert_eq!(r.status, 421, "{host:?}");
        assert!(!r.body.contains("cg-data"));
    }
}

/// The human sees where the goods go and what pays (the request digest binds both), not only
/// the items and the amount.
#[test]
fn the_page_shows_where_the_goods_go_and_what_pays() {
    let mut shop_now = day_pack(8900);
    shop_now.fulfillment = Some(
        json!([{"type": "shipping", "selected_destination_id": "d2", "destinations": [
            {"id": "d1", "street_address": "1 Home St"},
            {"id": "d2", "street_address": "9 Elsewhere Rd", "address_locality": "Reno"}
        ]}])
        .to_string(),
    );
    let w = world_with("passkey", Some(shop_now));
    let id = blocked(&w);
    let page = get(&w, &format!("/requests/{id}"));
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("delivery") && page.body.contains("9 Elsewhere Rd"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("1 Home St"),
        "only the selected destination"
    );
    assert!(page.body.contains("pays with"), "{}", page.body);
}

/// A request's page loaded in a loop reads the shop back once every two seconds, not once a load
/// (each read-back is a call on the shop's credential; with a stdio shop, a new shop process).
#[test]
fn a_page_loaded_in_a_loop_reads_the_shop_back_once_every_two_seconds() {
    let (w, now) = world_on_a_hand_clock(None);
    let id = blocked(&w);
    let before = w.shop_reads();
    for _ in 0..50 {
        assert_eq!(get(&w, &format!("/requests/{id}")).status, 200);
    }
    assert_eq!(w.shop_reads(), before + 1, "one read-back for 50 loads");
    *now.lock().unwrap() += time::Duration::seconds(2);
    assert_eq!(get(&w, &format!("/requests/{id}")).status, 200);
    assert_eq!(w.shop_reads(), before + 2, "read again once it is 2 s old");
}

/// Review finding: the read-back's cache held its lock over the shop's call, so a shop that hung
/// held up every load of every request's page. Now only that request's read waits; its other
/// loads are answered at once, saying the shop is being asked.
#[test]
fn a_shop_that_hangs_holds_up_no_other_load_of_the_page() {
    let w = world();
    let id = blocked(&w);
    let (entered, reading) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let answer = w.quote.clone();
    let app = Arc::new(
        WebApp::new(
            w.policy.clone(),
            Arc::clone(&w.store),
            Box::new(move |_, _| {
                let _ = entered.send(());
                let _ = released.lock().unwrap().recv();
                Ok(answer.clone())
            }),
            Box::new(OffsetDateTime::now_utc),
        )
        .unwrap(),
    );
    let path = format!("/requests/{id}");
    let hung = {
        let (app, path) = (Arc::clone(&app), path.clone());
        std::thread::spawn(move || app.handle(&request("GET", &path, None)))
    };
    reading.recv().unwrap();
    // On a thread of its own, so that a load held up fails the test instead of hanging it.
    let (answered, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = answered.send(app.handle(&request("GET", &path, None)));
    });
    let meanwhile = answer
        .recv_timeout(Duration::from_secs(10))
        .expect("another load of the page waited for the hung read-back");
    assert_eq!(meanwhile.status, 200, "{}", meanwhile.body);
    assert!(
        meanwhile
            .body
            .contains("being asked for this checkout already"),
        "{}",
        meanwhile.body
    );
    release.send(()).unwrap();
    assert_eq!(hung.join().unwrap().status, 200);
}

/// Another site's page cannot make the page read the shop, checkpoint the log or issue
/// ceremonies (an image or a fetch pointed at it: 260 of them used up the ceremonies so the
/// human's open form failed). A link the human follows from another site still opens it.
#[test]
fn another_sites_page_cannot_make_the_page_work() {
    let w = world();
    let id = blocked(&w);
    let fetched = |site: &str, mode: &str, dest: &str| {
        let mut req = request("GET", &format!("/requests/{id}"), None);
        req.fetch = Fetch {
            site: Some(site.to_owned()),
            mode: Some(mode.to_owned()),
            dest: Some(dest.to_owned()),
        };
        w.app.handle(&req)
    };
    let reads = || w.shop_reads();
    let before = reads();
    for (site, mode, dest) in [
        ("cross-site", "no-cors", "image"),
        ("cross-site", "cors", "empty"),
        ("same-site", "no-cors", "script"),
        ("cross-site", "navigate", "iframe"),
    ] {
        let r = fetched(site, mode, dest);
        assert_eq!(r.status, 403, "{site} {mode} {dest}");
        assert!(!r.body.contains("cg-data"));
    }
    assert_eq!(reads(), before, "the shop was read for another site");
    for (site, mode, dest) in [
        ("cross-site", "navigate", "document"),
        ("none", "navigate", "document"),
        ("same-origin", "cors", "empty"),
    ] {
        assert_eq!(
            fetched(site, mode, dest).status,
            200,
            "{site} {mode} {dest}"
        );
    }
}

#[test]
fn a_foreign_origin_or_a_forged_decision_files_nothing() {
    let w = world();
    let mut auth = SoftAuthenticator::es256();
    assert_eq!(register(&w, &auth).status, 200);
    let id = blocked(&w);
    let page = data(&get(&w, &format!("/requests/{id}")));
    let good = assertion(&mut auth, &page, "approve");

    // Another site's page (or a script without the page's origin).
    for origin in [
        None,
        Some("http://evil.example"),
        Some("null"),
        Some("http://localhost:9999"),
    ] {
        let mut req = request("POST", &decide_path(&id), Some(&good));
        req.origin = origin.map(str::to_owned);
        assert_eq!(w.app.handle(&req).status, 403, "{origin:?}");
    }
    // No nonce, an unknown nonce, no credential.
    let mut no_nonce = good.clone();
    no_nonce.as_object_mut().unwrap().remove("nonce");
    assert_eq!(post(&w, &decide_path(&id), &no_nonce).status, 400);
    let mut unknown = good.clone();
    unknown["nonce"] = json!("00112233445566778899aabbccddeeff");
    assert_eq!(post(&w, &decide_path(&id), &unknown).status, 409);
    assert_eq!(
        post(&w, &decide_path(&id), &json!({ "nonce": good["nonce"] })).status,
        400
    );
    // Without the authenticator: a signature by a passkey that is not registered.
    let page = data(&get(&w, &format!("/requests/{id}")));
    let mut stranger = SoftAuthenticator::eddsa();
    let r = post(
        &w,
        &decide_path(&id),
        &assertion(&mut stranger, &page, "approve"),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    // User verification off.
    let page = data(&get(&w, &format!("/requests/{id}")));
    let mut unverified = SoftAuthenticator::es256();
    unverified.flags = FLAG_UP;
    unverified.counter = Some(50);
    let r = post(
        &w,
        &decide_path(&id),
        &assertion(&mut unverified, &page, "approve"),
    );
    assert_eq!(r.status, 403, "{}", r.body);

    assert!(
        w.store.passkey_approvals(&id).unwrap().is_empty(),
        "nothing was filed"
    );
    assert_eq!(gate(&w, "k2").ruling.reason(), Reason::PendingApproval);
}

#[test]
fn a_ceremony_nonce_is_single_use() {
    let w = world();
    let mut auth = SoftAuthenticator::es256();
    assert_eq!(register(&w, &auth).status, 200);
    let id = blocked(&w);
    let page = data(&get(&w, &format!("/requests/{id}")));
    let body = assertion(&mut auth, &page, "approve");
    assert_eq!(post(&w, &decide_path(&id), &body).status, 200);
    let again = post(&w, &decide_path(&id), &body);
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(w.store.passkey_approvals(&id).unwrap().len(), 1);
}

#[test]
fn every_answer_forbids_external_loads_and_sends_no_cors() {
    let w = world();
    for r in [
        get(&w, "/"),
        get(&w, "/status"),
        get(&w, "/passkeys"),
        get(&w, "/nowhere"),
    ] {
        let headers = r.headers();
        let csp = headers
            .iter()
            .find(|(k, _)| *k == "Content-Security-Policy")
            .map(|(_, v)| v.as_str())
            .unwrap();
        assert!(csp.starts_with("default-src 'none'"), "{csp}");
        assert!(
            csp.contains("connect-src 'self'") && !csp.contains("http"),
            "{csp}"
        );
        assert!(
            headers
                .iter()
                .all(|(k, _)| !k.to_ascii_lowercase().starts_with("access-control")),
            "no CORS header"
        );
        assert!(
            !r.body.contains("src=\"http"),
            "nothing loaded from the network"
        );
    }
}

/// Freezes payments, as a human on the terminal does.
fn freeze(w: &World) {
    let now = OffsetDateTime::now_utc();
    w.store
        .freeze(
            "a test freeze",
            FrozenBy::Human,
            now,
            &AuditRecord::new(now, "cli"),
        )
        .unwrap();
}

#[test]
fn a_passkey_unfreezes_the_freeze_the_page_showed_and_nothing_else_does() {
    let w = world();
    let mut auth = SoftAuthenticator::es256();
    assert_eq!(register(&w, &auth).status, 200);
    freeze(&w);
    let page = data(&get(&w, "/status"));

    // A stranger's passkey, then a valid assertion posted from another origin: still frozen.
    let mut stranger = SoftAuthenticator::eddsa();
    let r = post(
        &w,
        "/unfreeze",
        &assertion(&mut stranger, &page, "unfreeze"),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(w.store.frozen().unwrap().is_some());

    let page = data(&get(&w, "/status"));
    let body = assertion(&mut auth, &page, "unfreeze");
    let mut req = request("POST", "/unfreeze", Some(&body));
    req.origin = Some("http://evil.example".to_owned());
    assert_eq!(w.app.handle(&req).status, 403);
    assert!(w.store.frozen().unwrap().is_some());

    let r = post(&w, "/unfreeze", &body);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(w.store.frozen().unwrap().is_none());
    assert_eq!(post(&w, "/unfreeze", &body).status, 409, "single use");
}

/// A local process that loads a request's page and the status page in a loop does not take the
/// human's open forms: each load issued new forms and, past 256, dropped the oldest, so the
/// human's Approve (and Unfreeze) was refused, 409. Nor does an answer it forges with a nonce it
/// read from the page (every load shows the same form now) use the human's form up.
#[test]
fn loading_the_pages_in_a_loop_leaves_the_humans_open_forms_usable() {
    let w = world();
    let mut auth = SoftAuthenticator::es256();
    assert_eq!(register(&w, &auth).status, 200);
    let id = blocked(&w);
    freeze(&w);
    let request_page = data(&get(&w, &format!("/requests/{id}")));
    let status_page = data(&get(&w, "/status"));

    for _ in 0..300 {
        assert_eq!(get(&w, &format!("/requests/{id}")).status, 200);
        assert_eq!(get(&w, "/status").status, 200);
    }
    let looped = data(&get(&w, &format!("/requests/{id}")));
    let mut stranger = SoftAuthenticator::eddsa();
    let forged = post(
        &w,
        &decide_path(&id),
        &assertion(&mut stranger, &looped, "approve"),
    );
    assert_eq!(forged.status, 403, "{}", forged.body);

    let approved = post(
        &w,
        &decide_path(&id),
        &assertion(&mut auth, &request_page, "approve"),
    );
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(w.store.passkey_approvals(&id).unwrap().len(), 1);
    let unfrozen = post(
        &w,
        "/unfreeze",
        &assertion(&mut auth, &status_page, "unfreeze"),
    );
    assert_eq!(unfrozen.status, 200, "{}", unfrozen.body);
    assert!(w.store.frozen().unwrap().is_none());
}

/// Review finding: a form was handed out again until it was 2.5 minutes old, whatever its terms'
/// own lifetime; under `approvals.max_ttl_minutes: 1` a page loaded after a minute offered a form
/// whose approval had already expired, refused when the human used it. A form now lasts no longer
/// than what it signs.
#[test]
fn a_page_never_hands_out_a_form_whose_approval_has_expired() {
    let (w, now) = world_on_a_hand_clock(Some(1));
    let mut auth = SoftAuthenticator::es256();
    assert_eq!(register(&w, &auth).status, 200);
    let id = blocked(&w);
    let first = data(&get(&w, &format!("/requests/{id}")));
    *now.lock().unwrap() += time::Duration::seconds(70);
    let later = data(&get(&w, &format!("/requests/{id}")));
    assert_ne!(
        later["ceremonies"]["approve"]["nonce"], first["ceremonies"]["approve"]["nonce"],
        "a new form, not the one whose approval expired"
    );
    let approved = post(
        &w,
        &decide_path(&id),
        &assertion(&mut auth, &later, "approve"),
    );
    assert_eq!(approved.status, 200, "{}", approved.body);
}

/// Past 256 open forms a new one is refused rather than the oldest dropped: the forms already
/// open (here registrations, each from a link of its own) stay usable.
#[test]
fn past_the_cap_new_forms_are_refused_and_open_ones_kept() {
    let w = world();
    let now = OffsetDateTime::now_utc();
    let links: Vec<String> = (0..257u32)
        .map(|n| {
            let token = hex::encode(link_token(n));
            w.store
                .create_registration_link(&token, "laptop", now, &AuditRecord::new(now, "cli"))
                .unwrap();
            format!("/passkeys/register?token={token}")
        })
        .collect();
    let first = data(&get(&w, &links[0]));
    for link in &links[1..256] {
        assert_eq!(get(&w, link).status, 200);
    }
    let refused = get(&w, &links[256]);
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.body.contains("too many forms"), "{}", refused.body);

    let auth = SoftAuthenticator::es256();
    let challenge = unb64(first["challenge"].as_str().unwrap());
    let credential = serde_json::to_value(auth.register(&challenge)).unwrap();
    let r = post(
        &w,
        "/passkeys/register",
        &json!({ "nonce": first["ceremonies"]["register"]["nonce"], "credential": credential }),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Review finding: with every form taken (loads of many requests' pages, say), a request's page
/// and the status page failed whole (503). They are shown without the new form now, saying why
/// and how to decide on the terminal.
#[test]
fn with_every_form_taken_a_request_page_still_shows_without_its_buttons() {
    let w = world();
    let auth = SoftAuthenticator::es256();
    assert_eq!(register(&w, &auth).status, 200);
    let id = blocked(&w);
    let now = OffsetDateTime::now_utc();
    for n in 0..256u32 {
        let token = hex::encode(link_token(n));
        w.store
            .create_registration_link(&token, "laptop", now, &AuditRecord::new(now, "cli"))
            .unwrap();
        assert_eq!(
            get(&w, &format!("/passkeys/register?token={token}")).status,
            200
        );
    }
    let page = get(&w, &format!("/requests/{id}"));
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("Too many forms are open"),
        "{}",
        page.body
    );
    assert!(page.body.contains(&format!("cajaguard approve {id}")));
    assert!(!page.body.contains("id=\"cg-approve\""), "{}", page.body);
    freeze(&w);
    let status = get(&w, "/status");
    assert_eq!(status.status, 200, "{}", status.body);
    assert!(
        !status.body.contains("id=\"cg-unfreeze\""),
        "{}",
        status.body
    );
}

/// A registration link's token, one for each `n`.
fn link_token(n: u32) -> [u8; 32] {
    let mut token = [0xa5u8; 32];
    token[..4].copy_from_slice(&n.to_be_bytes());
    token
}

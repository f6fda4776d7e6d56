//! Every cost beside its physical floor, measured in the same run: the pure decision
//! (`cajaguard_core` called directly), the durable gate (`Store::gate` on a real home on the
//! report's disk, at 10^3 and 10^6 ledger rows), MCP round trips with and without the proxy, cold
//! start; and the floors: one fsync on the home's disk, one Ed25519 verify, one pipe round trip,
//! one process spawn.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use cajaguard::store::{AuditRecord, Store};
use cajaguard_core::approval::{
    self, ApprovalDocument, ApprovalTerms, BasketDigest, Decision, SigningKey, TrustedKeys,
};
use cajaguard_core::effect::{
    ApprovalCandidate, CheckoutLedger, LedgerView, Outcome, PasskeyCandidate,
};
use cajaguard_core::gate::{self, Facts};
use cajaguard_core::policy::{ConfigOrigin, Policy};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use cajaguard_core::tripwire;
use cajaguard_core::verdict::{Reason, Verdict};
use serde::Serialize;
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::stats::{Summary, time_n};
use crate::world::{self, Bins, Mcp, Options, Shop, World};

/// How many samples each row takes, and how big the large ledger is.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sizes {
    pub cpu: usize,
    pub crypto: usize,
    pub disk: usize,
    pub round_trip: usize,
    pub fixture_round_trip: usize,
    pub process: usize,
    pub big_ledger_rows: u64,
}

impl Sizes {
    pub fn full() -> Sizes {
        Sizes {
            cpu: 20_000,
            crypto: 5_000,
            disk: 400,
            round_trip: 5_000,
            fixture_round_trip: 200,
            process: 50,
            big_ledger_rows: 1_000_000,
        }
    }

    pub fn quick() -> Sizes {
        Sizes {
            cpu: 2_000,
            crypto: 500,
            disk: 100,
            round_trip: 500,
            fixture_round_trip: 30,
            process: 10,
            big_ledger_rows: 100_000,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub goal: String,
    pub met: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub key: String,
    pub name: String,
    #[serde(flatten)]
    pub summary: Summary,
    /// The floor row's key this cost is compared with.
    pub floor: Option<String>,
    /// p50 of this row over p50 of its floor.
    pub ratio_to_floor: Option<f64>,
    pub target: Option<Target>,
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    pub floors: Vec<Row>,
    pub rows: Vec<Row>,
}

impl Timing {
    fn floor(&self, key: &str) -> Option<&Row> {
        self.floors.iter().find(|r| r.key == key)
    }

    pub fn row(&self, key: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.key == key)
    }

    /// Adds a cost row, with its ratio to its floor.
    fn push(&mut self, key: &str, name: &str, summary: Summary, floor: &str) -> &mut Row {
        let ratio = self
            .floor(floor)
            .filter(|f| f.summary.p50_ns > 0.0)
            .map(|f| summary.p50_ns / f.summary.p50_ns);
        self.rows.push(Row {
            key: key.to_owned(),
            name: name.to_owned(),
            summary,
            floor: Some(floor.to_owned()),
            ratio_to_floor: ratio,
            target: None,
            note: None,
        });
        let last = self.rows.len() - 1;
        &mut self.rows[last]
    }
}

fn floor_row(key: &str, name: &str, summary: Summary) -> Row {
    Row {
        key: key.to_owned(),
        name: name.to_owned(),
        summary,
        floor: None,
        ratio_to_floor: None,
        target: None,
        note: None,
    }
}

pub fn run(bins: &Bins, scratch: &Path, sizes: Sizes, progress: &dyn Fn(&str)) -> Result<Timing> {
    let mut t = Timing {
        floors: Vec::new(),
        rows: Vec::new(),
    };
    let homes = tempfile::Builder::new()
        .prefix("timing-")
        .tempdir_in(scratch)?;

    progress("floors: Ed25519 verify, pipe round trip, process spawn");
    t.floors.push(floor_row(
        "ed25519",
        "Ed25519 verify (one signature, ~300 B message)",
        Summary::of(&ed25519_floor(sizes.crypto)?),
    ));
    t.floors.push(floor_row(
        "pipe",
        "pipe round trip: one line to a thread and back over OS pipes",
        Summary::of(&pipe_floor(sizes.round_trip * 4)?),
    ));
    t.floors.push(floor_row(
        "spawn",
        "process spawn: `cajaguard --version`, spawn to exit",
        Summary::of(&spawn_floor(&bins.cajaguard, sizes.process)?),
    ));

    progress("decide(), tripwire, approval verify (in process)");
    core_rows(&mut t, sizes)?;

    progress("seeding the ledgers; fsync floor and Store::gate, interleaved");
    store_rows(&mut t, homes.path(), sizes, progress)?;

    progress("MCP round trips: straight to the shop and through cajaguard mcp");
    round_trip_rows(&mut t, bins, scratch, sizes)?;

    progress("cold start: spawn cajaguard mcp + initialize + tools/list");
    let cold = cold_start(bins, scratch, sizes.process)?;
    let row = t.push(
        "cold_start",
        "cold start: spawn `cajaguard mcp` + initialize + tools/list (fixture shop)",
        Summary::of(&cold),
        "spawn",
    );
    let p50 = row.summary.p50_ns;
    row.target = Some(Target {
        goal: "<= 20 ms p50".into(),
        met: p50 <= 20e6,
    });
    Ok(t)
}

// ---- floors ----

fn fsync_floor(dir: &Path, n: usize) -> Result<Vec<Duration>> {
    let path = dir.join("fsync-floor.probe");
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let samples = time_n(n, || {
        file.write_all(b"x")?;
        file.sync_all()?;
        Ok(())
    })?;
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(samples)
}

fn ed25519_floor(n: usize) -> Result<Vec<Duration>> {
    use ed25519_dalek::Signer;
    let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let public = key.verifying_key();
    let message = [0x5a_u8; 300];
    let signature = key.sign(&message);
    time_n(n, || {
        public
            .verify_strict(std::hint::black_box(&message), &signature)
            .map_err(|e| anyhow!("{e}"))
    })
}

fn pipe_floor(n: usize) -> Result<Vec<Duration>> {
    // Two OS pipes: this thread -> echo thread -> this thread, one JSON-RPC-sized line each way.
    let (there_r, mut there_w) = std::io::pipe()?;
    let (back_r, mut back_w) = std::io::pipe()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut reader = BufReader::new(there_r);
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            back_w.write_all(line.as_bytes())?;
        }
    });
    let mut reader = BufReader::new(back_r);
    let mut line = String::new();
    let samples = time_n(n, || {
        there_w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n")?;
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            bail!("the echo thread stopped");
        }
        Ok(())
    })?;
    drop(there_w);
    echo.join()
        .map_err(|_| anyhow!("the echo thread panicked"))??;
    Ok(samples)
}

fn spawn_floor(cajaguard: &Path, n: usize) -> Result<Vec<Duration>> {
    time_n(n, || {
        let status = Command::new(cajaguard)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("cajaguard --version failed");
        }
        Ok(())
    })
}

// ---- the pure core ----

/// The core bench's inputs: a policy, ~2 KB arguments, ~2 KB checkouts, an approval.
struct CoreInputs {
    policy: Policy,
    args: Value,
    request: CompleteRequest,
    small: Quote,
    big: Quote,
    trusted: TrustedKeys,
    approval: ApprovalDocument,
    digest: BasketDigest,
    now: OffsetDateTime,
}

fn policy(window: &str) -> Result<Policy> {
    let config = json!({
        "mode": "test", "home": "../.cajaguard", "downstream": {"command": "cajaguard-fixture-shop"},
        "merchants": ["demo-outfitters.example", "tokyo-tea.example"],
        "caps": {"USD": {"approval_above": "50.00", "per_transaction": "100.00", "window": window}},
        "approvals": {"trusted_keys": ["keys/approver.pub.pem"], "max_ttl_minutes": 15},
        "test_mode": {"handler_ids": ["fixture_test_handler"], "token_pattern": "^cg_test_[A-Za-z0-9_]{8,}$"}
    });
    let origin = ConfigOrigin {
        path: Path::new("/etc/cajaguard/report.json"),
        user_home: None,
    };
    Policy::parse(&config.to_string(), &origin).map_err(|e| anyhow!("{e}"))
}

/// A checkout of about 2 KB with `n` line items at `price` each.
fn checkout(n: usize, price: i64) -> Value {
    let items: Vec<Value> = (0..n)
        .map(|i| {
            json!({"id": format!("li_{i}"), "item": {"id": format!("sku_{i}"), "title": format!("Product number {i}"), "price": price,
                   "image_url": format!("https://demo-outfitters.example/img/{i}.png")},
                   "quantity": 1, "totals": [{"type": "subtotal", "amount": price}, {"type": "total", "amount": price}]})
        })
        .collect();
    let total = price * n as i64;
    json!({
        "ucp": {"version": "2026-08-25", "capabilities": {}},
        "id": "gid://fixture/Checkout/1", "status": "ready_for_complete", "currency": "USD",
        "line_items": items,
        "totals": [{"type": "subtotal", "amount": total}, {"type": "tax", "amount": 0}, {"type": "total", "amount": total}],
        "links": [{"type": "terms_of_service", "url": "https://demo-outfitters.example/terms"},
                  {"type": "privacy_policy", "url": "https://demo-outfitters.example/privacy"}],
        "continue_url": "https://demo-outfitters.example/checkout/1",
        "messages": [{"type": "info", "content": "Free shipping on orders over USD 50.00"}]
    })
}

/// ~2 KB of complete_checkout arguments (the core bench's).
fn args() -> Value {
    json!({
        "meta": {"ucp-agent": {"profile": "https://agent.example/.well-known/ucp/profile.json"},
                 "idempotency-key": "2c9a1f5e-8d3b-4a71-9e02-6f4b3c2d1a00"},
        "id": "gid://fixture/Checkout/1",
        "checkout": {
            "payment": {"instruments": [{
                "id": "instr_1", "handler_id": "fixture_test_handler", "type": "card", "selected": true,
                "display": {"brand": "visa", "last_digits": "4242", "expiry_month": 12, "expiry_year": 2030},
                "billing_address": {"street_address": "1600 Amphitheatre Pkwy", "address_locality": "Mountain View",
                                    "address_region": "CA", "postal_code": "94043", "address_country": "US",
                                    "first_name": "Ana", "last_name": "Buyer"},
                "credential": {"type": "token", "token": "cg_test_tok_4242abcd"}}]},
            "signals": {"dev.ucp.buyer_ip": "203.0.113.7", "dev.ucp.user_agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/128.0 Safari/537.36",
                        "session": "b7c4e1a2-3f5d-4e6a-9b8c-0d1e2f3a4b5c", "device": {"screen": "1920x1080", "tz": "America/Los_Angeles", "lang": "en-US"}},
            "attribution": {"campaign": "summer-sale-2026", "source": "agent", "medium": "assistant",
                            "note": "Buyer asked for two pairs of trail socks in size M, delivery before Friday, gift wrap if possible. Order reference 12-3456-7890."}
        },
        "notes": ["Leave at the front desk", "Call 415-555-0100 on arrival", "Second request id 7f3e9a10-1b2c-4d5e-8f90-a1b2c3d4e5f6"],
        "context": {"locale": "en-US", "currency_hint": "USD", "country": "US", "history": ["search socks", "view item trail_socks", "add to cart", "create checkout", "update checkout", "get checkout"]}
    })
}

fn core_inputs() -> Result<CoreInputs> {
    let policy = policy("150.00")?;
    let now = OffsetDateTime::now_utc();
    let args = args();
    let request = CompleteRequest::from_args(&json!({
        "meta": args["meta"].clone(), "id": args["id"].clone(), "checkout": {"payment": args["checkout"]["payment"].clone()}
    }))
    .map_err(|r| anyhow!("bad request: {}", r.detail()))?;
    let small = Quote::from_shop(&checkout(8, 300)).map_err(|r| anyhow!("{}", r.detail()))?; // USD 24.00
    let big = Quote::from_shop(&checkout(8, 1100)).map_err(|r| anyhow!("{}", r.detail()))?; // USD 88.00
    let key = SigningKey::from_seed(&[7u8; 32]);
    let trusted = TrustedKeys(vec![key.public_key()]);
    let digest = BasketDigest::of(&big, &request.instruments);
    let approval = approval::sign(
        &key,
        &ApprovalTerms {
            request_id: digest.request_id(),
            digest,
            decision: Decision::Approve,
            merchant: "demo-outfitters.example".into(),
            checkout_id: big.checkout_id.clone(),
            currency: "USD".into(),
            total: big.total,
            issued_at: now - time::Duration::minutes(1),
            ttl: Duration::from_secs(600),
            nonce: [0x5a; 16],
            note: "report".into(),
        },
    );
    Ok(CoreInputs {
        policy,
        args,
        request,
        small,
        big,
        trusted,
        approval,
        digest,
        now,
    })
}

fn core_rows(t: &mut Timing, sizes: Sizes) -> Result<()> {
    let c = core_inputs()?;
    let ledger = LedgerView {
        window_spent: 2400,
        checkout: CheckoutLedger::Fresh,
        frozen: None,
    };
    // The request digest is computed once per call, before `decide` (see `proxy/complete.rs`):
    // it is timed on its own row, not inside these.
    let small_digest = BasketDigest::of(&c.small, &c.request.instruments);
    let big_digest = BasketDigest::of(&c.big, &c.request.instruments);
    let decide = |quote: &Quote, approvals: &[ApprovalCandidate]| -> Outcome {
        let digest = if std::ptr::eq(quote, &c.small) {
            &small_digest
        } else {
            &big_digest
        };
        let facts = Facts {
            request: &c.request,
            quote,
            digest,
            ledger: &ledger,
            approvals,
            passkey_approvals: &[],
            trusted_keys: &c.trusted,
            now: c.now,
        };
        gate::decide(&c.policy, &facts)
    };
    let expect = |outcome: Outcome, verdict: Verdict, reason: Reason| -> Result<()> {
        if outcome.ruling.verdict() != verdict || outcome.ruling.reason() != reason {
            bail!(
                "decide gave {}/{}, expected {}/{}",
                outcome.ruling.verdict().as_str(),
                outcome.ruling.reason().as_str(),
                verdict.as_str(),
                reason.as_str()
            );
        }
        Ok(())
    };

    let samples = time_n(sizes.cpu, || {
        expect(decide(&c.small, &[]), Verdict::Allow, Reason::WithinCaps)
    })?;
    t.push(
        "decide_allow",
        "decide(): allow (USD 24.00, 8 line items, ~2 KB checkout)",
        Summary::of(&samples),
        "pipe",
    );

    let samples = time_n(sizes.cpu, || {
        let digest = BasketDigest::of(std::hint::black_box(&c.small), &c.request.instruments);
        std::hint::black_box(digest);
        Ok(())
    })?;
    t.push(
        "request_digest",
        "BasketDigest::of(): the request digest of SPEC §6 (8 line items, ~2 KB checkout), once per payment",
        Summary::of(&samples),
        "pipe",
    );

    let samples = time_n(sizes.cpu, || {
        expect(
            decide(&c.big, &[]),
            Verdict::Blocked,
            Reason::PendingApproval,
        )
    })?;
    t.push(
        "decide_blocked",
        "decide(): blocked, pending approval (USD 88.00)",
        Summary::of(&samples),
        "pipe",
    );

    // A real approval whose expires_at was edited: the signature check runs in full and fails.
    let mut tampered = c.approval.clone();
    tampered.expires_at = "2099-01-01T00:00:00Z".into();
    let rejected = [ApprovalCandidate {
        document: tampered,
        used: false,
    }];
    let samples = time_n(sizes.crypto, || {
        expect(
            decide(&c.big, &rejected),
            Verdict::Blocked,
            Reason::ApprovalBadSignature,
        )
    })?;
    let row = t.push(
        "decide_approval_rejected",
        "decide(): approval rejected (edited expires_at, full signature check)",
        Summary::of(&samples),
        "ed25519",
    );
    let p50 = row.summary.p50_ns;
    row.target = Some(Target {
        goal: "<= 0.08 ms p50".into(),
        met: p50 <= 80_000.0,
    });

    let accepted = [ApprovalCandidate {
        document: c.approval.clone(),
        used: false,
    }];
    let samples = time_n(sizes.crypto, || {
        expect(
            decide(&c.big, &accepted),
            Verdict::AllowApproved,
            Reason::SignedApproval,
        )
    })?;
    t.push(
        "decide_allow_approved",
        "decide(): allow with a valid signed approval",
        Summary::of(&samples),
        "ed25519",
    );

    let samples = time_n(sizes.crypto, || {
        approval::verify(
            std::hint::black_box(&c.approval),
            &c.trusted,
            &c.digest,
            c.now,
            Duration::from_secs(900),
        )
        .map(|_| ())
        .map_err(|r| anyhow!("the approval did not verify: {r:?}"))
    })?;
    t.push(
        "approval_verify",
        "approval::verify(): a valid approval",
        Summary::of(&samples),
        "ed25519",
    );

    // The card number sits at the end of the ~2 KB arguments: the scan reads them all.
    let mut with_pan = c.args.clone();
    with_pan["context"]["history"] = json!(["search socks", "paid with 4111 1111 1111 1111"]);
    let samples = time_n(sizes.cpu, || {
        match tripwire::scan(&c.policy.test_mode, std::hint::black_box(&with_pan)) {
            Some(hit) => Ok(hit),
            None => bail!("the tripwire missed the card number"),
        }
    })?;
    let row = t.push(
        "tripwire_deny",
        "tripwire::scan(): deny, card number at the end of ~2 KB arguments",
        Summary::of(&samples),
        "pipe",
    );
    let p50 = row.summary.p50_ns;
    row.target = Some(Target {
        goal: "<= 0.02 ms p50".into(),
        met: p50 <= 20_000.0,
    });

    // What every forwarded call in test mode runs: the whole params, arguments and `_meta`.
    let params = json!({"name": "complete_checkout", "arguments": c.args,
                        "_meta": {"progressToken": "9c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e5f"}});
    let samples = time_n(sizes.cpu, || {
        match tripwire::scan_params(&c.policy.test_mode, std::hint::black_box(&params)) {
            None => Ok(()),
            Some(hit) => bail!("the tripwire hit clean arguments: {}", hit.rule.as_str()),
        }
    })?;
    let row = t.push(
        "tripwire_clean",
        "tripwire::scan_params(): clean ~2 KB arguments (every call in test mode)",
        Summary::of(&samples),
        "pipe",
    );
    let p50 = row.summary.p50_ns;
    row.target = Some(Target {
        goal: "<= 10 µs p50".into(),
        met: p50 <= 10_000.0,
    });
    Ok(())
}

// ---- the durable gate ----

fn store_rows(t: &mut Timing, homes: &Path, sizes: Sizes, progress: &dyn Fn(&str)) -> Result<()> {
    let c = core_inputs()?;
    let policy = policy("1000000000.00")?;
    let fresh_home = homes.join("fresh-home");
    let fresh = Store::open(&fresh_home)?;
    let mut seeded = Vec::new();
    for rows in [1_000_u64, sizes.big_ledger_rows] {
        progress(&format!("seeding {rows} ledger rows"));
        let store = Store::open(&homes.join(format!("home-{rows}")))?;
        let started = Instant::now();
        seed_ledger(&store.database_path(), rows, c.now)?;
        seeded.push((rows, store, started.elapsed(), Vec::new()));
    }

    // Interleaved in blocks, so that drift on a shared machine and disk hits every row alike.
    let blocks = 10;
    let per_block = (sizes.disk / blocks).max(1);
    let mut floor = Vec::new();
    let mut fresh_samples = Vec::new();
    for _ in 0..blocks {
        floor.extend(fsync_floor(&fresh_home, per_block)?);
        fresh_samples.extend(gate_allow_samples(&fresh, &policy, &c, per_block)?);
        for (_, store, _, samples) in &mut seeded {
            samples.extend(gate_allow_samples(store, &policy, &c, per_block)?);
        }
    }
    t.floors.insert(
        0,
        floor_row(
            "fsync",
            "fsync: write 1 byte + fsync, a file in the home's directory",
            Summary::of(&floor),
        ),
    );
    let fsync_p50 = t.floor("fsync").map_or(0.0, |f| f.summary.p50_ns);
    let row = t.push(
        "gate_allow_durable",
        "Store::claim + Store::gate: claim, decide, allow, durable reservation (fresh home)",
        Summary::of(&fresh_samples),
        "fsync",
    );
    let p50 = row.summary.p50_ns;
    row.target = Some(Target {
        goal: "<= 1.8x the fsync floor".into(),
        met: fsync_p50 > 0.0 && p50 <= 1.8 * fsync_p50,
    });

    let mut small_p50 = 0.0;
    for (rows, _, seed_time, samples) in &seeded {
        let exponent = (*rows as f64).log10().round();
        let row = t.push(
            &format!("window_{rows}"),
            &format!(
                "Store::gate window decision at 10^{exponent} ledger rows (allow + reservation)"
            ),
            Summary::of(samples),
            "fsync",
        );
        row.note = Some(format!(
            "seeded in {:.1} s; the window sum reads hourly buckets, not the ledger",
            seed_time.as_secs_f64()
        ));
        if *rows == 1_000 {
            small_p50 = row.summary.p50_ns;
        } else {
            let p50 = row.summary.p50_ns;
            let times = if small_p50 > 0.0 {
                p50 / small_p50
            } else {
                f64::INFINITY
            };
            row.target = Some(Target {
                goal: format!("<= 2x the 10^3 cost (is {times:.2}x)"),
                met: times <= 2.0,
            });
        }
    }
    Ok(())
}

/// `n` gates that allow and reserve USD 24.00 on fresh checkouts, with the real `decide`.
fn gate_allow_samples(
    store: &Store,
    policy: &Policy,
    c: &CoreInputs,
    n: usize,
) -> Result<Vec<Duration>> {
    let mut i = 0_u64;
    let tag = uuid_tag()?;
    time_n(n, || {
        i += 1;
        let checkout_id = format!("gid://report/Checkout/{tag}-{i}");
        let request = CompleteRequest {
            checkout_id: checkout_id.clone(),
            idempotency_key: format!("report-{tag}-{i}"),
            ..c.request.clone()
        };
        let quote = Quote {
            checkout_id,
            ..c.small.clone()
        };
        let digest = BasketDigest::of(&quote, &request.instruments);
        let now = OffsetDateTime::now_utc();
        // The claim is part of the allow path now (SPEC §4 step 3a): one unsynced write more.
        let claim = store
            .claim(
                &request.checkout_id,
                &request.idempotency_key,
                now,
                Duration::from_secs(60),
            )?
            .map_err(|conflict| anyhow!("the checkout could not be claimed: {conflict:?}"))?;
        let mut decide =
            |ledger: &LedgerView, approvals: &[ApprovalCandidate], _: &[PasskeyCandidate]| {
                let facts = Facts {
                    request: &request,
                    quote: &quote,
                    digest: &digest,
                    ledger,
                    approvals,
                    passkey_approvals: &[],
                    trusted_keys: &c.trusted,
                    now,
                };
                gate::decide(policy, &facts)
            };
        let gated = store.gate(
            &claim,
            &request,
            &quote,
            &digest,
            policy.window,
            now,
            &mut decide,
            &audit_record(now),
        )?;
        let outcome = gated.outcome;
        if outcome.ruling.verdict() != Verdict::Allow {
            bail!(
                "the gate did not allow: {}",
                outcome.ruling.reason().as_str()
            );
        }
        Ok(outcome)
    })
}

fn uuid_tag() -> Result<String> {
    Ok(world::uuid()?[..8].to_owned())
}

fn audit_record(now: OffsetDateTime) -> AuditRecord {
    AuditRecord::new(now, "complete_checkout")
}

/// `rows` settled checkouts over the 90 days before `now`, and their hourly buckets, straight
/// through SQL in one unsynced transaction (as the store's bench seeds them), then checkpointed.
fn seed_ledger(db: &Path, rows: u64, now: OffsetDateTime) -> Result<()> {
    let mut conn = rusqlite::Connection::open(db)?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO ledger (checkout_id, idempotency_key, merchant, currency, reserved, charged, state,
                                 hour, reserved_at, settled_at)
             VALUES (?1, ?2, 'demo-outfitters.example', ?3, ?4, ?4, 'settled', ?5, ?6, ?6)",
        )?;
        for i in 0..rows {
            let at = now.unix_timestamp() - (i % (90 * 24)) as i64 * 3600 - (i % 3600) as i64;
            let currency = if i % 3 == 0 { "JPY" } else { "USD" };
            insert.execute(rusqlite::params![
                format!("gid://seed/Checkout/{i}"),
                format!("seed-{i}"),
                currency,
                1 + (i % 9) as i64,
                at.div_euclid(3600),
                at * 1_000_000
            ])?;
        }
    }
    tx.execute(
        "INSERT INTO spend_buckets (currency, hour, settled, in_flight)
         SELECT currency, hour, SUM(charged), 0 FROM ledger GROUP BY currency, hour",
        [],
    )?;
    tx.commit()?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok(())
}

// ---- MCP round trips ----

fn get_checkout_args(id: &str) -> Value {
    json!({ "meta": { "ucp-agent": { "profile": world::AGENT } }, "id": id })
}

fn round_trip(mcp: &mut Mcp, id: &str, n: usize) -> Result<Vec<Duration>> {
    let args = get_checkout_args(id);
    time_n(n, || {
        let result = mcp.call("get_checkout", args.clone())?;
        if result["isError"] == json!(true) {
            bail!("get_checkout failed");
        }
        Ok(result)
    })
}

fn round_trip_rows(t: &mut Timing, bins: &Bins, scratch: &Path, sizes: Sizes) -> Result<()> {
    // The test shop answers from memory: the difference is the proxy's own cost.
    let ready = world::shop_checkout("Trail socks", 1200, 2, "ready_for_complete");
    let script = world::test_shop_script(&ready, vec![world::completed(&ready)]);
    let proxied = World::new(
        bins,
        scratch,
        Options {
            shop: Shop::Test(script.clone()),
            ..Options::default()
        },
    )?;
    let mut direct = {
        let script_path = proxied.dir.path().join("direct-script.json");
        std::fs::write(&script_path, script.to_string())?;
        let mut command = Command::new(&bins.test_shop);
        command
            .arg("--script")
            .arg(&script_path)
            .arg("--record")
            .arg(proxied.dir.path().join("direct-record.jsonl"));
        let mut mcp = Mcp::spawn(command)?;
        mcp.initialize()?;
        mcp
    };
    let mut through = proxied.proxy()?;
    let id = "gid://fixture/Checkout/1";
    // Interleaved in blocks so that drift on a shared machine hits both alike.
    let mut direct_samples = Vec::new();
    let mut proxy_samples = Vec::new();
    let blocks = 10;
    for _ in 0..blocks {
        direct_samples.extend(round_trip(&mut direct, id, sizes.round_trip / blocks)?);
        proxy_samples.extend(round_trip(&mut through, id, sizes.round_trip / blocks)?);
    }
    let direct_summary = Summary::of(&direct_samples);
    let proxy_summary = Summary::of(&proxy_samples);
    t.push(
        "rtt_direct_test_shop",
        "MCP round trip, get_checkout straight to the shop (test shop, answers from memory)",
        direct_summary,
        "pipe",
    );
    t.push(
        "rtt_proxy_test_shop",
        "MCP round trip, get_checkout through `cajaguard mcp` (same shop)",
        proxy_summary,
        "pipe",
    );
    let row = t.push(
        "proxy_added",
        "proxy added latency (through minus straight, per percentile)",
        proxy_summary.minus(&direct_summary),
        "pipe",
    );
    let p50 = row.summary.p50_ns;
    row.target = Some(Target {
        goal: "<= 50 µs p50".into(),
        met: p50 <= 50_000.0,
    });
    row.note = Some("percentile differences, not a distribution".into());
    drop(through);
    drop(direct);

    // The fixture shop: what an agent sees with the real (fsyncing) shop.
    let fixture = World::new(bins, scratch, Options::default())?;
    let mut through = fixture.proxy()?;
    let (checkout, _) = through.create_checkout("trail-socks", 2)?;
    let mut direct = {
        let mut command = Command::new(&bins.fixture);
        command.arg("--state").arg(fixture.dir.path().join("shop"));
        let mut mcp = Mcp::spawn(command)?;
        mcp.initialize()?;
        mcp
    };
    let mut direct_samples = Vec::new();
    let mut proxy_samples = Vec::new();
    let blocks = 5;
    for _ in 0..blocks {
        direct_samples.extend(round_trip(
            &mut direct,
            &checkout,
            sizes.fixture_round_trip / blocks,
        )?);
        proxy_samples.extend(round_trip(
            &mut through,
            &checkout,
            sizes.fixture_round_trip / blocks,
        )?);
    }
    let row = t.push(
        "rtt_direct_fixture",
        "MCP round trip, get_checkout straight to the fixture shop",
        Summary::of(&direct_samples),
        "fsync",
    );
    row.note = Some("the fixture appends and fsyncs calls.jsonl on every call".into());
    t.push(
        "rtt_proxy_fixture",
        "MCP round trip, get_checkout through `cajaguard mcp` to the fixture shop",
        Summary::of(&proxy_samples),
        "fsync",
    );
    Ok(())
}

// ---- cold start ----

fn cold_start(bins: &Bins, scratch: &Path, n: usize) -> Result<Vec<Duration>> {
    let world = World::new(bins, scratch, Options::default())?;
    // The home exists (as it would after the first run): the cold start is the process's.
    drop(world.proxy()?);
    time_n(n, || {
        let mut command = Command::new(&bins.cajaguard);
        command
            .args(["mcp", "--config"])
            .arg(&world.config)
            .env("HOME", world.dir.path());
        let mut mcp = Mcp::spawn(command)?;
        mcp.initialize()?;
        let tools = mcp.request("tools/list", json!({}))?;
        let listed = tools["result"]["tools"].as_array().map_or(0, Vec::len);
        if listed < 13 {
            bail!("tools/list listed {listed} tools");
        }
        // Returned, so that stopping it happens after the clock stops.
        Ok(mcp)
    })
}

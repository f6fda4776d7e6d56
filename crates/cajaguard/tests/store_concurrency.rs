//! Several stores on one home, as several processes sharing it would be: together they never pass a
//! window cap and never use one approval twice (SPEC §4.12, §11.2-3).
//!
//! The threads each open their own `Store` (their own SQLite connection, their own file locks), and
//! the last tests start real child processes: this test binary itself, run with
//! `CAJAGUARD_STORE_WORKER` set, does the work in `worker_process`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use cajaguard::store::{AuditRecord, Store};
use cajaguard_core::approval::{
    self, ApprovalTerms, BasketDigest, Decision, RequestId, SigningKey,
};
use cajaguard_core::gate::{Effect, LedgerView, Outcome, Reason, Ruling, Verdict};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use time::OffsetDateTime;
use time::macros::datetime;

const DAY: Duration = Duration::from_secs(24 * 3600);
const NOW: OffsetDateTime = datetime!(2026-03-02 10:30 UTC);
const WINDOW: i64 = 10_000;
const TOTAL: i64 = 700;
/// How many reservations of `TOTAL` fit in `WINDOW`.
const FIT: i64 = WINDOW / TOTAL;

fn request(checkout: &str) -> CompleteRequest {
    CompleteRequest {
        checkout_id: checkout.to_owned(),
        idempotency_key: format!("key-{checkout}"),
        agent_profile: "https://agent.example/profile".to_owned(),
        handler_ids: vec!["fixture_test_handler".to_owned()],
    }
}

fn quote(checkout: &str, total: i64) -> Quote {
    Quote {
        checkout_id: checkout.to_owned(),
        status: "ready_for_complete".to_owned(),
        currency: "USD".to_owned(),
        total,
        line_items: vec![],
        merchant: Some("demo-outfitters.example".to_owned()),
    }
}

fn record() -> AuditRecord {
    AuditRecord {
        at: NOW,
        tool: "complete_checkout".to_owned(),
        verdict: String::new(),
        reason: String::new(),
        merchant: None,
        currency: None,
        total: None,
        request_id: None,
        idempotency_key: None,
        checkout_id: None,
        latency: Duration::ZERO,
        note: None,
    }
}

fn forward(total: i64, nonce: Option<String>) -> Outcome {
    Outcome {
        ruling: Ruling {
            verdict: Verdict::Allow,
            reason: Reason::WithinCaps,
            detail: String::new(),
            request_id: None,
            next: None,
        },
        effect: Effect::Forward {
            currency: "USD".to_owned(),
            total,
            merchant: "demo-outfitters.example".to_owned(),
            use_approval_nonce: nonce,
        },
    }
}

fn refuse(reason: Reason) -> Outcome {
    Outcome {
        ruling: Ruling {
            verdict: reason.verdict(),
            reason,
            detail: String::new(),
            request_id: None,
            next: None,
        },
        effect: Effect::Refuse { pending: None },
    }
}

/// The window rule, as `decide` applies it.
fn within_window(view: &LedgerView) -> Outcome {
    if view.window_spent + TOTAL <= WINDOW {
        forward(TOTAL, None)
    } else {
        refuse(Reason::OverWindowCap)
    }
}

fn request_id() -> RequestId {
    RequestId::parse("cg-00000000000000aa").unwrap()
}

/// `attempts` gates of `TOTAL` each on fresh checkouts; how many were forwarded.
fn reserve_many(home: &Path, worker: &str, attempts: usize) -> i64 {
    let store = Store::open(home).unwrap();
    let mut forwarded = 0;
    for n in 0..attempts {
        let checkout = format!("gid://fixture/Checkout/{worker}-{n}");
        let outcome = store
            .gate(
                &request(&checkout),
                &quote(&checkout, TOTAL),
                &request_id(),
                DAY,
                NOW,
                &mut |view, _| within_window(view),
                &record(),
            )
            .unwrap();
        if matches!(outcome.effect, Effect::Forward { .. }) {
            forwarded += 1;
        }
    }
    forwarded
}

fn reserved(home: &Path) -> i64 {
    let store = Store::open(home).unwrap();
    let spend = store.window_spend(DAY, NOW).unwrap();
    spend
        .get("USD")
        .map(|s| s.in_flight + s.settled)
        .unwrap_or(0)
}

#[test]
fn threads_with_their_own_connections_never_pass_the_window() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    drop(Store::open(&home).unwrap());
    let threads = 4;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let home = home.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                reserve_many(&home, &format!("t{t}"), 8)
            })
        })
        .collect();
    let forwarded: i64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    // 32 attempts for 14 places: every place is taken, and not one more.
    assert_eq!(forwarded, FIT);
    assert_eq!(reserved(&home), FIT * TOTAL);
    assert!(reserved(&home) <= WINDOW);
}

fn signed_approval(home: &Path) -> (RequestId, String) {
    let key = SigningKey::from_seed(&[5; 32]);
    let digest = BasketDigest([0x5a; 32]);
    let doc = approval::sign(
        &key,
        &ApprovalTerms {
            request_id: digest.request_id(),
            digest,
            decision: Decision::Approve,
            merchant: "demo-outfitters.example".to_owned(),
            checkout_id: "gid://fixture/Checkout/1".to_owned(),
            currency: "USD".to_owned(),
            total: 8900,
            issued_at: NOW,
            ttl: Duration::from_secs(900),
            nonce: [0x77; 16],
            note: String::new(),
        },
    );
    Store::open(home).unwrap().write_approval(&doc).unwrap();
    (digest.request_id(), doc.nonce)
}

/// One gate that uses the approval if `decide` sees it unused. Returns whether it did.
fn try_use_approval(store: &Store, id: &RequestId, checkout: &str) -> bool {
    let outcome = store
        .gate(
            &request(checkout),
            &quote(checkout, 8900),
            id,
            DAY,
            NOW,
            &mut |_, approvals| match approvals.iter().find(|a| !a.used) {
                Some(unused) => forward(8900, Some(unused.document.nonce.clone())),
                None => refuse(Reason::ApprovalAlreadyUsed),
            },
            &record(),
        )
        .unwrap();
    matches!(outcome.effect, Effect::Forward { .. })
}

#[test]
fn one_approval_raced_by_threads_is_used_once() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (id, _) = signed_approval(&home);
    let threads = 6;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (home, id, barrier) = (home.clone(), id.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let store = Store::open(&home).unwrap();
                barrier.wait();
                try_use_approval(&store, &id, &format!("gid://fixture/Checkout/{t}"))
            })
        })
        .collect();
    let uses = handles
        .into_iter()
        .filter_map(|h| h.join().ok())
        .filter(|used| *used)
        .count();
    assert_eq!(uses, 1);
}

// ---- real processes ----

const WORKER_ENV: &str = "CAJAGUARD_STORE_WORKER";

/// Not a test on its own: the body of a child process (see `run_workers`). Without the variable it
/// does nothing.
#[test]
fn worker_process() {
    let Some(spec) = std::env::var_os(WORKER_ENV) else {
        return;
    };
    let spec = spec.into_string().unwrap();
    let mut parts = spec.splitn(3, ':');
    let (task, name, home) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        PathBuf::from(parts.next().unwrap()),
    );
    // Start together: wait for the parent's go file.
    while !home.join("go").exists() {
        std::thread::sleep(Duration::from_millis(2));
    }
    match task {
        "reserve" => println!("WORKER-RESULT {}", reserve_many(&home, name, 8)),
        "approval" => {
            let store = Store::open(&home).unwrap();
            let used = try_use_approval(
                &store,
                &request_id_from_env(),
                &format!("gid://fixture/Checkout/{name}"),
            );
            println!("WORKER-RESULT {}", i64::from(used));
        }
        other => panic!("unknown worker task {other}"),
    }
}

fn request_id_from_env() -> RequestId {
    RequestId::parse(&std::env::var("CAJAGUARD_STORE_WORKER_ID").unwrap()).unwrap()
}

/// Starts `count` copies of this test binary as workers on `home`, lets them go at once, and sums
/// what they report.
fn run_workers(home: &Path, task: &str, count: usize, id: Option<&RequestId>) -> i64 {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..count)
        .map(|n| {
            let mut cmd = Command::new(&exe);
            cmd.args([
                "worker_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WORKER_ENV, format!("{task}:p{n}:{}", home.display()))
            .stdout(std::process::Stdio::piped());
            if let Some(id) = id {
                cmd.env("CAJAGUARD_STORE_WORKER_ID", id.as_str());
            }
            cmd.spawn().unwrap()
        })
        .collect();
    std::fs::write(home.join("go"), b"").unwrap();
    let mut total = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "worker failed: {stdout}");
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("WORKER-RESULT ").map(|(_, n)| n))
            .unwrap_or_else(|| panic!("the worker reported nothing: {stdout}"));
        total += line.trim().parse::<i64>().unwrap();
    }
    total
}

#[test]
fn processes_sharing_a_home_never_pass_the_window() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    drop(Store::open(&home).unwrap());
    let forwarded = run_workers(&home, "reserve", 4, None);
    assert_eq!(forwarded, FIT);
    assert_eq!(reserved(&home), FIT * TOTAL);
}

#[test]
fn processes_sharing_a_home_use_one_approval_once() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (id, _) = signed_approval(&home);
    assert_eq!(run_workers(&home, "approval", 4, Some(&id)), 1);
}

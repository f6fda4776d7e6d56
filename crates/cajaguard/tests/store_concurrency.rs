//! Several stores on one home, as several processes sharing it would be: together they never pass a
//! window cap and never use one approval twice (SPEC §4.12, §11.2-3).
//!
//! The threads each open their own `Store` (their own SQLite connection, their own file locks), and
//! the last tests start real child processes: this test binary itself, run with
//! `CAJAGUARD_STORE_WORKER` set, does the work in `worker_process`.
//!
//! The same races run on PostgreSQL (`*_postgres`, a fresh schema each; skipped with a notice
//! without `CAJAGUARD_TEST_POSTGRES_URL`): there each store is its own connection, as each host's
//! would be, with its own home.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a panic is a failure report.

use cajaguard_harness::fixtures::{self, quote, request};
use cajaguard_harness::pg as pg_support;
use cajaguard_harness::workers;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use cajaguard::store::{AuditRecord, Claim, ReleasedBy, Store};
use cajaguard_core::approval::{self, ApprovalTerms, BasketDigest, SigningKey};
use cajaguard_core::effect::{ApprovalCandidate, Effect, LedgerView, Outcome};
use cajaguard_core::settle::Charge;
use cajaguard_core::verdict::Reason;
use time::OffsetDateTime;
use time::macros::datetime;

const DAY: Duration = Duration::from_secs(24 * 3600);
const NOW: OffsetDateTime = datetime!(2026-03-02 10:30 UTC);
const WINDOW: i64 = 10_000;
const TOTAL: i64 = 700;
/// How many reservations of `TOTAL` fit in `WINDOW`.
const FIT: i64 = WINDOW / TOTAL;

/// The checkout's claim for its payment (`key-<checkout>`), as the proxy takes it first.
fn claimed(store: &Store, checkout: &str) -> Claim {
    store
        .claim(checkout, &format!("key-{checkout}"), NOW, DAY)
        .unwrap()
        .unwrap()
}

/// One gate of `total` on `checkout` (claimed first) under `digest`, decided by `decide`:
/// whether it let the payment through.
fn gate(
    store: &Store,
    checkout: &str,
    total: i64,
    digest: &BasketDigest,
    decide: &mut dyn FnMut(&LedgerView, &[ApprovalCandidate]) -> Outcome,
) -> bool {
    let gated = store
        .gate(
            &claimed(store, checkout),
            &request(checkout),
            &quote(checkout, total),
            digest,
            None,
            DAY,
            NOW,
            true,
            &mut |ledger, approvals, _passkeys| decide(ledger, approvals),
            &AuditRecord::new(NOW, "complete_checkout"),
        )
        .unwrap();
    matches!(gated.outcome.effect, Effect::Forward { .. })
}

/// The window rule, as `decide` applies it.
fn within_window(view: &LedgerView) -> Outcome {
    if view.window_spent + TOTAL <= WINDOW {
        forward(TOTAL, None)
    } else {
        fixtures::refuse(Reason::OverWindowCap)
    }
}

fn request_digest() -> BasketDigest {
    BasketDigest::from_bytes([0xaa; 32])
}

/// An allowed payment of `total` on the request's basket, using the approval `nonce` if named.
fn forward(total: i64, nonce: Option<String>) -> Outcome {
    fixtures::forward(total, request_digest(), nonce)
}

/// The PostgreSQL URL a worker process uses (unset: the SQLite store in its home).
const WORKER_PG_ENV: &str = "CAJAGUARD_STORE_WORKER_PG";

/// `attempts` gates of `TOTAL` each on fresh checkouts; how many were forwarded.
fn reserve_many(home: &Path, url: Option<&str>, worker: &str, attempts: usize) -> i64 {
    let store = fixtures::open_store(home, url);
    let mut forwarded = 0;
    for n in 0..attempts {
        let checkout = format!("gid://fixture/Checkout/{worker}-{n}");
        if gate(
            &store,
            &checkout,
            TOTAL,
            &request_digest(),
            &mut |view, _| within_window(view),
        ) {
            forwarded += 1;
        }
    }
    forwarded
}

fn reserved(home: &Path, url: Option<&str>) -> i64 {
    let store = fixtures::open_store(home, url);
    let spend = store.window_spend(DAY, NOW).unwrap();
    spend
        .get("USD")
        .map(|s| s.in_flight + s.settled)
        .unwrap_or(0)
}

fn threads_never_pass_the_window(url: Option<&str>) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    drop(fixtures::open_store(&home, url));
    let threads = 4;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let home = home.clone();
            let url = url.map(str::to_owned);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                reserve_many(&home, url.as_deref(), &format!("t{t}"), 8)
            })
        })
        .collect();
    let forwarded: i64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    // 32 attempts for 14 places: every place is taken, and not one more.
    assert_eq!(forwarded, FIT);
    assert_eq!(reserved(&home, url), FIT * TOTAL);
    assert!(reserved(&home, url) <= WINDOW);
}

fn signed_approval(home: &Path, url: Option<&str>) -> (BasketDigest, String) {
    let key = SigningKey::from_seed(&[5; 32]);
    let digest = BasketDigest::from_bytes([0x5a; 32]);
    let doc = approval::sign(
        &key,
        &ApprovalTerms {
            nonce: [0x77; 16],
            ..fixtures::approval_terms(digest, "gid://fixture/Checkout/1", 8900, NOW)
        },
    );
    fixtures::open_store(home, url)
        .write_approval(&doc)
        .unwrap();
    (digest, doc.nonce)
}

/// One gate that uses the approval if `decide` sees it unused. Returns whether it did.
fn try_use_approval(store: &Store, digest: &BasketDigest, checkout: &str) -> bool {
    gate(
        store,
        checkout,
        8900,
        digest,
        &mut |_, approvals| match approvals.iter().find(|a| !a.used) {
            Some(unused) => forward(8900, Some(unused.document.nonce.clone())),
            None => fixtures::refuse(Reason::ApprovalAlreadyUsed),
        },
    )
}

fn approval_raced_by_threads(url: Option<&str>) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (id, _) = signed_approval(&home, url);
    let threads = 6;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (home, id, barrier) = (home.clone(), id, Arc::clone(&barrier));
            let url = url.map(str::to_owned);
            std::thread::spawn(move || {
                let store = fixtures::open_store(&home, url.as_deref());
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
    let url = std::env::var(WORKER_PG_ENV).ok();
    let url = url.as_deref();
    // Each worker its own home (as each host has), all on one database: the PostgreSQL case.
    let own_home = home.join(name);
    let store_home = if url.is_some() { &own_home } else { &home };
    // Start together: wait for the parent's go file (not forever: a parent that failed before
    // writing it must not leave orphans behind).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !home.join("go").exists() {
        assert!(std::time::Instant::now() < deadline, "no go file");
        std::thread::sleep(Duration::from_millis(2));
    }
    match task {
        "reserve" => println!("WORKER-RESULT {}", reserve_many(store_home, url, name, 8)),
        "approval" => {
            let store = fixtures::open_store(store_home, url);
            let used = try_use_approval(
                &store,
                &request_id_from_env(),
                &format!("gid://fixture/Checkout/{name}"),
            );
            println!("WORKER-RESULT {}", i64::from(used));
        }
        "crash" => crash_loop(&home),
        other => panic!("unknown worker task {other}"),
    }
}

fn request_id_from_env() -> BasketDigest {
    BasketDigest::from_hex(&std::env::var("CAJAGUARD_STORE_WORKER_ID").unwrap()).unwrap()
}

/// Starts `count` copies of this test binary as workers on `home`, lets them go at once, and sums
/// what they report.
fn run_workers(
    home: &Path,
    url: Option<&str>,
    task: &str,
    count: usize,
    id: Option<&BasketDigest>,
) -> i64 {
    // A PostgreSQL store does not create the home; the go file needs it.
    std::fs::create_dir_all(home).unwrap();
    let children: Vec<_> = (0..count)
        .map(|n| {
            let mut cmd = workers::self_as_worker("worker_process");
            cmd.env(WORKER_ENV, format!("{task}:p{n}:{}", home.display()));
            if let Some(id) = id {
                cmd.env("CAJAGUARD_STORE_WORKER_ID", id.to_hex());
            }
            match url {
                Some(url) => cmd.env(WORKER_PG_ENV, url),
                None => cmd.env_remove(WORKER_PG_ENV),
            };
            cmd.spawn().unwrap()
        })
        .collect();
    std::fs::write(home.join("go"), b"").unwrap();
    children
        .into_iter()
        .map(|child| workers::worker_result(child).parse::<i64>().unwrap())
        .sum()
}

fn processes_never_pass_the_window(url: Option<&str>) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    drop(fixtures::open_store(&home, url));
    let forwarded = run_workers(&home, url, "reserve", 4, None);
    assert_eq!(forwarded, FIT);
    assert_eq!(reserved(&home, url), FIT * TOTAL);
}

fn processes_use_one_approval_once(url: Option<&str>) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (id, _) = signed_approval(&home, url);
    assert_eq!(run_workers(&home, url, "approval", 4, Some(&id)), 1);
}

/// Each `SQLITE, POSTGRES => BODY;` is two tests: `BODY(None)` on SQLite, and `BODY(Some(url))` on
/// a fresh PostgreSQL schema (skipped with a notice without `CAJAGUARD_TEST_POSTGRES_URL`).
macro_rules! sqlite_and_postgres {
    ($($sqlite:ident, $postgres:ident => $body:ident;)*) => {$(
        #[test]
        fn $sqlite() {
            $body(None);
        }

        #[test]
        fn $postgres() {
            if let Some(schema) = pg_support::schema_or_notice(stringify!($postgres)) {
                $body(Some(&schema.url));
            }
        }
    )*};
}

sqlite_and_postgres! {
    one_approval_raced_by_threads_is_used_once, one_approval_raced_by_threads_is_used_once_postgres => approval_raced_by_threads;
    threads_with_their_own_connections_never_pass_the_window, threads_with_their_own_connections_never_pass_the_window_postgres => threads_never_pass_the_window;
    processes_sharing_a_home_never_pass_the_window, processes_with_their_own_homes_sharing_postgres_never_pass_the_window => processes_never_pass_the_window;
    processes_sharing_a_home_use_one_approval_once, processes_with_their_own_homes_sharing_postgres_use_one_approval_once => processes_use_one_approval_once;
}

// ---- kill -9 ----

fn crash_nonce(n: u64) -> String {
    format!("{n:032x}")
}

/// Reserve with a used approval, settle, report; forever, until the parent kills the process. A line
/// `COMMITTED n` is printed only after both of checkout n's transactions returned.
fn crash_loop(home: &Path) {
    let store = Store::open(home).unwrap();
    for n in 0_u64.. {
        let checkout = format!("gid://fixture/Checkout/crash-{n}");
        gate(&store, &checkout, 100, &request_digest(), &mut |_, _| {
            forward(100, Some(crash_nonce(n)))
        });
        let settled = cajaguard_core::settle::Settlement::Completed(Charge {
            amount: 100,
            currency: None,
            differs: vec![],
        });
        store
            .settle(
                &checkout,
                &format!("key-{checkout}"),
                &settled,
                ReleasedBy::Shop,
                NOW,
                &AuditRecord::new(NOW, "complete_checkout"),
            )
            .unwrap();
        println!("\nCOMMITTED {n}");
    }
}

/// A process killed with SIGKILL at an arbitrary instant loses no settled spend and frees no used
/// approval: everything it reported committed is there after a reopen, and the buckets still agree
/// with the ledger (a torn transaction would break that).
#[test]
fn kill_9_loses_no_settled_spend_and_frees_no_approval() {
    use std::io::BufRead;

    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    drop(Store::open(&home).unwrap());
    std::fs::write(home.join("go"), b"").unwrap();
    let mut child = workers::self_as_worker("worker_process")
        .env(WORKER_ENV, format!("crash:c0:{}", home.display()))
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut committed = None;
    for line in stdout.lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("COMMITTED ") {
            let n: u64 = n.trim().parse().unwrap();
            committed = Some(n);
            if n >= 25 {
                // Mid-flight: the child is already in its next transaction, or about to be.
                child.kill().unwrap();
                break;
            }
        }
    }
    child.wait().unwrap();
    let committed = committed.expect("the worker committed something before it was killed");

    let store = Store::open(&home).unwrap();
    let conn = rusqlite::Connection::open(store.database_path()).unwrap();
    for n in 0..=committed {
        let state: String = conn
            .query_row(
                "SELECT state FROM ledger WHERE checkout_id = ?1",
                [format!("gid://fixture/Checkout/crash-{n}")],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(state, "settled", "checkout {n}");
        let used: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM used_approvals WHERE nonce = ?1",
                [crash_nonce(n)],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(used, 1, "nonce {n}");
    }
    let spend = store.window_spend(DAY, NOW).unwrap()["USD"];
    let (settled, in_flight): (i64, i64) = conn
        .query_row(
            "SELECT SUM(CASE state WHEN 'settled' THEN charged ELSE 0 END),
                    SUM(CASE state WHEN 'in_flight' THEN reserved ELSE 0 END) FROM ledger",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((spend.settled, spend.in_flight), (settled, in_flight));
    assert!(spend.settled >= (committed as i64 + 1) * 100);
}

// ---- connections cut mid-gate (PostgreSQL) ----

/// Connections cut at every point of racing gates (their backends terminated, as a restart or a
/// failover cuts them): each gate either hands out a permit whose reservation the store counts
/// or fails; a commit cut after the server applied it leaves its reservation counted without a
/// permit (fail closed). So the permits fit the window, and the store counts at least them and
/// never more than the window.
#[test]
fn connections_cut_mid_gate_never_let_out_a_payment_the_store_does_not_count_postgres() {
    let test = "connections_cut_mid_gate_never_let_out_a_payment_the_store_does_not_count_postgres";
    let Some(base) = pg_support::base_url() else {
        pg_support::notice(test);
        return;
    };
    // Four rounds, each on a fresh schema with its own sequence of pauses between cuts.
    for shift in 0..4_i64 {
        cut_round(test, &pg_support::Schema::create(&base), shift);
    }
}

fn cut_round(test: &str, schema: &pg_support::Schema, shift: i64) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let url = schema.url.clone();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    drop(fixtures::open_store(&home, Some(&url)));
    let done = Arc::new(AtomicBool::new(false));
    let cuts = Arc::new(AtomicUsize::new(0));
    // Every store is open before the first cut, and opened here: a store that cannot open fails
    // the test at once instead of leaving the others waiting for it.
    let stores: Vec<Store> = (0..4)
        .map(|_| fixtures::open_store(&home, Some(&url)))
        .collect();
    let workers: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(t, store)| {
            std::thread::spawn(move || {
                let mut permits = Vec::new();
                for n in 0..40 {
                    let checkout = format!("gid://fixture/Checkout/cut-{t}-{n}");
                    let Ok(Ok(claim)) =
                        store.claim(&checkout, &format!("key-{checkout}"), NOW, DAY)
                    else {
                        continue;
                    };
                    let gated = store.gate(
                        &claim,
                        &request(&checkout),
                        &quote(&checkout, TOTAL),
                        &request_digest(),
                        None,
                        DAY,
                        NOW,
                        true,
                        &mut |ledger, _, _| within_window(ledger),
                        &AuditRecord::new(NOW, "complete_checkout"),
                    );
                    if let Ok(gated) = gated
                        && gated.permit.is_some()
                    {
                        permits.push(checkout);
                    }
                }
                permits
            })
        })
        .collect();
    let cutter = {
        let (done, cuts) = (Arc::clone(&done), Arc::clone(&cuts));
        let mut client = schema.client();
        let name = schema.name.clone();
        std::thread::spawn(move || {
            // One connection at a time, 1 to 9 ms apart in a fixed sequence: cuts land in every
            // part of a gate (the locks, the reads, the writes, COMMIT, the flush after it) while
            // the other connections go on.
            for round in 0_i64.. {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                let row = client
                    .query_one(
                        "SELECT count(pg_terminate_backend(pid)) FROM (
                             SELECT pid FROM pg_stat_activity
                             WHERE application_name = $1 AND pid <> pg_backend_pid()
                             ORDER BY pid OFFSET $2::BIGINT % 4 LIMIT 1) AS one",
                        &[&name, &round],
                    )
                    .unwrap();
                let cut: i64 = row.get(0);
                cuts.fetch_add(usize::try_from(cut).unwrap(), Ordering::SeqCst);
                let pause = u64::try_from((round * 3_700 + shift * 1_300) % 8_000).unwrap() + 1_000;
                std::thread::sleep(Duration::from_micros(pause));
            }
        })
    };
    let permits: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    done.store(true, Ordering::SeqCst);
    cutter.join().unwrap();
    assert!(
        cuts.load(Ordering::SeqCst) > 0,
        "no connection was cut: the test tested nothing"
    );
    let permitted = i64::try_from(permits.len()).unwrap() * TOTAL;
    let counted = reserved(&home, Some(&url));
    assert!(
        permitted <= WINDOW,
        "{} permits passed the window",
        permits.len()
    );
    assert!(
        counted >= permitted,
        "{} permits went out but the store counts only {counted}",
        permits.len()
    );
    assert!(
        counted <= WINDOW,
        "the store counts {counted}, over the window"
    );
    let store = fixtures::open_store(&home, Some(&url));
    let in_flight: Vec<String> = store
        .in_flight()
        .unwrap()
        .into_iter()
        .map(|r| r.checkout_id)
        .collect();
    for checkout in &permits {
        assert!(
            in_flight.contains(checkout),
            "{checkout} got a permit but has no reservation in the store"
        );
    }
    // Every gate that committed left its record in the log, at the index it claimed with its
    // reads: no gap, no index twice.
    let log = store
        .verify_log(
            &cajaguard_core::approval::TrustedKeys(Vec::new()),
            None,
            Vec::new(),
            cajaguard_core::audit_log::OtherLogs::Refused,
        )
        .unwrap();
    assert!(log.is_ok(), "the audit log does not verify: {log:?}");
    eprintln!(
        "{test}, round {shift}: {} connections cut, {} permits, USD {counted} counted",
        cuts.load(Ordering::SeqCst),
        permits.len()
    );
}

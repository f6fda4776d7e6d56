//! Several `cajaguard mcp` processes sharing one home (SPEC §4.12, §11.2-3): together they never
//! pass a cap and never use one approval twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Barrier};

use support::*;

#[test]
fn eight_proxies_racing_split_purchases_never_pass_the_window() {
    let world = World::new();
    let proxies = 8;
    // Each proxy gets its own checkout first, so that the race is only over the window.
    let mut agents: Vec<(Mcp, String)> = (0..proxies)
        .map(|_| {
            let mut mcp = world.proxy();
            let checkout = mcp.create_checkout("rain-shell", 1);
            (mcp, checkout)
        })
        .collect();
    let barrier = Arc::new(Barrier::new(proxies));
    let verdicts: Vec<(String, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = agents
            .iter_mut()
            .map(|(mcp, checkout)| {
                let barrier = barrier.clone();
                scope.spawn(move || {
                    barrier.wait();
                    let (verdict, reason, _) = verdict(&mcp.pay(checkout));
                    (verdict, reason)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let allowed = verdicts.iter().filter(|(v, _)| v == "allow").count();
    // USD 150.00 window, USD 45.00 each: three fit, the fourth would make 180.00.
    assert_eq!(allowed, 3, "{verdicts:?}");
    assert!(
        verdicts
            .iter()
            .filter(|(v, _)| v != "allow")
            .all(|(v, r)| v == "denied" && r == "over_window_cap"),
        "{verdicts:?}"
    );
    let completed: usize = agents
        .iter()
        .map(|(_, c)| world.completes_reaching_shop(c))
        .sum();
    assert_eq!(
        completed, 3,
        "exactly the allowed payments reached the shop"
    );

    let store = cajaguard::store::Store::open(&world.home).unwrap();
    let spend = store
        .window_spend(
            std::time::Duration::from_secs(24 * 3600),
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
    let usd = spend.get("USD").copied().unwrap_or_default();
    assert_eq!((usd.settled, usd.in_flight), (13500, 0));
}

#[test]
fn one_approval_raced_by_two_proxies_is_used_once() {
    let world = World::new();
    let mut first = world.proxy();
    let checkout = first.create_checkout("day-pack", 1);
    let request_id = verdict(&first.pay(&checkout))
        .2
        .expect("blocked with a request id");
    let out = world.cli(&["approve", &request_id, "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut second = world.proxy();
    let barrier = Arc::new(Barrier::new(2));
    let results: Vec<(String, String)> = std::thread::scope(|scope| {
        [&mut first, &mut second]
            .into_iter()
            .map(|mcp| {
                let barrier = barrier.clone();
                let checkout = checkout.clone();
                scope.spawn(move || {
                    barrier.wait();
                    let (verdict, reason, _) = verdict(&mcp.pay(&checkout));
                    (verdict, reason)
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect()
    });
    let approved = results
        .iter()
        .filter(|(v, _)| v == "allow_approved")
        .count();
    assert_eq!(approved, 1, "{results:?}");
    assert_eq!(world.completes_reaching_shop(&checkout), 1, "{results:?}");
}

// ---- several hosts, one PostgreSQL store ----
//
// Each "host" is a `cajaguard mcp` process with its own config and home, all reading their store
// URL from `CAJAGUARD_STORE_URL` (`store.url_env`), in front of one fixture shop. Skipped with a
// notice without `CAJAGUARD_TEST_POSTGRES_URL`.

use cajaguard_harness::pg as pg_support;

const URL_ENV: &str = "CAJAGUARD_STORE_URL";

fn hosts(world: &World, url: &str, count: usize) -> Vec<Host> {
    (0..count)
        .map(|n| {
            world.host(
                &format!("host{n}"),
                serde_json::json!({ "url_env": URL_ENV }),
                &[(URL_ENV, url)],
            )
        })
        .collect()
}

#[test]
fn eight_proxies_with_their_own_homes_on_one_postgres_never_pass_the_window() {
    let Some(base) = pg_support::base_url() else {
        pg_support::notice("eight_proxies_..._on_one_postgres_never_pass_the_window");
        return;
    };
    let schema = pg_support::Schema::create(&base);
    let world = World::new();
    let hosts = hosts(&world, &schema.url, 8);
    let mut agents: Vec<(Mcp, String)> = hosts
        .iter()
        .map(|host| {
            let mut mcp = host.proxy();
            let checkout = mcp.create_checkout("rain-shell", 1);
            (mcp, checkout)
        })
        .collect();
    let barrier = Arc::new(Barrier::new(agents.len()));
    let verdicts: Vec<(String, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = agents
            .iter_mut()
            .map(|(mcp, checkout)| {
                let barrier = barrier.clone();
                scope.spawn(move || {
                    barrier.wait();
                    let (verdict, reason, _) = verdict(&mcp.pay(checkout));
                    (verdict, reason)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let allowed = verdicts.iter().filter(|(v, _)| v == "allow").count();
    assert_eq!(allowed, 3, "{verdicts:?}");
    assert!(
        verdicts
            .iter()
            .filter(|(v, _)| v != "allow")
            .all(|(v, r)| v == "denied" && r == "over_window_cap"),
        "{verdicts:?}"
    );
    let completed: usize = agents
        .iter()
        .map(|(_, c)| world.completes_reaching_shop(c))
        .sum();
    assert_eq!(
        completed, 3,
        "exactly the allowed payments reached the shop"
    );
    // Every host sees the one window.
    let status = hosts[7].cli(&["status", "--json"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(doc["caps"]["USD"]["spent_minor"], 13500, "{doc}");
    // And no host wrote a SQLite ledger of its own.
    for host in &hosts {
        assert!(!host.home.join(cajaguard::store::DB_FILE).exists());
    }
}

#[test]
fn a_request_blocked_on_one_host_is_approved_from_another_and_used_once() {
    let Some(base) = pg_support::base_url() else {
        pg_support::notice("a_request_blocked_on_one_host_is_approved_from_another_and_used_once");
        return;
    };
    let schema = pg_support::Schema::create(&base);
    let world = World::new();
    let hosts = hosts(&world, &schema.url, 3);
    let mut first = hosts[0].proxy();
    let checkout = first.create_checkout("day-pack", 1);
    let request_id = verdict(&first.pay(&checkout))
        .2
        .expect("blocked with a request id");
    // The approver is on another host: it sees the pending request and files the approval there.
    let pending = hosts[2].cli(&["pending"]);
    assert!(
        String::from_utf8_lossy(&pending.stdout).contains(&request_id),
        "{}",
        String::from_utf8_lossy(&pending.stdout)
    );
    let out = hosts[2].cli(&["approve", &request_id, "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut second = hosts[1].proxy();
    let barrier = Arc::new(Barrier::new(2));
    let results: Vec<(String, String)> = std::thread::scope(|scope| {
        [&mut first, &mut second]
            .into_iter()
            .map(|mcp| {
                let barrier = barrier.clone();
                let checkout = checkout.clone();
                scope.spawn(move || {
                    barrier.wait();
                    let (verdict, reason, _) = verdict(&mcp.pay(&checkout));
                    (verdict, reason)
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect()
    });
    let approved = results
        .iter()
        .filter(|(v, _)| v == "allow_approved")
        .count();
    assert_eq!(approved, 1, "{results:?}");
    assert_eq!(world.completes_reaching_shop(&checkout), 1, "{results:?}");
    // Exit 3: used, as every host sees it.
    let verify = hosts[2].cli(&["verify", &request_id]);
    assert_eq!(verify.status.code(), Some(3));
}

/// The database goes away under running proxies (connections cut, new ones refused): payments
/// are refused as `store_unavailable` within seconds and nothing reaches the shop; when it comes
/// back, the same proxy serves again.
#[test]
fn a_postgres_outage_refuses_payments_and_service_resumes() {
    let Some(base) = pg_support::base_url() else {
        pg_support::notice("a_postgres_outage_refuses_payments_and_service_resumes");
        return;
    };
    let database = pg_support::Database::create(&base);
    let world = World::new();
    let host = &hosts(&world, &database.url, 1)[0];
    let mut mcp = host.proxy();
    let before = mcp.create_checkout("trail-socks", 2);
    let during = mcp.create_checkout("trail-socks", 1);
    assert_eq!(verdict(&mcp.pay(&before)).0, "allow");

    database.take_down();
    for _ in 0..2 {
        let started = std::time::Instant::now();
        let (v, reason, _) = verdict(&mcp.pay(&during));
        assert_eq!(
            (v.as_str(), reason.as_str()),
            ("denied", "store_unavailable")
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "refused in {:?}",
            started.elapsed()
        );
    }
    assert_eq!(world.completes_reaching_shop(&during), 0);

    database.bring_up();
    assert_eq!(verdict(&mcp.pay(&during)).0, "allow");
    assert_eq!(world.completes_reaching_shop(&during), 1);
    assert_eq!(world.completes_reaching_shop(&before), 1);
}

//! Several `cajaguard mcp` processes sharing one home (SPEC §4.12, §11.2-3): together they never
//! pass a cap and never use one approval twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;

/// Eight agents raced USD 45.00 payments against the USD 150.00 window: three fit (a fourth would
/// make 180.00), the others are refused over the window, and exactly the allowed reached the shop.
fn assert_three_of_eight_fit(
    world: &World,
    agents: &[(Mcp, String)],
    verdicts: &[(String, String)],
) {
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
}

/// Two sessions raced one approval: exactly one used it, and one complete reached the shop.
fn assert_used_once(world: &World, checkout: &str, results: &[(String, String)]) {
    let approved = results
        .iter()
        .filter(|(v, _)| v == "allow_approved")
        .count();
    assert_eq!(approved, 1, "{results:?}");
    assert_eq!(world.completes_reaching_shop(checkout), 1, "{results:?}");
}

#[test]
fn eight_proxies_racing_split_purchases_never_pass_the_window() {
    let world = World::new();
    // Each proxy gets its own checkout first, so that the race is only over the window.
    let mut agents = race::with_checkouts((0..8).map(|_| world.proxy()), "rain-shell", 1);
    let verdicts = race::pay_at_once(&mut agents);
    assert_three_of_eight_fit(&world, &agents, &verdicts);
    assert_eq!(usd_spend(&world), (13500, 0));
}

#[test]
fn one_approval_raced_by_two_proxies_is_used_once() {
    let world = World::new();
    let (checkout, results) = race::approval_raced(world.proxy(), world.proxy(), |id| {
        spec::approve(&world, id, &[]);
    });
    assert_used_once(&world, &checkout, &results);
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
    let Some(schema) =
        pg_support::schema_or_notice("eight_proxies_..._on_one_postgres_never_pass_the_window")
    else {
        return;
    };
    let world = World::new();
    let hosts = hosts(&world, &schema.url, 8);
    let mut agents = race::with_checkouts(hosts.iter().map(Host::proxy), "rain-shell", 1);
    let verdicts = race::pay_at_once(&mut agents);
    assert_three_of_eight_fit(&world, &agents, &verdicts);
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
    let Some(schema) = pg_support::schema_or_notice(
        "a_request_blocked_on_one_host_is_approved_from_another_and_used_once",
    ) else {
        return;
    };
    let world = World::new();
    let hosts = hosts(&world, &schema.url, 3);
    let mut request_id = String::new();
    let (checkout, results) = race::approval_raced(hosts[0].proxy(), hosts[1].proxy(), |id| {
        request_id = id.to_owned();
        // The approver is on another host: it sees the pending request and files the approval there.
        let pending = hosts[2].cli(&["pending"]);
        assert!(
            String::from_utf8_lossy(&pending.stdout).contains(id),
            "{}",
            String::from_utf8_lossy(&pending.stdout)
        );
        let out = hosts[2].cli(&["approve", id, "--yes"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    assert_used_once(&world, &checkout, &results);
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
        let answer = mcp.pay(&during);
        let (v, reason, _) = verdict(&answer);
        assert_eq!(
            (v.as_str(), reason.as_str()),
            ("denied", "store_unavailable")
        );
        // Where the gate's state lives, and what the driver said, are the operator's (the log's).
        let detail = answer["structuredContent"]["cajaguard"]["detail"].to_string();
        assert!(
            detail.contains("unreachable")
                && !detail.contains(&database.name)
                && !detail.contains("127.0.0.1"),
            "{detail}"
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

//! Two `cajaguard serve` processes on one PostgreSQL store (SPEC §11.2, §13): sixteen agents race
//! split purchases over both, under global caps and caps of their own, and together they never
//! pass either; a process whose clock runs 25 h ahead still counts what the honest one spent,
//! because with a PostgreSQL store the gate's clock is the database's.
//!
//! Each process has its own config and home (`World::host`), both in front of the one fixture
//! shop over HTTP, whose own state (`state.json`: which checkouts it completed, with their
//! lines) is the record of what was spent. Skipped with a notice without
//! `CAJAGUARD_TEST_POSTGRES_URL`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use cajaguard::store::{AuditRecord, Store};
use cajaguard_core::agent::AgentId;
use cajaguard_harness::fixtures::postgres_config;
use cajaguard_harness::pg as pg_support;
use cajaguard_harness::service::{HttpMcp, Served, add_serve};
use serde_json::{Value, json};
use support::*;

const URL_ENV: &str = "CAJAGUARD_STORE_URL";
/// The test hook a process reads at start: seconds added to its own clock.
const CLOCK_OFFSET_VAR: &str = "CAJAGUARD_TEST_CLOCK_OFFSET_SECONDS";
/// 25 hours: a window of 24 hours read by this clock alone would hold none of the spend.
const AHEAD: &str = "90000";

const AGENTS: usize = 16;
/// Agents `0..OWN_CAPPED` have caps of their own (`serve.agents[].caps`); the others are under
/// `agent_caps`.
const OWN_CAPPED: usize = 5;
/// Each agent's checkouts in a round, as quantities of trail socks (USD 12.00 each): USD 108.00
/// attempted per agent, USD 1,728.00 in all.
const QUANTITIES: [u64; 5] = [1, 2, 3, 1, 2];
const PRICE_MINOR: i64 = 1200;
const SLUG: &str = "trail-socks";

/// Below the sum of what the agents could spend under their own caps (11 x 60 + 5 x 36 = 840),
/// so both the global and the per-agent windows bind.
const GLOBAL_WINDOW: i64 = 60_000;
const AGENT_WINDOW: i64 = 6_000;
const OWN_WINDOW: i64 = 3_600;

fn agent_name(i: usize) -> String {
    format!("agent-{i:02}")
}

fn token(i: usize) -> String {
    format!("cg_agent_race_{i:02}_0123456789abcdef0123456789")
}

fn window_of(agent: usize) -> i64 {
    if agent < OWN_CAPPED {
        OWN_WINDOW
    } else {
        AGENT_WINDOW
    }
}

fn usd(minor: i64) -> String {
    format!("{}.{:02}", minor / 100, minor % 100)
}

/// Two services on one PostgreSQL schema in front of one fixture shop, sixteen agents' tokens
/// in the store.
struct Pair {
    /// Stopped before the world (and its shop) goes.
    services: Vec<Served>,
    world: World,
    store: Store,
    schema: pg_support::Schema,
}

/// `env_b`: extra environment for the second service (the clock offset).
fn two_services(base: &str, env_b: &[(&str, &str)]) -> Pair {
    let schema = pg_support::Schema::create(base);
    let world = World::with(Options {
        transport: Transport::Http,
        caps: json!({ "USD": {
            "approval_above": "100.00", "per_transaction": "100.00", "window": usd(GLOBAL_WINDOW)
        }}),
        ..Options::default()
    });
    let agents: Vec<Value> = (0..OWN_CAPPED)
        .map(|i| {
            json!({ "name": agent_name(i), "caps": { "USD": {
                "approval_above": "36.00", "per_transaction": "36.00", "window": usd(OWN_WINDOW)
            }}})
        })
        .collect();
    let hosts: Vec<Host> = ["a", "b"]
        .iter()
        .map(|name| {
            world.host(
                name,
                json!({ "url_env": URL_ENV }),
                &[(URL_ENV, schema.url.as_str())],
            )
        })
        .collect();
    let urls: Vec<String> = hosts
        .iter()
        .map(|host| {
            add_serve(
                &host.config,
                json!({ "agents": agents }),
                json!({ "agent_caps": { "USD": {
                    "approval_above": "40.00", "per_transaction": "40.00", "window": usd(AGENT_WINDOW)
                }}}),
            )
        })
        .collect();
    // The tokens, added once in the shared store: both services know every agent.
    let store = Store::open_with(&hosts[0].home, &postgres_config(&schema.url)).unwrap();
    let now = time::OffsetDateTime::now_utc();
    for i in 0..AGENTS {
        let agent = AgentId::parse(&agent_name(i)).unwrap();
        assert!(
            store
                .add_agent(&agent, &token(i), now, &AuditRecord::new(now, "agent add"))
                .unwrap()
        );
    }
    let services = hosts
        .iter()
        .zip(&urls)
        .enumerate()
        .map(|(n, (host, url))| {
            let mut env = vec![(URL_ENV, schema.url.as_str()), (TOKEN_VAR, SHOP_TOKEN)];
            if n == 1 {
                env.extend_from_slice(env_b);
            }
            Served::start(&host.config, url, &env)
        })
        .collect();
    Pair {
        services,
        world,
        store,
        schema,
    }
}

/// One payment of the race and what came of it.
#[derive(Debug, Clone)]
struct Payment {
    agent: usize,
    service: usize,
    checkout: String,
    amount: i64,
    verdict: String,
    reason: String,
}

/// Every agent creates its checkouts (spread over both services), then pays them all at once,
/// each payment on its own session and thread, started after a delay that differs per round.
fn race(pair: &Pair, round: usize) -> Vec<Payment> {
    let mut prepared = Vec::new();
    for agent in 0..AGENTS {
        for (k, quantity) in QUANTITIES.iter().enumerate() {
            let service = (agent + k + round) % 2;
            let mut mcp = HttpMcp::connect(&pair.services[service].url, &token(agent));
            let (checkout, total) = mcp.create_priced(SLUG, *quantity);
            let amount = PRICE_MINOR * i64::try_from(*quantity).unwrap();
            assert_eq!(total, format!("USD {}", usd(amount)), "the shop's total");
            // Round 0 starts every payment at once; later rounds spread them over a few ms in
            // an order of their own, so that different payments meet at the cap.
            let delay = Duration::from_micros(
                ((agent * 7 + k * 3 + round * 5) % 11) as u64 * round as u64 * 150,
            );
            prepared.push((mcp, agent, service, checkout, amount, delay));
        }
    }
    let barrier = Barrier::new(prepared.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = prepared
            .into_iter()
            .map(|(mut mcp, agent, service, checkout, amount, delay)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    std::thread::sleep(delay);
                    let (verdict, reason, _) = verdict(&mcp.pay(&checkout));
                    Payment {
                        agent,
                        service,
                        checkout,
                        amount,
                        verdict,
                        reason,
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// What the shop completed, by its own state: checkout id -> amount (its lines at the catalog
/// price).
fn shop_completed(world: &World) -> BTreeMap<String, i64> {
    let state = read_json(&world.shop_state.join("state.json"));
    state["checkouts"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, c)| c["status"] == "completed")
        .map(|(id, c)| {
            let amount = c["lines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|line| {
                    assert_eq!(line["slug"], SLUG, "{c}");
                    PRICE_MINOR * line["quantity"].as_i64().unwrap()
                })
                .sum();
            (id.clone(), amount)
        })
        .collect()
}

/// The round's payments against the shop's record and the ledger: no window passed, globally or
/// per agent; the shop's completions are exactly the allowed payments and the ledger's settled
/// spend; and no refusal was spurious (each refused payment would have passed a window).
fn assert_no_overspend(pair: &Pair, payments: &[Payment], what: &str) {
    let completed = shop_completed(&pair.world);
    let mut by_agent = [0_i64; AGENTS];
    let mut attempted = [0_i64; AGENTS];
    for p in payments {
        attempted[p.agent] += p.amount;
        let reached = pair.world.completes_reaching_shop(&p.checkout);
        match (p.verdict.as_str(), completed.get(&p.checkout)) {
            ("allow", Some(amount)) => {
                assert_eq!(*amount, p.amount, "{what}: {p:?}");
                assert_eq!(reached, 1, "{what}: {p:?}");
                by_agent[p.agent] += amount;
            }
            ("denied", None) => {
                assert_eq!(p.reason, "over_window_cap", "{what}: {p:?}");
                assert_eq!(
                    reached, 0,
                    "{what}: a refused payment reached the shop: {p:?}"
                );
            }
            _ => panic!("{what}: the ruling and the shop disagree: {p:?}"),
        }
    }
    assert_eq!(
        completed.len(),
        payments.iter().filter(|p| p.verdict == "allow").count(),
        "{what}: the shop completed a checkout no payment of this round was allowed"
    );
    let total: i64 = by_agent.iter().sum();
    let attempted_total: i64 = attempted.iter().sum();
    assert!(
        attempted_total > GLOBAL_WINDOW,
        "the race must press the cap"
    );
    assert!(
        total <= GLOBAL_WINDOW,
        "{what}: overspend: the shop completed USD {} against a window of USD {}",
        usd(total),
        usd(GLOBAL_WINDOW)
    );
    for agent in 0..AGENTS {
        assert!(attempted[agent] > window_of(agent));
        assert!(
            by_agent[agent] <= window_of(agent),
            "{what}: {} overspent: USD {} against its window of USD {}",
            agent_name(agent),
            usd(by_agent[agent]),
            usd(window_of(agent))
        );
    }

    // The ledger counts exactly what the shop took, globally and per agent, none left in flight.
    let now = time::OffsetDateTime::now_utc();
    let day = Duration::from_secs(24 * 3600);
    let global = pair.store.window_spend(day, now).unwrap()["USD"];
    assert_eq!(
        (global.settled, global.in_flight),
        (total, 0),
        "{what}: ledger vs shop"
    );
    for (agent, spent) in by_agent.iter().enumerate() {
        let id = AgentId::parse(&agent_name(agent)).unwrap();
        let own = pair
            .store
            .agent_window_spend(&id, day, now)
            .unwrap()
            .get("USD")
            .copied()
            .unwrap_or_default();
        assert_eq!(
            (own.settled, own.in_flight),
            (*spent, 0),
            "{what}: {}'s ledger vs the shop",
            agent_name(agent)
        );
    }

    // Spend only grew during the round, so a refused payment saw at least the final headroom: it
    // must not have fit in it (else the gate refused what the windows allowed).
    for p in payments.iter().filter(|p| p.verdict != "allow") {
        let global_room = GLOBAL_WINDOW - total;
        let own_room = window_of(p.agent) - by_agent[p.agent];
        assert!(
            p.amount > global_room || p.amount > own_room,
            "{what}: refused although it fit (global room {global_room}, own room {own_room}): {p:?}"
        );
    }
    // Both services decided, and both allowed some.
    for service in 0..2 {
        assert!(
            payments
                .iter()
                .any(|p| p.service == service && p.verdict == "allow"),
            "{what}: service {service} allowed nothing"
        );
    }
}

const ROUNDS: usize = 4;

#[test]
fn sixteen_agents_racing_split_purchases_over_two_services_never_pass_a_window() {
    let Some(base) = pg_support::base_url() else {
        pg_support::notice(
            "sixteen_agents_racing_split_purchases_over_two_services_never_pass_a_window",
        );
        return;
    };
    for round in 0..ROUNDS {
        let pair = two_services(&base, &[]);
        let payments = race(&pair, round);
        assert_no_overspend(&pair, &payments, &format!("round {round}"));
    }
}

// ---- one process's clock 25 h ahead ----

/// Pays a fresh checkout of `quantity` x trail socks as `agent` through `service`.
fn pay(pair: &Pair, service: usize, agent: usize, quantity: u64) -> (String, String) {
    let mut mcp = HttpMcp::connect(&pair.services[service].url, &token(agent));
    let checkout = mcp.create_checkout(SLUG, quantity);
    let (verdict, reason, _) = verdict(&mcp.pay(&checkout));
    let reached = pair.world.completes_reaching_shop(&checkout);
    assert_eq!(
        reached,
        usize::from(verdict == "allow"),
        "{verdict}/{reason}"
    );
    (verdict, reason)
}

fn assert_ruling(got: (String, String), want: (&str, &str), what: &str) {
    assert_eq!((got.0.as_str(), got.1.as_str()), want, "{what}");
}

/// Whether `cajaguard serve` with this clock offset stops at start, naming the variable, instead
/// of serving: the hook is read (a value it cannot use is refused). Run on a copy of the second
/// service's config with a port of its own, so a refusal cannot be a port already taken.
fn refuses_to_start_with_offset(pair: &Pair, offset: &str) -> bool {
    let original = &pair.services[1].config;
    let config = original.with_file_name("b-offset-check.json");
    std::fs::copy(original, &config).unwrap();
    add_serve(&config, read_json(original)["serve"].clone(), json!({}));
    let mut child = Command::new(cajaguard_bin())
        .args(["serve", "--config"])
        .arg(&config)
        .env(CLOCK_OFFSET_VAR, offset)
        .env(URL_ENV, &pair.schema.url)
        .env(TOKEN_VAR, SHOP_TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            return !out.status.success() && stderr.contains(CLOCK_OFFSET_VAR);
        }
        // Still serving at the deadline: it did not refuse. (Not "its port answers": another
        // test's service may have been given the same free port.)
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_service_whose_clock_is_25_hours_ahead_still_counts_the_honest_services_spend() {
    let Some(base) = pg_support::base_url() else {
        pg_support::notice(
            "a_service_whose_clock_is_25_hours_ahead_still_counts_the_honest_services_spend",
        );
        return;
    };
    const HONEST: usize = 0;
    const AHEAD_SERVICE: usize = 1;
    let pair = two_services(&base, &[(CLOCK_OFFSET_VAR, AHEAD)]);
    // The hook is live in this build: a clock offset it cannot read stops the process (without
    // the hook the variable would change nothing and this test would prove nothing).
    assert!(
        refuses_to_start_with_offset(&pair, "twenty-five hours"),
        "{CLOCK_OFFSET_VAR} is not read by cajaguard serve"
    );

    // Agent 0 (own window USD 36.00) spends it all through the honest service; the one ahead
    // must see it, so even USD 12.00 more is over the agent's window.
    assert_ruling(pay(&pair, HONEST, 0, 3), ("allow", "within_caps"), "36.00");
    assert_ruling(
        pay(&pair, AHEAD_SERVICE, 0, 1),
        ("denied", "over_window_cap"),
        "agent 0's window is full, 25 h later by this clock",
    );

    // Agent 5 (USD 60.00): 48.00 honest; the one ahead refuses 24.00 and allows 12.00 (it is not
    // refusing everything); that 12.00 counts for the honest service in turn.
    assert_ruling(pay(&pair, HONEST, 5, 2), ("allow", "within_caps"), "24.00");
    assert_ruling(pay(&pair, HONEST, 5, 2), ("allow", "within_caps"), "48.00");
    assert_ruling(
        pay(&pair, AHEAD_SERVICE, 5, 2),
        ("denied", "over_window_cap"),
        "48.00 + 24.00 > 60.00",
    );
    assert_ruling(
        pay(&pair, AHEAD_SERVICE, 5, 1),
        ("allow", "within_caps"),
        "48.00 + 12.00 = 60.00",
    );
    assert_ruling(
        pay(&pair, HONEST, 5, 1),
        ("denied", "over_window_cap"),
        "the ahead service's 12.00 counts for the honest one",
    );

    // The global window: ten agents at 48.00 each through the honest service bring it to
    // 36 + 60 + 480 = 576.00 of 600.00.
    for agent in 6..AGENTS {
        for _ in 0..2 {
            assert_ruling(
                pay(&pair, HONEST, agent, 2),
                ("allow", "within_caps"),
                "filling",
            );
        }
    }
    // Agent 1's own window is empty, but 576 + 36 > 600: refused by the one ahead; 24.00 fits.
    assert_ruling(
        pay(&pair, AHEAD_SERVICE, 1, 3),
        ("denied", "over_window_cap"),
        "the global window, 25 h later by this clock",
    );
    assert_ruling(
        pay(&pair, AHEAD_SERVICE, 1, 2),
        ("allow", "within_caps"),
        "576 + 24 = 600",
    );
    assert_ruling(
        pay(&pair, HONEST, 2, 1),
        ("denied", "over_window_cap"),
        "the window is full for the honest one too",
    );
    // The agent's own status through the service ahead shows the whole window.
    let mut status = HttpMcp::connect(&pair.services[AHEAD_SERVICE].url, &token(1));
    let doc = status.call("cajaguard_status", json!({}));
    let doc = &doc["structuredContent"];
    assert_eq!(doc["caps"]["USD"]["spent_minor"], GLOBAL_WINDOW, "{doc}");
    assert_eq!(doc["agent"]["caps"]["USD"]["spent_minor"], 2400, "{doc}");
    let completed: i64 = shop_completed(&pair.world).values().sum();
    assert_eq!(completed, GLOBAL_WINDOW);
    drop(pair);

    // And the race, with one of the two services ahead.
    for round in 0..2 {
        let pair = two_services(&base, &[(CLOCK_OFFSET_VAR, AHEAD)]);
        let payments = race(&pair, round + 1);
        assert_no_overspend(&pair, &payments, &format!("ahead, round {round}"));
    }
}

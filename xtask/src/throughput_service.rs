//! A bounded throughput run of the service (SPEC §13): 16 agents on 2 `cajaguard serve` processes
//! sharing one PostgreSQL store, each agent paying USD 24.00 checkouts back to back over MCP
//! Streamable HTTP against a global window that fits half of all payments and agent windows that
//! fit three quarters of each agent's. Counts gated decisions per second and overspend (globally
//! and per agent, from the store: must be 0), beside two floors measured in the same run: the
//! same load on one service process, and one PostgreSQL commit round trip. Loads last about a
//! second each, so the run is several rounds of both, interleaved, and each figure is its median
//! round (every round's rate is kept beside it).
//!
//! Each service's shop is the test shop answering from memory (a child of each process), so the
//! run measures the service, the gate and the shared store. Needs `CAJAGUARD_TEST_POSTGRES_URL`
//! (CI sets it); without it the run is reported as not run.

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use cajaguard::store::{AuditRecord, ShopObject, Store};
use cajaguard_core::agent::AgentId;
use cajaguard_harness::fixtures::postgres_config;
use cajaguard_harness::pg;
use cajaguard_harness::service::{HttpMcp, Served, add_serve};
use cajaguard_harness::{Options, completed, money, shop_checkout, verdict};
use serde::Serialize;
use serde_json::json;

use crate::scenarios::{caught, setup, test_shop_world};
use crate::stats::{Summary, time_n};

pub const AGENTS: usize = 16;
const TOTAL_MINOR: i64 = 2400;
const URL_ENV: &str = "CAJAGUARD_STORE_URL";

#[derive(Debug, Clone, Serialize)]
pub struct Load {
    pub processes: usize,
    pub decisions: usize,
    pub seconds: f64,
    pub decisions_per_second: f64,
    pub allowed: usize,
    pub over_window_cap: usize,
    pub other: usize,
    /// Settled + in-flight spend over the global window cap, minor units (from the store).
    pub overspend_minor: i64,
    /// The largest spend of one agent over its own window cap, minor units.
    pub agent_overspend_minor: i64,
    pub counted_minor: i64,
    /// One complete_checkout as the agent sees it.
    pub latency: Summary,
    /// The whole machine's busy CPU over the load (every process: the agents, the services,
    /// their shops, PostgreSQL), per decision, in milliseconds: less noisy than the rate
    /// on a shared VM, and what a change to the payment path's work moves first.
    pub cpu_ms_per_decision: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServiceThroughput {
    pub agents: usize,
    pub payments_per_agent: usize,
    pub window_minor: i64,
    pub agent_window_minor: i64,
    /// Rounds run, each a 1-process then a 2-process load on fresh stores.
    pub rounds: usize,
    /// 16 agents on 2 processes: the figure, the round with the median decisions/s.
    pub two: Load,
    /// The same load on 1 process, the median round: a floor.
    pub one: Load,
    /// Every round's decisions/s, in the order run: 2 processes, then 1.
    pub two_rounds: Vec<f64>,
    pub one_rounds: Vec<f64>,
    /// The largest overspend of any round, globally and per agent (minor units): must be 0.
    pub worst_overspend_minor: i64,
    pub worst_agent_overspend_minor: i64,
    /// Rulings other than allow and over_window_cap in any round: must be 0.
    pub others: usize,
    /// One `INSERT` committed (a WAL flush) on the same server: the other floor.
    pub pg_commit: Summary,
    /// Two processes' decisions/s over one's.
    pub ratio_to_one: f64,
    pub target: String,
    pub met: bool,
}

impl ServiceThroughput {
    pub fn overspend(&self) -> bool {
        self.worst_overspend_minor > 0 || self.worst_agent_overspend_minor > 0
    }
}

/// The load with the median decisions/s (the upper one of an even count), and every load's rate.
fn median(mut loads: Vec<Load>) -> Result<(Load, Vec<f64>)> {
    let rates = loads.iter().map(|l| l.decisions_per_second).collect();
    loads.sort_by(|a, b| a.decisions_per_second.total_cmp(&b.decisions_per_second));
    let middle = loads.len() / 2;
    let load = loads
        .into_iter()
        .nth(middle)
        .ok_or_else(|| anyhow!("no load was run"))?;
    Ok((load, rates))
}

/// `Ok(None)`: no PostgreSQL configured.
pub fn run(
    scratch: &Path,
    per_agent: usize,
    rounds: usize,
    progress: &dyn Fn(&str),
) -> Result<Option<ServiceThroughput>> {
    let Some(base) = pg::base_url() else {
        progress(&format!(
            "service throughput: not run ({} is not set)",
            pg::ENV
        ));
        return Ok(None);
    };
    caught(|| measure(scratch, &base, per_agent, rounds, progress)).map(Some)
}

fn measure(
    scratch: &Path,
    base: &str,
    per_agent: usize,
    rounds: usize,
    progress: &dyn Fn(&str),
) -> Result<ServiceThroughput> {
    let decisions = AGENTS * per_agent;
    let window_minor = (decisions / 2) as i64 * TOTAL_MINOR;
    let agent_window_minor = (per_agent * 3 / 4).max(1) as i64 * TOTAL_MINOR;

    progress("service throughput: PostgreSQL commit floor");
    let pg_commit = {
        let schema = pg::Schema::create(base);
        let mut client = schema.client();
        client.batch_execute("CREATE TABLE commit_floor (n BIGINT)")?;
        let samples = time_n(if per_agent >= 60 { 2_000 } else { 300 }, || {
            client
                .batch_execute("INSERT INTO commit_floor VALUES (1)")
                .map_err(|e| anyhow!("{e}"))
        })?;
        Summary::of(&samples)
    };

    // The two loads interleaved, round after round, so that a slow stretch of the machine
    // weighs on both.
    let (mut ones, mut twos) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        for processes in [1, 2] {
            progress(&format!(
                "service throughput, round {round} of {rounds}: {AGENTS} agents on {processes} cajaguard serve x {per_agent} payments of USD 24.00, one PostgreSQL"
            ));
            let run = load(
                scratch,
                base,
                processes,
                per_agent,
                window_minor,
                agent_window_minor,
            )?;
            if processes == 1 {
                ones.push(run);
            } else {
                twos.push(run);
            }
        }
    }
    let all = || ones.iter().chain(&twos);
    let worst_overspend_minor = all().map(|l| l.overspend_minor).max().unwrap_or(0);
    let worst_agent_overspend_minor = all().map(|l| l.agent_overspend_minor).max().unwrap_or(0);
    let others = all().map(|l| l.other).sum();
    let (two, two_rounds) = median(twos)?;
    let (one, one_rounds) = median(ones)?;
    let ratio_to_one = if one.decisions_per_second > 0.0 {
        two.decisions_per_second / one.decisions_per_second
    } else {
        0.0
    };
    let met = two.decisions_per_second >= 1000.0
        && worst_overspend_minor == 0
        && worst_agent_overspend_minor == 0;
    Ok(ServiceThroughput {
        agents: AGENTS,
        payments_per_agent: per_agent,
        window_minor,
        agent_window_minor,
        rounds,
        two,
        one,
        two_rounds,
        one_rounds,
        worst_overspend_minor,
        worst_agent_overspend_minor,
        others,
        pg_commit,
        ratio_to_one,
        target: ">= 1,000 gated decisions/s (median round), 16 agents on 2 processes, 0 overspend in every round".into(),
        met,
    })
}

fn token(agent: usize) -> String {
    format!("cg_agent_report_throughput_{agent:02}_0123456789abcdef")
}

/// The checkout `agent` pays `i`-th in a run on `processes` services.
fn paid_checkout(processes: usize, agent: usize, i: usize) -> String {
    format!("gid://fixture/Checkout/sv{processes}-{agent}-{i}")
}

fn agent_id(agent: usize) -> Result<AgentId> {
    AgentId::parse(&format!("agent-{agent:02}")).map_err(|e| anyhow!("{e}"))
}

fn load(
    scratch: &Path,
    base: &str,
    processes: usize,
    per_agent: usize,
    window_minor: i64,
    agent_window_minor: i64,
) -> Result<Load> {
    let schema = pg::Schema::create(base);
    let ready = shop_checkout("Trail socks", 1200, 2, "ready_for_complete");
    let major = |minor: i64| money("USD", minor).trim_start_matches("USD ").to_owned();
    let options = Options {
        caps: json!({ "USD": {
            "approval_above": "50.00", "per_transaction": "100.00", "window": major(window_minor)
        }}),
        ..Options::default()
    };
    let world = test_shop_world(&setup(scratch), options, &ready, vec![completed(&ready)]);
    let hosts: Vec<_> = (0..processes)
        .map(|n| {
            world.host(
                &format!("serve{n}"),
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
                json!({}),
                json!({ "agent_caps": { "USD": {
                    "approval_above": "50.00", "per_transaction": "100.00", "window": major(agent_window_minor)
                }}}),
            )
        })
        .collect();
    let store = Store::open_with(&hosts[0].home, &postgres_config(&schema.url))?;
    let now = time::OffsetDateTime::now_utc();
    for agent in 0..AGENTS {
        store.add_agent(
            &agent_id(agent)?,
            &token(agent),
            now,
            &AuditRecord::new(now, "agent add"),
        )?;
        // The test shop makes no checkouts: each agent's are recorded as its own here, as its
        // create_checkout through the service would have (`proxy/agents.rs`).
        for i in 0..per_agent {
            let checkout = paid_checkout(processes, agent, i);
            if !store.bind_to_agent(ShopObject::Checkout, &checkout, &agent_id(agent)?, now)? {
                bail!("{checkout} is already another agent's");
            }
        }
    }
    let services: Vec<Served> = hosts
        .iter()
        .zip(&urls)
        .map(|(host, url)| Served::start_quiet(&host.config, url, &[(URL_ENV, &schema.url)]))
        .collect();

    let sessions: Vec<HttpMcp> = (0..AGENTS)
        .map(|agent| HttpMcp::connect(&services[agent % processes].url, &token(agent)))
        .collect();
    let barrier = Arc::new(Barrier::new(AGENTS + 1));
    let handles: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(agent, mut mcp)| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || -> Vec<(String, Duration)> {
                barrier.wait();
                (0..per_agent)
                    .map(|i| {
                        let checkout = paid_checkout(processes, agent, i);
                        let started = Instant::now();
                        let (v, r, _) = verdict(&mcp.pay(&checkout));
                        (format!("{v}/{r}"), started.elapsed())
                    })
                    .collect()
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    let ticks_before = crate::throughput::cpu_ticks();
    let mut rulings = Vec::new();
    for handle in handles {
        rulings.extend(
            handle
                .join()
                .map_err(|_| anyhow!("an agent thread panicked"))?,
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    let busy_ticks = match (ticks_before, crate::throughput::cpu_ticks()) {
        (Some((before, _)), Some((after, _))) => after.saturating_sub(before),
        _ => 0,
    };
    drop(services);

    let count = |what: &str| rulings.iter().filter(|(r, _)| r == what).count();
    let allowed = count("allow/within_caps");
    let over_window_cap = count("denied/over_window_cap");
    let other = rulings.len() - allowed - over_window_cap;
    let now = time::OffsetDateTime::now_utc();
    let day = Duration::from_secs(24 * 3600);
    let usd = store
        .window_spend(day, now)?
        .get("USD")
        .copied()
        .unwrap_or_default();
    let counted_minor = usd.settled + usd.in_flight;
    if counted_minor != allowed as i64 * TOTAL_MINOR {
        bail!(
            "the store counts {counted_minor} but {allowed} payments of {TOTAL_MINOR} were allowed"
        );
    }
    let mut agent_overspend_minor = 0;
    for agent in 0..AGENTS {
        let own = store
            .agent_window_spend(&agent_id(agent)?, day, now)?
            .get("USD")
            .copied()
            .unwrap_or_default();
        agent_overspend_minor = agent_overspend_minor
            .max(own.settled + own.in_flight - agent_window_minor)
            .max(0);
    }
    let latencies: Vec<Duration> = rulings.iter().map(|(_, d)| *d).collect();
    Ok(Load {
        processes,
        decisions: rulings.len(),
        seconds,
        decisions_per_second: rulings.len() as f64 / seconds,
        allowed,
        over_window_cap,
        other,
        overspend_minor: (counted_minor - window_minor).max(0),
        agent_overspend_minor,
        counted_minor,
        latency: Summary::of(&latencies),
        cpu_ms_per_decision: busy_ticks as f64 * 1000.0
            / clock_ticks_per_second()
            / rulings.len().max(1) as f64,
    })
}

/// `/proc/stat` counts in clock ticks: 100 a second on Linux (`USER_HZ`, fixed by the kernel's
/// ABI whatever `HZ` it was built with).
fn clock_ticks_per_second() -> f64 {
    100.0
}

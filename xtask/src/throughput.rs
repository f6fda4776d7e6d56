//! A bounded throughput run: 8 `cajaguard mcp` processes on one home, one agent each, paying USD
//! 24.00 checkouts as fast as the gate answers, against a window that fits half of them. Counts
//! decisions per second and overspend (allowed beyond the window: must be 0).
//!
//! The shop is the test shop answering from memory (`get_checkout` and `complete_checkout` echo the
//! checkout id), so the run measures the gate and its store, not the fixture's own fsyncs.

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde::Serialize;
use serde_json::json;

use crate::stats::Summary;
use cajaguard_harness::{Options, completed, money, shop_checkout, verdict};

use crate::scenarios::{caught, setup, test_shop_world};

pub const PROCESSES: usize = 8;
const TOTAL_MINOR: i64 = 2400;

#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    pub processes: usize,
    pub decisions: usize,
    pub seconds: f64,
    pub decisions_per_second: f64,
    pub allowed: usize,
    pub over_window_cap: usize,
    pub other: usize,
    /// How many allowed payments fit in the window.
    pub fit: usize,
    /// Allowed payments beyond what the window fits.
    pub overspend: usize,
    /// Settled + in-flight spend over the window cap, minor units (from `cajaguard status`).
    pub overspend_minor: i64,
    pub window_minor: i64,
    pub counted_minor: i64,
    /// Latency of one complete_checkout as the agent sees it.
    pub latency: Summary,
    pub target: String,
    pub met: bool,
}

pub fn run(scratch: &Path, per_process: usize, progress: &dyn Fn(&str)) -> Result<Throughput> {
    caught(|| measure(scratch, per_process, progress))
}

fn measure(scratch: &Path, per_process: usize, progress: &dyn Fn(&str)) -> Result<Throughput> {
    let decisions = PROCESSES * per_process;
    let fit = decisions / 2;
    let window_minor = fit as i64 * TOTAL_MINOR;
    let ready = shop_checkout("Trail socks", 1200, 2, "ready_for_complete");
    let options = Options {
        caps: json!({ "USD": {
            "approval_above": "50.00",
            "per_transaction": "100.00",
            "window": money("USD", window_minor).trim_start_matches("USD ")
        }}),
        ..Options::default()
    };
    let world = test_shop_world(&setup(scratch), options, &ready, vec![completed(&ready)]);
    progress(&format!(
        "throughput: {PROCESSES} proxies x {per_process} payments of USD 24.00, window fits {fit}"
    ));
    let mut agents = Vec::new();
    for _ in 0..PROCESSES {
        agents.push(world.proxy());
    }
    let barrier = Arc::new(Barrier::new(PROCESSES + 1));
    let handles: Vec<_> = agents
        .into_iter()
        .enumerate()
        .map(|(p, mut mcp)| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || -> Result<Vec<(String, Duration)>> {
                barrier.wait();
                let mut out = Vec::with_capacity(per_process);
                for i in 0..per_process {
                    let checkout = format!("gid://fixture/Checkout/tp-{p}-{i}");
                    let started = Instant::now();
                    let result = mcp.pay(&checkout);
                    let (v, r, _) = verdict(&result);
                    out.push((format!("{v}/{r}"), started.elapsed()));
                }
                Ok(out)
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    let mut rulings = Vec::new();
    for handle in handles {
        rulings.extend(
            handle
                .join()
                .map_err(|_| anyhow!("an agent thread panicked"))??,
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    let count = |what: &str| rulings.iter().filter(|(r, _)| r == what).count();
    let allowed = count("allow/within_caps");
    let over_window_cap = count("denied/over_window_cap");
    let other = rulings.len() - allowed - over_window_cap;
    let (spent, in_flight) = world.spend("USD");
    let counted_minor = spent + in_flight;
    let overspend_minor = (counted_minor - window_minor).max(0);
    let overspend = allowed.saturating_sub(fit);
    let latencies: Vec<Duration> = rulings.iter().map(|(_, d)| *d).collect();
    let decisions_per_second = rulings.len() as f64 / seconds;
    Ok(Throughput {
        processes: PROCESSES,
        decisions: rulings.len(),
        seconds,
        decisions_per_second,
        allowed,
        over_window_cap,
        other,
        fit,
        overspend,
        overspend_minor,
        window_minor,
        counted_minor,
        latency: Summary::of(&latencies),
        target: ">= 2,000 decisions/s across 8 processes, 0 overspend".into(),
        met: decisions_per_second >= 2000.0 && overspend == 0 && overspend_minor == 0,
    })
}

/// The whole machine's CPU time counters (busy, total) from the first line of /proc/stat, in
/// ticks; `None` where there is no /proc.
pub fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().sum();
    // user nice system idle iowait ...: idle and iowait are the time nobody ran.
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// The share of the machine's CPU that was busy since `before` (0 when unknown), and the counters
/// now, to pass as the next `before`.
pub fn cpu_busy_fraction_since(before: Option<(u64, u64)>) -> (f64, Option<(u64, u64)>) {
    let now = cpu_ticks();
    let fraction = match (before, now) {
        (Some((busy0, total0)), Some((busy1, total1))) if total1 > total0 => {
            (busy1 - busy0) as f64 / (total1 - total0) as f64
        }
        _ => 0.0,
    };
    (fraction, now)
}

//! The report as markdown (`cajaguard.md`, also printed), as JSON (`cajaguard.json`), and the short
//! summary between `<!-- report:start -->` and `<!-- report:end -->` in README.md.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Result, bail};
use serde_json::json;

use crate::scenarios::{Ruling, Scenarios};
use crate::stats::human;
use crate::throughput::Throughput;
use crate::throughput_service::{Load, ServiceThroughput};
use crate::timing::{Row, Sizes, Timing};

pub const START: &str = "<!-- report:start -->";
pub const END: &str = "<!-- report:end -->";

pub struct Seconds {
    pub scenarios: f64,
    pub timing: f64,
    pub throughput: f64,
    pub service_throughput: f64,
    pub total: f64,
}

pub struct Run {
    pub mode: &'static str,
    pub profile: &'static str,
    pub sizes: Sizes,
    pub scenarios: Scenarios,
    pub timing: anyhow::Result<Timing>,
    pub throughput: anyhow::Result<Throughput>,
    /// `Ok(None)`: not run (no PostgreSQL configured).
    pub service_throughput: anyhow::Result<Option<ServiceThroughput>>,
    pub scratch_dir: PathBuf,
    pub seconds: Seconds,
}

impl Run {
    /// Every scenario as expected, every measurement taken, no overspend.
    pub fn all_good(&self) -> bool {
        self.scenarios.passed() == self.scenarios.total()
            && self.timing.is_ok()
            && self
                .throughput
                .as_ref()
                .is_ok_and(|t| t.overspend == 0 && t.overspend_minor == 0 && t.other == 0)
            && self
                .service_throughput
                .as_ref()
                .is_ok_and(|t| t.as_ref().is_none_or(|t| !t.overspend() && t.others == 0))
    }

    fn closing_line(&self) -> String {
        format!(
            "Scenarios as expected: {}/{}",
            self.scenarios.passed(),
            self.scenarios.total()
        )
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn check(b: bool) -> &'static str {
    if b { "✅" } else { "❌ OFF" }
}

/// A table cell: no pipes or newlines from observed text.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("Linux {}", s.trim()))
        .unwrap_or_else(|_| std::env::consts::OS.to_owned());
    // Other work on the machine shows in every number: say how busy it was.
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .map(|l| format!(", load average {l} at the end of the run"))
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, {kernel}{load}")
}

fn spec_table(out: &mut String, scenarios: &Scenarios) {
    out.push_str("| Scenario | Total | Verdict | Reason | Reached shop | As expected |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- |\n");
    for row in &scenarios.spec {
        let shown = |pick: fn(&Ruling) -> String| -> String {
            let expected = pick(&row.expected);
            match &row.observed {
                Some(observed) if pick(observed) == expected => expected,
                Some(observed) => format!("{} (expected {expected})", pick(observed)),
                None => format!("? (expected {expected})"),
            }
        };
        let total = if row.expected.total == "-" {
            "-".to_owned()
        } else {
            let expected = row.expected.total.trim_end_matches(" each").to_owned();
            match &row.observed {
                Some(o) if o.total == expected => row.expected.total.clone(),
                Some(o) => format!("{} (expected {})", o.total, row.expected.total),
                None => format!("? (expected {})", row.expected.total),
            }
        };
        let mut ok = check(row.as_expected).to_owned();
        if let Some(error) = &row.error {
            let _ = write!(ok, " {}", cell(error));
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            cell(&row.scenario),
            cell(&total),
            cell(&shown(|r| r.verdict.clone())),
            cell(&shown(|r| r.reason.clone())),
            cell(&shown(|r| yes_no(r.reached_shop).to_owned())),
            ok
        );
    }
}

fn project_table(out: &mut String, scenarios: &Scenarios) {
    out.push_str("| Scenario | Expected | Observed | As expected |\n");
    out.push_str("| --- | --- | --- | --- |\n");
    for row in &scenarios.project {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            cell(&row.scenario),
            cell(&row.expected),
            cell(&row.observed),
            check(row.as_expected)
        );
    }
}

fn ratio(row: &Row) -> String {
    match row.ratio_to_floor {
        Some(r) if r >= 10.0 => format!("{r:.0}x"),
        Some(r) if r >= 0.1 => format!("{r:.2}x"),
        Some(r) => format!("{r:.3}x"),
        None => "-".to_owned(),
    }
}

fn target(row: &Row) -> (String, String) {
    match &row.target {
        Some(t) => (
            t.goal.clone(),
            if t.met { "met" } else { "**missed**" }.to_owned(),
        ),
        None => ("-".to_owned(), "-".to_owned()),
    }
}

fn floor_name(timing: &Timing, key: Option<&str>) -> String {
    let Some(key) = key else {
        return "-".to_owned();
    };
    match key {
        "fsync" => "fsync",
        "ed25519" => "Ed25519 verify",
        "pipe" => "pipe round trip",
        "postgres_commit" => "PostgreSQL commit",
        "spawn" => "process spawn",
        "http_fixture" => "fixture over HTTP",
        _ => key,
    }
    .to_owned()
        + timing
            .floors
            .iter()
            .find(|f| f.key == key)
            .map(|f| format!(" ({})", human(f.summary.p50_ns)))
            .unwrap_or_default()
            .as_str()
}

fn timing_tables(out: &mut String, timing: &Timing) {
    out.push_str("Floors, measured in this run:\n\n");
    out.push_str("| Floor | n | p50 | p95 | p99 |\n| --- | --- | --- | --- | --- |\n");
    for f in &timing.floors {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            cell(&f.name),
            f.summary.n,
            human(f.summary.p50_ns),
            human(f.summary.p95_ns),
            human(f.summary.p99_ns)
        );
    }
    out.push_str("\nCosts, each beside its floor (ratio = p50 / floor p50):\n\n");
    out.push_str("| Cost | n | p50 | p95 | p99 | Floor | x floor | Target | Met |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for r in &timing.rows {
        let (goal, met) = target(r);
        let mut name = cell(&r.name);
        if let Some(note) = &r.note {
            let _ = write!(name, " — {}", cell(note));
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            name,
            r.summary.n,
            human(r.summary.p50_ns),
            human(r.summary.p95_ns),
            human(r.summary.p99_ns),
            floor_name(timing, r.floor.as_deref()),
            ratio(r),
            cell(&goal),
            met
        );
    }
    for why in &timing.left_out {
        let _ = writeln!(out, "\n{}.", cell(why));
    }
}

fn throughput_table(out: &mut String, t: &Throughput) {
    out.push_str("| Processes | Decisions | Seconds | Decisions/s | Allowed | over_window_cap | Other | Window fits | Overspend | Latency p50 / p95 / p99 | Target | Met |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    let _ = writeln!(
        out,
        "| {} | {} | {:.2} | {:.0} | {} | {} | {} | {} | {} ({} over the cap) | {} / {} / {} | {} | {} |",
        t.processes,
        t.decisions,
        t.seconds,
        t.decisions_per_second,
        t.allowed,
        t.over_window_cap,
        t.other,
        t.fit,
        t.overspend,
        cajaguard_harness::money("USD", t.overspend_minor),
        human(t.latency.p50_ns),
        human(t.latency.p95_ns),
        human(t.latency.p99_ns),
        t.target,
        if t.met { "met" } else { "**missed**" }
    );
}

fn service_load_row(out: &mut String, l: &Load, floor: &str) {
    let _ = writeln!(
        out,
        "| {} | {} | {:.2} | {:.0} | {:.2} ms | {} | {} | {} | {} / {} | {} / {} / {} | {} |",
        l.processes,
        l.decisions,
        l.seconds,
        l.decisions_per_second,
        l.cpu_ms_per_decision,
        l.allowed,
        l.over_window_cap,
        l.other,
        cajaguard_harness::money("USD", l.overspend_minor),
        cajaguard_harness::money("USD", l.agent_overspend_minor),
        human(l.latency.p50_ns),
        human(l.latency.p95_ns),
        human(l.latency.p99_ns),
        floor
    );
}

fn service_throughput_table(out: &mut String, t: &ServiceThroughput) {
    out.push_str("| Processes | Decisions | Seconds | Decisions/s | Machine CPU / decision | Allowed | over_window_cap | Other | Overspend global / worst agent | Latency p50 / p95 / p99 | Role |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    service_load_row(out, &t.two, "the figure (median round)");
    service_load_row(
        out,
        &t.one,
        "floor: the same load on one process (median round)",
    );
    let rates = |rates: &[f64]| {
        rates
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        out,
        "\n{} rounds, each a load on one process then on two, on fresh stores; decisions/s in every round, in order: 2 processes {}; 1 process {}. Machine CPU / decision: the whole machine's busy CPU over the load (the agents, the services, their shops and PostgreSQL, from /proc/stat) over its decisions, steadier than the rate on a shared VM. Overspend over every round: USD {} global, USD {} worst agent.",
        t.rounds,
        rates(&t.two_rounds),
        rates(&t.one_rounds),
        cajaguard_harness::money("USD", t.worst_overspend_minor).trim_start_matches("USD "),
        cajaguard_harness::money("USD", t.worst_agent_overspend_minor).trim_start_matches("USD "),
    );
    let commit_rate = if t.pg_commit.p50_ns > 0.0 {
        1e9 / t.pg_commit.p50_ns
    } else {
        0.0
    };
    let _ = writeln!(
        out,
        "\nFloor: one PostgreSQL commit round trip (`INSERT`, autocommit, same server), n = {}: p50 {} / p95 {} / p99 {}, i.e. {:.0} commits/s one after another. Two processes give {:.2}x one process's decisions/s and {:.2}x the serial commit rate. Target {}: **{}**.",
        t.pg_commit.n,
        human(t.pg_commit.p50_ns),
        human(t.pg_commit.p95_ns),
        human(t.pg_commit.p99_ns),
        commit_rate,
        t.ratio_to_one,
        if commit_rate > 0.0 {
            t.two.decisions_per_second / commit_rate
        } else {
            0.0
        },
        t.target,
        if t.met { "met" } else { "missed" }
    );
}

/// Why each missed target is missed, from this run's own numbers.
fn misses(out: &mut String, run: &Run) {
    let Ok(timing) = &run.timing else {
        return;
    };
    let fsync = timing
        .floors
        .iter()
        .find(|f| f.key == "fsync")
        .map_or(0.0, |f| f.summary.p50_ns);
    let pipe = timing
        .floors
        .iter()
        .find(|f| f.key == "pipe")
        .map_or(0.0, |f| f.summary.p50_ns);
    let mut lines = Vec::new();
    for row in &timing.rows {
        let Some(target) = &row.target else { continue };
        if target.met {
            continue;
        }
        let why = match row.key.as_str() {
            "gate_allow_durable" => format!(
                "the allow path commits two SQLite WAL transactions: the checkout's claim (SPEC §4 step 3a, not synced) and the gate's, whose WAL is then synced (fdatasync) before the payment may go out; on this disk one fsync is {} (p50), and the two commits plus that sync cost {:.2}x it. The decision itself is microseconds (see decide()); what is left is the WAL appends and page writes of the commits, and the sync of a larger file than the floor's one byte.",
                human(fsync),
                row.ratio_to_floor.unwrap_or(0.0)
            ),
            "cold_start" => "cold start includes starting the fixture shop, which appends and fsyncs `sessions.jsonl` under its lock on every initialize, and opening the store; on this disk each fsync is ".to_owned() + &human(fsync) + ".",
            "service_added" => {
                let p50 = |key: &str| timing.row(key).map_or(0.0, |r| r.summary.p50_ns);
                let floor = timing
                    .floors
                    .iter()
                    .find(|f| f.key == "http_fixture")
                    .map_or(0.0, |f| f.summary.p50_ns);
                format!(
                    "measured {} p50 against {} (straight to the fixture: {}; see \"How the service's added latency is measured\" above). The breakdown rows of this run place it: a request the service refuses before the store (no token, 401) takes {} p50, one HTTP exchange with the service, which a forwarded call pays on top of the fixture's own; tools/list, answered by the service without the shop, takes {}, {} more than the 401, most of it its 15 KB answer built, sent and parsed. A forwarded call adds to the exchange the proxy's checks (the envelope and params parsed, duplicate keys, the tripwire) and two wake-ups the straight call does not have (the service when the fixture answers, the agent when the service does), each after the vCPUs have halted for the length of a shop call. Less would take fewer processes on the path or busy-polling, which costs a core.",
                    human(row.summary.p50_ns),
                    target.goal,
                    human(floor),
                    human(p50("service_401")),
                    human(p50("service_tools_list")),
                    human((p50("service_tools_list") - p50("service_401")).max(0.0)),
                )
            }
            "proxy_added" => format!(
                "a plain forwarded call already takes the relay's fast path (written to the shop from the agent's reader thread, answered from the shop's reader thread, no thread started), so the proxy adds two thread wake-ups: exactly one pipe round trip, whose floor in this run is {} ({:.2}x it measured). On this VM a wake-up from idle costs tens of microseconds (a quick run under load measured the same floor near 5 µs and the added latency near 18 µs). Below one pipe round trip a relay cannot go; closer to it would take busy-polling the pipes, which costs a core.",
                human(pipe),
                row.ratio_to_floor.unwrap_or(0.0)
            ),
            key if key.starts_with("postgres_gate_") => {
                let floor = timing
                    .floors
                    .iter()
                    .find(|f| f.key == "postgres_commit")
                    .map_or(0.0, |f| f.summary.p50_ns);
                format!(
                    "the floor is three round trips to the server (BEGIN, one UPDATE, COMMIT with its WAL flush of about 115 bytes), {} (p50); the gate's allow path is two round trips of pipelined statements (BEGIN, the currency's and the checkout's advisory locks in one statement, every read in one more; then the reservation, the bucket, the audit record's append (the log's head taken and its hashes computed in the database), COMMIT and the statement that waits for the WAL flush, about 1.1 KB): 9 statements (10 with an agent's bucket) where the floor has 3. What it costs above the floor, {}, does not grow with the ledger (the 10^3 to 10^6 ratio is beside it). Where it goes (2026-12-04, docs/ARCHITECTURE.md, \"Where a gate's time goes\"): the floor is almost all its flush (a `SELECT 1` round trip costs 11-18 µs while both sides are awake); in the gate, the first round is answered at about 0.17 ms (the reads' executor time 0.05 ms), the append at 0.21-0.24 ms, and the flush, the largest part, at 0.58-0.62 ms: the same one WAL page as the floor's, but `fdatasync` took 284-291 µs on the gates' connections against 193 µs on the floor's. Locking the rows it will write up front, dropped that day from the lone gate (its writes are in lock order by themselves), had cost 0.15-0.2 ms. Tried and not kept, within noise: the first round as one PL/pgSQL call, the flush's statement prepared or sent with COMMIT as one query, a synchronous COMMIT instead of it. Within 2x would take a gate of one round trip, the decision made inside the database, which the pure core's place in the design rules out.",
                    human(floor),
                    human((row.summary.p50_ns - floor).max(0.0)),
                )
            }
            _ => format!("measured {} p50 against {}.", human(row.summary.p50_ns), target.goal),
        };
        lines.push(format!("- **{}**: {why}", row.name));
    }
    if let Ok(t) = &run.throughput
        && !t.met
    {
        lines.push(format!(
            "- **throughput**: {:.0} decisions/s with {} overspend. Each allowed payment needs one WAL sync before it is forwarded (refusals and settlements need none), taken outside the home's write lock so the 8 processes sync side by side; at {} per fsync on this disk and one MCP round trip to the shop per payment on 2 shared cores, the run is bound by those syncs and the processes' CPU (p95 latency {}). To reach it: batch the reservations of several agents into one commit (a single writer per home, e.g. a small daemon the proxies talk to), or a disk whose fsync is well under 0.1 ms.",
            t.decisions_per_second,
            t.overspend,
            human(fsync),
            human(t.latency.p95_ns),
        ));
    }
    if let Ok(Some(t)) = &run.service_throughput
        && !t.met
    {
        lines.push(format!(
            "- **service throughput**: {:.0} gated decisions/s on 2 processes ({:.0} on one; median rounds), overspend USD {} global, USD {} worst agent over every round. The run is bound by CPU: the 16 agents, the services, their shops and PostgreSQL share 2 cores ({:.2} ms of the machine's CPU per decision on 2 processes, {:.2} on one, in the median rounds; PostgreSQL about half of it, perf), and the rate follows the VM's speed from round to round (the same binary gave 650 to 1,130 decisions/s in interleaved A/B runs on 2026-12-05). One currency's gates take turns by design (its lock, across hosts); within a process they are batched, several to a transaction (docs/ARCHITECTURE.md, Gate batching). Taken off every payment so far: pipelined statements, claims and settlements in one round trip each, batching, claims, refusals and settlements committing without waiting for their flush ({} p50 for one flushed commit here), and no bucket write for a completion as reserved (settlements had queued behind gate turns for the hour's bucket: 2.8 s of the 8.3 s PostgreSQL spent in statements in a logged run, 4.1 s in all after). Tried and not kept, within noise: the gate's first round trip as one PL/pgSQL call; a turn's flush waited for after the next turn starts; a turn that waits for the currency's lock before it closes, so that the gates queued meanwhile join (turns 30% larger on 2 processes, one more round trip each, CPU per decision unchanged). PostgreSQL on cores of its own is the next measurement to make.",
            t.two.decisions_per_second,
            t.one.decisions_per_second,
            cajaguard_harness::money("USD", t.worst_overspend_minor).trim_start_matches("USD "),
            cajaguard_harness::money("USD", t.worst_agent_overspend_minor).trim_start_matches("USD "),
            t.two.cpu_ms_per_decision,
            t.one.cpu_ms_per_decision,
            human(t.pg_commit.p50_ns),
        ));
    }
    if lines.is_empty() {
        return;
    }
    out.push_str("\n### Missed targets\n\n");
    for line in lines {
        out.push_str(&line);
        out.push('\n');
    }
}

/// What the service's added latency is measured against, with both straight calls of this run.
fn service_latency_note(out: &mut String, timing: &Timing) {
    let p50 = |key: &str| timing.row(key).map(|r| r.summary.p50_ns);
    let floor = timing
        .floors
        .iter()
        .find(|f| f.key == "http_fixture")
        .map(|f| f.summary.p50_ns);
    let (Some(floor), Some(through), Some(kept)) = (
        floor,
        p50("rtt_service_fixture"),
        p50("service_direct_kept"),
    ) else {
        return;
    };
    let _ = writeln!(
        out,
        "\n### How the service's added latency is measured\n\nThe agent's client is the same on both paths and does what the MCP SDKs' clients do: once an event stream has carried the answer, it closes the stream. The fixture answers with event streams, so each call straight to it opens a new connection ({} p50). The service answers with JSON, so the agent keeps its connection to it; and the service's own client reads each of the fixture's streams to its end after passing the answer on (on a thread of its own), so it keeps its connection to the fixture too. Through the service: {} p50, {} more than the straight call the agent would otherwise make (the target row). Against a straight client that also reads each stream to its end and so keeps its connection ({} p50), the service adds {}: one more HTTP exchange and process on the path.",
        human(floor),
        human(through),
        human(through - floor),
        human(kept),
        human(through - kept),
    );
}

pub fn markdown(run: &Run) -> String {
    let mut out = String::new();
    out.push_str("# CajaGuard report\n\n");
    let _ = writeln!(
        out,
        "Produced by `cargo xtask report{}` ({} mode, {} build) on {}. Machine: {}. Homes, shop state and floor files live under `{}` on the same disk. The run took {:.0} s (scenarios {:.0} s, timing {:.0} s, throughput {:.0} s, service throughput {:.0} s).\n",
        if run.mode == "quick" { " --quick" } else { "" },
        run.mode,
        run.profile,
        now_utc(),
        machine(),
        run.scratch_dir
            .strip_prefix(crate::workspace_root())
            .unwrap_or(&run.scratch_dir)
            .display(),
        run.seconds.total,
        run.seconds.scenarios,
        run.seconds.timing,
        run.seconds.throughput,
        run.seconds.service_throughput,
    );
    if run.mode == "quick" {
        let _ = writeln!(
            out,
            "**Quick mode**: small n and {} (not 10^6) seeded ledger rows; numbers are indicative only. The committed report is the full mode's.\n",
            run.sizes.big_ledger_rows
        );
    }

    out.push_str("## Scenarios\n\nSPEC §10, each flow from a fresh home with keys made by `cajaguard keygen`, the real store, `cajaguard mcp` as a child process and the fixture shop. \"Reached shop\" is the fixture's own record (`<state>/calls.jsonl`). The totals are the shop's.\n\n");
    spec_table(&mut out, &run.scenarios);
    out.push_str("\nThe project's own. The lost-answer and kill scenarios use the scriptable test shop (`crates/cajaguard-test-shop`, `hang` then an answer), whose record is every line it received; spend is read with `cajaguard status --json`.\n\n");
    project_table(&mut out, &run.scenarios);

    out.push_str("\n## Timing\n\n");
    let _ = writeln!(
        out,
        "In-process rows call `cajaguard_core` (`gate::decide`, `tripwire::scan`, `approval::verify`) and `cajaguard::store::Store::gate` directly; end-to-end rows drive the binaries over stdio pipes. Each row times single calls (after n/10 warm-up calls) and reports nearest-rank percentiles. The large ledger has {} rows.\n",
        run.sizes.big_ledger_rows
    );
    match &run.timing {
        Ok(timing) => {
            timing_tables(&mut out, timing);
            service_latency_note(&mut out, timing);
        }
        Err(e) => {
            let _ = writeln!(out, "**Timing failed**: {}", cell(&format!("{e:#}")));
        }
    }

    out.push_str("\n## Throughput\n\n");
    out.push_str("8 `cajaguard mcp` processes on one home, one agent each, paying USD 24.00 checkouts back to back against a window that fits half of them (test shop answering from memory, so the gate and its store are what is measured).\n\n");
    match &run.throughput {
        Ok(t) => throughput_table(&mut out, t),
        Err(e) => {
            let _ = writeln!(
                out,
                "**Throughput run failed**: {}",
                cell(&format!("{e:#}"))
            );
        }
    }

    out.push_str("\n## Service throughput\n\n");
    let _ = writeln!(
        out,
        "16 agents (their own tokens, `agent_caps` on top of the global caps) on 2 `cajaguard serve` processes with their own configs and homes sharing one PostgreSQL store, each agent on one MCP Streamable HTTP session paying USD 24.00 checkouts back to back against a global window that fits half of all payments and agent windows that fit three quarters of each agent's. Each process's shop is the test shop answering from memory. Overspend is read from the store (globally, and the worst agent against its own window).\n"
    );
    match &run.service_throughput {
        Ok(Some(t)) => service_throughput_table(&mut out, t),
        Ok(None) => {
            let _ = writeln!(
                out,
                "**Not run**: {} is not set (CI sets it; see .ci/run).",
                cajaguard_harness::pg::ENV
            );
        }
        Err(e) => {
            let _ = writeln!(
                out,
                "**Service throughput run failed**: {}",
                cell(&format!("{e:#}"))
            );
        }
    }
    misses(&mut out, run);
    let _ = writeln!(out, "\n{}", run.closing_line());
    out
}

fn now_utc() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| now.unix_timestamp().to_string())
}

pub fn json(run: &Run) -> Result<String> {
    let error = |e: &anyhow::Error| json!({ "error": format!("{e:#}") });
    let document = json!({
        "generated_at": now_utc(),
        "mode": run.mode,
        "profile": run.profile,
        "machine": machine(),
        "sizes": run.sizes,
        "seconds": {
            "scenarios": run.seconds.scenarios,
            "timing": run.seconds.timing,
            "throughput": run.seconds.throughput,
            "service_throughput": run.seconds.service_throughput,
            "total": run.seconds.total,
        },
        "scenarios": run.scenarios,
        "timing": match &run.timing {
            Ok(t) => serde_json::to_value(t)?,
            Err(e) => error(e),
        },
        "throughput": match &run.throughput {
            Ok(t) => serde_json::to_value(t)?,
            Err(e) => error(e),
        },
        "service_throughput": match &run.service_throughput {
            Ok(Some(t)) => serde_json::to_value(t)?,
            Ok(None) => json!({ "not_run": format!("{} is not set", cajaguard_harness::pg::ENV) }),
            Err(e) => error(e),
        },
        "scenarios_as_expected": { "passed": run.scenarios.passed(), "total": run.scenarios.total() },
    });
    let mut text = serde_json::to_string_pretty(&document)?;
    text.push('\n');
    Ok(text)
}

/// README.md with the block between the markers replaced by a short summary.
pub fn readme_block(readme: &str, run: &Run) -> Result<String> {
    let (Some(start), Some(end)) = (readme.find(START), readme.find(END)) else {
        bail!("README.md has no {START} ... {END} block");
    };
    if end < start {
        bail!("README.md's report markers are out of order");
    }
    let mut block = String::new();
    let _ = writeln!(
        block,
        "{START}\nFrom `cargo xtask report` ({} mode, {}); the full report with every timing row is [reports/cajaguard.md](reports/cajaguard.md).\n",
        run.mode,
        now_utc().get(..10).unwrap_or("")
    );
    spec_table(&mut block, &run.scenarios);
    block.push('\n');
    project_table(&mut block, &run.scenarios);
    if let Ok(timing) = &run.timing {
        block.push_str("\n| Cost | p50 | x floor | Target |\n| --- | --- | --- | --- |\n");
        for key in [
            "decide_allow",
            "decide_approval_rejected",
            "tripwire_deny",
            "tripwire_clean",
            "gate_allow_durable",
            "window_1000",
            &format!("window_{}", run.sizes.big_ledger_rows),
            "postgres_gate_1000",
            &format!("postgres_gate_{}", run.sizes.big_ledger_rows),
            "proxy_added",
            "service_added",
            "cold_start",
        ] {
            if let Some(row) = timing.row(key) {
                let (goal, met) = target(row);
                let _ = writeln!(
                    block,
                    "| {} | {} | {} ({}) | {} |",
                    cell(&row.name),
                    human(row.summary.p50_ns),
                    ratio(row),
                    floor_name(timing, row.floor.as_deref()),
                    if goal == "-" {
                        "-".to_owned()
                    } else {
                        format!("{goal}: {met}")
                    }
                );
            }
        }
    }
    if let Ok(t) = &run.throughput {
        let _ = writeln!(
            block,
            "\nThroughput: {:.0} decisions/s across {} processes on one home, overspend {} ({}: {}).",
            t.decisions_per_second,
            t.processes,
            t.overspend,
            t.target,
            if t.met { "met" } else { "missed" }
        );
    }
    if let Ok(Some(t)) = &run.service_throughput {
        let _ = writeln!(
            block,
            "\nService: {:.0} gated decisions/s, 16 agents on 2 `cajaguard serve` processes and one PostgreSQL ({:.0} on one process; median of {} rounds), overspend USD {} in every round ({}: {}).",
            t.two.decisions_per_second,
            t.one.decisions_per_second,
            t.rounds,
            cajaguard_harness::money("USD", t.worst_overspend_minor).trim_start_matches("USD "),
            t.target,
            if t.met { "met" } else { "missed" }
        );
    }
    let _ = write!(block, "\n{}\n", run.closing_line());
    let mut text = String::with_capacity(readme.len() + block.len());
    text.push_str(&readme[..start]);
    text.push_str(&block);
    text.push_str(&readme[end..]);
    Ok(text)
}

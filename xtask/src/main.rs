//! `cargo xtask report [--quick] [--out DIR]`: builds the binaries (same profile as this xtask:
//! release through the `cargo xtask` alias), runs every scenario of SPEC §10 and the project's own
//! end to end, measures every cost beside its physical floor, a bounded 8-process throughput run
//! and a bounded run of 16 agents on 2 `cajaguard serve` processes sharing PostgreSQL, then writes `cajaguard.md` and `cajaguard.json` and prints the markdown. The last line is
//! `Scenarios as expected: N/N`; the exit code is 1 if any scenario is off (or a measurement failed).
//!
//! Full mode writes `reports/` and refreshes the block between `<!-- report:start -->` and
//! `<!-- report:end -->` in README.md. `--quick` (small n, 10^5 instead of 10^6 ledger rows) writes
//! `target/report/` unless `--out` says otherwise, so it never overwrites the committed report.

mod basket;
mod passkey;
mod render;
mod scenarios;
mod stats;
mod throughput;
mod throughput_service;
mod timing;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: cargo xtask report [--quick] [--out DIR]
       cargo xtask service-throughput [--quick]
       cargo xtask pg-gate [--quick]
       cargo xtask service-latency [--quick]
       cargo xtask throughput [--quick]

  report        run every scenario and timing; write cajaguard.md and cajaguard.json
  service-throughput
                only the report's service throughput section, printed with the machine's CPU
                use over each run (for working on it; writes nothing)
  pg-gate       only the report's PostgreSQL Store::gate rows and their commit floor, printed
                (for working on them; writes nothing)
  service-latency
                only the report's service latency rows (a forwarded call through `serve`
                beside the same call straight to the fixture), printed (writes nothing)
  throughput    only the report's 8-process throughput run on one home, printed with the
                machine's CPU use (writes nothing)
  --quick       small n and 10^5 (not 10^6) ledger rows; writes target/report/ by default
  --out DIR     where to write the report (full mode default: reports/, which also refreshes README.md)";

struct Args {
    task: Task,
    quick: bool,
    out: Option<PathBuf>,
}

#[derive(PartialEq)]
enum Task {
    Report,
    ServiceThroughput,
    PgGate,
    ServiceLatency,
    Throughput,
}

fn parse_args() -> Result<Args> {
    let mut args = std::env::args().skip(1);
    let task = match args.next().as_deref() {
        Some("report") => Task::Report,
        Some("service-throughput") => Task::ServiceThroughput,
        Some("pg-gate") => Task::PgGate,
        Some("service-latency") => Task::ServiceLatency,
        Some("throughput") => Task::Throughput,
        Some("-h" | "--help") | None => bail!("{USAGE}"),
        Some(other) => bail!("unknown task {other:?}\n{USAGE}"),
    };
    let mut parsed = Args {
        task,
        quick: false,
        out: None,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => parsed.quick = true,
            "--out" => match args.next() {
                Some(dir) => parsed.out = Some(PathBuf::from(dir)),
                None => bail!("--out needs a directory\n{USAGE}"),
            },
            "-h" | "--help" => bail!("{USAGE}"),
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let outcome = match args.task {
        Task::Report => report(&args),
        Task::ServiceThroughput => service_throughput(&args),
        Task::PgGate => pg_gate(&args),
        Task::ServiceLatency => service_latency(&args),
        Task::Throughput => throughput_only(&args),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("xtask report: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// `cargo xtask service-throughput`: the report's service section alone, with the CPU the whole
/// machine used meanwhile (from /proc/stat), to tell a CPU-bound run from one that waits.
fn service_throughput(args: &Args) -> Result<bool> {
    let root = workspace_root();
    build_binaries(&root)?;
    let scratch = scratch(&root, "service-throughput-")?;
    let sizes = sizes(args);
    let busy_before = throughput::cpu_busy_fraction_since(None);
    let result = throughput_service::run(
        scratch.path(),
        sizes.service_payments_per_agent,
        sizes.service_rounds,
        &|p| eprintln!("{p}"),
    )?;
    let busy = throughput::cpu_busy_fraction_since(busy_before.1);
    let Some(t) = result else {
        bail!("{} is not set", cajaguard_harness::pg::ENV);
    };
    for load in [&t.one, &t.two] {
        println!(
            "{} process(es): {:.0} decisions/s, {} allowed, {} over_window_cap, {} other, overspend {} / agent {}, latency p50 {:.2} ms, machine CPU {:.2} ms a decision",
            load.processes,
            load.decisions_per_second,
            load.allowed,
            load.over_window_cap,
            load.other,
            load.overspend_minor,
            load.agent_overspend_minor,
            load.latency.p50_ns / 1e6,
            load.cpu_ms_per_decision
        );
    }
    println!(
        "every round's decisions/s: 2 processes {:.0?}, 1 process {:.0?}",
        t.two_rounds, t.one_rounds
    );
    println!(
        "PostgreSQL commit floor p50 {:.1} µs; machine CPU busy over both runs: {:.0}%",
        t.pg_commit.p50_ns / 1e3,
        busy.0 * 100.0
    );
    Ok(t.met)
}

/// `cargo xtask pg-gate`: the PostgreSQL gate rows alone, each beside the commit floor.
fn pg_gate(args: &Args) -> Result<bool> {
    let root = workspace_root();
    let scratch = scratch(&root, "pg-gate-")?;
    let t = timing::postgres_only(scratch.path(), sizes(args), &|p| eprintln!("{p}"))?;
    Ok(print_rows(&t))
}

/// `cargo xtask service-latency`: the service latency rows alone, beside the straight call.
fn service_latency(args: &Args) -> Result<bool> {
    let root = workspace_root();
    build_binaries(&root)?;
    let scratch = scratch(&root, "service-latency-")?;
    let t = timing::service_only(scratch.path(), sizes(args))?;
    Ok(print_rows(&t))
}

/// `cargo xtask throughput`: the report's 8-process throughput run alone.
fn throughput_only(args: &Args) -> Result<bool> {
    let root = workspace_root();
    build_binaries(&root)?;
    let scratch = scratch(&root, "throughput-")?;
    let busy_before = throughput::cpu_busy_fraction_since(None);
    let t = throughput::run(scratch.path(), per_process(args), &|p| eprintln!("{p}"))?;
    let busy = throughput::cpu_busy_fraction_since(busy_before.1);
    println!(
        "{} processes: {:.0} decisions/s, {} allowed, {} over_window_cap, {} other, overspend {}, latency p50 {:.2} ms; machine CPU busy {:.0}%",
        t.processes,
        t.decisions_per_second,
        t.allowed,
        t.over_window_cap,
        t.other,
        t.overspend_minor,
        t.latency.p50_ns / 1e6,
        busy.0 * 100.0
    );
    Ok(t.met)
}

/// Payments per process in the 8-process throughput run.
fn per_process(args: &Args) -> usize {
    if args.quick { 25 } else { 150 }
}

/// A folder under `target/` for one task's homes and state, removed when dropped.
fn scratch(root: &Path, prefix: &str) -> Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(root.join("target"))?)
}

fn sizes(args: &Args) -> timing::Sizes {
    if args.quick {
        timing::Sizes::quick()
    } else {
        timing::Sizes::full()
    }
}

/// Prints each floor and row with its target; `true` when every target was met.
fn print_rows(t: &timing::Timing) -> bool {
    let mut met = true;
    for row in t.floors.iter().chain(&t.rows) {
        let target = row.target.as_ref();
        met &= target.is_none_or(|t| t.met);
        println!(
            "{}: p50 {:.1} µs, p95 {:.1} µs{}",
            row.name,
            row.summary.p50_ns / 1e3,
            row.summary.p95_ns / 1e3,
            target.map_or(String::new(), |t| format!(
                "; {}: {}",
                t.goal,
                if t.met { "met" } else { "missed" }
            ))
        );
    }
    met
}

fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Builds the binaries the report drives, with this xtask's own profile, and finds them beside it.
fn build_binaries(root: &Path) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(root).args([
        "build",
        "--locked",
        "--bins",
        "-p",
        "cajaguard",
        "-p",
        "cajaguard-fixture-shop",
        "-p",
        "cajaguard-test-shop",
    ]);
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    let status = command.status().context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build of the binaries failed");
    }
    // The harness finds them beside this executable.
    let bins = cajaguard_harness::Bins::here();
    for bin in [&bins.cajaguard, &bins.fixture, &bins.test_shop] {
        if !bin.is_file() {
            bail!("{} is missing after the build", bin.display());
        }
    }
    Ok(())
}

fn report(args: &Args) -> Result<bool> {
    let root = workspace_root();
    let started = Instant::now();
    let progress = |msg: &str| eprintln!("[{:>6.1} s] {msg}", started.elapsed().as_secs_f64());
    let mode = if args.quick { "quick" } else { "full" };
    // A stuck child must not hang CI forever.
    let limit = Duration::from_secs(if args.quick { 10 * 60 } else { 40 * 60 });
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!(
            "xtask report: still running after {} s, giving up",
            limit.as_secs()
        );
        std::process::exit(1);
    });

    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    progress(&format!("building the binaries ({profile})"));
    build_binaries(&root)?;
    let scratch_parent = root.join("target").join("report");
    std::fs::create_dir_all(&scratch_parent)?;
    let scratch = tempfile::Builder::new()
        .prefix("scratch-")
        .tempdir_in(&scratch_parent)?;

    let phase = Instant::now();
    let scenarios = scenarios::run(scratch.path(), &progress);
    let scenarios_seconds = phase.elapsed().as_secs_f64();
    progress(&format!(
        "scenarios: {}/{} as expected",
        scenarios.passed(),
        scenarios.total()
    ));

    let phase = Instant::now();
    let sizes = if args.quick {
        timing::Sizes::quick()
    } else {
        timing::Sizes::full()
    };
    let timing = timing::run(scratch.path(), sizes, &progress);
    let timing_seconds = phase.elapsed().as_secs_f64();

    let phase = Instant::now();
    let throughput = throughput::run(scratch.path(), per_process(args), &progress);
    let throughput_seconds = phase.elapsed().as_secs_f64();

    let phase = Instant::now();
    let service_throughput = throughput_service::run(
        scratch.path(),
        sizes.service_payments_per_agent,
        sizes.service_rounds,
        &progress,
    );
    let service_throughput_seconds = phase.elapsed().as_secs_f64();

    let run = render::Run {
        mode,
        profile,
        sizes,
        scenarios,
        timing,
        throughput,
        service_throughput,
        scratch_dir: scratch_parent.clone(),
        seconds: render::Seconds {
            scenarios: scenarios_seconds,
            timing: timing_seconds,
            throughput: throughput_seconds,
            service_throughput: service_throughput_seconds,
            total: started.elapsed().as_secs_f64(),
        },
    };
    let markdown = render::markdown(&run);
    let json = render::json(&run)?;

    let out = match &args.out {
        Some(dir) => dir.clone(),
        None if args.quick => root.join("target").join("report"),
        None => root.join("reports"),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    std::fs::write(out.join("cajaguard.md"), &markdown)?;
    std::fs::write(out.join("cajaguard.json"), json)?;
    progress(&format!("wrote {}", out.join("cajaguard.md").display()));
    let reports = root.join("reports");
    if std::fs::canonicalize(&out).ok() == std::fs::canonicalize(&reports).ok() {
        let readme = root.join("README.md");
        let text = std::fs::read_to_string(&readme)?;
        let refreshed = render::readme_block(&text, &run)?;
        std::fs::write(&readme, refreshed)?;
        progress("refreshed the report block in README.md");
    }
    drop(scratch);
    print!("{markdown}");
    Ok(run.all_good())
}

//! Every cost beside its physical floor, measured in the same run: the pure decision
//! (`cajaguard_core` called directly), the durable gate (`Store::gate` on a real home on the
//! report's disk, at 10^3 and 10^6 ledger rows), the shared store's gate (`Store::gate` on
//! PostgreSQL, at 10^3 and 10^6 ledger rows), MCP round trips with and without the proxy, cold
//! start; and the floors: one fsync on the home's disk, one PostgreSQL commit round trip, one
//! Ed25519 verify, one pipe round trip, one process spawn.

mod audit;
mod core;
mod floors;
mod mcp;
mod postgres;
mod service;
mod store;

use std::path::Path;

use anyhow::Result;
use cajaguard_harness::Bins;
use serde::Serialize;

use crate::stats::{Summary, time_n};

/// How many samples each row takes, and how big the large ledger is.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sizes {
    pub cpu: usize,
    pub crypto: usize,
    pub disk: usize,
    pub round_trip: usize,
    pub fixture_round_trip: usize,
    /// Forwarded calls through `cajaguard serve` and straight to the fixture over HTTP, each.
    pub service_round_trip: usize,
    /// Payments per agent in the service throughput run (16 agents).
    pub service_payments_per_agent: usize,
    /// Rounds of the service throughput run (each a 1-process and a 2-process load, interleaved):
    /// one load lasts about a second, so one alone is mostly this VM's noise.
    pub service_rounds: usize,
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
            service_round_trip: 2_000,
            service_payments_per_agent: 60,
            service_rounds: 5,
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
            service_round_trip: 400,
            service_payments_per_agent: 20,
            service_rounds: 1,
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

impl Row {
    /// The target "p50 <= `limit_ns`", in words `goal`.
    fn p50_at_most(&mut self, goal: &str, limit_ns: f64) {
        self.target = Some(Target {
            goal: goal.into(),
            met: self.summary.p50_ns <= limit_ns,
        });
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    pub floors: Vec<Row>,
    pub rows: Vec<Row>,
    /// Rows this run left out, and why.
    pub left_out: Vec<String>,
}

impl Timing {
    pub(super) fn floor(&self, key: &str) -> Option<&Row> {
        self.floors.iter().find(|r| r.key == key)
    }

    pub fn row(&self, key: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.key == key)
    }

    /// Adds a cost row, with its ratio to its floor.
    /// Times `f` `n` times (see [`time_n`]) and adds the row; `f` failing fails the row.
    pub(super) fn timed<T>(
        &mut self,
        key: &str,
        name: &str,
        floor: &str,
        n: usize,
        f: impl FnMut() -> Result<T>,
    ) -> Result<&mut Row> {
        let samples = time_n(n, f)?;
        Ok(self.push(key, name, Summary::of(&samples), floor))
    }

    pub(super) fn push(
        &mut self,
        key: &str,
        name: &str,
        summary: Summary,
        floor: &str,
    ) -> &mut Row {
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

pub(super) fn floor_row(key: &str, name: &str, summary: Summary) -> Row {
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

/// No rows yet, and a folder for the homes the rows make.
fn start(scratch: &Path) -> Result<(Timing, tempfile::TempDir)> {
    let t = Timing {
        floors: Vec::new(),
        rows: Vec::new(),
        left_out: Vec::new(),
    };
    let homes = tempfile::Builder::new()
        .prefix("timing-")
        .tempdir_in(scratch)?;
    Ok((t, homes))
}

/// The PostgreSQL rows alone, with their floor (`cargo xtask pg-gate`, for working on them).
pub fn postgres_only(scratch: &Path, sizes: Sizes, progress: &dyn Fn(&str)) -> Result<Timing> {
    let (mut t, homes) = start(scratch)?;
    if let Some(left_out) = postgres::postgres_rows(&mut t, homes.path(), sizes, progress)? {
        anyhow::bail!("{left_out}");
    }
    Ok(t)
}

/// The service's latency rows alone (`cargo xtask service-latency`).
pub fn service_only(scratch: &Path, sizes: Sizes) -> Result<Timing> {
    let (mut t, homes) = start(scratch)?;
    service::service_rows(&mut t, homes.path(), sizes)?;
    Ok(t)
}

pub fn run(scratch: &Path, sizes: Sizes, progress: &dyn Fn(&str)) -> Result<Timing> {
    let setup = crate::scenarios::setup(scratch);
    let (mut t, homes) = start(scratch)?;

    progress("floors: Ed25519 verify, pipe round trip, process spawn");
    t.floors.push(floor_row(
        "ed25519",
        "Ed25519 verify (one signature, ~300 B message)",
        Summary::of(&floors::ed25519_floor(sizes.crypto)?),
    ));
    t.floors.push(floor_row(
        "pipe",
        "pipe round trip: one line to a thread and back over OS pipes",
        Summary::of(&floors::pipe_floor(sizes.round_trip * 4)?),
    ));
    t.floors.push(floor_row(
        "spawn",
        "process spawn: `cajaguard --version`, spawn to exit",
        Summary::of(&floors::spawn_floor(
            &Bins::here().cajaguard,
            sizes.process,
        )?),
    ));

    progress("decide(), tripwire, approval verify (in process)");
    core::core_rows(&mut t, sizes)?;

    progress("seeding the ledgers; fsync floor and Store::gate, interleaved");
    crate::scenarios::caught(|| store::store_rows(&mut t, homes.path(), sizes, progress))?;

    progress("PostgreSQL: commit floor and Store::gate at 10^3 and big ledgers, interleaved");
    let left_out = crate::scenarios::caught(|| {
        postgres::postgres_rows(&mut t, homes.path(), sizes, progress)
    })?;
    t.left_out.extend(left_out);

    crate::scenarios::caught(|| audit::audit_rows(&mut t, homes.path(), sizes, progress))?;

    progress("MCP round trips: straight to the shop and through cajaguard mcp");
    crate::scenarios::caught(|| mcp::round_trip_rows(&mut t, &setup, sizes))?;

    progress(
        "cajaguard serve: forwarded calls over HTTP, straight to the fixture and through the service",
    );
    crate::scenarios::caught(|| service::service_rows(&mut t, homes.path(), sizes))?;

    progress("cold start: spawn cajaguard mcp + initialize + tools/list");
    let cold = crate::scenarios::caught(|| mcp::cold_start(&setup, sizes.process))?;
    let row = t.push(
        "cold_start",
        "cold start: spawn `cajaguard mcp` + initialize + tools/list (fixture shop)",
        Summary::of(&cold),
        "spawn",
    );
    row.p50_at_most("<= 20 ms p50", 20e6);
    Ok(t)
}

//! The durable gate: `Store::claim` + `Store::gate` on a real home on the report's disk, fresh
//! and at 10^3 and 10^6 ledger rows, interleaved with the fsync floor it is measured against.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use cajaguard::store::Store;
use cajaguard_core::policy::Policy;
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use cajaguard_core::verdict::Verdict;
use cajaguard_harness::fixtures;
use time::OffsetDateTime;

use super::core::{CoreInputs, core_inputs};
use super::floors::fsync_floor;
use super::{Sizes, Target, Timing, floor_row};
use crate::stats::{Summary, time_n};

pub(super) fn store_rows(
    t: &mut Timing,
    homes: &Path,
    sizes: Sizes,
    progress: &dyn Fn(&str),
) -> Result<()> {
    let c = core_inputs();
    let policy = fixtures::policy("1000000000.00");
    let fresh_home = homes.join("fresh-home");
    let fresh = Store::open(&fresh_home)?;
    let mut seeded = Vec::new();
    for rows in [1_000_u64, sizes.big_ledger_rows] {
        progress(&format!("seeding {rows} ledger rows"));
        let store = Store::open(&homes.join(format!("home-{rows}")))?;
        let started = Instant::now();
        fixtures::seed_sqlite_ledger(&store.database_path(), rows, c.now, |i| 1 + (i % 9) as i64);
        seeded.push((rows, store, started.elapsed(), Vec::new()));
    }

    // Interleaved in blocks, so that drift on a shared machine and disk hits every row alike.
    let blocks = 10;
    let per_block = (sizes.disk / blocks).max(1);
    let mut floor = Vec::new();
    let mut fresh_samples = Vec::new();
    for _ in 0..blocks {
        floor.extend(fsync_floor(&fresh_home, per_block)?);
        fresh_samples.extend(gate_allow_samples(&fresh, &policy, &c, per_block)?);
        for (_, store, _, samples) in &mut seeded {
            samples.extend(gate_allow_samples(store, &policy, &c, per_block)?);
        }
    }
    t.floors.insert(
        0,
        floor_row(
            "fsync",
            "fsync: write 1 byte + fsync, a file in the home's directory",
            Summary::of(&floor),
        ),
    );
    let fsync_p50 = t.floor("fsync").map_or(0.0, |f| f.summary.p50_ns);
    let row = t.push(
        "gate_allow_durable",
        "Store::claim + Store::gate: claim, decide, allow, durable reservation (fresh home)",
        Summary::of(&fresh_samples),
        "fsync",
    );
    let p50 = row.summary.p50_ns;
    row.target = Some(Target {
        goal: "<= 1.8x the fsync floor".into(),
        met: fsync_p50 > 0.0 && p50 <= 1.8 * fsync_p50,
    });

    let mut small_p50 = 0.0;
    for (rows, _, seed_time, samples) in &seeded {
        let exponent = (*rows as f64).log10().round();
        let row = t.push(
            &format!("window_{rows}"),
            &format!(
                "Store::gate window decision at 10^{exponent} ledger rows (allow + reservation)"
            ),
            Summary::of(samples),
            "fsync",
        );
        row.note = Some(format!(
            "seeded in {:.1} s; the window sum reads hourly buckets, not the ledger",
            seed_time.as_secs_f64()
        ));
        if *rows == 1_000 {
            small_p50 = row.summary.p50_ns;
        } else {
            let p50 = row.summary.p50_ns;
            let times = if small_p50 > 0.0 {
                p50 / small_p50
            } else {
                f64::INFINITY
            };
            row.target = Some(Target {
                goal: format!("<= 2x the 10^3 cost (is {times:.2}x)"),
                met: times <= 2.0,
            });
        }
    }
    Ok(())
}

/// `n` gates that allow and reserve USD 24.00 on fresh checkouts, with the real `decide`.
pub(super) fn gate_allow_samples(
    store: &Store,
    policy: &Policy,
    c: &CoreInputs,
    n: usize,
) -> Result<Vec<Duration>> {
    let mut i = 0_u64;
    let tag = cajaguard_harness::uuid()[..8].to_owned();
    time_n(n, || {
        i += 1;
        let checkout_id = format!("gid://report/Checkout/{tag}-{i}");
        let request = CompleteRequest {
            checkout_id: checkout_id.clone(),
            idempotency_key: format!("report-{tag}-{i}"),
            ..c.request.clone()
        };
        let quote = Quote {
            checkout_id,
            ..c.small.clone()
        };
        let now = OffsetDateTime::now_utc();
        let mut decide = fixtures::decide(policy, &request, &quote, &c.trusted, now);
        let gated =
            fixtures::claim_and_gate(store, &request, &quote, policy.window, now, &mut decide)?;
        let outcome = gated.outcome;
        if outcome.ruling.verdict() != Verdict::Allow {
            bail!(
                "the gate did not allow: {}",
                outcome.ruling.reason().as_str()
            );
        }
        Ok(outcome)
    })
}

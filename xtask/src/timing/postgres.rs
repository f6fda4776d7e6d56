//! The shared store's gate: `Store::gate` allowing on a PostgreSQL store at 10^3 and at 10^6 ledger
//! rows, interleaved with the floor it is measured against, one PostgreSQL commit round trip
//! (`BEGIN; UPDATE one row; COMMIT` on a connection with the same settings). Each ledger lives in a
//! schema of its own on the server `CAJAGUARD_TEST_POSTGRES_URL` names, dropped afterwards; without
//! that variable these rows are left out, and the report says so.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use cajaguard::store::{AuditRecord, Store};
use cajaguard_core::approval::BasketDigest;
use cajaguard_core::policy::Policy;
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use cajaguard_core::verdict::Verdict;
use cajaguard_harness::{fixtures, pg};
use time::OffsetDateTime;

use super::core::{CoreInputs, core_inputs};
use super::{Sizes, Target, Timing, floor_row};
use crate::stats::Summary;

/// The floor's key, also the name the report shows.
pub(super) const FLOOR: &str = "postgres_commit";

/// Seeds one ledger per size, then measures the floor and the gates in interleaved blocks.
/// Returns why the rows were left out, if they were.
pub(super) fn postgres_rows(
    t: &mut Timing,
    homes: &Path,
    sizes: Sizes,
    progress: &dyn Fn(&str),
) -> Result<Option<String>> {
    let Some(base) = pg::base_url() else {
        return Ok(Some(format!(
            "the PostgreSQL rows were left out: {} is not set",
            pg::ENV
        )));
    };
    let c = core_inputs();
    let policy = fixtures::policy("1000000000.00");
    let mut seeded = Vec::new();
    for rows in [1_000_u64, sizes.big_ledger_rows] {
        progress(&format!("seeding {rows} ledger rows on PostgreSQL"));
        let schema = pg::Schema::create(&base);
        let store = fixtures::open_store(&homes.join(format!("pg-home-{rows}")), Some(&schema.url));
        let started = Instant::now();
        fixtures::seed_postgres_ledger(&mut schema.client(), rows, c.now);
        let seed_time = started.elapsed();
        let checkpointed = settle(&schema)?;
        seeded.push((rows, schema, store, seed_time, checkpointed, Vec::new()));
    }
    // The floor runs in the first schema, on its own connection with the store's settings.
    let mut floor_client = commit_floor_client(&seeded[0].1.url)?;

    let blocks = 10;
    let per_block = (sizes.disk / blocks).max(1);
    let mut floor = Vec::new();
    for _ in 0..blocks {
        floor.extend(commit_floor(&mut floor_client, per_block)?);
        for (_, _, store, _, _, samples) in &mut seeded {
            samples.extend(gate_only_samples(store, &policy, &c, per_block)?);
        }
    }
    t.floors.push(floor_row(
        FLOOR,
        "PostgreSQL commit round trip: BEGIN; UPDATE one row; COMMIT (one connection, prepared)",
        Summary::of(&floor),
    ));
    let floor_p50 = t.floor(FLOOR).map_or(0.0, |f| f.summary.p50_ns);

    let mut small_p50 = 0.0;
    for (rows, _, _, seed_time, checkpointed, samples) in &seeded {
        let exponent = (*rows as f64).log10().round();
        let row = t.push(
            &format!("postgres_gate_{rows}"),
            &format!("PostgreSQL Store::gate allow at 10^{exponent} ledger rows (reservation, audit leaf, commit)"),
            Summary::of(samples),
            FLOOR,
        );
        let p50 = row.summary.p50_ns;
        let of_floor = if floor_p50 > 0.0 {
            p50 / floor_p50
        } else {
            f64::INFINITY
        };
        let mut goal = format!("<= 2x the commit floor (is {of_floor:.2}x)");
        let mut met = of_floor <= 2.0;
        if *rows == 1_000 {
            small_p50 = p50;
        } else {
            let times = if small_p50 > 0.0 {
                p50 / small_p50
            } else {
                f64::INFINITY
            };
            goal.push_str(&format!("; <= 1.2x the 10^3 cost (is {times:.2}x)"));
            met &= times <= 1.2;
        }
        row.target = Some(Target { goal, met });
        row.note = Some(format!(
            "seeded in {:.1} s by one INSERT ... SELECT generate_series, then VACUUM ANALYZE{}; the claim is made before the clock starts",
            seed_time.as_secs_f64(),
            if *checkpointed {
                " and CHECKPOINT"
            } else {
                " (CHECKPOINT refused: the seed's writes may still be flushing)"
            }
        ));
    }
    Ok(None)
}

/// Lets the seed settle before anything is timed: VACUUM ANALYZE the seeded tables (as
/// autovacuum would), then CHECKPOINT, so the seed's dirty pages and WAL are on disk. Without
/// this the gates timed right after a 10^6-row seed share the disk with the seed's write-back
/// and look 2-4x slower than at 10^3, though the server spends the same time on their statements
/// (docs/ARCHITECTURE.md, "The shared store"). Whether CHECKPOINT was allowed (it needs a
/// superuser or `pg_checkpoint`).
fn settle(schema: &pg::Schema) -> Result<bool> {
    let mut client = schema.client();
    // One statement each: VACUUM cannot run inside the implicit transaction of a batch.
    for statement in ["VACUUM ANALYZE ledger", "VACUUM ANALYZE spend_buckets"] {
        client.batch_execute(statement)?;
    }
    Ok(client.batch_execute("CHECKPOINT").is_ok())
}

/// A connection to `url` set up as the store sets up its own, with the floor's one-row table.
fn commit_floor_client(url: &str) -> Result<postgres::Client> {
    let mut client = postgres::Client::connect(url, postgres::NoTls)?;
    client.batch_execute(
        "SET lock_timeout = 5000; SET statement_timeout = 10000; SET plan_cache_mode = force_generic_plan;
         CREATE TABLE commit_floor (id INTEGER PRIMARY KEY, n BIGINT NOT NULL);
         INSERT INTO commit_floor VALUES (1, 0);",
    )?;
    Ok(client)
}

/// `n` transactions that update one row and commit: what any durable write costs on this server.
fn commit_floor(client: &mut postgres::Client, n: usize) -> Result<Vec<Duration>> {
    let update = client.prepare("UPDATE commit_floor SET n = n + 1 WHERE id = 1")?;
    crate::stats::time_n(n, || {
        let mut tx = client.transaction()?;
        tx.execute(&update, &[])?;
        tx.commit()?;
        Ok(())
    })
}

/// `n` gates that allow and reserve USD 24.00 on fresh checkouts, with the real `decide`; only
/// `Store::gate` is timed (its claim, one transaction of its own, is made first).
fn gate_only_samples(
    store: &Store,
    policy: &Policy,
    c: &CoreInputs,
    n: usize,
) -> Result<Vec<Duration>> {
    let tag = cajaguard_harness::uuid()[..8].to_owned();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
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
        let claim = store
            .claim(
                &request.checkout_id,
                &request.idempotency_key,
                now,
                policy.window,
            )?
            .map_err(|conflict| anyhow!("the checkout could not be claimed: {conflict:?}"))?;
        let digest = BasketDigest::of(&quote, &request.instruments);
        let audit = AuditRecord::new(now, "complete_checkout");
        let started = Instant::now();
        let gated = store.gate(
            &claim,
            &request,
            &quote,
            &digest,
            None,
            policy.window,
            now,
            false,
            &mut |ledger, approvals, _| decide(ledger, approvals),
            &audit,
        )?;
        let took = started.elapsed();
        if gated.outcome.ruling.verdict() != Verdict::Allow {
            bail!(
                "the gate did not allow: {}",
                gated.outcome.ruling.reason().as_str()
            );
        }
        // The first tenth warms the connection's statement cache and the pages, untimed.
        if i >= n / 10 {
            samples.push(took);
        }
    }
    Ok(samples)
}

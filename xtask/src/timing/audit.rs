//! The audit log (SPEC §8, issue 16): what appending a leaf adds to a gate's transaction, set
//! against `Store::gate` allow measured in the same run, and `audit verify` over a large log in
//! records per second, beside the floor of reading the same rows without checking them.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use cajaguard::store::{AuditEvent, AuditRecord, SettledAs, Store};
use cajaguard_core::approval::TrustedKeys;
use time::OffsetDateTime;

use super::{Sizes, Target, Timing, floor_row};
use crate::stats::Summary;

/// Appends per transaction when measuring one append's share (the transaction's own cost
/// spread over this many is noise).
const BATCH: usize = 1_000;

fn records(n: usize, now: OffsetDateTime) -> Vec<AuditRecord> {
    (0..n)
        .map(|i| AuditRecord {
            total: Some(2400 + i as i64),
            currency: Some("USD".into()),
            merchant: Some("demo-outfitters.example".into()),
            checkout_id: Some(format!("gid://report/Checkout/{i}")),
            idempotency_key: Some(format!("report-{i}")),
            request_id: Some("cg-00112233445566778899aabbccddeeff".into()),
            latency: Duration::from_micros(300),
            ..AuditRecord::new(now, "complete_checkout")
        })
        .collect()
}

pub(super) fn audit_rows(
    t: &mut Timing,
    homes: &Path,
    sizes: Sizes,
    progress: &dyn Fn(&str),
) -> Result<()> {
    let now = OffsetDateTime::now_utc();
    let event = AuditEvent::Settled(SettledAs::Completed);

    progress("audit log: one leaf's share of a transaction");
    let store = Store::open(&homes.join("audit-append"))?;
    let batch = records(BATCH, now);
    let mut per_leaf = Vec::new();
    for _ in 0..(sizes.disk / 10).max(5) {
        let started = Instant::now();
        store.audit_many(event, &batch)?;
        per_leaf.push(started.elapsed() / BATCH as u32);
    }
    let gate_p50 = t
        .row("gate_allow_durable")
        .map_or(0.0, |r| r.summary.p50_ns);
    let row = t.push(
        "audit_append",
        "audit log: one leaf appended in a transaction (leaf hash, stored hashes, row), amortized over 1,000",
        Summary::of(&per_leaf),
        "fsync",
    );
    let share = if gate_p50 > 0.0 {
        row.summary.p50_ns / gate_p50
    } else {
        f64::INFINITY
    };
    row.note = Some(format!(
        "{:.1}% of Store::claim + Store::gate allow in this run",
        share * 100.0
    ));
    row.target = Some(Target {
        goal: "<= 5% of Store::gate allow".into(),
        met: share <= 0.05,
    });

    let n = sizes.big_ledger_rows as usize;
    progress(&format!("audit log: writing {n} records"));
    let big = Store::open(&homes.join("audit-verify"))?;
    let chunk = records(10_000.min(n), now);
    let mut written = 0;
    while written < n {
        let take = chunk.len().min(n - written);
        big.audit_many(event, &chunk[..take])?;
        written += take;
    }
    big.checkpoint(now)?;

    progress(&format!("audit log: reading and verifying {n} records"));
    let runs = 3;
    let mut reads = Vec::new();
    let mut verifies = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let mut from = 0_u64;
        loop {
            let page = big.log_records(from, 10_000)?;
            if page.is_empty() {
                break;
            }
            from += page.len() as u64;
            std::hint::black_box(&page);
        }
        reads.push(started.elapsed());
        let started = Instant::now();
        let found = big.verify_log(
            &TrustedKeys(Vec::new()),
            None,
            Vec::new(),
            cajaguard_core::audit_log::OtherLogs::Refused,
        )?;
        verifies.push(started.elapsed());
        match found {
            Ok(summary) if summary.records == n as u64 => {}
            Ok(summary) => bail!("audit verify saw {} of {n} records", summary.records),
            Err(tampering) => bail!("audit verify found a fresh log altered: {tampering}"),
        }
    }
    let exponent = (n as f64).log10().round();
    t.floors.push(floor_row(
        "audit_read",
        &format!("reading 10^{exponent} audit records from the store in log order, unchecked"),
        Summary::of(&reads),
    ));
    let row = t.push(
        "audit_verify",
        &format!("cajaguard audit verify: 10^{exponent} records (rebuild the tree, check all)"),
        Summary::of(&verifies),
        "audit_read",
    );
    let per_second = n as f64 / (row.summary.p50_ns / 1e9);
    row.note = Some(format!("{per_second:.0} records per second"));
    Ok(())
}

//! What one gate decision costs on disk (SPEC §8: "a decision costs the same with a million ledger
//! entries as with a thousand"): `gate()` that allows and reserves, over 10^3 and 10^6 ledger rows,
//! next to the floor it cannot go below — one append and fdatasync on the same disk (the store
//! syncs the WAL once after a decision that lets a payment through).
//!
//! The same decision on the shared PostgreSQL store (`gate_allow_with_reservation_postgres`), when
//! `CAJAGUARD_TEST_POSTGRES_URL` names a server (a fresh schema, dropped afterwards): one round trip
//! per statement to the server, which commits with its own WAL flush.
//!
//! `cargo bench -p cajaguard --bench store`. Homes live under Cargo's target tmp dir, so on the disk
//! a project-local home would be on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // A benchmark that cannot set up should stop.

use std::fs::OpenOptions;
use std::hint::black_box;
use std::io::Write;
use std::time::Duration;

use cajaguard::store::Store;
use cajaguard_core::approval::BasketDigest;
use cajaguard_core::effect::{ApprovalCandidate, LedgerView};
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use cajaguard_harness::fixtures;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use time::OffsetDateTime;

use cajaguard_harness::pg as pg_support;

const DAY: Duration = Duration::from_secs(24 * 3600);

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cajaguard-bench-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

fn gate_allow(c: &mut Criterion) {
    let now = OffsetDateTime::now_utc();
    let mut group = c.benchmark_group("gate_allow_with_reservation");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(10));
    for rows in [1_000_u64, 1_000_000] {
        let tmp = tempdir();
        let home = tmp.path().join("home");
        let store = Store::open(&home).unwrap();
        fixtures::seed_sqlite_ledger(&store.database_path(), rows, now, |i| {
            100 + (i % 900) as i64
        });
        bench_gate(&mut group, &store, rows, now);
    }
    group.finish();

    let Some(base) = pg_support::base_url() else {
        pg_support::notice("gate_allow_with_reservation_postgres");
        return;
    };
    let mut group = c.benchmark_group("gate_allow_with_reservation_postgres");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(10));
    for rows in [1_000_u64, 1_000_000] {
        let schema = pg_support::Schema::create(&base);
        let tmp = tempdir();
        let store = fixtures::open_store(&tmp.path().join("home"), Some(&schema.url));
        seed_postgres(&schema, rows, now);
        bench_gate(&mut group, &store, rows, now);
    }
    group.finish();
}

/// The SQLite seed's rows, made by the server, then vacuumed and checkpointed.
fn seed_postgres(schema: &pg_support::Schema, rows: u64, now: OffsetDateTime) {
    fixtures::seed_postgres_ledger(&mut schema.client(), rows, now);
    // One statement each: VACUUM cannot run inside the implicit transaction of a batch.
    let mut client = schema.client();
    for statement in ["VACUUM ANALYZE ledger", "VACUUM ANALYZE spend_buckets"] {
        client.batch_execute(statement).unwrap();
    }
    // Flush the seed now, so the benchmark's commits do not pay for it (needs a privileged role).
    let _ = client.batch_execute("CHECKPOINT");
}

fn bench_gate(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    store: &Store,
    rows: u64,
    now: OffsetDateTime,
) {
    let mut n = 0_u64;
    group.bench_function(BenchmarkId::from_parameter(format!("{rows}_rows")), |b| {
        b.iter(|| {
            n += 1;
            let checkout = format!("gid://bench/Checkout/{n}");
            let request = CompleteRequest {
                idempotency_key: format!("bench-{n}"),
                ..fixtures::request(&checkout)
            };
            let quote = fixtures::quote(&checkout, 2400);
            let mut decide = |view: &LedgerView, _: &[ApprovalCandidate]| {
                black_box(view.window_spent);
                fixtures::forward(2400, BasketDigest::of(&Quote::default(), &[]), None)
            };
            // The claim is one unsynced write of the allow path (SPEC §4 step 3a).
            let outcome =
                fixtures::claim_and_gate(store, &request, &quote, DAY, now, &mut decide).unwrap();
            black_box(outcome)
        })
    });
}

fn fsync_floor(c: &mut Criterion) {
    let tmp = tempdir();
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(tmp.path().join("floor"))
        .unwrap();
    let page = [0x5a_u8; 4096];
    let mut written = 0_u64;
    let mut group = c.benchmark_group("fsync_floor");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(10));
    group.bench_function("append_4k_fdatasync", |b| {
        b.iter(|| {
            file.write_all(&page).unwrap();
            file.sync_data().unwrap();
            written += 1;
            if written.is_multiple_of(10_000) {
                file.set_len(0).unwrap();
            }
        })
    });
    group.finish();
}

criterion_group!(benches, gate_allow, fsync_floor);
criterion_main!(benches);

//! The pipelined transaction and the pool against a real server (`CAJAGUARD_TEST_POSTGRES_URL`;
//! without it each test says so and does nothing else).

#![allow(clippy::unwrap_used)]

use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use cajaguard_harness::pg;

use super::Postgres;
use super::connection::POOL_SIZE;
use super::transaction::Access;
use crate::store::tx::{Reservation, State, Tx};
use crate::store::{
    AuditEvent, AuditRecord, ReleasedBy, SettledAs, StoreError, claims, ledger, log,
};

fn open(test: &str) -> Option<(pg::Schema, Postgres)> {
    let schema = pg::schema_or_notice(test)?;
    let store = Postgres::open(&schema.url).unwrap();
    store
        .run_pg(&mut |tx| {
            tx.execute("CREATE TABLE probe (id BIGINT PRIMARY KEY, note TEXT)", &[])
                .map(|_| ())
        })
        .unwrap();
    Some((schema, store))
}

fn probe_count(store: &Postgres) -> i64 {
    store
        .run_pg(&mut |tx| {
            let row = tx.query_opt("SELECT count(*) FROM probe", &[])?.unwrap();
            tx.get(&row, 0)
        })
        .unwrap()
}

fn sqlstate(e: &StoreError) -> Option<String> {
    match e {
        StoreError::Postgres { source, .. } => source.code().map(|c| c.code().to_owned()),
        _ => None,
    }
}

#[test]
fn queued_statements_run_before_the_read_that_sends_them() {
    let Some((_schema, store)) = open("queued_statements_run_before_the_read_that_sends_them")
    else {
        return;
    };
    let seen: i64 = store
        .run_pg(&mut |tx| {
            for id in 1..=3_i64 {
                tx.defer(
                    "INSERT INTO probe (id, note) VALUES ($1, $2)",
                    &[&id, &"queued"],
                )?;
            }
            let row = tx.query_opt("SELECT count(*) FROM probe", &[])?.unwrap();
            tx.get(&row, 0)
        })
        .unwrap();
    assert_eq!(seen, 3, "the read sent after the queued inserts sees them");
    assert_eq!(probe_count(&store), 3, "and the commit keeps them");
}

#[test]
fn a_queued_failure_is_the_error_returned_and_nothing_is_applied() {
    let Some((_schema, store)) =
        open("a_queued_failure_is_the_error_returned_and_nothing_is_applied")
    else {
        return;
    };
    let result: Result<(), StoreError> = store.run_pg(&mut |tx| {
        tx.defer("INSERT INTO probe (id, note) VALUES (1, 'first')", &[])?;
        // A duplicate key: the server fails the transaction here, and refuses the rest (25P02).
        tx.defer("INSERT INTO probe (id, note) VALUES (1, 'again')", &[])?;
        tx.defer("INSERT INTO probe (id, note) VALUES (2, 'after')", &[])?;
        tx.query("SELECT 1", &[])?;
        Ok(())
    });
    let error = result.unwrap_err();
    assert_eq!(
        sqlstate(&error).as_deref(),
        Some("23505"),
        "the first failure is reported, not the refusals after it: {error:?}"
    );
    assert_eq!(probe_count(&store), 0);
}

#[test]
fn a_transaction_whose_error_was_dropped_is_never_committed() {
    let Some((_schema, store)) = open("a_transaction_whose_error_was_dropped_is_never_committed")
    else {
        return;
    };
    let result: Result<(), StoreError> = store.run_pg(&mut |tx| {
        tx.defer("INSERT INTO probe (id, note) VALUES (1, 'kept?')", &[])?;
        tx.defer("INSERT INTO probe (id, note) VALUES (1, 'duplicate')", &[])?;
        // A caller that drops the error: COMMIT would be answered as a rollback, without error.
        let _ = tx.query("SELECT 1", &[]);
        Ok(())
    });
    assert!(
        matches!(result, Err(StoreError::Inconsistent(_))),
        "{result:?}"
    );
    assert_eq!(probe_count(&store), 0);
    // The connection went back clean: the next transaction works.
    store
        .run_pg(&mut |tx| {
            tx.execute("INSERT INTO probe (id) VALUES (9)", &[])
                .map(|_| ())
        })
        .unwrap();
    assert_eq!(probe_count(&store), 1);
}

#[test]
fn the_pool_runs_its_connections_at_once_and_no_more() {
    let Some((schema, store)) = open("the_pool_runs_its_connections_at_once_and_no_more") else {
        return;
    };
    let store = Arc::new(store);
    // Every holder waits inside its transaction until all of them are in theirs: this only
    // passes if POOL_SIZE transactions run at the same time.
    let all_in = Arc::new(Barrier::new(POOL_SIZE + 1));
    let release = Arc::new(Barrier::new(POOL_SIZE + 1));
    let holders: Vec<_> = (0..POOL_SIZE)
        .map(|i| {
            let (store, all_in, release) = (store.clone(), all_in.clone(), release.clone());
            std::thread::spawn(move || {
                let mut waited = false;
                let result = store.run_pg(&mut |tx| {
                    let id = i64::try_from(i).unwrap();
                    tx.execute("INSERT INTO probe (id) VALUES ($1)", &[&id])?;
                    waited = true;
                    all_in.wait();
                    release.wait();
                    Ok(())
                });
                if !waited {
                    // No connection came (a smaller pool): fail the test instead of hanging it.
                    all_in.wait();
                    release.wait();
                }
                result.unwrap();
            })
        })
        .collect();
    all_in.wait();
    let (done_tx, done_rx) = mpsc::channel();
    let extra = {
        let store = store.clone();
        std::thread::spawn(move || {
            let result = store.run_pg(&mut |tx| tx.query("SELECT 1", &[]).map(|_| ()));
            done_tx.send(result.is_ok()).unwrap();
        })
    };
    assert!(
        done_rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "a transaction beyond the pool's size waits for a connection"
    );
    let open_now = count_connections(&schema);
    release.wait();
    assert!(done_rx.recv().unwrap(), "and runs once one comes back");
    for holder in holders {
        holder.join().unwrap();
    }
    extra.join().unwrap();
    assert_eq!(open_now, i64::try_from(POOL_SIZE).unwrap());
    assert_eq!(probe_count(&store), i64::try_from(POOL_SIZE).unwrap());
}

fn count_connections(schema: &pg::Schema) -> i64 {
    let row = schema
        .client()
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&schema.name],
        )
        .unwrap();
    // The client asking is one of them.
    row.get::<_, i64>(0) - 1
}

#[test]
fn a_connection_cut_while_idle_is_replaced_and_the_transaction_runs() {
    let Some((schema, store)) =
        open("a_connection_cut_while_idle_is_replaced_and_the_transaction_runs")
    else {
        return;
    };
    assert!(schema.terminate_connections() >= 1);
    store
        .run_pg(&mut |tx| {
            tx.defer("INSERT INTO probe (id) VALUES (1)", &[])?;
            tx.query("SELECT 1", &[]).map(|_| ())
        })
        .unwrap();
    assert_eq!(probe_count(&store), 1);
}

#[test]
fn a_commit_returns_only_once_its_wal_is_flushed_but_releases_its_locks_before() {
    let Some((_schema, store)) =
        open("a_commit_returns_only_once_its_wal_is_flushed_but_releases_its_locks_before")
    else {
        return;
    };
    // Several times over: without the statement that waits for the flush, an asynchronous commit
    // is flushed only by the WAL writer (every 200 ms) or by another session's flush, so one
    // of these would find its WAL not yet on disk.
    for id in 0..8_i64 {
        let (written_up_to, synchronous): (String, String) = store
            .run_pg(&mut |tx| {
                tx.execute("INSERT INTO probe (id) VALUES ($1)", &[&id])?;
                let row = tx
                    .query_opt(
                        "SELECT pg_current_wal_insert_lsn()::TEXT, current_setting('synchronous_commit')",
                        &[],
                    )?
                    .unwrap();
                Ok((tx.get(&row, 0)?, tx.get(&row, 1)?))
            })
            .unwrap();
        // Inside the transaction the commit does not wait for the disk, so the locks it holds
        // are released as soon as the server has applied it.
        assert_eq!(synchronous, "off");
        let flushed: bool = store
            .run_pg(&mut |tx| {
                let row = tx
                    .query_opt(
                        "SELECT pg_current_wal_flush_lsn() >= $1::TEXT::PG_LSN",
                        &[&written_up_to],
                    )?
                    .unwrap();
                tx.get(&row, 0)
            })
            .unwrap();
        assert!(
            flushed,
            "commit {id} returned before its WAL (up to {written_up_to}) was flushed"
        );
    }
}

#[test]
fn a_read_cannot_write() {
    // It commits without waiting for a flush, so a write in it would not be durable.
    let Some((_schema, store)) = open("a_read_cannot_write") else {
        return;
    };
    let write: Result<u64, StoreError> = store.run_as(Access::Read, &mut |tx| {
        tx.execute("INSERT INTO probe (id) VALUES (1)", &[])
    });
    assert_eq!(
        write.as_ref().err().and_then(sqlstate).as_deref(),
        Some("25006"),
        "a write in a read is refused: {write:?}"
    );
    assert_eq!(probe_count(&store), 0);
}

/// The generic plan of `sql` for `args` (SQL literals): prepared, then `EXPLAIN EXECUTE` with
/// `plan_cache_mode = force_generic_plan`, as the store's sessions run it (an `EXPLAIN` sent
/// with bound parameters would be planned for those values instead).
fn generic_plan(schema: &pg::Schema, sql: &str, types: &str, args: &str) -> String {
    let mut client = schema.client();
    client
        .batch_execute(&format!(
            "SET plan_cache_mode = force_generic_plan; PREPARE probe({types}) AS {sql}"
        ))
        .unwrap();
    client
        .simple_query(&format!("EXPLAIN EXECUTE probe({args})"))
        .unwrap()
        .into_iter()
        .filter_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_checkouts_ledger_row_is_found_by_its_key_whatever_the_statistics() {
    // Statistics taken with no reservation in flight made the partial index `ledger_in_flight`
    // look cheapest for `checkout_id = $1 AND state = 'in_flight'`: the generic plan then scanned
    // every reservation in flight on each gate, however many there came to be.
    // The store is opened for its migrations.
    let Some((schema, _store)) =
        open("a_checkouts_ledger_row_is_found_by_its_key_whatever_the_statistics")
    else {
        return;
    };
    schema
        .client()
        .batch_execute(
            "INSERT INTO ledger (checkout_id, idempotency_key, merchant, currency, reserved, charged,
                                 state, hour, reserved_at, settled_at)
             SELECT 'gid://seed/' || i, 'k' || i, 'm.example', 'USD', 100, 100, 'settled', 1, i, i
             FROM generate_series(1, 2000) AS i;
             ANALYZE ledger;",
        )
        .unwrap();
    let checkout = "'gid://seed/7'";
    let plans = [
        (
            "GATE_LOCKS_BATCH",
            generic_plan(
                &schema,
                super::statements::GATE_LOCKS_BATCH,
                "TEXT, TEXT[], BIGINT[], TEXT[]",
                &format!("'USD', ARRAY['USD/agent'], ARRAY[1::BIGINT], ARRAY[{checkout}]"),
            ),
        ),
        (
            "IN_FLIGHT_OF",
            generic_plan(&schema, super::statements::IN_FLIGHT_OF, "TEXT", checkout),
        ),
    ];
    for (name, plan) in plans {
        assert!(
            plan.contains("ledger_pkey") && !plan.contains("ledger_in_flight"),
            "{name} must read the checkout's row by its key:\n{plan}"
        );
    }
}

/// A claim and a settlement read the checkout's rows in one round trip, so their writes go out
/// with `COMMIT`; the settlement's audit record too, its log index claimed with the reads.
#[test]
fn a_claim_and_a_settlement_read_in_one_round_trip_and_write_with_their_commit() {
    let Some((_schema, store)) =
        open("a_claim_and_a_settlement_read_in_one_round_trip_and_write_with_their_commit")
    else {
        return;
    };
    let now = time::macros::datetime!(2026-12-03 12:00 UTC);
    store
        .run_pg(&mut |tx| log::open(tx, "test.example/log").map(|_| ()))
        .unwrap();
    let (claimed, claim_trips) = store
        .run_pg(&mut |tx| {
            let claimed =
                claims::claim(tx, "co_1", "key_1", 7, now, Duration::from_secs(60), None)?;
            Ok((claimed, tx.round_trips()))
        })
        .unwrap();
    assert_eq!(
        claimed,
        Ok(claims::Claimed {
            retry: false,
            token: Some(7),
            frozen: None
        }),
        "a fresh checkout is claimed"
    );
    assert_eq!(
        claim_trips, 1,
        "the claim's reads, the freeze among them, are one round trip"
    );
    store
        .run_pg(&mut |tx| {
            let reservation = Reservation {
                checkout_id: "co_1",
                idempotency_key: "key_1",
                merchant: "shop.example",
                currency: "USD",
                total: 2400,
                digest: "00",
                revisit: false,
                agent_profile: "",
                agent: None,
            };
            ledger::reserve(tx, None, &reservation, now)
        })
        .unwrap();
    let settle_trips = store
        .run_pg(&mut |tx| {
            let charge = cajaguard_core::settle::Charge::as_reserved(2400);
            let settlement = cajaguard_core::settle::Settlement::Completed(charge);
            ledger::settle(
                tx,
                "co_1",
                "key_1",
                &settlement,
                ReleasedBy::Shop,
                None,
                now,
            )?;
            let event = AuditEvent::Settled(SettledAs::of(&settlement, ReleasedBy::Shop));
            log::append(tx, event, &AuditRecord::new(now, "complete_checkout"))?;
            Ok(tx.round_trips())
        })
        .unwrap();
    assert_eq!(
        settle_trips, 1,
        "the settlement's reads, its locks and its record's log index are one round trip"
    );
    let (state, claim) = store
        .run_pg(&mut |tx| {
            let reads = tx.checkout_reads("co_1", None)?;
            Ok((reads.row.map(|row| row.state), reads.claim.is_some()))
        })
        .unwrap();
    assert_eq!(state, Some(State::Settled), "and it settled");
    assert!(!claim, "and ended the claim");
}

/// A currency's gate lock is the database's (an advisory lock), keyed by the schema too: a gate
/// of the store in one schema waits for another gate of the same currency there, never for one
/// of a store in another schema of the same database.
#[test]
fn a_currencys_gate_lock_is_held_per_schema() {
    let Some((schema, store)) = open("a_currencys_gate_lock_is_held_per_schema") else {
        return;
    };
    let Some((_other_schema, other)) = open("a_currencys_gate_lock_is_held_per_schema") else {
        return;
    };
    let same = Postgres::open(&schema.url).unwrap();
    let store = Arc::new(store);
    let (held, release) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let holder = {
        let (store, held, release) = (store.clone(), held.clone(), release.clone());
        std::thread::spawn(move || {
            store
                .run_pg(&mut |tx| {
                    tx.lock_gate("USD", "co_holder")?;
                    tx.query("SELECT 1", &[])?;
                    held.wait();
                    release.wait();
                    Ok(())
                })
                .unwrap();
        })
    };
    held.wait();
    // Each try gives up on a lock after 300 ms (`Busy`) instead of waiting 5 s.
    let gate_usd = |store: &Postgres| {
        store.run_pg(&mut |tx| {
            tx.execute("SET LOCAL lock_timeout = '300ms'", &[])?;
            tx.lock_gate("USD", "co_other")?;
            tx.query("SELECT 1", &[]).map(|_| ())
        })
    };
    let in_other_schema = gate_usd(&other);
    let in_same_schema = gate_usd(&same);
    release.wait();
    holder.join().unwrap();
    assert!(
        in_other_schema.is_ok(),
        "another schema's gate does not wait: {in_other_schema:?}"
    );
    let err = in_same_schema.expect_err("the same schema's gate waits for the holder");
    assert!(matches!(err, StoreError::Busy { .. }), "{err}");
}

/// A write waits for the disk only when something acts on it once it commits: a gate that
/// forwards (the payment goes out under its reservation) and a settlement that freezes payments.
/// A claim, a refusal and a settlement that only moves the books commit without waiting; lost to
/// a power cut, each fails closed (`Access::WriteUnflushed`).
#[test]
fn only_a_forward_and_a_freeze_wait_for_the_disk() {
    use cajaguard_core::approval::BasketDigest;
    use cajaguard_core::effect::Outcome;
    use cajaguard_core::policy::{StoreConfig, StoreUrl};
    use cajaguard_core::settle::{Charge, Settlement};
    use cajaguard_core::verdict::Reason;
    use cajaguard_harness::fixtures;

    use crate::store::{Backend, Gated, Store};

    let Some(schema) = pg::schema_or_notice("only_a_forward_and_a_freeze_wait_for_the_disk") else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let url = StoreUrl::Literal(zeroize::Zeroizing::new(schema.url.clone()));
    let store = Store::open_with(home.path(), &StoreConfig::Postgres { url }).unwrap();
    let Backend::Postgres(db) = &store.backend else {
        panic!("a PostgreSQL config opened another store");
    };
    let now = time::macros::datetime!(2026-12-03 12:00 UTC);
    let day = Duration::from_secs(24 * 3600);
    let record = AuditRecord::new(now, "complete_checkout");
    let gate = |checkout: &str, forwards: bool| -> Gated {
        let request = fixtures::request(checkout);
        let quote = fixtures::quote(checkout, 2400);
        let digest = BasketDigest::of(&quote, &request.instruments);
        let outcome: Outcome = if forwards {
            fixtures::forward(2400, digest, None)
        } else {
            fixtures::refuse(Reason::OverWindowCap)
        };
        let claim = store
            .claim(checkout, &request.idempotency_key, now, day)
            .unwrap()
            .unwrap();
        store
            .gate(
                &claim,
                &request,
                &quote,
                &digest,
                None,
                day,
                now,
                false,
                &mut |_, _, _| outcome.clone(),
                &record,
            )
            .unwrap()
    };
    let start = db.flushed_commits();
    let flushed = || db.flushed_commits() - start;

    let paid = gate("c1", true);
    assert_eq!(flushed(), 1, "a forward waits for its flush");
    let refused = gate("c2", false);
    assert!(refused.permit.is_none());
    assert_eq!(flushed(), 1, "a claim and a refusal do not");
    let permit = paid.permit.unwrap();
    let as_reserved = Settlement::Completed(Charge::as_reserved(2400));
    store
        .settle_permit(&permit, &as_reserved, now, &record)
        .unwrap();
    assert_eq!(flushed(), 1, "nor a settlement that only moves the books");

    // Released, then completed after all: the spend counts again, and must not be lost.
    let permit = gate("c4", true).permit.unwrap();
    assert_eq!(flushed(), 2);
    store
        .settle_permit(&permit, &Settlement::Released, now, &record)
        .unwrap();
    assert_eq!(flushed(), 2, "a release need not wait");
    store
        .settle_permit(&permit, &as_reserved, now, &record)
        .unwrap();
    assert_eq!(flushed(), 3, "a late completion waits for its flush");

    let permit = gate("c3", true).permit.unwrap();
    assert_eq!(flushed(), 4);
    let differs = Settlement::Completed(Charge {
        amount: 2600,
        currency: None,
        differs: vec!["total"],
    });
    store
        .settle_permit(&permit, &differs, now, &record)
        .unwrap();
    assert!(
        store.frozen().unwrap().is_some(),
        "the settlement froze payments"
    );
    assert_eq!(
        flushed(),
        5,
        "and waited for its flush, since gates act on it"
    );
}

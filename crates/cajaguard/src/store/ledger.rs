//! The spend ledger: one row per checkout (so one checkout's spend counts once, however many attempts
//! it takes) and the per-currency hourly buckets the window sum reads.
//!
//! The window is read as every bucket whose hour starts at or after `floor((now - window) / 1 h)`.
//! The oldest of those buckets may be partly older than the window: counting all of it over-counts,
//! never under-counts, so a cap can only be reached early (fail closed), by at most one hour's spend.

use std::collections::BTreeMap;
use std::time::Duration;

use cajaguard_core::gate::{CheckoutLedger, LedgerView};
use cajaguard_core::settle::Settlement;
use rusqlite::{Connection, OptionalExtension, params};
use time::OffsetDateTime;

use super::{InFlight, StoreError, WindowSpend, from_micros, micros};

const SECONDS_PER_HOUR: i64 = 3600;

/// The gate's window sum. It must stay a range seek on the `spend_buckets` primary key (see
/// `explain_window_query` and the scale test).
const WINDOW_SUM: &str = "SELECT COALESCE(SUM(settled + in_flight), 0) FROM spend_buckets WHERE currency = ?1 AND hour >= ?2";

/// A reservation the gate asked for.
pub(super) struct Reservation<'a> {
    pub checkout_id: &'a str,
    pub idempotency_key: &'a str,
    pub merchant: &'a str,
    pub currency: &'a str,
    pub total: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    InFlight,
    Settled,
    Released,
}

impl State {
    fn parse(text: &str) -> Result<State, StoreError> {
        match text {
            "in_flight" => Ok(State::InFlight),
            "settled" => Ok(State::Settled),
            "released" => Ok(State::Released),
            other => Err(StoreError::Inconsistent(format!(
                "a ledger row has the unknown state {other:?}"
            ))),
        }
    }
}

/// One checkout's row.
struct Row {
    idempotency_key: String,
    currency: String,
    reserved: i64,
    charged: Option<i64>,
    state: State,
    hour: i64,
}

impl Row {
    /// What this row adds to its bucket right now.
    fn counted(&self) -> i64 {
        match self.state {
            State::InFlight => self.reserved,
            State::Settled => self.charged.unwrap_or(self.reserved),
            State::Released => 0,
        }
    }
}

fn hour_of(at: OffsetDateTime) -> i64 {
    at.unix_timestamp().div_euclid(SECONDS_PER_HOUR)
}

/// The first bucket inside the window (see the module comment for why it may start early).
pub(super) fn window_start_hour(window: Duration, now: OffsetDateTime) -> i64 {
    let window_secs = i64::try_from(window.as_secs()).unwrap_or(i64::MAX);
    now.unix_timestamp()
        .saturating_sub(window_secs)
        .div_euclid(SECONDS_PER_HOUR)
}

fn row(conn: &Connection, checkout_id: &str) -> Result<Option<Row>, StoreError> {
    let raw = conn
        .prepare_cached(
            "SELECT idempotency_key, currency, reserved, charged, state, hour FROM ledger WHERE checkout_id = ?1",
        )?
        .query_row([checkout_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<i64>>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })
        .optional()?;
    raw.map(
        |(idempotency_key, currency, reserved, charged, state, hour)| {
            Ok(Row {
                idempotency_key,
                currency,
                reserved,
                charged,
                state: State::parse(&state)?,
                hour,
            })
        },
    )
    .transpose()
}

/// Adds `settled`/`in_flight` deltas to one bucket.
fn bump(
    conn: &Connection,
    currency: &str,
    hour: i64,
    settled: i64,
    in_flight: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO spend_buckets (currency, hour, settled, in_flight) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (currency, hour) DO UPDATE SET settled = settled + excluded.settled,
                                                    in_flight = in_flight + excluded.in_flight",
    )?
    .execute(params![currency, hour, settled, in_flight])?;
    Ok(())
}

fn bucket_sum(conn: &Connection, currency: &str, from_hour: i64) -> Result<i64, StoreError> {
    Ok(conn
        .prepare_cached(WINDOW_SUM)?
        .query_row(params![currency, from_hour], |r| r.get(0))?)
}

/// The view `decide` gets: the window's spend in `currency` without this checkout's own entry, and
/// this checkout's state.
pub(super) fn view(
    conn: &Connection,
    currency: &str,
    checkout_id: &str,
    window: Duration,
    now: OffsetDateTime,
) -> Result<LedgerView, StoreError> {
    let from_hour = window_start_hour(window, now);
    let mut window_spent = bucket_sum(conn, currency, from_hour)?;
    let checkout = match row(conn, checkout_id)? {
        None => CheckoutLedger::Fresh,
        Some(row) => {
            if row.currency == currency && row.hour >= from_hour {
                window_spent -= row.counted();
            }
            match row.state {
                State::Released => CheckoutLedger::Fresh,
                State::InFlight => CheckoutLedger::InFlight {
                    idempotency_key: row.idempotency_key,
                    total: row.reserved,
                },
                State::Settled => CheckoutLedger::Settled {
                    total: row.counted(),
                },
            }
        }
    };
    Ok(LedgerView {
        window_spent,
        checkout,
    })
}

/// Reserves `r.total` for the checkout, replacing an earlier attempt's reservation (so the checkout
/// still counts once). A settled checkout is never replaced: its spend happened.
pub(super) fn reserve(
    conn: &Connection,
    r: &Reservation<'_>,
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    if r.total < 0 {
        return Err(StoreError::Inconsistent(format!(
            "the gate asked to reserve a negative total ({}) for checkout {}",
            r.total, r.checkout_id
        )));
    }
    if let Some(old) = row(conn, r.checkout_id)? {
        match old.state {
            State::Settled => {
                return Err(StoreError::Inconsistent(format!(
                    "the gate asked to reserve checkout {} again, but it is already settled",
                    r.checkout_id
                )));
            }
            State::InFlight => bump(conn, &old.currency, old.hour, 0, -old.reserved)?,
            State::Released => {}
        }
    }
    let hour = hour_of(now);
    conn.prepare_cached(
        "INSERT OR REPLACE INTO ledger
             (checkout_id, idempotency_key, merchant, currency, reserved, charged, state, hour, reserved_at, settled_at)
         VALUES (?1, ?2, ?3, ?4, ?5, NULL, 'in_flight', ?6, ?7, NULL)",
    )?
    .execute(params![r.checkout_id, r.idempotency_key, r.merchant, r.currency, r.total, hour, micros(now)])?;
    bump(conn, r.currency, hour, 0, r.total)
}

/// A retry is forwarded without a new reservation, so the one it rides on must be there. Its
/// `reserved_at` moves to `now`: reconciliation releases only reservations whose last forward is
/// older than twice the shop timeout, and this retry is a forward a live proxy is waiting on.
pub(super) fn check_retry(
    conn: &Connection,
    checkout_id: &str,
    idempotency_key: &str,
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    match row(conn, checkout_id)? {
        Some(row) if row.state == State::InFlight && row.idempotency_key == idempotency_key => {
            conn.prepare_cached("UPDATE ledger SET reserved_at = ?2 WHERE checkout_id = ?1")?
                .execute(params![checkout_id, micros(now)])?;
            Ok(())
        }
        _ => Err(StoreError::Inconsistent(format!(
            "the gate called a retry of checkout {checkout_id}, but no reservation with that idempotency key is in flight"
        ))),
    }
}

pub(super) fn settle(
    conn: &Connection,
    checkout_id: &str,
    idempotency_key: &str,
    settlement: &Settlement,
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    let Some(row) = row(conn, checkout_id)? else {
        tracing::warn!(
            checkout_id,
            "settling a checkout the ledger never reserved; ignored"
        );
        return Ok(());
    };
    if row.idempotency_key != idempotency_key {
        tracing::warn!(
            checkout_id,
            "settling an attempt that is no longer the checkout's latest; ignored"
        );
        return Ok(());
    }
    match (settlement, row.state) {
        (Settlement::Unknown, _) => {}
        (Settlement::Completed { charged, .. }, State::InFlight | State::Released) => {
            // Released then completed: the shop charged after all, so the spend counts again.
            let in_flight = if row.state == State::InFlight {
                -row.reserved
            } else {
                0
            };
            bump(conn, &row.currency, row.hour, *charged, in_flight)?;
            conn.prepare_cached(
                "UPDATE ledger SET state = 'settled', charged = ?2, settled_at = ?3 WHERE checkout_id = ?1",
            )?
            .execute(params![checkout_id, charged, micros(now)])?;
        }
        (Settlement::Completed { charged, .. }, State::Settled) => {
            if Some(*charged) != row.charged {
                tracing::warn!(
                    checkout_id,
                    "a second, different completion for a settled checkout; kept the first"
                );
            }
        }
        (Settlement::Released, State::InFlight) => {
            bump(conn, &row.currency, row.hour, 0, -row.reserved)?;
            conn.prepare_cached(
                "UPDATE ledger SET state = 'released', settled_at = ?2 WHERE checkout_id = ?1",
            )?
            .execute(params![checkout_id, micros(now)])?;
        }
        (Settlement::Released, State::Settled) => {
            tracing::warn!(
                checkout_id,
                "a release for a settled checkout; settled spend is never released"
            );
        }
        (Settlement::Released, State::Released) => {}
    }
    Ok(())
}

pub(super) fn window_spend(
    conn: &Connection,
    window: Duration,
    now: OffsetDateTime,
) -> Result<BTreeMap<String, WindowSpend>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT currency, SUM(settled), SUM(in_flight) FROM spend_buckets WHERE hour >= ?1 GROUP BY currency",
    )?;
    let rows = stmt.query_map([window_start_hour(window, now)], |r| {
        Ok((
            r.get::<_, String>(0)?,
            WindowSpend {
                settled: r.get(1)?,
                in_flight: r.get(2)?,
            },
        ))
    })?;
    let mut out = BTreeMap::new();
    for row in rows {
        let (currency, spend) = row?;
        out.insert(currency, spend);
    }
    Ok(out)
}

pub(super) fn in_flight(conn: &Connection) -> Result<Vec<InFlight>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT checkout_id, idempotency_key, currency, reserved, reserved_at FROM ledger
         WHERE state = 'in_flight' ORDER BY reserved_at",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, i64>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (checkout_id, idempotency_key, currency, total, reserved_at) = row?;
        let reserved_at = from_micros(reserved_at, "a ledger row's reserved_at")?;
        out.push(InFlight {
            checkout_id,
            idempotency_key,
            currency,
            total,
            reserved_at,
        });
    }
    Ok(out)
}

pub(super) fn explain_window_query(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {WINDOW_SUM}"))?;
    let rows = stmt.query_map(params!["USD", 0_i64], |r| r.get::<_, String>(3))?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn window_start_includes_the_partly_overlapping_hour() {
        let now = datetime!(2026-03-02 10:30 UTC);
        let start = window_start_hour(Duration::from_secs(24 * 3600), now);
        // 2026-03-01 10:30 falls in the 10:00 bucket: that whole hour counts (conservative).
        assert_eq!(
            start,
            datetime!(2026-03-01 10:00 UTC).unix_timestamp() / 3600
        );
    }

    #[test]
    fn window_start_saturates() {
        let now = datetime!(2026-03-02 10:30 UTC);
        assert!(window_start_hour(Duration::MAX, now) < 0);
    }
}

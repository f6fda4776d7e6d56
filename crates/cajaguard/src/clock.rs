//! The time the gate decides by (SPEC §13): this host's clock, or, with a PostgreSQL store, the
//! database's, so that hosts whose clocks disagree still share one window, one expiry and one
//! order of timestamps.
//!
//! Asking the database on every reading would add a round trip to each decision; instead the
//! offset between the two clocks is measured at start (against the midpoint of the query's round
//! trip) and again every [`RESYNC`], and the host's clock plus that offset is the reading. A
//! failed resync keeps the last offset (the store refuses calls anyway while it is unreachable).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use time::OffsetDateTime;

use crate::proxy::Clock;
use crate::store::{Store, StoreError};

/// A test hook: seconds added to this host's clock (a host whose clock is wrong). Read once at
/// start, logged loudly; with a PostgreSQL store it changes nothing the gate decides.
pub const TEST_OFFSET_VAR: &str = "CAJAGUARD_TEST_CLOCK_OFFSET_SECONDS";

/// How often the database's clock is measured again.
pub const RESYNC: Duration = Duration::from_secs(10);

/// This host's clock, shifted by [`TEST_OFFSET_VAR`] when it is set.
pub fn host_clock() -> Result<Clock, String> {
    let offset = match std::env::var(TEST_OFFSET_VAR) {
        Err(_) => 0,
        Ok(text) => {
            let seconds: i64 = text
                .trim()
                .parse()
                .map_err(|_| format!("{TEST_OFFSET_VAR} must be a whole number of seconds"))?;
            if seconds.abs() > 10 * 366 * 86_400 {
                return Err(format!("{TEST_OFFSET_VAR} is over ten years"));
            }
            tracing::warn!(
                seconds,
                "this host's clock is shifted for a test ({TEST_OFFSET_VAR})"
            );
            seconds
        }
    };
    let shift = time::Duration::seconds(offset);
    Ok(Arc::new(move || OffsetDateTime::now_utc() + shift))
}

/// The gate's clock over `store`: `host` itself for SQLite; for PostgreSQL, `host` corrected to
/// the database's clock and kept in sync by a thread of its own.
pub fn decision_clock(store: &Arc<Store>, host: Clock) -> Result<Clock, StoreError> {
    let Some(offset) = measure(store, &host)? else {
        return Ok(host);
    };
    let offset_us = Arc::new(AtomicI64::new(offset));
    let keeper = {
        let (store, host, offset_us) = (store.clone(), host.clone(), offset_us.clone());
        move || {
            loop {
                std::thread::sleep(RESYNC);
                match measure(&store, &host) {
                    Ok(Some(offset)) => offset_us.store(offset, Ordering::Relaxed),
                    Ok(None) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the database's clock; keeping the last offset")
                    }
                }
            }
        }
    };
    if std::thread::Builder::new()
        .name("db-clock".into())
        .spawn(keeper)
        .is_err()
    {
        tracing::warn!(
            "cannot start the database clock's sync thread; its offset stays as measured at start"
        );
    }
    Ok(Arc::new(move || {
        host() + time::Duration::microseconds(offset_us.load(Ordering::Relaxed))
    }))
}

/// Database clock minus host clock, in µs (`None` for SQLite).
fn measure(store: &Store, host: &Clock) -> Result<Option<i64>, StoreError> {
    let before = host();
    let Some(database) = store.database_now()? else {
        return Ok(None);
    };
    let after = host();
    let half_trip: time::Duration = (after - before) / 2_i32;
    let midpoint: OffsetDateTime = before + half_trip;
    let offset: i128 = (database - midpoint).whole_microseconds();
    Ok(Some(i64::try_from(offset).unwrap_or(if offset > 0 {
        i64::MAX
    } else {
        i64::MIN
    })))
}

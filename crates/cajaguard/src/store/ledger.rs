//! The spend ledger's arithmetic: one row per checkout (so one checkout's spend counts once, however
//! many attempts it takes) and the per-currency hourly buckets the window sum reads. The SQL lives
//! in the backends; what a reservation, a settlement or a release does to rows and buckets is here,
//! once.
//!
//! The window is read as every bucket whose hour starts at or after `floor((now - window) / 1 h)`.
//! The oldest of those buckets may be partly older than the window: counting all of it over-counts,
//! never under-counts, so a cap can only be reached early (fail closed), by at most one hour's spend.
//!
//! A ledger row counts its spend in the bucket of the hour it was reserved (`hour`), whatever happens
//! later: settling or releasing adjusts that same bucket, so the two never drift apart.
//!
//! A bucket's `settled + in_flight` is what the window counts; its `in_flight` holds amounts
//! counted at their reservation: the reservations in flight, and those the shop completed exactly
//! as reserved. Such a completion changes nothing the window counts, so it leaves the bucket
//! alone: the hour's bucket, which every gate of the currency writes, is not locked again by
//! every settlement (in the service throughput run, settlements waiting behind gates on it had
//! been a third of all the time PostgreSQL spent in statements). The settled / in-flight split a
//! status shows is read from the ledger's rows in flight ([`window_spend`]).

use std::collections::BTreeMap;
use std::time::Duration;

use cajaguard_core::effect::{CheckoutLedger, LedgerView};
use cajaguard_core::settle::Settlement;
use time::OffsetDateTime;

use super::tx::{GateKeys, GateReads, LedgerRow, ReleasedBy, Reservation, State, Tx, WindowCount};
use super::{StoreError, WindowSpend, micros};

const SECONDS_PER_HOUR: i64 = 3600;

impl LedgerRow {
    /// What this row adds to its bucket right now.
    fn counted(&self) -> i64 {
        match self.state {
            State::InFlight => self.reserved,
            State::Settled => self.charged.unwrap_or(self.reserved),
            State::Released => 0,
        }
    }
}

/// The bucket account an agent's own spend in `currency` is kept under (SPEC §13), beside the
/// currency's global account (the bare code): `USD/ci-bot`. Agent ids never hold `/` and currency
/// codes are three letters, so no account reads as another; both are changed in the same
/// transaction, under the same currency lock.
pub(super) fn agent_account(currency: &str, agent: &str) -> String {
    format!("{currency}/{agent}")
}

/// The agent a bucket account belongs to, or `None` for a currency's global account.
pub(super) fn account_agent(account: &str) -> Option<(&str, &str)> {
    account.split_once('/')
}

/// What one write did to the window sums: `delta` added to `settled + in_flight` of `account`'s
/// bucket of `hour`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bump {
    pub account: String,
    pub hour: i64,
    pub delta: i64,
}

/// `reads` as the gate would read them after `bumps`, which this transaction made and its reads
/// did not see: the window sums (over `keys`' accounts and window) with the bumps counted. A
/// batch's gates are read together, before the first is decided (`gate::batch`).
pub(super) fn count_bumps(reads: &mut GateReads, keys: &GateKeys<'_>, bumps: &[Bump]) {
    for bump in bumps.iter().filter(|b| b.hour >= keys.from_hour) {
        if bump.account == keys.currency {
            reads.window_sum = reads.window_sum.saturating_add(bump.delta);
        }
        if keys.agent_account == Some(bump.account.as_str()) {
            reads.agent_window_sum = reads.agent_window_sum.saturating_add(bump.delta);
        }
    }
}

/// What one transaction adds to one bucket: `settled` and `in_flight` minor units to `account`'s
/// bucket of `hour`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Change {
    account: String,
    hour: i64,
    settled: i64,
    in_flight: i64,
}

/// The changes to the currency's account and, for an agent's row, to the agent's as well.
fn account_changes(
    currency: &str,
    agent: Option<&str>,
    hour: i64,
    settled: i64,
    in_flight: i64,
) -> Result<Vec<Change>, StoreError> {
    // A shop's charged currency reaches here too: one holding `/` would write into an agent's
    // account. Refused: the settlement fails and the reservation stays counted (fail closed).
    if currency.contains('/') {
        return Err(StoreError::Inconsistent(format!(
            "the currency {:?} cannot be counted: a currency code holds no `/`",
            cajaguard_core::display::name(currency)
        )));
    }
    let change = |account: String| Change {
        account,
        hour,
        settled,
        in_flight,
    };
    let mut changes = vec![change(currency.to_owned())];
    if let Some(agent) = agent {
        changes.push(change(agent_account(currency, agent)));
    }
    Ok(changes)
}

/// Writes `changes` to the buckets as [`in_lock_order`] gives them; returns what the writes did
/// to the window sums.
fn write_changes(tx: &mut dyn Tx, changes: Vec<Change>) -> Result<Vec<Bump>, StoreError> {
    let writes = in_lock_order(changes);
    let mut bumps = Vec::with_capacity(writes.len());
    for change in writes {
        tx.bump(
            &change.account,
            change.hour,
            change.settled,
            change.in_flight,
        )?;
        bumps.push(Bump {
            delta: change.settled.saturating_add(change.in_flight),
            account: change.account,
            hour: change.hour,
        });
    }
    Ok(bumps)
}

/// One write per bucket, in (account, hour) order by bytes: the order in which every
/// transaction writes buckets and a turn of gates locks them (`GATE_LOCKS_BATCH`, `COLLATE
/// "C"`), so no two bucket writers wait for each other in a cycle, whatever currencies and hours
/// they touch (a checkout re-reserved in another currency, a charge in another currency, an
/// earlier attempt reserved in a later hour by a clock set back). Changes to one bucket are added
/// up; a bucket whose sum is nothing is left alone.
fn in_lock_order(mut changes: Vec<Change>) -> Vec<Change> {
    changes.sort_by(|a, b| (a.account.as_str(), a.hour).cmp(&(b.account.as_str(), b.hour)));
    let mut merged: Vec<Change> = Vec::with_capacity(changes.len());
    for change in changes {
        match merged.last_mut() {
            Some(last) if last.account == change.account && last.hour == change.hour => {
                last.settled = last.settled.saturating_add(change.settled);
                last.in_flight = last.in_flight.saturating_add(change.in_flight);
            }
            _ => merged.push(change),
        }
    }
    merged.retain(|change| change.settled != 0 || change.in_flight != 0);
    merged
}

pub(super) fn hour_of(at: OffsetDateTime) -> i64 {
    at.unix_timestamp().div_euclid(SECONDS_PER_HOUR)
}

/// The first bucket inside the window (see the module comment for why it may start early).
pub(super) fn window_start_hour(window: Duration, now: OffsetDateTime) -> i64 {
    let window_secs = i64::try_from(window.as_secs()).unwrap_or(i64::MAX);
    now.unix_timestamp()
        .saturating_sub(window_secs)
        .div_euclid(SECONDS_PER_HOUR)
}

/// The view `decide` gets, from the gate's reads: the window's spend in `currency` without this
/// checkout's own entry (globally, and for `agent`'s own account), and this checkout's state.
pub(super) fn view(
    reads: &GateReads,
    currency: &str,
    agent: Option<&str>,
    from_hour: i64,
) -> Result<LedgerView, StoreError> {
    let mut window_spent = reads.window_sum;
    let mut agent_window_spent = if agent.is_some() {
        reads.agent_window_sum
    } else {
        0
    };
    let checkout = match &reads.row {
        None => CheckoutLedger::Fresh,
        Some(row) => {
            if row.currency == currency && row.hour >= from_hour {
                window_spent -= row.counted();
                if agent.is_some() && row.agent.as_deref() == agent {
                    agent_window_spent -= row.counted();
                }
            }
            match row.state {
                State::Released => CheckoutLedger::Fresh,
                State::InFlight => CheckoutLedger::InFlight {
                    digest: row
                        .digest
                        .as_deref()
                        .and_then(cajaguard_core::approval::BasketDigest::from_hex),
                    idempotency_key: row.idempotency_key.clone(),
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
        agent_window_spent,
        checkout,
        frozen: super::freeze::of_row(reads.frozen.clone())?,
    })
}

/// Settled and in-flight spend per bucket account (a currency, or an agent's `CUR/agent`) over the
/// buckets from `from_hour` on. In flight: the reserved amounts of the ledger's rows in flight in
/// those hours; settled: the rest of what the buckets count (see the module comment).
pub(super) fn window_spend(
    tx: &mut dyn Tx,
    from_hour: i64,
) -> Result<BTreeMap<String, WindowSpend>, StoreError> {
    let mut counted = BTreeMap::new();
    let mut in_flight: BTreeMap<String, i64> = BTreeMap::new();
    let mut add = |account: String, amount: i64| {
        let sum = in_flight.entry(account).or_default();
        *sum = sum.saturating_add(amount);
    };
    for count in tx.window_counts(from_hour)? {
        match count {
            WindowCount::Counted { account, amount } => {
                counted.insert(account, amount);
            }
            WindowCount::InFlight {
                currency,
                agent,
                amount,
            } => {
                if let Some(agent) = agent {
                    add(agent_account(&currency, &agent), amount);
                }
                add(currency, amount);
            }
        }
    }
    Ok(counted
        .into_iter()
        .map(|(account, counted)| {
            let flying = in_flight.get(&account).copied().unwrap_or(0);
            let spend = WindowSpend {
                settled: counted.saturating_sub(flying),
                in_flight: flying,
            };
            (account, spend)
        })
        .collect())
}

/// Reserves `r.total` for the checkout, replacing an earlier attempt's reservation (so the checkout
/// still counts once). A settled checkout is never replaced: its spend happened. `old` is the
/// checkout's row as this transaction read it, under the checkout's lock. Returns what it did to
/// the window sums.
pub(super) fn reserve(
    tx: &mut dyn Tx,
    old: Option<&LedgerRow>,
    r: &Reservation<'_>,
    now: OffsetDateTime,
) -> Result<Vec<Bump>, StoreError> {
    if r.total < 0 {
        return Err(StoreError::Inconsistent(format!(
            "the gate asked to reserve a negative total ({}) for checkout {}",
            r.total, r.checkout_id
        )));
    }
    let mut r = *r;
    let hour = hour_of(now);
    let mut changes = account_changes(r.currency, r.agent, hour, 0, r.total)?;
    if let Some(old) = old {
        r.revisit = old.revisit;
        match old.state {
            State::Settled => {
                return Err(StoreError::Inconsistent(format!(
                    "the gate asked to reserve checkout {} again, but it is already settled",
                    r.checkout_id
                )));
            }
            // The earlier attempt's reservation is released in the same writes.
            State::InFlight => changes.extend(account_changes(
                &old.currency,
                old.agent.as_deref(),
                old.hour,
                0,
                -old.reserved,
            )?),
            State::Released => {}
        }
    }
    tx.put_reservation(&r, hour, micros(now))?;
    write_changes(tx, changes)
}

/// A retry is forwarded without a new reservation, so the one it rides on must be there. Its
/// `reserved_at` moves to `now`: reconciliation releases only reservations whose last forward is
/// older than twice the shop timeout, and this retry is a forward a live proxy is waiting on.
pub(super) fn check_retry(
    tx: &mut dyn Tx,
    checkout_id: &str,
    idempotency_key: &str,
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    match tx.ledger_row(checkout_id)? {
        Some(row) if row.state == State::InFlight && row.idempotency_key == idempotency_key => {
            tx.touch_reservation(checkout_id, micros(now))
        }
        _ => Err(StoreError::Inconsistent(format!(
            "the gate called a retry of checkout {checkout_id}, but no reservation with that idempotency key is in flight"
        ))),
    }
}

/// Ends the checkout's reservation as `settlement` says, and with it the checkout's claim
/// (SPEC §4 step 3a: a claim lasts until the payment settles; an unknown outcome keeps both).
/// The caller appends the settlement's audit record in the same transaction.
///
/// `forwarded_at`: when the caller's own attempt was forwarded. A release applies only if the
/// row was last forwarded then: a retry forwarded since (the same payment, still at the shop) makes
/// this attempt's refusal say nothing, and the reservation stays. A completion that differs from
/// the quote freezes payments in the same transaction.
#[allow(clippy::too_many_arguments)]
pub(super) fn settle(
    tx: &mut dyn Tx,
    checkout_id: &str,
    idempotency_key: &str,
    settlement: &Settlement,
    released_by: ReleasedBy,
    forwarded_at: Option<OffsetDateTime>,
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    tx.lock_checkout(checkout_id)?;
    // Everything read before any write, so the writes (and the audit record the caller appends)
    // go out with COMMIT, and the buckets they lock are held only while the server applies them.
    let reads = tx.checkout_reads(checkout_id, None)?;
    let Some(row) = reads.row else {
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
    if *settlement == Settlement::Released
        && forwarded_at.is_some_and(|at| micros(at) != row.reserved_at_us)
    {
        tracing::warn!(
            checkout_id,
            "a refused attempt was retried since; the reservation stays until the retry's outcome is known"
        );
        return Ok(());
    }
    if let Settlement::Completed(charge) = settlement
        && charge.differs()
        && row.state != State::Settled
    {
        let reason = format!(
            "charged_differs on {}: {}",
            cajaguard_core::display::detail(checkout_id),
            charge.differs.join(", ")
        );
        tx.freeze_put(micros(now), &reason)?;
        // Gates act on the freeze: it must not be lost to a power cut.
        tx.durable_on_commit();
    }
    let agent = row.agent.as_deref();
    match (settlement, row.state) {
        (Settlement::Unknown, _) => return Ok(()),
        (Settlement::Completed(charge), State::InFlight | State::Released) => {
            // Released then completed: the shop charged after all, so the spend counts again.
            let in_flight = if row.state == State::InFlight {
                -row.reserved
            } else {
                0
            };
            // Charged in another currency: the reservation leaves its currency's window and the
            // charge counts in the charged one, in the same hour.
            let charged_in = charge.currency.as_deref().unwrap_or(&row.currency);
            let as_reserved = row.state == State::InFlight
                && charged_in == row.currency
                && charge.amount == row.reserved;
            if row.state == State::Released {
                // Spend counted again: lost to a power cut, it would be uncounted, and only a
                // reconciliation's own releases are revisited.
                tx.durable_on_commit();
            }
            // As reserved, the bucket already counts it (see the module comment).
            if !as_reserved {
                let mut changes = account_changes(&row.currency, agent, row.hour, 0, in_flight)?;
                changes.extend(account_changes(
                    charged_in,
                    agent,
                    row.hour,
                    charge.amount,
                    0,
                )?);
                write_changes(tx, changes)?;
            }
            tx.mark_settled(checkout_id, charge.amount, charged_in, micros(now))?;
        }
        (Settlement::Completed(charge), State::Settled) => {
            if Some(charge.amount) != row.charged {
                tracing::warn!(
                    checkout_id,
                    "a second, different completion for a settled checkout; kept the first"
                );
            }
        }
        (Settlement::Released, State::InFlight) => {
            write_changes(
                tx,
                account_changes(&row.currency, agent, row.hour, 0, -row.reserved)?,
            )?;
            tx.mark_released(checkout_id, micros(now), released_by)?;
        }
        (Settlement::Released, State::Settled) => {
            tracing::warn!(
                checkout_id,
                "a release for a settled checkout; settled spend is never released"
            );
        }
        (Settlement::Released, State::Released) => {}
    }
    // Only this payment's claim: another attempt may have claimed the checkout since a release.
    match reads.claim {
        Some(claim) if claim.idempotency_key == idempotency_key => tx.claim_delete(checkout_id),
        _ => Ok(()),
    }
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

    /// (account, hour, settled, in_flight) of each bucket write, in the order made.
    fn writes(changes: Vec<Change>) -> Vec<(String, i64, i64, i64)> {
        in_lock_order(changes)
            .into_iter()
            .map(|c| (c.account, c.hour, c.settled, c.in_flight))
            .collect()
    }

    fn changes(parts: &[(&str, Option<&str>, i64, i64, i64)]) -> Vec<Change> {
        parts
            .iter()
            .flat_map(|&(currency, agent, hour, settled, in_flight)| {
                account_changes(currency, agent, hour, settled, in_flight).unwrap()
            })
            .collect()
    }

    #[test]
    fn two_gates_crossing_currencies_write_their_buckets_in_one_order() {
        // A gate holding EUR's lock re-reserves a checkout reserved in USD, and one holding
        // USD's re-reserves one reserved in EUR. Written as made (the release first), each
        // would hold the other's first bucket while waiting for its own second: a deadlock.
        let eur_gate = changes(&[
            ("EUR", Some("a"), 10, 0, 900),
            ("USD", Some("a"), 10, 0, -1000),
        ]);
        let usd_gate = changes(&[
            ("USD", Some("b"), 10, 0, 1000),
            ("EUR", Some("b"), 10, 0, -900),
        ]);
        let order = |w: Vec<(String, i64, i64, i64)>| -> Vec<String> {
            w.into_iter().map(|(account, ..)| account).collect()
        };
        assert_eq!(order(writes(eur_gate)), ["EUR", "EUR/a", "USD", "USD/a"]);
        assert_eq!(order(writes(usd_gate)), ["EUR", "EUR/b", "USD", "USD/b"]);
    }

    #[test]
    fn an_earlier_attempt_in_a_later_hour_is_still_written_in_hour_order() {
        // The clock went back across an hour: the release is of hour 11, the reservation in 10.
        let gate = changes(&[("USD", None, 10, 0, 500), ("USD", None, 11, 0, -500)]);
        assert_eq!(
            writes(gate),
            [("USD".into(), 10, 0, 500), ("USD".into(), 11, 0, -500)]
        );
    }

    #[test]
    fn one_buckets_changes_are_one_write_and_none_when_they_cancel() {
        // A settlement of a reservation of 1000 charged 1200, in the same currency.
        let settled = changes(&[
            ("USD", Some("a"), 10, 0, -1000),
            ("USD", Some("a"), 10, 1200, 0),
        ]);
        assert_eq!(
            writes(settled),
            [
                ("USD".into(), 10, 1200, -1000),
                ("USD/a".into(), 10, 1200, -1000)
            ]
        );
        // A new attempt at the same total in the same hour changes no sum: nothing is written.
        let again = changes(&[("USD", None, 10, 0, 700), ("USD", None, 10, 0, -700)]);
        assert_eq!(writes(again), []);
    }

    #[test]
    fn a_currency_with_a_slash_is_refused() {
        assert!(account_changes("USD/x", None, 10, 1, 0).is_err());
    }
}

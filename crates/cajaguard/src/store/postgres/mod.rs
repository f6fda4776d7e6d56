//! The shared backend: one PostgreSQL database for every host. The ledger, the hourly buckets,
//! pending requests, the signed approvals themselves, their use and the audit log all live in it,
//! so a request blocked on one host can be approved from another and the approval is honoured on
//! every host, exactly once.
//!
//! **Locks, not SERIALIZABLE.** Transactions run at READ COMMITTED. A gate transaction first
//! takes its currency's advisory lock (migration 0006; before it, a row of `currency_locks`), then
//! reads the buckets and locks the checkout's ledger row (`FOR UPDATE`), calls the pure
//! `decide`, writes the effect and the audit row, and commits. Two hosts deciding in one currency
//! therefore take turns exactly like SQLite's `BEGIN IMMEDIATE` (each statement after the lock sees
//! everything committed before it), while different currencies never wait for each other. Under
//! SERIALIZABLE the same race would instead abort one side at commit (40001) after `decide` ran,
//! and under contention — the split-purchase race is all contention — most of the work would be
//! retried; a lock queue decides each call once. Settlements lock only the checkout's row and
//! change buckets by relative updates, so they never wait for a currency. Every transaction takes
//! its locks in one order (docs/ARCHITECTURE.md, "Lock order"; buckets in (account, hour) order,
//! `ledger::in_lock_order`), so deadlocks (40P01) are left only to rare rows outside it (a
//! passkey's counter); a transaction that hits one, or a serialization failure, is retried up to
//! [`ATTEMPTS`] times as a whole (`decide` is pure, so running it again is safe).
//!
//! **Connection loss fails closed.** Each store keeps a pool of up to 8 connections
//! (`connection::POOL_SIZE`), each opened with a bounded
//! [`CONNECT_TIMEOUT`]; a lost connection is dropped and the call is refused
//! ([`StoreError::Unavailable`]), unless it was lost before `COMMIT` went out (nothing applied),
//! when the transaction runs once more on a new one. A transaction whose commit was cut off may or
//! may not have committed: the caller refuses the call either way (nothing is forwarded), and a
//! reservation that did commit stays in flight, counting against the window (fail closed) until a
//! later call for that checkout replaces it.
//!
//! **Pipelined.** Statements whose results nobody reads are queued and sent with the next one that
//! is read, in one round trip (`transaction.rs`); each connection runs on a current-thread tokio
//! runtime of its own, driven only while a call blocks on it, so the proxy's code has no async and
//! no `.await` inside the transaction (docs/DEPENDENCIES.md).
//!
//! `connection.rs` holds the connection and its failures, `transaction.rs` one transaction's
//! prepared statements, `statements.rs` the SQL, `migrations/` the schema. Without the `postgres`
//! feature (on by default) none of it is built: `missing.rs` stands in, and a config naming this
//! store is refused.

#[cfg(feature = "postgres")]
mod agents;
#[cfg(feature = "postgres")]
mod connection;
#[cfg(feature = "postgres")]
mod log;
#[cfg(feature = "postgres")]
mod migrations;
#[cfg(not(feature = "postgres"))]
mod missing;
#[cfg(feature = "postgres")]
mod passkeys;
#[cfg(feature = "postgres")]
mod statements;
#[cfg(all(test, feature = "postgres"))]
mod tests;
#[cfg(feature = "postgres")]
mod transaction;

#[cfg(feature = "postgres")]
pub use self::connection::CONNECT_TIMEOUT;
#[cfg(feature = "postgres")]
pub(super) use self::connection::{Postgres, detail};
#[cfg(not(feature = "postgres"))]
pub use self::missing::CONNECT_TIMEOUT;
#[cfg(not(feature = "postgres"))]
pub(super) use self::missing::{Error, Postgres, detail};
/// The client's error, kept whole in [`StoreError::Postgres`](super::StoreError::Postgres).
#[cfg(feature = "postgres")]
pub(super) use ::tokio_postgres::Error;

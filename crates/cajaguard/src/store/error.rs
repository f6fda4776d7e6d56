//! What can go wrong in the store, each with what to do next.

use std::path::PathBuf;

use super::BUSY_TIMEOUT;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the CajaGuard home {}: {source}; check that the path is right and that you own it", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the CajaGuard home {} is unsafe: {why}", path.display())]
    Unsafe { path: PathBuf, why: String },
    #[error("the store's database failed: {0}; the call was refused (nothing was forwarded)")]
    Database(#[from] rusqlite::Error),
    /// A statement failed on a live PostgreSQL connection. `target` names the database without
    /// user or password.
    #[error(
        "the PostgreSQL store {target} failed: {}; the call was refused (nothing was forwarded)",
        super::postgres::detail(source)
    )]
    Postgres {
        target: String,
        source: super::postgres::Error,
    },
    /// The PostgreSQL store cannot be reached (down, restarting, connection cut). Nothing was
    /// applied; the next call connects again.
    #[error(
        "the PostgreSQL store {store} is unreachable ({why}); the call was refused (nothing was forwarded); CajaGuard reconnects on the next call, check that the database is up"
    )]
    Unavailable { store: String, why: String },
    /// The `store` settings cannot be used (an unset `url_env` variable, a URL that does not
    /// parse). The message never holds the URL's password.
    #[error("the store setting is unusable: {0}")]
    Config(String),
    /// The home's audit log key cannot be read or made (the message says why and what to do).
    #[error("the audit log key: {0}")]
    LogKey(String),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The change was committed, but syncing the embedded store's WAL failed (now or earlier):
    /// it may not survive a power cut. Every later sync fails too, so nothing more is forwarded
    /// until the process restarts (`Sqlite::sync_wal`).
    #[error(
        "the change was made, but the disk did not confirm {} ({source}), so it may not survive a power cut; payments are refused until CajaGuard restarts: check the disk, then restart it",
        path.display()
    )]
    NotDurable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An approval with this request id and nonce is already filed; it is never overwritten.
    #[error(
        "an approval for {request_id} with this nonce is already filed; it was not overwritten"
    )]
    ApprovalExists { request_id: String },
    /// Another process held the lock the call needed past [`BUSY_TIMEOUT`]. Nothing was applied;
    /// retrying later is safe.
    #[error(
        "the store {store} stayed locked by another CajaGuard process for more than {} s; the call was refused (nothing was forwarded), retry it",
        BUSY_TIMEOUT.as_secs()
    )]
    Busy { store: String },
    /// The database was written by a newer CajaGuard (its schema version is unknown here).
    #[error(
        "the store {store} has schema version {found}, this CajaGuard knows up to {known}; use the newer cajaguard binary or another store"
    )]
    Incompatible {
        store: String,
        found: i64,
        known: i64,
    },
    /// The payment's claim on its checkout was taken over (it had looked abandoned) before the gate
    /// decided. Nothing was applied or forwarded; the payment may be sent again.
    #[error(
        "this payment's claim on the checkout was taken over by another attempt before the gate decided; nothing was forwarded, send it again"
    )]
    ClaimLost,
    /// An unfreeze names a freeze that is no longer the one in force (already lifted, or frozen
    /// again since). Nothing was changed.
    #[error(
        "the unfreeze names a freeze that is not the one in force; run `cajaguard status` and unfreeze again"
    )]
    NotThatFreeze,
    /// The database holds something that cannot be (a bad value, or an effect that contradicts the
    /// ledger). Nothing was applied; the call was refused.
    #[error(
        "the store is inconsistent: {0}; the call was refused (nothing was forwarded); please report this"
    )]
    Inconsistent(String),
    /// A passkey registration or removal the rules refuse; the message says why and what to do.
    #[error("{0}")]
    PasskeyRefused(&'static str),
}

impl StoreError {
    /// The same error again when it may be the store's rather than one call's (the store stayed
    /// locked, or cannot be reached): a turn that met it, and whose first gate meets it again on
    /// its own, answers the rest with it instead of making each wait it out (`gate::queue`).
    pub(super) fn for_every_gate(&self) -> Option<StoreError> {
        match self {
            StoreError::Busy { store } => Some(StoreError::Busy {
                store: store.clone(),
            }),
            StoreError::Unavailable { store, why } => Some(StoreError::Unavailable {
                store: store.clone(),
                why: why.clone(),
            }),
            _ => None,
        }
    }

    /// What to do next, for the CLI; `None` when the message already says it.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            StoreError::Open { .. }
            | StoreError::Unavailable { .. }
            | StoreError::Busy { .. }
            | StoreError::Incompatible { .. }
            | StoreError::Inconsistent(_)
            | StoreError::ClaimLost
            | StoreError::NotThatFreeze
            | StoreError::PasskeyRefused(_)
            | StoreError::NotDurable { .. }
            | StoreError::LogKey(_) => None,
            StoreError::Unsafe { .. } => {
                Some("make the home a directory you own that no other user can write (chmod 700)")
            }
            StoreError::Database(_) => Some(
                "check that the disk has space and that you own the home's files, then run again",
            ),
            StoreError::Postgres { .. } => Some(
                "check the PostgreSQL server's log and the store user's rights, then run again",
            ),
            StoreError::Config(_) => Some("fix store.url or store.url_env in the config"),
            StoreError::Write { .. } => {
                Some("check that the disk has space and that you own the home, then run again")
            }
            StoreError::ApprovalExists { .. } => {
                Some("run the command again: each approval gets a fresh nonce")
            }
        }
    }

    /// A row that cannot be read back as its columns' types say (SQLite keeps what it is given):
    /// for `audit verify`, an altered row, not a failing store.
    pub fn is_unreadable_row(&self) -> bool {
        matches!(
            self,
            StoreError::Database(
                rusqlite::Error::FromSqlConversionFailure(..)
                    | rusqlite::Error::InvalidColumnType(..)
                    | rusqlite::Error::IntegralValueOutOfRange(..)
            )
        )
    }

    /// What an agent is told when the store failed its call: what kind of failure and what to
    /// do, without the database's address, the home's path or the driver's words. Those are the
    /// operator's, and go to the log: an agent of the service is not told where the gate's state
    /// lives.
    pub fn for_agent(&self) -> &'static str {
        match self {
            StoreError::Unavailable { .. } => {
                "the gate's store is unreachable (the operator's log says why); retry later"
            }
            StoreError::Busy { .. } => "the gate's store stayed busy; retry",
            StoreError::ClaimLost => {
                "another attempt took over this checkout's claim; send the payment again"
            }
            _ => "the gate's store failed (the operator's log says why); retry later",
        }
    }

    /// The message already says what to do, so the CLI adds no hint that repeats it.
    pub fn says_what_to_do(&self) -> bool {
        self.hint().is_none()
    }
}

//! Versioned migrations, applied when a store opens. Each runs in its own transaction together with
//! its row in `schema_migrations`, under a transaction-scoped advisory lock, so any number of
//! CajaGuard processes starting at once apply each migration exactly once and never see half of one.

use tokio_postgres::Client;

use crate::store::StoreError;

/// (version, name, SQL), in order. Never edit an applied migration: add the next one.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("migrations/0001_init.sql")),
    (
        2,
        "claims_freeze",
        include_str!("migrations/0002_claims_freeze.sql"),
    ),
    (3, "passkeys", include_str!("migrations/0003_passkeys.sql")),
    (
        4,
        "audit_log",
        include_str!("migrations/0004_audit_log.sql"),
    ),
    (5, "agents", include_str!("migrations/0005_agents.sql")),
    (
        6,
        "currency_advisory_lock",
        include_str!("migrations/0006_currency_advisory_lock.sql"),
    ),
    (
        7,
        "log_append_in_database",
        include_str!("migrations/0007_log_append_in_database.sql"),
    ),
    (
        8,
        "made_for_agent",
        include_str!("migrations/0008_made_for_agent.sql"),
    ),
    (
        9,
        "pending_by_checkout",
        include_str!("migrations/0009_pending_by_checkout.sql"),
    ),
    (
        10,
        "claim_token",
        include_str!("migrations/0010_claim_token.sql"),
    ),
];

/// The latest version this build knows.
pub(super) fn known() -> i64 {
    MIGRATIONS.last().map_or(0, |(v, _, _)| *v)
}

// The advisory lock is keyed by the schema's name, so stores in different schemas of one database
// (as the tests use) do not wait for each other.
const LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtext('cajaguard-migrate:' || current_schema()))";

pub(super) async fn migrate(client: &mut Client, target: &str) -> Result<(), StoreError> {
    let pg = |source| StoreError::Postgres {
        target: target.to_owned(),
        source,
    };
    for (version, name, sql) in MIGRATIONS {
        let tx = client.transaction().await.map_err(pg)?;
        tx.batch_execute(LOCK).await.map_err(pg)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version    BIGINT PRIMARY KEY,
                 name       TEXT NOT NULL,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
             )",
        )
        .await
        .map_err(pg)?;
        let latest: i64 = tx
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                &[],
            )
            .await
            .map_err(pg)?
            .try_get(0)
            .map_err(pg)?;
        if latest > known() {
            return Err(StoreError::Incompatible {
                store: target.to_owned(),
                found: latest,
                known: known(),
            });
        }
        if latest >= *version {
            tx.commit().await.map_err(pg)?;
            continue;
        }
        tx.batch_execute(sql).await.map_err(pg)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await
        .map_err(pg)?;
        tx.commit().await.map_err(pg)?;
        tracing::info!(store = target, version, name, "applied a store migration");
    }
    Ok(())
}

//! PostgreSQL for the tests: `CAJAGUARD_TEST_POSTGRES_URL` names a server and a database the tests
//! may create schemas (and databases) in. Without it, PostgreSQL tests print a notice and pass
//! without running, so a fresh clone's `cargo test` needs no database; `.ci/run` always sets it.
//!
//! Each test gets its own schema (tests run in parallel), reached through a URL whose `options`
//! set `search_path`, and dropped when the test ends — or its own database, for tests that make
//! the database unavailable.

use std::sync::atomic::{AtomicU64, Ordering};

pub const ENV: &str = "CAJAGUARD_TEST_POSTGRES_URL";

pub fn base_url() -> Option<String> {
    std::env::var(ENV).ok().filter(|v| !v.trim().is_empty())
}

/// A name no other test, process or earlier run uses.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut random = [0_u8; 4];
    getrandom::fill(&mut random).unwrap();
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        hex::encode(random)
    )
}

pub fn notice(test: &str) {
    eprintln!("skipped {test}: {ENV} is not set (PostgreSQL tests run in CI, see .ci/run)");
}

pub fn client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).unwrap()
}

/// `url` with one more query parameter (percent-encoded: libpq-style parsers do not read `+` as
/// a space).
pub fn with_param(url: &str, key: &str, value: &str) -> String {
    let encoded: String = value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{key}={encoded}")
}

/// `url` naming another database.
pub fn with_database(url: &str, database: &str) -> String {
    let mut parsed = url::Url::parse(url).unwrap();
    parsed.set_path(&format!("/{database}"));
    parsed.to_string()
}

/// A fresh schema, dropped with everything in it when this is dropped.
pub struct Schema {
    pub name: String,
    base: String,
    /// The base URL with `search_path` set to this schema and an `application_name` naming it
    /// (so a test can find and cut this store's connections).
    pub url: String,
}

impl Schema {
    pub fn create(base: &str) -> Schema {
        let name = unique("cg_test");
        client(base)
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .unwrap();
        let url = with_param(base, "options", &format!("-c search_path={name}"));
        let url = with_param(&url, "application_name", &name);
        Schema {
            name,
            base: base.to_owned(),
            url,
        }
    }

    /// A client on this schema.
    pub fn client(&self) -> postgres::Client {
        client(&self.url)
    }

    /// Cuts every connection a store opened on this schema, as a database restart would.
    pub fn terminate_connections(&self) -> u64 {
        let mut admin = client(&self.base);
        let rows = admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                &[&self.name],
            )
            .unwrap();
        rows.len() as u64
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ = admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}

/// A fresh database on the same server, dropped (its connections cut) when this is dropped.
pub struct Database {
    pub name: String,
    base: String,
    pub url: String,
}

impl Database {
    pub fn create(base: &str) -> Database {
        let name = unique("cg_test_db");
        client(base)
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        Database {
            url: with_database(base, &name),
            name,
            base: base.to_owned(),
        }
    }

    /// Refuses new connections and cuts the existing ones: to its clients the database is down
    /// (the server itself, which other tests use, stays up).
    pub fn take_down(&self) {
        let mut admin = client(&self.base);
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {} ALLOW_CONNECTIONS false",
                self.name
            ))
            .unwrap();
        admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                &[&self.name],
            )
            .unwrap();
    }

    pub fn bring_up(&self) {
        client(&self.base)
            .batch_execute(&format!(
                "ALTER DATABASE {} ALLOW_CONNECTIONS true",
                self.name
            ))
            .unwrap();
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// A fresh schema when a server is configured; else `None`, after a notice naming `test`.
pub fn schema_or_notice(test: &str) -> Option<Schema> {
    match base_url() {
        Some(base) => Some(Schema::create(&base)),
        None => {
            notice(test);
            None
        }
    }
}

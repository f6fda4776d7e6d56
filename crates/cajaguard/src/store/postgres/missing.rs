//! What stands in for the PostgreSQL store in a build without the `postgres` feature: types that
//! cannot be made, so every path through them is statically dead, and an `open` that refuses.

use std::time::Duration;

use cajaguard_core::approval::ApprovalDocument;

use crate::store::StoreError;
use crate::store::tx::Tx;

/// As with the feature, so that messages quoting it read the same.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What a config naming a PostgreSQL store is told by a build that cannot open one.
pub const MISSING_FEATURE: &str = "this cajaguard was built without the `postgres` feature, so it cannot use the PostgreSQL store the config names (store.url or store.url_env); install a build with the default features (`cargo install cajaguard`), or remove `store` to use the SQLite store in `home`";

/// No PostgreSQL error can happen without a client.
#[derive(Debug)]
pub enum Error {}

impl std::fmt::Display for Error {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {}
    }
}

impl std::error::Error for Error {}

pub fn detail(e: &Error) -> String {
    match *e {}
}

/// A connection that no build without the feature can have.
pub enum Postgres {}

impl Postgres {
    pub fn open(_url: &str) -> Result<Postgres, StoreError> {
        Err(StoreError::Config(MISSING_FEATURE.to_owned()))
    }

    pub fn target(&self) -> &str {
        match *self {}
    }

    pub fn run<T>(
        &self,
        _f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match *self {}
    }

    pub fn read<T>(
        &self,
        _f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match *self {}
    }

    pub fn run_unflushed<T>(
        &self,
        _f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match *self {}
    }

    pub fn write_approval(&self, _doc: &ApprovalDocument) -> Result<(), StoreError> {
        match *self {}
    }

    pub fn explain_window_query(&self, _from_hour: i64) -> Result<Vec<String>, StoreError> {
        match *self {}
    }

    pub fn database_now_us(&self) -> Result<i64, StoreError> {
        match *self {}
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use cajaguard_core::policy::{StoreConfig, StoreUrl};

    use super::*;
    use crate::store::Store;

    #[test]
    fn a_postgres_store_is_refused_with_the_missing_feature_named() {
        let config = StoreConfig::Postgres {
            url: StoreUrl::Literal(zeroize::Zeroizing::new(
                "postgres://cajaguard:secret@db.example:5432/cajaguard".to_owned(),
            )),
        };
        let Err(e) = Store::open_with(Path::new("/nonexistent"), &config) else {
            panic!("a build without the feature opened a PostgreSQL store");
        };
        assert!(matches!(e, StoreError::Config(_)), "{e}");
        assert!(e.to_string().contains("`postgres` feature"), "{e}");
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}

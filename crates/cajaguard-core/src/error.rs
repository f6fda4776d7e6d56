//! The one error type of the core crate. A refusal of a checkout is not an error: it is a
//! [`crate::verdict::Ruling`]. Errors here are bad configuration, bad key material and unreadable
//! approval files — things a person must fix.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config file is wrong. `json_path` is like `$.caps.USD.per_transaction`.
    #[error("{}: {json_path}: {message}", file.display())]
    Config {
        file: PathBuf,
        json_path: String,
        message: String,
    },

    /// A money string or currency code that cannot be used.
    #[error("{0}")]
    Money(String),

    /// A key that cannot be parsed (the message never contains key material).
    #[error("{0}")]
    Key(String),

    /// An agent id that cannot be used (SPEC §13).
    #[error("{0}")]
    Agent(String),

    /// An approval document that is not well formed (signature problems are rejections, not errors).
    #[error("{0}")]
    ApprovalFormat(String),
}

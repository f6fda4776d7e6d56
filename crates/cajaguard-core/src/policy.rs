//! The config file (SPEC §2), parsed once into a validated [`Policy`]. Nothing downstream re-validates.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Error;
use crate::money::Currency;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Test,
    Live,
}

/// Caps for one currency, in minor units. Invariant: `approval_above <= per_transaction <= window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub currency: Currency,
    pub approval_above: i64,
    pub per_transaction: i64,
    pub window: i64,
}

/// How to find the downstream program. A command with a slash was resolved against the config
/// file's directory; a bare name is resolved at the edge (next to the running executable, then `PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Path(PathBuf),
    Bare(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioDownstream {
    pub command: Command,
    pub args: Vec<String>,
    /// Resolved against the config file's directory; `None` means the config file's directory.
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownstreamTransport {
    Stdio(StdioDownstream),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downstream {
    pub transport: DownstreamTransport,
    /// `downstream.timeout_seconds`, default 30 s.
    pub timeout: Duration,
    /// `downstream.max_message_bytes`, default 4 MiB.
    pub max_message_bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// Paths of trusted public keys (`~` and relative paths already resolved). Loaded at the edge.
    pub trusted_keys: Vec<PathBuf>,
    pub max_ttl: Duration,
}

#[derive(Debug, Clone)]
pub struct TestModePolicy {
    pub handler_ids: BTreeSet<String>,
    pub token_pattern: regex::Regex,
}

#[derive(Debug, Clone)]
pub struct Policy {
    /// The config file this came from (absolute), for messages such as `cajaguard approve ID --config FILE`.
    pub source: PathBuf,
    pub mode: Mode,
    /// The state directory, resolved.
    pub home: PathBuf,
    pub downstream: Downstream,
    /// Lower-case hosts, matched exactly.
    pub merchants: BTreeSet<String>,
    /// Keyed by currency code (`"USD"`).
    pub caps: BTreeMap<String, Caps>,
    pub window: Duration,
    pub approvals: ApprovalPolicy,
    pub test_mode: TestModePolicy,
}

/// Where a config came from: its absolute path (relative paths in it resolve against its directory)
/// and the user's home directory for `~` (`None`: a `~` in the config is an error).
#[derive(Debug, Clone)]
pub struct ConfigOrigin<'a> {
    pub path: &'a Path,
    pub user_home: Option<&'a Path>,
}

impl Policy {
    /// Parses and validates a config file's text. Every error is [`Error::Config`] naming the file,
    /// the JSON path and what is wrong. Unknown fields are errors.
    pub fn parse(text: &str, origin: &ConfigOrigin<'_>) -> Result<Policy, Error> {
        todo!("{text} {origin:?}")
    }

    pub fn caps_for(&self, currency_code: &str) -> Option<&Caps> {
        self.caps.get(currency_code)
    }
}

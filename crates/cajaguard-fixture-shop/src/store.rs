//! The shop's state directory: `state.json` (checkouts, carts, orders, idempotency records),
//! `calls.jsonl` (one line per `tools/call` received) and `sessions.jsonl` (one line per
//! `initialize`, with the negotiated protocol version).
//!
//! Every call runs under an exclusive lock on `DIR/.lock`, so several processes sharing one
//! directory see each other's checkouts and never corrupt the state. `state.json` is replaced
//! atomically (write a temp file, fsync it, rename it over the old one, fsync the directory).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

const STATE_FILE: &str = "state.json";
const LOCK_FILE: &str = ".lock";
pub const CALLS_FILE: &str = "calls.jsonl";
pub const SESSIONS_FILE: &str = "sessions.jsonl";

/// One line of a checkout or cart, resolved against the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub line_id: String,
    /// The item id exactly as the platform sent it (product id, variant id or slug).
    pub item_id: String,
    pub slug: String,
    pub quantity: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkout {
    pub n: u64,
    pub merchant: String,
    pub currency: String,
    pub lines: Vec<Line>,
    /// `incomplete`, `ready_for_complete`, `completed` or `canceled` (the first two are
    /// recomputed on every change).
    pub status: String,
    /// Payment instruments as the platform sent them, without their credentials.
    pub instruments: Vec<Value>,
    pub buyer: Option<Value>,
    pub order_id: Option<String>,
    pub cart_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cart {
    pub n: u64,
    pub merchant: String,
    pub currency: String,
    pub lines: Vec<Line>,
    pub buyer: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    pub n: u64,
    pub checkout_id: String,
    pub merchant: String,
    pub currency: String,
    pub lines: Vec<Line>,
}

/// What the shop answered to one call: a tool result, or a JSON-RPC error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    Result {
        structured: Value,
        is_error: bool,
    },
    RpcError {
        code: i32,
        message: String,
        data: Option<Value>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    pub tool: String,
    pub arguments: Value,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    pub next_checkout: u64,
    pub next_cart: u64,
    pub next_order: u64,
    pub checkouts: BTreeMap<String, Checkout>,
    pub carts: BTreeMap<String, Cart>,
    pub orders: BTreeMap<String, Order>,
    pub idempotency: BTreeMap<String, IdempotencyRecord>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot use the state directory {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "{path} is not a valid fixture state file ({source}); move it away or use a fresh --state DIR"
    )]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Opens (and creates if missing) the state directory.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    fn lock(&self) -> Result<File, StoreError> {
        let path = self.dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        fs4::fs_std::FileExt::lock_exclusive(&file).map_err(io_err(&path))?;
        // The lock is released when the returned file is dropped (closed).
        Ok(file)
    }

    fn append_line(&self, name: &str, line: &Value) -> Result<(), StoreError> {
        let path = self.dir.join(name);
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io_err(&path))?;
        let mut text = line.to_string();
        text.push('\n');
        file.write_all(text.as_bytes()).map_err(io_err(&path))?;
        file.flush().map_err(io_err(&path))?;
        file.sync_data().map_err(io_err(&path))?;
        Ok(())
    }

    /// Records a session start (the protocol version the client negotiated).
    pub fn record_session(&self, protocol_version: &str, client: &Value) -> Result<(), StoreError> {
        let _lock = self.lock()?;
        self.append_line(
            SESSIONS_FILE,
            &json!({"protocol_version": protocol_version, "client": client, "at": unix_ms()}),
        )
    }

    /// Runs one tool call: under the lock, appends it to `calls.jsonl`, loads the state, runs
    /// `f`, and writes the state back atomically if `f` changed it.
    pub fn call<T>(
        &self,
        tool: &str,
        arguments: Option<&Map<String, Value>>,
        f: impl FnOnce(&mut State) -> T,
    ) -> Result<T, StoreError> {
        let _lock = self.lock()?;
        let args = arguments.map_or(Value::Null, |a| Value::Object(a.clone()));
        self.append_line(
            CALLS_FILE,
            &json!({"tool": tool, "arguments": args, "at": unix_ms()}),
        )?;
        let mut state = self.load()?;
        let before = state.clone();
        let out = f(&mut state);
        if state != before {
            self.save(&state)?;
        }
        Ok(out)
    }

    fn load(&self) -> Result<State, StoreError> {
        let path = self.dir.join(STATE_FILE);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt {
                path: path.clone(),
                source,
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(State::default()),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    fn save(&self, state: &State) -> Result<(), StoreError> {
        let path = self.dir.join(STATE_FILE);
        let tmp = self
            .dir
            .join(format!("{STATE_FILE}.tmp.{}", std::process::id()));
        let bytes = serde_json::to_vec_pretty(state).map_err(|source| StoreError::Corrupt {
            path: path.clone(),
            source,
        })?;
        {
            let mut file = File::create(&tmp).map_err(io_err(&tmp))?;
            file.write_all(&bytes).map_err(io_err(&tmp))?;
            file.sync_all().map_err(io_err(&tmp))?;
        }
        fs::rename(&tmp, &path).map_err(io_err(&path))?;
        // Make the rename itself durable.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(&self.dir))?;
        Ok(())
    }
}

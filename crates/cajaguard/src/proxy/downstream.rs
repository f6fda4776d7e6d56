//! The shop: a child process speaking MCP over stdio. Started on demand, initialized once, restarted
//! on the next call after it dies. Every call is bounded by the configured timeout and every message
//! from the shop by the configured size; a shop that breaks either is a failed call, never a hang.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cajaguard_core::policy::{self, Downstream as DownstreamPolicy, DownstreamTransport};
use serde_json::value::RawValue;

use super::era::{self, Era};
use super::jsonrpc::{self, Envelope, Line};

/// The protocol version the proxy asks the shop for; the shop may answer with another it speaks.
const PROTOCOL_VERSION: &str = "2025-11-25";

#[derive(Debug, thiserror::Error)]
pub enum ShopError {
    #[error("cannot start the shop `{}`: {source}; check downstream.command in the config", program.display())]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the shop `{0}` was not found next to cajaguard or on PATH; check downstream.command in the config"
    )]
    NotFound(String),
    #[error("the shop did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the shop stopped ({0}); it is restarted on the next call")]
    Died(String),
    #[error(
        "the shop sent a message over the {0}-byte limit (downstream.max_message_bytes); it was stopped"
    )]
    TooLarge(usize),
    #[error("the shop broke the MCP handshake: {0}")]
    Handshake(String),
}

impl ShopError {
    /// True when a request may have reached the shop and its effect is unknown.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            ShopError::Timeout(_) | ShopError::Died(_) | ShopError::TooLarge(_)
        )
    }
}

/// The shop's answer to one request.
#[derive(Debug)]
pub enum Reply {
    Result(Box<RawValue>),
    Error(Box<RawValue>),
}

/// What the proxy does with messages the shop sends on its own (notifications such as progress).
pub type NotificationSink = Arc<dyn Fn(&str) + Send + Sync>;

/// How to start the shop, resolved from the policy.
#[derive(Debug, Clone)]
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
}

impl Launch {
    /// Resolves `downstream.command`: a path as configured; a bare name next to the running
    /// executable (so the fixture is found in the same build folder), then on `PATH`.
    pub fn from_policy(downstream: &DownstreamPolicy) -> Result<Launch, ShopError> {
        let DownstreamTransport::Stdio(stdio) = &downstream.transport;
        let program = match &stdio.command {
            policy::Command::Path(path) => path.clone(),
            policy::Command::Bare(name) => find_bare(
                name,
                std::env::current_exe().ok().as_deref(),
                std::env::var_os("PATH"),
            )
            .ok_or_else(|| ShopError::NotFound(name.clone()))?,
        };
        Ok(Launch {
            program,
            args: stdio.args.clone(),
            cwd: stdio.cwd.clone(),
            env: stdio
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
    }
}

fn find_bare(name: &str, current_exe: Option<&Path>, path: Option<OsString>) -> Option<PathBuf> {
    let beside = current_exe.and_then(Path::parent).map(|dir| dir.join(name));
    let on_path = path
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(name));
    beside
        .into_iter()
        .chain(on_path)
        .find(|candidate| candidate.is_file())
}

/// The shop's identity after the handshake.
#[derive(Debug, Clone)]
pub struct Handshake {
    pub protocol_version: String,
    /// Legacy when the shop accepted `initialize`; modern when it only answers `server/discover`.
    pub era: Era,
    /// Every tool the shop lists, raw (unknown fields such as `execution` survive).
    pub tools: Vec<Box<RawValue>>,
}

pub struct Shop {
    launch: Launch,
    timeout: Duration,
    max_message_bytes: usize,
    notifications: NotificationSink,
    current: Mutex<Option<Arc<Connection>>>,
}

struct Connection {
    stdin: Mutex<ChildStdin>,
    child: Mutex<Child>,
    pending: Mutex<HashMap<u64, mpsc::Sender<Result<Reply, ShopError>>>>,
    next_id: AtomicU64,
    alive: AtomicBool,
    handshake: Mutex<Option<Handshake>>,
}

impl Shop {
    pub fn new(
        policy: &DownstreamPolicy,
        notifications: NotificationSink,
    ) -> Result<Shop, ShopError> {
        Ok(Shop {
            launch: Launch::from_policy(policy)?,
            timeout: policy.timeout,
            max_message_bytes: policy.max_message_bytes,
            notifications,
            current: Mutex::new(None),
        })
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The handshake of the running shop, starting it if needed.
    pub fn handshake(&self) -> Result<Handshake, ShopError> {
        let connection = self.connection()?;
        let handshake = lock(&connection.handshake).clone();
        handshake.ok_or_else(|| ShopError::Handshake("no handshake".into()))
    }

    /// Sends one request and waits for its answer, at most the configured timeout. `sent` is told
    /// the shop-side id once the request is written (for forwarding cancellations).
    pub fn request(
        &self,
        method: &str,
        params: Option<&str>,
        sent: &mut dyn FnMut(u64),
    ) -> Result<Reply, ShopError> {
        let connection = self.connection()?;
        let era = lock(&connection.handshake)
            .as_ref()
            .map_or(Era::Legacy, |h| h.era);
        let params = era::params_for_shop(era, params);
        let reply = connection.request(method, params.as_deref(), self.timeout, sent);
        if matches!(reply, Err(ShopError::Died(_) | ShopError::TooLarge(_))) {
            self.discard(&connection);
        }
        reply
    }

    /// Sends a notification (e.g. a cancellation) to the running shop, if any.
    pub fn notify(&self, line: &str) {
        let current = lock(&self.current).clone();
        if let Some(connection) = current
            && connection.alive.load(Ordering::Acquire)
        {
            let _ = connection.write(line);
        }
    }

    fn connection(&self) -> Result<Arc<Connection>, ShopError> {
        let mut current = lock(&self.current);
        if let Some(connection) = current.as_ref() {
            if connection.alive.load(Ordering::Acquire) {
                return Ok(connection.clone());
            }
            connection.kill();
        }
        *current = None;
        let connection = self.start()?;
        *current = Some(connection.clone());
        Ok(connection)
    }

    fn discard(&self, connection: &Arc<Connection>) {
        connection.kill();
        let mut current = lock(&self.current);
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, connection)) {
            *current = None;
        }
    }

    fn start(&self) -> Result<Arc<Connection>, ShopError> {
        let mut command = Command::new(&self.launch.program);
        command
            .args(&self.launch.args)
            .current_dir(&self.launch.cwd)
            .envs(self.launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command.spawn().map_err(|source| ShopError::Spawn {
            program: self.launch.program.clone(),
            source,
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(ShopError::Handshake("no pipes to the shop".into()));
        };
        let connection = Arc::new(Connection {
            stdin: Mutex::new(stdin),
            child: Mutex::new(child),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            alive: AtomicBool::new(true),
            handshake: Mutex::new(None),
        });
        let reader = connection.clone();
        let notifications = self.notifications.clone();
        let max = self.max_message_bytes;
        std::thread::Builder::new()
            .name("shop-reader".into())
            .spawn(move || {
                reader.read_loop(
                    BufReader::with_capacity(64 * 1024, stdout),
                    max,
                    &notifications,
                )
            })
            .map_err(|source| ShopError::Spawn {
                program: self.launch.program.clone(),
                source,
            })?;

        match self.initialize(&connection) {
            Ok(handshake) => {
                *lock(&connection.handshake) = Some(handshake);
                Ok(connection)
            }
            Err(e) => {
                connection.kill();
                Err(e)
            }
        }
    }

    /// `initialize` first (every shop of the 2025 eras); a shop that refuses it but answers
    /// `server/discover` with 2026-07-28 is spoken to in that era, with an envelope on every request.
    fn initialize(&self, connection: &Connection) -> Result<Handshake, ShopError> {
        let params = format!(
            r#"{{"protocolVersion":"{PROTOCOL_VERSION}","capabilities":{{}},"clientInfo":{}}}"#,
            era::client_info()
        );
        let answer = connection.request("initialize", Some(&params), self.timeout, &mut |_| {})?;
        let (protocol_version, shop_era) = match answer {
            Reply::Result(result) => {
                #[derive(serde::Deserialize)]
                struct Initialized {
                    #[serde(rename = "protocolVersion")]
                    protocol_version: String,
                }
                let initialized: Initialized = serde_json::from_str(result.get()).map_err(|e| {
                    ShopError::Handshake(format!("unreadable initialize result: {e}"))
                })?;
                connection
                    .write(&jsonrpc::notification("notifications/initialized", None))
                    .map_err(|e| ShopError::Died(e.to_string()))?;
                (initialized.protocol_version, Era::Legacy)
            }
            Reply::Error(_) => (self.discover(connection)?, Era::Modern),
        };
        let list = |params: Option<String>| {
            let params = era::params_for_shop(shop_era, params.as_deref());
            connection.request("tools/list", params.as_deref(), self.timeout, &mut |_| {})
        };

        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        // A shop that pages forever is cut off: 100 pages of tools is far beyond any real shop.
        for _ in 0..100 {
            let params = cursor
                .as_ref()
                .map(|c| format!(r#"{{"cursor":{}}}"#, jsonrpc::quote(c)));
            let Reply::Result(result) = list(params)? else {
                return Err(ShopError::Handshake("the shop refused tools/list".into()));
            };
            #[derive(serde::Deserialize)]
            struct Page {
                tools: Vec<Box<RawValue>>,
                #[serde(rename = "nextCursor", default)]
                next_cursor: Option<String>,
            }
            let page: Page = serde_json::from_str(result.get())
                .map_err(|e| ShopError::Handshake(format!("unreadable tools/list result: {e}")))?;
            tools.extend(page.tools);
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        Ok(Handshake {
            protocol_version,
            era: shop_era,
            tools,
        })
    }

    fn discover(&self, connection: &Connection) -> Result<String, ShopError> {
        let params = era::params_for_shop(Era::Modern, None);
        let answer = connection.request(
            "server/discover",
            params.as_deref(),
            self.timeout,
            &mut |_| {},
        )?;
        let refused =
            || ShopError::Handshake("the shop refused both initialize and server/discover".into());
        let Reply::Result(result) = answer else {
            return Err(refused());
        };
        #[derive(serde::Deserialize)]
        struct Discovered {
            #[serde(rename = "supportedVersions", default)]
            supported_versions: Vec<String>,
        }
        let discovered: Discovered = serde_json::from_str(result.get())
            .map_err(|e| ShopError::Handshake(format!("unreadable server/discover result: {e}")))?;
        if discovered
            .supported_versions
            .iter()
            .any(|v| v == era::MODERN_VERSION)
        {
            Ok(era::MODERN_VERSION.to_owned())
        } else {
            Err(ShopError::Handshake(format!(
                "the shop speaks none of the protocol versions CajaGuard knows ({:?})",
                discovered.supported_versions
            )))
        }
    }
}

impl Connection {
    fn request(
        &self,
        method: &str,
        params: Option<&str>,
        timeout: Duration,
        sent: &mut dyn FnMut(u64),
    ) -> Result<Reply, ShopError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        lock(&self.pending).insert(id, tx);
        // Checked after registering, so that a reader that just died has either drained us or is seen dead.
        if !self.alive.load(Ordering::Acquire) {
            lock(&self.pending).remove(&id);
            return Err(ShopError::Died("connection closed".into()));
        }
        if let Err(e) = self.write(&jsonrpc::request(id, method, params)) {
            lock(&self.pending).remove(&id);
            self.alive.store(false, Ordering::Release);
            return Err(ShopError::Died(e.to_string()));
        }
        sent(id);
        match rx.recv_timeout(timeout) {
            Ok(reply) => reply,
            Err(RecvTimeoutError::Timeout) => {
                lock(&self.pending).remove(&id);
                Err(ShopError::Timeout(timeout))
            }
            Err(RecvTimeoutError::Disconnected) => Err(ShopError::Died("connection closed".into())),
        }
    }

    fn write(&self, line: &str) -> std::io::Result<()> {
        let mut stdin = lock(&self.stdin);
        let mut buffer = Vec::with_capacity(line.len() + 1);
        buffer.extend_from_slice(line.as_bytes());
        buffer.push(b'\n');
        stdin.write_all(&buffer)?;
        stdin.flush()
    }

    fn read_loop(
        &self,
        mut reader: BufReader<std::process::ChildStdout>,
        max: usize,
        notifications: &NotificationSink,
    ) {
        let failure = loop {
            let line = match jsonrpc::read_line(&mut reader, max) {
                Ok(Line::Message(line)) => line,
                Ok(Line::TooLong) => break ShopError::TooLarge(max),
                Ok(Line::Eof) => break ShopError::Died("it closed its output".into()),
                Err(e) => break ShopError::Died(e.to_string()),
            };
            if line.trim().is_empty() {
                continue;
            }
            let Ok(envelope) = Envelope::parse(&line) else {
                tracing::warn!("the shop sent a line that is not JSON-RPC; ignored");
                continue;
            };
            match (&envelope.method, &envelope.id) {
                (None, Some(id)) => self.deliver(id, envelope.result, envelope.error),
                (Some(method), Some(id)) => self.answer_shop_request(method, id),
                (Some(_), None) => notifications(&line),
                (None, None) => {
                    tracing::warn!("the shop sent a message with neither id nor method; ignored")
                }
            }
        };
        self.alive.store(false, Ordering::Release);
        let waiting: Vec<_> = lock(&self.pending).drain().collect();
        for (_, tx) in waiting {
            let _ = tx.send(Err(clone_error(&failure)));
        }
        if matches!(failure, ShopError::TooLarge(_)) {
            self.kill();
        }
    }

    fn deliver(&self, id: &RawValue, result: Option<Box<RawValue>>, error: Option<Box<RawValue>>) {
        let Ok(id) = id.get().parse::<u64>() else {
            tracing::warn!("the shop answered an id the proxy never sent; ignored");
            return;
        };
        let Some(tx) = lock(&self.pending).remove(&id) else {
            return;
        };
        let reply = match (result, error) {
            (Some(result), None) => Ok(Reply::Result(result)),
            (_, Some(error)) => Ok(Reply::Error(error)),
            (None, None) => Err(ShopError::Handshake(
                "an answer with neither result nor error".into(),
            )),
        };
        let _ = tx.send(reply);
    }

    /// Requests from the shop to its client (sampling, elicitation, roots) are not offered through
    /// the gate; `ping` is answered so the shop does not think its client is gone.
    fn answer_shop_request(&self, method: &str, id: &RawValue) {
        let answer = if method == "ping" {
            jsonrpc::result(id, "{}")
        } else {
            jsonrpc::error(
                Some(id),
                jsonrpc::METHOD_NOT_FOUND,
                "not offered through CajaGuard",
            )
        };
        let _ = self.write(&answer);
    }

    fn kill(&self) {
        self.alive.store(false, Ordering::Release);
        let mut child = lock(&self.child);
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        if let Some(connection) = lock(&self.current).take() {
            connection.kill();
        }
    }
}

fn clone_error(e: &ShopError) -> ShopError {
    match e {
        ShopError::TooLarge(max) => ShopError::TooLarge(*max),
        other => ShopError::Died(other.to_string()),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic in another thread must not wedge the proxy; the data behind these locks stays valid.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_command_is_found_beside_the_executable_first() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let other = dir.path().join("other");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(bin.join("shop"), "").unwrap();
        std::fs::write(other.join("shop"), "").unwrap();
        let exe = bin.join("cajaguard");
        let path = std::env::join_paths([&other]).unwrap();
        assert_eq!(
            find_bare("shop", Some(&exe), Some(path.clone())),
            Some(bin.join("shop"))
        );
        assert_eq!(
            find_bare("shop", None, Some(path)),
            Some(other.join("shop"))
        );
        assert_eq!(find_bare("nope", Some(&exe), None), None);
    }
}

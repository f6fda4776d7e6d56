//! The shop as a child process speaking newline-delimited JSON-RPC on its stdin/stdout. One reader
//! thread per child delivers answers to the waiting callers by id and forwards notifications.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cajaguard_core::policy::{self, StdioDownstream};
use serde_json::value::RawValue;

use super::{Done, Link, NotificationSink, Reply, ShopError, lock, names_only};
use cajaguard_wire::jsonrpc::{self, Envelope, Line};

/// How to start the shop, resolved from the policy. `env` may hold the shop's credentials, so its
/// `Debug` shows the variables' names only.
#[derive(Clone)]
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
}

impl Launch {
    /// Resolves `downstream.command`: a path as configured; a bare name next to the running
    /// executable (so the fixture is found in the same build folder), then on `PATH`.
    pub fn from_policy(stdio: &StdioDownstream) -> Result<Launch, ShopError> {
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

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("env", &names_only(&self.env))
            .finish()
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

/// One running child process.
pub struct StdioLink {
    stdin: Mutex<ChildStdin>,
    child: Mutex<Child>,
    pending: Mutex<HashMap<u64, Waiter>>,
    next_id: AtomicU64,
    alive: AtomicBool,
    /// Whether the thread that times out detached requests is running.
    sweeping: AtomicBool,
}

/// Who waits for an answer: a thread blocked on a channel, or a callback the reader thread runs
/// itself (the forwarding fast path: no thread hand-off between the shop's answer and the agent).
enum Waiter {
    Blocked(mpsc::Sender<Result<Reply, ShopError>>),
    Detached {
        done: Done,
        deadline: Instant,
        timeout: Duration,
    },
}

impl Waiter {
    fn finish(self, reply: Result<Reply, ShopError>) {
        match self {
            Waiter::Blocked(tx) => {
                let _ = tx.send(reply);
            }
            Waiter::Detached { done, .. } => done(reply),
        }
    }
}

/// How often detached requests are checked against their deadline. Shop timeouts are whole
/// seconds, so a tenth of a second late is not worth a timer per request.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// Starts the child and its reader thread. The handshake is the caller's (`Shop`).
pub fn start(
    launch: &Launch,
    max_message_bytes: usize,
    notifications: NotificationSink,
) -> Result<Arc<StdioLink>, ShopError> {
    let mut command = Command::new(&launch.program);
    command
        .args(&launch.args)
        .current_dir(&launch.cwd)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = command.spawn().map_err(|source| ShopError::Spawn {
        program: launch.program.clone(),
        source,
    })?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        return Err(ShopError::Handshake("no pipes to the shop".into()));
    };
    let link = Arc::new(StdioLink {
        stdin: Mutex::new(stdin),
        child: Mutex::new(child),
        pending: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        alive: AtomicBool::new(true),
        sweeping: AtomicBool::new(false),
    });
    let reader = link.clone();
    let spawned = std::thread::Builder::new()
        .name("shop-reader".into())
        .spawn(move || {
            reader.read_loop(
                BufReader::with_capacity(64 * 1024, stdout),
                max_message_bytes,
                &notifications,
            )
        });
    if let Err(source) = spawned {
        link.close();
        return Err(ShopError::Spawn {
            program: launch.program.clone(),
            source,
        });
    }
    Ok(link)
}

impl Link for StdioLink {
    fn request(
        &self,
        method: &str,
        params: Option<&str>,
        timeout: Duration,
        sent: &mut dyn FnMut(u64),
    ) -> Result<Reply, ShopError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        lock(&self.pending).insert(id, Waiter::Blocked(tx));
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

    fn request_detached(
        self: Arc<Self>,
        method: &str,
        params: Option<&str>,
        timeout: Duration,
        sent: &mut dyn FnMut(u64),
        done: Done,
    ) -> Result<(), Done> {
        if !self.alive() {
            return Err(done);
        }
        self.start_sweeper();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + timeout;
        lock(&self.pending).insert(
            id,
            Waiter::Detached {
                done,
                deadline,
                timeout,
            },
        );
        let written = self.write(&jsonrpc::request(id, method, params));
        if let Err(e) = written {
            self.alive.store(false, Ordering::Release);
            if let Some(waiter) = lock(&self.pending).remove(&id) {
                waiter.finish(Err(ShopError::Died(e.to_string())));
            }
            return Ok(());
        }
        sent(id);
        Ok(())
    }

    fn notify(&self, line: &str) -> Result<(), ShopError> {
        self.write(line).map_err(|e| {
            self.alive.store(false, Ordering::Release);
            ShopError::Died(e.to_string())
        })
    }

    fn notify_in_background(&self, line: &str) {
        // A pipe write is quick; nothing to gain from a thread.
        if self.alive() {
            let _ = self.write(line);
        }
    }

    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    fn close(&self) {
        self.alive.store(false, Ordering::Release);
        let mut child = lock(&self.child);
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl StdioLink {
    /// Times out detached requests; ends with the link.
    fn start_sweeper(self: &Arc<Self>) {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let link = Arc::downgrade(self);
        let spawned = std::thread::Builder::new().name("shop-timeouts".into()).spawn(move || {
            loop {
                std::thread::sleep(SWEEP_EVERY);
                let Some(link) = link.upgrade() else { return };
                if !link.alive() {
                    return;
                }
                let now = Instant::now();
                let expired: Vec<(u64, Waiter)> = {
                    let mut pending = lock(&link.pending);
                    let ids: Vec<u64> = pending
                        .iter()
                        .filter(|(_, w)| matches!(w, Waiter::Detached { deadline, .. } if *deadline <= now))
                        .map(|(id, _)| *id)
                        .collect();
                    ids.into_iter().filter_map(|id| pending.remove(&id).map(|w| (id, w))).collect()
                };
                for (_, waiter) in expired {
                    let timeout = match &waiter {
                        Waiter::Detached { timeout, .. } => *timeout,
                        Waiter::Blocked(_) => SWEEP_EVERY,
                    };
                    waiter.finish(Err(ShopError::Timeout(timeout)));
                }
            }
        });
        if spawned.is_err() {
            // Without a sweeper detached requests could wait forever: stop offering them.
            self.sweeping.store(false, Ordering::Release);
            self.alive.store(false, Ordering::Release);
        }
    }

    fn write(&self, line: &str) -> std::io::Result<()> {
        // A line break would end the message early and start another the shop would act on.
        if line.contains(['\n', '\r']) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a message with a line break in it is never written to the shop",
            ));
        }
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
                Ok(Line::TooLong { id }) => {
                    // One oversized answer fails the request it answers, nothing else: the reader
                    // is already at the next line, and the shop (and every other call in flight
                    // on it) is kept (SPEC §3).
                    self.oversized(id.as_deref(), max);
                    continue;
                }
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
                (Some(method), Some(id)) => {
                    let _ = self.write(&super::answer_to_shop_request(method, id));
                }
                (Some(_), None) => notifications(&line),
                (None, None) => {
                    tracing::warn!("the shop sent a message with neither id nor method; ignored")
                }
            }
        };
        self.alive.store(false, Ordering::Release);
        let waiting: Vec<_> = lock(&self.pending).drain().collect();
        for (_, waiter) in waiting {
            waiter.finish(Err(clone_error(&failure)));
        }
    }

    fn oversized(&self, id: Option<&str>, max: usize) {
        let waiter = id
            .and_then(|id| id.parse::<u64>().ok())
            .and_then(|id| lock(&self.pending).remove(&id));
        match waiter {
            Some(waiter) => {
                tracing::warn!(
                    "the shop sent an answer over {max} bytes; that call failed, the shop is kept"
                );
                waiter.finish(Err(ShopError::TooLarge(max)));
            }
            // A notification, or an answer whose id is not in its first or last bytes: its caller
            // (if any) times out, which for a payment is an unknown outcome, as it must be.
            None => tracing::warn!(
                "the shop sent a message over {max} bytes whose request could not be told; dropped"
            ),
        }
    }

    fn deliver(&self, id: &RawValue, result: Option<Box<RawValue>>, error: Option<Box<RawValue>>) {
        let Ok(id) = id.get().parse::<u64>() else {
            tracing::warn!("the shop answered an id the proxy never sent; ignored");
            return;
        };
        let Some(waiter) = lock(&self.pending).remove(&id) else {
            return;
        };
        waiter.finish(super::reply_of(result, error));
    }
}

fn clone_error(e: &ShopError) -> ShopError {
    match e {
        ShopError::TooLarge(max) => ShopError::TooLarge(*max),
        other => ShopError::Died(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_environment_but_shows_no_value() {
        let launch = Launch {
            program: PathBuf::from("/usr/bin/shop"),
            args: vec!["--stdio".into()],
            cwd: PathBuf::from("/"),
            env: vec![("SHOP_API_KEY".into(), "sk_live_0123456789".into())],
        };
        let shown = format!("{launch:?}");
        assert!(
            shown.contains("SHOP_API_KEY") && shown.contains("--stdio"),
            "{shown}"
        );
        assert!(!shown.contains("sk_live_0123456789"), "{shown}");
    }

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

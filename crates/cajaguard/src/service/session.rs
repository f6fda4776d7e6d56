//! One agent's MCP session inside the service: a [`Proxy`] session whose answers go back to the
//! HTTP request that asked, by JSON-RPC id.
//!
//! The proxy writes whole lines to its output (one `write_all` per message, `Sink`'s rule); the
//! [`Replies`] writer reads each line's `id` and hands it to the request waiting for it. Lines no
//! request waits for (a notification, a server-to-client request such as an elicitation) are
//! dropped: the service answers every POST with `application/json` and holds no event stream
//! open (SPEC §13 leaves the choice to the server; see docs/ARCHITECTURE.md).

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cajaguard_core::agent::AgentId;
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use super::Admitted;
use crate::proxy::Proxy;

/// Requests of one session waiting for their answer, by the id's JSON text, each with its
/// admission: the slot is the call's until its answer comes, whether or not the client still
/// waits (a client that hangs up does not stop the call, so it must not free the slot).
#[derive(Clone, Default)]
pub(super) struct Waiting(Arc<Mutex<HashMap<String, Waiter>>>);

/// Where a request's answer goes, and the admission it holds until then.
type Waiter = (oneshot::Sender<String>, Admitted);

impl Waiting {
    /// Registers `id`; `None` when a request with the same id is still in flight (JSON-RPC ids
    /// must be unique among a session's requests in flight, and an answer the gate still owes
    /// must not go to a new request).
    pub(super) fn expect(&self, id: &str, admitted: Admitted) -> Option<oneshot::Receiver<String>> {
        let mut map = lock(&self.0);
        if map.contains_key(id) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        map.insert(id.to_owned(), (tx, admitted));
        Some(rx)
    }

    /// Forgets `id` (the proxy never got its message).
    pub(super) fn forget(&self, id: &str) {
        lock(&self.0).remove(id);
    }

    fn deliver(&self, line: &str) {
        #[derive(serde::Deserialize)]
        struct Reply<'a> {
            #[serde(borrow)]
            id: Option<&'a RawValue>,
            method: Option<serde::de::IgnoredAny>,
        }
        let Ok(reply) = serde_json::from_str::<Reply<'_>>(line) else {
            tracing::warn!("the proxy wrote a line that is not JSON-RPC; dropped");
            return;
        };
        let (Some(id), None) = (reply.id, reply.method) else {
            tracing::debug!(
                "a message for the agent outside any request; dropped (no event stream)"
            );
            return;
        };
        if let Some((waiter, _admitted)) = lock(&self.0).remove(id.get()) {
            // The request may have gone (client hung up): the call itself has finished anyway,
            // and its slot is given back here.
            let _ = waiter.send(line.to_owned());
        }
    }
}

/// The proxy session's output: whole lines, each delivered to its waiting request.
struct Replies {
    waiting: Waiting,
    partial: Vec<u8>,
}

impl Write for Replies {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            match std::str::from_utf8(&line[..end]) {
                Ok(text) => self.waiting.deliver(text),
                Err(_) => tracing::warn!("the proxy wrote a line that is not UTF-8; dropped"),
            }
        }
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A session: its agent, its proxy, the requests waiting on it, and when it was last used.
pub(super) struct Session {
    pub agent: AgentId,
    pub proxy: Arc<Proxy>,
    pub waiting: Waiting,
    pub last_used: Mutex<Instant>,
}

impl Session {
    pub(super) fn new(base: &Proxy, agent: AgentId) -> Arc<Session> {
        let waiting = Waiting::default();
        let proxy = base.session(
            agent.clone(),
            Box::new(Replies {
                waiting: waiting.clone(),
                partial: Vec::new(),
            }),
        );
        Arc::new(Session {
            agent,
            proxy,
            waiting,
            last_used: Mutex::new(Instant::now()),
        })
    }

    pub(super) fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    pub(super) fn idle_since(&self) -> Instant {
        *lock(&self.last_used)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

//! URL-mode elicitation (SPEC §6, MCP 2025-11-25): a client that declared
//! `capabilities.elicitation.url` at `initialize` is asked to show the approval page of a blocked
//! payment to its user (`elicitation/create`, mode `url`), and told when the request is decided
//! (`notifications/elicitation/complete`). The tool result is the same `blocked` refusal either
//! way, and the client's answer is never read: no answer of a client approves anything.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cajaguard_core::approval::RequestId;
use cajaguard_core::verdict::{Ruling, Verdict};
use serde_json::json;
use serde_json::value::RawValue;

use super::Proxy;
use crate::store::{ApprovalStatus, Store};

/// The protocol version that defines URL-mode elicitation.
const URL_ELICITATION_VERSION: &str = "2025-11-25";
/// How often the watcher reads whether a request was decided.
const POLL: Duration = Duration::from_secs(1);
/// At most this many requests are watched at once: each watcher holds a thread and a store
/// connection, and an agent can make as many blocked baskets as it likes. Past it a request is
/// still shown to the user; only its completion notice is not sent.
const MAX_WATCHERS: usize = 8;
/// The requests already shown are remembered up to this many; past it the set starts again (a
/// page shown twice is harmless; memory that grows with every basket an agent makes is not).
const MAX_REMEMBERED: usize = 1024;

#[derive(Default)]
pub(super) struct Elicitation {
    declared: AtomicBool,
    sent: Mutex<HashSet<String>>,
    watching: Arc<AtomicUsize>,
}

/// Gives a watcher's place back when its thread ends, however it ends.
struct Watching(Arc<AtomicUsize>);

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Elicitation {
    /// Reads `initialize`'s params: a 2025-11-25 client with `capabilities.elicitation.url`.
    pub(super) fn declare(&self, params: Option<&RawValue>) {
        let declared = params
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok())
            .is_some_and(|p| {
                p.get("protocolVersion").and_then(|v| v.as_str()) == Some(URL_ELICITATION_VERSION)
                    && p.pointer("/capabilities/elicitation/url")
                        .is_some_and(serde_json::Value::is_object)
            });
        self.declared.store(declared, Ordering::Relaxed);
    }
}

impl Proxy {
    /// For a `blocked` refusal with an approval page: asks the client (once per request) to show
    /// the page, and watches the store for the decision on a thread of its own.
    pub(super) fn elicit(&self, ruling: &Ruling) {
        let (Some(url), Some(id)) = (ruling.approval_url(), ruling.request_id()) else {
            return;
        };
        // A service session answers every POST with one JSON body and opens no event stream,
        // so nothing it would send the client arrives; and its watchers, one thread and store
        // connection each that outlive the session, would let one agent's sessions exhaust the
        // service's threads, files or database connections for everyone.
        if ruling.verdict() != Verdict::Blocked
            || self.agent.is_some()
            || !self.elicitation.declared.load(Ordering::Relaxed)
        {
            return;
        }
        let first = {
            let mut sent = self
                .elicitation
                .sent
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if sent.len() >= MAX_REMEMBERED {
                sent.clear();
            }
            sent.insert(id.as_str().to_owned())
        };
        if !first {
            return;
        }
        let request = json!({
            "jsonrpc": "2.0",
            "id": format!("cajaguard-elicit-{id}"),
            "method": "elicitation/create",
            "params": {
                "mode": "url",
                "elicitationId": id.as_str(),
                "url": url,
                "message": format!(
                    "A payment needs your approval: open {url} and approve or deny it with your passkey."
                ),
            }
        });
        self.send(&request.to_string());
        // Key-file approvals decide nothing under `require: "passkey"`: not watched then.
        let trusted = if self.policy.approvals.require.accepts_key_file() {
            (*self.trusted).clone()
        } else {
            cajaguard_core::approval::TrustedKeys::default()
        };
        let counter = &self.elicitation.watching;
        if counter.fetch_add(1, Ordering::AcqRel) >= MAX_WATCHERS {
            counter.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let place = Watching(Arc::clone(counter));
        let (policy, out, id) = (self.policy.clone(), self.out.clone(), id.clone());
        std::thread::spawn(move || {
            let _place = place;
            if watch(&policy, &trusted, &id) {
                let done = json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/elicitation/complete",
                    "params": { "elicitationId": id.as_str() },
                });
                let _ = out.send(&done.to_string());
            }
        });
    }
}

/// Whether `id` was decided (approved, denied or used) within twice the approvals' lifetime,
/// read from a store of its own (the proxy's is busy with calls); not once it is gone.
fn watch(
    policy: &cajaguard_core::policy::Policy,
    trusted: &cajaguard_core::approval::TrustedKeys,
    id: &RequestId,
) -> bool {
    let Ok(store) = Store::for_policy(policy) else {
        return false;
    };
    let rp = policy.approvals.passkey_relying_party();
    let deadline = Instant::now() + policy.approvals.max_ttl.saturating_mul(2);
    while Instant::now() < deadline {
        let status = store.approval_status(
            id,
            trusted,
            rp.as_ref(),
            time::OffsetDateTime::now_utc(),
            policy.approvals.max_ttl,
        );
        match status {
            Ok(ApprovalStatus::Approved | ApprovalStatus::Denied | ApprovalStatus::Used) => {
                return true;
            }
            // Replaced by a newer block on its checkout: nobody will decide it any more.
            Ok(ApprovalStatus::Invalid) => return false,
            _ => {}
        }
        std::thread::sleep(POLL);
    }
    false
}

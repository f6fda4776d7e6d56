//! The status document: the same JSON for `cajaguard status --json` and the `cajaguard_status` tool
//! on stdio; an agent of the service (SPEC §13) gets its own variant, [`document_for_agent`].

use std::collections::BTreeMap;

use cajaguard_core::agent::AgentId;
use cajaguard_core::approval::TrustedKeys;
use cajaguard_core::money::{self, Currency};
use cajaguard_core::policy::{Mode, Policy};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::store::{PendingRow, Store, StoreError, WindowSpend};

/// The document with the trusted keys read from the policy's files. A key that cannot be read
/// counts as no key: no approval then verifies, so every stored request still counts as waiting,
/// which is what the gate would do with it too.
pub fn document(policy: &Policy, store: &Store, now: OffsetDateTime) -> Result<Value, StoreError> {
    let trusted = crate::keys::counted_trusted_keys(policy).unwrap_or_default();
    document_with(policy, store, &trusted, now)
}

/// The document, `pending` holding only the requests still waiting for a human's decision
/// (approved-but-unused and denied ones are decided; SPEC §7).
pub fn document_with(
    policy: &Policy,
    store: &Store,
    trusted: &TrustedKeys,
    now: OffsetDateTime,
) -> Result<Value, StoreError> {
    build(policy, store, trusted, None, now)
}

/// The document as one agent of the service sees it (SPEC §13: its own caps and headroom and the
/// global ones, never another agent's requests): the global document, `pending` holding only
/// `agent`'s own requests, plus `agent: {id, caps_from, caps}` where `caps` has an entry per
/// currency of the agent's own caps (`null` when only the global caps hold), its spend and
/// headroom read from the agent's own bucket account.
pub fn document_for_agent(
    policy: &Policy,
    store: &Store,
    trusted: &TrustedKeys,
    agent: &AgentId,
    now: OffsetDateTime,
) -> Result<Value, StoreError> {
    build(policy, store, trusted, Some(agent), now)
}

fn build(
    policy: &Policy,
    store: &Store,
    trusted: &TrustedKeys,
    agent: Option<&AgentId>,
    now: OffsetDateTime,
) -> Result<Value, StoreError> {
    let spend = store.window_spend(policy.window, now)?;
    let mut caps = serde_json::Map::new();
    for (code, cap) in &policy.caps {
        let used = spend.get(code).copied().unwrap_or_default();
        caps.insert(
            code.clone(),
            cap_entry(
                cap.currency,
                cap.approval_above,
                cap.per_transaction,
                cap.window,
                used,
            ),
        );
    }
    let pending: Vec<Value> = store
        .awaiting_decision(
            trusted,
            policy.approvals.passkey_relying_party().as_ref(),
            now,
            policy.approvals.max_ttl,
            // An agent sees only its own requests; stdio (no agent) sees every one.
            agent,
        )?
        .iter()
        .map(pending_entry)
        .collect();
    let frozen = match store.frozen()? {
        Some(frozen) => json!({ "at": frozen.stamp(), "reason": frozen.reason }),
        None => Value::Null,
    };
    let mut document = json!({
        "frozen": frozen,
        "mode": match policy.mode { Mode::Test => "test", Mode::Live => "live" },
        "window_hours": policy.window.as_secs() / 3600,
        "merchants": policy.merchants,
        "caps": caps,
        "pending": pending,
    });
    if let Some(agent) = agent {
        document["agent"] = agent_entry(policy, store, agent, now)?;
    }
    Ok(document)
}

/// `agent` in an agent's status document.
fn agent_entry(
    policy: &Policy,
    store: &Store,
    agent: &AgentId,
    now: OffsetDateTime,
) -> Result<Value, StoreError> {
    let caps = match policy.agent_caps(agent) {
        None => Value::Null,
        Some(own) => {
            let spend = store.agent_window_spend(agent, policy.window, now)?;
            let mut caps = serde_json::Map::new();
            for (code, cap) in own {
                let used = spend.get(code).copied().unwrap_or_default();
                caps.insert(
                    code.clone(),
                    cap_entry(
                        cap.currency,
                        cap.approval_above,
                        cap.per_transaction,
                        cap.window,
                        used,
                    ),
                );
            }
            Value::Object(caps)
        }
    };
    Ok(json!({
        "id": agent.as_str(),
        "caps_from": caps_source(policy, agent),
        "caps": caps,
    }))
}

/// Where an agent's caps come from (SPEC §13): its own `serve.agents[].caps`, else
/// `agent_caps`; `None` when only the global caps hold.
pub fn caps_source(policy: &Policy, agent: &AgentId) -> Option<&'static str> {
    let own = policy
        .serve
        .as_ref()
        .and_then(|serve| serve.agents.get(agent))
        .is_some_and(|a| a.caps.is_some());
    if own {
        Some("serve.agents[].caps")
    } else if policy.agent_caps.is_some() {
        Some("agent_caps")
    } else {
        None
    }
}

/// One agent's spend in one currency over the window, for `cajaguard status`'s table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSpend {
    pub agent: AgentId,
    pub currency: String,
    pub spent: WindowSpend,
    /// The agent's own window cap in this currency; `None` when only the global caps hold.
    pub window: Option<i64>,
}

/// Per-agent spend for every agent the store has a token for or the config names: one row per
/// currency of its caps, and per other currency it spent in. Empty when there are no agents.
pub fn agent_spend(
    policy: &Policy,
    store: &Store,
    now: OffsetDateTime,
) -> Result<Vec<AgentSpend>, StoreError> {
    let mut agents: Vec<AgentId> = store.agents()?.into_iter().map(|row| row.name).collect();
    if let Some(serve) = &policy.serve {
        agents.extend(serve.agents.keys().cloned());
    }
    agents.sort();
    agents.dedup();
    let mut rows = Vec::new();
    for agent in agents {
        let spend = store.agent_window_spend(&agent, policy.window, now)?;
        let own = policy.agent_caps(&agent);
        let mut currencies: BTreeMap<&str, Option<i64>> = BTreeMap::new();
        for (code, cap) in own.into_iter().flatten() {
            currencies.insert(code, Some(cap.window));
        }
        for code in spend.keys() {
            currencies.entry(code).or_insert(None);
        }
        for (code, window) in currencies {
            rows.push(AgentSpend {
                agent: agent.clone(),
                currency: code.to_owned(),
                spent: spend.get(code).copied().unwrap_or_default(),
                window,
            });
        }
    }
    Ok(rows)
}

/// One request as `status` and `pending --json` list it.
pub fn pending_entry(row: &PendingRow) -> Value {
    let request = &row.request;
    let total = match Currency::from_code(&request.currency) {
        Ok(currency) => Value::String(money::format_major(request.total, currency)),
        Err(_) => Value::Null,
    };
    json!({
        "request_id": request.request_id.as_str(),
        "merchant": request.merchant,
        "checkout_id": request.checkout_id,
        "currency": request.currency,
        "total": total,
        "total_minor": request.total,
        "created_at": row.created_at.format(&Rfc3339).unwrap_or_default(),
    })
}

fn cap_entry(
    currency: Currency,
    approval_above: i64,
    per_transaction: i64,
    window: i64,
    used: WindowSpend,
) -> Value {
    let major = |minor: i64| money::format_major(minor, currency);
    let remaining = window
        .saturating_sub(used.settled)
        .saturating_sub(used.in_flight)
        .max(0);
    json!({
        "approval_above": major(approval_above),
        "per_transaction": major(per_transaction),
        "window": major(window),
        "spent": major(used.settled),
        "in_flight": major(used.in_flight),
        "remaining": major(remaining),
        "spent_minor": used.settled,
        "in_flight_minor": used.in_flight,
        "remaining_minor": remaining,
    })
}

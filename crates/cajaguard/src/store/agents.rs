//! The service's agents (SPEC §13): bearer tokens made by `cajaguard agent add`, kept as their
//! SHA-256 only, so the store (out of the agents' reach) can say who a token is but never hand
//! one back; and which agent the shop made each checkout, cart and order for through the
//! service, so that no agent reads, changes, cancels or pays another's (docs/ARCHITECTURE.md, "A
//! checkout is its agent's").

use cajaguard_core::agent::AgentId;
use time::OffsetDateTime;

use super::audit::AgentEvent;
use super::{AuditEvent, AuditRecord, Store, StoreError, micros, passkeys::created, token_hash};

/// What the shop makes that the service binds to the agent it was made for: an agent reaches only
/// its own (`proxy/agents.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShopObject {
    Checkout,
    Cart,
    Order,
}

impl ShopObject {
    /// Its name in the store and in refusals.
    pub fn as_str(self) -> &'static str {
        match self {
            ShopObject::Checkout => "checkout",
            ShopObject::Cart => "cart",
            ShopObject::Order => "order",
        }
    }
}

/// One agent with a token, as `agent list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRow {
    pub name: AgentId,
    pub created_at: OffsetDateTime,
}

/// The statements behind agent tokens.
pub(super) trait AgentTx {
    /// `false` when an agent of that name already has a token.
    fn agent_insert(
        &mut self,
        name: &str,
        token_sha256: &str,
        at_us: i64,
    ) -> Result<bool, StoreError>;
    /// Name and creation time (µs), by name.
    fn agent_list(&mut self) -> Result<Vec<(String, i64)>, StoreError>;
    /// `false` when no agent of that name had a token.
    fn agent_delete(&mut self, name: &str) -> Result<bool, StoreError>;
    fn agent_by_token(&mut self, token_sha256: &str) -> Result<Option<String>, StoreError>;
    /// Records `object` `id` as `agent`'s unless it is already someone's; returns whose it is now.
    fn made_for_insert(
        &mut self,
        object: &str,
        id: &str,
        agent: &str,
        at_us: i64,
    ) -> Result<Option<String>, StoreError>;
    fn made_for(&mut self, object: &str, id: &str) -> Result<Option<String>, StoreError>;
}

impl Store {
    /// Gives `name` the token `token` (only its hash is kept). `Ok(false)`: the agent has one
    /// already (remove it first: a token is shown once and never replaced silently).
    pub fn add_agent(
        &self,
        name: &AgentId,
        token: &str,
        now: OffsetDateTime,
        audit: &AuditRecord,
    ) -> Result<bool, StoreError> {
        let hash = token_hash(token);
        let mut record = audit.clone();
        record.agent = Some(name.as_str().to_owned());
        self.write(&mut |tx| {
            if !tx.agent_insert(name.as_str(), &hash, micros(now))? {
                return Ok(false);
            }
            super::log::append(tx, AuditEvent::Agent(AgentEvent::Added), &record)?;
            Ok(true)
        })
    }

    /// The agents with a token, by name.
    pub fn agents(&self) -> Result<Vec<AgentRow>, StoreError> {
        let rows = self.read(&mut |tx| tx.agent_list())?;
        rows.into_iter()
            .map(|(name, at)| {
                Ok(AgentRow {
                    name: AgentId::parse(&name).map_err(|_| {
                        StoreError::Inconsistent(format!(
                            "the agent_tokens table holds a malformed name {:?}",
                            cajaguard_core::display::name(&name)
                        ))
                    })?,
                    created_at: created(at)?,
                })
            })
            .collect()
    }

    /// Takes `name`'s token away: a running service refuses it within 1 s (`service::tokens`). `Ok(false)`:
    /// no such agent.
    pub fn remove_agent(&self, name: &AgentId, audit: &AuditRecord) -> Result<bool, StoreError> {
        let mut record = audit.clone();
        record.agent = Some(name.as_str().to_owned());
        self.write(&mut |tx| {
            if !tx.agent_delete(name.as_str())? {
                return Ok(false);
            }
            // A token taken away must stay away after a power cut (SQLite syncs for it).
            tx.durable_on_commit();
            super::log::append(tx, AuditEvent::Agent(AgentEvent::Removed), &record)?;
            Ok(true)
        })
    }

    /// The agent whose token this is, if any. Looked up by the token's SHA-256 (an index seek
    /// whose timing says nothing about the token: an attacker cannot choose the hash's prefix).
    pub fn agent_by_token(&self, token: &str) -> Result<Option<AgentId>, StoreError> {
        let hash = token_hash(token);
        let name = self.read(&mut |tx| tx.agent_by_token(&hash))?;
        Ok(name.and_then(|n| AgentId::parse(&n).ok()))
    }

    /// Records that the shop made `object` `id` for `agent` (its `create_checkout` or
    /// `create_cart`, or the payment that placed the order, went through the service), before
    /// the agent is told the id. `Ok(false)`: it is already another agent's (a shop that hands
    /// one id out twice); the caller must not give it to `agent`. Not flushed on its own: a
    /// record lost in a crash leaves the object no agent's, which refuses its calls (fail
    /// closed), and the payment that needs a checkout's is flushed with its gate.
    pub fn bind_to_agent(
        &self,
        object: ShopObject,
        id: &str,
        agent: &AgentId,
        now: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        let holder = self.write_unflushed(&mut |tx| {
            tx.made_for_insert(object.as_str(), id, agent.as_str(), micros(now))
        })?;
        Ok(holder.as_deref() == Some(agent.as_str()))
    }

    /// The agent the shop made `object` `id` for through the service, if any.
    pub fn agent_of(&self, object: ShopObject, id: &str) -> Result<Option<AgentId>, StoreError> {
        let name = self.read(&mut |tx| tx.made_for(object.as_str(), id))?;
        name.map(|name| {
            AgentId::parse(&name).map_err(|_| {
                StoreError::Inconsistent(format!(
                    "the made_for_agent table holds a malformed agent name {:?}",
                    cajaguard_core::display::name(&name)
                ))
            })
        })
        .transpose()
    }
}

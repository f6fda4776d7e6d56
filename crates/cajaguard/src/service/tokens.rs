//! Agent tokens the store confirmed a moment ago, kept in memory so that an agent's next request
//! is authenticated without a store round trip (and without leaving the async runtime).
//!
//! The store stays the authority: `cajaguard agent remove` writes it from another process, so a
//! confirmation is trusted for [`TOKEN_RECHECK`] only, then the store is asked again. Only
//! positive answers are kept: an unknown token always goes to the store (a token made a moment
//! ago works at once, and a guesser gets no faster answers). The key is the token's SHA-256;
//! the token itself is never kept, logged or shown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cajaguard_core::agent::AgentId;
use sha2::{Digest, Sha256};

use super::lock;

/// How long the store's confirmation of a token is trusted: a removed token is refused at most
/// this long after `cajaguard agent remove` commits (README, "One gate for many agents").
pub const TOKEN_RECHECK: Duration = Duration::from_secs(1);

/// The most tokens remembered. Only tokens the store confirmed get in, so this bounds memory
/// against a store holding very many agents, not against guessers.
const MAX_ENTRIES: usize = 4096;

/// A monotonic clock, injected so that a test can move past [`TOKEN_RECHECK`] without waiting.
pub(super) type Monotonic = Arc<dyn Fn() -> Instant + Send + Sync>;

pub(super) struct Tokens {
    now: Monotonic,
    confirmed: Mutex<HashMap<[u8; 32], Confirmed>>,
}

struct Confirmed {
    agent: AgentId,
    /// When the lookup that confirmed it started (not ended): a removal committed while the
    /// lookup ran is then still refused within [`TOKEN_RECHECK`] of its commit.
    asked_at: Instant,
}

impl Tokens {
    pub(super) fn new(now: Monotonic) -> Tokens {
        Tokens {
            now,
            confirmed: Mutex::new(HashMap::new()),
        }
    }

    /// The agent `token` names, if the store said so less than [`TOKEN_RECHECK`] ago; `None`:
    /// ask the store ([`Tokens::look_up`]).
    pub(super) fn cached(&self, token: &str) -> Option<AgentId> {
        let key = digest(token);
        let now = (self.now)();
        let mut confirmed = lock(&self.confirmed);
        let entry = confirmed.get(&key)?;
        if fresh(entry.asked_at, now) {
            return Some(entry.agent.clone());
        }
        confirmed.remove(&key);
        None
    }

    /// Asks the store (`lookup`) which agent `token` names and remembers a positive answer. A
    /// negative answer or a failure forgets the token, so nothing stale can authenticate.
    pub(super) fn look_up<E>(
        &self,
        token: &str,
        lookup: impl FnOnce(&str) -> Result<Option<AgentId>, E>,
    ) -> Result<Option<AgentId>, E> {
        let key = digest(token);
        let asked_at = (self.now)();
        let answer = lookup(token);
        let mut confirmed = lock(&self.confirmed);
        match &answer {
            Ok(Some(agent)) => {
                if confirmed.len() >= MAX_ENTRIES && !confirmed.contains_key(&key) {
                    let now = (self.now)();
                    confirmed.retain(|_, entry| fresh(entry.asked_at, now));
                    if confirmed.len() >= MAX_ENTRIES {
                        // Only a cost: every forgotten token is asked of the store again.
                        confirmed.clear();
                    }
                }
                confirmed.insert(
                    key,
                    Confirmed {
                        agent: agent.clone(),
                        asked_at,
                    },
                );
            }
            Ok(None) | Err(_) => {
                confirmed.remove(&key);
            }
        }
        answer
    }
}

/// A confirmation from `asked_at` still holds at `now`. A clock that reads earlier than the
/// confirmation (only an injected one can) counts as expired: fail closed, ask again.
fn fresh(asked_at: Instant, now: Instant) -> bool {
    now.checked_duration_since(asked_at)
        .is_some_and(|age| age < TOKEN_RECHECK)
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use time::OffsetDateTime;

    use super::*;
    use crate::store::{AuditRecord, Store};

    const TOKEN: &str = "cg_agent_cache_test_0123456789abcdef";

    /// A clock that moves only when told to.
    fn manual_clock() -> (Monotonic, Arc<AtomicU64>) {
        let start = Instant::now();
        let elapsed_ms = Arc::new(AtomicU64::new(0));
        let reading = elapsed_ms.clone();
        let clock: Monotonic =
            Arc::new(move || start + Duration::from_millis(reading.load(Ordering::SeqCst)));
        (clock, elapsed_ms)
    }

    #[test]
    fn a_removed_agent_is_refused_once_its_confirmation_is_older_than_the_bound() {
        let home = tempfile::tempdir().unwrap();
        let now = OffsetDateTime::now_utc();
        let agent = AgentId::parse("shopper").unwrap();
        let gate_side = Store::open(home.path()).unwrap();
        gate_side
            .add_agent(&agent, TOKEN, now, &AuditRecord::new(now, "agent add"))
            .unwrap();
        let (clock, elapsed_ms) = manual_clock();
        let tokens = Tokens::new(clock);
        let lookups = std::cell::Cell::new(0);
        let ask = |token: &str| {
            lookups.set(lookups.get() + 1);
            gate_side.agent_by_token(token)
        };

        assert_eq!(
            tokens.cached(TOKEN),
            None,
            "nothing is known before the store says"
        );
        assert_eq!(tokens.look_up(TOKEN, ask).unwrap(), Some(agent.clone()));
        elapsed_ms.store(999, Ordering::SeqCst);
        assert_eq!(
            tokens.cached(TOKEN),
            Some(agent.clone()),
            "within the bound the confirmation answers, without the store"
        );
        assert_eq!(lookups.get(), 1);

        // `cajaguard agent remove`, from another process (its own connection to the home).
        let cli_side = Store::open(home.path()).unwrap();
        assert!(
            cli_side
                .remove_agent(&agent, &AuditRecord::new(now, "agent remove"))
                .unwrap()
        );
        elapsed_ms.store(1000, Ordering::SeqCst);
        assert_eq!(
            tokens.cached(TOKEN),
            None,
            "a confirmation as old as the bound is not trusted"
        );
        assert_eq!(
            tokens.look_up(TOKEN, ask).unwrap(),
            None,
            "the store refuses it"
        );
        assert_eq!(
            tokens.cached(TOKEN),
            None,
            "and a refusal is never remembered as a confirmation"
        );
    }

    #[test]
    fn unknown_tokens_and_failed_lookups_always_go_back_to_the_store() {
        let (clock, elapsed_ms) = manual_clock();
        let tokens = Tokens::new(clock);
        let agent = AgentId::parse("shopper").unwrap();
        assert_eq!(tokens.look_up(TOKEN, |_| Ok::<_, ()>(None)), Ok(None));
        assert_eq!(tokens.cached(TOKEN), None, "a negative answer is not kept");

        assert_eq!(
            tokens.look_up(TOKEN, |_| Ok::<_, ()>(Some(agent.clone()))),
            Ok(Some(agent.clone()))
        );
        // The store failing on a re-check (after the bound) forgets the token: fail closed.
        elapsed_ms.store(1500, Ordering::SeqCst);
        assert_eq!(
            tokens.look_up(TOKEN, |_| Err::<Option<AgentId>, _>(())),
            Err(())
        );
        elapsed_ms.store(0, Ordering::SeqCst);
        assert_eq!(
            tokens.cached(TOKEN),
            None,
            "a failed lookup leaves no confirmation behind, even one still young"
        );
    }

    #[test]
    fn the_confirmation_dates_from_when_the_store_was_asked() {
        let (clock, elapsed_ms) = manual_clock();
        let tokens = Tokens::new(clock);
        let agent = AgentId::parse("shopper").unwrap();
        // A lookup that takes 600 ms (a slow store): the removal may have committed while it ran.
        tokens
            .look_up(TOKEN, |_| {
                elapsed_ms.store(600, Ordering::SeqCst);
                Ok::<_, ()>(Some(agent.clone()))
            })
            .unwrap();
        elapsed_ms.store(1000, Ordering::SeqCst);
        assert_eq!(
            tokens.cached(TOKEN),
            None,
            "trusted until 1 s after the lookup began, not after it ended"
        );
    }
}

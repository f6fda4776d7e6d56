//! A service session's checkouts are its agent's (docs/ARCHITECTURE.md, "A checkout is its
//! agent's"). The service's agents share one shop link, so the shop cannot tell them apart; the
//! gate does: the checkout a session's `create_checkout` makes is recorded as its agent's before
//! the agent learns its id, and every checkout call of a session must name one of its agent's.
//! Otherwise an agent that learned another's checkout id could change its basket or shipping
//! address just before the other pays it, cancel it, or read it. `cajaguard mcp` on stdio is one
//! user with no agent: it neither records nor checks.

use cajaguard_core::verdict::{Reason, Ruling};
use serde_json::Value;

use super::{Answer, Proxy, refusal};

/// The tools that name an existing checkout by their `id` argument and are checked here.
/// `complete_checkout` is checked by its claim, in the claim's own transaction
/// (`Store::claim_as`), so a payment costs no read of its own for it.
fn names_checkout(tool: &str) -> bool {
    matches!(tool, "get_checkout" | "update_checkout" | "cancel_checkout")
}

/// Why a call about a checkout that is not the agent's is refused. It does not say whether the
/// checkout exists or whose it is: that would tell an agent probing ids what it should not know.
pub(super) const NOT_ITS_OWN: &str = "this checkout was not made by this agent through CajaGuard: an agent can read, change, cancel or pay only the checkouts its own create_checkout made through this gate; create the checkout here";

impl Proxy {
    /// The refusal of a call that names a checkout this session's agent did not make, if it is
    /// one; nothing for stdio, or for a tool that names no checkout.
    pub(super) fn foreign_checkout_refusal(&self, tool: &str, arguments: &Value) -> Option<Ruling> {
        let agent = self.agent.as_ref()?;
        if !names_checkout(tool) {
            return None;
        }
        let Some(checkout_id) = arguments.get("id").and_then(Value::as_str) else {
            return Some(Ruling::new(
                Reason::BadRequest,
                format!("{tool} needs the checkout's `id` as a string"),
            ));
        };
        match self.store.checkout_agent(checkout_id) {
            Ok(Some(holder)) if holder == *agent => None,
            Ok(_) => Some(Ruling::new(Reason::BadRequest, NOT_ITS_OWN)),
            Err(e) => Some(Ruling::new(
                Reason::StoreUnavailable,
                format!("the CajaGuard store failed, so {tool} was not forwarded: {e}"),
            )),
        }
    }

    /// The shop's answer to this session's `create_checkout`, passed on once the checkout it made
    /// is recorded as the agent's. An answer with no checkout id in it (an error, a refusal)
    /// passes as it is: there is nothing to record, and an id the gate did not see is refused
    /// when it is used. A checkout that cannot be recorded is not handed over.
    pub(super) fn bind_created_checkout(&self, answer: Answer) -> Answer {
        let Some(agent) = self.agent.as_ref() else {
            return answer;
        };
        let Answer::Result(result) = &answer else {
            return answer;
        };
        let Some(checkout_id) = created_checkout_id(result) else {
            return answer;
        };
        let ruling = match self
            .store
            .bind_checkout(&checkout_id, agent, (self.clock)())
        {
            Ok(true) => return answer,
            Ok(false) => Ruling::new(
                Reason::BadRequest,
                "the shop answered create_checkout with the id of a checkout another agent made through CajaGuard; it is not handed over, create another",
            ),
            Err(e) => Ruling::new(
                Reason::StoreUnavailable,
                format!(
                    "the shop made the checkout but the CajaGuard store failed to record it as this agent's, so it is not handed over (it would be refused when used); create another: {e}"
                ),
            ),
        };
        self.audit_refusal("create_checkout", &ruling);
        refusal(&ruling)
    }
}

/// The id of the checkout a `create_checkout` result holds: in `structuredContent`, or, from
/// servers that predate structured content, in the JSON of its first text part (as the gate
/// reads `get_checkout`, `checkout.rs`).
fn created_checkout_id(result: &str) -> Option<String> {
    let result: Value = serde_json::from_str(result).ok()?;
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let from_text;
    let checkout = match result.get("structuredContent") {
        Some(content) => content,
        None => {
            from_text = result
                .pointer("/content/0/text")
                .and_then(Value::as_str)
                .and_then(|text| serde_json::from_str::<Value>(text).ok())?;
            &from_text
        }
    };
    checkout
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_created_checkout_id_is_read_where_the_gate_reads_a_checkout() {
        let structured = r#"{"content":[],"structuredContent":{"id":"gid://s/Checkout/1","status":"incomplete"},"isError":false}"#;
        assert_eq!(
            created_checkout_id(structured).as_deref(),
            Some("gid://s/Checkout/1")
        );
        let text_only = r#"{"content":[{"type":"text","text":"{\"id\":\"gid://s/Checkout/2\"}"}]}"#;
        assert_eq!(
            created_checkout_id(text_only).as_deref(),
            Some("gid://s/Checkout/2")
        );
        for nothing in [
            r#"{"content":[],"structuredContent":{"id":"gid://s/Checkout/3"},"isError":true}"#,
            r#"{"content":[{"type":"text","text":"out of stock"}]}"#,
            r#"{"structuredContent":{"id":42}}"#,
            "not json",
        ] {
            assert_eq!(created_checkout_id(nothing), None, "{nothing}");
        }
    }
}

//! A service session's checkouts, carts and orders are its agent's (docs/ARCHITECTURE.md, "A
//! checkout is its agent's"). The service's agents share one shop link, so the shop cannot tell
//! them apart; the gate does: what a session's `create_checkout` or `create_cart` makes, and the
//! order its payment places, is recorded as its agent's before the agent learns the id, and every
//! call of a session that names a checkout, cart or order must name one of its agent's.
//! Otherwise an agent that learned another's checkout or cart id could change its basket or
//! shipping address just before the other pays it (a cart's contents become the checkout's),
//! cancel it, or read it. `cajaguard mcp` on stdio is one user with no agent: it neither records
//! nor checks whose an object is. Every session, stdio's too, holds these tools to what the
//! checks here read (`argument_refusal`): their pinned arguments, and no field the shop sets.

use cajaguard_core::request::{fields_the_shop_sets, pinned_arguments};
use cajaguard_core::verdict::{Reason, Ruling};
use cajaguard_wire::rawjson::folded;
use serde_json::Value;

use super::{Answer, Proxy, refusal};
use crate::store::ShopObject;

/// What a tool names by its `id` argument, checked here before it is forwarded.
/// `complete_checkout` is checked by its claim, in the claim's own transaction
/// (`Store::claim_as`), so a payment costs no read of its own for it.
fn named_by(tool: &str) -> Option<ShopObject> {
    match tool {
        "get_checkout" | "update_checkout" | "cancel_checkout" => Some(ShopObject::Checkout),
        "get_cart" | "update_cart" | "cancel_cart" => Some(ShopObject::Cart),
        "get_order" => Some(ShopObject::Order),
        _ => None,
    }
}

/// What a tool makes, recorded from its answer.
fn made_by(tool: &str) -> Option<ShopObject> {
    match tool {
        "create_checkout" => Some(ShopObject::Checkout),
        "create_cart" => Some(ShopObject::Cart),
        _ => None,
    }
}

/// The refusal of a call on a checkout, cart or order that is not the agent's. It does not say
/// whether it exists or whose it is: that would tell an agent probing ids what it should not know.
pub(super) fn not_its_own(object: ShopObject) -> Ruling {
    let next = match object {
        ShopObject::Checkout => "create the checkout through this gate",
        ShopObject::Cart => "create the cart through this gate",
        ShopObject::Order => {
            "an order is this agent's once its own payment through this gate placed it (if the payment's answer was lost, read the checkout with get_checkout first)"
        }
    };
    Ruling::new(
        Reason::BadRequest,
        format!(
            "this {} was not made for this agent through CajaGuard: an agent can reach only the checkouts, carts and orders the shop made for it through this gate; {next}",
            object.as_str()
        ),
    )
}

/// The refusal of a call, on any session, that carries more than the checks here look at: a
/// tool that names or makes a checkout, cart or order takes only its pinned arguments, and its
/// checkout or cart none of the fields the shop sets ([`shop_set_field_refusal`]). A shop that
/// also read an id from a field of its own (a `checkout_id` beside `id`, a `checkout.id`) would
/// be pointed at a checkout no check here looked at: another agent's, or one whose payment is in
/// flight while its update lease was taken on `id`.
pub(super) fn argument_refusal(tool: &str, arguments: &Value) -> Option<Ruling> {
    if (named_by(tool).is_some() || made_by(tool).is_some())
        && let (Some(pinned), Some(given)) = (pinned_arguments(tool), arguments.as_object())
    {
        let unknown: Vec<String> = given
            .keys()
            .filter(|key| !pinned.contains(&key.as_str()))
            .map(|key| cajaguard_core::display::name(key))
            .collect();
        if !unknown.is_empty() {
            return Some(Ruling::new(
                Reason::RequestFieldNotAllowed,
                format!(
                    "{tool} takes only {}; not {}",
                    pinned.join(", "),
                    unknown.join(", ")
                ),
            ));
        }
    }
    shop_set_field_refusal(tool, arguments)
}

/// The refusal of a checkout or cart that carries a field the shop sets
/// (`request::fields_the_shop_sets`): a shop that read `checkout.id` in place of the `id`
/// argument would be pointed at a checkout no check here looked at. Names are compared with case
/// folded, as a case-insensitive parser would read them (`ID` for `id`).
fn shop_set_field_refusal(tool: &str, arguments: &Value) -> Option<Ruling> {
    let (argument, lists) = fields_the_shop_sets(tool)?;
    let object = match arguments.get(argument) {
        None => return None,
        Some(Value::Object(object)) => object,
        Some(_) => {
            return Some(Ruling::new(
                Reason::BadRequest,
                format!("{tool}'s `{argument}` must be a JSON object"),
            ));
        }
    };
    let set: Vec<String> = object
        .keys()
        .filter(|key| {
            let key = folded(key);
            lists.iter().any(|fields| fields.contains(&key.as_str()))
        })
        .map(|key| cajaguard_core::display::name(key))
        .collect();
    if set.is_empty() {
        return None;
    }
    Some(Ruling::new(
        Reason::RequestFieldNotAllowed,
        format!(
            "{tool}'s `{argument}` leaves out what the shop sets; not {}",
            set.join(", ")
        ),
    ))
}

/// The refusal of a `create_checkout` whose checkout holds a key that a case-insensitive parser
/// reads as `cart_id` but that is not it (`CART_ID`, `Cart_Id`): such a shop would make the
/// checkout from a cart whose owner no check here looked at.
fn inexact_cart_key(arguments: &Value) -> Option<Ruling> {
    let checkout = arguments.get("checkout")?.as_object()?;
    let key = checkout
        .keys()
        .find(|key| key.as_str() != "cart_id" && folded(key) == "cart_id")?;
    Some(Ruling::new(
        Reason::BadRequest,
        format!(
            "create_checkout's `checkout` holds `{}`, which a shop that reads keys ignoring case takes for `cart_id`; send it as `cart_id`",
            cajaguard_core::display::name(key)
        ),
    ))
}

impl Proxy {
    /// The refusal of a call that names a checkout, cart or order the shop did not make for
    /// this session's agent, if it is one; nothing for stdio, or for a tool that names none. A
    /// call names what its `id` is (`named_by`), and `create_checkout` a cart by
    /// `checkout.cart_id` (which it converts; `update_checkout` must omit it, as every field the
    /// shop sets). What the call may carry is checked first ([`argument_refusal`]; a stdio
    /// session's calls meet it after the tripwire, in `Proxy::call_tool`).
    pub(super) fn foreign_object_refusal(&self, tool: &str, arguments: &Value) -> Option<Ruling> {
        self.agent.as_ref()?;
        if let Some(refused) = argument_refusal(tool, arguments) {
            return Some(refused);
        }
        if let Some(object) = named_by(tool) {
            let Some(id) = arguments.get("id").and_then(Value::as_str) else {
                return Some(Ruling::new(
                    Reason::BadRequest,
                    format!("{tool} needs the {}'s `id` as a string", object.as_str()),
                ));
            };
            if let Some(refused) = self.refusal_unless_its_own(tool, object, id) {
                return Some(refused);
            }
        }
        if tool == "create_checkout" {
            if let Some(refused) = inexact_cart_key(arguments) {
                return Some(refused);
            }
            match arguments.pointer("/checkout/cart_id") {
                None => {}
                Some(Value::String(cart)) => {
                    return self.refusal_unless_its_own(tool, ShopObject::Cart, cart);
                }
                Some(_) => {
                    return Some(Ruling::new(
                        Reason::BadRequest,
                        format!("{tool}'s `checkout.cart_id` must be a string"),
                    ));
                }
            }
        }
        None
    }

    fn refusal_unless_its_own(&self, tool: &str, object: ShopObject, id: &str) -> Option<Ruling> {
        let agent = self.agent.as_ref()?;
        match self.store.agent_of(object, id) {
            Ok(Some(holder)) if holder == *agent => None,
            Ok(_) => Some(not_its_own(object)),
            Err(e) => {
                tracing::error!(
                    "store failed reading whose {} this is: {e}",
                    object.as_str()
                );
                Some(Ruling::new(
                    Reason::StoreUnavailable,
                    format!("{tool} was not forwarded: {}", e.for_agent()),
                ))
            }
        }
    }

    /// The shop's answer to this session's `create_checkout` or `create_cart`, passed on once
    /// what it made is recorded as the agent's. An answer with no id in it (an error, a refusal)
    /// passes as it is: there is nothing to record, and an id the gate did not see is refused
    /// when it is used. What cannot be recorded is not handed over.
    pub(super) fn bind_made(&self, tool: &str, answer: Answer) -> Answer {
        let (Some(agent), Some(object)) = (self.agent.as_ref(), made_by(tool)) else {
            return answer;
        };
        let Answer::Result(result) = &answer else {
            return answer;
        };
        let Some(id) = made_id(result) else {
            return answer;
        };
        let object_name = object.as_str();
        let ruling = match self.store.bind_to_agent(object, &id, agent, (self.clock)()) {
            Ok(true) => return answer,
            Ok(false) => Ruling::new(
                Reason::BadRequest,
                format!(
                    "the shop answered {tool} with the id of a {object_name} made for another agent through CajaGuard; it is not handed over, make another"
                ),
            ),
            Err(e) => {
                tracing::error!("store failed recording a {object_name} as its agent's: {e}");
                Ruling::new(
                    Reason::StoreUnavailable,
                    format!(
                        "the shop made the {object_name} but it could not be recorded as this agent's, so it is not handed over (it would be refused when used); make another: {}",
                        e.for_agent()
                    ),
                )
            }
        };
        self.audit_refusal(tool, &ruling);
        refusal(&ruling)
    }

    /// Records the order checkout `checkout_id` of this session's agent shows (its payment's
    /// answer, or a later `get_checkout`) as the agent's; nothing if the shop answered with
    /// another checkout. The payment is made whatever happens here, so a failure only leaves the
    /// order no agent's: its `get_order` is refused (fail closed).
    pub(super) fn bind_order_of(&self, checkout_id: &str, checkout: &Value) {
        let Some(agent) = self.agent.as_ref() else {
            return;
        };
        if checkout.get("id").and_then(Value::as_str) != Some(checkout_id) {
            return;
        }
        let Some(order) = checkout.pointer("/order/id").and_then(Value::as_str) else {
            return;
        };
        match self
            .store
            .bind_to_agent(ShopObject::Order, order, agent, (self.clock)())
        {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                "the shop's order for this agent's checkout is recorded as another agent's; its get_order stays refused"
            ),
            Err(e) => tracing::warn!("an order was not recorded as its agent's: {e}"),
        }
    }

    /// [`Proxy::bind_order_of`] for a forwarded `get_checkout` of `arguments`.
    pub(super) fn bind_order_shown(&self, arguments: &Value, answer: &Answer) {
        if self.agent.is_none() {
            return;
        }
        // Most reads show no order: they are not parsed a second time for one. (Not `"order"`
        // with its quotes: in a text part they are escaped.)
        if let Answer::Result(result) = answer
            && result.contains("order")
            && let Some(checkout_id) = arguments.get("id").and_then(Value::as_str)
            && let Some(checkout) = answered_object(result)
        {
            self.bind_order_of(checkout_id, &checkout);
        }
    }
}

/// The object a tool's result holds: its `structuredContent`, or, from servers that predate
/// structured content, the JSON of its first text part (as the gate reads `get_checkout`,
/// `checkout.rs`). Nothing for an error.
fn answered_object(result: &str) -> Option<Value> {
    let mut result: Value = serde_json::from_str(result).ok()?;
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    match result.get_mut("structuredContent") {
        Some(content) => Some(content.take()),
        None => result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .and_then(|text| serde_json::from_str::<Value>(text).ok()),
    }
}

/// The id of what a `create_checkout` or `create_cart` result holds.
fn made_id(result: &str) -> Option<String> {
    answered_object(result)?
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_made_id_is_read_where_the_gate_reads_a_checkout() {
        let structured = r#"{"content":[],"structuredContent":{"id":"gid://s/Checkout/1","status":"incomplete"},"isError":false}"#;
        assert_eq!(made_id(structured).as_deref(), Some("gid://s/Checkout/1"));
        let text_only = r#"{"content":[{"type":"text","text":"{\"id\":\"gid://s/Cart/2\"}"}]}"#;
        assert_eq!(made_id(text_only).as_deref(), Some("gid://s/Cart/2"));
        for nothing in [
            r#"{"content":[],"structuredContent":{"id":"gid://s/Checkout/3"},"isError":true}"#,
            r#"{"content":[{"type":"text","text":"out of stock"}]}"#,
            r#"{"structuredContent":{"id":42}}"#,
            "not json",
        ] {
            assert_eq!(made_id(nothing), None, "{nothing}");
        }
    }

    #[test]
    fn every_ucp_tool_that_names_or_makes_an_object_is_known_here() {
        for (tool, _) in cajaguard_core::request::PINNED_ARGUMENTS {
            let covered = named_by(tool).is_some()
                || made_by(tool).is_some()
                || matches!(
                    *tool,
                    // Checked by its claim; the catalog's are the shop's, not an agent's.
                    "complete_checkout" | "search_catalog" | "lookup_catalog" | "get_product"
                );
            assert!(covered, "{tool} names or makes something no check knows of");
        }
    }
}

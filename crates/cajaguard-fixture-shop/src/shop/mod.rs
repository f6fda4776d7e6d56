//! The UCP shopping operations, as a pure function of the state and one call's arguments.
//!
//! Every answer is a UCP document: the resource (checkout, cart, order, catalog response), a
//! checkout carrying error `messages` (payment problems on complete), or a UCP error response
//! (`{"ucp": {"status": "error"}, "messages": [...]}`) when no valid resource can be acted on.
//! Failures are tool results with `isError: true`; the only JSON-RPC error the shop produces
//! is -32000, for an idempotency key reused with another request body.
//!
//! This file holds the tool table and the idempotency replay; `args.rs` the argument checks and
//! error documents, `checkout.rs`, `cart.rs` and `search.rs` the operations, `render.rs` the UCP
//! documents they answer with.

mod args;
mod cart;
mod checkout;
mod render;
mod search;

use serde_json::{Map, Value, json};

use args::{check_meta, error, find_cart, find_checkout, get_str, not_found};
use cart::{create_cart, update_cart};
use checkout::{cancel_checkout, complete_checkout, create_checkout, update_checkout};
use render::{render_cart, render_checkout, render_order};
use search::{get_product, lookup_catalog, search_catalog};

use crate::store::{IdempotencyRecord, Outcome, State};

/// The UCP version the fixture speaks (the pinned spec is the pre-release of 2026-08-25).
pub const UCP_VERSION: &str = "2026-08-25";
pub const TEST_HANDLER: &str = "fixture_test_handler";
pub const SHOP_PAY_HANDLER: &str = "com.shopify.shop_pay";
pub const HANDLERS: &[&str] = &[TEST_HANDLER, SHOP_PAY_HANDLER];
pub const DECLINE_TOKEN: &str = "cg_test_decline_0001";
/// The largest quantity one line may hold.
pub const MAX_QUANTITY: u64 = 999;
const MAX_LINES: usize = 50;
/// JSON-RPC error code for an idempotency key reused with a different request body.
pub const IDEMPOTENCY_CONFLICT: i32 = -32000;

/// The 13 tools of `mcp.openrpc.json`, with whether `meta.idempotency-key` is required.
pub const TOOLS: &[(&str, bool)] = &[
    ("create_checkout", false),
    ("get_checkout", false),
    ("update_checkout", false),
    ("complete_checkout", true),
    ("cancel_checkout", true),
    ("create_cart", false),
    ("get_cart", false),
    ("update_cart", false),
    ("cancel_cart", true),
    ("search_catalog", false),
    ("lookup_catalog", false),
    ("get_product", false),
    ("get_order", false),
];

/// A failed operation: the UCP document to return with `isError: true`.
struct Fail(Value);

type Answer = Result<Value, Fail>;

/// Token credentials the fixture accepts: `^cg_test_[A-Za-z0-9_]{8,}$`.
pub fn is_test_token(token: &str) -> bool {
    token.strip_prefix("cg_test_").is_some_and(|rest| {
        rest.len() >= 8 && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Handles one `tools/call`. Unknown tools are a JSON-RPC error (-32602).
pub fn handle(state: &mut State, tool: &str, arguments: Option<&Map<String, Value>>) -> Outcome {
    let empty = Map::new();
    let args = arguments.unwrap_or(&empty);
    let Some(&(_, needs_key)) = TOOLS.iter().find(|(name, _)| *name == tool) else {
        return Outcome::RpcError {
            code: -32602,
            message: format!("unknown tool {tool:?}"),
            data: None,
        };
    };
    let key = args
        .get("meta")
        .and_then(|m| m.get("idempotency-key"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let body = Value::Object(args.clone());
    if let Some(key) = &key
        && let Some(record) = state.idempotency.get(key)
    {
        if record.tool == tool && record.arguments == body {
            return record.outcome.clone();
        }
        return Outcome::RpcError {
            code: IDEMPOTENCY_CONFLICT,
            message: "idempotency key reused with a different request body".into(),
            data: Some(json!({"idempotency-key": key, "first_tool": record.tool})),
        };
    }
    let answer = check_meta(args, needs_key).and_then(|()| dispatch(state, tool, args));
    let outcome = match answer {
        Ok(structured) => Outcome::Result {
            structured,
            is_error: false,
        },
        Err(Fail(structured)) => Outcome::Result {
            structured,
            is_error: true,
        },
    };
    if let Some(key) = key {
        state.idempotency.insert(
            key,
            IdempotencyRecord {
                tool: tool.to_owned(),
                arguments: body,
                outcome: outcome.clone(),
            },
        );
    }
    outcome
}

fn dispatch(state: &mut State, tool: &str, args: &Map<String, Value>) -> Answer {
    match tool {
        "create_checkout" => create_checkout(state, args),
        "get_checkout" => {
            let id = get_str(args, "id")?;
            Ok(render_checkout(find_checkout(state, id)?, &[]))
        }
        "update_checkout" => update_checkout(state, args),
        "complete_checkout" => complete_checkout(state, args),
        "cancel_checkout" => cancel_checkout(state, args),
        "create_cart" => create_cart(state, args),
        "get_cart" => {
            let id = get_str(args, "id")?;
            Ok(render_cart(find_cart(state, id)?))
        }
        "update_cart" => update_cart(state, args),
        "cancel_cart" => {
            let id = get_str(args, "id")?;
            let cart = find_cart(state, id)?;
            let answer = render_cart(cart);
            state.carts.remove(id);
            Ok(answer)
        }
        "search_catalog" => search_catalog(args),
        "lookup_catalog" => lookup_catalog(args),
        "get_product" => get_product(args),
        "get_order" => {
            let id = get_str(args, "id")?;
            let order = state
                .orders
                .get(id)
                .ok_or_else(|| not_found("order", id, "$.id"))?;
            Ok(render_order(order))
        }
        _ => Err(error(
            "invalid_request",
            format!("unknown tool {tool:?}"),
            None,
        )),
    }
}

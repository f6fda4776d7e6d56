//! The UCP shopping operations, as a pure function of the state and one call's arguments.
//!
//! Every answer is a UCP document: the resource (checkout, cart, order, catalog response), a
//! checkout carrying error `messages` (payment problems on complete), or a UCP error response
//! (`{"ucp": {"status": "error"}, "messages": [...]}`) when no valid resource can be acted on.
//! Failures are tool results with `isError: true`; the only JSON-RPC error the shop produces
//! is -32000, for an idempotency key reused with another request body.

use serde_json::{Map, Value, json};

use crate::catalog::{self, Product};
use crate::store::{Cart, Checkout, IdempotencyRecord, Line, Order, Outcome, State};

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

// ---------------------------------------------------------------------------------------------
// Errors and argument checks

fn error_with(code: &str, content: impl Into<String>, path: Option<&str>, severity: &str) -> Fail {
    let mut message = json!({
        "type": "error",
        "code": code,
        "content": content.into(),
        "severity": severity,
    });
    if let (Some(path), Some(obj)) = (path, message.as_object_mut()) {
        obj.insert("path".into(), json!(path));
    }
    Fail(json!({
        "ucp": {"version": UCP_VERSION, "status": "error"},
        "messages": [message],
    }))
}

/// A UCP error response the platform can fix by changing its request.
fn error(code: &str, content: impl Into<String>, path: Option<&str>) -> Fail {
    error_with(code, content, path, "recoverable")
}

fn not_found(what: &str, id: &str, path: &str) -> Fail {
    error_with(
        "not_found",
        format!("no {what} with id {id:?}"),
        Some(path),
        "unrecoverable",
    )
}

fn check_meta(args: &Map<String, Value>, needs_key: bool) -> Result<(), Fail> {
    let bad = |content: &str, path: &str| error("invalid_request", content, Some(path));
    let Some(meta) = args.get("meta") else {
        return Err(bad(
            "meta is required: an object with \"ucp-agent\": {\"profile\": URL}",
            "$.meta",
        ));
    };
    let Some(meta) = meta.as_object() else {
        return Err(bad("meta must be an object", "$.meta"));
    };
    let profile = meta
        .get("ucp-agent")
        .and_then(Value::as_object)
        .and_then(|a| a.get("profile"))
        .and_then(Value::as_str);
    if profile.is_none_or(str::is_empty) {
        return Err(bad(
            "meta.ucp-agent.profile is required: the URL of the platform's UCP profile",
            "$.meta.ucp-agent.profile",
        ));
    }
    match meta.get("idempotency-key") {
        None if needs_key => Err(bad(
            "meta.idempotency-key is required for this operation (a UUID, new for each attempt)",
            "$.meta.idempotency-key",
        )),
        Some(Value::String(k)) if k.is_empty() => Err(bad(
            "meta.idempotency-key must not be empty",
            "$.meta.idempotency-key",
        )),
        Some(v) if !v.is_string() => Err(bad(
            "meta.idempotency-key must be a string",
            "$.meta.idempotency-key",
        )),
        _ => Ok(()),
    }
}

fn get_str<'a>(args: &'a Map<String, Value>, name: &str) -> Result<&'a str, Fail> {
    args.get(name).and_then(Value::as_str).ok_or_else(|| {
        error(
            "invalid_request",
            format!("{name} is required and must be a string"),
            Some(&format!("$.{name}")),
        )
    })
}

fn get_obj<'a>(args: &'a Map<String, Value>, name: &str) -> Result<&'a Map<String, Value>, Fail> {
    args.get(name).and_then(Value::as_object).ok_or_else(|| {
        error(
            "invalid_request",
            format!("{name} is required and must be an object"),
            Some(&format!("$.{name}")),
        )
    })
}

fn find_checkout<'a>(state: &'a State, id: &str) -> Result<&'a Checkout, Fail> {
    state
        .checkouts
        .get(id)
        .ok_or_else(|| not_found("checkout", id, "$.id"))
}

fn find_cart<'a>(state: &'a State, id: &str) -> Result<&'a Cart, Fail> {
    state
        .carts
        .get(id)
        .ok_or_else(|| not_found("cart", id, "$.id"))
}

/// Parses `line_items` against the catalog; all items must come from one merchant.
fn parse_lines(
    body: &Map<String, Value>,
    root: &str,
) -> Result<(Vec<Line>, &'static Product), Fail> {
    let path = format!("{root}.line_items");
    let bad = |content: String, path: &str| error("invalid_request", content, Some(path));
    let Some(items) = body.get("line_items") else {
        return Err(bad(format!("{path} is required"), &path));
    };
    let Some(items) = items.as_array() else {
        return Err(bad(format!("{path} must be an array"), &path));
    };
    if items.is_empty() {
        return Err(bad(format!("{path} must hold at least one item"), &path));
    }
    if items.len() > MAX_LINES {
        return Err(bad(
            format!("{path} holds {} lines; at most {MAX_LINES}", items.len()),
            &path,
        ));
    }
    let mut lines = Vec::with_capacity(items.len());
    let mut first: Option<&'static Product> = None;
    for (i, entry) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let item_id = entry
            .get("item")
            .and_then(|item| item.get("id"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                bad(
                    format!("{at}.item.id is required and must be a string"),
                    &format!("{at}.item.id"),
                )
            })?;
        let product = catalog::find(item_id).ok_or_else(|| {
            error_with(
                "not_found",
                format!("no product with id {item_id:?}"),
                Some(&format!("{at}.item.id")),
                "recoverable",
            )
        })?;
        let quantity = entry.get("quantity").and_then(Value::as_u64);
        let Some(quantity) = quantity.filter(|q| (1..=MAX_QUANTITY).contains(q)) else {
            return Err(error(
                "invalid_quantity",
                format!("{at}.quantity must be an integer from 1 to {MAX_QUANTITY}"),
                Some(&format!("{at}.quantity")),
            ));
        };
        match first {
            Some(f) if f.merchant != product.merchant => {
                return Err(error(
                    "mixed_merchants",
                    format!(
                        "line items come from more than one merchant ({} and {}); a checkout holds one merchant's items",
                        f.merchant, product.merchant
                    ),
                    Some(&format!("{at}.item.id")),
                ));
            }
            Some(_) => {}
            None => first = Some(product),
        }
        lines.push(Line {
            line_id: format!("li_{}", i + 1),
            item_id: item_id.to_owned(),
            slug: product.slug.to_owned(),
            quantity,
        });
    }
    let product = first.ok_or_else(|| bad(format!("{path} must hold at least one item"), &path))?;
    Ok((lines, product))
}

/// Parses `payment.instruments` (optional on create/update); credentials are dropped.
fn parse_instruments(body: &Map<String, Value>, root: &str) -> Result<Vec<Value>, Fail> {
    let Some(payment) = body.get("payment") else {
        return Ok(Vec::new());
    };
    let path = format!("{root}.payment");
    let bad = |content: String, path: &str| error("invalid_request", content, Some(path));
    let Some(payment) = payment.as_object() else {
        return Err(bad(format!("{path} must be an object"), &path));
    };
    let Some(instruments) = payment.get("instruments") else {
        return Ok(Vec::new());
    };
    let Some(instruments) = instruments.as_array() else {
        return Err(bad(
            format!("{path}.instruments must be an array"),
            &format!("{path}.instruments"),
        ));
    };
    let mut out = Vec::new();
    for (i, instrument) in instruments.iter().enumerate() {
        let at = format!("{path}.instruments[{i}]");
        let Some(obj) = instrument.as_object() else {
            return Err(bad(format!("{at} must be an object"), &at));
        };
        for field in ["id", "handler_id", "type"] {
            if !obj.get(field).is_some_and(Value::is_string) {
                return Err(bad(
                    format!("{at}.{field} is required and must be a string"),
                    &format!("{at}.{field}"),
                ));
            }
        }
        let mut clean = obj.clone();
        clean.remove("credential");
        out.push(Value::Object(clean));
    }
    Ok(out)
}

fn unknown_handlers(instruments: &[Value]) -> Vec<(usize, String)> {
    instruments
        .iter()
        .enumerate()
        .filter_map(|(i, inst)| {
            let handler = inst.get("handler_id").and_then(Value::as_str).unwrap_or("");
            (!HANDLERS.contains(&handler)).then(|| (i, handler.to_owned()))
        })
        .collect()
}

/// A checkout is `ready_for_complete` once it holds line items (all from one merchant, which
/// creation already enforces) and every payment instrument it was given names a handler this
/// shop offers. A payment instrument is not needed: UCP sends it with `complete_checkout`.
fn recompute_status(c: &mut Checkout) {
    if c.status == "completed" || c.status == "canceled" {
        return;
    }
    c.status = if !c.lines.is_empty() && unknown_handlers(&c.instruments).is_empty() {
        "ready_for_complete".into()
    } else {
        "incomplete".into()
    };
}

// ---------------------------------------------------------------------------------------------
// Checkouts

fn create_checkout(state: &mut State, args: &Map<String, Value>) -> Answer {
    let body = get_obj(args, "checkout")?;
    let cart_id = body.get("cart_id").and_then(Value::as_str);
    let (lines, product) = match (body.get("line_items"), cart_id) {
        (None, Some(cart_id)) => {
            let cart = state
                .carts
                .get(cart_id)
                .ok_or_else(|| not_found("cart", cart_id, "$.checkout.cart_id"))?;
            let product = cart
                .lines
                .first()
                .and_then(|l| catalog::find(&l.slug))
                .ok_or_else(|| error("invalid_request", "the cart is empty", None))?;
            (cart.lines.clone(), product)
        }
        _ => parse_lines(body, "$.checkout")?,
    };
    let instruments = parse_instruments(body, "$.checkout")?;
    state.next_checkout += 1;
    let n = state.next_checkout;
    let mut checkout = Checkout {
        n,
        merchant: product.merchant.into(),
        currency: product.currency.into(),
        lines,
        status: String::new(),
        instruments,
        buyer: body.get("buyer").cloned(),
        order_id: None,
        cart_id: cart_id.map(str::to_owned),
    };
    recompute_status(&mut checkout);
    let answer = render_checkout(&checkout, &[]);
    state.checkouts.insert(checkout_id(n), checkout);
    Ok(answer)
}

fn checkout_id(n: u64) -> String {
    format!("gid://fixture/Checkout/{n}")
}

fn refuse_if_closed(c: &Checkout, id: &str) -> Result<(), Fail> {
    match c.status.as_str() {
        "completed" => Err(error_with(
            "checkout_completed",
            format!(
                "checkout {id} is already completed (order {}); it cannot be changed or completed again",
                c.order_id.as_deref().unwrap_or("-")
            ),
            Some("$.id"),
            "unrecoverable",
        )),
        "canceled" => Err(error_with(
            "checkout_canceled",
            format!("checkout {id} was canceled; create a new checkout"),
            Some("$.id"),
            "unrecoverable",
        )),
        _ => Ok(()),
    }
}

fn update_checkout(state: &mut State, args: &Map<String, Value>) -> Answer {
    let id = get_str(args, "id")?;
    let body = get_obj(args, "checkout")?;
    let current = find_checkout(state, id)?;
    refuse_if_closed(current, id)?;
    // Full replacement: line items are required, payment and buyer replace what was there.
    let (lines, product) = parse_lines(body, "$.checkout")?;
    let instruments = parse_instruments(body, "$.checkout")?;
    let mut next = current.clone();
    next.merchant = product.merchant.into();
    next.currency = product.currency.into();
    next.lines = lines;
    next.instruments = instruments;
    next.buyer = body.get("buyer").cloned();
    recompute_status(&mut next);
    let answer = render_checkout(&next, &[]);
    state.checkouts.insert(id.to_owned(), next);
    Ok(answer)
}

fn cancel_checkout(state: &mut State, args: &Map<String, Value>) -> Answer {
    let id = get_str(args, "id")?;
    let current = find_checkout(state, id)?;
    refuse_if_closed(current, id)?;
    let mut next = current.clone();
    next.status = "canceled".into();
    let answer = render_checkout(&next, &[]);
    state.checkouts.insert(id.to_owned(), next);
    Ok(answer)
}

fn complete_checkout(state: &mut State, args: &Map<String, Value>) -> Answer {
    let id = get_str(args, "id")?;
    let body = get_obj(args, "checkout")?;
    let current = find_checkout(state, id)?;
    refuse_if_closed(current, id)?;
    if current.status != "ready_for_complete" {
        return Err(Fail(render_checkout(
            current,
            &[message(
                "checkout_not_ready",
                &format!(
                    "checkout {id} is {}; it cannot be completed yet",
                    current.status
                ),
                "$.status",
            )],
        )));
    }
    let Some(payment) = body.get("payment").and_then(Value::as_object) else {
        return Err(error(
            "invalid_request",
            "checkout.payment is required on complete",
            Some("$.checkout.payment"),
        ));
    };
    let instruments = payment
        .get("instruments")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| {
            error(
                "invalid_request",
                "checkout.payment.instruments must hold at least one instrument",
                Some("$.checkout.payment.instruments"),
            )
        })?;
    let index = instruments
        .iter()
        .position(|i| i.get("selected").and_then(Value::as_bool) == Some(true))
        .unwrap_or(0);
    let at = format!("$.checkout.payment.instruments[{index}]");
    let chosen = instruments
        .get(index)
        .and_then(Value::as_object)
        .ok_or_else(|| {
            error(
                "invalid_request",
                format!("{at} must be an object"),
                Some(&at),
            )
        })?;
    let handler = chosen
        .get("handler_id")
        .and_then(Value::as_str)
        .unwrap_or("");
    let payment_problem = |code: &str, content: &str, path: String| {
        Fail(render_checkout(current, &[message(code, content, &path)]))
    };
    if !HANDLERS.contains(&handler) {
        return Err(payment_problem(
            "payment_handler_unsupported",
            &format!("this shop offers the payment handlers {HANDLERS:?}, not {handler:?}"),
            format!("{at}.handler_id"),
        ));
    }
    let credential = chosen.get("credential").and_then(Value::as_object);
    let token = credential
        .filter(|c| c.get("type").and_then(Value::as_str) == Some("token"))
        .and_then(|c| c.get("token"))
        .and_then(Value::as_str);
    let Some(token) = token.filter(|t| is_test_token(t)) else {
        return Err(payment_problem(
            "payment_failed",
            "the credential must be a token credential holding a test token (cg_test_...)",
            format!("{at}.credential"),
        ));
    };
    if token == DECLINE_TOKEN {
        return Err(payment_problem(
            "payment_declined",
            "card declined: the issuer refused the payment; try another payment instrument",
            format!("{at}.credential"),
        ));
    }
    let mut clean = chosen.clone();
    clean.remove("credential");
    let mut next = current.clone();
    state.next_order += 1;
    let n = state.next_order;
    let order_id = format!("gid://fixture/Order/{n}");
    next.status = "completed".into();
    next.order_id = Some(order_id.clone());
    next.instruments = vec![Value::Object(clean)];
    let answer = render_checkout(&next, &[]);
    state.orders.insert(
        order_id,
        Order {
            n,
            checkout_id: id.to_owned(),
            merchant: next.merchant.clone(),
            currency: next.currency.clone(),
            lines: next.lines.clone(),
        },
    );
    state.checkouts.insert(id.to_owned(), next);
    Ok(answer)
}

fn message(code: &str, content: &str, path: &str) -> Value {
    json!({
        "type": "error",
        "code": code,
        "path": path,
        "content": content,
        "severity": "recoverable",
    })
}

// ---------------------------------------------------------------------------------------------
// Carts

fn create_cart(state: &mut State, args: &Map<String, Value>) -> Answer {
    let body = get_obj(args, "cart")?;
    let (lines, product) = parse_lines(body, "$.cart")?;
    state.next_cart += 1;
    let n = state.next_cart;
    let cart = Cart {
        n,
        merchant: product.merchant.into(),
        currency: product.currency.into(),
        lines,
        buyer: body.get("buyer").cloned(),
    };
    let answer = render_cart(&cart);
    state.carts.insert(format!("gid://fixture/Cart/{n}"), cart);
    Ok(answer)
}

fn update_cart(state: &mut State, args: &Map<String, Value>) -> Answer {
    let id = get_str(args, "id")?;
    let body = get_obj(args, "cart")?;
    let current = find_cart(state, id)?;
    let (lines, product) = parse_lines(body, "$.cart")?;
    let mut next = current.clone();
    next.merchant = product.merchant.into();
    next.currency = product.currency.into();
    next.lines = lines;
    next.buyer = body.get("buyer").cloned();
    let answer = render_cart(&next);
    state.carts.insert(id.to_owned(), next);
    Ok(answer)
}

// ---------------------------------------------------------------------------------------------
// Catalog

fn search_catalog(args: &Map<String, Value>) -> Answer {
    let catalog = get_obj(args, "catalog")?;
    let query = match catalog.get("query") {
        None => "",
        Some(Value::String(q)) => q.as_str(),
        Some(_) => {
            return Err(error(
                "invalid_request",
                "catalog.query must be a string",
                Some("$.catalog.query"),
            ));
        }
    };
    let products: Vec<Value> = catalog::search(query)
        .into_iter()
        .map(|p| render_product(p, None))
        .collect();
    let count = products.len();
    Ok(json!({
        "ucp": ucp_success("dev.ucp.shopping.catalog.search"),
        "products": products,
        "pagination": {"has_next_page": false, "total_count": count},
    }))
}

fn lookup_catalog(args: &Map<String, Value>) -> Answer {
    let catalog = get_obj(args, "catalog")?;
    let ids = catalog
        .get("ids")
        .and_then(Value::as_array)
        .filter(|ids| !ids.is_empty() && ids.len() <= 100)
        .ok_or_else(|| {
            error(
                "invalid_request",
                "catalog.ids must be an array of 1 to 100 product ids",
                Some("$.catalog.ids"),
            )
        })?;
    let mut products = Vec::new();
    let mut messages = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let Some(id) = id.as_str() else {
            return Err(error(
                "invalid_request",
                format!("catalog.ids[{i}] must be a string"),
                Some(&format!("$.catalog.ids[{i}]")),
            ));
        };
        match catalog::find(id) {
            Some(p) => products.push(render_product(p, Some(id))),
            None => messages.push(json!({
                "type": "info",
                "path": format!("$.catalog.ids[{i}]"),
                "content": format!("no product with id {id:?}"),
            })),
        }
    }
    let mut answer = json!({
        "ucp": ucp_success("dev.ucp.shopping.catalog.lookup"),
        "products": products,
    });
    if !messages.is_empty()
        && let Some(obj) = answer.as_object_mut()
    {
        obj.insert("messages".into(), Value::Array(messages));
    }
    Ok(answer)
}

fn get_product(args: &Map<String, Value>) -> Answer {
    let catalog = get_obj(args, "catalog")?;
    let id = catalog.get("id").and_then(Value::as_str).ok_or_else(|| {
        error(
            "invalid_request",
            "catalog.id is required and must be a string",
            Some("$.catalog.id"),
        )
    })?;
    let product = catalog::find(id).ok_or_else(|| not_found("product", id, "$.catalog.id"))?;
    Ok(json!({
        "ucp": ucp_success("dev.ucp.shopping.catalog.lookup"),
        "product": render_product(product, None),
    }))
}

// ---------------------------------------------------------------------------------------------
// Rendering

fn ucp_success(capability: &str) -> Value {
    json!({
        "version": UCP_VERSION,
        "status": "success",
        "capabilities": {capability: [{"version": UCP_VERSION}]},
    })
}

fn ucp_checkout() -> Value {
    json!({
        "version": UCP_VERSION,
        "status": "success",
        "capabilities": {"dev.ucp.shopping.checkout": [{"version": UCP_VERSION}]},
        "payment_handlers": {
            "dev.cajaguard.fixture_test": [{"id": TEST_HANDLER, "version": UCP_VERSION}],
            "com.shopify.shop_pay": [{"id": SHOP_PAY_HANDLER, "version": UCP_VERSION}],
        },
    })
}

/// An amount as this merchant reports it: minor units, or major units for the broken shop.
fn amount(value: u64, sloppy: bool) -> Value {
    if sloppy {
        json!(value as f64 / 100.0)
    } else {
        json!(value)
    }
}

fn links(merchant: &str) -> Value {
    json!([
        {"type": "privacy_policy", "url": format!("https://{merchant}/policies/privacy")},
        {"type": "terms_of_service", "url": format!("https://{merchant}/policies/terms")},
        {"type": "refund_policy", "url": format!("https://{merchant}/policies/refunds")},
    ])
}

fn sloppy(merchant: &str) -> bool {
    catalog::CATALOG
        .iter()
        .any(|p| p.merchant == merchant && p.sloppy_units)
}

fn totals(subtotal: u64, sloppy: bool) -> Value {
    json!([
        {"type": "subtotal", "display_text": "Subtotal", "amount": amount(subtotal, sloppy)},
        {"type": "total", "display_text": "Total", "amount": amount(subtotal, sloppy)},
    ])
}

/// Line items and their subtotal. Quantities are at most 999 and prices small, so the
/// arithmetic cannot overflow; it saturates all the same.
fn render_lines(lines: &[Line], sloppy: bool) -> (Vec<Value>, u64) {
    let mut subtotal = 0u64;
    let rendered = lines
        .iter()
        .map(|l| {
            let (title, price) = catalog::find(&l.slug).map_or(("?", 0), |p| (p.title, p.price));
            let line_total = price.saturating_mul(l.quantity);
            subtotal = subtotal.saturating_add(line_total);
            json!({
                "id": l.line_id,
                "item": {"id": l.item_id, "title": title, "price": amount(price, sloppy)},
                "quantity": l.quantity,
                "totals": [
                    {"type": "subtotal", "amount": amount(line_total, sloppy)},
                    {"type": "total", "amount": amount(line_total, sloppy)},
                ],
            })
        })
        .collect();
    (rendered, subtotal)
}

pub fn render_checkout(c: &Checkout, messages: &[Value]) -> Value {
    let sloppy = sloppy(&c.merchant);
    let (lines, subtotal) = render_lines(&c.lines, sloppy);
    let mut all_messages: Vec<Value> = unknown_handlers(&c.instruments)
        .into_iter()
        .map(|(i, handler)| {
            message(
                "payment_handler_unsupported",
                &format!("this shop offers the payment handlers {HANDLERS:?}, not {handler:?}"),
                &format!("$.payment.instruments[{i}].handler_id"),
            )
        })
        .collect();
    all_messages.extend(messages.iter().cloned());
    let mut out = json!({
        "ucp": ucp_checkout(),
        "id": checkout_id(c.n),
        "status": c.status,
        "currency": c.currency,
        "line_items": lines,
        "totals": totals(subtotal, sloppy),
        "links": links(&c.merchant),
        "continue_url": format!("https://{}/checkouts/{}", c.merchant, c.n),
        "payment": {"instruments": c.instruments},
    });
    if let Some(obj) = out.as_object_mut() {
        if let Some(buyer) = &c.buyer {
            obj.insert("buyer".into(), buyer.clone());
        }
        if let Some(cart_id) = &c.cart_id {
            obj.insert("cart_id".into(), json!(cart_id));
        }
        if !all_messages.is_empty() {
            obj.insert("messages".into(), Value::Array(all_messages));
        }
        if let Some(order_id) = &c.order_id {
            let n = order_id.rsplit('/').next().unwrap_or("0");
            obj.insert(
                "order".into(),
                json!({
                    "id": order_id,
                    "label": format!("#{n}"),
                    "permalink_url": format!("https://{}/orders/{n}", c.merchant),
                }),
            );
        }
    }
    out
}

fn render_cart(c: &Cart) -> Value {
    let sloppy = sloppy(&c.merchant);
    let (lines, subtotal) = render_lines(&c.lines, sloppy);
    let mut out = json!({
        "ucp": ucp_success("dev.ucp.shopping.cart"),
        "id": format!("gid://fixture/Cart/{}", c.n),
        "currency": c.currency,
        "line_items": lines,
        "totals": totals(subtotal, sloppy),
        "links": links(&c.merchant),
        "continue_url": format!("https://{}/carts/{}", c.merchant, c.n),
    });
    if let (Some(buyer), Some(obj)) = (&c.buyer, out.as_object_mut()) {
        obj.insert("buyer".into(), buyer.clone());
    }
    out
}

fn render_order(o: &Order) -> Value {
    let sloppy = sloppy(&o.merchant);
    let (lines, subtotal) = render_lines(&o.lines, sloppy);
    let lines: Vec<Value> = lines
        .into_iter()
        .zip(&o.lines)
        .map(|(mut line, l)| {
            if let Some(obj) = line.as_object_mut() {
                obj.insert(
                    "quantity".into(),
                    json!({"original": l.quantity, "total": l.quantity, "fulfilled": 0}),
                );
                obj.insert("status".into(), json!("processing"));
            }
            line
        })
        .collect();
    json!({
        "ucp": ucp_success("dev.ucp.shopping.order"),
        "id": format!("gid://fixture/Order/{}", o.n),
        "label": format!("#{}", o.n),
        "checkout_id": o.checkout_id,
        "permalink_url": format!("https://{}/orders/{}", o.merchant, o.n),
        "line_items": lines,
        "fulfillment": {"expectations": [], "events": []},
        "currency": o.currency,
        "totals": totals(subtotal, sloppy),
    })
}

fn render_product(p: &Product, requested: Option<&str>) -> Value {
    let price = json!({"amount": amount(p.price, p.sloppy_units), "currency": p.currency});
    let description = json!({"plain": format!("{} from {}.", p.title, p.merchant)});
    let mut variant = json!({
        "id": p.variant_id(),
        "sku": p.slug,
        "title": p.title,
        "description": description,
        "price": price,
        "availability": {"available": true, "status": "in_stock"},
        "seller": {"name": p.merchant, "links": [
            {"type": "privacy_policy", "url": format!("https://{}/policies/privacy", p.merchant)},
        ]},
    });
    if let (Some(id), Some(obj)) = (requested, variant.as_object_mut()) {
        let matched = if id == p.variant_id() {
            "exact"
        } else {
            "featured"
        };
        obj.insert("inputs".into(), json!([{"id": id, "match": matched}]));
    }
    json!({
        "id": p.id(),
        "handle": p.slug,
        "title": p.title,
        "description": description,
        "url": format!("https://{}/products/{}", p.merchant, p.slug),
        "price_range": {"min": price, "max": price},
        "variants": [variant],
        "metadata": {"merchant": p.merchant},
    })
}

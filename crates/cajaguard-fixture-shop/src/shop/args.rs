//! UCP error documents and the checks on a call's arguments (meta, lines, instruments).

use crate::catalog::{self, Product};
use crate::store::{Cart, Checkout, Line, State};
use serde_json::{Map, Value, json};

use super::{Fail, HANDLERS, MAX_LINES, MAX_QUANTITY, UCP_VERSION};

pub(super) fn error_with(
    code: &str,
    content: impl Into<String>,
    path: Option<&str>,
    severity: &str,
) -> Fail {
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
pub(super) fn error(code: &str, content: impl Into<String>, path: Option<&str>) -> Fail {
    error_with(code, content, path, "recoverable")
}

pub(super) fn not_found(what: &str, id: &str, path: &str) -> Fail {
    error_with(
        "not_found",
        format!("no {what} with id {id:?}"),
        Some(path),
        "unrecoverable",
    )
}

pub(super) fn check_meta(args: &Map<String, Value>, needs_key: bool) -> Result<(), Fail> {
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

pub(super) fn get_str<'a>(args: &'a Map<String, Value>, name: &str) -> Result<&'a str, Fail> {
    args.get(name).and_then(Value::as_str).ok_or_else(|| {
        error(
            "invalid_request",
            format!("{name} is required and must be a string"),
            Some(&format!("$.{name}")),
        )
    })
}

pub(super) fn get_obj<'a>(
    args: &'a Map<String, Value>,
    name: &str,
) -> Result<&'a Map<String, Value>, Fail> {
    args.get(name).and_then(Value::as_object).ok_or_else(|| {
        error(
            "invalid_request",
            format!("{name} is required and must be an object"),
            Some(&format!("$.{name}")),
        )
    })
}

pub(super) fn find_checkout<'a>(state: &'a State, id: &str) -> Result<&'a Checkout, Fail> {
    state
        .checkouts
        .get(id)
        .ok_or_else(|| not_found("checkout", id, "$.id"))
}

pub(super) fn find_cart<'a>(state: &'a State, id: &str) -> Result<&'a Cart, Fail> {
    state
        .carts
        .get(id)
        .ok_or_else(|| not_found("cart", id, "$.id"))
}

/// Parses `line_items` against the catalog; all items must come from one merchant.
pub(super) fn parse_lines(
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
pub(super) fn parse_instruments(body: &Map<String, Value>, root: &str) -> Result<Vec<Value>, Fail> {
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

pub(super) fn unknown_handlers(instruments: &[Value]) -> Vec<(usize, String)> {
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
pub(super) fn recompute_status(c: &mut Checkout) {
    if c.status == "completed" || c.status == "canceled" {
        return;
    }
    c.status = if !c.lines.is_empty() && unknown_handlers(&c.instruments).is_empty() {
        "ready_for_complete".into()
    } else {
        "incomplete".into()
    };
}

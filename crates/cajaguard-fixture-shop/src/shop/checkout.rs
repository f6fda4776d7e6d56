//! Checkouts: create, update, cancel and complete (the payment: handlers, test tokens, declines).

use crate::catalog::{self};
use crate::store::{Checkout, Order, State};
use serde_json::{Map, Value, json};

use super::args::{
    error, error_with, find_checkout, get_obj, get_str, not_found, parse_instruments, parse_lines,
    recompute_status,
};
use super::render::render_checkout;
use super::{Answer, DECLINE_TOKEN, Fail, HANDLERS, is_test_token};

pub(super) fn create_checkout(state: &mut State, args: &Map<String, Value>) -> Answer {
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

pub(super) fn checkout_id(n: u64) -> String {
    format!("gid://fixture/Checkout/{n}")
}

pub(super) fn refuse_if_closed(c: &Checkout, id: &str) -> Result<(), Fail> {
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

pub(super) fn update_checkout(state: &mut State, args: &Map<String, Value>) -> Answer {
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

pub(super) fn cancel_checkout(state: &mut State, args: &Map<String, Value>) -> Answer {
    let id = get_str(args, "id")?;
    let current = find_checkout(state, id)?;
    refuse_if_closed(current, id)?;
    let mut next = current.clone();
    next.status = "canceled".into();
    let answer = render_checkout(&next, &[]);
    state.checkouts.insert(id.to_owned(), next);
    Ok(answer)
}

pub(super) fn complete_checkout(state: &mut State, args: &Map<String, Value>) -> Answer {
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

pub(super) fn message(code: &str, content: &str, path: &str) -> Value {
    json!({
        "type": "error",
        "code": code,
        "path": path,
        "content": content,
        "severity": "recoverable",
    })
}

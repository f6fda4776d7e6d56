//! Carts: create and update.

use crate::store::{Cart, State};
use serde_json::{Map, Value};

use super::Answer;
use super::args::{find_cart, get_obj, get_str, parse_lines};
use super::render::render_cart;

pub(super) fn create_cart(state: &mut State, args: &Map<String, Value>) -> Answer {
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

pub(super) fn update_cart(state: &mut State, args: &Map<String, Value>) -> Answer {
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

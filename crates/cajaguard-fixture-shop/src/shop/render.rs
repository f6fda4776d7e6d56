//! Rendering the state as UCP documents: checkouts, carts, orders and products, with the
//! deliberately sloppy merchant's amounts in major units.

use crate::catalog::{self, Product};
use crate::store::{Cart, Checkout, Line, Order};
use serde_json::{Value, json};

use super::args::unknown_handlers;
use super::checkout::{checkout_id, message};
use super::{HANDLERS, SHOP_PAY_HANDLER, TEST_HANDLER, UCP_VERSION};

pub(super) fn ucp_success(capability: &str) -> Value {
    json!({
        "version": UCP_VERSION,
        "status": "success",
        "capabilities": {capability: [{"version": UCP_VERSION}]},
    })
}

pub(super) fn ucp_checkout() -> Value {
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
pub(super) fn amount(value: u64, sloppy: bool) -> Value {
    if sloppy {
        json!(value as f64 / 100.0)
    } else {
        json!(value)
    }
}

pub(super) fn links(merchant: &str) -> Value {
    json!([
        {"type": "privacy_policy", "url": format!("https://{merchant}/policies/privacy")},
        {"type": "terms_of_service", "url": format!("https://{merchant}/policies/terms")},
        {"type": "refund_policy", "url": format!("https://{merchant}/policies/refunds")},
    ])
}

pub(super) fn sloppy(merchant: &str) -> bool {
    catalog::CATALOG
        .iter()
        .any(|p| p.merchant == merchant && p.sloppy_units)
}

pub(super) fn totals(subtotal: u64, sloppy: bool) -> Value {
    json!([
        {"type": "subtotal", "display_text": "Subtotal", "amount": amount(subtotal, sloppy)},
        {"type": "total", "display_text": "Total", "amount": amount(subtotal, sloppy)},
    ])
}

/// Line items and their subtotal. Quantities are at most 999 and prices small, so the
/// arithmetic cannot overflow; it saturates all the same.
pub(super) fn render_lines(lines: &[Line], sloppy: bool) -> (Vec<Value>, u64) {
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

pub(super) fn render_cart(c: &Cart) -> Value {
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

pub(super) fn render_order(o: &Order) -> Value {
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

pub(super) fn render_product(p: &Product, requested: Option<&str>) -> Value {
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

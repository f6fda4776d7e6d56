//! The catalog tools: search, lookup and one product.

use crate::catalog::{self};
use serde_json::{Map, Value, json};

use super::Answer;
use super::args::{error, get_obj, not_found};
use super::render::{render_product, ucp_success};

pub(super) fn search_catalog(args: &Map<String, Value>) -> Answer {
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

pub(super) fn lookup_catalog(args: &Map<String, Value>) -> Answer {
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

pub(super) fn get_product(args: &Map<String, Value>) -> Answer {
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

//! Checks against the pinned UCP specification, so lists in the code cannot drift from it.
//! The spec lives outside the repository (`shared/ucp` beside the work tree); a missing spec is a
//! failure, never a silent pass.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use cajaguard_core::request::{
    EXTENSION_FIELDS_ON_COMPLETE, PAYMENT_FIELDS_OMITTED_ON_COMPLETE, PINNED_ARGUMENTS,
    PLATFORM_FIELDS_ON_COMPLETE, fields_the_shop_sets, pinned_arguments,
};
use serde_json::Value;

fn ucp_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/ucp"));
    assert!(
        dir.join("source/schemas/shopping/checkout.json").is_file(),
        "the pinned UCP spec is missing: expected it at {} (the `shared/ucp` folder beside the repository); \
         these tests compare the code with it and cannot pass without it",
        dir.display()
    );
    dir
}

fn read(rel: &str) -> Value {
    let path = ucp_dir().join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every schema of the pinned shopping folder, with its file name.
fn shopping_schemas() -> Vec<(String, Value)> {
    let dir = ucp_dir().join("source/schemas/shopping");
    let mut schemas = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let schema = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        schemas.push((name, schema));
    }
    schemas
}

/// `ucp_request` allows the field on complete: `"optional"`/`"required"`, or an object whose
/// `complete` entry is not `"omit"`.
fn sendable_on_complete(annotation: Option<&Value>) -> bool {
    match annotation {
        Some(Value::String(s)) => s != "omit",
        Some(Value::Object(o)) => o
            .get("complete")
            .and_then(Value::as_str)
            .is_some_and(|c| c != "omit"),
        _ => false,
    }
}

#[test]
fn platform_fields_on_complete_come_from_checkout_json() {
    let checkout = read("source/schemas/shopping/checkout.json");
    let props = checkout["properties"]
        .as_object()
        .expect("checkout.json has properties");
    let derived: BTreeSet<&str> = props
        .iter()
        .filter(|(_, p)| sendable_on_complete(p.get("ucp_request")))
        .map(|(k, _)| k.as_str())
        .collect();
    let ours: BTreeSet<&str> = PLATFORM_FIELDS_ON_COMPLETE.iter().copied().collect();
    assert_eq!(
        derived, ours,
        "PLATFORM_FIELDS_ON_COMPLETE drifted from the pinned checkout.json"
    );
    // Every business-owned field SPEC §4.3 names is `omit` on complete.
    for owned in [
        "totals",
        "currency",
        "line_items",
        "status",
        "buyer",
        "context",
        "links",
        "continue_url",
        "messages",
        "order",
    ] {
        assert!(
            props.contains_key(owned) && !derived.contains(owned),
            "{owned}"
        );
    }
}

#[test]
fn extension_fields_on_complete_come_from_the_extension_schemas() {
    let mut derived = BTreeSet::new();
    for (name, schema) in shopping_schemas() {
        if name == "checkout.json" {
            continue;
        }
        let Some(parts) = schema
            .pointer("/$defs/dev.ucp.shopping.checkout/allOf")
            .and_then(Value::as_array)
        else {
            continue;
        };
        for part in parts {
            if let Some(props) = part.get("properties").and_then(Value::as_object) {
                for (k, p) in props {
                    if sendable_on_complete(p.get("ucp_request")) {
                        derived.insert(k.clone());
                    }
                }
            }
        }
    }
    // `payment` is a base field; `buyer` (buyer-consent extension) is business-owned per SPEC §4.3.
    for k in PLATFORM_FIELDS_ON_COMPLETE.iter().chain(["buyer"].iter()) {
        derived.remove(*k);
    }
    let ours: BTreeSet<String> = EXTENSION_FIELDS_ON_COMPLETE
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(
        derived, ours,
        "EXTENSION_FIELDS_ON_COMPLETE drifted from the pinned extension schemas"
    );
}

#[test]
fn quote_field_names_exist_in_the_pinned_schemas() {
    let checkout = read("source/schemas/shopping/checkout.json");
    for f in [
        "id",
        "status",
        "currency",
        "totals",
        "line_items",
        "links",
        "continue_url",
    ] {
        assert!(checkout["properties"].get(f).is_some(), "checkout.{f}");
    }
    assert!(
        checkout["properties"]["status"]["enum"]
            .as_array()
            .unwrap()
            .contains(&Value::from("ready_for_complete"))
    );
    let line = read("source/schemas/shopping/types/line_item.json");
    for f in ["id", "item", "quantity", "totals"] {
        assert!(line["properties"].get(f).is_some(), "line_item.{f}");
    }
    let item = read("source/schemas/shopping/types/item.json");
    for f in ["id", "title", "price"] {
        assert!(item["properties"].get(f).is_some(), "item.{f}");
    }
    let total = read("source/schemas/common/types/total.json");
    for f in ["type", "amount"] {
        assert!(total["properties"].get(f).is_some(), "total.{f}");
    }
    let link = read("source/schemas/common/types/link.json");
    assert!(link["properties"].get("url").is_some());
    let rpc = read("source/services/shopping/mcp.openrpc.json");
    // Every tool's arguments: what complete_checkout takes (`CompleteRequest::from_args`), and
    // what the service holds an agent's calls on its checkouts, carts and orders to.
    let methods = rpc["methods"].as_array().unwrap();
    assert_eq!(methods.len(), PINNED_ARGUMENTS.len());
    for method in methods {
        let name = method["name"].as_str().unwrap();
        let params: BTreeSet<&str> = method["params"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        let pinned = pinned_arguments(name).unwrap_or_else(|| panic!("{name} is not pinned"));
        assert_eq!(params, pinned.iter().copied().collect(), "{name}");
    }
    let meta = &rpc["components"]["schemas"]["meta"]["properties"];
    assert!(meta.get("ucp-agent").is_some() && meta.get("idempotency-key").is_some());
}

/// `ucp_request` says a request leaves the field out on `operation` (`"omit"`, or an object whose
/// `operation` entry is `"omit"`).
fn omitted_on(annotation: Option<&Value>, operation: &str) -> bool {
    match annotation {
        Some(Value::String(s)) => s == "omit",
        Some(Value::Object(o)) => o.get(operation).and_then(Value::as_str) == Some("omit"),
        _ => false,
    }
}

/// The fields of `object` (`checkout` or `cart`) a request leaves out on `operation`: from the
/// object's own schema and from every extension of it in the pinned shopping schemas.
fn omitted_fields(object: &str, operation: &str) -> BTreeSet<String> {
    let mut omitted = BTreeSet::new();
    let mut add = |props: &serde_json::Map<String, Value>| {
        for (name, prop) in props {
            if omitted_on(prop.get("ucp_request"), operation) {
                omitted.insert(name.clone());
            }
        }
    };
    let own = read(&format!("source/schemas/shopping/{object}.json"));
    add(own["properties"].as_object().unwrap());
    let extended = format!("dev.ucp.shopping.{object}");
    for (_, schema) in shopping_schemas() {
        let Some(defs) = schema.get("$defs").and_then(Value::as_object) else {
            continue;
        };
        for (name, def) in defs {
            // cart.json extends the checkout under `checkout` (its `cart_id`).
            let extends = *name == extended || (object == "checkout" && name == "checkout");
            for part in def["allOf"].as_array().into_iter().flatten() {
                if let (true, Some(props)) = (extends, part["properties"].as_object()) {
                    add(props);
                }
            }
        }
    }
    omitted
}

#[test]
fn the_fields_the_shop_sets_come_from_the_schemas() {
    for (tool, object, operation) in [
        ("create_checkout", "checkout", "create"),
        ("update_checkout", "checkout", "update"),
        ("create_cart", "cart", "create"),
        ("update_cart", "cart", "update"),
    ] {
        let (argument, lists) = fields_the_shop_sets(tool).unwrap_or_else(|| panic!("{tool}"));
        assert_eq!(argument, object, "{tool}");
        let ours: BTreeSet<String> = lists
            .iter()
            .flat_map(|fields| fields.iter().map(|f| (*f).to_owned()))
            .collect();
        assert_eq!(
            ours,
            omitted_fields(object, operation),
            "fields_the_shop_sets({tool}) drifted from the pinned schemas"
        );
        assert!(ours.contains("id"), "{tool}");
    }
    for tool in ["complete_checkout", "get_checkout", "search_catalog"] {
        assert!(fields_the_shop_sets(tool).is_none(), "{tool}");
    }
}

#[test]
fn payment_fields_omitted_on_complete_come_from_the_schemas() {
    let mut derived = BTreeSet::new();
    for (_, schema) in shopping_schemas() {
        // An extension's payment object (payment-terms: `$defs/payment`).
        if let Some(props) = schema
            .pointer("/$defs/payment/properties")
            .and_then(Value::as_object)
        {
            for (name, prop) in props {
                if omitted_on(prop.get("ucp_request"), "complete") {
                    derived.insert(name.clone());
                }
            }
        }
    }
    let payment = read("source/schemas/shopping/payment.json");
    for (name, prop) in payment["properties"].as_object().unwrap() {
        if omitted_on(prop.get("ucp_request"), "complete") {
            derived.insert(name.clone());
        }
    }
    let ours: BTreeSet<String> = PAYMENT_FIELDS_OMITTED_ON_COMPLETE
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(
        derived, ours,
        "PAYMENT_FIELDS_OMITTED_ON_COMPLETE drifted from the pinned schemas"
    );
}

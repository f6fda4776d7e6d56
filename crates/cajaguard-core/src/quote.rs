//! The shop's own answer to `get_checkout`, read strictly (SPEC §4.4-4.5). The gate never uses the
//! agent's numbers: only what this module reads from the shop.
//!
//! Strictness is the point: an amount the gate cannot read as integer minor units (`49.99`,
//! `"4999"`, `4999.0`) is a refusal, never a guess, because a shop that reports major units would
//! otherwise slip under every cap by a factor of 100.

use serde_json::{Map, Value};

use crate::money::MAX_MINOR;
use crate::verdict::{Reason, Ruling};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuoteLine {
    /// The line item's own `id`.
    pub id: String,
    /// `item.id`, the product.
    pub item_id: String,
    /// `item.title`, shop text for display only (not sanitised here).
    pub title: String,
    pub quantity: i64,
    /// `item.price`, minor units.
    pub unit_price: i64,
}

/// One `totals[]` entry of the checkout: part of the request digest, so a changed tax, fee or
/// discount is a new request even when the total happens to stay the same.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuoteTotal {
    /// `type` as the shop wrote it (`subtotal`, `tax`, `total`, ...).
    pub kind: String,
    pub amount: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Quote {
    pub checkout_id: String,
    pub status: String,
    /// As the shop wrote it (not yet checked against the caps).
    pub currency: String,
    /// The single `totals[]` entry of type `total`, minor units, >= 0.
    pub total: i64,
    pub line_items: Vec<QuoteLine>,
    /// Host of `continue_url`, else of the first `links[].url`, lower-cased. `None`: no usable URL.
    pub merchant: Option<String>,
    /// Every `totals[]` entry, in the shop's order.
    pub totals: Vec<QuoteTotal>,
    /// Where the goods go: RFC 8785 JSON of each `fulfillment.methods[]` entry's `type`,
    /// `destinations` and `selected_destination_id`, when the checkout has fulfillment. Hashed,
    /// never interpreted: a changed address is a new request.
    pub fulfillment: Option<String>,
}

fn unreadable(detail: impl Into<String>) -> Ruling {
    Ruling::new(Reason::CheckoutUnreadable, detail)
}

fn not_minor(path: &str, problem: &str) -> Ruling {
    Ruling::new(
        Reason::AmountNotMinorUnits,
        format!(
            "the shop's {path} {problem}: UCP amounts are JSON integers in minor units (cents), \
             so this checkout cannot be checked against the caps"
        ),
    )
}

/// Reads one amount the gate relies on. Only a JSON integer within ±(2^53-1) passes; serde_json
/// (without `arbitrary_precision`) reads `4999.0` as a float, so `as_i64` refuses it as wanted.
fn amount(v: Option<&Value>, path: &str, non_negative: bool) -> Result<i64, Ruling> {
    let Some(v) = v else {
        return Err(not_minor(path, "is missing"));
    };
    let n = match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => i,
            None if n.is_u64() => return Err(not_minor(path, "is out of range")),
            None => return Err(not_minor(path, "has a fraction or exponent")),
        },
        Value::String(_) => return Err(not_minor(path, "is a string, not a number")),
        _ => return Err(not_minor(path, "is not a number")),
    };
    if !(-MAX_MINOR..=MAX_MINOR).contains(&n) {
        return Err(not_minor(path, "is out of range (over 2^53-1)"));
    }
    if non_negative && n < 0 {
        return Err(not_minor(path, "is negative"));
    }
    Ok(n)
}

fn str_field<'a>(obj: &'a Map<String, Value>, key: &str, what: &str) -> Result<&'a str, Ruling> {
    obj.get(key).and_then(Value::as_str).ok_or_else(|| {
        unreadable(format!(
            "the shop's checkout has no {what} (`{key}` string)"
        ))
    })
}

/// Reads a `totals[]` array, checking every amount (and every `lines[].amount`). Returns the single
/// `total` when `want_total`, and every entry into `entries` when given.
fn totals(
    arr: &[Value],
    path: &str,
    want_total: bool,
    mut entries: Option<&mut Vec<QuoteTotal>>,
) -> Result<Option<i64>, Ruling> {
    let mut total = None;
    let mut count = 0usize;
    for (i, entry) in arr.iter().enumerate() {
        let ep = format!("{path}[{i}]");
        let Some(obj) = entry.as_object() else {
            return Err(unreadable(format!("the shop's {ep} is not an object")));
        };
        let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
        let non_negative = matches!(ty, "total" | "subtotal" | "fulfillment" | "tax" | "fee");
        let a = amount(obj.get("amount"), &format!("{ep}.amount"), non_negative)?;
        if let Some(lines) = obj.get("lines") {
            let Some(lines) = lines.as_array() else {
                return Err(unreadable(format!("the shop's {ep}.lines is not an array")));
            };
            for (j, line) in lines.iter().enumerate() {
                amount(
                    line.get("amount"),
                    &format!("{ep}.lines[{j}].amount"),
                    false,
                )?;
            }
        }
        if ty == "total" {
            count += 1;
            total = Some(a);
        }
        if let Some(entries) = entries.as_deref_mut() {
            entries.push(QuoteTotal {
                kind: ty.to_owned(),
                amount: a,
            });
        }
    }
    if want_total && count != 1 {
        return Err(not_minor(
            path,
            &format!(
                "has {count} entries of type `total` (exactly one is needed to know what will be charged)"
            ),
        ));
    }
    Ok(total)
}

fn host_of(url_text: &str) -> Option<String> {
    let parsed = url::Url::parse(url_text).ok()?;
    let host = parsed.host_str()?;
    if host.is_empty() {
        None
    } else {
        Some(host.to_ascii_lowercase())
    }
}

impl Quote {
    /// `checkout` is the checkout object the shop returned (the `structuredContent` of a successful
    /// `get_checkout`). Refusals: `checkout_unreadable` (not a checkout: missing id/status/currency/
    /// totals, an error response) and `amount_not_minor_units` (SPEC §4.5).
    pub fn from_shop(checkout: &Value) -> Result<Quote, Ruling> {
        let Some(obj) = checkout.as_object() else {
            return Err(unreadable(
                "the shop's get_checkout answer is not a JSON object",
            ));
        };
        let ucp_error = obj
            .get("ucp")
            .and_then(|u| u.get("status"))
            .and_then(Value::as_str)
            .is_some_and(|s| s == "error");
        if ucp_error || (obj.contains_key("messages") && !obj.contains_key("status")) {
            return Err(unreadable(
                "the shop answered get_checkout with an error response",
            ));
        }
        let checkout_id = str_field(obj, "id", "id")?.to_owned();
        let status = str_field(obj, "status", "status")?.to_owned();
        let currency = str_field(obj, "currency", "currency")?.to_owned();
        let Some(totals_arr) = obj.get("totals").and_then(Value::as_array) else {
            return Err(unreadable("the shop's checkout has no `totals` array"));
        };
        let mut total_entries = Vec::with_capacity(totals_arr.len());
        let total = totals(totals_arr, "totals", true, Some(&mut total_entries))?
            .ok_or_else(|| not_minor("totals", "has no entry of type `total`"))?;

        let Some(items) = obj.get("line_items").and_then(Value::as_array) else {
            return Err(unreadable("the shop's checkout has no `line_items` array"));
        };
        let mut line_items = Vec::with_capacity(items.len());
        for (i, li) in items.iter().enumerate() {
            let lp = format!("line_items[{i}]");
            let Some(li) = li.as_object() else {
                return Err(unreadable(format!("the shop's {lp} is not an object")));
            };
            let id = li
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| unreadable(format!("the shop's {lp} has no `id` string")))?;
            let Some(item) = li.get("item").and_then(Value::as_object) else {
                return Err(unreadable(format!("the shop's {lp} has no `item` object")));
            };
            let item_id = item
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| unreadable(format!("the shop's {lp}.item has no `id` string")))?;
            let title = item.get("title").and_then(Value::as_str).unwrap_or("");
            let unit_price = amount(item.get("price"), &format!("{lp}.item.price"), true)?;
            let quantity = match li.get("quantity").and_then(Value::as_i64) {
                Some(q) if (1..=MAX_MINOR).contains(&q) => q,
                _ => {
                    return Err(unreadable(format!(
                        "the shop's {lp}.quantity is not a whole number of at least 1"
                    )));
                }
            };
            if let Some(lt) = li.get("totals") {
                let Some(lt) = lt.as_array() else {
                    return Err(unreadable(format!(
                        "the shop's {lp}.totals is not an array"
                    )));
                };
                totals(lt, &format!("{lp}.totals"), false, None)?;
            }
            line_items.push(QuoteLine {
                id: id.to_owned(),
                item_id: item_id.to_owned(),
                title: title.to_owned(),
                quantity,
                unit_price,
            });
        }

        let merchant = merchant_from(obj);

        Ok(Quote {
            checkout_id,
            status,
            currency,
            total,
            line_items,
            merchant,
            totals: total_entries,
            fulfillment: fulfillment_of(obj),
        })
    }
}

/// Host of `continue_url`, else of the first `links[].url`, lower-cased.
pub(crate) fn merchant_from(checkout: &Map<String, Value>) -> Option<String> {
    // `continue_url` wins when present, even if unusable: falling back to another URL would let
    // a broken `continue_url` change which merchant the gate believes it is paying.
    match checkout.get("continue_url") {
        Some(Value::String(u)) => host_of(u),
        Some(_) => None,
        None => checkout
            .get("links")
            .and_then(Value::as_array)
            .and_then(|l| l.first())
            .and_then(|l| l.get("url"))
            .and_then(Value::as_str)
            .and_then(host_of),
    }
}

impl Quote {
    /// Where the goods go, one line per fulfillment method, as the human approving must see it
    /// (the request digest binds it): the method's type, then its selected destination (every
    /// destination when none is selected) as `field: value` pairs, fields in key order (the
    /// canonical form the digest hashes). The text is the shop's: the caller makes it safe for
    /// where it shows it. Empty without fulfillment.
    pub fn destinations(&self) -> Vec<String> {
        let Some(Ok(fulfillment)) = self
            .fulfillment
            .as_deref()
            .map(serde_json::from_str::<Value>)
        else {
            return Vec::new();
        };
        let Some(methods) = fulfillment.as_array() else {
            // Not the UCP shape: shown whole, as it is hashed.
            return vec![fulfillment.to_string()];
        };
        methods
            .iter()
            .map(|method| {
                let kind = method
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("fulfillment");
                let selected = method
                    .get("selected_destination_id")
                    .and_then(Value::as_str);
                let destinations: Vec<&Value> = method
                    .get("destinations")
                    .and_then(Value::as_array)
                    .map(|all| {
                        all.iter()
                            .filter(|d| {
                                selected.is_none()
                                    || d.get("id").and_then(Value::as_str) == selected
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let places: Vec<String> = destinations.iter().map(|d| place(d)).collect();
                if places.is_empty() {
                    format!("{kind}: no destination given")
                } else {
                    format!("{kind}: {}", places.join(" | "))
                }
            })
            .collect()
    }
}

/// A destination's text and number fields but its id, as `field: value`.
fn place(destination: &Value) -> String {
    let Some(fields) = destination.as_object() else {
        return destination.to_string();
    };
    fields
        .iter()
        .filter(|(key, _)| key.as_str() != "id")
        .filter_map(|(key, value)| match value {
            Value::String(text) => Some(format!("{key}: {text}")),
            Value::Number(n) => Some(format!("{key}: {n}")),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The destinations part of `fulfillment` (see [`Quote::fulfillment`]). A `fulfillment` that is
/// not the UCP shape is hashed whole: whatever it says, a change to it changes the request.
fn fulfillment_of(checkout: &Map<String, Value>) -> Option<String> {
    let fulfillment = checkout.get("fulfillment")?;
    let picked = match fulfillment.get("methods").and_then(Value::as_array) {
        Some(methods) => Value::Array(
            methods
                .iter()
                .map(|method| {
                    let mut kept = Map::new();
                    for key in ["type", "destinations", "selected_destination_id"] {
                        if let Some(v) = method.get(key) {
                            kept.insert(key.to_owned(), v.clone());
                        }
                    }
                    Value::Object(kept)
                })
                .collect(),
        ),
        None => fulfillment.clone(),
    };
    // Encoding a parsed JSON value cannot fail; an empty string would still be hashed.
    Some(serde_json_canonicalizer::to_string(&picked).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn destinations_show_where_the_goods_go() {
        let mut checkout = Map::new();
        checkout.insert(
            "fulfillment".into(),
            json!({"methods": [{"id": "m1", "type": "shipping", "selected_destination_id": "d2",
                "destinations": [
                    {"id": "d1", "street_address": "1 Home St", "address_country": "US"},
                    {"id": "d2", "street_address": "9 Elsewhere Rd", "address_locality": "Reno", "address_country": "US"}
                ]}]}),
        );
        let quote = Quote {
            fulfillment: fulfillment_of(&checkout),
            ..Quote::default()
        };
        assert_eq!(
            quote.destinations(),
            vec![
                "shipping: address_country: US, address_locality: Reno, street_address: 9 Elsewhere Rd"
            ]
        );
        assert!(Quote::default().destinations().is_empty());
    }

    fn shop(total: Value) -> Value {
        json!({
            "ucp": {"version": "2026-08-25"},
            "id": "gid://fixture/Checkout/1",
            "status": "ready_for_complete",
            "currency": "USD",
            "line_items": [{"id": "li_1", "item": {"id": "socks", "title": "Trail socks", "price": 1200},
                            "quantity": 2, "totals": [{"type": "subtotal", "amount": 2400}]}],
            "totals": [{"type": "subtotal", "amount": 2400}, {"type": "total", "amount": total}],
            "links": [{"type": "terms_of_service", "url": "https://Demo-Outfitters.example/tos"}]
        })
    }

    #[test]
    fn reads_a_fixture_checkout() {
        let q = Quote::from_shop(&shop(json!(2400))).unwrap();
        assert_eq!(q.total, 2400);
        assert_eq!(q.currency, "USD");
        assert_eq!(q.merchant.as_deref(), Some("demo-outfitters.example"));
        assert_eq!(q.line_items[0].unit_price, 1200);
        assert_eq!(q.line_items[0].quantity, 2);
        assert_eq!(q.line_items[0].title, "Trail socks");
    }

    #[test]
    fn refuses_amounts_that_are_not_minor_units() {
        for bad in [
            json!(49.99),
            json!("4999"),
            json!(4999.0),
            json!(-1),
            json!(9_007_199_254_740_992_i64),
            json!(null),
        ] {
            let r = Quote::from_shop(&shop(bad.clone())).unwrap_err();
            assert_eq!(r.reason(), Reason::AmountNotMinorUnits, "{bad}");
        }
        let mut c = shop(json!(2400));
        c["line_items"][0]["item"]["price"] = json!(12.0);
        assert_eq!(
            Quote::from_shop(&c).unwrap_err().reason(),
            Reason::AmountNotMinorUnits
        );
        let mut c = shop(json!(2400));
        c["totals"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "total", "amount": 1}));
        assert_eq!(
            Quote::from_shop(&c).unwrap_err().reason(),
            Reason::AmountNotMinorUnits
        );
        let mut c = shop(json!(2400));
        c["totals"] = json!([{"type": "subtotal", "amount": 2400}]);
        assert_eq!(
            Quote::from_shop(&c).unwrap_err().reason(),
            Reason::AmountNotMinorUnits
        );
        // A discount may be negative.
        let mut c = shop(json!(2300));
        c["totals"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "discount", "amount": -100}));
        assert_eq!(Quote::from_shop(&c).unwrap().total, 2300);
    }

    #[test]
    fn unreadable_answers() {
        assert_eq!(
            Quote::from_shop(&json!([])).unwrap_err().reason(),
            Reason::CheckoutUnreadable
        );
        let err =
            json!({"ucp": {"version": "x", "status": "error"}, "messages": [{"type": "error"}]});
        assert_eq!(
            Quote::from_shop(&err).unwrap_err().reason(),
            Reason::CheckoutUnreadable
        );
        let mut c = shop(json!(2400));
        c.as_object_mut().unwrap().remove("currency");
        assert_eq!(
            Quote::from_shop(&c).unwrap_err().reason(),
            Reason::CheckoutUnreadable
        );
    }

    #[test]
    fn merchant_from_continue_url_first() {
        let mut c = shop(json!(2400));
        c["continue_url"] = json!("https://SHOP.example:8443/c/1");
        assert_eq!(
            Quote::from_shop(&c).unwrap().merchant.as_deref(),
            Some("shop.example")
        );
        c["continue_url"] = json!("not a url");
        assert_eq!(Quote::from_shop(&c).unwrap().merchant, None);
        let mut c = shop(json!(2400));
        c["links"] = json!([]);
        assert_eq!(Quote::from_shop(&c).unwrap().merchant, None);
    }
}

//! The agent's `complete_checkout` arguments: shape (SPEC §4.2) and the fields a platform may send on
//! complete (§4.3). The numbers in it are never used.

use serde_json::Value;

use crate::verdict::{Reason, Ruling};

/// Fields of `checkout` that UCP lets a platform send on complete (`ucp_request` is not `omit` for
/// complete in the pinned `checkout.json`); extension objects (names with a `.` or known extensions
/// such as `ap2`) are allowed too. A test derives this list from the pinned schema.
pub const PLATFORM_FIELDS_ON_COMPLETE: &[&str] = &["payment", "signals", "attribution"];

/// Checkout fields that UCP extensions add and let a platform send on complete (the AP2 mandate
/// extension's `ap2`). The buyer-consent extension's `buyer` is left out on purpose: SPEC §4.3
/// names `buyer` business-owned. A test derives this list from the pinned extension schemas.
pub const EXTENSION_FIELDS_ON_COMPLETE: &[&str] = &["ap2"];

/// Fields of `checkout.payment` that a complete request omits (`ucp_request` is `omit` for
/// complete in the pinned payment-terms extension): the term was agreed by an update, and its
/// total is the checkout's; one sent with the payment could change what is charged after the gate
/// checked it. A test derives this list from the pinned schemas.
pub const PAYMENT_FIELDS_OMITTED_ON_COMPLETE: &[&str] = &["terms", "selected_term_id"];

/// The arguments each UCP tool of the pinned `mcp.openrpc.json` takes (its `params`), checked
/// against the file by the `pinned_ucp` test.
pub const PINNED_ARGUMENTS: &[(&str, &[&str])] = &[
    ("create_checkout", &["meta", "checkout"]),
    ("get_checkout", &["meta", "id"]),
    ("update_checkout", &["meta", "id", "checkout"]),
    ("complete_checkout", &["meta", "id", "checkout"]),
    ("cancel_checkout", &["meta", "id"]),
    ("create_cart", &["meta", "cart"]),
    ("get_cart", &["meta", "id"]),
    ("update_cart", &["meta", "id", "cart"]),
    ("cancel_cart", &["meta", "id"]),
    ("search_catalog", &["meta", "catalog"]),
    ("lookup_catalog", &["meta", "catalog"]),
    ("get_product", &["meta", "catalog"]),
    ("get_order", &["meta", "id"]),
];

/// The arguments `tool` takes, if it is one of the pinned UCP tools.
pub fn pinned_arguments(tool: &str) -> Option<&'static [&'static str]> {
    PINNED_ARGUMENTS
        .iter()
        .find(|(name, _)| *name == tool)
        .map(|(_, arguments)| *arguments)
}

/// The fields of a checkout that the shop sets and a request omits (`ucp_request` is `omit` for
/// create and for update, in the pinned `checkout.json` and its extensions).
const CHECKOUT_FIELDS_THE_SHOP_SETS: &[&str] = &[
    "ucp",
    "id",
    "status",
    "currency",
    "totals",
    "actions",
    "messages",
    "links",
    "policies",
    "expires_at",
    "continue_url",
    "order",
    "ap2",
];

/// What a checkout update omits besides: the cart it was made from (`cart.json`'s `cart_id`,
/// which only create may name).
const CHECKOUT_FIELDS_THE_SHOP_SETS_ON_UPDATE: &[&str] = &["cart_id"];

/// The fields of a cart that the shop sets and a request omits (`cart.json`).
const CART_FIELDS_THE_SHOP_SETS: &[&str] = &[
    "ucp",
    "id",
    "currency",
    "totals",
    "actions",
    "messages",
    "links",
    "policies",
    "continue_url",
    "expires_at",
];

/// For a tool that sends a checkout or cart object: the argument that holds it, and the fields of
/// it that the pinned UCP schemas say a request omits because the shop sets them (`id` above all,
/// which a lenient shop might read in place of the `id` argument). The `pinned_ucp` test derives
/// these lists from the schemas.
pub fn fields_the_shop_sets(
    tool: &str,
) -> Option<(&'static str, &'static [&'static [&'static str]])> {
    match tool {
        "create_checkout" => Some(("checkout", &[CHECKOUT_FIELDS_THE_SHOP_SETS])),
        "update_checkout" => Some((
            "checkout",
            &[
                CHECKOUT_FIELDS_THE_SHOP_SETS,
                CHECKOUT_FIELDS_THE_SHOP_SETS_ON_UPDATE,
            ],
        )),
        "create_cart" | "update_cart" => Some(("cart", &[CART_FIELDS_THE_SHOP_SETS])),
        _ => None,
    }
}

/// One `checkout.payment.instruments[]` entry as the request digest sees it: which instrument and
/// which handler, never its credential.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Instrument {
    /// The instrument's own `id`, when it has one.
    pub id: Option<String>,
    pub handler_id: String,
}

impl Instrument {
    /// An instrument known only by its handler (tests, and callers that have no instrument id).
    pub fn of_handler(handler_id: impl Into<String>) -> Instrument {
        Instrument {
            id: None,
            handler_id: handler_id.into(),
        }
    }
}

/// A complete request that passed §4.1-4.3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompleteRequest {
    pub checkout_id: String,
    pub idempotency_key: String,
    pub agent_profile: String,
    /// `checkout.payment.instruments[].handler_id`, in order.
    pub handler_ids: Vec<String>,
    /// `checkout.payment.instruments[]` (id and handler), in order: part of the request digest.
    pub instruments: Vec<Instrument>,
}

fn bad(detail: impl Into<String>) -> Ruling {
    Ruling::new(Reason::BadRequest, detail)
}

/// Whether the agent may send this `checkout` field on complete.
pub fn field_allowed_on_complete(name: &str) -> bool {
    PLATFORM_FIELDS_ON_COMPLETE.contains(&name)
        || EXTENSION_FIELDS_ON_COMPLETE.contains(&name)
        || name.contains('.')
}

/// A field name safe to echo in a detail: the agent chose it, so it could hold anything.
fn shown_name(name: &str) -> String {
    if crate::display::is_plain_identifier(name, 40, true) {
        name.to_owned()
    } else {
        "(a field with an unusual name)".to_owned()
    }
}

/// A checkout id as CajaGuard keys claims and leases by it: non-empty, with no whitespace or
/// control characters (a shop that trims ids would otherwise see one checkout under two claims).
pub fn is_plain_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 1024 && !id.chars().any(|c| c.is_whitespace() || c.is_control())
}

impl CompleteRequest {
    /// Steps 2-3 only (the tripwire is [`crate::tripwire`]). Refusals: `bad_request`,
    /// `request_field_not_allowed` (detail names the fields).
    pub fn from_args(args: &Value) -> Result<CompleteRequest, Ruling> {
        let Some(obj) = args.as_object() else {
            return Err(bad("complete_checkout arguments must be a JSON object"));
        };
        // Only what the pinned `complete_checkout` takes: anything else would reach the shop
        // unchecked, and outside the request digest.
        let pinned = pinned_arguments("complete_checkout").unwrap_or(&[]);
        let unknown: Vec<String> = obj
            .keys()
            .filter(|k| !pinned.contains(&k.as_str()))
            .map(|k| shown_name(k))
            .collect();
        if !unknown.is_empty() {
            return Err(Ruling::new(
                Reason::RequestFieldNotAllowed,
                format!(
                    "complete_checkout takes only meta, id and checkout; not {}",
                    unknown.join(", ")
                ),
            ));
        }
        let checkout_id = match obj.get("id") {
            Some(Value::String(s)) if is_plain_id(s) => s.clone(),
            _ => {
                return Err(bad(
                    "complete_checkout needs `id`, the checkout id, as a non-empty string without \
                     spaces or control characters",
                ));
            }
        };
        let Some(meta) = obj.get("meta").and_then(Value::as_object) else {
            return Err(bad(
                "complete_checkout needs a `meta` object with `ucp-agent` and `idempotency-key`",
            ));
        };
        let agent_profile = match meta
            .get("ucp-agent")
            .and_then(|a| a.as_object())
            .and_then(|a| a.get("profile"))
        {
            Some(Value::String(p)) if !p.is_empty() => p.clone(),
            _ => {
                return Err(bad(
                    "complete_checkout needs `meta.ucp-agent.profile`, the platform's profile URL, as a string",
                ));
            }
        };
        let idempotency_key = match meta.get("idempotency-key") {
            Some(Value::String(k)) if !k.is_empty() => k.clone(),
            _ => {
                return Err(bad(
                    "complete_checkout needs `meta.idempotency-key` as a non-empty string (a UUID)",
                ));
            }
        };
        let Some(checkout) = obj.get("checkout").and_then(Value::as_object) else {
            return Err(bad(
                "complete_checkout needs a `checkout` object holding `payment`",
            ));
        };
        let Some(payment) = checkout.get("payment").and_then(Value::as_object) else {
            return Err(bad(
                "complete_checkout needs `checkout.payment` as an object",
            ));
        };

        let refused: Vec<String> = checkout
            .keys()
            .filter(|k| !field_allowed_on_complete(k))
            .map(|k| shown_name(k))
            .collect();
        if !refused.is_empty() {
            return Err(Ruling::new(
                Reason::RequestFieldNotAllowed,
                format!(
                    "checkout fields not allowed on complete_checkout: {}. They belong to the shop, which is asked \
                     for them directly; send only {} (and extension objects)",
                    refused.join(", "),
                    PLATFORM_FIELDS_ON_COMPLETE.join(", ")
                ),
            ));
        }

        // Compared with case folded, as a shop that reads keys ignoring case would read them.
        let omitted: Vec<String> = payment
            .keys()
            .filter(|k| {
                PAYMENT_FIELDS_OMITTED_ON_COMPLETE
                    .contains(&cajaguard_wire::rawjson::folded(k).as_str())
            })
            .map(|k| shown_name(k))
            .collect();
        if !omitted.is_empty() {
            return Err(Ruling::new(
                Reason::RequestFieldNotAllowed,
                format!(
                    "checkout.payment fields not allowed on complete_checkout: {}. The payment term is chosen \
                     with update_checkout, before the gate reads the checkout",
                    omitted.join(", ")
                ),
            ));
        }

        let mut instruments = Vec::new();
        match payment.get("instruments") {
            None => {
                return Err(bad(
                    "complete_checkout needs checkout.payment.instruments with the instrument that pays",
                ));
            }
            Some(Value::Array(listed)) if listed.is_empty() => {
                return Err(bad(
                    "checkout.payment.instruments is empty: name the instrument that pays",
                ));
            }
            Some(Value::Array(listed)) => {
                for (i, inst) in listed.iter().enumerate() {
                    let handler_id = match inst.get("handler_id") {
                        Some(Value::String(h)) => h.clone(),
                        _ => {
                            return Err(bad(format!(
                                "checkout.payment.instruments[{i}] needs `handler_id` as a string"
                            )));
                        }
                    };
                    let id = match inst.get("id") {
                        None => None,
                        Some(Value::String(id)) => Some(id.clone()),
                        Some(_) => {
                            return Err(bad(format!(
                                "checkout.payment.instruments[{i}].id must be a string"
                            )));
                        }
                    };
                    instruments.push(Instrument { id, handler_id });
                }
            }
            Some(_) => return Err(bad("checkout.payment.instruments must be an array")),
        }

        Ok(CompleteRequest {
            checkout_id,
            idempotency_key,
            agent_profile,
            handler_ids: instruments.iter().map(|i| i.handler_id.clone()).collect(),
            instruments,
        })
    }
}

//! The shop's own answer to `get_checkout`, read strictly (SPEC §4.4-4.5). The gate never uses the
//! agent's numbers: only what this module reads from the shop.

use crate::gate::Ruling;

#[derive(Debug, Clone, PartialEq, Eq)]
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

#[derive(Debug, Clone, PartialEq, Eq)]
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
}

impl Quote {
    /// `checkout` is the checkout object the shop returned (the `structuredContent` of a successful
    /// `get_checkout`). Refusals: `checkout_unreadable` (not a checkout: missing id/status/currency/
    /// totals, an error response) and `amount_not_minor_units` (SPEC §4.5).
    pub fn from_shop(checkout: &serde_json::Value) -> Result<Quote, Ruling> {
        todo!("{checkout}")
    }
}

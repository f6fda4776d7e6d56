//! The fixed catalog (SPEC §9): four merchants, eight products, prices in minor units.

/// One product the fixture sells. Every product has exactly one variant.
#[derive(Debug, Clone, Copy)]
pub struct Product {
    /// Stable slug; ids are derived from it.
    pub slug: &'static str,
    pub title: &'static str,
    pub merchant: &'static str,
    pub currency: &'static str,
    /// Price in the currency's minor units.
    pub price: u64,
    /// `true` for the deliberately broken shop that reports major units (`49.99`).
    pub sloppy_units: bool,
}

impl Product {
    pub fn id(&self) -> String {
        format!("gid://fixture/Product/{}", self.slug)
    }

    pub fn variant_id(&self) -> String {
        format!("gid://fixture/ProductVariant/{}", self.slug)
    }
}

pub const CATALOG: &[Product] = &[
    p(
        "trail-socks",
        "Trail socks",
        "demo-outfitters.example",
        "USD",
        1200,
    ),
    p(
        "rain-shell",
        "Rain shell",
        "demo-outfitters.example",
        "USD",
        4500,
    ),
    p(
        "day-pack",
        "Day pack",
        "demo-outfitters.example",
        "USD",
        8900,
    ),
    p(
        "down-parka",
        "Down parka",
        "demo-outfitters.example",
        "USD",
        21900,
    ),
    p("sencha-tin", "Sencha tin", "tokyo-tea.example", "JPY", 1800),
    p("tea-set", "Tea set", "tokyo-tea.example", "JPY", 9800),
    p(
        "camp-stove",
        "Camp stove",
        "elsewhere-goods.example",
        "USD",
        7900,
    ),
    Product {
        slug: "water-bottle",
        title: "Water bottle",
        merchant: "sloppy-units.example",
        currency: "USD",
        price: 4999,
        sloppy_units: true,
    },
];

const fn p(
    slug: &'static str,
    title: &'static str,
    merchant: &'static str,
    currency: &'static str,
    price: u64,
) -> Product {
    Product {
        slug,
        title,
        merchant,
        currency,
        price,
        sloppy_units: false,
    }
}

/// Finds a product by its product id, its variant id or its bare slug.
pub fn find(id: &str) -> Option<&'static Product> {
    CATALOG
        .iter()
        .find(|p| p.id() == id || p.variant_id() == id || p.slug == id)
}

/// Case-insensitive substring match on titles; an empty query lists everything.
pub fn search(query: &str) -> Vec<&'static Product> {
    let q = query.trim().to_lowercase();
    CATALOG
        .iter()
        .filter(|p| q.is_empty() || p.title.to_lowercase().contains(&q))
        .collect()
}

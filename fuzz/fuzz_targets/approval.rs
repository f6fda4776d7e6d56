//! Approval files: parsing and verification never panic, and nothing but the seed's own signed
//! content ever verifies (a fuzzer cannot forge Ed25519, so any other success is a bug).
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use cajaguard_core::approval::{
    self, ApprovalDocument, ApprovalTerms, BasketDigest, Decision, PublicKey, RequestId,
    SigningKey, TrustedKeys,
};
use cajaguard_core::quote::Quote;
use libfuzzer_sys::fuzz_target;
use time::macros::datetime;

struct Fixture {
    trusted: TrustedKeys,
    digest: BasketDigest,
    signed_message: Vec<u8>,
}

/// The seed corpus's `valid.json` is this approval.
fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let key = SigningKey::from_seed(&[7u8; 32]);
        let checkout = serde_json::json!({
            "id": "gid://fixture/Checkout/1", "status": "ready_for_complete", "currency": "USD",
            "line_items": [{"id": "li_1", "item": {"id": "day_pack", "title": "Day pack", "price": 8900}, "quantity": 1}],
            "totals": [{"type": "subtotal", "amount": 8900}, {"type": "total", "amount": 8900}],
            "continue_url": "https://demo-outfitters.example/checkout/1"
        });
        let quote = Quote::from_shop(&checkout).unwrap_or_else(|_| unreachable!());
        let digest = BasketDigest::of(&quote, &[cajaguard_core::request::Instrument::of_handler("fixture_test_handler")]);
        let doc = approval::sign(
            &key,
            &ApprovalTerms {
                request_id: digest.request_id(),
                digest,
                decision: Decision::Approve,
                merchant: "demo-outfitters.example".into(),
                checkout_id: quote.checkout_id.clone(),
                currency: "USD".into(),
                total: quote.total,
                issued_at: datetime!(2026-08-25 11:59 UTC),
                ttl: Duration::from_secs(900),
                nonce: [0x5a; 16],
                note: "seed".into(),
                checkpoint: None,
            },
        );
        Fixture { trusted: TrustedKeys(vec![key.public_key()]), digest, signed_message: doc.signed_message() }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = RequestId::parse(text);
    let _ = PublicKey::from_pem(text);
    let _ = SigningKey::from_pkcs8_pem(text).map(|k| k.public_key());
    let Ok(doc) = ApprovalDocument::from_json(text) else {
        return;
    };
    let f = fixture();
    let now = datetime!(2026-08-25 12:00 UTC);
    if approval::verify(&doc, &f.trusted, &f.digest, now, Duration::from_secs(900)).is_ok() {
        assert_eq!(
            doc.signed_message(),
            f.signed_message,
            "a document other than the seed verified"
        );
    }
    let _ = doc.to_json_pretty();
});

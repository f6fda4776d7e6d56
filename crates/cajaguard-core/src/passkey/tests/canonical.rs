//! The hand-ordered challenge encodings against the reference RFC 8785 encoder.

use proptest::prelude::*;

use super::*;
use crate::passkey::approval::challenge;

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z0-9_\\-\"\\\\/\u{0}-\u{1f}\u{7f}\u{2028}é€😀]{0,20}"
    ]
}

proptest! {
    #[test]
    fn approval_challenge_equals_the_reference_encoder_s(
        texts in proptest::collection::vec(any_text(), 11),
        checkpoint in proptest::option::of(any_text()),
        total in prop_oneof![any::<i64>(), -(1i64 << 53)..=(1i64 << 53)],
        version in any::<u32>(),
    ) {
        let [request_id, digest, decision, merchant, checkout_id, currency, issued_at, expires_at, nonce, note, _] =
            <[String; 11]>::try_from(texts).unwrap();
        let terms = PasskeyApprovalTerms {
            version, request_id, digest, decision, merchant, checkout_id, currency, total,
            issued_at, expires_at, nonce, note, checkpoint,
        };
        prop_assert_eq!(terms.challenge(), challenge(APPROVAL_CHALLENGE_CONTEXT, &terms));
    }

    #[test]
    fn unfreeze_challenge_equals_the_reference_encoder_s(
        texts in proptest::collection::vec(any_text(), 5),
        checkpoint in proptest::option::of(any_text()),
        version in any::<u32>(),
    ) {
        let [frozen_at, issued_at, expires_at, nonce, note] = <[String; 5]>::try_from(texts).unwrap();
        let terms = PasskeyUnfreezeTerms { version, frozen_at, issued_at, expires_at, nonce, note, checkpoint };
        prop_assert_eq!(terms.challenge(), challenge(UNFREEZE_CHALLENGE_CONTEXT, &terms));
    }
}

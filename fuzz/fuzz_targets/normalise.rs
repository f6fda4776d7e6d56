//! The tripwire's normaliser (SPEC §5) on arbitrary text: no panic, and what it promises holds.
//! Every form is normalised (normalising again changes nothing), holds no character that renders
//! as nothing, and the first form is the raw string's; the number of forms is bounded (percent
//! layers are decoded at most three times); and a card number the scanner finds in the raw text
//! is still found once the text is percent-encoded or has invisible characters between its digits.
#![no_main]

use cajaguard_core::tripwire::{contains_card_number, forms, normalise};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let all = forms(text);
    assert!(!all.is_empty() && all.len() <= 4, "{} forms", all.len());
    assert_eq!(all[0], normalise(text), "the first form is the raw string's");
    for form in &all {
        assert_eq!(normalise(form), form.as_str(), "a form is normalised: {form:?}");
        assert!(
            !form.chars().any(|c| matches!(c, '\u{200B}' | '\u{200D}' | '\u{00AD}' | '\u{FEFF}' | '\u{2060}')),
            "an invisible character survived: {form:?}"
        );
    }
    // Without `%` in it, the text's own forms are just one: escaping its digits adds one layer.
    if text.len() < 256 && !text.contains('%') && contains_card_number(text) {
        let spread: String = text.chars().flat_map(|c| [c, '\u{200B}']).collect();
        assert!(contains_card_number(&spread), "zero-width spaces hid a card: {text:?}");
        let escaped: String = text
            .chars()
            .map(|c| if c.is_ascii_digit() { format!("%{:02X}", c as u32) } else { c.to_string() })
            .collect();
        assert!(contains_card_number(&escaped), "percent-escapes hid a card: {text:?}");
    }
});

//! Property tests: money round trips and refusals; card-number detection across separators and
//! Unicode digit forms, with no hit on non-Luhn or over-long runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cajaguard_core::money::{Currency, MAX_MINOR, format_major, parse_major};
use cajaguard_core::tripwire::contains_card_number;
use proptest::prelude::*;

fn currency() -> impl Strategy<Value = Currency> {
    prop::sample::select(vec!["USD", "JPY", "KWD", "EUR", "CLF", "BHD", "CLP"])
        .prop_map(|c| Currency::from_code(c).unwrap())
}

fn luhn_ok(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, d)| {
            let d = u32::from(*d);
            if i % 2 == 1 {
                if d * 2 > 9 { d * 2 - 9 } else { d * 2 }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// Digits of length `len` with the last digit chosen to make Luhn pass (or fail).
fn card_digits(
    len: std::ops::RangeInclusive<usize>,
    valid: bool,
) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0u8..10, len).prop_map(move |mut d| {
        let last = d.len() - 1;
        for x in 0..10 {
            d[last] = x;
            if luhn_ok(&d) == valid {
                break;
            }
        }
        d
    })
}

/// Zero code points of digit forms to render with: ASCII, full-width, Arabic-Indic,
/// Extended Arabic-Indic, Devanagari, Bengali, Thai, mathematical bold.
const ZEROS: &[u32] = &[0x30, 0xFF10, 0x660, 0x6F0, 0x966, 0x9E6, 0xE50, 0x1D7CE];
const SEPARATORS: &[&str] = &["", " ", "-", ".", "\u{00A0}", "\u{3000}", "\u{2011}"];

fn render(digits: &[u8], zero: u32, sep: &str, group: usize) -> String {
    let mut out = String::new();
    for (i, d) in digits.iter().enumerate() {
        if i > 0 && i % group == 0 {
            out.push_str(sep);
        }
        out.push(char::from_u32(zero + u32::from(*d)).unwrap());
    }
    out
}

proptest! {
    #[test]
    fn money_round_trips(minor in 0i64..=MAX_MINOR, cur in currency()) {
        let text = format_major(minor, cur);
        prop_assert_eq!(parse_major(&text, cur).unwrap(), minor);
    }

    #[test]
    fn money_refuses_extra_decimals(minor in 0i64..1_000_000_000, extra in 1u8..10, cur in currency()) {
        let text = format!("{}{}{}", format_major(minor, cur), if cur.exponent() == 0 { "." } else { "" }, extra);
        prop_assert!(parse_major(&text, cur).is_err(), "{}", text);
    }

    #[test]
    fn money_refuses_signs_exponents_and_junk(minor in 0i64..1_000_000, cur in currency(), junk in prop::sample::select(vec!["-", "+", "e3", "E2", " ", ",", "_", "x"]), front in any::<bool>()) {
        let base = format_major(minor, cur);
        let text = if front { format!("{junk}{base}") } else { format!("{base}{junk}") };
        prop_assert!(parse_major(&text, cur).is_err(), "{}", text);
    }

    #[test]
    fn money_refuses_over_max(extra in 1i64..1_000_000) {
        let usd = Currency::from_code("USD").unwrap();
        let text = format_major(MAX_MINOR, usd);
        let (int, frac) = text.split_once('.').unwrap();
        let bigger = format!("{}.{}", int.parse::<i64>().unwrap() + extra, frac);
        prop_assert!(parse_major(&bigger, usd).is_err());
    }

    #[test]
    fn luhn_valid_runs_are_found_in_any_form(
        digits in card_digits(13..=19, true),
        zero in prop::sample::select(ZEROS.to_vec()),
        sep in prop::sample::select(SEPARATORS.to_vec()),
        group in 2usize..7,
        prefix in "[a-z :]{0,12}",
        suffix in "[a-z ,]{0,12}",
    ) {
        let text = format!("{prefix}{}{}{suffix}", if prefix.is_empty() { "" } else { " " }, render(&digits, zero, sep, group));
        prop_assert!(contains_card_number(&text), "{:?}", text);
    }

    #[test]
    fn non_luhn_runs_are_not_found(
        digits in card_digits(13..=19, false),
        zero in prop::sample::select(ZEROS.to_vec()),
        sep in prop::sample::select(SEPARATORS.to_vec()),
        group in 2usize..7,
    ) {
        let text = render(&digits, zero, sep, group);
        prop_assert!(!contains_card_number(&text), "{:?}", text);
    }

    #[test]
    fn over_long_runs_are_not_found(
        digits in prop::collection::vec(0u8..10, 20..40),
        zero in prop::sample::select(ZEROS.to_vec()),
        sep in prop::sample::select(SEPARATORS.to_vec()),
        group in 2usize..7,
    ) {
        let text = render(&digits, zero, sep, group);
        prop_assert!(!contains_card_number(&text), "{:?}", text);
    }

    #[test]
    fn double_separators_split_runs(digits in card_digits(16..=16, true)) {
        // Two 8-digit halves separated by two spaces are two short runs, not a card number.
        let text = format!("{}  {}", render(&digits[..8], 0x30, "", 8), render(&digits[8..], 0x30, "", 8));
        prop_assert!(!contains_card_number(&text));
    }

    #[test]
    fn uuids_never_hit(bytes in any::<[u8; 16]>()) {
        let h = bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let uuid = format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]);
        prop_assert!(!contains_card_number(&uuid), "{}", uuid);
        let sentence = format!("key {uuid}, retry");
        prop_assert!(!contains_card_number(&sentence));
    }
}

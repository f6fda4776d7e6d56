//! Property tests: money round trips and refusals; card-number detection across separators and
//! Unicode digit forms, with no hit on non-Luhn or over-long runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cajaguard_core::money::{Currency, MAX_MINOR, format_major, parse_major};
use cajaguard_core::tripwire::{contains_card_number, is_card_number};
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

/// A number shaped like a real card: an issuer prefix with one of its lengths, Luhn-valid.
fn card_number() -> impl Strategy<Value = Vec<u8>> {
    let brands: Vec<(&str, usize)> = vec![
        ("4", 16),
        ("4", 13),
        ("4", 19),
        ("51", 16),
        ("55", 16),
        ("2221", 16),
        ("34", 15),
        ("37", 15),
        ("6011", 16),
        ("65", 19),
        ("62", 17),
        ("35", 16),
        ("36", 14),
        ("1", 15),
        ("9792", 16),
    ];
    (
        prop::sample::select(brands),
        prop::collection::vec(0u8..10, 19),
    )
        .prop_map(|((prefix, len), rest)| {
            let mut d: Vec<u8> = prefix.bytes().map(|b| b - b'0').collect();
            d.extend_from_slice(&rest[..len - d.len()]);
            let last = len - 1;
            for x in 0..10 {
                d[last] = x;
                if luhn_ok(&d) {
                    break;
                }
            }
            d
        })
}

/// Zero code points of digit forms to render with: ASCII, full-width, Arabic-Indic,
/// Extended Arabic-Indic, Devanagari, Bengali, Thai, mathematical bold.
const ZEROS: &[u32] = &[0x30, 0xFF10, 0x660, 0x6F0, 0x966, 0x9E6, 0xE50, 0x1D7CE];
const SEPARATORS: &[&str] = &[
    "",
    " ",
    "-",
    ".",
    "\u{00A0}",
    "\u{3000}",
    "\u{2011}",
    "  ",
    "\t",
    "\u{200B}",
    " \u{00A0}\t",
];

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
    fn card_numbers_are_found_in_any_form(
        digits in card_number(),
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
    fn card_numbers_followed_by_a_cvc_or_expiry_are_found(
        // 13- and 14-digit cards count only as a whole run (tripwire::cards).
        digits in card_number().prop_filter("15+ digits", |d| d.len() >= 15),
        extra in prop::sample::select(vec![" 123", " 1234", " 12/30", "-07-2031", " 999 x"]),
        before in any::<bool>(),
    ) {
        // Before or after, not both: an inner stretch is not tried (SPEC §5).
        let card = render(&digits, 0x30, "", 19);
        let text = if before { format!("{} {card}", extra.trim()) } else { format!("{card}{extra}") };
        prop_assert!(contains_card_number(&text), "{:?}", text);
    }

    #[test]
    fn non_luhn_runs_are_not_found(
        digits in card_digits(13..=19, false),
        zero in prop::sample::select(ZEROS.to_vec()),
    ) {
        let text = render(&digits, zero, "", 19);
        prop_assert!(!contains_card_number(&text), "{:?}", text);
    }

    #[test]
    fn over_long_contiguous_runs_are_not_found(
        digits in prop::collection::vec(0u8..10, 20..40),
        zero in prop::sample::select(ZEROS.to_vec()),
    ) {
        let text = render(&digits, zero, "", 40);
        prop_assert!(!contains_card_number(&text), "{:?}", text);
    }

    #[test]
    fn runs_of_groups_match_the_rule_of_whole_group_prefixes_and_suffixes(
        groups in prop::collection::vec(prop::collection::vec(0u8..10, 1..8), 1..7),
    ) {
        // The rule, written out: the run, or a prefix or suffix of whole groups holding at least
        // 15 digits, is a card number.
        let part = |d: Vec<u8>| d.len() >= 15 && is_card_number(&d);
        let mut expected = is_card_number(&groups.concat());
        for k in 1..groups.len() {
            expected |= part(groups[..k].concat()) || part(groups[groups.len() - k..].concat());
        }
        let text = groups.iter().map(|g| render(g, 0x30, "", 99)).collect::<Vec<_>>().join(" ");
        prop_assert_eq!(contains_card_number(&text), expected, "{:?}", text);
    }

    #[test]
    fn glued_separators_split_runs(digits in card_number(), sep in prop::sample::select(vec!["--", " - ", "..", "-."])) {
        // Two halves separated by two separators (not a whitespace run) are two short runs.
        let half = digits.len() / 2;
        let text = format!("{}{sep}{}", render(&digits[..half], 0x30, "", 99), render(&digits[half..], 0x30, "", 99));
        prop_assert!(!contains_card_number(&text), "{:?}", text);
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

//! Numbers as the agent wrote them. `serde_json` (without `arbitrary_precision`) reads a number
//! with a fraction or an exponent as an `f64`, which above 2^53 is rounded: `4000000000000000006.0`
//! reads as `4000000000000000000`, which fails Luhn, while a shop that reads numbers exactly
//! (Go's `json.Number`, Python's `Decimal`, Java's `BigDecimal`) gets the card, since the agent's
//! bytes are what is forwarded. So such numbers are read here from the text itself.

use super::cards;

/// True when a number in the JSON text `raw`, written with a fraction or an exponent, is a whole
/// number whose digits are a card number. (Plain integers are exact in the parsed value.)
pub fn inexact_number_is_card(raw: &str) -> bool {
    let b = raw.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => i = past_string(b, i),
            b'-' | b'0'..=b'9' => {
                let end = number_end(b, i);
                if whole_card(&b[i..end]) {
                    return true;
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    false
}

/// The index just past the string that opens at `start`.
fn past_string(b: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The index just past the number token that starts at `start`.
fn number_end(b: &[u8], start: usize) -> usize {
    let mut i = start;
    while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
        i += 1;
    }
    i
}

/// Whether the number token `token`, if written with a fraction or an exponent, is a whole
/// number of 13-19 digits that is a card number.
fn whole_card(token: &[u8]) -> bool {
    let (mantissa, exponent) = match token.iter().position(|c| matches!(c, b'e' | b'E')) {
        Some(at) => (&token[..at], &token[at + 1..]),
        None => (token, &b""[..]),
    };
    if exponent.is_empty() && !mantissa.contains(&b'.') {
        return false;
    }
    let mantissa = mantissa.strip_prefix(b"-").unwrap_or(mantissa);
    let (whole, fraction) = match mantissa.iter().position(|&c| c == b'.') {
        Some(at) => (&mantissa[..at], &mantissa[at + 1..]),
        None => (mantissa, &b""[..]),
    };
    let Some(exponent) = parse_exponent(exponent) else {
        return false;
    };
    let digits: Vec<u8> = whole.iter().chain(fraction).copied().collect();
    // The value is `digits` × 10^shift.
    let Ok(fraction_len) = i64::try_from(fraction.len()) else {
        return false;
    };
    let shift = exponent.saturating_sub(fraction_len);
    let mut integer: Vec<u8> = if shift >= 0 {
        let Ok(zeros) = usize::try_from(shift) else {
            return false;
        };
        if zeros > 19 {
            return false;
        }
        digits
            .iter()
            .copied()
            .chain(std::iter::repeat_n(b'0', zeros))
            .collect()
    } else {
        let Ok(cut) = usize::try_from(shift.unsigned_abs()) else {
            return false;
        };
        if cut > digits.len() || digits[digits.len() - cut..].iter().any(|&d| d != b'0') {
            return false;
        }
        digits[..digits.len() - cut].to_vec()
    };
    let leading = integer.iter().take_while(|&&d| d == b'0').count();
    integer.drain(..leading);
    (13..=19).contains(&integer.len()) && cards::card_in(&integer)
}

/// The exponent's value, saturating far past any card's length; `None` if it is not a number.
fn parse_exponent(text: &[u8]) -> Option<i64> {
    if text.is_empty() {
        return Some(0);
    }
    let (negative, digits) = match text[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        value = value.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::inexact_number_is_card;

    #[test]
    fn cards_written_with_a_fraction_or_an_exponent_are_found() {
        for raw in [
            r#"{"pan":4000000000000000006.0}"#,
            r#"{"pan":4000000000000000006e0}"#,
            r#"{"pan":9792000000000003.0}"#,
            r#"{"pan":4111111111111111.000}"#,
            r#"{"pan":411111111111111.1E1}"#,
            r#"{"pan":4.111111111111111e15}"#,
            r#"{"pan":-4111111111111111.0}"#,
            r#"[1, 41111111111111110e-1]"#,
        ] {
            assert!(inexact_number_is_card(raw), "{raw}");
        }
    }

    #[test]
    fn other_numbers_and_strings_are_not() {
        for raw in [
            r#"{"pan":4111111111111111}"#,
            r#"{"pan":4111111111111111.5}"#,
            r#"{"pan":4111111111111112.0}"#,
            r#"{"total":2400.0,"qty":1e3}"#,
            r#"{"n":4.111111111111111e300}"#,
            r#"{"s":"4111111111111111.0"}"#,
            r#"{"s":"a \"4111111111111111.0\""}"#,
            r#"{"4111111111111111.0":1}"#,
        ] {
            assert!(!inexact_number_is_card(raw), "{raw}");
        }
    }
}

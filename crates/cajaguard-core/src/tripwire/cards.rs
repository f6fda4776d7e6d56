//! Card numbers in text (SPEC §5).
//!
//! **Runs of groups.** Digits split by single separators (a space, a hyphen, a dot, a dash; any run
//! of whitespace counts as one) form a run of groups, bounded by anything else. The run is a card
//! if it, or a prefix or a suffix of it made of whole groups, is a card number: so
//! `4111 1111 1111 1111 123` (the CVC after it) and `4111111111111111 12/30` (the expiry) are
//! caught. Inner stretches are not tried, which keeps grouped tracking numbers mostly clear. One
//! contiguous run of more than 19 digits is not a card.
//!
//! **A card number** is 13-19 digits passing Luhn whose first digits and length are those of a
//! payment card (ISO/IEC 7812 issuer ranges: 13 or 16-19 digits for Visa's `4`, 14 or 16-19 for
//! Diners, 15 for Amex and UATP, 16-19 for the rest; nothing starts with `0` or `7`). A prefix or
//! suffix of a run counts only from 15 digits (see [`MIN_PART_DIGITS`]). Luhn alone would refuse every
//! IMEI (15 digits, Luhn-valid by construction, starting `35`, `01`, `86`, `99`...) and a tenth of
//! all ISBN-13, EAN-13 codes and millisecond timestamps, which no card shares a length and prefix
//! with.
//!
//! **Unicode digits.** Strings arrive NFKC-normalised (so full-width `４` and mathematical `𝟒` are
//! ASCII already). Digits NFKC keeps, such as Arabic-Indic `٤` or Devanagari `४`, are read with
//! [`unicode_digit`]: every Unicode decimal digit (general category Nd) sits in a contiguous block
//! of ten starting at its zero (a Unicode stability guarantee), so a table of the blocks' zero code
//! points gives each digit's value. The table was generated from the Unicode 14 database (Python's
//! `unicodedata`) plus the Nd blocks added in Unicode 15 and 16; a test checks every entry against
//! `char::is_numeric` of the Rust standard library.
//!
//! **UUIDs** (8-4-4-4-12 hex groups, not glued to other hex digits) are skipped like any other
//! non-digit: their hyphen-split digit groups would otherwise form a Luhn-valid run in about 1 of
//! 460 random idempotency keys.

/// True when `s` (already normalised) holds a card number as a run, prefix or suffix of groups.
pub fn card_in<T: Copy + Into<char>>(s: &[T]) -> bool {
    let mut run_start = 0usize;
    let mut run_digits = 0usize;
    // Index just past the last digit of the run, and whether a separator is waiting for a digit.
    let mut run_end = 0usize;
    let mut in_run = false;
    let mut pending_sep = false;
    let mut i = 0;
    while i < s.len() {
        let c: char = s[i].into();
        if c.is_ascii_hexdigit() && uuid_at(s, i) {
            if in_run && run_is_card(s, run_start, run_end, run_digits) {
                return true;
            }
            in_run = false;
            pending_sep = false;
            i += 36;
            continue;
        }
        if digit_value(c).is_some() {
            if !in_run {
                in_run = true;
                run_start = i;
                run_digits = 0;
            }
            pending_sep = false;
            run_digits += 1;
            i += 1;
            run_end = i;
            continue;
        }
        if in_run && !pending_sep {
            if c.is_whitespace() {
                pending_sep = true;
                i += 1;
                while i < s.len() && s[i].into().is_whitespace() {
                    i += 1;
                }
                continue;
            }
            if is_separator(c) {
                pending_sep = true;
                i += 1;
                continue;
            }
        }
        if in_run && run_is_card(s, run_start, run_end, run_digits) {
            return true;
        }
        in_run = false;
        pending_sep = false;
        i += 1;
    }
    in_run && run_is_card(s, run_start, run_end, run_digits)
}

/// The run `s[start..end]` (digits and separators, starting and ending with a digit): is it, or a
/// whole-group prefix or suffix of it, a card number?
fn run_is_card<T: Copy + Into<char>>(s: &[T], start: usize, end: usize, digits: usize) -> bool {
    if digits < 13 {
        return false;
    }
    // Groups as (first index, digit count); only needed for the rare run of 13+ digits.
    let mut groups: Vec<(usize, usize)> = Vec::new();
    let mut i = start;
    while i < end {
        if digit_value(s[i].into()).is_some() {
            let first = i;
            while i < end && digit_value(s[i].into()).is_some() {
                i += 1;
            }
            groups.push((first, i - first));
        } else {
            i += 1;
        }
    }
    let check = |chosen: &mut dyn Iterator<Item = &(usize, usize)>| -> bool {
        let mut buf = [0u8; 19];
        let mut n = 0;
        for &(first, len) in chosen {
            for c in &s[first..first + len] {
                if let Some(d) = digit_value((*c).into())
                    && n < 19
                {
                    buf[n] = d;
                    n += 1;
                }
            }
        }
        is_card_number(&buf[..n])
    };
    // The whole run may be any card length; a part of it must be long enough to be a card that
    // a CVC or an expiry was put next to (see [`MIN_PART_DIGITS`]).
    let enough = |total: usize, whole: bool| total >= if whole { 13 } else { MIN_PART_DIGITS };
    let mut total = 0;
    for (k, g) in groups.iter().enumerate() {
        total += g.1;
        if total > 19 {
            break;
        }
        if enough(total, k + 1 == groups.len()) && check(&mut groups[..=k].iter()) {
            return true;
        }
    }
    let mut total = 0;
    for k in (0..groups.len()).rev() {
        total += groups[k].1;
        if total > 19 {
            break;
        }
        if enough(total, k == 0) && check(&mut groups[k..].iter()) {
            return true;
        }
    }
    false
}

/// The fewest digits a whole-group prefix or suffix (not the whole run) must hold to be read as a
/// card. Cards issued today are 15-19 digits; the 13- and 14-digit lengths (old Visa, Diners) are
/// read only as a whole run, because their prefixes and suffixes are everywhere among grouped
/// codes: a hyphenated IMEI `AA-BBBBBB-CCCCCC-D` ends in 13 digits starting with any digit.
const MIN_PART_DIGITS: usize = 15;

/// 13-19 digits, Luhn-valid, with a payment card's first digits for its length.
pub fn is_card_number(d: &[u8]) -> bool {
    (13..=19).contains(&d.len()) && issuer_length_fits(d) && luhn(d)
}

fn issuer_length_fits(d: &[u8]) -> bool {
    let len = d.len();
    match d[0] {
        // UATP (airline) cards: 15 digits.
        1 => len == 15,
        // American Express (34, 37): 15; Diners Club (30, 36, 38, 39): 14 or 16-19; JCB (35 and
        // the older 31-33): 16-19.
        3 => match d[1] {
            4 | 7 => len == 15,
            0 | 6 | 8 | 9 => len == 14 || len >= 16,
            _ => len >= 16,
        },
        // Visa: 13 (older cards), 16-19.
        4 => len == 13 || len >= 16,
        // Mir and Mastercard (2), Mastercard and Maestro (5), Discover, UnionPay, RuPay, Maestro
        // (6, 8), Troy (9).
        2 | 5 | 6 | 8 | 9 => len >= 16,
        // 0 and 7 (petroleum) carry no payment card number.
        _ => false,
    }
}

/// A JSON integer (or an integral float) that is itself a card number.
pub fn number_is_card(n: &serde_json::Number) -> bool {
    let magnitude = if let Some(u) = n.as_u64() {
        u
    } else if let Some(i) = n.as_i64() {
        i.unsigned_abs()
    } else {
        let Some(f) = n.as_f64() else { return false };
        if !f.is_finite() || f.fract() != 0.0 || f.abs() >= 1.8e19 {
            return false;
        }
        // Integral and in range, checked just above.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let u = f.abs() as u64;
        u
    };
    let mut digits = [0u8; 20];
    let mut len = 0;
    let mut m = magnitude;
    loop {
        digits[len] = (m % 10) as u8;
        len += 1;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    digits[..len].reverse();
    is_card_number(&digits[..len])
}

fn is_separator(c: char) -> bool {
    matches!(c, '-' | '.' | '\u{2010}'..='\u{2015}' | '\u{2212}')
}

/// An 8-4-4-4-12 hex UUID starting at `i`, not glued to hex digits on either side (so a card
/// number cannot hide its last digits in what looks like a UUID's first group).
fn uuid_at<T: Copy + Into<char>>(s: &[T], i: usize) -> bool {
    if s.len() < i + 36 {
        return false;
    }
    let glued = |c: char| c.is_ascii_hexdigit() || digit_value(c).is_some();
    if i > 0 && glued(s[i - 1].into()) {
        return false;
    }
    if s.len() > i + 36 && glued(s[i + 36].into()) {
        return false;
    }
    s[i..i + 36].iter().enumerate().all(|(j, c)| {
        let c: char = (*c).into();
        if matches!(j, 8 | 13 | 18 | 23) {
            c == '-'
        } else {
            c.is_ascii_hexdigit()
        }
    })
}

/// Decimal value of any Unicode decimal digit (Nd).
pub fn digit_value(c: char) -> Option<u8> {
    if c.is_ascii_digit() {
        return Some(c as u8 - b'0');
    }
    if c.is_ascii() {
        return None;
    }
    unicode_digit(c)
}

/// Code points of the `0` of every Unicode Nd block (each block holds 0-9 in order).
pub(super) const ND_ZEROS: &[u32] = &[
    0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66,
    0xDE6, 0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
    0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10,
    0x104A0, 0x10D30, 0x10D40, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0,
    0x11650, 0x116C0, 0x116D0, 0x116DA, 0x11730, 0x118E0, 0x11950, 0x11BF0, 0x11C50, 0x11D50,
    0x11DA0, 0x11F50, 0x16130, 0x16A60, 0x16AC0, 0x16B50, 0x16D70, 0x1CCF0, 0x1D7CE, 0x1D7D8,
    0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E4F0, 0x1E5F1, 0x1E950, 0x1FBF0,
];

/// The value of a Unicode decimal digit, found by its block's zero in [`ND_ZEROS`].
pub fn unicode_digit(c: char) -> Option<u8> {
    let cp = c as u32;
    let idx = match ND_ZEROS.binary_search(&cp) {
        Ok(i) => i,
        Err(0) => return None,
        Err(i) => i - 1,
    };
    let off = cp - ND_ZEROS[idx];
    (off < 10).then_some(off as u8)
}

pub fn luhn(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, d)| {
            let d = u32::from(*d);
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(s: &str) -> bool {
        card_in(s.as_bytes())
    }

    #[test]
    fn prefixes_and_suffixes_of_whole_groups() {
        assert!(card("4111 1111 1111 1111 123"));
        assert!(card("4111111111111111 12/30"));
        assert!(card("7 4111111111111111"));
        assert!(card("4111 \t 1111\n1111  1111"));
        // Inner stretches are not tried.
        assert!(!card("1 2 4111111111111111 3 4 5"));
        // A separator glued to another separator ends the run.
        assert!(!card("4111 - 1111 - 1111 - 1111"));
        assert!(!card("41111111111111111111"));
    }

    #[test]
    fn issuer_and_length_must_fit_a_card() {
        // IMEI (Luhn-valid by construction), an ISBN-13 and a millisecond timestamp, all Luhn-valid.
        assert!(luhn(&[3, 5, 2, 0, 9, 9, 0, 0, 1, 7, 6, 1, 4, 8, 1]));
        assert!(!card("352099001761481"));
        assert!(!card("35-209900-176148-1"));
        assert!(!card("9780306406156"));
        assert!(!card("1764607365129"));
        assert!(card("378282246310005"));
        assert!(card("4222222222222"));
    }

    #[test]
    fn a_uuid_glued_to_digits_is_not_skipped() {
        assert!(!card("2c9a1f5e-8d3b-4a71-9e02-6f4b3c2d1a00"));
        assert!(card("4111111111111111-1111-4111-8111-111111111111"));
    }
}

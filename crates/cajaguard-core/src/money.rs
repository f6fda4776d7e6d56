//! Integer minor units and ISO 4217 currencies (exponent from the `iso_currency` crate).
//!
//! Amounts are `i64` minor units everywhere: floating point never touches money, and the
//! exponent comes from the ISO 4217 data in `iso_currency` so a hand-typed table cannot drift.

use crate::Error;

/// The largest amount, in minor units, that CajaGuard accepts anywhere: 2^53-1, so that every amount
/// survives a round trip through a JSON number in any language.
pub const MAX_MINOR: i64 = (1 << 53) - 1;

/// An ISO 4217 currency that has a minor unit (`XXX`, `XAU`, ... are refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency {
    code: [u8; 3],
    exponent: u8,
}

impl Currency {
    /// `"USD"` -> exponent 2, `"JPY"` -> 0, `"KWD"` -> 3. Exact upper-case code only.
    pub fn from_code(code: &str) -> Result<Currency, Error> {
        let printable = crate::display::quoted_code(code);
        let bytes: [u8; 3] = match code.as_bytes().try_into() {
            Ok(b) if code.bytes().all(|b| b.is_ascii_uppercase()) => b,
            _ => {
                return Err(Error::Money(format!(
                    "currency code {printable} is not three upper-case letters: use an ISO 4217 code such as USD"
                )));
            }
        };
        let Some(iso) = iso_currency::Currency::from_code(code) else {
            return Err(Error::Money(format!(
                "currency code {printable} is not an ISO 4217 currency: use a code such as USD, EUR or JPY"
            )));
        };
        let Some(exponent) = iso.exponent() else {
            return Err(Error::Money(format!(
                "currency {printable} has no minor unit in ISO 4217 (a fund, metal or test code): it cannot hold money caps"
            )));
        };
        let exponent = u8::try_from(exponent)
            .ok()
            .filter(|e| *e <= 6)
            .ok_or_else(|| {
                Error::Money(format!(
                    "currency {printable} has an unusable ISO 4217 exponent"
                ))
            })?;
        Ok(Currency {
            code: bytes,
            exponent,
        })
    }

    pub fn code(&self) -> &str {
        // Built only from three ASCII upper-case letters, so this never falls back.
        std::str::from_utf8(&self.code).unwrap_or("???")
    }

    pub fn exponent(&self) -> u8 {
        self.exponent
    }
}

/// `"50.00"` (USD) -> 5000. Refuses more decimals than the exponent, signs, exponents, spaces, empty
/// parts, and anything over [`MAX_MINOR`].
pub fn parse_major(text: &str, currency: Currency) -> Result<i64, Error> {
    let code = currency.code();
    let exp = usize::from(currency.exponent);
    let example = example_amount(currency);
    let (int_part, frac_part) = match text.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (text, None),
    };
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(int_part) || frac_part.is_some_and(|f| !all_digits(f)) {
        return Err(Error::Money(format!(
            "{code} amount is not a plain decimal in major units: write digits with an optional \
             decimal point, like \"{example}\" (no sign, exponent, spaces or separators)"
        )));
    }
    let frac = frac_part.unwrap_or("");
    if frac.len() > exp {
        return Err(Error::Money(if exp == 0 {
            format!("{code} has no minor unit: write a whole amount, like \"{example}\"")
        } else {
            format!(
                "{code} has {exp} decimal places: write at most {exp} after the point, like \"{example}\""
            )
        }));
    }
    let too_big = || {
        Error::Money(format!(
            "{code} amount is over the largest supported amount ({} {code})",
            format_major(MAX_MINOR, currency)
        ))
    };
    let mut minor: i64 = 0;
    for b in int_part
        .bytes()
        .chain(frac.bytes())
        .chain(std::iter::repeat_n(b'0', exp - frac.len()))
    {
        minor = minor
            .checked_mul(10)
            .and_then(|m| m.checked_add(i64::from(b - b'0')))
            .filter(|m| *m <= MAX_MINOR)
            .ok_or_else(too_big)?;
    }
    Ok(minor)
}

fn example_amount(currency: Currency) -> String {
    format_major(5 * 10_i64.pow(u32::from(currency.exponent) + 1), currency)
}

/// 8900 (USD) -> `"89.00"`; 9800 (JPY) -> `"9800"`; negative amounts get a leading `-`.
pub fn format_major(minor: i64, currency: Currency) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let abs = minor.unsigned_abs();
    let exp = u32::from(currency.exponent);
    if exp == 0 {
        return format!("{sign}{abs}");
    }
    let scale = 10_u64.pow(exp);
    format!(
        "{sign}{}.{:0width$}",
        abs / scale,
        abs % scale,
        width = exp as usize
    )
}

/// 8900 (USD) -> `"USD 89.00"`.
pub fn display(minor: i64, currency: Currency) -> String {
    format!("{} {}", currency.code(), format_major(minor, currency))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cur(code: &str) -> Currency {
        Currency::from_code(code).unwrap()
    }

    #[test]
    fn exponents_come_from_iso_4217() {
        assert_eq!(cur("USD").exponent(), 2);
        assert_eq!(cur("JPY").exponent(), 0);
        assert_eq!(cur("KWD").exponent(), 3);
        assert_eq!(cur("USD").code(), "USD");
    }

    #[test]
    fn refuses_codes_without_minor_unit_or_unknown() {
        for bad in ["XXX", "XAU", "ZZZ", "usd", "US", "USDD", "", "ÜSD"] {
            assert!(Currency::from_code(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_and_refuses_as_spec_section_2_lists() {
        let usd = cur("USD");
        let jpy = cur("JPY");
        assert_eq!(parse_major("50.00", usd).unwrap(), 5000);
        assert_eq!(parse_major("50", usd).unwrap(), 5000);
        assert_eq!(parse_major("50.5", usd).unwrap(), 5050);
        assert_eq!(parse_major("0", usd).unwrap(), 0);
        assert_eq!(parse_major("5000", jpy).unwrap(), 5000);
        assert_eq!(parse_major("90071992547409.91", usd).unwrap(), MAX_MINOR);
        for bad in [
            "50.005",
            "-1",
            "+1",
            "1e3",
            "",
            ".5",
            "5.",
            " 5",
            "5 ",
            "1,000",
            "0x10",
            "５０",
            "90071992547409.92",
        ] {
            assert!(parse_major(bad, usd).is_err(), "{bad}");
        }
        for bad in ["5000.5", "5000.0", "9007199254740992"] {
            assert!(parse_major(bad, jpy).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_major_units() {
        assert_eq!(format_major(8900, cur("USD")), "89.00");
        assert_eq!(format_major(5, cur("USD")), "0.05");
        assert_eq!(format_major(-5, cur("USD")), "-0.05");
        assert_eq!(format_major(9800, cur("JPY")), "9800");
        assert_eq!(format_major(1234, cur("KWD")), "1.234");
        assert_eq!(display(21900, cur("USD")), "USD 219.00");
        assert_eq!(format_major(i64::MIN, cur("USD")), "-92233720368547758.08");
    }
}

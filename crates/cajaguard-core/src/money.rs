//! Integer minor units and ISO 4217 currencies (exponent from the `iso_currency` crate).

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
        todo!("{code}")
    }
    pub fn code(&self) -> &str {
        todo!()
    }
    pub fn exponent(&self) -> u8 {
        self.exponent
    }
}

/// `"50.00"` (USD) -> 5000. Refuses more decimals than the exponent, signs, exponents, spaces, empty
/// parts, and anything over [`MAX_MINOR`].
pub fn parse_major(text: &str, currency: Currency) -> Result<i64, Error> {
    todo!("{text} {currency:?}")
}

/// 8900 (USD) -> `"89.00"`; 9800 (JPY) -> `"9800"`; negative amounts get a leading `-`.
pub fn format_major(minor: i64, currency: Currency) -> String {
    todo!("{minor} {currency:?}")
}

/// 8900 (USD) -> `"USD 89.00"`.
pub fn display(minor: i64, currency: Currency) -> String {
    format!("{} {}", currency.code(), format_major(minor, currency))
}

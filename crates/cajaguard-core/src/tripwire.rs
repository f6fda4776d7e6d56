//! The test-mode tripwire (SPEC §5): refuses anything that looks like a real card number or a live
//! credential before the shop sees it. A hit names the JSON path and the rule, never the value.
//!
//! It runs on every tool call's arguments, so it is written to be cheap: an ASCII string with fewer
//! than 13 digits is never copied or normalised, and nothing is allocated until a hit (the path is
//! kept as borrowed segments and rendered only then).
//!
//! **Unicode digits.** Strings are NFKC-normalised first (which folds full-width `４`, mathematical
//! `𝟒`, no-break and ideographic spaces to ASCII). Digits that NFKC keeps, such as Arabic-Indic `٤`
//! or Devanagari `४`, are read with [`unicode_digit`]: every Unicode decimal digit (general category
//! Nd) sits in a contiguous block of ten starting at its zero (a Unicode stability guarantee), so a
//! table of the blocks' zero code points gives each digit's value. The table was generated from the
//! Unicode 14 database (Python's `unicodedata`) plus the Nd blocks added in Unicode 15 and 16; a
//! test checks every entry against `char::is_numeric` of the Rust standard library.

use serde_json::{Map, Value};
use unicode_normalization::UnicodeNormalization;

use crate::policy::TestModePolicy;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A payment instrument whose `handler_id` is not in `test_mode.handler_ids`.
    HandlerNotTest,
    /// A card credential (`type` card, `pan`, `network_token`, a `number`/`cvc`/`cryptogram`).
    CardCredential,
    /// A token credential whose token does not match `test_mode.token_pattern`.
    TokenNotTest,
    /// 13-19 digits passing Luhn, anywhere.
    CardNumber,
    /// A secret-like field whose value has a `live` segment.
    LiveSecret,
    /// `sk_live_`, `rk_live_` anywhere.
    LiveKeyPrefix,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::HandlerNotTest => "handler_not_test",
            Rule::CardCredential => "card_credential",
            Rule::TokenNotTest => "token_not_test",
            Rule::CardNumber => "card_number",
            Rule::LiveSecret => "live_secret",
            Rule::LiveKeyPrefix => "live_key_prefix",
        }
    }

    /// What the rule means and what to do, for a refusal's detail.
    pub fn explain(self) -> &'static str {
        match self {
            Rule::HandlerNotTest => {
                "the payment instrument's handler_id is not a test handler (test_mode.handler_ids)"
            }
            Rule::CardCredential => {
                "a card credential (card, PAN, network token, number, CVC or cryptogram) is never sent in test mode"
            }
            Rule::TokenNotTest => "the credential is not a token matching test_mode.token_pattern",
            Rule::CardNumber => {
                "something that looks like a real card number (13-19 digits passing Luhn)"
            }
            Rule::LiveSecret => "a secret-like field holds a live-looking value",
            Rule::LiveKeyPrefix => "a live API key prefix (sk_live_, rk_live_)",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Like `$.checkout.payment.instruments[0].credential.token`. Keys are escaped so that a key
    /// holding a card number is not repeated in the path (the path shows `[key #n]` instead).
    pub path: String,
    pub rule: Rule,
}

/// Scans a tool call's arguments; the first hit in document order, or `None`.
pub fn scan(policy: &TestModePolicy, args: &Value) -> Option<Hit> {
    let mut walker = Walker {
        policy,
        stack: Vec::with_capacity(16),
    };
    let rule = walker.value(args)?;
    Some(Hit {
        path: render(&walker.stack),
        rule,
    })
}

/// True when `text` (after NFKC, UUIDs removed) holds a 13-19 digit Luhn-valid run.
pub fn contains_card_number(text: &str) -> bool {
    if text.is_ascii() {
        return ascii_digit_count(text.as_bytes()) >= 13 && card_in(text.as_bytes());
    }
    let normalized = nfkc(text);
    let chars: Vec<char> = normalized.chars().collect();
    card_in(&chars)
}

#[derive(Debug, Clone, Copy)]
enum Seg<'a> {
    Key(&'a str, usize),
    Index(usize),
}

fn render(stack: &[Seg<'_>]) -> String {
    let mut out = String::from("$");
    for seg in stack {
        match seg {
            Seg::Key(k, _) if key_safe_to_show(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Key(_, i) => out.push_str(&format!("[key #{i}]")),
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// A key is echoed only if it cannot carry a secret: short, plain letters, no digits (digits in
/// several keys could join into a card number across the `.` between path segments), no `live`.
fn key_safe_to_show(k: &str) -> bool {
    let b = k.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b.iter()
            .all(|c| c.is_ascii_alphabetic() || *c == b'_' || *c == b'-')
        && !contains_ci(b, b"live")
}

struct Walker<'p, 'a> {
    policy: &'p TestModePolicy,
    stack: Vec<Seg<'a>>,
}

impl<'a> Walker<'_, 'a> {
    /// Leaves the stack at the hit's path when it returns `Some`.
    fn value(&mut self, v: &'a Value) -> Option<Rule> {
        match v {
            Value::String(s) => string_rules(s),
            Value::Number(n) => number_rule(n),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.stack.push(Seg::Index(i));
                    if self.at_instrument()
                        && let Some(rule) = self.instrument(item)
                    {
                        return Some(rule);
                    }
                    if let Some(rule) = self.value(item) {
                        return Some(rule);
                    }
                    self.stack.pop();
                }
                None
            }
            Value::Object(map) => {
                for (i, (k, item)) in map.iter().enumerate() {
                    self.stack.push(Seg::Key(k, i));
                    if let Some(rule) = string_rules(k) {
                        return Some(rule);
                    }
                    if let Value::String(s) = item {
                        let profile = Profile::of(s.as_bytes());
                        if profile.maybe_live && has_live_segment(s) && secret_like_name(k) {
                            return Some(Rule::LiveSecret);
                        }
                        if let Some(rule) = string_rules_profiled(s, profile) {
                            return Some(rule);
                        }
                        self.stack.pop();
                        continue;
                    }
                    if let Some(rule) = self.value(item) {
                        return Some(rule);
                    }
                    self.stack.pop();
                }
                None
            }
            Value::Null | Value::Bool(_) => None,
        }
    }

    /// `$.checkout.payment.instruments[i]`, in any tool's arguments (create, update, complete).
    fn at_instrument(&self) -> bool {
        matches!(
            self.stack.as_slice(),
            [
                Seg::Key("checkout", _),
                Seg::Key("payment", _),
                Seg::Key("instruments", _),
                Seg::Index(_)
            ]
        )
    }

    fn push_field(&mut self, map: &'a Map<String, Value>, name: &str) {
        if let Some((i, (k, _))) = map
            .iter()
            .enumerate()
            .find(|(_, (k, _))| k.as_str() == name)
        {
            self.stack.push(Seg::Key(k, i));
        }
    }

    /// Handler and credential rules. Only the handler and the credential are judged: an
    /// instrument's own `type: card` is how UCP describes a tokenized card and is no reason to refuse.
    fn instrument(&mut self, v: &'a Value) -> Option<Rule> {
        let Some(inst) = v.as_object() else {
            return Some(Rule::HandlerNotTest);
        };
        match inst.get("handler_id") {
            Some(Value::String(h)) if self.policy.handler_ids.contains(h) => {}
            _ => {
                self.push_field(inst, "handler_id");
                return Some(Rule::HandlerNotTest);
            }
        }
        let cred_value = inst.get("credential")?;
        self.push_field(inst, "credential");
        let Some(cred) = cred_value.as_object() else {
            return Some(Rule::TokenNotTest);
        };
        if let Some(Value::String(t)) = cred.get("type")
            && ["card", "pan", "network_token"]
                .iter()
                .any(|c| t.eq_ignore_ascii_case(c))
        {
            self.push_field(cred, "type");
            return Some(Rule::CardCredential);
        }
        const CARD_FIELDS: &[&str] = &["number", "cvc", "cvv", "cryptogram", "pan", "card_number"];
        if let Some(k) = cred.keys().find(|k| CARD_FIELDS.contains(&k.as_str())) {
            let k = k.clone();
            self.push_field(cred, &k);
            return Some(Rule::CardCredential);
        }
        match cred.get("token") {
            Some(Value::String(t)) if self.policy.token_pattern.is_match(t) => {
                self.stack.pop();
                None
            }
            _ => {
                self.push_field(cred, "token");
                Some(Rule::TokenNotTest)
            }
        }
    }
}

/// Live-key prefixes and card numbers in one string (a value or a key).
fn string_rules(s: &str) -> Option<Rule> {
    string_rules_profiled(s, Profile::of(s.as_bytes()))
}

/// What one pass over a string's bytes tells about which rules could apply, so that most strings
/// are looked at once and never copied.
#[derive(Clone, Copy)]
struct Profile {
    ascii: bool,
    digits: usize,
    underscore: bool,
    /// An `l`/`L` (or any non-ASCII, which NFKC might turn into one).
    maybe_live: bool,
}

impl Profile {
    fn of(b: &[u8]) -> Profile {
        let (mut high, mut digits, mut underscore, mut l) = (0u8, 0usize, false, false);
        for &c in b {
            high |= c & 0x80;
            digits += usize::from(c.is_ascii_digit());
            underscore |= c == b'_';
            l |= (c | 0x20) == b'l';
        }
        let ascii = high == 0;
        Profile {
            ascii,
            digits,
            underscore,
            maybe_live: l || !ascii,
        }
    }
}

fn string_rules_profiled(s: &str, profile: Profile) -> Option<Rule> {
    if profile.ascii {
        let b = s.as_bytes();
        if profile.underscore && profile.maybe_live && has_live_prefix(b) {
            return Some(Rule::LiveKeyPrefix);
        }
        if profile.digits >= 13 && card_in(b) {
            return Some(Rule::CardNumber);
        }
        return None;
    }
    let normalized = nfkc(s);
    if has_live_prefix(normalized.as_bytes()) {
        return Some(Rule::LiveKeyPrefix);
    }
    let chars: Vec<char> = normalized.chars().collect();
    if card_in(&chars) {
        return Some(Rule::CardNumber);
    }
    None
}

fn nfkc(s: &str) -> std::borrow::Cow<'_, str> {
    if unicode_normalization::is_nfkc_quick(s.chars()) == unicode_normalization::IsNormalized::Yes {
        std::borrow::Cow::Borrowed(s)
    } else {
        std::borrow::Cow::Owned(s.nfkc().collect())
    }
}

/// A JSON integer (or an integral float) that is itself a card number.
fn number_rule(n: &serde_json::Number) -> Option<Rule> {
    let magnitude = if let Some(u) = n.as_u64() {
        u
    } else if let Some(i) = n.as_i64() {
        i.unsigned_abs()
    } else {
        let f = n.as_f64()?;
        if !f.is_finite() || f.fract() != 0.0 || f.abs() >= 1.8e19 {
            return None;
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
    ((13..=19).contains(&len) && luhn(&digits[..len])).then_some(Rule::CardNumber)
}

fn ascii_digit_count(b: &[u8]) -> usize {
    b.iter().filter(|c| c.is_ascii_digit()).count()
}

/// ASCII case-insensitive substring test; `needle` must be lower-case.
fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    if hay.len() < needle.len() {
        return false;
    }
    let last_start = hay.len() - needle.len();
    hay[..=last_start]
        .iter()
        .enumerate()
        .filter(|(_, b)| b.to_ascii_lowercase() == first)
        .any(|(i, _)| hay[i + 1..i + needle.len()].eq_ignore_ascii_case(rest))
}

fn has_live_prefix(b: &[u8]) -> bool {
    // Anchor on the `_` after `sk`/`rk`, which is rare in ordinary text.
    b.iter()
        .enumerate()
        .filter(|(_, c)| **c == b'_')
        .any(|(p, _)| {
            p >= 2
                && b.len() >= p + 6
                && (b[p - 2..p + 6].eq_ignore_ascii_case(b"sk_live_")
                    || b[p - 2..p + 6].eq_ignore_ascii_case(b"rk_live_"))
        })
}

/// A field name that suggests a secret (`api_key`, `client_secret`, `Authorization`, ...).
fn secret_like_name(k: &str) -> bool {
    const NEEDLES: &[&[u8]] = &[
        b"token",
        b"secret",
        b"key",
        b"passw",
        b"passphrase",
        b"credential",
        b"auth",
        b"bearer",
        b"private",
        b"session",
        b"cookie",
    ];
    let b = k.as_bytes();
    NEEDLES.iter().any(|n| contains_ci(b, n))
}

/// A `live` segment: `sk_live_x`, `live-x`, `x_live`, `x.live.y` (segments split by anything not alphanumeric).
fn has_live_segment(s: &str) -> bool {
    if s.is_ascii() {
        if !contains_ci(s.as_bytes(), b"live") {
            return false;
        }
        return s
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|seg| seg.eq_ignore_ascii_case("live"));
    }
    nfkc(s)
        .split(|c: char| !c.is_alphanumeric())
        .any(|seg| seg.eq_ignore_ascii_case("live"))
}

fn is_separator(c: char) -> bool {
    matches!(c, ' ' | '-' | '.' | '\u{2010}'..='\u{2015}' | '\u{2212}')
}

fn is_hex(c: char) -> bool {
    c.is_ascii_hexdigit()
}

/// An 8-4-4-4-12 hex UUID starting at `i`.
fn uuid_at<T: Copy + Into<char>>(s: &[T], i: usize) -> bool {
    if s.len() < i + 36 {
        return false;
    }
    s[i..i + 36].iter().enumerate().all(|(j, c)| {
        let c: char = (*c).into();
        if matches!(j, 8 | 13 | 18 | 23) {
            c == '-'
        } else {
            is_hex(c)
        }
    })
}

/// Decimal value of any Unicode decimal digit (Nd).
fn digit_value(c: char) -> Option<u8> {
    if c.is_ascii_digit() {
        return Some(c as u8 - b'0');
    }
    if c.is_ascii() {
        return None;
    }
    unicode_digit(c)
}

/// Code points of the `0` of every Unicode Nd block (each block holds 0-9 in order).
const ND_ZEROS: &[u32] = &[
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

/// Finds a maximal run of 13-19 digits (single separators allowed between digits, bounded by
/// non-digits) that passes Luhn. UUIDs are skipped as boundaries.
fn card_in<T: Copy + Into<char>>(s: &[T]) -> bool {
    let mut digits = [0u8; 19];
    let mut count = 0usize;
    let mut after_sep = false;
    let finish =
        |digits: &[u8; 19], count: usize| (13..=19).contains(&count) && luhn(&digits[..count]);
    let mut i = 0;
    while i < s.len() {
        let c: char = s[i].into();
        if is_hex(c) && uuid_at(s, i) {
            if finish(&digits, count) {
                return true;
            }
            count = 0;
            after_sep = false;
            i += 36;
            continue;
        }
        if let Some(d) = digit_value(c) {
            if count < 19 {
                digits[count] = d;
            }
            count += 1;
            after_sep = false;
        } else if count > 0 && !after_sep && is_separator(c) {
            after_sep = true;
        } else {
            if finish(&digits, count) {
                return true;
            }
            count = 0;
            after_sep = false;
        }
        i += 1;
    }
    finish(&digits, count)
}

fn luhn(digits: &[u8]) -> bool {
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
    use serde_json::json;

    fn policy() -> TestModePolicy {
        TestModePolicy::spec_default()
    }

    #[test]
    fn nd_table_entries_are_unicode_digits() {
        for zero in ND_ZEROS {
            for d in 0..10 {
                let c = char::from_u32(zero + d).unwrap();
                assert!(c.is_numeric(), "U+{:04X} is not numeric", zero + d);
                assert_eq!(unicode_digit(c), Some(d as u8));
            }
        }
        assert!(
            ND_ZEROS.windows(2).all(|w| w[0] + 10 <= w[1]),
            "sorted, non-overlapping"
        );
        assert_eq!(unicode_digit('٤'), Some(4));
        assert_eq!(unicode_digit('४'), Some(4));
        assert_eq!(unicode_digit('a'), None);
        assert_eq!(unicode_digit('²'), None);
    }

    #[test]
    fn card_numbers_in_many_forms() {
        for yes in [
            "4111111111111111",
            "4111 1111 1111 1111",
            "4111-1111-1111-1111",
            "4111.1111.1111.1111",
            "card: 4111 1111 1111 1111, exp 12/30",
            "４１１１１１１１１１１１１１１１",
            "٤١١١١١١١١١١١١١١١",
            "४१११११११११११११११",
            "4111\u{00A0}1111\u{00A0}1111\u{00A0}1111",
            "4111\u{3000}1111\u{3000}1111\u{3000}1111",
            "378282246310005",
        ] {
            assert!(contains_card_number(yes), "{yes}");
        }
        for no in [
            "4111111111111112",
            "41111111111111110000",
            "4111  1111 1111 1111",
            "411111111111",
            "2c9a1f5e-8d3b-4a71-9e02-6f4b3c2d1a00",
            "00000000-0000-4000-8000-000000000000",
            "gid://fixture/Checkout/1",
        ] {
            assert!(!contains_card_number(no), "{no}");
        }
    }

    #[test]
    fn paths_never_echo_a_secret_key() {
        let hit = scan(&policy(), &json!({"note": {"4111111111111111": 1}})).unwrap();
        assert_eq!(hit.rule, Rule::CardNumber);
        assert_eq!(hit.path, "$.note[key #0]");
        let hit = scan(&policy(), &json!({"a": [1, {"b": 4111111111111111_u64}]})).unwrap();
        assert_eq!(hit.path, "$.a[1].b");
        // Digits split across keys must not join into a card number in the path.
        let hit = scan(
            &policy(),
            &json!({"411111": {"111111": {"1111": {"x": "sk_live_1"}}}}),
        )
        .unwrap();
        assert_eq!(hit.path, "$[key #0][key #0][key #0].x");
    }

    #[test]
    fn instruments_and_credentials() {
        let args =
            |inst: Value| json!({"id": "c1", "checkout": {"payment": {"instruments": [inst]}}});
        let p = policy();
        let ok = json!({"id": "i1", "handler_id": "fixture_test_handler", "type": "card",
                        "credential": {"type": "token", "token": "cg_test_abcdefgh1"}});
        assert_eq!(scan(&p, &args(ok)), None);
        let shop_pay = json!({"id": "i1", "handler_id": "com.shopify.shop_pay", "type": "card"});
        let hit = scan(&p, &args(shop_pay)).unwrap();
        assert_eq!(
            (hit.rule, hit.path.as_str()),
            (
                Rule::HandlerNotTest,
                "$.checkout.payment.instruments[0].handler_id"
            )
        );
        let pan = json!({"id": "i1", "handler_id": "fixture_test_handler", "type": "card",
                         "credential": {"type": "pan", "number": "4111111111111111"}});
        let hit = scan(&p, &args(pan)).unwrap();
        assert_eq!(
            (hit.rule, hit.path.as_str()),
            (
                Rule::CardCredential,
                "$.checkout.payment.instruments[0].credential.type"
            )
        );
        let live = json!({"id": "i1", "handler_id": "fixture_test_handler", "type": "card",
                          "credential": {"type": "token", "token": "tok_live_abcdef"}});
        let hit = scan(&p, &args(live)).unwrap();
        assert_eq!(hit.rule, Rule::TokenNotTest);
        assert_eq!(
            hit.path,
            "$.checkout.payment.instruments[0].credential.token"
        );
        let hit = scan(&p, &json!({"meta": {"api_key": "live-abc"}})).unwrap();
        assert_eq!(
            (hit.rule, hit.path.as_str()),
            (Rule::LiveSecret, "$.meta.api_key")
        );
        let hit = scan(&p, &json!({"query": "use SK_LIVE_abc please"})).unwrap();
        assert_eq!(hit.rule, Rule::LiveKeyPrefix);
        assert_eq!(
            scan(
                &p,
                &json!({"query": "delivery by friday", "session_key": "olive_tree"})
            ),
            None
        );
    }
}

//! The test-mode tripwire (SPEC §5): refuses anything that looks like a real card number or a live
//! credential before the shop sees it. A hit names the JSON path and the rule, never the value.
//! This file is the walker over a message (one idea: which strings and keys are read, in what
//! order, and how a hit is named); what a card number or a secret is lives in `cards`/`secrets`.
//!
//! It reads the whole `params` of every request and notification the proxy forwards
//! ([`scan_params`]), keys and values alike, each string in every form a reader might see in it
//! (`normalise.rs`: percent-escapes decoded, NFKC, invisible characters dropped), for card numbers
//! (`cards.rs`) and live credentials (`secrets.rs`); payment instruments under
//! `arguments.checkout.payment.instruments[]` also get the handler and credential rules.
//!
//! It runs on every call, so it is written to be cheap: an ASCII string with fewer than 13 digits
//! and no `%` is looked at once and never copied, and nothing is allocated until a hit (the path is
//! kept as borrowed segments and rendered only then).

mod cards;
mod normalise;
mod numbers;
mod secrets;

use serde_json::{Map, Value};

pub use cards::{is_card_number, luhn, unicode_digit};
pub use normalise::{forms, normalise};

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
    /// A string with a `live` segment beneath a secret-like field.
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
    /// Like `$.arguments.checkout.payment.instruments[0].credential.token`. Keys are escaped so that
    /// a key holding a card number is not repeated in the path (the path shows `[key #n]` instead).
    pub path: String,
    pub rule: Rule,
}

/// Scans a tool call's arguments alone (paths from the arguments); the first hit in document order.
pub fn scan(policy: &TestModePolicy, args: &Value) -> Option<Hit> {
    Walker::new(policy, Root::Arguments).run(args)
}

/// Scans the whole `params` of a request or notification bound for the shop (paths from `params`:
/// `$.arguments...`, `$._meta...`). The first hit in document order.
pub fn scan_params(policy: &TestModePolicy, params: &Value) -> Option<Hit> {
    Walker::new(policy, Root::Params).run(params)
}

/// [`scan_params`] on `params` as parsed from the JSON text `raw`, plus the numbers of `raw` that
/// parsing rounded: one written with a fraction or an exponent whose whole value is a card
/// number (`4000000000000000006.0` parses as an `f64` that is not, while a shop reading numbers
/// exactly gets the card).
pub fn scan_params_text(policy: &TestModePolicy, raw: &str, params: &Value) -> Option<Hit> {
    scan_params(policy, params).or_else(|| {
        numbers::inexact_number_is_card(raw).then(|| Hit {
            path: "$ (a number written with a fraction or an exponent)".to_owned(),
            rule: Rule::CardNumber,
        })
    })
}

/// True when `text`, in any of its forms, holds a card number.
pub fn contains_card_number(text: &str) -> bool {
    let b = text.as_bytes();
    if text.is_ascii() && !b.contains(&b'%') {
        return ascii_digit_count(b) >= 13 && cards::card_in(b);
    }
    forms(text).iter().any(|form| card_in_str(form))
}

/// What an audit record, a freeze's reason or a status shows in place of text that holds a card
/// number or a live API key.
pub const WITHHELD: &str = "(withheld: it looks like a card number or a live API key)";

/// `text`, unless it holds a card number or a live API key prefix (`sk_live_`, `rk_live_`) in
/// any of its forms: then [`WITHHELD`]. For text an agent or a shop chose that is kept or shown
/// (audit records, a freeze's reason), in every mode: no secret is ever written (SPEC §8, §11.4).
pub fn withhold_secrets(text: String) -> String {
    let live_key = if text.is_ascii() && !text.contains('%') {
        secrets::has_live_prefix(text.as_bytes())
    } else {
        forms(&text)
            .iter()
            .any(|form| secrets::has_live_prefix(form.as_bytes()))
    };
    if live_key || contains_card_number(&text) {
        WITHHELD.to_owned()
    } else {
        text
    }
}

fn card_in_str(s: &str) -> bool {
    if s.is_ascii() {
        return cards::card_in(s.as_bytes());
    }
    let chars: Vec<char> = s.chars().collect();
    chars
        .iter()
        .filter(|c| cards::digit_value(**c).is_some())
        .count()
        >= 13
        && cards::card_in(&chars)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Root {
    /// The value scanned is a tool call's `arguments`.
    Arguments,
    /// The value scanned is a message's `params`; a tool call's arguments are under `arguments`.
    Params,
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
    crate::display::is_plain_identifier(k, 64, false)
        && !secrets::contains_ci(k.as_bytes(), b"live")
}

struct Walker<'p, 'a> {
    policy: &'p TestModePolicy,
    root: Root,
    stack: Vec<Seg<'a>>,
}

/// Whether any of these path segments is a secret-like field name: beneath one, a `live` segment
/// in any string is a live secret, however deep. Asked only once such a string is found, so
/// clean calls never pay for judging names.
fn secret_among(segs: &[Seg<'_>]) -> bool {
    segs.iter().any(|seg| match seg {
        Seg::Key(k, _) => secrets::secret_like_name(&normalise(k)),
        Seg::Index(_) => false,
    })
}

impl<'p, 'a> Walker<'p, 'a> {
    fn new(policy: &'p TestModePolicy, root: Root) -> Self {
        Walker {
            policy,
            root,
            stack: Vec::with_capacity(16),
        }
    }

    fn run(mut self, v: &'a Value) -> Option<Hit> {
        let rule = self.value(v)?;
        Some(Hit {
            path: render(&self.stack),
            rule,
        })
    }

    /// Leaves the stack at the hit's path when it returns `Some`.
    fn value(&mut self, v: &'a Value) -> Option<Rule> {
        match v {
            Value::String(s) => {
                profiled_rules(s, Profile::of(s.as_bytes()), &|| secret_among(&self.stack))
            }
            Value::Number(n) => cards::number_is_card(n).then_some(Rule::CardNumber),
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
            Value::Object(map) => self.object(map),
            Value::Null | Value::Bool(_) => None,
        }
    }

    /// Whether the object being walked is a credential: the nearest field name above it (through
    /// arrays: `credentials: [{...}]`) names one.
    fn in_credential(&self) -> bool {
        let above = &self.stack[..self.stack.len().saturating_sub(1)];
        above
            .iter()
            .rev()
            .find_map(|seg| match seg {
                Seg::Key(k, _) => Some(secrets::credential_name(&normalise(k))),
                Seg::Index(_) => None,
            })
            .unwrap_or(false)
    }

    fn object(&mut self, map: &'a Map<String, Value>) -> Option<Rule> {
        for (i, (k, item)) in map.iter().enumerate() {
            self.stack.push(Seg::Key(k, i));
            let key = Profile::of(k.as_bytes());
            // A key is judged beneath the names above it, not its own.
            let depth = self.stack.len() - 1;
            if let Some(rule) = profiled_rules(k, key, &|| secret_among(&self.stack[..depth])) {
                return Some(rule);
            }
            let name = if key.plain {
                std::borrow::Cow::Borrowed(k.as_str())
            } else {
                normalise(k)
            };
            let carries = !item.is_null();
            if carries
                && (secrets::card_field_anywhere(&name)
                    || (secrets::card_field_in_credential(&name) && self.in_credential()))
            {
                return Some(Rule::CardCredential);
            }
            if name.eq_ignore_ascii_case("type")
                && item.as_str().is_some_and(secrets::card_credential_type)
                && self.in_credential()
            {
                return Some(Rule::CardCredential);
            }
            if let Some(rule) = self.value(item) {
                return Some(rule);
            }
            self.stack.pop();
        }
        None
    }

    /// `checkout.payment.instruments[i]` of a tool call's arguments (create, update, complete).
    fn at_instrument(&self) -> bool {
        let tail = match (self.root, self.stack.split_first()) {
            (Root::Arguments, _) => self.stack.as_slice(),
            (Root::Params, Some((Seg::Key(arguments, _), rest)))
                if names(arguments, "arguments") =>
            {
                rest
            }
            (Root::Params, _) => return false,
        };
        matches!(
            tail,
            [
                Seg::Key(checkout, _),
                Seg::Key(payment, _),
                Seg::Key(instruments, _),
                Seg::Index(_)
            ] if names(checkout, "checkout") && names(payment, "payment") && names(instruments, "instruments")
        )
    }

    fn push_field(&mut self, map: &'a Map<String, Value>, name: &str) {
        if let Some((i, (k, _))) = map.iter().enumerate().find(|(_, (k, _))| names(k, name)) {
            self.stack.push(Seg::Key(k, i));
        }
    }

    /// Handler and credential rules. Only the handler and the credential are judged: an
    /// instrument's own `type: card` is how UCP describes a tokenized card and is no reason to refuse.
    fn instrument(&mut self, v: &'a Value) -> Option<Rule> {
        let Some(inst) = v.as_object() else {
            return Some(Rule::HandlerNotTest);
        };
        match field(inst, "handler_id") {
            Some(Value::String(h)) if self.policy.handler_ids.contains(h) => {}
            _ => {
                self.push_field(inst, "handler_id");
                return Some(Rule::HandlerNotTest);
            }
        }
        let cred_value = field(inst, "credential")?;
        self.push_field(inst, "credential");
        let Some(cred) = cred_value.as_object() else {
            return Some(Rule::TokenNotTest);
        };
        if let Some((k, _)) = cred.iter().find(|(k, v)| {
            k.eq_ignore_ascii_case("type") && v.as_str().is_some_and(secrets::card_credential_type)
        }) {
            self.push_field(cred, k);
            return Some(Rule::CardCredential);
        }
        if let Some(k) = cred
            .keys()
            .find(|k| secrets::card_field_in_credential(&normalise(k)))
        {
            self.push_field(cred, k);
            return Some(Rule::CardCredential);
        }
        match field(cred, "token") {
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

/// Whether the key `k` is the field `name` to a shop that reads keys ignoring case, as Go's
/// `encoding/json` does (`Credential`, `TOKEN`; and `ſ` for `s`, `K` for `k`): as the proxy's
/// duplicate-key check compares them (`rawjson::folded`). Two keys of
/// one object that fold alike are refused before the tripwire runs, so at most one matches.
fn names(k: &str, name: &str) -> bool {
    // Without allocating for the plain keys nearly every call has.
    if k.is_ascii() {
        return k.eq_ignore_ascii_case(name);
    }
    cajaguard_wire::rawjson::folded(k) == name
}

/// The value of the field `name` of `map`, its key compared as [`names`] does.
fn field<'m>(map: &'m Map<String, Value>, name: &str) -> Option<&'m Value> {
    map.iter().find(|(k, _)| names(k, name)).map(|(_, v)| v)
}

/// What one pass over a string's bytes tells about which rules could apply, so that most strings
/// are looked at once and never copied.
#[derive(Clone, Copy)]
struct Profile {
    ascii: bool,
    /// ASCII with no `%`: the string is its only form.
    plain: bool,
    digits: usize,
    underscore: bool,
    /// `live` in any case: every live rule needs it (forms are normalised, so `ｌｉｖｅ` is
    /// `live` by then).
    live: bool,
}

impl Profile {
    fn of(b: &[u8]) -> Profile {
        const LIVE: u32 = u32::from_be_bytes(*b"live");
        let (mut high, mut digits, mut underscore, mut live, mut percent) =
            (0u8, 0usize, false, false, false);
        // The last four bytes, each `| 0x20`: that lower-cases ASCII letters and maps nothing
        // else onto `l`, `i`, `v` or `e`, so the window equals `live` exactly when the text
        // holds `live` in some case.
        let mut window = 0u32;
        for &c in b {
            high |= c & 0x80;
            digits += usize::from(c.is_ascii_digit());
            underscore |= c == b'_';
            percent |= c == b'%';
            window = (window << 8) | u32::from(c | 0x20);
            live |= window == LIVE;
        }
        let ascii = high == 0;
        Profile {
            ascii,
            plain: ascii && !percent,
            digits,
            underscore,
            live,
        }
    }
}

/// Live keys, live secrets and card numbers in one string (a value or a key) whose profile is
/// known, in every form of it. `secret` (is the string beneath a secret-like name?) is asked only
/// when a form of the string has a `live` segment.
fn profiled_rules(s: &str, profile: Profile, secret: &dyn Fn() -> bool) -> Option<Rule> {
    if profile.plain {
        return form_rules(s, profile, secret);
    }
    forms(s)
        .iter()
        .find_map(|form| form_rules(form, Profile::of(form.as_bytes()), secret))
}

fn form_rules(s: &str, profile: Profile, secret: &dyn Fn() -> bool) -> Option<Rule> {
    if profile.live && secrets::has_live_segment(s) && secret() {
        return Some(Rule::LiveSecret);
    }
    if profile.live && profile.underscore && secrets::has_live_prefix(s.as_bytes()) {
        return Some(Rule::LiveKeyPrefix);
    }
    if profile.ascii {
        return (profile.digits >= 13 && cards::card_in(s.as_bytes())).then_some(Rule::CardNumber);
    }
    card_in_str(s).then_some(Rule::CardNumber)
}

fn ascii_digit_count(b: &[u8]) -> usize {
    b.iter().filter(|c| c.is_ascii_digit()).count()
}
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy() -> TestModePolicy {
        TestModePolicy::spec_default()
    }

    #[test]
    fn instrument_fields_are_found_whatever_their_case() {
        let real_token = json!({"type": "token", "token": "pm_1PqRsTuVwXyZ0123456789ab"});
        for (checkout, instrument) in [
            (
                "checkout",
                json!({"handler_id": "fixture_test_handler", "Credential": real_token}),
            ),
            (
                "checkout",
                json!({"handler_id": "fixture_test_handler", "CREDENTIAL": real_token}),
            ),
            (
                "checkout",
                json!({"handler_id": "fixture_test_handler", "credential": {"type": "token", "TOKEN": "pm_1PqRsTuVwXyZ0123456789ab"}}),
            ),
            (
                "Checkout",
                json!({"handler_id": "com.shopify.shop_pay", "credential": real_token}),
            ),
            (
                "checkout",
                json!({"Handler_Id": "com.shopify.shop_pay", "credential": real_token}),
            ),
            // The long s and the Kelvin sign, as Go folds them.
            (
                "checkout",
                json!({"handler_id": "fixture_test_handler", "credential": {"type": "token", "to\u{212a}en": "pm_1PqRsTuVwXyZ0123456789ab"}}),
            ),
        ] {
            let args = json!({"id": "c1", checkout: {"payment": {"instruments": [instrument]}}});
            assert!(scan(&policy(), &args).is_some(), "{args}");
        }
        for payment in [
            json!({"Payment": {"instruments": [{"handler_id": "com.shopify.shop_pay", "credential": real_token}]}}),
            json!({"payment": {"Instruments": [{"handler_id": "com.shopify.shop_pay", "credential": real_token}]}}),
        ] {
            let args = json!({"id": "c1", "checkout": payment});
            assert!(scan(&policy(), &args).is_some(), "{args}");
        }
    }

    #[test]
    fn text_holding_a_card_or_a_live_key_is_withheld() {
        for secret in [
            "4111111111111111",
            "card 4111 1111 1111 1111 exp 12/30",
            "４１１１１１１１１１１１１１１１",
            "key sk_live_abcdef0123456789",
            "RK_LIVE_x",
            "sk%5Flive%5Fabc",
        ] {
            assert_eq!(withhold_secrets(secret.to_owned()), WITHHELD, "{secret}");
        }
        for plain in [
            "looks wrong",
            "gid://fixture/Checkout/12",
            "a live demo at 12:30 on 2026-12-05",
            "order 1234567890",
        ] {
            assert_eq!(withhold_secrets(plain.to_owned()), plain);
        }
    }

    #[test]
    fn nd_table_entries_are_unicode_digits() {
        for zero in cards::ND_ZEROS {
            for d in 0..10 {
                let c = char::from_u32(zero + d).unwrap();
                assert!(c.is_numeric(), "U+{:04X} is not numeric", zero + d);
                assert_eq!(unicode_digit(c), Some(d as u8));
            }
        }
        assert!(
            cards::ND_ZEROS.windows(2).all(|w| w[0] + 10 <= w[1]),
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
            "4111  1111\t1111 \u{00A0} 1111",
            "4111\u{200B}1111\u{200D}1111\u{00AD}1111",
            "4\u{0301}111111111111111",
            "4111%201111%201111%201111",
            "4111%25201111%25201111%25201111",
            "378282246310005",
        ] {
            assert!(contains_card_number(yes), "{yes}");
        }
        for no in [
            "4111111111111112",
            "41111111111111110000",
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

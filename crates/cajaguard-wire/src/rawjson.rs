//! JSON handled without re-encoding: an object as an ordered list of raw members, so that the proxy
//! can add one member (`_meta.cajaguard`, `resultType`) and leave every other byte as the shop or
//! the agent wrote it; and a check for duplicate keys, which a gated call must not hold (the shop's
//! parser might keep the copy the gate did not read).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// A JSON object whose members are kept raw and in order.
#[derive(Default)]
pub struct RawObject {
    members: Vec<(String, Box<RawValue>)>,
}

impl RawObject {
    /// `None` when `json` is not an object.
    pub fn parse(json: &str) -> Option<RawObject> {
        let members: OrderedMembers = serde_json::from_str(json).ok()?;
        Some(RawObject { members: members.0 })
    }

    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.members
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| &**v)
    }

    /// Replaces the member `key` (keeping its place) or appends it.
    pub fn set(&mut self, key: &str, value: Box<RawValue>) {
        match self.members.iter_mut().find(|(k, _)| k == key) {
            Some(member) => member.1 = value,
            None => self.members.push((key.to_owned(), value)),
        }
    }

    /// Keeps only the members whose key passes `keep`.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.members.retain(|(key, _)| keep(key));
    }

    pub fn remove(&mut self, key: &str) -> Option<Box<RawValue>> {
        let at = self.members.iter().position(|(k, _)| k == key)?;
        Some(self.members.remove(at).1)
    }

    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(
            2 + self
                .members
                .iter()
                .map(|(k, v)| k.len() + v.get().len() + 4)
                .sum::<usize>(),
        );
        out.push('{');
        for (i, (key, value)) in self.members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            // A key re-encoded by serde_json is the same string; only its escapes may differ.
            out.push_str(&serde_json::to_string(key).unwrap_or_else(|_| "\"\"".to_owned()));
            out.push(':');
            out.push_str(value.get());
        }
        out.push('}');
        out
    }
}

struct OrderedMembers(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for OrderedMembers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = OrderedMembers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value: Box<RawValue> = map.next_value()?;
                    members.push((key, value));
                }
                Ok(OrderedMembers(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// The arms of a visitor that reads any JSON value and keeps none of its scalars.
macro_rules! accept_scalars {
    () => {
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }
    };
}

/// Whether `json` is one JSON value as `serde_json::Value` reads it, keeping nothing. Unlike
/// `serde::de::IgnoredAny`, which skips numbers and escapes unread, every value is read, so a
/// number past a double's range (`1e400`) or an unpaired surrogate escape (`"\ud83d"`) is
/// refused here as wherever the value is read later. Past serde_json's limit of 128 levels of
/// nesting, the skip (which needs no limit) decides: the part of such a message that is read
/// later (`params`) is refused then, with an error that says it is too deep.
pub fn is_json(json: &str) -> bool {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let read = <ReadAll as serde::Deserialize>::deserialize(&mut deserializer)
        .and_then(|ReadAll| deserializer.end());
    match read {
        Ok(()) => true,
        Err(e) if is_too_deep(&e) => serde_json::from_str::<IgnoredAny>(json).is_ok(),
        Err(_) => false,
    }
}

/// serde_json stopped at its nesting limit (it says so only in the message).
pub fn is_too_deep(e: &serde_json::Error) -> bool {
    e.to_string().contains("recursion limit")
}

/// Any JSON value, read through and dropped.
struct ReadAll;

impl<'de> serde::Deserialize<'de> for ReadAll {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(ReadAllVisitor)
            .map(|()| ReadAll)
    }
}

struct ReadAllVisitor;

impl<'de> Visitor<'de> for ReadAllVisitor {
    type Value = ();
    accept_scalars!();
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<ReadAll>()?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<ReadAll, ReadAll>()?.is_some() {}
        Ok(())
    }
}

/// The first duplicated key anywhere in `json` (at any depth), or `None`. Invalid JSON is reported
/// as `Err`. Keys are compared after unescaping, as a parser would, and with case folded, as a
/// case-insensitive parser would: Go's `encoding/json` matches `"NAME"`, `"Name"` and even
/// `"nAme"` to a field `name` (and folds `ſ` to `s`, `K` to `k`), the last copy winning, so
/// `{"name":"search_catalog","NAME":"complete_checkout"}` would be a payment to such a shop.
pub fn find_duplicate_key(json: &str) -> Result<Option<String>, serde_json::Error> {
    let mut found = None;
    let mut deserializer = serde_json::Deserializer::from_str(json);
    DupSeed { found: &mut found }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(found)
}

struct DupSeed<'f> {
    found: &'f mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for DupSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DupSeed<'_> {
    type Value = ();
    accept_scalars!();
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(DupSeed {
                found: &mut *self.found,
            })?
            .is_some()
        {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if self.found.is_none() && !seen.insert(folded(&key)) {
                *self.found = Some(key);
            }
            if self.found.is_some() {
                map.next_value::<IgnoredAny>()?;
            } else {
                map.next_value_seed(DupSeed {
                    found: &mut *self.found,
                })?;
            }
        }
        Ok(())
    }
}

/// `key` with case folded, so that keys a case-insensitive parser takes for one compare equal:
/// each character upper-cased, then lower-cased (`ſ` → `S` → `s`, `K` → `k`). It folds more
/// than Go's simple folding does (`ß` and `ss` meet), which only refuses more.
pub fn folded(key: &str) -> String {
    if key.is_ascii() {
        return key.to_ascii_lowercase();
    }
    key.chars()
        .flat_map(char::to_uppercase)
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_object_keeps_every_other_byte() {
        let json = r#"{"b": 1.50, "a":{"x" : [1,2]},"c":"\u00e9"}"#;
        let mut object = RawObject::parse(json).unwrap();
        object.set("d", RawValue::from_string("true".into()).unwrap());
        assert_eq!(
            object.to_json(),
            r#"{"b":1.50,"a":{"x" : [1,2]},"c":"\u00e9","d":true}"#
        );
    }

    #[test]
    fn is_json_reads_every_number_as_a_value_would() {
        // Found by the fuzzer (jsonrpc target): an agent's line with a member `1444444E444...3`
        // passed the envelope's check, which skipped numbers unread, though no later reader of
        // the line could parse it.
        for text in [
            r#"{"a":1e400}"#,
            r#"[1, -1.5e999]"#,
            r#"{"a":[{"b":2E+400}]}"#,
            r#"{"a":"\ud83d"}"#,
        ] {
            assert!(!is_json(text), "{text}");
            assert!(serde_json::from_str::<serde_json::Value>(text).is_err());
        }
        for text in [
            r#"{"a":1e300,"a":0e99999}"#,
            "[18446744073709551616, -0.0, null]",
            "\"x\"",
        ] {
            assert!(is_json(text), "{text}");
            assert!(serde_json::from_str::<serde_json::Value>(text).is_ok());
        }
        assert!(!is_json(r#"{"a":1} {"#));
        assert!(!is_json(r#"{"a":}"#));
        // Past the nesting limit no reader gets as far as the numbers: the line is JSON if the
        // skip says so, and its params are refused later for their depth.
        let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
        assert!(is_json(&deep));
        assert!(!is_json(&format!("{}{}", "[".repeat(300), "]".repeat(299))));
    }

    #[test]
    fn duplicate_keys_are_found_at_any_depth() {
        assert_eq!(
            find_duplicate_key(r#"{"a":1,"b":{"c":[{"d":1,"d":2}]}}"#).unwrap(),
            Some("d".into())
        );
        assert_eq!(
            find_duplicate_key(r#"{"a":1,"\u0061":2}"#).unwrap(),
            Some("a".into())
        );
        assert_eq!(
            find_duplicate_key(r#"{"a":{"a":1},"b":[{"a":2}]}"#).unwrap(),
            None
        );
        assert!(find_duplicate_key(r#"{"a":1"#).is_err());
        // Keys a case-insensitive parser (Go's encoding/json) takes for one.
        for json in [
            r#"{"name":"search_catalog","NAME":"complete_checkout"}"#,
            r#"{"arguments":{},"Arguments":{"id":"x"}}"#,
            r#"{"a":{"id":"mine","iD":"theirs"}}"#,
            r#"{"argumentſ":1,"arguments":2}"#,
            r#"{"\u212a":1,"k":2}"#,
        ] {
            assert!(find_duplicate_key(json).unwrap().is_some(), "{json}");
        }
        assert_eq!(
            find_duplicate_key(r#"{"id":1,"ids":2,"i_d":3}"#).unwrap(),
            None
        );
    }
}

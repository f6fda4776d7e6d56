//! The agent's side of the relay on arbitrary bytes: line framing (bounded), the JSON-RPC envelope,
//! the duplicate-key check the gated call relies on, and the raw object edit that adds
//! `_meta.cajaguard`. No panic; an edited object stays valid JSON with every other member intact;
//! the duplicate-key check agrees with serde_json about what is JSON; and the same bytes as an
//! event stream from an HTTP shop, whose events never exceed their bound.
#![no_main]

use cajaguard_wire::sse::{Event, SseReader};
use cajaguard_wire::{jsonrpc, rawjson};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use serde_json::value::RawValue;

fuzz_target!(|data: &[u8]| {
    let mut reader = std::io::BufReader::with_capacity(7, data);
    loop {
        match jsonrpc::read_line(&mut reader, 4096) {
            Ok(jsonrpc::Line::Message(line)) => {
                assert!(line.len() <= 4096, "a line over the limit got through");
                check(&line);
            }
            Ok(jsonrpc::Line::TooLong { id }) => {
                // An id read from an oversized line is a valid id, never a fragment.
                if let Some(id) = id {
                    let raw: Box<RawValue> = serde_json::from_str(&id).expect("the id is JSON");
                    assert!(
                        raw.get().starts_with('"') || raw.get().parse::<i128>().is_ok(),
                        "{id}"
                    );
                }
            }
            Ok(jsonrpc::Line::Eof) | Err(_) => break,
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        check(text);
    }

    let mut events = SseReader::new(std::io::BufReader::with_capacity(5, data));
    while let Ok(Some(event)) = events.next_event(1024) {
        if let Event::Message(message) = event {
            assert!(message.len() <= 1024, "an event over the limit got through");
        }
    }
});

fn check(text: &str) {
    let parsed = serde_json::from_str::<Value>(text);
    let duplicate = rawjson::find_duplicate_key(text);
    // Both go through serde_json's parser with the same depth limit, so what the gate reads as
    // JSON without duplicates is JSON, and JSON is never an error for the check. (After a duplicate
    // is found the rest is skipped without a depth limit, so that direction alone may differ.)
    assert!(
        !(parsed.is_ok() && duplicate.is_err()),
        "JSON refused by the duplicate check: {text:?}"
    );
    assert!(
        !(matches!(duplicate, Ok(None)) && parsed.is_err()),
        "not JSON, yet passed the duplicate check: {text:?}"
    );

    if let Ok(envelope) = jsonrpc::Envelope::parse(text)
        && let Some(params) = envelope.params
    {
        let _ = rawjson::find_duplicate_key(params.get());
    }

    // The agent's side: a line is a request, a notification, a response, or an error to answer
    // with; what passes is JSON-RPC 2.0, what fails never lends its answer an invalid id.
    match jsonrpc::Envelope::parse_agent(text, &|m| m == "tools/call") {
        Ok(envelope) => {
            assert!(
                envelope.method.is_some() || envelope.result.is_some() || envelope.error.is_some()
            );
            if let Some(params) = &envelope.params {
                assert!(
                    matches!(params.get().as_bytes().first(), Some(b'{' | b'[')),
                    "{text:?}"
                );
            }
            // A valid envelope is JSON every reader can parse, or nested past serde_json's
            // limit, which every reader refuses with an error saying so (then the checks on the
            // parsed value have nothing to look at).
            let value: Value = match serde_json::from_str(text) {
                Ok(value) => value,
                Err(e) if rawjson::is_too_deep(&e) => return,
                Err(e) => panic!("a valid envelope is not JSON ({e}): {text:?}"),
            };
            assert_eq!(value["jsonrpc"], "2.0", "{text:?}");
            if let (Some(_), Some(_)) = (&envelope.method, &envelope.id) {
                assert!(
                    matches!(&value["id"], Value::String(_))
                        || value["id"].is_i64()
                        || value["id"].is_u64(),
                    "{text:?}"
                );
            }
        }
        Err(invalid) => {
            let answer: Value =
                serde_json::from_str(&invalid.line()).expect("an error line is JSON");
            assert!(
                answer["id"].is_null()
                    || answer["id"].is_string()
                    || answer["id"].is_i64()
                    || answer["id"].is_u64()
            );
            // JSON is never a parse error. (The reverse may differ: serde_json's `Value` refuses
            // numbers out of range, such as `1e99999`, that are JSON to the grammar.)
            assert!(
                !(parsed.is_ok() && invalid.code == jsonrpc::PARSE_ERROR),
                "{text:?}"
            );
        }
    }

    if let (Ok(Value::Object(before)), Ok(None)) = (&parsed, &duplicate)
        && let Some(mut object) = rawjson::RawObject::parse(text)
        && let Ok(marker) = RawValue::from_string("{\"verdict\":\"allow\"}".to_owned())
    {
        object.set("_meta_cajaguard_fuzz", marker);
        let edited: Value = serde_json::from_str(&object.to_json()).expect("edited object is JSON");
        let Value::Object(after) = edited else {
            panic!("edited object is not an object")
        };
        for (key, value) in before {
            if key != "_meta_cajaguard_fuzz" {
                assert_eq!(after.get(key), Some(value), "member {key:?} changed");
            }
        }
    }
}

//! The tripwire against its corpus (`tests/corpus/tripwire.jsonl`, written by
//! `scripts/gen-tripwire-corpus.py` from SPEC §5's rules): every must-refuse case is refused with
//! its rule wherever in a call's `params` it is put (arguments, `_meta`, keys, deep in arrays), and
//! no must-pass case is ever refused. Plus the false-positive rate on random UUIDv4 idempotency
//! keys, which must stay 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cajaguard_core::policy::TestModePolicy;
use cajaguard_core::tripwire::{Hit, contains_card_number, scan_params};
use proptest::prelude::*;
use serde_json::{Value, json};

const CORPUS: &str = include_str!("corpus/tripwire.jsonl");

fn corpus() -> Vec<Value> {
    CORPUS
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn cases(expect: &str) -> Vec<Value> {
    corpus()
        .into_iter()
        .filter(|c| c["expect"] == expect)
        .collect()
}

fn scan(params: &Value) -> Option<Hit> {
    // Built once: the token pattern is a regex.
    static POLICY: std::sync::LazyLock<TestModePolicy> =
        std::sync::LazyLock::new(TestModePolicy::spec_default);
    scan_params(&POLICY, params)
}

/// Every place a string can sit in a call's params.
fn text_placements(text: &str) -> Vec<(&'static str, Value)> {
    let mut as_key = serde_json::Map::new();
    as_key.insert(text.to_owned(), json!(1));
    vec![
        (
            "arguments value",
            json!({"name": "search_catalog", "arguments": {"query": text}}),
        ),
        (
            "_meta value",
            json!({"name": "get_product", "arguments": {"id": "p1"}, "_meta": {"note": text}}),
        ),
        (
            "arguments key",
            json!({"name": "create_cart", "arguments": {"attributes": Value::Object(as_key.clone())}}),
        ),
        (
            "_meta key",
            json!({"name": "get_order", "_meta": Value::Object(as_key)}),
        ),
        (
            "deep in arrays",
            json!({"name": "update_checkout", "arguments": {"a": [1, {"b": [[text]]}]}}),
        ),
        ("other member", json!({"name": "get_cart", "extra": text})),
    ]
}

fn json_placements(value: &Value) -> Vec<(&'static str, Value)> {
    vec![
        (
            "in arguments",
            json!({"name": "create_checkout", "arguments": {"context": value}}),
        ),
        (
            "in _meta",
            json!({"name": "search_catalog", "arguments": {}, "_meta": {"ext": value}}),
        ),
        (
            "in an array",
            json!({"name": "lookup_catalog", "arguments": {"ids": [value]}}),
        ),
    ]
}

/// A hit's path names where, never what: no card number and no live key in it.
fn path_is_clean(hit: &Hit) -> bool {
    let lower = hit.path.to_ascii_lowercase();
    !contains_card_number(&hit.path) && !lower.contains("live")
}

#[test]
fn every_must_refuse_case_is_refused_with_its_rule_wherever_it_is() {
    let refuse = cases("refuse");
    assert!(refuse.len() > 100, "the corpus lost its cases");
    for rule in [
        "card_number",
        "live_key_prefix",
        "live_secret",
        "card_credential",
        "handler_not_test",
        "token_not_test",
    ] {
        assert!(
            refuse.iter().any(|c| c["rule"] == rule),
            "no case for {rule}"
        );
    }
    for case in &refuse {
        let rule = case["rule"].as_str().unwrap();
        let form = case["form"].as_str().unwrap();
        let placements = if let Some(text) = case["text"].as_str() {
            text_placements(text)
        } else if let Some(value) = case.get("json") {
            json_placements(value)
        } else {
            vec![(
                "as the arguments",
                json!({"name": "complete_checkout", "arguments": case["arguments"]}),
            )]
        };
        for (place, params) in placements {
            let hit = scan(&params).unwrap_or_else(|| panic!("{form} ({place}) passed: {params}"));
            assert_eq!(hit.rule.as_str(), rule, "{form} ({place}): {}", hit.path);
            assert!(path_is_clean(&hit), "{form} ({place}): {}", hit.path);
        }
    }
}

#[test]
fn no_must_pass_case_is_refused_anywhere() {
    let pass = cases("pass");
    assert!(pass.len() > 100, "the corpus lost its cases");
    for case in &pass {
        let text = case["text"].as_str().unwrap();
        let form = case["form"].as_str().unwrap();
        assert!(!contains_card_number(text), "{form}: {text:?}");
        for (place, params) in text_placements(text) {
            assert_eq!(scan(&params), None, "{form} ({place}): {text:?}");
        }
    }
}

/// splitmix64: a fixed, dependency-free sequence, the same on every run.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uuid_v4(&mut self) -> String {
        let (hi, lo) = (self.next(), self.next());
        let hi = (hi & !0xF000) | 0x4000;
        let lo = (lo & !(0xC << 60)) | (0x8 << 60);
        let h = format!("{hi:016x}{lo:016x}");
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    }
}

#[test]
fn no_false_positive_on_300_000_random_uuid_v4_idempotency_keys() {
    const SEED: u64 = 0x5EED_0013;
    println!("uuid seed: {SEED:#x}");
    let mut rng = SplitMix(SEED);
    let mut params = json!({"name": "complete_checkout", "arguments": {
        "meta": {"idempotency-key": ""}, "id": "gid://fixture/Checkout/1"}});
    for i in 0..300_000 {
        let key = rng.uuid_v4();
        assert!(!contains_card_number(&key), "uuid #{i} {key}");
        params["arguments"]["meta"]["idempotency-key"] = Value::String(key.clone());
        assert_eq!(scan(&params), None, "uuid #{i} {key}");
    }
}

fn refuse_texts() -> Vec<(String, String)> {
    cases("refuse")
        .into_iter()
        .filter_map(|c| {
            Some((
                c["text"].as_str()?.to_owned(),
                c["rule"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

fn pass_texts() -> Vec<String> {
    cases("pass")
        .into_iter()
        .map(|c| c["text"].as_str().unwrap().to_owned())
        .collect()
}

/// Builds params holding `pass` strings, each in its own value, and `hidden` at path `depth` deep
/// under `member` (`arguments` or `_meta`), as a value or a key.
fn build(pass: &[String], hidden: &str, member: &str, depth: usize, as_key: bool) -> Value {
    let mut inner = if as_key {
        let mut m = serde_json::Map::new();
        m.insert(hidden.to_owned(), json!(null));
        Value::Object(m)
    } else {
        json!(hidden)
    };
    for level in 0..depth {
        inner = if level % 2 == 0 {
            json!([pass.first().cloned().unwrap_or_default(), inner])
        } else {
            json!({"note": pass.get(1).cloned().unwrap_or_default(), "next": inner})
        };
    }
    let others: Vec<Value> = pass.iter().map(|p| json!({"text": p})).collect();
    json!({"name": "search_catalog", "arguments": {"filters": others}, member: {"hidden": inner}})
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, rng_seed: proptest::test_runner::RngSeed::Fixed(13), ..ProptestConfig::default() })]

    #[test]
    fn a_refused_string_among_clean_ones_is_found_at_any_depth(
        pick in any::<prop::sample::Index>(),
        clean in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        member in prop::sample::select(vec!["arguments", "_meta", "extra"]),
        depth in 0usize..12,
        as_key in any::<bool>(),
    ) {
        let refuse = refuse_texts();
        let pass = pass_texts();
        let (hidden, rule) = &refuse[pick.index(refuse.len())];
        let clean: Vec<String> = clean.iter().map(|i| pass[i.index(pass.len())].clone()).collect();
        let params = build(&clean, hidden, member, depth, as_key);
        let hit = scan(&params);
        prop_assert!(hit.is_some(), "{params}");
        let hit = hit.unwrap();
        prop_assert_eq!(hit.rule.as_str(), rule.as_str());
        prop_assert!(path_is_clean(&hit), "{}", hit.path);
    }

    #[test]
    fn clean_strings_together_stay_clean(
        clean in prop::collection::vec(any::<prop::sample::Index>(), 1..12),
        depth in 0usize..12,
        as_key in any::<bool>(),
    ) {
        let pass = pass_texts();
        let clean: Vec<String> = clean.iter().map(|i| pass[i.index(pass.len())].clone()).collect();
        let params = build(&clean, &clean[0], "_meta", depth, as_key);
        prop_assert_eq!(scan(&params), None, "{}", params);
    }
}

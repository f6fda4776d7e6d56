//! The demo agent against the fixture shop directly (`--direct-shop`), and the requests it sends
//! checked against the pinned UCP schemas (with their `ucp_request` annotations).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../cajaguard-fixture-shop/tests/support/ucp_schemas.rs"]
mod ucp_schemas;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Once;

use serde_json::Value;

/// The fixture shop binary belongs to another package: build it next to the demo binary, where
/// the demo looks for it.
fn build_fixture() {
    static BUILD: Once = Once::new();
    BUILD.call_once(|| {
        let demo = Path::new(env!("CARGO_BIN_EXE_cajaguard-demo"));
        let shop = demo.with_file_name(format!(
            "cajaguard-fixture-shop{}",
            std::env::consts::EXE_SUFFIX
        ));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "-p",
            "cajaguard-fixture-shop",
            "--bin",
            "cajaguard-fixture-shop",
        ]);
        if demo
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == "release")
        {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build for the fixture shop");
        assert!(status.success(), "building cajaguard-fixture-shop failed");
        assert!(shop.is_file(), "{} was not built", shop.display());
    });
}

fn demo(state: &Path, args: &[&str]) -> Output {
    build_fixture();
    let output = Command::new(env!("CARGO_BIN_EXE_cajaguard-demo"))
        .arg("--direct-shop")
        .arg(state)
        .args(args)
        .output()
        .expect("run cajaguard-demo");
    eprintln!(
        "--- demo {args:?} exited {:?}\n{}{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn field(o: &Output, name: &str) -> String {
    stdout(o)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_owned))
        .unwrap_or_default()
}

fn calls(state: &Path) -> Vec<Value> {
    std::fs::read_to_string(state.join("calls.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn buy_trail_socks_completes() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo(dir.path(), &["buy", "Trail socks", "2"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains(
            "create_checkout: gid://fixture/Checkout/1 status ready_for_complete total USD 24.00"
        ),
        "{text}"
    );
    assert!(
        text.contains("complete_checkout: status completed"),
        "{text}"
    );
    assert_eq!(field(&out, "verdict"), "-");
    assert_eq!(field(&out, "checkout id"), "gid://fixture/Checkout/1");
    assert_eq!(field(&out, "request id"), "-");
    assert!(!field(&out, "next").is_empty());
    let tools: Vec<String> = calls(dir.path())
        .iter()
        .map(|c| c["tool"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        tools,
        [
            "search_catalog",
            "create_checkout",
            "update_checkout",
            "complete_checkout"
        ]
    );
}

#[test]
fn decline_token_exits_4_and_pay_retries() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo(
        dir.path(),
        &["buy", "Day pack", "--token", "cg_test_decline_0001"],
    );
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(field(&out, "reason"), "payment_declined");
    let id = field(&out, "checkout id");
    assert_eq!(id, "gid://fixture/Checkout/1");
    assert!(
        !stdout(&out).contains("cg_test_decline_0001"),
        "tokens are never printed"
    );
    // A second process pays the same checkout: state is shared.
    let key = "5f0c7f2e-8a4b-4c1d-9e2f-3a4b5c6d7e8f";
    let out = demo(dir.path(), &["pay", &id, "--idempotency-key", key]);
    assert_eq!(out.status.code(), Some(0));
    // The same key and body again: the shop replays the completed answer.
    let out = demo(dir.path(), &["pay", &id, "--idempotency-key", key]);
    assert_eq!(out.status.code(), Some(0));
    // A new key: the shop refuses to complete twice.
    let out = demo(dir.path(), &["pay", &id]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(field(&out, "reason"), "checkout_completed");
}

#[test]
fn usage_errors_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_cajaguard-demo"))
        .args(["buy", "Trail socks"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "no --config and no --direct-shop"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_cajaguard-demo"))
        .args(["--config", "x.json", "buy", "Trail socks", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "quantity 0");
}

#[test]
fn a_missing_proxy_is_unexpected_not_a_verdict() {
    let out = Command::new(env!("CARGO_BIN_EXE_cajaguard-demo"))
        .args([
            "--config",
            "x.json",
            "--proxy-command",
            "/nonexistent/cajaguard",
            "buy",
            "Trail socks",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).is_empty());
}

#[test]
fn the_demo_sends_conforming_requests() {
    let schemas = ucp_schemas::UcpSchemas::load();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(demo(dir.path(), &["buy", "Tea set"]).status.code(), Some(0));
    assert_eq!(
        demo(
            dir.path(),
            &[
                "buy",
                "sencha tin",
                "3",
                "--handler",
                "com.shopify.shop_pay"
            ]
        )
        .status
        .code(),
        Some(0)
    );
    let out = demo(
        dir.path(),
        &["buy", "rain shell", "--token", "cg_test_decline_0001"],
    );
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(
        demo(dir.path(), &["pay", &field(&out, "checkout id")])
            .status
            .code(),
        Some(0)
    );
    let calls = calls(dir.path());
    assert!(calls.len() >= 13);
    for call in &calls {
        let tool = call["tool"].as_str().unwrap();
        if let Err(errors) = schemas.check_request(tool, &call["arguments"]) {
            panic!(
                "the demo's {tool} request {} does not conform: {errors:#?}",
                call["arguments"]
            );
        }
        if tool == "complete_checkout" {
            let args = &call["arguments"];
            let keys: Vec<&String> = args["checkout"].as_object().unwrap().keys().collect();
            assert_eq!(keys, ["payment"], "complete sends the payment only");
            let key = args["meta"]["idempotency-key"].as_str().unwrap();
            assert_eq!(key.len(), 36);
            assert_eq!(&key[14..15], "4", "a UUID v4: {key}");
        }
    }
}

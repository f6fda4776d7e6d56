//! Bad input from people and programs: each gives a short error that says what to do, with the exit
//! code SPEC §7 gives, and nothing is forwarded unchecked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use support::*;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn edit_config(world: &World, edit: impl FnOnce(&mut Value)) {
    let mut config = read_json(&world.config);
    edit(&mut config);
    std::fs::write(
        &world.config,
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();
}

/// `cajaguard mcp` with nothing on stdin: it must fail before serving, or serve and end.
fn mcp(world: &World) -> std::process::Output {
    Command::new(cajaguard_bin())
        .args(["mcp", "--config"])
        .arg(&world.config)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_config_typo_is_named_with_its_json_path() {
    let world = World::new();
    edit_config(&world, |c| {
        let merchants = c.as_object_mut().unwrap().remove("merchants").unwrap();
        c["merchnts"] = merchants;
    });
    let out = world.cli(&["status"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("$.merchnts") && err.contains(world.config.to_str().unwrap()),
        "{err}"
    );
    assert!(err.lines().count() <= 2, "short: {err}");
}

#[test]
fn a_missing_or_world_readable_private_key_is_refused() {
    let world = World::new();
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("day-pack", 1);
    let request_id = verdict(&mcp.pay(&checkout)).2.unwrap();

    let key = world.key_dir.join("approver.key.pem");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = world.cli(&["approve", &request_id, "--yes"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("chmod 600"), "{}", stderr(&out));

    std::fs::remove_file(&key).unwrap();
    let out = world.cli(&["approve", &request_id, "--yes"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cajaguard keygen"),
        "{}",
        stderr(&out)
    );
    assert!(world.no_approval_files());
}

#[test]
fn a_downstream_that_does_not_exist_exits_at_once_or_hangs_is_a_clear_error() {
    let world = World::new();
    edit_config(&world, |c| {
        c["downstream"] = json!({"command": "./no-such-shop"})
    });
    let out = mcp(&world);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("downstream.command"),
        "{}",
        stderr(&out)
    );

    edit_config(&world, |c| {
        c["downstream"] = json!({"command": "no-such-shop-on-path"})
    });
    let out = mcp(&world);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));

    edit_config(&world, |c| {
        c["downstream"] = json!({"command": "/bin/false"})
    });
    let out = mcp(&world);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("shop"), "{}", stderr(&out));

    edit_config(
        &world,
        |c| {
            c["downstream"] = json!({"command": "/bin/sleep", "args": ["30"], "timeout_seconds": 1})
        },
    );
    let started = std::time::Instant::now();
    let out = mcp(&world);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("did not answer"), "{}", stderr(&out));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "bounded by the timeout"
    );
}

#[test]
fn a_shop_that_dies_mid_call_is_a_tool_error_and_is_restarted() {
    let world = World::with_test_shop(
        json!({ "on": { "search_catalog": [ {"exit": 3}, {"result": {"content": []}} ] } }),
    );
    let mut mcp = world.proxy();
    let args = json!({"meta": {"ucp-agent": {"profile": AGENT}}, "catalog": {"query": "x"}});
    let died = mcp.call("search_catalog", args.clone());
    assert_eq!(died["isError"], true, "{died}");
    assert!(died.to_string().contains("shop"), "{died}");
    // The next call starts a new shop; the script counter starts again in the new process, so the
    // same action repeats: what matters is that the proxy answers and stays up.
    let again = mcp.call("search_catalog", args);
    assert_eq!(again["isError"], true, "{again}");
    assert!(mcp.request("tools/list", json!({}))["result"]["tools"].is_array());
}

#[test]
fn a_shop_that_hangs_on_complete_keeps_the_spend_reserved() {
    let checkout = "gid://test/Checkout/1";
    let world = World::with_test_shop(json!({ "on": {
        "get_checkout": [ {"checkout": ready_checkout(checkout)} ],
        "complete_checkout": [ {"hang": true} ],
    }}));
    edit_config(&world, |c| c["downstream"]["timeout_seconds"] = json!(1));
    let mut mcp = world.proxy();
    let key = uuid();
    let first = mcp.complete(
        checkout,
        instrument(TEST_HANDLER, TEST_TOKEN),
        &key,
        json!({}),
    );
    assert_eq!(first["isError"], true, "{first}");
    assert!(first.to_string().contains("outcome is unknown"), "{first}");
    let store = cajaguard::store::Store::open(&world.home).unwrap();
    let spend = store
        .window_spend(
            std::time::Duration::from_secs(86400),
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
    assert_eq!(
        spend["USD"].in_flight, 2400,
        "the reservation stays while the outcome is unknown"
    );

    // The same key again is a retry: forwarded, without counting the spend twice.
    let retry = mcp.complete(
        checkout,
        instrument(TEST_HANDLER, TEST_TOKEN),
        &key,
        json!({}),
    );
    assert_eq!(verdict(&retry).1, "idempotent_retry", "{retry}");
    // Another key for the same checkout must wait for the first outcome.
    let other = mcp.complete(
        checkout,
        instrument(TEST_HANDLER, TEST_TOKEN),
        &uuid(),
        json!({}),
    );
    assert_eq!(verdict(&other).1, "payment_in_flight", "{other}");
    let spend = store
        .window_spend(
            std::time::Duration::from_secs(86400),
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
    assert_eq!(spend["USD"].in_flight, 2400);
}

#[test]
fn a_forwarded_call_to_a_hanging_shop_times_out_and_the_proxy_goes_on() {
    let world = World::with_test_shop(json!({ "on": {
        "search_catalog": [ {"hang": true}, {"result": {"content": [{"type": "text", "text": "second"}]}} ],
    }}));
    edit_config(&world, |c| c["downstream"]["timeout_seconds"] = json!(1));
    let mut mcp = world.proxy();
    let args = json!({"meta": {"ucp-agent": {"profile": AGENT}}, "catalog": {"query": "x"}});
    let started = std::time::Instant::now();
    let hung = mcp.call("search_catalog", args.clone());
    assert_eq!(hung["isError"], true, "{hung}");
    assert!(hung.to_string().contains("did not answer"), "{hung}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "bounded by the 1 s timeout"
    );
    let second = mcp.call("search_catalog", args);
    assert_eq!(second["content"][0]["text"], "second", "{second}");
}

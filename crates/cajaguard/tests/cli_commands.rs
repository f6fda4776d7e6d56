//! The command line as a person or a script meets it (SPEC §7, issue 11): every exit code of
//! `status`, `pending`, `show`, `verify`, `approve`, `deny`, `keygen` and `client-config`, each
//! `--json` document, what `pending` lists once a request is decided, and the small things a
//! newcomer stumbles on (repeated advice, help text, colour in logs, `..` in printed paths).
//! Each test runs the built binaries in a fresh world (temp HOME, key dir and XDG_CONFIG_HOME).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::*;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The one JSON document a `--json` command prints on stdout.
fn document(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {}", stdout(out)))
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

/// A world with one Day pack (USD 89.00, over the approval threshold) blocked for approval.
fn blocked_day_pack() -> (World, String, String) {
    let world = World::new();
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("day-pack", 1);
    let (verdict, reason, request_id) = verdict(&mcp.pay(&checkout));
    assert_eq!(
        (verdict.as_str(), reason.as_str()),
        ("blocked", "pending_approval")
    );
    (world, request_id.unwrap(), checkout)
}

fn pending_ids(world: &World) -> Vec<String> {
    let out = world.cli(&["pending", "--json"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    document(&out)["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["request_id"].as_str().unwrap().to_owned())
        .collect()
}

fn status_pending_count(world: &World) -> usize {
    let out = world.cli(&["status", "--json"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    document(&out)["pending"].as_array().unwrap().len()
}

#[test]
fn an_undecided_request_is_pending_and_show_gives_items_state_and_approve() {
    let (world, id, checkout) = blocked_day_pack();
    let status = world
        .proxy()
        .call("cajaguard_status", serde_json::json!({}));
    assert_eq!(
        status["structuredContent"]["pending"][0]["request_id"],
        id.as_str()
    );

    let out = world.cli(&["pending", "--json"]);
    let listed = &document(&out)["pending"][0];
    assert_eq!(listed["request_id"], id.as_str());
    assert_eq!(listed["total"], "89.00");
    assert_eq!(listed["checkout_id"], checkout.as_str());
    let text = world.cli(&["pending"]);
    assert!(stdout(&text).contains(&id), "{}", stdout(&text));
    assert_eq!(status_pending_count(&world), 1);

    let out = world.cli(&["show", &id]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("state:     pending"), "{text}");
    assert!(text.contains("1 x Day pack at USD 89.00"), "{text}");
    assert!(
        text.contains(&format!("cajaguard approve {id} --config")),
        "{text}"
    );

    let out = world.cli(&["show", &id, "--json"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let doc = document(&out);
    assert_eq!(doc["state"], "pending");
    assert_eq!(doc["request_id"], id.as_str());
    assert_eq!(doc["total_minor"], 8900);
    assert_eq!(doc["checkout"]["status"], "ready_for_complete");
    assert_eq!(doc["checkout"]["matches_request"], true);
    assert_eq!(doc["checkout"]["items"][0]["title"], "Day pack");
    assert_eq!(doc["checkout"]["items"][0]["quantity"], 1);
    assert!(
        doc["next"].as_str().unwrap().contains("cajaguard approve"),
        "{doc}"
    );

    let out = world.cli(&["verify", &id, "--json"]);
    assert_eq!(code(&out), Some(3));
    assert_eq!(document(&out)["status"], "pending");
}

#[test]
fn pending_after_deny_is_empty_and_verify_exits_4() {
    let (world, id, _) = blocked_day_pack();
    let out = world.cli(&["deny", &id, "--yes"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));

    assert_eq!(pending_ids(&world), Vec::<String>::new());
    let text = world.cli(&["pending"]);
    assert_eq!(code(&text), Some(0));
    assert!(!stdout(&text).contains(&id), "{}", stdout(&text));
    assert_eq!(status_pending_count(&world), 0);

    let out = world.cli(&["show", &id]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("state:     denied"),
        "{}",
        stdout(&out)
    );
    assert!(
        !stdout(&out).contains("cajaguard approve"),
        "{}",
        stdout(&out)
    );
    let doc = document(&world.cli(&["show", &id, "--json"]));
    assert_eq!(doc["state"], "denied");
    assert_eq!(doc["next"], Value::Null);

    let out = world.cli(&["verify", &id]);
    assert_eq!(code(&out), Some(4));
    let out = world.cli(&["verify", &id, "--json"]);
    assert_eq!(code(&out), Some(4));
    assert_eq!(document(&out)["status"], "denied");
}

#[test]
fn approved_but_unused_is_not_pending_then_used_exits_3() {
    let (world, id, checkout) = blocked_day_pack();
    let out = world.cli(&["approve", &id, "--yes"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));

    assert_eq!(pending_ids(&world), Vec::<String>::new());
    assert_eq!(status_pending_count(&world), 0);
    let status = world.cli(&["status"]);
    assert!(
        stdout(&status).contains("waiting for a decision: 0"),
        "{}",
        stdout(&status)
    );
    let doc = document(&world.cli(&["show", &id, "--json"]));
    assert_eq!(doc["state"], "approved");
    assert_eq!(doc["next"], Value::Null);
    let out = world.cli(&["verify", &id, "--json"]);
    assert_eq!(code(&out), Some(0));
    assert_eq!(document(&out)["status"], "approved");

    // The agent's cajaguard_status tool reads the same list.
    let mut mcp = world.proxy();
    let status = mcp.call("cajaguard_status", serde_json::json!({}));
    assert_eq!(
        status["structuredContent"]["pending"],
        serde_json::json!([]),
        "{status}"
    );
    assert_eq!(verdict(&mcp.pay(&checkout)).0, "allow_approved");
    let out = world.cli(&["verify", &id, "--json"]);
    assert_eq!(code(&out), Some(3));
    assert_eq!(document(&out)["status"], "used");
    let doc = document(&world.cli(&["show", &id, "--json"]));
    assert_eq!(doc["state"], "used");
    assert_eq!(doc["checkout"]["status"], "completed");
}

#[test]
fn a_malformed_id_is_a_usage_error_and_an_unknown_one_exits_3() {
    let world = World::new();
    for args in [
        &["show", "cg-nothex"][..],
        &["verify", "cg-nothex"],
        &["approve", "cg-nothex", "--yes"],
        &["deny", "cg-nothex", "--yes"],
    ] {
        let out = world.cli(args);
        assert_eq!(code(&out), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("not a CajaGuard request id"),
            "{}",
            stderr(&out)
        );
    }
    let unknown = "cg-0123456789abcdef";
    let out = world.cli(&["show", unknown]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    let out = world.cli(&["verify", unknown]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    let out = world.cli(&["verify", unknown, "--json"]);
    assert_eq!(code(&out), Some(3));
    assert_eq!(document(&out)["status"], "invalid");
    // A failure under --json is still one document on stdout, with the same exit code.
    let out = world.cli(&["show", unknown, "--json"]);
    assert_eq!(code(&out), Some(3));
    assert_eq!(document(&out)["error"]["exit_code"], 3);
    let out = world.cli(&["show", "nope", "--json"]);
    assert_eq!(code(&out), Some(2));
    assert_eq!(document(&out)["error"]["exit_code"], 2);
}

/// `script` (util-linux) gives the command a terminal, as a human's shell would: `approve` reads
/// its answer from /dev/tty, never from stdin, so this is the only way to type into it.
fn approve_answering(world: &World, id: &str, answer: &str) -> Output {
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
    let line = format!(
        "{} approve {id} --config {}",
        quote(&cajaguard_bin()),
        quote(&world.config)
    );
    let mut child = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("CAJAGUARD_KEY_DIR", &world.key_dir)
        .env("HOME", world.dir.path())
        .env("XDG_CONFIG_HOME", world.dir.path().join(".config"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("`script` (util-linux) is needed to give approve a terminal");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{answer}\n").as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn answering_no_to_approve_exits_3_and_signs_nothing() {
    let (world, id, _) = blocked_day_pack();
    let out = approve_answering(&world, &id, "n");
    assert_eq!(code(&out), Some(3), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("not signed"), "{}", stdout(&out));
    assert!(world.no_approval_files());
    assert_eq!(pending_ids(&world), vec![id.clone()]);

    // The same terminal path with a yes signs: the 3 above was the answer, not a missing terminal.
    let out = approve_answering(&world, &id, "y");
    assert_eq!(code(&out), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(code(&world.cli(&["verify", &id])), Some(0));
}

#[test]
fn keygen_refuses_to_overwrite_with_exit_2_and_says_so_once() {
    let world = World::new();
    // The world made its key already.
    let out = Command::new(cajaguard_bin())
        .args(["keygen", "--out"])
        .arg(&world.key_dir)
        .env("HOME", world.dir.path())
        .env("XDG_CONFIG_HOME", world.dir.path().join(".config"))
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(2));
    let err = stderr(&out);
    assert_eq!(err.matches("--force").count(), 1, "{err}");
}

#[test]
fn every_config_flag_has_help_text() {
    for command in [
        "mcp",
        "status",
        "pending",
        "show",
        "verify",
        "approve",
        "deny",
        "client-config",
    ] {
        let out = Command::new(cajaguard_bin())
            .args([command, "--help"])
            .output()
            .unwrap();
        assert_eq!(code(&out), Some(0));
        let help = stdout(&out);
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with("--config"))
            .unwrap_or_else(|| panic!("{command}: no --config in {help}"));
        assert!(
            line.contains("The CajaGuard config file"),
            "{command}: {line}"
        );
    }
}

#[test]
fn client_config_prints_an_entry_with_absolute_paths_for_each_client() {
    let world = World::new();
    let program = std::fs::canonicalize(cajaguard_bin()).unwrap();
    let config = std::fs::canonicalize(&world.config).unwrap();
    for (client, key, typed) in [
        ("claude-desktop", "mcpServers", false),
        ("claude-code", "mcpServers", true),
        ("cursor", "mcpServers", false),
        ("vscode", "servers", true),
    ] {
        let out = world.cli(&["client-config", client]);
        assert_eq!(code(&out), Some(0), "{client}: {}", stderr(&out));
        let doc = document(&out);
        let server = &doc[key]["shop-via-cajaguard"];
        assert_eq!(
            server["command"],
            program.to_str().unwrap(),
            "{client}: {doc}"
        );
        assert_eq!(server["args"][0], "mcp");
        assert_eq!(server["args"][1], "--config");
        assert_eq!(
            server["args"][2],
            config.to_str().unwrap(),
            "{client}: {doc}"
        );
        assert_eq!(server["type"] == "stdio", typed, "{client}: {doc}");
    }
    let out = world.cli(&["client-config", "emacs"]);
    assert_eq!(code(&out), Some(2));
    let out = Command::new(cajaguard_bin())
        .args(["client-config", "cursor", "--config"])
        .arg(world.dir.path().join("missing.json"))
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
}

#[test]
fn logs_carry_no_colour_when_stderr_is_not_a_terminal() {
    let world = World::new();
    let out = world
        .mcp_command()
        .env("CAJAGUARD_LOG", "cajaguard=info")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(err.contains("serving MCP on stdio"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

#[test]
fn printed_paths_have_no_dot_dot() {
    let world = World::new();
    let mut config = read_json(&world.config);
    config["home"] = "sub/../home".into();
    std::fs::write(&world.config, config.to_string()).unwrap();
    let out = world.cli(&["show", "cg-0123456789abcdef"]);
    assert_eq!(code(&out), Some(3));
    let err = stderr(&out);
    let home = std::fs::canonicalize(&world.home).unwrap();
    assert!(err.contains(home.to_str().unwrap()), "{err}");
    assert!(!err.contains("/../"), "{err}");
}

#[test]
fn the_demo_after_a_completed_checkout_suggests_a_new_one() {
    let world = World::new();
    let demo = |args: &[&str]| {
        Command::new(demo_bin())
            .arg("--config")
            .arg(&world.config)
            .arg("--proxy-command")
            .arg(cajaguard_bin())
            .args(args)
            .env("HOME", world.dir.path())
            .output()
            .unwrap()
    };
    let out = demo(&["buy", "Trail socks"]);
    assert_eq!(code(&out), Some(0), "{}{}", stdout(&out), stderr(&out));
    let checkout = stdout(&out)
        .lines()
        .find_map(|l| l.strip_prefix("checkout id: "))
        .unwrap()
        .to_owned();
    let out = demo(&["pay", &checkout]);
    assert_eq!(code(&out), Some(3), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("reason: checkout_not_ready"), "{text}");
    let next = text.lines().find(|l| l.starts_with("next: ")).unwrap();
    assert!(!next.contains("change the basket or the policy"), "{next}");
    assert!(next.contains(" buy "), "{next}");
}

#[test]
fn demo_buy_help_lists_the_products_and_states_the_default_once() {
    let out = Command::new(demo_bin())
        .args(["buy", "--help"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(0));
    let help = stdout(&out);
    assert!(!help.contains("(default 1)"), "{help}");
    assert_eq!(help.matches("default: 1").count(), 1, "{help}");
    for product in [
        "Trail socks",
        "Day pack",
        "Down parka",
        "Sencha tin",
        "Camp stove",
    ] {
        assert!(help.contains(product), "{product}: {help}");
    }
}

/// On a terminal (given by `script`), logs are coloured unless `NO_COLOR` is set.
#[test]
fn no_color_turns_colour_off_on_a_terminal() {
    let world = World::new();
    let run = |no_color: Option<&str>| {
        let line = format!(
            "'{}' mcp --config '{}' </dev/null",
            cajaguard_bin().display(),
            world.config.display()
        );
        let mut command = Command::new("script");
        command
            .args(["-qec", &line, "/dev/null"])
            .env("CAJAGUARD_LOG", "cajaguard=info")
            .env("HOME", world.dir.path())
            .env(TOKEN_VAR, SHOP_TOKEN)
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        if let Some(value) = no_color {
            command.env("NO_COLOR", value);
        }
        let out = command
            .output()
            .expect("`script` (util-linux) is needed to give cajaguard a terminal");
        stdout(&out)
    };
    let coloured = run(None);
    assert!(coloured.contains("serving MCP on stdio"), "{coloured}");
    assert!(coloured.contains('\u{1b}'), "{coloured:?}");
    let plain = run(Some("1"));
    assert!(plain.contains("serving MCP on stdio"), "{plain}");
    assert!(!plain.contains('\u{1b}'), "{plain:?}");
}

#[test]
fn a_missing_shop_is_exit_2_with_its_advice_once() {
    let world = World::new();
    let mut config = read_json(&world.config);
    config["downstream"] = serde_json::json!({ "command": "no-such-shop-cg" });
    std::fs::write(&world.config, config.to_string()).unwrap();
    let out = world
        .mcp_command()
        .env("PATH", "/nonexistent")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.matches("downstream.command").count(), 1, "{err}");
}

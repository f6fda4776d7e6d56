//! `cajaguard agent add | list | remove` (SPEC §7, §13), as processes: `add` prints the token once
//! (stdout alone, the words on stderr), `list` shows agents without their tokens and where their
//! caps come from, a second `add` is refused, `remove` takes the token away, and a bad name is 2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cajaguard_core::agent::AgentId;

fn config(dir: &Path) -> PathBuf {
    let path = dir.join("config.json");
    let config = serde_json::json!({
        "mode": "test",
        "home": dir.join("home"),
        "downstream": { "command": "cajaguard-fixture-shop" },
        "merchants": ["demo-outfitters.example"],
        "caps": { "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } },
        "agent_caps": { "USD": { "approval_above": "10.00", "per_transaction": "20.00", "window": "30.00" } },
        "serve": {
            "listen": "127.0.0.1:8376",
            "agents": [
                { "name": "ci-bot", "caps": { "USD": { "approval_above": "5.00", "per_transaction": "20.00", "window": "40.00" } } },
                { "name": "not-yet" }
            ]
        }
    });
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

fn cajaguard(args: &[&str], config: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cajaguard"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env("CAJAGUARD_KEY_DIR", config.with_file_name("keys"))
        .env("HOME", config.with_file_name("user-home"))
        .output()
        .unwrap()
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// Every file under `dir`, as bytes.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out
}

#[test]
fn add_prints_the_token_once_and_list_and_remove_answer() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());

    let out = cajaguard(&["agent", "add", "ci-bot"], &config);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let token = stdout.trim_end_matches('\n');
    assert_eq!(
        stdout.lines().count(),
        1,
        "stdout is the token alone: {stdout}"
    );
    let random = token.strip_prefix("cg_agent_").expect(token);
    assert_eq!(random.len(), 43, "32 bytes, base64url without padding");
    assert!(
        random
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{random}"
    );
    let stderr = text(&out.stderr);
    assert!(!stderr.contains(token), "the token goes to stdout only");
    assert!(
        stderr.contains("Authorization: Bearer") && stderr.contains("cannot show it again"),
        "{stderr}"
    );

    // Nothing in the home holds the token's text; the store resolves it by its hash.
    let home = dir.path().join("home");
    for (path, bytes) in files(&home) {
        assert!(
            !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
            "{} holds the token",
            path.display()
        );
    }
    let store = cajaguard::store::Store::open(&home).unwrap();
    assert_eq!(
        store.agent_by_token(token).unwrap(),
        Some(AgentId::parse("ci-bot").unwrap())
    );
    drop(store);

    // A second token for the name is refused, and says how to get one.
    let again = cajaguard(&["agent", "add", "ci-bot"], &config);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again.stderr));
    assert!(text(&again.stdout).is_empty());
    assert!(
        text(&again.stderr).contains("agent remove ci-bot"),
        "{}",
        text(&again.stderr)
    );

    let other = cajaguard(&["agent", "add", "shopper@example.com"], &config);
    assert!(other.status.success(), "{}", text(&other.stderr));
    let other_token = text(&other.stdout).trim().to_owned();
    assert_ne!(other_token, token, "every token is new");

    let list = cajaguard(&["agent", "list"], &config);
    assert!(list.status.success(), "{}", text(&list.stderr));
    let listed = text(&list.stdout);
    assert!(!listed.contains(token) && !listed.contains(&other_token));
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    assert!(
        lines[0].starts_with("ci-bot  ") && lines[0].ends_with("serve.agents[].caps"),
        "{listed}"
    );
    assert!(
        lines[1].starts_with("shopper@example.com  ") && lines[1].ends_with("agent_caps"),
        "{listed}"
    );
    assert!(
        lines[2].starts_with("not-yet  no token yet"),
        "an agent of serve.agents without a token: {listed}"
    );

    let json = cajaguard(&["agent", "list", "--json"], &config);
    assert!(json.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(!doc.to_string().contains(token));
    let agents = doc["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 3);
    assert_eq!(agents[0]["name"], "ci-bot");
    assert_eq!(agents[0]["token"], true);
    assert!(agents[0]["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(agents[2]["name"], "not-yet");
    assert_eq!(agents[2]["token"], false);

    // Remove: the token stops resolving; removing again is an unknown name (3).
    let out = cajaguard(&["agent", "remove", "ci-bot"], &config);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let store = cajaguard::store::Store::open(&home).unwrap();
    assert_eq!(store.agent_by_token(token).unwrap(), None);
    assert_eq!(
        store.agent_by_token(&other_token).unwrap(),
        Some(AgentId::parse("shopper@example.com").unwrap())
    );
    // The log records both additions and the removal, and still verifies.
    let tools: Vec<String> = store
        .log_records(0, 100)
        .unwrap()
        .into_iter()
        .map(|l| l.tool)
        .filter(|t| t.starts_with("agent "))
        .collect();
    assert_eq!(tools, ["agent add", "agent add", "agent remove"]);
    drop(store);
    let out = cajaguard(&["agent", "remove", "ci-bot"], &config);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let list = cajaguard(&["agent", "list"], &config);
    assert!(text(&list.stdout).contains("ci-bot  no token yet"));
    let out = cajaguard(&["audit", "verify"], &config);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn a_bad_name_is_a_usage_error_with_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    for name in ["ci bot", ".x", "a/b", "", "ä"] {
        for command in ["add", "remove"] {
            let out = cajaguard(&["agent", command, name], &config);
            assert_eq!(out.status.code(), Some(2), "{command} {name:?}");
            assert!(text(&out.stdout).is_empty(), "{command} {name:?}");
            let err = text(&out.stderr);
            assert!(
                err.contains("not an agent id") && err.contains("letters, digits"),
                "{err}"
            );
        }
    }
    let list = cajaguard(&["agent", "list"], &config);
    assert!(list.status.success());
    assert!(!text(&list.stdout).contains("ci bot"));
}

#[test]
fn status_shows_each_agents_spend() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let out = cajaguard(&["status"], &config);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let before = text(&out.stdout);
    // serve.agents names ci-bot and not-yet: both have a row, with their own window caps.
    assert!(
        before
            .lines()
            .any(|l| l.starts_with("ci-bot") && l.contains("USD") && l.ends_with("40.00")),
        "{before}"
    );
    assert!(
        before
            .lines()
            .any(|l| l.starts_with("not-yet") && l.ends_with("30.00")),
        "{before}"
    );
    // The JSON document is the stdio tool's, unchanged: no agent in it.
    let out = cajaguard(&["status", "--json"], &config);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc.get("agent").is_none() && doc.get("agents").is_none());
}

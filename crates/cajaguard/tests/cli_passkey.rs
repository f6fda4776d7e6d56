//! `cajaguard passkey add | list | remove` and the terminal under `approvals.require: "passkey"`
//! (SPEC §6, §7), as processes: `add` prints a one-time link to the configured page, `list` shows
//! nothing before a registration, `remove` of an unknown id is 3, and `approve`, `deny` and
//! `unfreeze` exit 2 pointing to the page.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn config(dir: &Path, require: &str) -> PathBuf {
    let path = dir.join(format!("config-{require}.json"));
    let config = serde_json::json!({
        "mode": "test",
        "home": dir.join("home"),
        "downstream": { "command": "cajaguard-fixture-shop" },
        "merchants": ["demo-outfitters.example"],
        "caps": { "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } },
        "approvals": { "web": { "listen": "127.0.0.1:8399" }, "require": require }
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
        .output()
        .unwrap()
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn passkey_add_prints_a_one_time_link_and_list_and_remove_answer() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "passkey");

    let out = cajaguard(&["passkey", "add", "--name", "laptop"], &config);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let link = text(&out.stdout);
    assert!(
        link.starts_with("http://localhost:8399/passkeys/register?token="),
        "{link}"
    );
    assert_eq!(
        link.trim().len(),
        "http://localhost:8399/passkeys/register?token=".len() + 64
    );
    assert!(text(&out.stderr).contains("trusted on first use"));
    let again = cajaguard(&["passkey", "add", "--name", "laptop"], &config);
    assert_ne!(text(&again.stdout), link, "every link is new");

    let list = cajaguard(&["passkey", "list"], &config);
    assert!(list.status.success());
    assert!(text(&list.stdout).is_empty());
    assert!(text(&list.stderr).contains("no passkey is registered"));

    let remove = cajaguard(&["passkey", "remove", "abcdef"], &config);
    assert_eq!(remove.status.code(), Some(3), "{}", text(&remove.stderr));

    let out = cajaguard(&["passkey", "add", "--name", ""], &config);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn passkey_add_needs_the_page_configured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let config = serde_json::json!({
        "mode": "test",
        "home": dir.path().join("home"),
        "downstream": { "command": "cajaguard-fixture-shop" },
        "merchants": ["demo-outfitters.example"],
        "caps": { "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } }
    });
    std::fs::write(&path, config.to_string()).unwrap();
    let out = cajaguard(&["passkey", "add", "--name", "laptop"], &path);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("approvals.web"),
        "{}",
        text(&out.stderr)
    );
    let out = cajaguard(&["web"], &path);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn with_require_passkey_the_terminal_points_to_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "passkey");
    let id = "cg-0123456789abcdef";
    for args in [vec!["approve", id, "--yes"], vec!["deny", id, "--yes"]] {
        let out = cajaguard(&args, &config);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let err = text(&out.stderr);
        assert!(
            err.contains("approvals.require is \"passkey\"")
                && err.contains(&format!("http://localhost:8399/requests/{id}")),
            "{err}"
        );
    }
    // Not frozen: nothing to do (0); frozen: exit 2 and the page's status view.
    let out = cajaguard(&["freeze", "--reason", "test"], &config);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = cajaguard(&["unfreeze", "--yes"], &config);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("/status"));
}

/// The origin is `http://localhost:<port>`, reachable over either loopback: a process holding
/// the other family's port would be the page to the browser and the passkey. `web` refuses to
/// start then (exit 2), naming the address.
#[test]
fn the_page_does_not_start_while_another_process_holds_the_other_loopback() {
    let Ok(squatter) = std::net::TcpListener::bind("[::1]:8398") else {
        println!("SKIPPED: this machine has no IPv6 loopback, so no one can hold [::1]:8398");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(config(dir.path(), "passkey")).unwrap())
            .unwrap();
    config["approvals"]["web"]["listen"] = serde_json::json!("127.0.0.1:8398");
    std::fs::write(&path, config.to_string()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cajaguard"))
        .args(["web", "--config"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the page started although another process held [::1]:8398");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    drop(squatter);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("[::1]:8398"),
        "{}",
        text(&out.stderr)
    );
}

/// Under `require: "passkey"` no key-file approval counts, so `verify`, `pending`, `status` and
/// the status tool, which all read approvals through `counted_trusted_keys`, never call a
/// request approved by a key an agent can read.
#[test]
fn under_require_passkey_no_approver_key_counts() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let keygen = Command::new(env!("CARGO_BIN_EXE_cajaguard"))
        .args(["keygen", "--out"])
        .arg(&keys)
        .output()
        .unwrap();
    assert!(keygen.status.success(), "{}", text(&keygen.stderr));
    let policy_for = |require: &str| {
        let path = config(dir.path(), require);
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        config["approvals"]["trusted_keys"] = serde_json::json!([keys.join("approver.pub.pem")]);
        std::fs::write(&path, config.to_string()).unwrap();
        cajaguard_core::policy::Policy::parse(
            &std::fs::read_to_string(&path).unwrap(),
            &cajaguard_core::policy::ConfigOrigin {
                path: &path,
                user_home: None,
            },
        )
        .unwrap()
    };
    let counted = |require: &str| {
        cajaguard::keys::counted_trusted_keys(&policy_for(require))
            .unwrap()
            .0
            .len()
    };
    assert_eq!(counted("key"), 1);
    assert_eq!(counted("any"), 1);
    assert_eq!(counted("passkey"), 0);
}

//! The service as its own OS user (SPEC §12, §13): run as root (CI runs as root), this starts
//! `cajaguard serve` as one user whose directory is 0700 and plays the agent as another. The
//! agent can use the gate through the service, and can read neither the home, the config nor the key, nor
//! approve its own payment. Not root: skipped, and it says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use cajaguard_harness::service::free_port;
use cajaguard_harness::{cajaguard_bin, fixture_bin};
use serde_json::json;

const GATE_USER: &str = "cajaguard-gate-test";
const AGENT_USER: &str = "cajaguard-agent-test";

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn ensure_user(name: &str) {
    let exists = Command::new("id")
        .arg(name)
        .output()
        .unwrap()
        .status
        .success();
    if !exists {
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ])
            .status()
            .unwrap();
        assert!(made.success(), "useradd {name} failed");
    }
}

/// `env -i` as `user` (its own uid, gid and groups), exec'd in place: signals reach the program.
fn setpriv(user: &str) -> Command {
    let mut command = Command::new("setpriv");
    command.args([
        &format!("--reuid={user}"),
        &format!("--regid={user}"),
        "--init-groups",
        "--",
        "env",
        "-i",
    ]);
    command
}

/// `args` run as `user`, with HOME set to `home` and nothing else of root's environment.
fn as_user(user: &str, home: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = setpriv(user);
    command
        .arg(format!("HOME={}", home.display()))
        .arg("PATH=/usr/bin:/bin")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn chown(path: &Path, user: &str) {
    let status = Command::new("chown")
        .args(["-R", &format!("{user}:"), path.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn copy_bin(from: &Path, dir: &Path) -> PathBuf {
    let to = dir.join(from.file_name().unwrap());
    std::fs::copy(from, &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    to
}

#[test]
fn an_agent_under_another_user_uses_the_gate_but_cannot_reach_its_state() {
    if !is_root() {
        eprintln!(
            "skipped an_agent_under_another_user_...: needs root (CI runs it as root) to make two users"
        );
        return;
    }
    ensure_user(GATE_USER);
    ensure_user(AGENT_USER);
    // Outside the checkout (whose parents may be 0700, like /root), readable by both users.
    let scratch = tempfile::Builder::new()
        .prefix("cg-users-")
        .tempdir_in("/tmp")
        .unwrap();
    let root = scratch.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = root.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let cajaguard = copy_bin(&cajaguard_bin(), &bin);
    let fixture = copy_bin(&fixture_bin(), &bin);
    let cajaguard = cajaguard.to_str().unwrap();

    // The gate's directory: config, home, keys and the shop's state, all its own, 0700.
    let gate = root.join("gate");
    std::fs::create_dir(&gate).unwrap();
    let port = free_port();
    let config = gate.join("cajaguard.json");
    std::fs::write(
        &config,
        serde_json::to_string_pretty(&json!({
            "mode": "test",
            "home": "home",
            "downstream": { "command": fixture, "args": ["--state", gate.join("shop")] },
            "merchants": ["demo-outfitters.example"],
            "caps": { "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } },
            "approvals": { "trusted_keys": ["keys/approver.pub.pem"] },
            "serve": { "listen": format!("127.0.0.1:{port}") }
        }))
        .unwrap(),
    )
    .unwrap();
    chown(&gate, GATE_USER);
    std::fs::set_permissions(&gate, std::fs::Permissions::from_mode(0o700)).unwrap();
    let config_arg = config.to_str().unwrap();
    let keygen = as_user(
        GATE_USER,
        &gate,
        &[
            cajaguard,
            "keygen",
            "--out",
            gate.join("keys").to_str().unwrap(),
        ],
        None,
    );
    assert!(
        keygen.status.success(),
        "{}",
        String::from_utf8_lossy(&keygen.stderr)
    );
    let added = as_user(
        GATE_USER,
        &gate,
        &[cajaguard, "agent", "add", "bot", "--config", config_arg],
        None,
    );
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let token = String::from_utf8(added.stdout).unwrap().trim().to_owned();
    assert!(token.starts_with("cg_agent_"), "{token}");

    let mut serve = setpriv(GATE_USER)
        .arg(format!("HOME={}", gate.display()))
        .args([cajaguard, "serve", "--config", config_arg])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "serve did not listen");
        assert!(serve.try_wait().unwrap().is_none(), "serve exited");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    let agent_home = root.join("agent");
    std::fs::create_dir(&agent_home).unwrap();
    chown(&agent_home, AGENT_USER);
    // The agent reaches the gate through the service over the bridge (its status, here).
    let url = format!("http://127.0.0.1:{port}/mcp");
    let lines = [
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"cajaguard_status","arguments":{}}}),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let mut bridge = setpriv(AGENT_USER);
    bridge
        .arg(format!("HOME={}", agent_home.display()))
        .arg(format!("CG_TOKEN={token}"))
        .args([
            cajaguard,
            "mcp",
            "--connect",
            &url,
            "--token-env",
            "CG_TOKEN",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = bridge.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bridge: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains(r#""id":1"#) && l.contains("result")),
        "the agent could not use the gate: {stdout}"
    );

    // What the agent cannot do: read the gate's state, or approve.
    for path in [
        gate.join("cajaguard.json"),
        gate.join("home").join("cajaguard.db"),
        gate.join("keys").join("approver.key.pem"),
    ] {
        let read = as_user(
            AGENT_USER,
            &agent_home,
            &["cat", path.to_str().unwrap()],
            None,
        );
        assert!(!read.status.success(), "the agent read {}", path.display());
    }
    let approve = as_user(
        AGENT_USER,
        &agent_home,
        &[
            cajaguard,
            "approve",
            "cg-0123456789abcdef",
            "--config",
            config_arg,
            "--yes",
        ],
        None,
    );
    assert!(
        !approve.status.success(),
        "approve under the agent's user succeeded"
    );
    assert!(
        !String::from_utf8_lossy(&approve.stdout).contains("approved"),
        "{}",
        String::from_utf8_lossy(&approve.stdout)
    );

    let _ = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status();
    let stopped = serve.wait().unwrap();
    assert!(stopped.success(), "serve did not stop cleanly: {stopped}");
}

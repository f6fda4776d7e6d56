//! The approval page's connections, through its real server (`web::serve_with`) on a socket: any
//! local process can connect to it, and the service serves it beside `/mcp`, so idle connections
//! must be closed and capped, and a body must arrive in time, or such a process takes the
//! process's descriptors and `/mcp` with them. The limits are set short here; the page's own are
//! `web::Limits::PAGE`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cajaguard::store::Store;
use cajaguard::web::{self, Limits, WebApp};
use cajaguard_core::policy::{ConfigOrigin, Policy};
use serde_json::json;
use time::OffsetDateTime;

const HOST: &str = "localhost:8377";
const ORIGIN: &str = "http://localhost:8377";

/// The page over an empty home, served within `limits` on a port of its own.
fn served(limits: Limits) -> (SocketAddr, tempfile::TempDir) {
    let home = tempfile::tempdir().unwrap();
    let config = json!({
        "mode": "test",
        "home": home.path(),
        "downstream": { "command": "cajaguard-fixture-shop" },
        "merchants": ["demo-outfitters.example"],
        "caps": { "USD": { "approval_above": "50.00", "per_transaction": "100.00", "window": "150.00" } },
        "approvals": { "web": { "listen": "127.0.0.1:8377" }, "require": "passkey" }
    });
    let policy = Policy::parse(
        &config.to_string(),
        &ConfigOrigin {
            path: &home.path().join("config.json"),
            user_home: None,
        },
    )
    .unwrap();
    let store = Arc::new(Store::open(home.path()).unwrap());
    let app = WebApp::new(
        policy,
        store,
        Box::new(|_, _| Err("no shop here".to_owned())),
        Box::new(OffsetDateTime::now_utc),
    )
    .unwrap();
    // The page checks Host against its configured origin, not the port it is reached on.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || web::serve_with(Arc::new(app), vec![listener], limits));
    (addr, home)
}

/// Sends `request` on `stream` and reads until the server closes it (or `within` passes, which
/// fails the test): what came back, empty if it was closed unanswered.
fn exchange(mut stream: TcpStream, request: &str, within: Duration) -> String {
    stream.set_read_timeout(Some(within)).unwrap();
    // Closed at once, the write may fail: the read says what happened.
    let _ = stream.write_all(request.as_bytes());
    let mut answer = Vec::new();
    match stream.read_to_end(&mut answer) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!(
            "neither answered nor closed within {within:?}: {e} (got {:?})",
            String::from_utf8_lossy(&answer)
        ),
    }
    String::from_utf8_lossy(&answer).into_owned()
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n")
}

#[test]
fn idle_connections_are_capped_and_closed_after_the_header_timeout() {
    let header_read_timeout = Duration::from_secs(2);
    let (addr, _home) = served(Limits {
        connections: 4,
        header_read_timeout,
        body_read_timeout: Duration::from_secs(2),
    });
    // The cap's worth of connections that send nothing. The server accepts in order, so these
    // four hold every place before the fifth is accepted.
    let held: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let started = Instant::now();
    let past_the_cap = exchange(
        TcpStream::connect(addr).unwrap(),
        &get("/status"),
        Duration::from_secs(10),
    );
    assert!(
        past_the_cap.is_empty(),
        "a connection past the cap was served: {past_the_cap}"
    );
    assert!(
        started.elapsed() < header_read_timeout,
        "the check ran too late to tell the cap from the timeout"
    );
    // Each idle one is closed once its headers are overdue, which frees its place.
    for idle in held {
        let started = Instant::now();
        exchange(idle, "", Duration::from_secs(10));
        assert!(started.elapsed() < Duration::from_secs(9));
    }
    let answer = exchange(
        TcpStream::connect(addr).unwrap(),
        &get("/status"),
        Duration::from_secs(10),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn a_body_is_read_only_after_the_headers_passed_and_only_for_so_long() {
    let (addr, _home) = served(Limits {
        connections: 4,
        header_read_timeout: Duration::from_secs(10),
        body_read_timeout: Duration::from_secs(1),
    });
    let promised = |host: &str| {
        format!(
            "POST /unfreeze HTTP/1.1\r\nHost: {host}\r\nOrigin: {ORIGIN}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n{{"
        )
    };
    // A foreign Host is refused on its headers, with the body never coming.
    let started = Instant::now();
    let foreign = exchange(
        TcpStream::connect(addr).unwrap(),
        &promised("evil.example:8377"),
        Duration::from_secs(10),
    );
    assert!(foreign.starts_with("HTTP/1.1 421"), "{foreign}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the body was awaited"
    );
    // The page's own Host: the body is awaited, for the body timeout and no longer.
    let started = Instant::now();
    let slow = exchange(
        TcpStream::connect(addr).unwrap(),
        &promised(HOST),
        Duration::from_secs(10),
    );
    assert!(slow.starts_with("HTTP/1.1 408"), "{slow}");
    assert!(started.elapsed() >= Duration::from_secs(1));
}

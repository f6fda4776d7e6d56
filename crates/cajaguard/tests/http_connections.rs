//! The relay's connections to a shop that answers with event streams: it passes each answer on
//! at once, reads the rest of the stream on a thread of its own, and so keeps the connection for
//! the next call, unless the shop holds the stream open, which then delays nothing.
//!
//! The shop here keeps connections alive (HTTP/1.1, chunked event streams), counts the
//! connections it accepted, and holds each stream open after its answer until the test releases
//! it when asked to.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use serde_json::{Value, json};
use support::*;

#[derive(Clone, Copy, PartialEq, Eq)]
enum StreamEnd {
    /// The stream ends right after the answer's event.
    AtOnce,
    /// The stream stays open after the answer's event until [`KeepAliveShop::release`].
    Held,
}

#[derive(Clone)]
struct KeepAliveShop {
    addr: String,
    accepted: Arc<AtomicUsize>,
    /// The largest request body received.
    largest_body: Arc<AtomicUsize>,
    stream_end: StreamEnd,
    /// Calls answered so far, and whether held streams may end.
    state: Arc<(Mutex<(usize, bool)>, Condvar)>,
}

impl KeepAliveShop {
    fn start(stream_end: StreamEnd) -> KeepAliveShop {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let shop = KeepAliveShop {
            addr: listener.local_addr().unwrap().to_string(),
            accepted: Arc::default(),
            largest_body: Arc::default(),
            stream_end,
            state: Arc::default(),
        };
        let server = shop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                server.accepted.fetch_add(1, Ordering::SeqCst);
                // Each write goes out at once, as a server's should: with Nagle's algorithm the
                // stream's end, a small write after the answer's, waits for the relay's delayed
                // acknowledgement (40 ms).
                stream.set_nodelay(true).unwrap();
                let server = server.clone();
                std::thread::spawn(move || server.serve(stream));
            }
        });
        shop
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn answered(&self) -> usize {
        self.state.0.lock().unwrap().0
    }

    /// Lets every held stream (and every later one) end.
    fn release(&self) {
        let (lock, released) = &*self.state;
        lock.lock().unwrap().1 = true;
        released.notify_all();
    }

    /// Requests one after another on one connection, until the client closes it.
    fn serve(&self, stream: TcpStream) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut out = stream;
        while let Some(request) = http_request::read_request(&mut reader) {
            if request.method() == "DELETE" {
                respond(&mut out, 200, "application/json", "");
                continue;
            }
            self.largest_body
                .fetch_max(request.body.len(), Ordering::SeqCst);
            let message: Value = serde_json::from_slice(&request.body).unwrap();
            let id = message["id"].clone();
            match message["method"].as_str().unwrap_or("") {
                "initialize" => {
                    let result = json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                        "serverInfo": {"name": "keep-alive", "version": "0"}});
                    respond(
                        &mut out,
                        200,
                        "application/json",
                        &json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
                    );
                }
                _ if id.is_null() => respond(&mut out, 202, "application/json", ""),
                "tools/list" => {
                    let tools: Vec<Value> = ["get_checkout", "complete_checkout"]
                        .iter()
                        .map(|name| json!({"name": name, "inputSchema": {"type": "object"}}))
                        .collect();
                    self.answer_in_stream(
                        &mut out,
                        &json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}}),
                    );
                }
                _ => {
                    let checkout =
                        ready_checkout(message["params"]["arguments"]["id"].as_str().unwrap_or(""));
                    let result = json!({"content": [{"type": "text", "text": checkout.to_string()}],
                                        "structuredContent": checkout});
                    self.answer_in_stream(
                        &mut out,
                        &json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    );
                }
            }
        }
    }

    /// The answer as one event of a chunked event stream, then the stream's end (once released,
    /// when streams are held).
    fn answer_in_stream(&self, out: &mut TcpStream, answer: &Value) {
        let event = format!("data: {answer}\n\n");
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
        let _ = out.write_all(format!("{head}{:x}\r\n{event}\r\n", event.len()).as_bytes());
        let _ = out.flush();
        let (lock, released) = &*self.state;
        let mut state = lock.lock().unwrap();
        state.0 += 1;
        if self.stream_end == StreamEnd::Held {
            while !state.1 {
                state = released.wait(state).unwrap();
            }
        }
        drop(state);
        let _ = out.write_all(b"0\r\n\r\n");
        let _ = out.flush();
    }
}

fn respond(out: &mut TcpStream, status: u16, content_type: &str, body: &str) {
    let mut text = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nContent-Type: {content_type}\r\n",
        body.len()
    );
    if status == 200 && body.contains("protocolVersion") {
        text.push_str("Mcp-Session-Id: s1\r\n");
    }
    text.push_str("\r\n");
    text.push_str(body);
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn world_for(shop: &KeepAliveShop) -> World {
    let world = World::with(Options {
        merchants: vec!["demo-outfitters.example", "127.0.0.1"],
        ..Options::default()
    });
    world.set_downstream(json!({
        "url": shop.url(),
        "bearer_token_env": TOKEN_VAR,
        "timeout_seconds": 30,
    }));
    world
}

fn read_checkout(mcp: &mut Mcp, id: &str) {
    let result = mcp.call("get_checkout", get_args(id));
    assert_eq!(
        result["structuredContent"]["id"],
        json!(id),
        "the answer did not come through: {result}"
    );
}

#[test]
fn the_relay_keeps_its_connection_to_a_shop_whose_streams_end_after_the_answer() {
    let shop = KeepAliveShop::start(StreamEnd::AtOnce);
    let world = world_for(&shop);
    let mut mcp = world.proxy();
    let calls = 20;
    for n in 0..calls {
        read_checkout(&mut mcp, &format!("gid://keep-alive/Checkout/{n}"));
        // The stream's end is read on the relay's drain thread once the answer is passed on;
        // a moment lets it finish before the next call, as the time an agent takes would.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        shop.answered() > calls,
        "every call was answered by the shop"
    );
    // Without the drain every stream closed its connection: one connection per call. With it,
    // one connection serves them all; the bound leaves room for a loaded machine on which a
    // drain now and then ends after the next call has started.
    assert!(
        shop.accepted() <= calls / 2,
        "{} connections for {} calls: the relay did not keep its connection",
        shop.accepted(),
        shop.answered()
    );
}

#[test]
fn a_shop_that_holds_its_streams_open_after_the_answer_delays_no_answer() {
    let shop = KeepAliveShop::start(StreamEnd::Held);
    let world = world_for(&shop);
    let mut mcp = world.proxy();
    // Every stream is still open when its answer reaches the agent: none of these waits on it.
    for n in 0..5 {
        read_checkout(&mut mcp, &format!("gid://keep-alive/Checkout/{n}"));
    }
    // Held streams keep their connections: each call after the first held one opens its own.
    assert!(
        shop.accepted() >= 5,
        "{} connections: a held stream's connection was used again",
        shop.accepted()
    );
    shop.release();
    // Once streams end, calls go on as before.
    read_checkout(&mut mcp, "gid://keep-alive/Checkout/after");
}

#[test]
fn a_request_larger_than_the_relays_buffers_reaches_the_shop_whole() {
    let shop = KeepAliveShop::start(StreamEnd::AtOnce);
    let world = world_for(&shop);
    let mut mcp = world.proxy();
    // Over the relay's 16 KiB output buffer several times: the body goes out in pieces.
    let padding = "x".repeat(100 * 1024);
    let mut arguments = get_args("gid://keep-alive/Checkout/large");
    // In `meta`, which get_checkout takes (an argument it does not take is refused).
    arguments["meta"]["note"] = json!(padding);
    let result = mcp.call("get_checkout", arguments);
    assert_eq!(
        result["structuredContent"]["id"],
        json!("gid://keep-alive/Checkout/large"),
        "{result}"
    );
    assert!(
        shop.largest_body.load(Ordering::SeqCst) > padding.len(),
        "the shop received {} bytes",
        shop.largest_body.load(Ordering::SeqCst)
    );
}

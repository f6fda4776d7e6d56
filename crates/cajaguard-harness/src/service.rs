//! `cajaguard serve` as a real child process, and an MCP Streamable HTTP client for it: what the
//! service's tests and the report drive. The client is plain HTTP (ureq), one POST per message,
//! so a test sees every status code and header the service sends.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::bins::cajaguard_bin;
use crate::ucp::{complete_args, line_items, meta, test_instrument, total_of, uuid};

/// A free loopback port (bound and released: good enough for tests on one machine).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Adds `serve` (listening on a free port) and `extra` top-level members to the config at `path`;
/// returns the endpoint URL.
pub fn add_serve(path: &Path, serve: Value, extra: Value) -> String {
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let port = free_port();
    let mut serve = serve;
    serve["listen"] = json!(format!("127.0.0.1:{port}"));
    config["serve"] = serve;
    if let Some(extra) = extra.as_object() {
        for (k, v) in extra {
            config[k] = v.clone();
        }
    }
    std::fs::write(path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    format!("http://127.0.0.1:{port}/mcp")
}

/// A running `cajaguard serve`; killed (SIGKILL) when dropped unless stopped first.
pub struct Served {
    child: Child,
    pub url: String,
    pub config: PathBuf,
}

impl Served {
    /// Starts `cajaguard serve --config CONFIG` and waits until `url` takes connections.
    pub fn start(config: &Path, url: &str, env: &[(&str, &str)]) -> Served {
        Served::start_with(config, url, env, false)
    }

    /// [`Served::start`] with the service's stderr dropped (the report's output is its own).
    pub fn start_quiet(config: &Path, url: &str, env: &[(&str, &str)]) -> Served {
        Served::start_with(config, url, env, true)
    }

    fn start_with(config: &Path, url: &str, env: &[(&str, &str)], quiet: bool) -> Served {
        let mut command = Command::new(cajaguard_bin());
        command
            .args(["serve", "--config"])
            .arg(config)
            .env_remove("CAJAGUARD_KEY_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(if quiet { Stdio::null() } else { Stdio::piped() });
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        // Relay stderr (the test's output shows why a service failed).
        if let Some(stderr) = child.stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("[serve] {line}");
                }
            });
        }
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if std::net::TcpStream::connect(&addr).is_ok() {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("cajaguard serve exited before listening: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "cajaguard serve did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Served {
            child,
            url: url.to_owned(),
            config: config.to_path_buf(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits for the exit: the graceful shutdown.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one HTTP exchange gave back.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    /// The body as JSON; for an event stream (`text/event-stream`, as some MCP servers answer a
    /// request), the last `data:` line that is a JSON-RPC response.
    pub fn json(&self) -> Value {
        let stream = self
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if stream {
            let answer = self
                .body
                .lines()
                .rev()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .find(|message| message.get("id").is_some() && message.get("method").is_none());
            return answer.unwrap_or_else(|| {
                panic!("no JSON-RPC answer in the event stream: {}", self.body)
            });
        }
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
}

/// POSTs `body` to `url` with these headers; any status comes back (never an `Err` for 4xx/5xx).
pub fn post(url: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    send("POST", url, headers, Some(body))
}

pub fn send(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&str>) -> Reply {
    send_with(&client(), method, url, headers, body)
}

/// An HTTP client that hands back every status; its connections are kept alive between requests.
pub fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// [`send`] on `agent`'s connections. An event stream is read up to its answer, and its
/// connection closed there, as the MCP SDKs' clients do.
pub fn send_with(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Reply {
    send_on(agent, method, url, headers, body, StreamEnd::Close)
}

/// What a client does with an event stream once it has the answer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StreamEnd {
    /// Stops reading and drops it, which closes its connection (the MCP SDKs' clients).
    Close,
    /// Reads on to the stream's end, so that its connection is kept for the next request.
    Read,
}

fn send_on(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    stream_end: StreamEnd,
) -> Reply {
    let mut request = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = match body {
        Some(body) => agent.run(
            request
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(body.to_owned())
                .unwrap(),
        ),
        None => agent.run(request.body(()).unwrap()),
    }
    .unwrap_or_else(|e| panic!("{method} {url} failed: {e}"));
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let stream = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let body = if stream {
        let mut reader = BufReader::new(response.into_body().into_reader());
        let answer = answer_event(&mut reader);
        if stream_end == StreamEnd::Read {
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        }
        answer
    } else {
        response.into_body().read_to_string().unwrap_or_default()
    };
    Reply {
        status,
        headers,
        body,
    }
}

/// An event stream read up to the end of the event that carries a JSON-RPC response, as an MCP
/// client does: the stream's end may come later (a server may hold its last chunk back).
fn answer_event(reader: &mut impl std::io::BufRead) -> String {
    let mut body = String::new();
    let mut answered = false;
    for line in reader.lines().map_while(Result::ok) {
        if line.is_empty() && answered {
            break;
        }
        if let Some(data) = line.strip_prefix("data:")
            && serde_json::from_str::<Value>(data.trim())
                .is_ok_and(|m| m.get("id").is_some() && m.get("method").is_none())
        {
            answered = true;
        }
        body.push_str(&line);
        body.push('\n');
    }
    body
}

/// One agent's MCP session with the service (2025-11-25: `initialize`, then `Mcp-Session-Id`),
/// on one kept-alive connection.
pub struct HttpMcp {
    pub url: String,
    pub token: String,
    pub session: Option<String>,
    next_id: u64,
    client: ureq::Agent,
    stream_end: StreamEnd,
}

impl HttpMcp {
    /// Opens a session for the agent whose token this is.
    pub fn connect(url: &str, token: &str) -> HttpMcp {
        HttpMcp::connect_with(url, token, StreamEnd::Close)
    }

    /// [`HttpMcp::connect`], declaring these client capabilities at `initialize`.
    pub fn connect_declaring(url: &str, token: &str, capabilities: Value) -> HttpMcp {
        HttpMcp::open(url, token, StreamEnd::Close, capabilities)
    }

    /// [`HttpMcp::connect`], doing `stream_end` with each event stream once it has the answer.
    pub fn connect_with(url: &str, token: &str, stream_end: StreamEnd) -> HttpMcp {
        HttpMcp::open(url, token, stream_end, json!({}))
    }

    fn open(url: &str, token: &str, stream_end: StreamEnd, capabilities: Value) -> HttpMcp {
        let mut mcp = HttpMcp {
            url: url.to_owned(),
            token: token.to_owned(),
            session: None,
            next_id: 0,
            client: client(),
            stream_end,
        };
        let reply = mcp.post_message(&json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": { "name": "harness", "version": "0" } }
        }));
        assert_eq!(reply.status, 200, "initialize: {reply:?}");
        mcp.session = Some(
            reply
                .header("mcp-session-id")
                .unwrap_or_else(|| panic!("no Mcp-Session-Id: {reply:?}"))
                .to_owned(),
        );
        let done =
            mcp.post_message(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(done.status, 202, "initialized: {done:?}");
        mcp
    }

    /// POSTs `body` exactly as given, with this session's headers.
    pub fn post_message_raw(&self, body: &str) -> Reply {
        let auth = format!("Bearer {}", self.token);
        let mut headers = vec![("authorization", auth.as_str())];
        if let Some(session) = &self.session {
            headers.push(("mcp-session-id", session.as_str()));
            headers.push(("mcp-protocol-version", "2025-11-25"));
        }
        send_on(
            &self.client,
            "POST",
            &self.url,
            &headers,
            Some(body),
            self.stream_end,
        )
    }

    pub fn post_message(&self, message: &Value) -> Reply {
        self.post_message_raw(&message.to_string())
    }

    /// A request; the whole JSON-RPC response.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let reply = self.post_message(
            &json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}),
        );
        assert_eq!(reply.status, 200, "{method}: {reply:?}");
        reply.json()
    }

    /// `tools/call`; the result (panics on a JSON-RPC error).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("{tool} answered with a JSON-RPC error: {response}"),
        }
    }

    pub fn tool_names(&mut self) -> Vec<String> {
        let response = self.request("tools/list", json!({}));
        response["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools/list: {response}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Creates a checkout for `quantity` x `slug`: its id and the shop's total.
    pub fn create_priced(&mut self, slug: &str, quantity: u64) -> (String, String) {
        let result = self.call(
            "create_checkout",
            json!({ "meta": meta(), "checkout": { "line_items": line_items(slug, quantity) } }),
        );
        let id = result["structuredContent"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("create_checkout answered without an id: {result}"))
            .to_owned();
        (id, total_of(&result["structuredContent"]))
    }

    pub fn create_checkout(&mut self, slug: &str, quantity: u64) -> String {
        self.create_priced(slug, quantity).0
    }

    /// Pays with the test instrument under a fresh idempotency key.
    pub fn pay(&mut self, checkout_id: &str) -> Value {
        self.call(
            "complete_checkout",
            complete_args(checkout_id, test_instrument(), &uuid(), json!({})),
        )
    }

    /// Ends the session (DELETE).
    pub fn close(&self) -> u16 {
        let auth = format!("Bearer {}", self.token);
        let mut headers = vec![("authorization", auth.as_str())];
        if let Some(session) = &self.session {
            headers.push(("mcp-session-id", session.as_str()));
        }
        send_with(&self.client, "DELETE", &self.url, &headers, None).status
    }
}

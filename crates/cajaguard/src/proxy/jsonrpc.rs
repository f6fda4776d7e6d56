//! JSON-RPC 2.0 over newline-delimited stdio: bounded line reading, the envelope decoded and the rest
//! kept raw, and the few messages the proxy writes itself.

use std::io::{self, BufRead, Write};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::value::RawValue;

/// JSON-RPC error codes the proxy uses.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// The shop could not be reached or did not answer.
pub const SHOP_UNAVAILABLE: i64 = -32001;
/// Too many calls in flight from one agent.
pub const OVERLOADED: i64 = -32002;

/// One line of input.
pub enum Line {
    Message(String),
    /// Longer than the limit: the rest of it was discarded, the stream stays in step. `id` is the
    /// message's top-level id (its raw JSON, a string or an integer) when it could be read from
    /// the line's first or last bytes, so that only the request it answers fails.
    TooLong {
        id: Option<String>,
    },
    Eof,
}

/// How much of an oversized line is kept to find its id: serializers write `id` first or last.
const HEAD_KEPT: usize = 4096;
const TAIL_KEPT: usize = 256;

/// Reads one newline-terminated line of at most `max` bytes without ever holding more than that
/// (plus a few KiB of an oversized line's ends).
pub fn read_line(reader: &mut dyn BufRead, max: usize) -> io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    let mut tail = Vec::new();
    loop {
        let chunk = match reader.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(if line.is_empty() && !too_long {
                Line::Eof
            } else {
                finish(line, too_long, &tail)
            });
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => (at, true),
            None => (chunk.len(), false),
        };
        if too_long {
            keep_tail(&mut tail, &chunk[..take]);
        } else if line.len() + take > max {
            too_long = true;
            keep_tail(&mut tail, &line);
            keep_tail(&mut tail, &chunk[..take]);
            line.extend_from_slice(&chunk[..take.min(HEAD_KEPT)]);
            line.truncate(HEAD_KEPT);
        } else {
            line.extend_from_slice(&chunk[..take]);
        }
        reader.consume(if done { take + 1 } else { take });
        if done {
            return Ok(finish(line, too_long, &tail));
        }
    }
}

fn keep_tail(tail: &mut Vec<u8>, more: &[u8]) {
    if more.len() >= TAIL_KEPT {
        tail.clear();
        tail.extend_from_slice(&more[more.len() - TAIL_KEPT..]);
    } else {
        tail.extend_from_slice(more);
        if tail.len() > TAIL_KEPT {
            tail.drain(..tail.len() - TAIL_KEPT);
        }
    }
}

fn finish(mut line: Vec<u8>, too_long: bool, tail: &[u8]) -> Line {
    if too_long {
        let id = id_in_head(&line).or_else(|| id_in_tail(tail));
        return Line::TooLong {
            id: id.map(|raw| String::from_utf8_lossy(raw).into_owned()),
        };
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    match String::from_utf8(line) {
        Ok(text) => Line::Message(text),
        // Not UTF-8 is not JSON: let the parser report it as a parse error.
        Err(e) => Line::Message(String::from_utf8_lossy(e.as_bytes()).into_owned()),
    }
}

/// The raw top-level `id` (string or integer) of a message whose first bytes are `b`, found by
/// walking its members without parsing their values; `None` when it is not among them.
fn id_in_head(b: &[u8]) -> Option<&[u8]> {
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(b, i);
        let key_end = string_end(b, i)?;
        let key = &b[i..key_end];
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        let value_end = value_end(b, i)?;
        if key == b"\"id\"" {
            return id_shaped(&b[i..value_end]).then_some(&b[i..value_end]);
        }
        i = skip_ws(b, value_end);
        if b.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
}

/// The raw `id` when the message ends with `"id": <id> }`.
fn id_in_tail(b: &[u8]) -> Option<&[u8]> {
    let mut end = b.len();
    while end > 0 && b[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    if end == 0 || b[end - 1] != b'}' {
        return None;
    }
    end -= 1;
    while end > 0 && b[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    let start = if end > 0 && b[end - 1] == b'"' {
        // Back to the opening quote; ids the proxy sends are integers, so a plain string will do.
        let open = b[..end - 1].iter().rposition(|&c| c == b'"')?;
        if b[open + 1..end - 1].contains(&b'\\') {
            return None;
        }
        open
    } else {
        let mut s = end;
        while s > 0 && (b[s - 1].is_ascii_digit() || b[s - 1] == b'-') {
            s -= 1;
        }
        s
    };
    let id = &b[start..end];
    if !id_shaped(id) {
        return None;
    }
    let mut i = start;
    while i > 0 && b[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    if i == 0 || b[i - 1] != b':' {
        return None;
    }
    i -= 1;
    while i > 0 && b[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    let key = b[..i].strip_suffix(b"\"id\"")?;
    let before = key.iter().rev().find(|c| !c.is_ascii_whitespace());
    matches!(before, Some(b',' | b'{')).then_some(id)
}

fn id_shaped(raw: &[u8]) -> bool {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|text| serde_json::from_str::<Box<RawValue>>(text).ok())
        .is_some_and(|id| valid_id(&id))
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Index just past the string starting at `b[i]` (a `"`), or `None` if it is cut off.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// Index just past the JSON value starting at `b[i]`, or `None` if it is cut off.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let end = b[i..]
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']') || c.is_ascii_whitespace())?;
            Some(i + end)
        }
    }
}

/// The envelope of any JSON-RPC message; members other than these are not kept.
#[derive(Deserialize)]
pub struct Envelope {
    #[serde(default)]
    pub id: Option<Box<RawValue>>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub params: Option<Box<RawValue>>,
    #[serde(default)]
    pub result: Option<Box<RawValue>>,
    #[serde(default)]
    pub error: Option<Box<RawValue>>,
}

impl Envelope {
    pub fn parse(line: &str) -> Result<Envelope, serde_json::Error> {
        serde_json::from_str(line)
    }

    /// A request has a method and an id; a notification a method and no id.
    pub fn is_request(&self) -> bool {
        self.method.is_some() && self.id.is_some()
    }
}

/// An agent's line that is not a valid JSON-RPC 2.0 message: answered with this error, never
/// forwarded (SPEC §3, JSON-RPC conformance).
#[derive(Debug)]
pub struct Invalid {
    /// The line's id when it could be read and is a valid id; the answer's id is `null` otherwise.
    pub id: Option<Box<RawValue>>,
    pub code: i64,
    pub message: &'static str,
}

impl Invalid {
    /// The whole error line to send back.
    pub fn line(&self) -> String {
        error(self.id.as_deref(), self.code, self.message)
    }
}

/// Every member an envelope may have, each kept raw so that its type can be judged (a `null` id or
/// params is kept as present).
#[derive(Deserialize)]
struct Loose {
    #[serde(default)]
    jsonrpc: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    method: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Box<RawValue>>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// A string or an integer (MCP: never `null`, and JSON-RPC discourages fractions).
fn valid_id(id: &RawValue) -> bool {
    let raw = id.get();
    if raw.starts_with('"') {
        return true;
    }
    // An integer the peer can read back as one: a 64-bit one. A longer run of digits is JSON, but
    // most clients (and serde_json) would read it back as a float, so it is no id to answer with.
    raw.parse::<i64>().is_ok() || raw.parse::<u64>().is_ok()
}

impl Envelope {
    /// Reads an agent's line strictly (JSON-RPC 2.0 §4-5): a request, a notification or a
    /// response, or the error to answer it with. `known` says which methods the proxy serves, whose
    /// bad `params` are -32602 rather than -32600.
    pub fn parse_agent(line: &str, known: &dyn Fn(&str) -> bool) -> Result<Envelope, Invalid> {
        let invalid = |id: Option<Box<RawValue>>, message| Invalid {
            id,
            code: INVALID_REQUEST,
            message,
        };
        if serde_json::from_str::<serde::de::IgnoredAny>(line).is_err() {
            return Err(Invalid {
                id: None,
                code: PARSE_ERROR,
                message: "not JSON; CajaGuard reads one JSON-RPC message per line",
            });
        }
        let Ok(loose) = serde_json::from_str::<Loose>(line) else {
            return Err(invalid(
                None,
                "not a JSON-RPC request: a message is one object, each member once",
            ));
        };
        let id_ok = loose.id.as_deref().is_none_or(valid_id);
        let answer_id = loose.id.clone().filter(|id| valid_id(id));
        let version_ok = loose
            .jsonrpc
            .as_deref()
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .is_some_and(|v| v == "2.0");
        if !version_ok {
            return Err(invalid(answer_id, "\"jsonrpc\" must be \"2.0\""));
        }
        if !id_ok {
            return Err(invalid(
                None,
                "the id must be a string or an integer (not null)",
            ));
        }
        let Some(method) = loose.method else {
            if loose.result.is_some() || loose.error.is_some() {
                return Ok(Envelope {
                    id: loose.id,
                    method: None,
                    params: None,
                    result: loose.result,
                    error: loose.error,
                });
            }
            return Err(invalid(answer_id, "a request needs a method"));
        };
        let Ok(method) = serde_json::from_str::<String>(method.get()) else {
            return Err(invalid(answer_id, "the method must be a string"));
        };
        if let Some(params) = &loose.params
            && !(params.get().starts_with('{') || params.get().starts_with('['))
        {
            return Err(Invalid {
                id: answer_id,
                code: if known(&method) {
                    INVALID_PARAMS
                } else {
                    INVALID_REQUEST
                },
                message: "params must be an object or an array",
            });
        }
        Ok(Envelope {
            id: loose.id,
            method: Some(method),
            params: loose.params,
            result: loose.result,
            error: loose.error,
        })
    }
}

/// A request id as the peer wrote it (string or number), used as a map key.
pub fn id_key(id: &RawValue) -> String {
    id.get().to_owned()
}

pub fn request(id: u64, method: &str, params: Option<&str>) -> String {
    match params {
        Some(params) => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":{},"params":{params}}}"#,
            quote(method)
        ),
        None => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":{}}}"#,
            quote(method)
        ),
    }
}

pub fn notification(method: &str, params: Option<&str>) -> String {
    match params {
        Some(params) => format!(
            r#"{{"jsonrpc":"2.0","method":{},"params":{params}}}"#,
            quote(method)
        ),
        None => format!(r#"{{"jsonrpc":"2.0","method":{}}}"#, quote(method)),
    }
}

pub fn result(id: &RawValue, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#, id.get())
}

/// An error answer; `id` is `null` when the request's id could not be read.
pub fn error(id: Option<&RawValue>, code: i64, message: &str) -> String {
    let id = id.map_or("null", RawValue::get);
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{}}}}}"#,
        quote(message)
    )
}

/// An error answer whose error object came from the shop, passed on unchanged.
pub fn raw_error(id: &RawValue, error: &RawValue) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{}}}"#,
        id.get(),
        error.get()
    )
}

pub fn quote(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_owned())
}

/// Where whole lines are written, one writer at a time; each line is flushed at once.
#[derive(Clone)]
pub struct Sink {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl Sink {
    pub fn new(out: Box<dyn Write + Send>) -> Sink {
        Sink {
            out: Arc::new(Mutex::new(out)),
        }
    }

    pub fn send(&self, line: &str) -> io::Result<()> {
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // One write of line + newline so that a reader never sees half a message.
        let mut buffer = Vec::with_capacity(line.len() + 1);
        buffer.extend_from_slice(line.as_bytes());
        buffer.push(b'\n');
        out.write_all(&buffer)?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &str, max: usize) -> Vec<String> {
        let mut reader = io::BufReader::with_capacity(4, input.as_bytes());
        let mut out = Vec::new();
        loop {
            match read_line(&mut reader, max).unwrap() {
                Line::Message(m) => out.push(m),
                Line::TooLong { id } => out.push(format!("<too long, id {id:?}>")),
                Line::Eof => return out,
            }
        }
    }

    #[test]
    fn long_lines_are_dropped_and_the_stream_stays_in_step() {
        assert_eq!(
            lines("ab\r\n0123456789\ncd\nlast", 5),
            ["ab", "<too long, id None>", "cd", "last"]
        );
    }

    #[test]
    fn an_oversized_line_keeps_its_id_from_either_end() {
        let huge = "x".repeat(10_000);
        let head = format!(r#"{{"jsonrpc":"2.0","id":42,"result":{{"text":"{huge}"}}}}"#);
        let tail =
            format!(r#"{{"result":{{"a":[1,{{"id":7}}],"text":"{huge}"}}, "id" : "q\"x" }}"#);
        let tail_int = format!(r#"{{"result":{{"text":"{huge}"}},"id":-3}}"#);
        let nested = format!(r#"{{"result":{{"id":9,"text":"{huge}"}}}}"#);
        let null = format!(r#"{{"id":null,"result":"{huge}"}}"#);
        let input = [head, tail, tail_int, nested, null, "ok".into()].join("\n");
        assert_eq!(
            lines(&input, 1000),
            [
                "<too long, id Some(\"42\")>",
                "<too long, id None>",
                "<too long, id Some(\"-3\")>",
                "<too long, id None>",
                "<too long, id None>",
                "ok"
            ]
        );
    }

    #[test]
    fn invalid_requests_get_their_error_and_id() {
        let known = |m: &str| m == "tools/call";
        let err = |line: &str| {
            let e = Envelope::parse_agent(line, &known).err().unwrap();
            (e.code, e.id.map(|id| id.get().to_owned()))
        };
        assert_eq!(err("{"), (PARSE_ERROR, None));
        assert_eq!(
            err(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
            (INVALID_REQUEST, Some("1".into()))
        );
        assert_eq!(
            err(r#"{"id":"a","method":"ping"}"#),
            (INVALID_REQUEST, Some("\"a\"".into()))
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            (INVALID_REQUEST, None)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#),
            (INVALID_REQUEST, None)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":2,"method":7}"#),
            (INVALID_REQUEST, Some("2".into()))
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":"x"}"#),
            (INVALID_PARAMS, Some("3".into()))
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":3,"method":"other","params":1}"#),
            (INVALID_REQUEST, Some("3".into()))
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","method":"x","method":"y"}"#),
            (INVALID_REQUEST, None)
        );
        // Found by the fuzzer: an integer id past 64 bits is no id to answer with (a client would
        // read it back as a float), so the error goes out with id null, and a request with one is
        // invalid.
        let huge = "1".repeat(80);
        assert_eq!(
            err(&format!(
                r#"{{"jsonrpc":"1.0","id":{huge},"method":"ping"}}"#
            )),
            (INVALID_REQUEST, None)
        );
        assert_eq!(
            err(&format!(
                r#"{{"jsonrpc":"2.0","id":{huge},"method":"ping"}}"#
            )),
            (INVALID_REQUEST, None)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"1.0","id":18446744073709551615,"method":"ping"}"#),
            (INVALID_REQUEST, Some("18446744073709551615".into()))
        );
        assert_eq!(err("42"), (INVALID_REQUEST, None));
        assert_eq!(err(r#"{"jsonrpc":"2.0"}"#), (INVALID_REQUEST, None));
        let ok = Envelope::parse_agent(
            r#"{"jsonrpc":"2.0","id":-4,"method":"ping","params":[]}"#,
            &known,
        )
        .unwrap();
        assert_eq!(ok.id.unwrap().get(), "-4");
        let response =
            Envelope::parse_agent(r#"{"jsonrpc":"2.0","id":5,"result":null}"#, &known).unwrap();
        assert!(response.method.is_none() && response.result.is_some());
    }

    #[test]
    fn envelope_keeps_params_raw() {
        let e = Envelope::parse(r#"{"jsonrpc":"2.0","id":"x","method":"m","params":{"a" : 1.0}}"#)
            .unwrap();
        assert_eq!(e.params.unwrap().get(), r#"{"a" : 1.0}"#);
        assert_eq!(e.id.unwrap().get(), r#""x""#);
    }
}

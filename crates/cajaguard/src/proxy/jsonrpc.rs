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
    /// Longer than the limit: the rest of it was discarded, the stream stays in step.
    TooLong,
    Eof,
}

/// Reads one newline-terminated line of at most `max` bytes without ever holding more than that.
pub fn read_line(reader: &mut dyn BufRead, max: usize) -> io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
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
                finish(line, too_long)
            });
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => (at, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            if line.len() + take > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(&chunk[..take]);
            }
        }
        reader.consume(if done { take + 1 } else { take });
        if done {
            return Ok(finish(line, too_long));
        }
    }
}

fn finish(mut line: Vec<u8>, too_long: bool) -> Line {
    if too_long {
        return Line::TooLong;
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
                Line::TooLong => out.push("<too long>".into()),
                Line::Eof => return out,
            }
        }
    }

    #[test]
    fn long_lines_are_dropped_and_the_stream_stays_in_step() {
        assert_eq!(
            lines("ab\r\n0123456789\ncd\nlast", 5),
            ["ab", "<too long>", "cd", "last"]
        );
    }

    #[test]
    fn envelope_keeps_params_raw() {
        let e = Envelope::parse(r#"{"jsonrpc":"2.0","id":"x","method":"m","params":{"a" : 1.0}}"#)
            .unwrap();
        assert_eq!(e.params.unwrap().get(), r#"{"a" : 1.0}"#);
        assert_eq!(e.id.unwrap().get(), r#""x""#);
    }
}

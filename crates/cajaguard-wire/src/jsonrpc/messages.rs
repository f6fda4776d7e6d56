//! The messages the proxy writes itself, and the sink that writes whole lines.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;

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

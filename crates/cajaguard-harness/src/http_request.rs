//! One HTTP/1.1 request as the tests' scripted shops read it off a connection: the request line,
//! the headers (names in lower case) and a body of `Content-Length` bytes.

use std::collections::HashMap;
use std::io::BufRead;

pub struct Request {
    pub line: String,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Request {
    /// The method: the request line's first word.
    pub fn method(&self) -> &str {
        self.line.split_whitespace().next().unwrap_or("")
    }
}

/// The next request on `reader`; `None` once the client has closed the connection (or cut a
/// request short).
pub fn read_request(reader: &mut impl BufRead) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    let mut headers = HashMap::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 {
            return None;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        line: line.trim_end().to_owned(),
        headers,
        body,
    })
}

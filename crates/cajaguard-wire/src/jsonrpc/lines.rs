//! Newline-delimited framing: one message per line, read without ever holding more than the limit,
//! and the id of a line that was over it, found in its first or last bytes so that only the request
//! it carried fails.

use std::io::{self, BufRead};

use serde_json::value::RawValue;

use super::envelope::valid_id;

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
        // Bytes that are not UTF-8 become U+FFFD here, once: the envelope, the tripwire and the
        // shop all read this one string, so nothing forwarded holds bytes the tripwire did not.
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

/// JSON allows line breaks only between tokens, so turning them into spaces changes no value and
/// keeps every other byte; the agent side needs one message per line.
pub fn one_line(text: &str) -> String {
    if text.contains(['\n', '\r']) {
        text.replace(['\n', '\r'], " ")
    } else {
        text.to_owned()
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
    fn line_breaks_in_json_become_spaces_and_nothing_else_changes() {
        assert_eq!(
            one_line("{\n  \"a\" : 1.0,\r\n  \"b\":\"x\"\n}"),
            "{   \"a\" : 1.0,    \"b\":\"x\" }"
        );
    }
}

//! Server-sent events (`text/event-stream`) as the WHATWG HTML standard parses them, bounded: the
//! body of an MCP Streamable HTTP answer that carries notifications before the answer itself.

use std::io::BufRead;

use crate::jsonrpc::{self, Line};

/// One dispatched server-sent event.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// The data of a `message` event (its `data:` lines joined with `\n`).
    Message(String),
    /// An event whose data or a line of which was over the limit; its data was discarded.
    TooLarge,
}

/// Server-sent events as the WHATWG HTML standard parses them: lines of `field: value`, `data`
/// lines joined with `\n`, comments (`:`) ignored, an event dispatched at a blank line. Only
/// events of the default type `message` (what MCP sends) are returned.
pub struct SseReader<R> {
    reader: R,
    started: bool,
}

impl<R: BufRead> SseReader<R> {
    pub fn new(reader: R) -> SseReader<R> {
        SseReader {
            reader,
            started: false,
        }
    }

    /// The reader, with whatever it has buffered past the last event returned.
    pub fn into_inner(self) -> R {
        self.reader
    }

    /// The next event, or `None` at the end of the stream. `max` bounds an event's data.
    pub fn next_event(&mut self, max: usize) -> std::io::Result<Option<Event>> {
        let mut data = String::new();
        let mut has_data = false;
        let mut kind = String::new();
        let mut too_large = false;
        loop {
            // A line may hold a whole message plus `data: `.
            let mut line = match jsonrpc::read_line(&mut self.reader, max + 16)? {
                Line::Eof => return Ok(None),
                Line::TooLong { .. } => {
                    too_large = true;
                    continue;
                }
                Line::Message(line) => line,
            };
            if !self.started {
                self.started = true;
                if let Some(rest) = line.strip_prefix('\u{feff}') {
                    line = rest.to_owned();
                }
            }
            if line.is_empty() {
                if too_large {
                    return Ok(Some(Event::TooLarge));
                }
                if has_data && (kind.is_empty() || kind == "message") {
                    return Ok(Some(Event::Message(data)));
                }
                data.clear();
                has_data = false;
                kind.clear();
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line.as_str(), ""),
            };
            match field {
                "data" => {
                    if has_data {
                        data.push('\n');
                    }
                    data.push_str(value);
                    has_data = true;
                    if data.len() > max {
                        too_large = true;
                        data.clear();
                    }
                }
                "event" => kind = value.to_owned(),
                // `id` and `retry` serve reconnecting a dropped stream, which the proxy does not do:
                // a dropped answer is an unknown outcome, not something to resume.
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(stream: &str, max: usize) -> Vec<Event> {
        let mut reader = SseReader::new(std::io::BufReader::with_capacity(3, stream.as_bytes()));
        let mut out = Vec::new();
        while let Some(event) = reader.next_event(max).unwrap() {
            out.push(event);
        }
        out
    }

    #[test]
    fn sse_data_lines_are_joined_and_events_split_at_blank_lines() {
        let stream = "\u{feff}: keep-alive\r\nid: 1\r\nretry: 3000\r\ndata:\r\n\r\n\
                      data: {\"a\":\ndata:1}\n\nevent: message\ndata:{\"b\":2}\n\n\
                      event: other\ndata: x\n\ndata: last-without-blank-line";
        assert_eq!(
            events(stream, 1024),
            vec![
                Event::Message(String::new()),
                Event::Message("{\"a\":\n1}".into()),
                Event::Message("{\"b\":2}".into()),
            ]
        );
    }

    #[test]
    fn an_sse_event_over_the_limit_is_reported_and_the_stream_stays_in_step() {
        let big = "x".repeat(100);
        let stream = format!("data: {big}\n\ndata: {big}\ndata: {big}\n\ndata: ok\n\n");
        assert_eq!(
            events(&stream, 150),
            vec![
                Event::Message(big.clone()),
                Event::TooLarge,
                Event::Message("ok".into())
            ]
        );
    }
}

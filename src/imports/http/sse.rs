//! Server-Sent Events as an upstream streams them (MCP's Streamable HTTP,
//! A2A's streaming methods), parsed incrementally with every event's
//! buffered bytes bounded.

use std::collections::VecDeque;

use axum::body::BodyDataStream;
use futures_util::StreamExt;

use super::error_chain;
use crate::imports::upstream::UpstreamError;

/// One Server-Sent Event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// Its `event:` type; empty for the default (`message`).
    pub event: String,
    /// Its `data:` lines, joined by `\n`.
    pub data: String,
    /// The last event ID the stream set, if any (for resumption).
    pub id: Option<String>,
}

/// The events of a streamed answer, read as they arrive.
pub struct SseReader {
    /// `None` once the stream ended or failed.
    body: Option<BodyDataStream>,
    parser: SseParser,
    ready: VecDeque<SseEvent>,
}

impl SseReader {
    pub(super) fn new(body: BodyDataStream, max: usize) -> SseReader {
        SseReader {
            body: Some(body),
            parser: SseParser::new(max),
            ready: VecDeque::new(),
        }
    }

    /// The next event; `None` at the end of the stream (an event not
    /// finished by a blank line is dropped, as the specification says),
    /// an error once (then `None`) when the connection broke or an event
    /// grew past `max`.
    pub async fn next(&mut self) -> Option<Result<SseEvent, UpstreamError>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(Ok(event));
            }
            let body = self.body.as_mut()?;
            match body.next().await {
                Some(Ok(chunk)) => {
                    if let Err(e) = self.parser.feed(&chunk, &mut self.ready) {
                        self.body = None;
                        return Some(Err(e));
                    }
                }
                Some(Err(e)) => {
                    self.body = None;
                    return Some(Err(UpstreamError::Unreachable(error_chain(&e))));
                }
                None => self.body = None,
            }
        }
    }
}

/// The `text/event-stream` parser (sans-IO): bytes in, events out.
#[derive(Debug)]
pub(crate) struct SseParser {
    max: usize,
    /// The line being read (not yet terminated).
    line: Vec<u8>,
    data: String,
    event: String,
    last_id: Option<String>,
    /// Whether anything was read yet (a leading BOM is skipped).
    started: bool,
    /// The last chunk ended in a CR: an LF starting the next one belongs to it.
    after_cr: bool,
}

impl SseParser {
    pub(crate) fn new(max: usize) -> SseParser {
        SseParser {
            max,
            line: Vec::new(),
            data: String::new(),
            event: String::new(),
            last_id: None,
            started: false,
            after_cr: false,
        }
    }

    /// Reads a chunk, appending each event it completes to `out`.
    pub(crate) fn feed(
        &mut self,
        mut chunk: &[u8],
        out: &mut VecDeque<SseEvent>,
    ) -> Result<(), UpstreamError> {
        if !self.started && !chunk.is_empty() {
            self.started = true;
            chunk = chunk.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(chunk);
        }
        if std::mem::take(&mut self.after_cr) {
            chunk = chunk.strip_prefix(b"\n").unwrap_or(chunk);
        }
        while let Some(end) = chunk.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.line.extend_from_slice(&chunk[..end]);
            self.check()?;
            let cr = chunk[end] == b'\r';
            chunk = &chunk[end + 1..];
            if cr {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            self.field(&String::from_utf8_lossy(&line), out);
        }
        self.line.extend_from_slice(chunk);
        self.check()
    }

    /// Everything the event under way holds stays within `max`.
    fn check(&self) -> Result<(), UpstreamError> {
        if self.line.len() + self.data.len() + self.event.len() > self.max {
            return Err(UpstreamError::TooLarge(self.max));
        }
        Ok(())
    }

    fn field(&mut self, line: &str, out: &mut VecDeque<SseEvent>) {
        if line.is_empty() {
            return self.dispatch(out);
        }
        let (name, value) = match line.split_once(':') {
            Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match name {
            "" => {} // a comment (keep-alive)
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            "event" => value.clone_into(&mut self.event),
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            _ => {} // `retry` and unknown fields
        }
    }

    fn dispatch(&mut self, out: &mut VecDeque<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        if self.data.is_empty() {
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop(); // the last line's `\n`
        out.push_back(SseEvent {
            event,
            data,
            id: self.last_id.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(max: usize, chunks: &[&[u8]]) -> Result<Vec<SseEvent>, UpstreamError> {
        let mut parser = SseParser::new(max);
        let mut out = VecDeque::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out)?;
        }
        Ok(out.into_iter().collect())
    }

    fn event(event: &str, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: id.map(Into::into),
        }
    }

    #[test]
    fn events_split_anywhere_across_chunks_come_out_whole() {
        let stream = b"event: message\nid: 7\ndata: {\"a\":1}\n\ndata: two\n\n";
        let whole = parse(1024, &[stream]).unwrap();
        assert_eq!(
            whole,
            vec![
                event("message", "{\"a\":1}", Some("7")),
                event("", "two", Some("7"))
            ]
        );
        for cut in 0..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(parse(1024, &[a, b]).unwrap(), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse(1024, &bytes).unwrap(), whole);
    }

    #[test]
    fn crlf_and_lone_cr_end_lines_even_split_between_chunks() {
        let crlf = parse(1024, &[b"data: a\r", b"\ndata: b\r\n\r", b"\n"]).unwrap();
        assert_eq!(crlf, vec![event("", "a\nb", None)]);
        let cr = parse(1024, &[b"data: a\rdata: b\r\r"]).unwrap();
        assert_eq!(cr, vec![event("", "a\nb", None)]);
    }

    #[test]
    fn comments_and_unknown_fields_are_skipped_and_data_lines_join() {
        let stream = b"\xEF\xBB\xBF: keep-alive\nretry: 10\nfoo: bar\ndata\ndata:x\ndata:  y\n\n";
        assert_eq!(
            parse(1024, &[stream]).unwrap(),
            vec![event("", "\nx\n y", None)]
        );
        // Only comments, or an event type without data: nothing to dispatch.
        assert_eq!(parse(1024, &[b":\n\nevent: e\n\n"]).unwrap(), vec![]);
        // An unfinished event at the end is not an event.
        assert_eq!(parse(1024, &[b"data: half"]).unwrap(), vec![]);
    }

    #[test]
    fn an_event_past_max_is_refused_whether_one_line_or_many() {
        let long = vec![b'x'; 100];
        let one_line = parse(64, &[b"data: ", &long]);
        assert_eq!(one_line, Err(UpstreamError::TooLarge(64)));
        let many: Vec<&[u8]> = std::iter::repeat_n(&b"data: 0123456789\n"[..], 10).collect();
        assert_eq!(parse(64, &many), Err(UpstreamError::TooLarge(64)));
        // Many small events in a row are fine: the bound is per event.
        let events: Vec<&[u8]> = std::iter::repeat_n(&b"data: 0123456789\n\n"[..], 100).collect();
        assert_eq!(parse(64, &events).unwrap().len(), 100);
    }
}

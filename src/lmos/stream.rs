//! Streamed action output and input: the draft's Request-Stream /
//! Response-Stream ("must be supported", no messages defined), bound to
//! LMOS messages. No I/O.
//!
//! A chunk is the `stream` member of a message of one invocation:
//!
//! ```json
//! "stream": {"seq": 3, "data": "sunny ", "contentType": "text/plain"}
//! "stream": {"seq": 7, "data": "UklGRi...", "contentType": "audio/pcm", "contentEncoding": "base64"}
//! "stream": {"seq": 8, "end": true}
//! ```
//!
//! - **Output** (agent → consumer) rides on `actionStatus` with `status:
//!   "running"`, correlated like every status of the invocation; it ends with
//!   the invocation's terminal status (`completed` ends the stream, `failed`
//!   / `cancelled` / an `error` break it), which may carry
//!   `"stream": {"seq": n, "end": true}` with `n` = the number of chunks.
//! - **Input** (consumer → agent) is an `actionInput` message carrying the
//!   invocation's correlation ID, the same `stream` member, ended by a chunk
//!   with `end: true`.
//!
//! `seq` counts from 0 with no gaps; [`Sequencer`] checks it on either side
//! and [`Reassembler`] is a consumer's reference reader.

use base64::Engine;
use serde_json::{json, Map, Value};

/// The member of a message that carries a chunk.
pub const MEMBER: &str = "stream";

/// One chunk of a stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub seq: u64,
    /// Text, any JSON value, or base64 text (see `content_encoding`);
    /// `None` on a bare end marker.
    pub data: Option<Value>,
    pub content_type: Option<String>,
    /// `base64` for binary data (audio frames); absent for text and JSON.
    pub content_encoding: Option<String>,
    pub end: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    #[error("`stream` must be an object with a non-negative integer `seq`")]
    Malformed,
    #[error("`stream.end` must be a boolean")]
    BadEnd,
    #[error("`stream.contentEncoding` `{0}` is not supported (only `base64`)")]
    UnknownEncoding(String),
    #[error("`stream.data` is not valid base64")]
    BadBase64,
    #[error("a chunk needs `data` unless it is the end marker (`end: true`)")]
    NoData,
}

impl Chunk {
    pub fn text(seq: u64, text: impl Into<String>) -> Chunk {
        Chunk {
            seq,
            data: Some(Value::String(text.into())),
            content_type: Some("text/plain".into()),
            content_encoding: None,
            end: false,
        }
    }

    /// Binary data (an audio frame), base64 in JSON.
    pub fn binary(seq: u64, content_type: &str, bytes: &[u8]) -> Chunk {
        Chunk {
            seq,
            data: Some(Value::String(
                base64::engine::general_purpose::STANDARD.encode(bytes),
            )),
            content_type: Some(content_type.into()),
            content_encoding: Some("base64".into()),
            end: false,
        }
    }

    /// The end marker: `seq` is the number of chunks sent before it.
    pub fn end(seq: u64) -> Chunk {
        Chunk {
            seq,
            data: None,
            content_type: None,
            content_encoding: None,
            end: true,
        }
    }

    /// The chunk of a message (`Ok(None)`: the message carries none).
    pub fn of(members: &Map<String, Value>) -> Result<Option<Chunk>, ChunkError> {
        members.get(MEMBER).map(Chunk::from_value).transpose()
    }

    pub fn from_value(v: &Value) -> Result<Chunk, ChunkError> {
        let o = v.as_object().ok_or(ChunkError::Malformed)?;
        let seq = o
            .get("seq")
            .and_then(Value::as_u64)
            .ok_or(ChunkError::Malformed)?;
        let end = match o.get("end") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ChunkError::BadEnd),
        };
        let data = o.get("data").filter(|d| !d.is_null()).cloned();
        if data.is_none() && !end {
            return Err(ChunkError::NoData);
        }
        let string = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
        let content_encoding = string("contentEncoding");
        match content_encoding.as_deref() {
            None => {}
            Some("base64") => {
                if let Some(d) = &data {
                    let text = d.as_str().ok_or(ChunkError::BadBase64)?;
                    base64::engine::general_purpose::STANDARD
                        .decode(text)
                        .map_err(|_| ChunkError::BadBase64)?;
                }
            }
            Some(other) => return Err(ChunkError::UnknownEncoding(other.into())),
        }
        Ok(Chunk {
            seq,
            data,
            content_type: string("contentType"),
            content_encoding,
            end,
        })
    }

    pub fn to_value(&self) -> Value {
        let mut v = json!({ "seq": self.seq });
        if let Some(d) = &self.data {
            v["data"] = d.clone();
        }
        if let Some(t) = &self.content_type {
            v["contentType"] = t.as_str().into();
        }
        if let Some(e) = &self.content_encoding {
            v["contentEncoding"] = e.as_str().into();
        }
        if self.end {
            v["end"] = true.into();
        }
        v
    }

    /// The chunk's payload as bytes: decoded base64, UTF-8 of text, or the
    /// JSON text of any other value.
    pub fn bytes(&self) -> Vec<u8> {
        match (&self.data, self.content_encoding.as_deref()) {
            (None, _) => Vec::new(),
            (Some(Value::String(s)), Some("base64")) => base64::engine::general_purpose::STANDARD
                .decode(s)
                .unwrap_or_default(),
            (Some(Value::String(s)), _) => s.as_bytes().to_vec(),
            (Some(other), _) => other.to_string().into_bytes(),
        }
    }
}

/// What a [`Sequencer`] says of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The next chunk; `true` when it ends the stream.
    Next { end: bool },
    /// Chunks `expected..got` are missing (lost, or dropped for a slow
    /// consumer).
    Gap { expected: u64, got: u64 },
    /// A chunk already seen (or out of order).
    Stale { expected: u64, got: u64 },
    /// The stream has ended already.
    AfterEnd,
}

/// The order of one stream: O(1) memory, whatever its length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sequencer {
    next: u64,
    ended: bool,
}

impl Sequencer {
    /// Judges a chunk; only [`Order::Next`] advances the stream (and a
    /// gap, when `skip_gaps`: a reader that goes on after a loss).
    pub fn check(&mut self, chunk: &Chunk, skip_gaps: bool) -> Order {
        if self.ended {
            return Order::AfterEnd;
        }
        let expected = self.next;
        let order = match chunk.seq {
            s if s == expected => Order::Next { end: chunk.end },
            s if s > expected => Order::Gap { expected, got: s },
            s => Order::Stale { expected, got: s },
        };
        let advance = match order {
            Order::Next { .. } => true,
            Order::Gap { .. } => skip_gaps,
            _ => false,
        };
        if advance {
            // An end marker counts no chunk of its own.
            self.next = if chunk.end { chunk.seq } else { chunk.seq + 1 };
            self.ended = chunk.end;
        }
        order
    }

    /// Chunks accepted so far (= the `seq` of the next one).
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    pub fn ended(&self) -> bool {
        self.ended
    }
}

/// How a stream ended, for a [`Reassembler`].
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// `completed` (or an input end marker): every chunk arrived.
    Complete,
    /// `failed`, `cancelled` or an `error`: the stream broke off.
    Broken(Value),
}

/// A consumer's reader of one streamed output: feed it every message of the
/// invocation, in the order received; it collects the payload, notes gaps,
/// and knows how the stream ended. Memory: the payload (the consumer's to
/// bound) plus the gaps seen.
#[derive(Debug, Default)]
pub struct Reassembler {
    order: Sequencer,
    pub payload: Vec<u8>,
    pub chunks: u64,
    /// Missing ranges `[from, to)`.
    pub gaps: Vec<(u64, u64)>,
    pub ending: Option<Ending>,
}

impl Reassembler {
    /// Takes one message of the invocation (an `actionStatus` or `error`);
    /// returns the chunk's payload when it carried one.
    pub fn feed(&mut self, message: &Value) -> Result<Option<Vec<u8>>, ChunkError> {
        let members = message.as_object().ok_or(ChunkError::Malformed)?;
        let chunk = Chunk::of(members)?;
        let status = members.get("status").and_then(Value::as_str);
        let is_error = members.get("messageType").and_then(Value::as_str) == Some("error");
        let mut out = None;
        if let Some(chunk) = &chunk {
            match self.order.check(chunk, true) {
                Order::Gap { expected, got } => self.gaps.push((expected, got)),
                Order::Next { .. } => {}
                Order::Stale { .. } | Order::AfterEnd => return Ok(None),
            }
            if chunk.data.is_some() {
                let bytes = chunk.bytes();
                self.payload.extend_from_slice(&bytes);
                self.chunks += 1;
                out = Some(bytes);
            }
        }
        match status {
            _ if is_error => self.ending = Some(Ending::Broken(message.clone())),
            Some("completed") => self.ending = Some(Ending::Complete),
            Some("failed" | "cancelled" | "canceled") => {
                self.ending = Some(Ending::Broken(message.clone()))
            }
            _ if chunk.as_ref().is_some_and(|c| c.end) => self.ending = Some(Ending::Complete),
            _ => {}
        }
        Ok(out)
    }

    pub fn ended(&self) -> bool {
        self.ending.is_some()
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;

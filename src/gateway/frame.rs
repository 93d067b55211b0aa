//! What the dispatcher queues for a connection: a message as it goes out,
//! or one recipient's copy of a fan-out, and the bytes it counts as.

use std::sync::Arc;

use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use crate::lmos::splice::Prepared;

/// What the dispatcher queues for a connection.
#[derive(Debug)]
pub enum Frame {
    /// A message as it goes out.
    Text(Utf8Bytes),
    /// One recipient's copy of a fanned-out event or reading, written out
    /// by the connection. The dispatcher, one task for every consumer,
    /// hands over shared parts only; each copy's text is allocated and freed
    /// on the connection's thread. Written by the dispatcher, each copy was
    /// freed on another thread than the one that allocated it, and the
    /// allocator's locks were a tenth of a WebSocket fan-out's CPU (issue 16).
    Copy(RecipientCopy),
    /// A message of an invocation whose consumer asked for binary stream
    /// chunks (`"stream": {"binary": true}`): a chunk with base64 data goes
    /// out as a binary frame ([`crate::lmos::binary`]), anything else as
    /// text. Converted on the connection's task, like a copy.
    Chunk(Utf8Bytes),
}

/// See [`Frame::Copy`].
#[derive(Debug)]
pub struct RecipientCopy {
    pub prepared: Arc<Prepared>,
    /// The recipient's correlation ID, already JSON-encoded.
    pub correlation: Arc<str>,
    /// The fan-out's own `traceparent`, when tracing gave it one.
    pub traceparent: Option<Arc<str>>,
}

impl RecipientCopy {
    pub fn text(&self) -> String {
        self.prepared
            .with(&self.correlation, self.traceparent.as_deref())
    }
}

impl Frame {
    /// About the bytes it takes on the wire: what its queue counts. A
    /// fanned-out copy shares its message with the other recipients' until
    /// written, so this may count more than the memory held, never less
    /// than what the connection will hold once it writes it.
    pub fn wire_len(&self) -> usize {
        match self {
            Frame::Text(text) | Frame::Chunk(text) => text.len(),
            Frame::Copy(copy) => {
                copy.prepared.heap_bytes()
                    + copy.correlation.len()
                    + copy.traceparent.as_ref().map_or(0, |t| t.len())
                    + 32
            }
        }
    }

    /// As text, for peers that take no binary frames (HTTP consumers, the
    /// Kotlin dialect).
    pub fn into_text(self) -> Utf8Bytes {
        match self {
            Frame::Text(text) | Frame::Chunk(text) => text,
            Frame::Copy(copy) => copy.text().into(),
        }
    }

    /// The WebSocket message it goes out as.
    pub fn into_message(self) -> Message {
        match self {
            Frame::Chunk(text) => match crate::lmos::binary::encode(&text) {
                Some(frame) => Message::Binary(frame.into()),
                None => Message::Text(text),
            },
            other => Message::Text(other.into_text()),
        }
    }
}

impl From<String> for Frame {
    fn from(text: String) -> Frame {
        Frame::Text(text.into())
    }
}

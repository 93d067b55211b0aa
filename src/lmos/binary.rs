//! Binary stream chunks on a WebSocket (issue 48 item 3): an audio or image
//! chunk travels as one binary frame with its raw bytes instead of base64 in
//! JSON. No I/O.
//!
//! A binary frame is
//!
//! ```text
//! | header length: u32, big-endian | header: JSON text | payload: raw bytes |
//! ```
//!
//! The header is the whole LMOS message the chunk belongs to (an
//! `actionStatus` of the invocation, or a consumer's `actionInput`), with
//! its `stream` member as usual but without `data` and `contentEncoding`:
//! the payload is the chunk's data. So a frame names its stream (the
//! message's `correlationID`, `action`, `thingID`) and its place in it
//! (`stream.seq`), and carries the trace context like any message.
//!
//! Inside the sidecar a chunk is always the JSON form (`data` in base64,
//! `contentEncoding: "base64"`), so that the MQTT status topic,
//! `queryAction`, the store and other sidecars see one message: a binary
//! frame is turned into it when it arrives ([`decode`]) and a consumer
//! that asked for binary frames gets it turned back ([`encode`]).

use base64::Engine;
use serde_json::{Map, Value};

use super::stream::MEMBER;

/// The bytes of the header length.
const PREFIX: usize = 4;
const BASE64: &str = "base64";

/// Why a binary frame is not a chunk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BinaryFrameError {
    #[error("a binary frame starts with its header's length (4 bytes, big-endian); this one has {0} bytes")]
    TooShort(usize),
    #[error("the header length ({header} bytes) passes the end of the frame ({rest} bytes after the length)")]
    HeaderPastEnd { header: usize, rest: usize },
    #[error("the header is not a JSON object: {0}")]
    NotAnObject(String),
    #[error("the header has no `stream` object: a binary frame carries one stream chunk")]
    NoStream,
    #[error("the header's `stream` already has `data` (the payload is the chunk's data)")]
    DataInHeader,
}

/// The JSON form of a binary frame: the header with the payload as
/// `stream.data` in base64 and `stream.contentEncoding: "base64"`.
pub fn decode(frame: &[u8]) -> Result<String, BinaryFrameError> {
    let (header, payload) = parts(frame)?;
    let mut message: Map<String, Value> =
        serde_json::from_slice(header).map_err(|e| BinaryFrameError::NotAnObject(e.to_string()))?;
    let Some(Value::Object(stream)) = message.get_mut(MEMBER) else {
        return Err(BinaryFrameError::NoStream);
    };
    if stream.contains_key("data") {
        return Err(BinaryFrameError::DataInHeader);
    }
    let data = base64::engine::general_purpose::STANDARD.encode(payload);
    stream.insert("data".into(), data.into());
    stream.insert("contentEncoding".into(), BASE64.into());
    Ok(Value::Object(message).to_string())
}

/// The binary frame of a message whose `stream` chunk carries base64 data;
/// `None` for any other message (it goes out as text).
pub fn encode(text: &str) -> Option<Vec<u8>> {
    // Most messages carry no binary chunk: they are not parsed.
    if !text.contains("\"contentEncoding\"") {
        return None;
    }
    let message: Value = serde_json::from_str(text).ok()?;
    encode_value(message)
}

/// [`encode`] of a message already parsed.
pub fn encode_value(mut message: Value) -> Option<Vec<u8>> {
    let stream = message.get_mut(MEMBER)?.as_object_mut()?;
    let payload = binary_data(stream)?;
    stream.remove("data");
    stream.remove("contentEncoding");
    Some(frame(&message, &payload))
}

/// A stream chunk as raw bytes, for the MQTT stream topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawChunk {
    pub seq: u64,
    pub content_type: Option<String>,
    /// The decoded data; empty for the end marker.
    pub payload: Vec<u8>,
    pub end: bool,
}

/// The raw form of a message's chunk: one with base64 data, or the end
/// marker; `None` for a message with neither (text chunks included).
pub fn raw_chunk(text: &str) -> Option<RawChunk> {
    let message: Value = serde_json::from_str(text).ok()?;
    let stream = message.get(MEMBER)?.as_object()?;
    let seq = stream.get("seq")?.as_u64()?;
    let content_type = stream
        .get("contentType")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if stream.get("end") == Some(&Value::Bool(true)) {
        return Some(RawChunk {
            seq,
            content_type,
            payload: Vec::new(),
            end: true,
        });
    }
    let payload = binary_data(stream)?;
    Some(RawChunk {
        seq,
        content_type,
        payload,
        end: false,
    })
}

/// A `stream` member's data, decoded, when it is base64.
fn binary_data(stream: &Map<String, Value>) -> Option<Vec<u8>> {
    if stream.get("contentEncoding").and_then(Value::as_str) != Some(BASE64) {
        return None;
    }
    let data = stream.get("data")?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(data).ok()
}

/// A binary frame of `header` (a message whose `stream` has no `data`) and
/// `payload`.
pub fn frame(header: &Value, payload: &[u8]) -> Vec<u8> {
    let header = header.to_string();
    let mut out = Vec::with_capacity(PREFIX + header.len() + payload.len());
    // A header is a message the sidecar took in, far below 4 GiB.
    out.extend_from_slice(&(header.len() as u32).to_be_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(payload);
    out
}

/// A binary frame split into its header (parsed) and payload: what a
/// consumer does with one.
pub fn split(frame: &[u8]) -> Result<(Value, &[u8]), BinaryFrameError> {
    let (header, payload) = parts(frame)?;
    let header =
        serde_json::from_slice(header).map_err(|e| BinaryFrameError::NotAnObject(e.to_string()))?;
    Ok((header, payload))
}

/// A frame's header text and payload.
fn parts(frame: &[u8]) -> Result<(&[u8], &[u8]), BinaryFrameError> {
    let (len, rest) = frame
        .split_first_chunk::<PREFIX>()
        .ok_or(BinaryFrameError::TooShort(frame.len()))?;
    let header = u32::from_be_bytes(*len) as usize;
    if header > rest.len() {
        return Err(BinaryFrameError::HeaderPastEnd {
            header,
            rest: rest.len(),
        });
    }
    Ok(rest.split_at(header))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn chunk(payload: &[u8]) -> Value {
        json!({
            "thingID": "urn:voice", "messageID": "m1", "messageType": "actionStatus",
            "action": "speak", "status": "running", "correlationID": "v1",
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "stream": {"seq": 3, "contentType": "audio/wav",
                       "data": base64::engine::general_purpose::STANDARD.encode(payload),
                       "contentEncoding": "base64"},
        })
    }

    #[test]
    fn a_chunk_goes_out_as_a_frame_and_comes_back_as_the_same_message() {
        let payload: Vec<u8> = (0..=255).collect();
        let message = chunk(&payload);
        let frame = encode(&message.to_string()).expect("a binary chunk");
        let (header, raw) = split(&frame).unwrap();
        assert_eq!(raw, &payload[..]);
        assert_eq!(
            header["stream"],
            json!({"seq": 3, "contentType": "audio/wav"})
        );
        assert_eq!(header["correlationID"], "v1");
        assert_eq!(header["traceparent"], message["traceparent"]);
        let back: Value = serde_json::from_str(&decode(&frame).unwrap()).unwrap();
        assert_eq!(back, message);
    }

    #[test]
    fn text_chunks_end_markers_and_other_messages_stay_text() {
        let text = json!({"messageType": "actionStatus", "stream": {"seq": 0, "data": "The "}});
        assert_eq!(encode(&text.to_string()), None);
        let end = json!({"messageType": "actionStatus", "stream": {"seq": 4, "end": true}});
        assert_eq!(encode(&end.to_string()), None);
        assert_eq!(
            encode(r#"{"messageType":"event","contentEncoding":"base64"}"#),
            None
        );
        assert_eq!(encode("not json, \"contentEncoding\""), None);
    }

    #[test]
    fn raw_chunks_are_binary_chunks_and_end_markers() {
        let raw = raw_chunk(&chunk(b"abc").to_string()).unwrap();
        assert_eq!(raw.payload, b"abc");
        assert_eq!((raw.seq, raw.end), (3, false));
        assert_eq!(raw.content_type.as_deref(), Some("audio/wav"));
        let end = json!({"status": "completed", "stream": {"seq": 9, "end": true}});
        let raw = raw_chunk(&end.to_string()).unwrap();
        assert_eq!((raw.seq, raw.end, raw.payload.len()), (9, true, 0));
        let text = json!({"stream": {"seq": 0, "data": "The "}});
        assert_eq!(raw_chunk(&text.to_string()), None);
        assert_eq!(raw_chunk(r#"{"status":"running"}"#), None);
    }

    #[test]
    fn an_empty_payload_is_a_chunk_of_no_bytes() {
        let frame = frame(&json!({"stream": {"seq": 0}}), &[]);
        let back: Value = serde_json::from_str(&decode(&frame).unwrap()).unwrap();
        assert_eq!(
            back["stream"],
            json!({"seq": 0, "data": "", "contentEncoding": "base64"})
        );
    }

    #[test]
    fn malformed_frames_say_what_is_wrong() {
        assert_eq!(decode(&[0, 0]), Err(BinaryFrameError::TooShort(2)));
        assert_eq!(
            decode(&[0, 0, 0, 9, b'{', b'}']),
            Err(BinaryFrameError::HeaderPastEnd { header: 9, rest: 2 })
        );
        assert!(matches!(
            decode(&[0, 0, 0, 1, b'x']),
            Err(BinaryFrameError::NotAnObject(_))
        ));
        assert!(matches!(
            decode(&[0, 0, 0, 2, b'[', b']']),
            Err(BinaryFrameError::NotAnObject(_))
        ));
        let no_stream = frame(&json!({"messageType": "actionInput"}), b"x");
        assert_eq!(decode(&no_stream), Err(BinaryFrameError::NoStream));
        let data = frame(&json!({"stream": {"seq": 0, "data": "x"}}), b"x");
        assert_eq!(decode(&data), Err(BinaryFrameError::DataInHeader));
        // A length past u32's range on a 64-bit host cannot be written: the
        // largest is 4 GiB - 1, and it fails as past the end.
        assert!(matches!(
            decode(&[0xff, 0xff, 0xff, 0xff]),
            Err(BinaryFrameError::HeaderPastEnd { .. })
        ));
    }
}

//! The resume history's entries as the store keeps them: a row per Thing
//! per dispatcher turn (a "chunk"), protobuf, `StoredChunk` below. A row
//! per entry, as JSON, was an insert and a delete in the store's B-tree and
//! a serialization per event: a fifth of a WebSocket fan-out's CPU.
//!
//! Entries are written from borrowed parts ([`encode_entry`]), in the wire
//! format the derived types define, so that recording an event copies its
//! text once and allocates nothing of its own; the derived types read them
//! back. Rows written before chunks hold one entry as JSON ([`Legacy`]).

use prost::encoding::{encode_key, encode_varint, sint64, uint64, WireType};
use prost::Message;
use serde::Deserialize;

use crate::lmos::splice::Prepared;

/// One entry.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct StoredEntry {
    /// Its place in the order of all Things' events.
    #[prost(uint64, tag = "1")]
    pub seq: u64,
    #[prost(string, tag = "2")]
    pub event: String,
    /// The event's time, µs since the epoch (see `Entry::time`).
    #[prost(sint64, tag = "3")]
    pub time: i64,
    /// When it arrived, µs since the epoch.
    #[prost(sint64, tag = "4")]
    pub wall: i64,
    /// The Thing's latest event time before this one: its `complete_since`
    /// after a restart when this is the oldest entry left.
    #[prost(sint64, tag = "5")]
    pub before: i64,
    #[prost(string, tag = "6")]
    pub tail: String,
    #[prost(string, optional, tag = "7")]
    pub traceparent: Option<String>,
    #[prost(string, optional, tag = "8")]
    pub tracestate: Option<String>,
    #[prost(string, optional, tag = "9")]
    pub message_type: Option<String>,
    #[prost(string, optional, tag = "10")]
    pub message_id: Option<String>,
    #[prost(string, optional, tag = "11")]
    pub timestamp: Option<String>,
}

/// A row: a Thing's entries of one turn, oldest first. Its entries are
/// field 1 one after another, so that a row cut at an entry's start is a
/// row too.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct StoredChunk {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<StoredEntry>,
}

/// An entry read back.
pub(super) struct ReadEntry {
    pub seq: u64,
    pub event: String,
    pub time: i64,
    pub wall: i64,
    pub before: i64,
    pub message: Prepared,
}

impl From<StoredEntry> for ReadEntry {
    fn from(e: StoredEntry) -> ReadEntry {
        ReadEntry {
            seq: e.seq,
            event: e.event,
            time: e.time,
            wall: e.wall,
            before: e.before,
            message: Prepared::from_stored(
                e.tail,
                e.traceparent,
                e.tracestate,
                e.message_type,
                e.message_id,
                e.timestamp,
            ),
        }
    }
}

/// What [`encode_entry`] writes, borrowed.
pub(super) struct EntryRef<'a> {
    pub seq: u64,
    pub event: &'a str,
    pub time: i64,
    pub wall: i64,
    pub before: i64,
    pub message: &'a Prepared,
}

fn put_str(out: &mut Vec<u8>, tag: u32, s: &str) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

/// Appends `entry` to a chunk's bytes as one more `StoredChunk.entries`;
/// `scratch` is reused for its body.
pub(super) fn encode_entry(out: &mut Vec<u8>, entry: &EntryRef<'_>, scratch: &mut Vec<u8>) {
    scratch.clear();
    let m = entry.message;
    // Proto3 leaves zeros and empty strings out; a decoder takes them either way.
    uint64::encode(1, &entry.seq, scratch);
    put_str(scratch, 2, entry.event);
    sint64::encode(3, &entry.time, scratch);
    sint64::encode(4, &entry.wall, scratch);
    sint64::encode(5, &entry.before, scratch);
    put_str(scratch, 6, m.tail());
    let optional = [
        (7, &m.traceparent),
        (8, &m.tracestate),
        (9, &m.message_type),
        (10, &m.message_id),
        (11, &m.timestamp),
    ];
    for (tag, value) in optional {
        if let Some(s) = value {
            put_str(scratch, tag, s);
        }
    }
    encode_key(1, WireType::LengthDelimited, out);
    encode_varint(scratch.len() as u64, out);
    out.extend_from_slice(scratch);
}

/// A row written before chunks: one entry, JSON, its sequence number in
/// the key.
#[derive(Deserialize)]
struct Legacy {
    event: String,
    time: i64,
    wall: i64,
    before: i64,
    message: Prepared,
}

/// The entries a row holds; `None` when it is unreadable. `key_seq` is the
/// sequence number of its key (a legacy row's entry's).
pub(super) fn decode_row(value: &[u8], key_seq: u64) -> Option<Vec<ReadEntry>> {
    if value.first() == Some(&b'{') {
        let legacy: Legacy = serde_json::from_slice(value).ok()?;
        return Some(vec![ReadEntry {
            seq: key_seq,
            event: legacy.event,
            time: legacy.time,
            wall: legacy.wall,
            before: legacy.before,
            message: legacy.message,
        }]);
    }
    let chunk = StoredChunk::decode(value).ok()?;
    Some(chunk.entries.into_iter().map(ReadEntry::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(trace: bool) -> Prepared {
        let text = if trace {
            r#"{"thingID":"urn:t","messageID":"m1","messageType":"event","event":"e","data":{"x":"é"},"timestamp":"2025-01-20T19:00:00Z","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"a=b"}"#
        } else {
            r#"{"thingID":"urn:t","messageID":"m2","messageType":"event","event":"e","data":0}"#
        };
        Prepared::from_payload(text.as_bytes(), "urn:t").unwrap()
    }

    #[test]
    fn entries_written_from_parts_are_read_by_the_generated_types() {
        let (a, b) = (message(true), message(false));
        let mut row = Vec::new();
        let mut scratch = Vec::new();
        let refs = [
            EntryRef {
                seq: 7,
                event: "e",
                time: -5,
                wall: 1_737_399_600_000_000,
                before: i64::MIN,
                message: &a,
            },
            EntryRef {
                seq: 0,
                event: "",
                time: 0,
                wall: 0,
                before: 0,
                message: &b,
            },
        ];
        let mut starts = Vec::new();
        for r in &refs {
            starts.push(row.len());
            encode_entry(&mut row, r, &mut scratch);
        }
        let read = decode_row(&row, 99).unwrap();
        assert_eq!(read.len(), 2);
        for (e, (r, original)) in read.iter().zip(refs.iter().zip([&a, &b])) {
            assert_eq!((e.seq, e.event.as_str()), (r.seq, r.event));
            assert_eq!((e.time, e.wall, e.before), (r.time, r.wall, r.before));
            let prepared = &e.message;
            assert_eq!(prepared.with("\"c\"", None), original.with("\"c\"", None));
            assert_eq!(prepared.traceparent, original.traceparent);
            assert_eq!(prepared.tracestate, original.tracestate);
            assert_eq!(prepared.message_id, original.message_id);
            assert_eq!(prepared.message_type, original.message_type);
            assert_eq!(prepared.timestamp, original.timestamp);
        }
        // A row cut where an entry starts is a row of the entries after it.
        let rest = decode_row(&row[starts[1]..], 99).unwrap();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].message.message_id.as_deref(), Some("m2"));
        assert!(
            decode_row(&row[..row.len() - 1], 99).is_none(),
            "a torn row is unreadable"
        );
    }

    #[test]
    fn a_row_from_before_chunks_is_one_entry_numbered_by_its_key() {
        let text = r#"{"event":"e","time":1,"wall":2,"before":3,"message":{"tail":"\"thingID\":\"urn:t\"}","traceparent":null,"tracestate":null,"message_type":"event","message_id":"m","timestamp":null}}"#;
        let read = decode_row(text.as_bytes(), 42).unwrap();
        assert_eq!(read.len(), 1);
        let e = &read[0];
        assert_eq!((e.seq, e.time, e.wall, e.before), (42, 1, 2, 3));
        assert_eq!(
            e.message.with("\"c\"", None),
            r#"{"correlationID":"c","thingID":"urn:t"}"#
        );
    }
}

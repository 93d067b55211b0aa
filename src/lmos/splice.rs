//! Fan-out without re-serializing per subscriber.
//!
//! Every subscriber of an event or observed property gets the same message
//! with its own `correlationID` (its subscribe request's). The message is
//! serialized once without a correlation ID; each subscriber's copy is that
//! text with `"correlationID":"...",` spliced in after the opening brace.

use std::sync::OnceLock;

use serde_json::{Map, Value};

use super::member::{CORRELATION_ID, MESSAGE_ID, THING_ID};

/// A message serialized once for many recipients. The resume history's store
/// keeps its parts ([`Prepared::tail`], [`Prepared::from_stored`]); rows it
/// wrote before it kept them in chunks hold it as JSON (`Deserialize`).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Prepared {
    /// The canonical JSON text minus its opening brace, without
    /// `correlationID`, `traceparent` and `tracestate`, e.g. `"thingID":"x"}`.
    tail: String,
    /// The trace context and identity it arrived with, for tracing.
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    pub message_type: Option<String>,
    pub message_id: Option<String>,
    /// Its `timestamp`, as written (kept in the text too).
    pub timestamp: Option<String>,
    /// `traceparent` and `tracestate` as the members every recipient's copy
    /// carries, `,"traceparent":"…"`, written by the first one: checking
    /// them for escapes per recipient was 1.5 % of a fan-out's CPU. Set the
    /// trace context before any copy is made.
    #[serde(skip)]
    trace_members: OnceLock<Box<str>>,
}

/// What [`Prepared::from_raw`] keeps beside the text.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    pub message_type: String,
    pub message_id: String,
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    pub timestamp: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    #[error("payload is not JSON: {0}")]
    NotJson(String),
    #[error("payload is not a JSON object")]
    NotAnObject,
}

impl Prepared {
    /// Prepares a payload as published by an agent. The envelope is written in
    /// the table spelling, any correlation ID of the agent's is dropped (each
    /// subscriber gets its own), and a missing `thingID` is taken from the
    /// topic the payload arrived on. Every other member is kept as it was.
    pub fn from_payload(payload: &[u8], thing_id: &str) -> Result<Prepared, PrepareError> {
        let value: Value =
            serde_json::from_slice(payload).map_err(|e| PrepareError::NotJson(e.to_string()))?;
        let Value::Object(map) = value else {
            return Err(PrepareError::NotAnObject);
        };
        Ok(Prepared::from_members(&map, thing_id))
    }

    /// From a message's members, which it leaves as they are: the parsed
    /// message is still to be read by its consumer (checking a published
    /// event took a deep copy of every message for this, issue 16).
    pub fn from_members(map: &Map<String, Value>, thing_id: &str) -> Prepared {
        let skipped = |k: &str| {
            matches!(k, "traceparent" | "tracestate")
                || k == CORRELATION_ID.canonical
                || k == CORRELATION_ID.alternative
                || k == THING_ID.alternative
                || k == MESSAGE_ID.alternative
        };
        let mut tail = Vec::with_capacity(256);
        let mut member = |key: &str, value: &Value| {
            if !tail.is_empty() {
                tail.push(b',');
            }
            // Writing a string or a `Value` into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut tail, key);
            tail.push(b':');
            let _ = serde_json::to_writer(&mut tail, value);
        };
        for (key, value) in map {
            if !skipped(key) {
                member(key, value);
            }
        }
        // An envelope member in the other spelling goes last, in the
        // table's; unless the message has both, when that one is dropped.
        for aliases in [&THING_ID, &MESSAGE_ID] {
            if !map.contains_key(aliases.canonical) {
                if let Some(value) = map.get(aliases.alternative) {
                    member(aliases.canonical, value);
                }
            }
        }
        if !map.contains_key(THING_ID.canonical) && !map.contains_key(THING_ID.alternative) {
            member(THING_ID.canonical, &Value::from(thing_id));
        }
        tail.push(b'}');
        let string = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
        Prepared {
            // serde_json writes UTF-8.
            tail: String::from_utf8(tail).unwrap_or_default(),
            traceparent: string("traceparent"),
            tracestate: string("tracestate"),
            message_type: string("messageType"),
            message_id: string(MESSAGE_ID.canonical).or_else(|| string(MESSAGE_ID.alternative)),
            timestamp: string("timestamp"),
            trace_members: OnceLock::new(),
        }
    }

    /// As [`Prepared::from_members`], from members as they were written:
    /// each key decoded and its value's JSON text, in order. For a message
    /// already known to hold its envelope in the table's spelling and no
    /// correlation ID (`gateway::published`'s plain path): the values go
    /// into the text as they came instead of written anew. `capacity`: the
    /// text's length, or more (the message's whole length will do).
    pub fn from_raw<'a>(
        members: impl IntoIterator<Item = (&'a str, &'a str)>,
        identity: Identity,
        capacity: usize,
    ) -> Prepared {
        let mut tail = String::with_capacity(capacity);
        for (key, raw) in members {
            if matches!(key, "traceparent" | "tracestate") {
                continue;
            }
            if !tail.is_empty() {
                tail.push(',');
            }
            push_json_string(&mut tail, key);
            tail.push(':');
            tail.push_str(raw);
        }
        tail.push('}');
        Prepared {
            tail,
            traceparent: identity.traceparent,
            tracestate: identity.tracestate,
            message_type: Some(identity.message_type),
            message_id: Some(identity.message_id),
            timestamp: identity.timestamp,
            trace_members: OnceLock::new(),
        }
    }

    /// The text after the envelope's spliced members (see [`Prepared::with`]),
    /// as the resume history's store keeps it.
    pub fn tail(&self) -> &str {
        &self.tail
    }

    /// A message as the resume history's store kept it: `tail` as
    /// [`Prepared::tail`] gave it.
    pub fn from_stored(
        tail: String,
        traceparent: Option<String>,
        tracestate: Option<String>,
        message_type: Option<String>,
        message_id: Option<String>,
        timestamp: Option<String>,
    ) -> Prepared {
        Prepared {
            tail,
            traceparent,
            tracestate,
            message_type,
            message_id,
            timestamp,
            trace_members: OnceLock::new(),
        }
    }

    /// Heap memory it holds, for the resume history's accounting.
    pub fn heap_bytes(&self) -> usize {
        let len = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
        // The trace context twice: once more as the copies' members, which
        // the first copy writes.
        self.tail.capacity()
            + 2 * (len(&self.traceparent) + len(&self.tracestate))
            + 32
            + len(&self.message_type)
            + len(&self.message_id)
            + len(&self.timestamp)
    }

    /// The message for one recipient. `correlation_json` is the correlation ID
    /// already encoded as a JSON string (see [`json_string`]), so that it is
    /// escaped once per subscription rather than once per message.
    pub fn with_correlation(&self, correlation_json: &str) -> String {
        self.with(correlation_json, None)
    }

    /// As [`Prepared::with_correlation`], with the recipient's own
    /// `traceparent` when tracing gave it one (else the original, if any).
    pub fn with(&self, correlation_json: &str, traceparent: Option<&str>) -> String {
        const OPEN: &str = "{\"correlationID\":";
        let comma = if self.tail == "}" { "" } else { "," };
        let Some(traceparent) = traceparent else {
            let trace = self.trace_members.get_or_init(|| {
                let (tp, ts) = (self.traceparent.as_deref(), self.tracestate.as_deref());
                let mut members = String::with_capacity(trace_members_len(tp, ts));
                push_trace_members(&mut members, tp, ts);
                members.into()
            });
            // Of the exact length: its bytes become the frame's without
            // another allocation.
            let parts = [OPEN, correlation_json, trace, comma, &self.tail];
            let mut out = String::with_capacity(parts.iter().map(|p| p.len()).sum());
            for part in parts {
                out.push_str(part);
            }
            return out;
        };
        // The fan-out's own `traceparent` (tracing on).
        let tracestate = self.tracestate.as_deref();
        let trace_len = trace_members_len(Some(traceparent), tracestate);
        let len = OPEN.len() + correlation_json.len() + trace_len + comma.len() + self.tail.len();
        let mut out = String::with_capacity(len);
        out.push_str(OPEN);
        out.push_str(correlation_json);
        push_trace_members(&mut out, Some(traceparent), tracestate);
        out.push_str(comma);
        out.push_str(&self.tail);
        out
    }
}

const TRACEPARENT_MEMBER: &str = ",\"traceparent\":";
const TRACESTATE_MEMBER: &str = ",\"tracestate\":";

/// The length of [`push_trace_members`]'s text when nothing needs escaping,
/// as trace context does not.
fn trace_members_len(traceparent: Option<&str>, tracestate: Option<&str>) -> usize {
    let member = |key: &str, value: Option<&str>| value.map_or(0, |v| key.len() + v.len() + 2);
    member(TRACEPARENT_MEMBER, traceparent) + member(TRACESTATE_MEMBER, tracestate)
}

/// `,"traceparent":"…","tracestate":"…"`, each member present when given.
fn push_trace_members(out: &mut String, traceparent: Option<&str>, tracestate: Option<&str>) {
    for (key, value) in [
        (TRACEPARENT_MEMBER, traceparent),
        (TRACESTATE_MEMBER, tracestate),
    ] {
        if let Some(v) = value {
            out.push_str(key);
            push_json_string(out, v);
        }
    }
}

/// The payload with its `traceparent` replaced (or added), everything else,
/// spelling and order included, as it was. `None` if it is not a JSON object.
pub fn set_traceparent(payload: &[u8], traceparent: &str) -> Option<String> {
    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(payload) else {
        return None;
    };
    map.insert("traceparent".into(), traceparent.into());
    Some(text(&Value::Object(map)))
}

/// A value as compact JSON text, as `Value::to_string` writes it, but
/// written straight into a byte buffer: `Display` goes through a
/// `fmt::Formatter`, a dynamic call per token, and was a quarter of what
/// checking a published event cost (issue 16).
pub fn text(value: &Value) -> String {
    // Serializing a `Value` cannot fail: its keys are strings.
    serde_json::to_string(value).unwrap_or_default()
}

/// The value of a top-level string member of a message the sidecar wrote
/// (compact JSON), without parsing it: for counting what goes out.
pub fn peek_member<'a>(text: &'a str, member: &str) -> Option<&'a str> {
    let key = format!("\"{member}\":\"");
    let start = text.find(&key)? + key.len();
    let end = text[start..].find('"')?;
    Some(&text[start..start + end])
}

/// A string encoded as a JSON string literal, quotes included.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_json_string(&mut out, s);
    out
}

/// Appends `s` as a JSON string literal, quotes included, escaped as
/// serde_json escapes it.
pub fn push_json_string(out: &mut String, s: &str) {
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        // Trace context, IDs and names: nothing to escape.
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    out.push_str(&text(&Value::String(s.to_owned())));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelope_spellings_end_as_the_table_writes_them() {
        let cases = [
            // Both spellings: the other one is dropped; the correlation
            // ID and the trace context are not part of the text.
            (
                r#"{"thingID":"a","thingId":"b","messageId":"m","messageID":"n","correlationID":"c","correlationId":"d","traceparent":"tp","tracestate":"ts","é\n":"\u0001"}"#,
                r#""thingID":"a","messageID":"n","é\n":"\u0001"}"#,
            ),
            // Only the other spelling: the member goes last, renamed.
            (
                r#"{"messageId":"m","x":1,"thingId":"t2","traceparent":7}"#,
                r#""x":1,"thingID":"t2","messageID":"m"}"#,
            ),
        ];
        for (payload, tail) in cases {
            let p = Prepared::from_payload(payload.as_bytes(), "topic-thing").unwrap();
            assert_eq!(p.tail, tail, "{payload}");
        }
        let p = Prepared::from_payload(cases[0].0.as_bytes(), "t").unwrap();
        assert_eq!(
            (
                p.traceparent.as_deref(),
                p.tracestate.as_deref(),
                p.message_id.as_deref()
            ),
            (Some("tp"), Some("ts"), Some("n"))
        );
        let p = Prepared::from_payload(cases[1].0.as_bytes(), "t").unwrap();
        assert_eq!((p.traceparent, p.message_id.as_deref()), (None, Some("m")));
    }

    #[test]
    fn each_recipient_gets_its_own_correlation_id_and_everything_else() {
        let payload = br#"{"thingId":"urn:t","messageId":"m","correlationId":"agent","messageType":"event","event":"e","data":{"q":"\"x\""},"timestamp":"2025-01-20T19:00:00Z","x-extra":true}"#;
        let p = Prepared::from_payload(payload, "ignored").unwrap();
        let a: Value =
            serde_json::from_str(&p.with_correlation(&json_string("sub-\"1\""))).unwrap();
        assert_eq!(
            a,
            json!({"correlationID": "sub-\"1\"", "thingID": "urn:t", "messageID": "m", "messageType": "event", "event": "e", "data": {"q": "\"x\""}, "timestamp": "2025-01-20T19:00:00Z", "x-extra": true})
        );
    }

    #[test]
    fn a_missing_thing_id_comes_from_the_topic() {
        let p = Prepared::from_payload(br#"{"messageType":"event"}"#, "urn:from-topic").unwrap();
        let v: Value = serde_json::from_str(&p.with_correlation("\"c\"")).unwrap();
        assert_eq!(v["thingID"], "urn:from-topic");
    }

    #[test]
    fn an_empty_object_still_gives_valid_json() {
        let map = Map::new();
        let p = Prepared::from_members(&map, "t");
        let v: Value = serde_json::from_str(&p.with_correlation("\"c\"")).unwrap();
        assert_eq!(v, json!({"correlationID": "c", "thingID": "t"}));
    }

    #[test]
    fn each_recipient_can_get_its_own_traceparent() {
        let payload = br#"{"thingID":"t","messageType":"event","traceparent":"00-aa-bb-01","tracestate":"k=v"}"#;
        let p = Prepared::from_payload(payload, "t").unwrap();
        assert_eq!(p.traceparent.as_deref(), Some("00-aa-bb-01"));
        let kept: Value = serde_json::from_str(&p.with_correlation("\"c\"")).unwrap();
        assert_eq!(
            (kept["traceparent"].as_str(), kept["tracestate"].as_str()),
            (Some("00-aa-bb-01"), Some("k=v"))
        );
        let own: Value = serde_json::from_str(&p.with("\"c\"", Some("00-aa-cc-01"))).unwrap();
        assert_eq!(
            (own["traceparent"].as_str(), own["tracestate"].as_str()),
            (Some("00-aa-cc-01"), Some("k=v"))
        );
    }

    #[test]
    fn set_traceparent_keeps_everything_else() {
        let out = set_traceparent(br#"{"thingId":"t","traceparent":"old","x":1}"#, "new").unwrap();
        assert_eq!(out, r#"{"thingId":"t","traceparent":"new","x":1}"#);
        assert!(set_traceparent(b"[1]", "new").is_none());
    }

    #[test]
    fn strings_are_encoded_as_serde_json_encodes_them() {
        for s in [
            "",
            "plain",
            "00-aa-bb-01",
            "q\"uote",
            "back\\slash",
            "nl\n",
            "\u{1}",
            "é€😀",
            "\u{7f}",
        ] {
            assert_eq!(json_string(s), Value::String(s.into()).to_string(), "{s:?}");
        }
    }

    #[test]
    fn text_is_what_display_writes() {
        let v = json!({"b": [1, 2.5, null, true], "a": {"q": "\"\u{1}é"}, "n": -3});
        assert_eq!(text(&v), v.to_string());
    }

    #[test]
    fn members_can_be_peeked() {
        let t = r#"{"correlationID":"c","messageType":"error","type":"x#y"}"#;
        assert_eq!(peek_member(t, "messageType"), Some("error"));
        assert_eq!(peek_member(t, "type"), Some("x#y"));
        assert_eq!(peek_member(t, "nope"), None);
    }

    #[test]
    fn garbage_is_refused() {
        assert!(matches!(
            Prepared::from_payload(b"nope", "t"),
            Err(PrepareError::NotJson(_))
        ));
        assert_eq!(
            Prepared::from_payload(b"[1]", "t").unwrap_err(),
            PrepareError::NotAnObject
        );
    }
}

//! Fan-out without re-serializing per subscriber.
//!
//! Every subscriber of an event or observed property gets the same message
//! with its own `correlationID` (its subscribe request's). The message is
//! serialized once without a correlation ID; each subscriber's copy is that
//! text with `"correlationID":"...",` spliced in after the opening brace.

use serde_json::{Map, Value};

use super::message::canonicalize_envelope;

/// A message serialized once for many recipients.
#[derive(Debug, Clone)]
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
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    #[error("payload is not JSON: {0}")]
    NotJson(String),
    #[error("payload is not a JSON object")]
    NotAnObject,
}

fn take_string(map: &Map<String, Value>, key: &str) -> Option<String> {
    map.get(key).and_then(Value::as_str).map(str::to_owned)
}

impl Prepared {
    /// Prepares a payload as published by an agent. The envelope is written in
    /// the table spelling, any correlation ID of the agent's is dropped (each
    /// subscriber gets its own), and a missing `thingID` is taken from the
    /// topic the payload arrived on. Every other member is kept as it was.
    pub fn from_payload(payload: &[u8], thing_id: &str) -> Result<Prepared, PrepareError> {
        let value: Value =
            serde_json::from_slice(payload).map_err(|e| PrepareError::NotJson(e.to_string()))?;
        let Value::Object(mut map) = value else {
            return Err(PrepareError::NotAnObject);
        };
        Ok(Prepared::from_map(&mut map, thing_id))
    }

    pub fn from_map(map: &mut Map<String, Value>, thing_id: &str) -> Prepared {
        canonicalize_envelope(map);
        map.shift_remove("correlationID");
        let traceparent = map
            .shift_remove("traceparent")
            .and_then(|v| v.as_str().map(str::to_owned));
        if !map.contains_key("thingID") {
            map.insert("thingID".into(), thing_id.into());
        }
        let tracestate = map
            .shift_remove("tracestate")
            .and_then(|v| v.as_str().map(str::to_owned));
        let message_type = take_string(map, "messageType");
        let message_id = take_string(map, "messageID");
        let timestamp = take_string(map, "timestamp");
        let mut tail = text(&Value::Object(std::mem::take(map)));
        tail.remove(0);
        Prepared {
            tail,
            traceparent,
            tracestate,
            message_type,
            message_id,
            timestamp,
        }
    }

    /// Heap memory it holds, for the resume history's accounting.
    pub fn heap_bytes(&self) -> usize {
        let len = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
        self.tail.capacity()
            + len(&self.traceparent)
            + len(&self.tracestate)
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
        let traceparent = traceparent.or(self.traceparent.as_deref());
        let tracestate = self.tracestate.as_deref();
        // Written straight into the one buffer: this runs once per
        // recipient, and encoding each value into a string of its own first
        // was most of a WebSocket delivery's cost (issue 16).
        let mut out = String::with_capacity(
            64 + correlation_json.len()
                + traceparent.map_or(0, str::len)
                + tracestate.map_or(0, str::len)
                + self.tail.len(),
        );
        out.push_str("{\"correlationID\":");
        out.push_str(correlation_json);
        if let Some(t) = traceparent {
            out.push_str(",\"traceparent\":");
            push_json_string(&mut out, t);
        }
        if let Some(t) = tracestate {
            out.push_str(",\"tracestate\":");
            push_json_string(&mut out, t);
        }
        if self.tail != "}" {
            out.push(',');
        }
        out.push_str(&self.tail);
        out
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
        let mut map = Map::new();
        let p = Prepared::from_map(&mut map, "t");
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

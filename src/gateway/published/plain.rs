//! The common publication, checked without building a JSON tree: an event
//! or property reading in the draft's spelling (`thingID`, `messageID`, no
//! correlation ID, not the Kotlin dialect), as agents publish them. Its
//! members are read as written, only the envelope's strings decoded, and
//! the fan-out's text is made of them as they came.
//!
//! Checking every event for WebSocket consumers parsed it into a tree,
//! wrote the tree back out as the fan-out's text and took it apart again
//! for the reader: a seventh of the process's CPU in the fan-out bench,
//! which MQTT subscribers never pay (issue 16). This path accepts only
//! what the full check ([`super::check`]) accepts, and returns `None` for
//! everything else, including whatever it is not sure of; the full check
//! then decides, and alone words refusals.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::Expected;
use crate::lmos::splice::{Identity, Prepared};

/// A JSON string's value: borrowed when it holds no escape (most of the
/// envelope's, compared and dropped), decoded otherwise; `None` for
/// anything but a string.
fn json_str(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str(raw).ok().map(Cow::Owned)
}

/// Members that send a message to the full check: the envelope's other
/// spellings and the correlation ID (renamed, merged or dropped there),
/// and what marks the Kotlin dialect.
const NOT_PLAIN: [&str; 7] = [
    "thingId",
    "messageId",
    "correlationID",
    "correlationId",
    "lastEvent",
    "lastPropertyReading",
    "property",
];

/// The publication's fan-out form, if it is a plain one the full check
/// would accept for `expected`.
pub(super) fn check(payload: &[u8], expected: Expected<'_>) -> Option<Prepared> {
    let text = std::str::from_utf8(payload).ok()?;
    // A `\u` escape may hold half a surrogate pair, which the full check's
    // parser refuses and a value read as written would carry on.
    if text.contains("\\u") {
        return None;
    }
    let Members(members) = serde_json::from_str(text).ok()?;
    for (i, (key, _)) in members.iter().enumerate() {
        if NOT_PLAIN.contains(&key.as_ref()) || members[..i].iter().any(|(k, _)| k == key) {
            return None;
        }
    }
    let raw = |key: &str| members.iter().find(|(k, _)| k == key).map(|(_, v)| v.get());
    let string = |key: &str| -> Option<Cow<'_, str>> { json_str(raw(key)?) };
    let non_empty = |key: &str| string(key).filter(|s| !s.is_empty());
    // `null` or a string; anything else goes to the full check.
    let optional = |key: &str| -> Result<Option<String>, ()> {
        match raw(key) {
            None | Some("null") => Ok(None),
            Some(_) => string(key).map(|s| Some(s.into_owned())).ok_or(()),
        }
    };

    let (message_type, name_member, wanted, value_member) = match expected {
        Expected::Event { event, .. } => ("event", "event", event, "data"),
        Expected::Reading { name, .. } => ("propertyReading", "name", name, "value"),
    };
    if string("messageType")? != message_type
        || non_empty("thingID")? != expected.thing()
        || non_empty(name_member)? != wanted
        || raw(value_member).is_none()
    {
        return None;
    }
    if matches!(expected, Expected::Reading { .. }) && raw("data").is_some() {
        return None;
    }
    let message_id = non_empty("messageID")?.into_owned();
    let timestamp = string("timestamp")?.into_owned();
    crate::lmos::parse_timestamp(&timestamp)?;
    let traceparent = optional("traceparent").ok()?;
    let tracestate = optional("tracestate").ok()?;
    let identity = Identity {
        message_type: message_type.to_owned(),
        message_id,
        traceparent,
        tracestate,
        timestamp: Some(timestamp),
    };
    Some(Prepared::from_raw(
        members.iter().map(|(k, v)| (k.as_ref(), v.get())),
        identity,
        text.len(),
    ))
}

/// A JSON object's members in order: keys decoded, values as written.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(Key(key)) = map.next_key()? {
                    members.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Object)
    }
}

/// A key, borrowed unless it had escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }

            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        deserializer.deserialize_str(Text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const EVENT: Expected<'static> = Expected::Event {
        thing: "urn:a",
        event: "e",
    };
    const READING: Expected<'static> = Expected::Reading {
        thing: "urn:a",
        name: "p",
    };

    /// What one recipient gets, as JSON.
    fn delivered(p: &Prepared) -> Value {
        serde_json::from_str(&p.with("\"c\"", Some("00-tp"))).unwrap()
    }

    /// Accepted here, and the same as the full check makes of it.
    fn same_as_full(payload: &str, expected: Expected<'_>) {
        let fast = check(payload.as_bytes(), expected).expect("plain");
        let full = super::super::full(payload.as_bytes(), expected, None).unwrap();
        // What the full check makes of it when the plain path is not taken.
        let full_only = Prepared::from_members(
            serde_json::from_str::<Value>(payload)
                .unwrap()
                .as_object()
                .unwrap(),
            expected.thing(),
        );
        assert_eq!(delivered(&fast), delivered(&full), "{payload}");
        assert_eq!(delivered(&fast), delivered(&full_only), "{payload}");
        assert_eq!(fast.traceparent, full_only.traceparent);
        assert_eq!(fast.tracestate, full_only.tracestate);
        assert_eq!(fast.message_id, full_only.message_id);
        assert_eq!(fast.message_type, full_only.message_type);
        assert_eq!(fast.timestamp, full_only.timestamp);
    }

    #[test]
    fn plain_events_and_readings_are_prepared_as_the_full_check_prepares_them() {
        same_as_full(
            r#"{"thingID":"urn:a","messageID":"m","messageType":"event","event":"e","data":{"seq":1,"x":[1.5e3, "é\n"]},"timestamp":"2025-01-20T19:00:00Z","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"a=b","extra":null}"#,
            EVENT,
        );
        same_as_full(
            r#"{ "messageType" : "event", "event":"e", "data": null, "thingID":"urn:a", "messageID":"m", "timestamp":"2025-01-20T19:00:00+01:00[Europe/Paris]", "traceparent": null }"#,
            EVENT,
        );
        same_as_full(
            r#"{"thingID":"urn:a","messageID":"m","messageType":"propertyReading","name":"p","value":21.5,"timestamp":"2025-01-20T19:00:00Z","k\"ey":1}"#,
            READING,
        );
    }

    #[test]
    fn anything_else_goes_to_the_full_check() {
        let base = |extra: &str, data: &str| {
            format!(
                r#"{{"thingID":"urn:a","messageID":"m","messageType":"event","event":"e","data":{data},"timestamp":"2025-01-20T19:00:00Z"{extra}}}"#
            )
        };
        let others = [
            base(r#","thingId":"urn:a""#, "1"),
            base(r#","messageId":"m""#, "1"),
            base(r#","correlationID":"c""#, "1"),
            base(r#","lastEvent":"x""#, "1"),
            base(r#","traceparent":7"#, "1"),
            base(r#","tracestate":{}"#, "1"),
            base(r#","event":"e""#, "1"),
            base("", r#""\ud800""#),
            base("", r#""\u00e9""#),
            r#"{"thingID":"urn:b","messageID":"m","messageType":"event","event":"e","data":1,"timestamp":"2025-01-20T19:00:00Z"}"#.into(),
            r#"{"thingID":"urn:a","messageID":"m","messageType":"event","event":"f","data":1,"timestamp":"2025-01-20T19:00:00Z"}"#.into(),
            r#"{"thingID":"urn:a","messageID":"","messageType":"event","event":"e","data":1,"timestamp":"2025-01-20T19:00:00Z"}"#.into(),
            r#"{"thingID":"urn:a","messageID":"m","messageType":"event","event":"e","timestamp":"2025-01-20T19:00:00Z"}"#.into(),
            r#"{"thingID":"urn:a","messageID":"m","messageType":"event","event":"e","data":1,"timestamp":"yesterday"}"#.into(),
            r#"{"thingID":"urn:a","messageID":"m","messageType":"event","event":"e","data":1,"timestamp":1737399600}"#.into(),
            r#"{"thingID":"urn:a","messageID":"m","messageType":"event","event":"e","data":1}"#.into(),
            r#"{"thingID":"urn:a","messageID":"m","messageType":"propertyReading","event":"e","data":1,"timestamp":"2025-01-20T19:00:00Z"}"#.into(),
            r#"[1]"#.into(),
            r#"{"thingID":"urn:a""#.into(),
        ];
        for payload in &others {
            assert!(check(payload.as_bytes(), EVENT).is_none(), "{payload}");
        }
        let reading = |extra: &str| {
            format!(
                r#"{{"thingID":"urn:a","messageID":"m","messageType":"propertyReading","name":"p","value":1,"timestamp":"2025-01-20T19:00:00Z"{extra}}}"#
            )
        };
        assert!(check(reading("").as_bytes(), READING).is_some());
        for extra in [r#","data":1"#, r#","property":"p""#] {
            let payload = reading(extra);
            assert!(check(payload.as_bytes(), READING).is_none(), "{payload}");
        }
        assert!(check(b"{\"thingID\":\"\xff\"}", EVENT).is_none());
    }

    proptest::proptest! {
        /// Whatever mix of members: what the plain path accepts, the full
        /// check accepts too, and makes the same of.
        #[test]
        fn what_is_accepted_here_the_full_check_accepts_alike(
            changes in proptest::collection::vec((0usize..16, 0usize..10, 0usize..3), 0..4),
            reading in proptest::bool::ANY,
        ) {
            const KEYS: [&str; 16] = [
                "thingID", "thingId", "messageID", "messageId", "messageType", "event",
                "data", "timestamp", "traceparent", "tracestate", "correlationID", "name",
                "value", "property", "lastEvent", "other",
            ];
            let value = |kind: usize, key: &str| -> String {
                match kind {
                    0 => match key {
                        "thingID" | "thingId" => r#""urn:a""#.into(),
                        "messageType" if reading => r#""propertyReading""#.into(),
                        "messageType" => r#""event""#.into(),
                        "event" => r#""e""#.into(),
                        "name" => r#""p""#.into(),
                        "timestamp" => r#""2025-01-20T19:00:00Z""#.into(),
                        _ => r#""m""#.into(),
                    },
                    1 => r#""""#.into(),
                    2 => "null".into(),
                    3 => "12.50".into(),
                    4 => r#"{"a": [1, {"b": "x y"}]}"#.into(),
                    5 => r#""urn:b""#.into(),
                    6 => r#""2025-01-20T19:00:00+01:00[Europe/Paris]""#.into(),
                    7 => "true".into(),
                    8 => r#""tab\tquote\"""#.into(),
                    _ => r#""00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01""#.into(),
                }
            };
            // A complete message, then up to four changes: a member set
            // (or added), taken away, or written a second time.
            let base: &[&str] = if reading {
                &["thingID", "messageID", "messageType", "name", "value", "timestamp"]
            } else {
                &["thingID", "messageID", "messageType", "event", "data", "timestamp"]
            };
            let mut members: Vec<(String, String)> =
                base.iter().map(|k| (k.to_string(), value(0, k))).collect();
            for (k, kind, op) in changes {
                let key = KEYS[k].to_string();
                let v = value(kind, &key);
                match op {
                    0 => match members.iter_mut().find(|(m, _)| *m == key) {
                        Some(member) => member.1 = v,
                        None => members.push((key, v)),
                    },
                    1 => members.retain(|(m, _)| *m != key),
                    _ => members.push((key, v)),
                }
            }
            let body: Vec<String> =
                members.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
            let payload = format!("{{{}}}", body.join(","));
            let expected = if reading { READING } else { EVENT };
            if let Some(fast) = check(payload.as_bytes(), expected) {
                let full = super::super::full(payload.as_bytes(), expected, None);
                proptest::prop_assert!(full.is_ok(), "{payload}: {full:?}");
                proptest::prop_assert_eq!(delivered(&fast), delivered(&full.unwrap()), "{}", payload);
            }
        }
    }

    #[test]
    fn the_generator_reaches_the_plain_path() {
        // A complete event as the property test's generator can write it.
        let payload = r#"{"thingID":"urn:a","messageID":"m","messageType":"event","event":"e","data":"m","timestamp":"2025-01-20T19:00:00Z"}"#;
        assert!(check(payload.as_bytes(), EVENT).is_some());
    }
}

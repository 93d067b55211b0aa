//! Bounded fuzzing with proptest (`cargo fuzz` needs nightly): the message
//! reader, the fan-out splice, the topic mapping and the WebSocket gateway
//! end to end get arbitrary and mutated input and must never panic, always
//! answer bad input with a valid LMOS `error`, and never disturb other
//! clients.
//!
//! Sized to run in a few seconds in a debug build (`cargo test --test gateway fuzz::`).
//! To fuzz longer by hand:
//!
//! ```sh
//! FUZZ_CASES=100000 cargo test --release --test gateway fuzz::
//! FUZZ_CASES=20000 FUZZ_SEED=7 cargo test --release --test gateway -- fuzz::the_gateway
//! ```
//!
//! `FUZZ_CASES` is the number of cases of each property (and of frames sent
//! to the gateway); `FUZZ_SEED` seeds the gateway storm (the properties use
//! proptest's own seeding, so each run explores new input; a failure prints
//! the minimal input).

use lmos_testkit as common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{lmos, TestSidecar, WsClient};
use futures_util::StreamExt;
use lmos_sidecar::lmos::splice::{json_string, Prepared};
use lmos_sidecar::lmos::{
    Body, Message, MessageType, Problem, ProblemKind, Rejection, ERROR_TYPE_BASE,
};
use lmos_sidecar::topics::{self, Route, Topics};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
use rumqttc::QoS;
use serde_json::{json, Map, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// The sidecar's own thingID in `common::test_config()`.
const SIDECAR_THING: &str = "urn:lmos:test-sidecar";

fn cases(default: u32) -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(default: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(default),
        // A failure prints the minimal input; no regression files in the tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ----- input -----

/// The draft's example messages, verbatim.
fn fixtures() -> &'static [(String, Value)] {
    static FIXTURES: std::sync::OnceLock<Vec<(String, Value)>> = std::sync::OnceLock::new();
    FIXTURES.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/spec-examples");
        let mut all: Vec<(String, Value)> = std::fs::read_dir(dir)
            .expect("fixtures")
            .map(|entry| {
                let path = entry.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, serde_json::from_str(&text).unwrap())
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        assert!(all.len() >= 17, "the spec examples are missing");
        all
    })
}

/// Member names worth hitting: both spellings of the envelope, every type's
/// members, what makes a Thing Description, and anything at all.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "thingID", "thingId", "messageID", "messageId", "correlationID", "correlationId",
            "messageType", "name", "event", "action", "data", "value", "timestamp", "status",
            "type", "title", "detail", "instance", "input", "output", "reason", "traceparent",
            "tracestate", "@context", "id",
        ])
        .prop_map(str::to_owned),
        1 => ".{0,12}",
    ]
}

/// Strings that have broken parsers and topic mappings before: MQTT's
/// special characters, a leading `$`, NUL, bidi and emoji, long runs of
/// characters that triple when escaped, timestamps good and bad.
fn nasty_string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => ".{0,24}",
        1 => Just(String::new()),
        2 => "[/+#%$\\x00a:]{0,16}",
        1 => Just("$SYS/broker".to_owned()),
        1 => Just("\u{feff}\u{202e}\u{1F600}é\u{0}\u{10FFFF}\\\"".to_owned()),
        1 => (1usize..2_000).prop_map(|n| "/".repeat(n)),
        1 => Just("urn:uuid:3f1d3a7a-4f97-2e6b-c45f-f3c2e1c84c77".to_owned()),
        1 => Just("2025-01-20T19:00:00Z[Europe/Paris]".to_owned()),
        1 => Just("2025-13-45T99:00:00Z".to_owned()),
        1 => prop::sample::select(MessageType::ALL.to_vec()).prop_map(|t| t.as_str().to_owned()),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(f64::MAX)),
        Just(json!(5e-324)),
    ]
}

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        number(),
        nasty_string().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

/// One change to a message object.
#[derive(Debug, Clone)]
enum Edit {
    Delete(prop::sample::Index),
    Replace(prop::sample::Index, Value),
    Retype(prop::sample::Index),
    Insert(String, Value),
    /// Writes an envelope member under its other spelling too.
    OtherSpelling(prop::sample::Index, bool),
    MessageType(String),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        2 => any::<prop::sample::Index>().prop_map(Edit::Delete),
        2 => (any::<prop::sample::Index>(), json_value()).prop_map(|(i, v)| Edit::Replace(i, v)),
        2 => any::<prop::sample::Index>().prop_map(Edit::Retype),
        2 => (key(), json_value()).prop_map(|(k, v)| Edit::Insert(k, v)),
        2 => (any::<prop::sample::Index>(), any::<bool>()).prop_map(|(i, same)| Edit::OtherSpelling(i, same)),
        1 => nasty_string().prop_map(Edit::MessageType),
    ]
}

fn other_spelling(key: &str) -> Option<&'static str> {
    Some(match key {
        "thingID" => "thingId",
        "thingId" => "thingID",
        "messageID" => "messageId",
        "messageId" => "messageID",
        "correlationID" => "correlationId",
        "correlationId" => "correlationID",
        _ => return None,
    })
}

/// The same value as another JSON type.
fn retyped(v: &Value) -> Value {
    match v {
        Value::String(s) if s.is_empty() => json!(0),
        Value::String(s) => json!([s]),
        Value::Number(n) => Value::String(n.to_string()),
        Value::Bool(b) => json!(if *b { 1 } else { 0 }),
        Value::Null => json!(""),
        Value::Array(a) => Value::Object(
            a.iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v.clone()))
                .collect(),
        ),
        Value::Object(o) => Value::Array(o.values().cloned().collect()),
    }
}

fn apply(map: &mut Map<String, Value>, edit: &Edit) {
    let key_at = |map: &Map<String, Value>, i: &prop::sample::Index| {
        (!map.is_empty()).then(|| map.keys().nth(i.index(map.len())).unwrap().clone())
    };
    match edit {
        Edit::Delete(i) => {
            if let Some(k) = key_at(map, i) {
                map.shift_remove(&k);
            }
        }
        Edit::Replace(i, v) => {
            if let Some(k) = key_at(map, i) {
                map.insert(k, v.clone());
            }
        }
        Edit::Retype(i) => {
            if let Some(k) = key_at(map, i) {
                let v = retyped(&map[&k]);
                map.insert(k, v);
            }
        }
        Edit::Insert(k, v) => {
            map.insert(k.clone(), v.clone());
        }
        Edit::OtherSpelling(i, same) => {
            let envelope: Vec<String> = map
                .keys()
                .filter(|k| other_spelling(k).is_some())
                .cloned()
                .collect();
            if !envelope.is_empty() {
                let k = &envelope[i.index(envelope.len())];
                let v = if *same {
                    map[k].clone()
                } else {
                    json!(format!("other-{}", map[k]))
                };
                map.insert(other_spelling(k).unwrap().to_owned(), v);
            }
        }
        Edit::MessageType(t) => {
            map.insert("messageType".into(), t.as_str().into());
        }
    }
}

/// Changes made to the text rather than the value: what a JSON value
/// cannot hold.
#[derive(Debug, Clone)]
enum TextEdit {
    None,
    /// `"key":value` again, first: JSON with a duplicate member.
    Duplicate(String, Value),
    /// A number no f64 holds, or one with more digits than any integer type.
    HugeNumber(&'static str),
    /// Arrays nested this deep (serde_json stops at 128).
    Deep(usize),
    /// The text cut at this fraction of its length.
    Truncate(f64),
    /// One byte replaced.
    Byte(prop::sample::Index, u8),
}

fn text_edit() -> impl Strategy<Value = TextEdit> {
    prop_oneof![
        6 => Just(TextEdit::None),
        2 => (key(), json_value()).prop_map(|(k, v)| TextEdit::Duplicate(k, v)),
        1 => prop::sample::select(vec!["1e400", "-1e400", "123456789012345678901234567890123456789", "1.0e-400", "-0"])
            .prop_map(TextEdit::HugeNumber),
        1 => (1usize..400).prop_map(TextEdit::Deep),
        1 => (0.0..1.0f64).prop_map(TextEdit::Truncate),
        1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| TextEdit::Byte(i, b)),
    ]
}

fn apply_text(text: String, edit: &TextEdit) -> Vec<u8> {
    let insert_first = |member: String| {
        if text.starts_with('{') && text.len() > 2 {
            format!("{{{member},{}", &text[1..])
        } else {
            text.clone()
        }
    };
    match edit {
        TextEdit::None => text.into_bytes(),
        TextEdit::Duplicate(k, v) => insert_first(format!("{}:{v}", json_string(k))).into_bytes(),
        TextEdit::HugeNumber(n) => insert_first(format!("\"data\":{n}")).into_bytes(),
        TextEdit::Deep(d) => {
            insert_first(format!("\"data\":{}{}", "[".repeat(*d), "]".repeat(*d))).into_bytes()
        }
        TextEdit::Truncate(f) => {
            let mut bytes = text.into_bytes();
            bytes.truncate((bytes.len() as f64 * f) as usize);
            bytes
        }
        TextEdit::Byte(i, b) => {
            let mut bytes = text.into_bytes();
            if !bytes.is_empty() {
                let at = i.index(bytes.len());
                bytes[at] = *b;
            }
            bytes
        }
    }
}

/// A spec example, edited.
fn mutated_example() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(fixtures().to_vec()),
        prop::collection::vec(edit(), 0..4),
        text_edit(),
    )
        .prop_map(|((_, fixture), edits, text_edit)| {
            let mut map = fixture.as_object().unwrap().clone();
            for e in &edits {
                apply(&mut map, e);
            }
            apply_text(Value::Object(map).to_string(), &text_edit)
        })
}

// ----- checks -----

fn first_string(map: &Map<String, Value>, a: &str, b: &str) -> Option<String> {
    [a, b].into_iter().find_map(|k| {
        map.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    })
}

/// What the error reply must carry, worked out from the input alone: the
/// Thing it names (else the sidecar's) and the correlationID (the input's
/// correlationID, else its messageID, under either spelling).
fn expected_reply(input: &[u8]) -> (String, Option<String>) {
    match serde_json::from_slice::<Value>(input) {
        Ok(Value::Object(map)) => (
            first_string(&map, "thingID", "thingId").unwrap_or_else(|| SIDECAR_THING.into()),
            first_string(&map, "correlationID", "correlationId")
                .or_else(|| first_string(&map, "messageID", "messageId")),
        ),
        _ => (SIDECAR_THING.into(), None),
    }
}

/// The error the gateway sends for a rejected message, built the way it
/// builds it.
fn error_reply(rejection: &Rejection) -> String {
    let problem = Problem::from(rejection);
    let thing = rejection.thing_id.as_deref().unwrap_or(SIDECAR_THING);
    problem
        .to_message(thing, rejection.reply_correlation_id())
        .to_json()
}

/// A valid LMOS `error`: every member present, our type URI, the status of
/// its kind. Returns its kind.
fn check_error_message(text: &str) -> Result<ProblemKind, TestCaseError> {
    let message = Message::parse(text.as_bytes())
        .map_err(|e| TestCaseError::fail(format!("the error reply does not parse: {e}: {text}")))?;
    let Body::Error(e) = &message.body else {
        return Err(TestCaseError::fail(format!("not an error: {text}")));
    };
    let kind = ProblemKind::from_type_uri(&e.error_type)
        .ok_or_else(|| TestCaseError::fail(format!("type outside {ERROR_TYPE_BASE}: {text}")))?;
    prop_assert_eq!(&e.status, &kind.status().to_string());
    prop_assert_eq!(&e.title, kind.title());
    prop_assert!(!e.detail.is_empty(), "no detail: {}", text);
    prop_assert!(e.instance.starts_with("urn:uuid:"), "instance: {}", text);
    prop_assert!(!message.thing_id.is_empty() && !message.message_id.is_empty());
    Ok(kind)
}

/// `Message::parse` on any input: no panic; Ok round-trips through the
/// canonical form; Err gives a valid, correctly correlated error reply.
fn check_parse(input: &[u8]) -> Result<(), TestCaseError> {
    match Message::parse(input) {
        Ok(m) => {
            prop_assert!(!m.thing_id.is_empty() && !m.message_id.is_empty());
            let again = Message::from_value(m.to_value());
            prop_assert_eq!(again.as_ref(), Ok(&m));
            let again = Message::parse(m.to_json().as_bytes());
            prop_assert_eq!(again.as_ref(), Ok(&m));
        }
        Err(rejection) => {
            let text = error_reply(&rejection);
            let kind = check_error_message(&text)?;
            prop_assert_eq!(kind, Problem::from(&rejection).kind);
            let reply: Value = serde_json::from_str(&text).unwrap();
            let (thing, correlation) = expected_reply(input);
            prop_assert_eq!(reply["thingID"].as_str(), Some(thing.as_str()), "{}", text);
            prop_assert_eq!(
                reply.get("correlationID").and_then(Value::as_str),
                correlation.as_deref(),
                "input {}",
                String::from_utf8_lossy(input)
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(1_000))]

    #[test]
    fn parse_survives_arbitrary_bytes(input in prop::collection::vec(any::<u8>(), 0..256)) {
        check_parse(&input)?;
    }

    #[test]
    fn parse_survives_arbitrary_text(input in ".{0,200}") {
        check_parse(input.as_bytes())?;
    }

    #[test]
    fn parse_survives_arbitrary_json(v in json_value()) {
        check_parse(v.to_string().as_bytes())?;
    }

    #[test]
    fn parse_survives_arbitrary_objects_with_an_envelope(
        members in prop::collection::vec((key(), json_value()), 0..8),
        t in prop::sample::select(MessageType::ALL.to_vec()),
    ) {
        let mut map: Map<String, Value> = members.into_iter().collect();
        map.entry("thingID").or_insert(json!("urn:fuzz"));
        map.entry("messageID").or_insert(json!("m"));
        map.entry("messageType").or_insert(json!(t.as_str()));
        check_parse(Value::Object(map).to_string().as_bytes())?;
    }

    #[test]
    fn parse_survives_mutated_spec_examples(input in mutated_example()) {
        check_parse(&input)?;
    }
}

/// Top-level member names in the order written, duplicates kept.
struct Keys(Vec<String>);

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Keys, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Keys;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Keys, A::Error> {
                let mut keys = Vec::new();
                while let Some((k, _)) = a.next_entry::<String, serde::de::IgnoredAny>()? {
                    keys.push(k);
                }
                Ok(Keys(keys))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// What a subscriber receives is JSON with exactly one of each member and
/// the spliced values, exactly.
fn check_spliced(
    out: &str,
    correlation: &str,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) -> Result<Value, TestCaseError> {
    let v: Value = serde_json::from_str(out)
        .map_err(|e| TestCaseError::fail(format!("spliced text is not JSON: {e}: {out}")))?;
    let Keys(keys) = serde_json::from_str(out).unwrap();
    let unique: BTreeSet<&String> = keys.iter().collect();
    prop_assert_eq!(unique.len(), keys.len(), "duplicate members: {}", out);
    prop_assert_eq!(v["correlationID"].as_str(), Some(correlation));
    prop_assert_eq!(v.get("traceparent").and_then(Value::as_str), traceparent);
    prop_assert_eq!(v.get("tracestate").and_then(Value::as_str), tracestate);
    prop_assert!(v.get("correlationId").is_none() && v.get("thingId").is_none());
    Ok(v)
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn splicing_any_trace_context_into_an_event_gives_that_event(
        correlation in nasty_string(),
        traceparent in nasty_string(),
        tracestate in prop::option::of(nasty_string()),
        own_traceparent in any::<bool>(),
    ) {
        let (_, event) = fixtures().iter().find(|(f, _)| f.starts_with("event")).unwrap();
        let mut payload = event.clone();
        payload["traceparent"] = json!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        if let Some(ts) = &tracestate {
            payload["tracestate"] = json!(ts);
        }
        let original = Message::from_value(payload.clone()).unwrap();
        let p = Prepared::from_payload(payload.to_string().as_bytes(), "urn:from-topic").unwrap();
        let out = if own_traceparent {
            p.with(&json_string(&correlation), Some(&traceparent))
        } else {
            p.with_correlation(&json_string(&correlation))
        };
        let expected_tp = if own_traceparent { traceparent.as_str() } else { original.traceparent.as_deref().unwrap() };
        check_spliced(&out, &correlation, Some(expected_tp), tracestate.as_deref())?;
        if !correlation.is_empty() {
            let m = Message::parse(out.as_bytes())
                .map_err(|e| TestCaseError::fail(format!("{e}: {out}")))?;
            prop_assert_eq!(m.correlation_id.as_deref(), Some(correlation.as_str()));
            prop_assert_eq!(m.traceparent.as_deref(), Some(expected_tp));
            prop_assert_eq!(m.tracestate, tracestate);
            prop_assert_eq!((m.thing_id, m.message_id, m.body, m.extra), (original.thing_id, original.message_id, original.body, original.extra));
        }
    }

    #[test]
    fn splicing_into_any_object_gives_valid_json(
        object in prop::collection::vec((key(), json_value()), 0..8),
        correlation in nasty_string(),
        traceparent in prop::option::of(nasty_string()),
    ) {
        let map: Map<String, Value> = object.into_iter().collect();
        let tracestate = map.get("tracestate").and_then(Value::as_str).map(str::to_owned);
        let their_traceparent = map.get("traceparent").and_then(Value::as_str).map(str::to_owned);
        let p = Prepared::from_members(&map, "urn:from-topic");
        let out = p.with(&json_string(&correlation), traceparent.as_deref());
        let expected_tp = traceparent.or(their_traceparent);
        check_spliced(&out, &correlation, expected_tp.as_deref(), tracestate.as_deref())?;
    }
}

// ----- topics -----

/// What MQTT accepts as a topic name: UTF-8 (a `String` is), no NUL, no
/// wildcards, at most 65535 bytes (its length is a 16-bit prefix).
fn assert_mqtt_topic(topic: &str) -> Result<(), TestCaseError> {
    prop_assert!(!topic.contains(['+', '#', '\0']), "{:?}", topic);
    prop_assert!(!topic.starts_with('$'));
    prop_assert!(
        topic.len() <= topics::MAX_TOPIC_LEN,
        "{} bytes",
        topic.len()
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(500))]

    // `src/topics.rs` already checks: each level has no wildcard, `/` or NUL
    // and does not start with `$`; every route parses back; escaping is
    // injective. What it does not: whole topics, with a prefix of several
    // levels, and their length.
    #[test]
    fn whole_topics_are_valid_and_parse_back(
        prefix in "[a-z]{1,8}(/[a-z$]{1,8}){0,2}",
        thing in nasty_string(),
        name in nasty_string(),
        invocation in nasty_string(),
    ) {
        let t = Topics::new(&prefix).unwrap();
        let routes = [
            (t.event(&thing, &name), Route::Event { thing: thing.clone(), event: name.clone() }),
            (t.property(&thing, &name), Route::Property { thing: thing.clone(), name: name.clone() }),
            (
                t.action_status(&thing, &name, &invocation),
                Route::ActionStatus { thing: thing.clone(), action: name.clone(), invocation: invocation.clone() },
            ),
            (t.request(&thing, &name), Route::Request { thing: thing.clone(), message_type: name.clone() }),
            (t.reply(&thing, &invocation), Route::Reply { thing: thing.clone(), correlation: invocation.clone() }),
            (t.agent_request(&thing, &name), Route::AgentRequest { thing: thing.clone(), message_type: name.clone() }),
            (t.agent_replies(&thing), Route::AgentReplies { thing: thing.clone() }),
            (t.agent_status(&thing), Route::AgentStatus { thing: thing.clone() }),
        ];
        for (topic, route) in routes {
            assert_mqtt_topic(&topic)?;
            let start = format!("{prefix}/");
            prop_assert!(topic.starts_with(&start));
            prop_assert_eq!(t.parse(&topic), Some(route));
            prop_assert_eq!(topics::fits(&topic), topic.len() <= topics::MAX_TOPIC_LEN);
        }
    }

}

#[test]
fn overlong_topics_are_detected() {
    let t = Topics::new("lmos").unwrap();
    for c in ['/', '+', '#', '%', 'a'] {
        for n in [21_000, 21_839, 21_840, 40_000, 65_535] {
            let topic = t.event("urn:x", &c.to_string().repeat(n));
            assert_eq!(topics::fits(&topic), topic.len() <= topics::MAX_TOPIC_LEN);
            assert!(t.parse(&topic).is_some());
        }
    }
}

// ----- the gateway, end to end -----

/// One frame of the storm.
#[derive(Debug, Clone)]
enum Frame {
    Text(String),
    Binary(Vec<u8>),
}

/// Frames a careless or hostile client might send.
fn frame(max: usize) -> impl Strategy<Value = Frame> {
    let lossy = |b: Vec<u8>| Frame::Text(String::from_utf8_lossy(&b).into_owned());
    prop_oneof![
        8 => mutated_example().prop_map(lossy),
        2 => json_value().prop_map(|v| Frame::Text(v.to_string())),
        2 => ".{0,64}".prop_map(Frame::Text),
        1 => Just(Frame::Text(String::new())),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Frame::Binary),
        1 => Just(Frame::Binary(Vec::new())),
        // Larger than gateway.max_message_size, but below the hard limit.
        1 => (max + 1..3 * max).prop_map(|n| Frame::Text(format!("{{\"thingID\":\"urn:big\",\"messageID\":\"big\",\"messageType\":\"event\",\"pad\":\"{}\"}}", "x".repeat(n)))),
        // Valid-looking messages with the wrong member types.
        2 => (prop::sample::select(MessageType::ALL.to_vec()), prop::collection::vec((key(), json_value()), 1..6)).prop_map(|(t, members)| {
            let mut v = lmos("urn:fuzz:thing", t.as_str(), json!({}));
            for (k, x) in members { v[k] = x; }
            Frame::Text(v.to_string())
        }),
        // Names and Things whose topic does not fit in an MQTT packet.
        2 => (prop::sample::select(vec!["event", "propertyReading", "actionStatus", "subscribeEvent", "observeProperty"]), 21_900usize..22_000, any::<bool>()).prop_map(|(t, n, long_thing)| {
            let long = "/".repeat(n);
            let (thing, name) = if long_thing { (long.as_str(), "n") } else { ("urn:fuzz:thing", long.as_str()) };
            let members = match t {
                "event" => json!({"event": name, "data": 1, "timestamp": "2025-01-20T19:00:00Z"}),
                "propertyReading" => json!({"name": name, "value": 1, "timestamp": "2025-01-20T19:00:00Z"}),
                "actionStatus" => json!({"action": name, "status": "running"}),
                "subscribeEvent" => json!({"event": name}),
                _ => json!({"name": name}),
            };
            let mut v = lmos(thing, t, members);
            v["messageID"] = json!("long-topic");
            v["correlationID"] = json!("long");
            Frame::Text(v.to_string())
        }),
    ]
}

/// The same test as `connection.rs` uses for a Thing Description.
fn looks_like_td(text: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .ok()
        .is_some_and(|v| v.get("@context").is_some() && v.get("messageType").is_none())
}

/// Errors the connection sends itself, at once and in order (as opposed to
/// the router's answers to requests, which come later through the queue).
fn is_direct(kind: ProblemKind) -> bool {
    !matches!(
        kind,
        ProblemKind::Unavailable | ProblemKind::NotFound | ProblemKind::Timeout
    )
}

/// The next message from the sidecar; fails on a close frame, an end or an
/// error (the connection must survive everything the storm sends).
async fn next_text(client: &mut WsClient, context: &str) -> String {
    loop {
        let frame = tokio::time::timeout(common::WAIT, client.stream.next())
            .await
            .unwrap_or_else(|_| panic!("nothing from the sidecar in time after {context}"));
        match frame {
            Some(Ok(WsMessage::Text(t))) => return t.to_string(),
            Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) => continue,
            other => panic!("the connection ended after {context}: {other:?}"),
        }
    }
}

const CALM_THING: &str = "urn:fuzz:calm";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_survives_a_storm_and_other_clients_miss_nothing() {
    let frames = cases(300) as usize;
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let max = 64 * 1024;
    let mut config = common::test_config();
    config.gateway.max_message_size = max;
    let sidecar = TestSidecar::start_with(config).await;

    // Bystanders: a WebSocket consumer of one event, and an MQTT subscriber
    // to every event, property and action status of every Thing, which also
    // gets what the storm publishes and checks each arrives intact.
    let mut calm = sidecar.ws().await;
    calm.send(lmos(
        CALM_THING,
        "subscribeEvent",
        json!({"event": "tick", "correlationID": "calm"}),
    ))
    .await;
    calm.barrier().await;
    let mut watcher = sidecar.mqtt("fuzz-watcher").await;
    for filter in [
        "lmos/+/events/+",
        "lmos/+/properties/+",
        "lmos/+/actions/+/status/+",
    ] {
        watcher.subscribe(filter).await;
    }
    let ws_seen = Arc::new(Mutex::new(BTreeSet::new()));
    let mqtt_seen = Arc::new(Mutex::new(BTreeSet::new()));
    let calm_task = {
        let seen = ws_seen.clone();
        tokio::spawn(async move {
            loop {
                let v = calm.recv().await;
                assert_eq!(v["correlationID"], "calm", "{v}");
                seen.lock()
                    .unwrap()
                    .insert(v["data"]["seq"].as_u64().unwrap());
            }
        })
    };
    let watcher_task = {
        let seen = mqtt_seen.clone();
        tokio::spawn(async move {
            let layout = Topics::new("lmos").unwrap();
            while let Some(p) = watcher.publishes.recv().await {
                // Whatever the storm got published arrives intact: a topic of
                // the layout, naming the event the payload is.
                let (thing, member, name) = match layout.parse(&p.topic) {
                    Some(Route::Event { thing, event }) => (thing, "event", event),
                    Some(Route::Property { thing, name }) => (thing, "name", name),
                    Some(Route::ActionStatus { thing, action, .. }) => (thing, "action", action),
                    _ => return format!("a publish on a foreign topic {:?}", p.topic),
                };
                let Ok(Value::Object(v)) = serde_json::from_slice::<Value>(&p.payload) else {
                    return format!("a publish on {} that is no JSON object", p.topic);
                };
                let named = first_string(&v, "thingID", "thingId");
                if named.as_deref() != Some(thing.as_str()) || v[member] != name.as_str() {
                    return format!("a publish on {} that is about something else", p.topic);
                }
                if thing == CALM_THING {
                    seen.lock()
                        .unwrap()
                        .insert(v["data"]["seq"].as_u64().unwrap());
                }
            }
            "the MQTT subscriber was disconnected".to_owned()
        })
    };
    let storming = tokio_util::sync::CancellationToken::new();
    let publisher = {
        let storming = storming.clone();
        let agent = sidecar.mqtt("fuzz-calm-agent").await;
        let topic = Topics::new("lmos").unwrap().event(CALM_THING, "tick");
        tokio::spawn(async move {
            let mut seq = 0u64;
            while seq < 20 || !storming.is_cancelled() {
                let e = common::event(CALM_THING, "tick", json!({"seq": seq}));
                agent
                    .client
                    .publish(&topic, QoS::AtLeastOnce, false, e.to_string())
                    .await
                    .unwrap();
                seq += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            seq
        })
    };

    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        ProptestConfig::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let strategy = frame(max);
    let mut client = sidecar.ws().await;
    let started = std::time::Instant::now();
    let (mut rejected, mut accepted) = (0, 0);
    for i in 0..frames {
        let frame = strategy.new_tree(&mut runner).unwrap().current();
        let context = match &frame {
            Frame::Text(t) if t.len() > 300 => {
                format!(
                    "frame {i} (seed {seed}): text of {} bytes: {}…",
                    t.len(),
                    &t[..(0..=300)
                        .rev()
                        .find(|&i| t.is_char_boundary(i))
                        .unwrap_or(0)]
                )
            }
            other => format!("frame {i} (seed {seed}): {other:?}"),
        };
        // What the sidecar must answer directly: the error kind, the Thing
        // and correlation it names; `None` for accepted messages, which may
        // get one error (naming their own correlation) or none.
        let expected = match &frame {
            Frame::Binary(_) => Some((ProblemKind::BinaryFrame, SIDECAR_THING.to_owned(), None)),
            Frame::Text(t) if t.len() > max => {
                Some((ProblemKind::MessageTooLarge, SIDECAR_THING.to_owned(), None))
            }
            Frame::Text(t) => match Message::parse(t.as_bytes()) {
                Err(_) if looks_like_td(t) => {
                    Some((ProblemKind::Forbidden, SIDECAR_THING.to_owned(), None))
                }
                Err(r) => {
                    let (thing, correlation) = expected_reply(t.as_bytes());
                    Some((Problem::from(&r).kind, thing, correlation))
                }
                Ok(_) => None,
            },
        };
        let accepted_message = match &frame {
            Frame::Text(t) if expected.is_none() => Message::parse(t.as_bytes()).ok(),
            _ => None,
        };
        client
            .send_raw(match frame {
                Frame::Text(t) => WsMessage::Text(t.into()),
                Frame::Binary(b) => WsMessage::Binary(Bytes::from(b)),
            })
            .await;
        // A probe the sidecar rejects at once: everything it answers
        // directly to the frame comes before the probe's error.
        let probe = format!("probe-{i}");
        client
            .send(json!({"thingID": "urn:fuzz:probe", "messageID": probe, "messageType": "probe"}))
            .await;
        let mut direct = Vec::new();
        loop {
            let text = next_text(&mut client, &context).await;
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("the sidecar sent non-JSON {e}: {text}"));
            if v["messageType"] != "error" {
                continue; // a delivery for something the storm subscribed to
            }
            let kind = check_error_message(&text).unwrap_or_else(|e| panic!("{e} after {context}"));
            if v["correlationID"] == probe.as_str() {
                assert_eq!(kind, ProblemKind::UnknownMessageType, "{text}");
                break;
            }
            if is_direct(kind) {
                direct.push((kind, v));
            }
        }
        match (expected, accepted_message) {
            (Some((kind, thing, correlation)), _) => {
                rejected += 1;
                assert_eq!(direct.len(), 1, "one error for {context}, got {direct:?}");
                let (got, v) = &direct[0];
                assert_eq!(*got, kind, "{context}: {v}");
                assert_eq!(v["thingID"], thing.as_str(), "{context}: {v}");
                assert_eq!(
                    v.get("correlationID").and_then(Value::as_str),
                    correlation.as_deref(),
                    "{context}: {v}"
                );
            }
            (None, Some(m)) => {
                accepted += 1;
                assert!(direct.len() <= 1, "{context}: {direct:?}");
                if let Some((kind, v)) = direct.first() {
                    assert_eq!(
                        v["correlationID"],
                        m.reply_correlation_id(),
                        "{context}: {v}"
                    );
                    assert_eq!(v["thingID"], m.thing_id.as_str(), "{context}: {v}");
                    assert!(
                        matches!(
                            kind,
                            ProblemKind::NotSupported
                                | ProblemKind::MissingMember
                                | ProblemKind::InvalidMember
                        ),
                        "{context}: {v}"
                    );
                }
                if matches!(m.body, Body::Error(_)) {
                    assert_eq!(
                        direct.len(),
                        1,
                        "an agent's stray error is refused: {context}"
                    );
                }
            }
            (None, None) => unreachable!(),
        }
    }
    storming.cancel();
    let published = publisher.await.unwrap();
    let storm = started.elapsed();

    // Every event published during the storm reaches both bystanders.
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        let (ws, mqtt) = (
            ws_seen.lock().unwrap().len(),
            mqtt_seen.lock().unwrap().len(),
        );
        if ws as u64 == published && mqtt as u64 == published {
            break;
        }
        assert!(!calm_task.is_finished(), "the WebSocket bystander stopped");
        if watcher_task.is_finished() {
            panic!("{}", watcher_task.await.unwrap());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "bystanders got {ws} (WebSocket) and {mqtt} (MQTT) of {published} events"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        *ws_seen.lock().unwrap(),
        (0..published).collect::<BTreeSet<_>>()
    );
    // The storming connection itself still works.
    client.barrier().await;
    println!(
        "{frames} frames in {storm:.1?}: {rejected} rejected, {accepted} accepted; {published} events reached both bystanders"
    );
    calm_task.abort();
    watcher_task.abort();
    sidecar.stop().await;
}

/// Every packet type a client must not send (server packets, reserved
/// types, a second CONNECT), each with arbitrary flags and bodies, and
/// random bytes after a CONNECT, on both versions and both ports: each
/// sender is closed or answered, and a bystander subscribed beforehand
/// still gets every message, as do 3.1.1 and MQTT 5 clients connecting
/// after the storm.
#[tokio::test]
async fn the_mqtt_guard_survives_packets_no_client_may_send() {
    use common::raw_mqtt::{self as raw, Client};

    let sidecar = TestSidecar::start().await;
    let mut bystander = Client::connect_clean(sidecar.mqtt, 4, "bystander").await;
    bystander
        .send(&raw::subscribe(4, 1, &[("calm/#", 0)]))
        .await;
    bystander.recv().await.expect("SUBACK");
    let mut calm = Client::connect_clean(sidecar.mqtt5, 5, "calm").await;

    let mut runner = TestRunner::deterministic();
    let bodies = proptest::collection::vec(any::<u8>(), 0..40);
    let rounds = cases(64);
    for round in 0..rounds {
        // Types 0, 2, 9, 11, 13, 15 and CONNECT again come first, then any.
        let kind: u8 = [0u8, 1, 2, 9, 11, 13, 15][round as usize % 7];
        let kind = if round < 7 { kind } else { (round % 16) as u8 };
        let flags = (round / 16 % 16) as u8;
        let body = bodies.new_tree(&mut runner).unwrap().current();
        let level = if round % 2 == 0 { 4 } else { 5 };
        let addr = if round % 3 == 0 {
            sidecar.mqtt
        } else {
            sidecar.mqtt5
        };
        let mut c = Client::connect_clean(addr, level, "x1").await;
        c.send(&raw::packet(kind << 4 | flags, &body)).await;
        // Whatever comes back, the connection either answers a ping or
        // closes; it never hangs and never takes anyone with it.
        c.send(&[0xC0, 0]).await;
        let _ = c.until_closed_or_pong().await;

        let n = round.to_string();
        calm.send(&raw::publish(5, "calm/e", 0, 0, &[], n.as_bytes()))
            .await;
        let got = bystander.recv().await.expect("the bystander is served");
        assert_eq!(raw::published(4, &got).1, n.as_bytes(), "round {round}");
    }
    for addr in [sidecar.mqtt, sidecar.mqtt5] {
        for level in [4u8, 5] {
            let mut after = Client::connect_clean(addr, level, "after-storm").await;
            after
                .send(&raw::subscribe(level, 1, &[("calm/#", 0)]))
                .await;
            after.recv().await.expect("SUBACK");
            calm.send(&raw::publish(5, "calm/after", 0, 0, &[], b"a"))
                .await;
            let got = after.recv().await.expect("a new client is served");
            assert_eq!(raw::published(level, &got).1, b"a");
            let got = bystander.recv().await.expect("the bystander too");
            assert_eq!(raw::published(4, &got).1, b"a");
        }
    }
    sidecar.stop().await;
}

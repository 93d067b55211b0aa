//! Every example message of the draft, verbatim (non-UUID IDs and mixed
//! spellings included), must be accepted and survive a canonical round trip.

use super::*;
use serde_json::Value;

macro_rules! examples {
    ($($file:literal),* $(,)?) => {
        [$(($file, include_str!(concat!("../../tests/fixtures/spec-examples/", $file)))),*]
    };
}

const EXAMPLES: [(&str, &str); 18] = examples![
    "actionStatus-1.json",
    "cancelAction-1.json",
    "error-1.json",
    "event-1.json",
    "invokeAction-1.json",
    "observeProperty-1.json",
    "propertyReading-1.json",
    "propertyReadings-1.json",
    "queryAction-1.json",
    "readProperty-1.json",
    "readProperty-2.json",
    "subscribeAllEvents-1.json",
    "subscribeEvent-1.json",
    "unobserveProperty-1.json",
    "unsubscribeAllEvents-1.json",
    "unsubscribeEvent-1.json",
    "writeMultipleProperties-1.json",
    "writeProperty-1.json",
];

#[test]
fn every_example_of_the_draft_is_accepted() {
    for (file, text) in EXAMPLES {
        let message = Message::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{file}: {e}"));
        let expected_type = file.split('-').next().unwrap();
        assert_eq!(message.message_type().as_str(), expected_type, "{file}");
        let raw: Value = serde_json::from_str(text).unwrap();
        let raw_thing = raw.get("thingID").or(raw.get("thingId")).unwrap();
        assert_eq!(message.thing_id, raw_thing.as_str().unwrap(), "{file}");
    }
}

#[test]
fn every_message_type_has_an_example() {
    // `actionInput` is this sidecar's binding, not the draft's.
    for t in MessageType::ALL
        .into_iter()
        .filter(|t| *t != MessageType::ActionInput)
    {
        assert!(
            EXAMPLES
                .iter()
                .any(|(f, _)| f.split('-').next() == Some(t.as_str())),
            "no example for {t}"
        );
    }
}

#[test]
fn canonical_writing_keeps_every_member_of_every_example() {
    for (file, text) in EXAMPLES {
        let raw: Value = serde_json::from_str(text).unwrap();
        let written = Message::parse(text.as_bytes()).unwrap().to_value();
        let written = written.as_object().unwrap();
        for (key, value) in raw.as_object().unwrap() {
            let canonical = match key.as_str() {
                "thingId" => "thingID",
                "messageId" => "messageID",
                "correlationId" => "correlationID",
                other => other,
            };
            assert_eq!(written.get(canonical), Some(value), "{file}: member {key}");
        }
        assert_eq!(written.len(), raw.as_object().unwrap().len(), "{file}");
        assert!(!written.contains_key("thingId"), "{file}");
    }
}

#[test]
fn the_trace_context_example_keeps_its_trace_context() {
    let (_, text) = EXAMPLES
        .iter()
        .find(|(f, _)| *f == "readProperty-2.json")
        .unwrap();
    let m = Message::parse(text.as_bytes()).unwrap();
    assert_eq!(
        m.traceparent.as_deref(),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    );
    assert_eq!(
        m.tracestate.as_deref(),
        Some("congo=BleGNlZWRzIHRohbCBwbGVhc3VyZS4")
    );
}

//! Tests of `lmos/dialect.rs`.

use super::*;
use crate::lmos::{Body, Message};
use serde_json::json;

const T: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

/// A Kotlin message in canonical form, parsed as the gateway does.
fn canonical(v: Value) -> Vec<Message> {
    normalize(obj(v), |_| Some(vec!["a".into(), "b".into()]))
        .unwrap()
        .messages
        .into_iter()
        .map(|m| Message::from_value(Value::Object(m)).unwrap())
        .collect()
}

fn one(v: Value) -> Message {
    let mut all = canonical(v);
    assert_eq!(all.len(), 1);
    all.remove(0)
}

// ----- Kotlin → draft, one test per Messages.kt class -----

#[test]
fn read_property() {
    let m = one(
        json!({"messageType": "readProperty", "thingId": T, "messageId": "m1", "property": "modelConfiguration"}),
    );
    assert_eq!(
        m.body,
        Body::ReadProperty {
            name: "modelConfiguration".into()
        }
    );
    assert_eq!((m.thing_id.as_str(), m.reply_correlation_id()), (T, "m1"));
}

#[test]
fn write_property() {
    let m = one(
        json!({"messageType": "writeProperty", "thingId": T, "messageId": "m1", "property": "p", "data": {"x": 1}}),
    );
    assert_eq!(
        m.body,
        Body::WriteProperty {
            name: "p".into(),
            data: json!({"x": 1})
        }
    );
}

#[test]
// The nanoseconds Jackson writes; an f64 keeps what it can.
#[allow(clippy::excessive_precision)]
fn observe_and_unobserve_property() {
    let m = one(
        json!({"messageType": "observeProperty", "thingId": T, "messageId": "m1", "property": "p", "lastPropertyReading": 1737399600.123456789}),
    );
    assert_eq!(m.body, Body::ObserveProperty { name: "p".into() });
    assert!(m.extra.is_empty(), "{:?}", m.extra);
    let m = one(
        json!({"messageType": "unobserveProperty", "thingId": T, "messageId": "m1", "property": "p"}),
    );
    assert_eq!(m.body, Body::UnobserveProperty { name: "p".into() });
}

#[test]
fn read_multiple_properties_is_one_read_each() {
    let v = json!({"messageType": "readMultipleProperties", "thingId": T, "messageId": "m1", "properties": ["a", "b", "a"]});
    let n = normalize(obj(v), |_| None).unwrap();
    assert_eq!(n.gather, Some(vec!["a".to_owned(), "b".to_owned()]));
    let names: Vec<_> = n
        .messages
        .into_iter()
        .map(|m| {
            let m = Message::from_value(Value::Object(m)).unwrap();
            assert_eq!(m.reply_correlation_id(), "m1");
            m.affordance().unwrap().to_owned()
        })
        .collect();
    assert_eq!(names, ["a", "b"]);
    let bad = json!({"messageType": "readMultipleProperties", "thingId": T, "messageId": "m1", "properties": "a"});
    assert_eq!(
        normalize(obj(bad), |_| None).unwrap_err(),
        DialectError::PropertyList
    );
}

#[test]
fn read_all_properties_reads_what_the_td_lists() {
    let all =
        canonical(json!({"messageType": "readAllProperties", "thingId": T, "messageId": "m1"}));
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].body, Body::ReadProperty { name: "b".into() });
    let v = json!({"messageType": "readAllProperties", "thingId": T, "messageId": "m1"});
    let e = normalize(obj(v), |_| None).unwrap_err();
    assert_eq!(e, DialectError::NoDescription(T.into()));
    assert_eq!(e.problem().kind, ProblemKind::NotFound);
    let td = json!({"properties": {"r": {}, "w": {"writeOnly": true}}});
    assert_eq!(readable_properties(&td), Some(vec!["r".to_owned()]));
}

#[test]
fn write_all_and_write_multiple_properties() {
    for t in ["writeAllProperties", "writeMultipleProperties"] {
        let v =
            json!({"messageType": t, "thingId": T, "messageId": "m1", "data": {"a": 1, "b": "x"}});
        let m = match detect(&obj(v.clone())) {
            // writeMultipleProperties is the same in both.
            None => Message::from_value(v).unwrap(),
            Some(_) => one(v),
        };
        assert_eq!(
            m.body,
            Body::WriteMultipleProperties {
                data: obj(json!({"a": 1, "b": "x"}))
            }
        );
    }
}

#[test]
fn property_reading_and_readings() {
    let m = one(
        json!({"messageType": "propertyReading", "thingId": T, "messageId": "m1", "correlationId": null, "property": "p", "data": 21.5, "timestamp": 1737399600.5}),
    );
    assert_eq!(
        m.body,
        Body::PropertyReading {
            name: "p".into(),
            value: json!(21.5),
            timestamp: "2025-01-20T19:00:00.500Z".into()
        }
    );
    assert_eq!(m.correlation_id, None);
    let m = one(
        json!({"messageType": "propertyReadings", "thingId": T, "messageId": "m1", "correlationId": "c", "data": {"a": 1}, "timestamp": 1737399600}),
    );
    assert_eq!(
        m.body,
        Body::PropertyReadings {
            data: obj(json!({"a": 1})),
            timestamp: "2025-01-20T19:00:00Z".into()
        }
    );
}

#[test]
fn invoke_action_without_input() {
    let m = one(
        json!({"messageType": "invokeAction", "thingId": T, "messageId": "m1", "action": "getWeather", "input": null}),
    );
    assert_eq!(
        m.body,
        Body::InvokeAction {
            action: "getWeather".into(),
            input: None
        }
    );
}

#[test]
fn action_status_and_statuses() {
    let m = one(
        json!({"messageType": "actionStatus", "thingId": T, "messageId": "m1", "correlationId": "c", "action": "a", "status": "completed", "output": null}),
    );
    assert_eq!(
        m.body,
        Body::ActionStatus {
            action: "a".into(),
            status: "completed".into(),
            output: None
        }
    );
    let all = canonical(
        json!({"messageType": "actionStatuses", "thingId": T, "messageId": "m1", "correlationId": "c", "statuses": {"a": "pending", "b": "failed"}}),
    );
    let statuses: Vec<_> = all.iter().map(|m| (m.affordance(), &m.body)).collect();
    assert_eq!(statuses.len(), 2);
    assert!(
        matches!(statuses[1], (Some("b"), Body::ActionStatus { status, .. }) if status == "failed")
    );
    assert!(all.iter().all(|m| m.correlation_id.as_deref() == Some("c")));
}

#[test]
fn subscribe_and_unsubscribe_event() {
    let m = one(
        json!({"messageType": "subscribeevent", "thingId": T, "messageId": "m1", "event": "e", "lastEvent": 1737399600.0}),
    );
    assert_eq!(m.body, Body::SubscribeEvent { event: "e".into() });
    // Where the subscription resumes from.
    assert_eq!(m.extra.get("lastEvent"), Some(&json!(1737399600.0)));
    // unsubscribeEvent is spelled alike: valid in both.
    let v =
        json!({"messageType": "unsubscribeEvent", "thingId": T, "messageId": "m1", "event": "e"});
    assert_eq!(detect(&obj(v.clone())), None);
    let n = normalize(obj(v), |_| None).unwrap();
    let m = Message::from_value(Value::Object(n.messages[0].clone())).unwrap();
    assert_eq!(m.body, Body::UnsubscribeEvent { event: "e".into() });
}

#[test]
fn event() {
    let m = one(
        json!({"messageType": "event", "thingId": T, "messageId": "m1", "correlationId": null, "event": "e", "href": null, "data": {"rating": 4}, "timestamp": 1737399600.25}),
    );
    assert_eq!(
        m.body,
        Body::Event {
            event: "e".into(),
            data: json!({"rating": 4}),
            timestamp: "2025-01-20T19:00:00.250Z".into()
        }
    );
    assert!(m.extra.is_empty());
}

#[test]
fn error_and_acknowledgement() {
    let v = json!({"messageType": "error", "thingId": T, "messageId": "m1", "correlationId": "c", "type": "https://eclipse.dev/lmos/protocol/v1/errors#not-found", "title": "Property Not Found", "status": "404", "detail": "Property 'x' not found.", "instance": "https://eclipse.dev/lmos/protocol/v1/errors/1"});
    // Spelled alike in both: parsed as is.
    let m = Message::from_value(v).unwrap();
    assert!(matches!(&m.body, Body::Error(e) if e.status == "404"));
    let ack = json!({"messageType": "acknowledgement", "thingId": T, "messageId": "m1", "correlationId": "c", "message": "subscribeevent"});
    assert_eq!(detect(&obj(ack.clone())), Some(Dialect::Kotlin));
    assert!(normalize(obj(ack), |_| None).unwrap().messages.is_empty());
}

#[test]
fn detection() {
    let d = |v: Value| detect(&obj(v));
    assert_eq!(
        d(json!({"thingID": T, "messageType": "invokeAction"})),
        Some(Dialect::Draft)
    );
    assert_eq!(
        d(json!({"thingId": T, "messageType": "readProperty", "name": "p"})),
        Some(Dialect::Draft)
    );
    assert_eq!(
        d(json!({"thingId": T, "messageType": "subscribeEvent"})),
        Some(Dialect::Draft)
    );
    assert_eq!(
        d(json!({"thingId": T, "messageType": "invokeAction", "action": "a"})),
        None
    );
    assert_eq!(
        d(json!({"thingId": T, "messageType": "event", "timestamp": 1.5})),
        Some(Dialect::Kotlin)
    );
}

// ----- draft → Kotlin -----

fn rendered(m: Message) -> Value {
    render(m.to_value())
}

fn assert_envelope(v: &Value) {
    for draft in ["thingID", "messageID", "correlationID"] {
        assert!(v.get(draft).is_none(), "{draft} in {v}");
    }
    assert!(
        v["thingId"].is_string() && v["messageId"].is_string(),
        "{v}"
    );
}

#[test]
fn readings_get_property_data_and_numeric_timestamps() {
    let m = Message::new(
        T,
        Body::PropertyReading {
            name: "p".into(),
            value: json!(3),
            timestamp: "2025-01-20T19:00:00.500Z".into(),
        },
    )
    .with_correlation_id("c");
    let v = rendered(m);
    assert_envelope(&v);
    assert_eq!(
        (
            &v["property"],
            &v["data"],
            &v["timestamp"],
            &v["correlationId"]
        ),
        (&json!("p"), &json!(3), &json!(1737399600.5), &json!("c"))
    );
    assert!(v.get("name").is_none() && v.get("value").is_none());
    let v = rendered(Message::new(
        T,
        Body::PropertyReadings {
            data: obj(json!({"a": 1})),
            timestamp: "2025-01-20T19:00:00Z[Europe/Paris]".into(),
        },
    ));
    assert_eq!(v["timestamp"], json!(1737399600.0));
    assert_eq!(v["data"], json!({"a": 1}));
}

#[test]
fn events_and_action_statuses() {
    let v = rendered(Message::new(
        T,
        Body::Event {
            event: "e".into(),
            data: json!(1),
            timestamp: "2025-01-20T19:00:00Z".into(),
        },
    ));
    assert_envelope(&v);
    assert_eq!((&v["event"], &v["data"]), (&json!("e"), &json!(1)));
    for (draft, kotlin) in [
        ("pending", "pending"),
        ("running", "pending"),
        ("completed", "completed"),
        ("failed", "failed"),
        ("cancelled", "failed"),
    ] {
        let v = rendered(Message::new(
            T,
            Body::ActionStatus {
                action: "a".into(),
                status: draft.into(),
                output: None,
            },
        ));
        assert_eq!(v["status"], kotlin);
    }
}

#[test]
fn requests_to_a_kotlin_agent_carry_the_route_as_message_id() {
    let m = Message::new(
        T,
        Body::WriteProperty {
            name: "p".into(),
            data: json!(1),
        },
    )
    .with_correlation_id("route");
    let v = rendered(m);
    assert_eq!(
        v,
        json!({"thingId": T, "messageId": "route", "messageType": "writeProperty", "property": "p", "data": 1})
    );
    let v = rendered(Message::new(T, Body::SubscribeEvent { event: "e".into() }));
    assert_eq!(v["messageType"], "subscribeevent");
    let v = rendered(Message::new(
        T,
        Body::InvokeAction {
            action: "a".into(),
            input: Some(json!({"q": 1})),
        },
    ));
    assert_eq!((&v["action"], &v["input"]), (&json!("a"), &json!({"q": 1})));
    let v = rendered(Message::new(T, Body::ReadProperty { name: "p".into() }));
    assert_eq!(v["property"], "p");
}

#[test]
fn errors_keep_their_problem_members_and_string_status() {
    let m = Problem::new(ProblemKind::NotFound, "gone").to_message(T, Some("c"));
    let v = rendered(m);
    assert_envelope(&v);
    assert_eq!(v["correlationId"], "c");
    assert_eq!(v["status"], "404");
    for member in ["type", "title", "detail", "instance"] {
        assert!(v[member].is_string(), "{member}");
    }
}

#[test]
fn acknowledgements_render_as_kotlin_writes_them() {
    let v = render(acknowledgement(T, "m1", "subscribeevent"));
    assert_eq!(v["messageType"], "acknowledgement");
    assert_eq!(
        (&v["thingId"], &v["correlationId"], &v["message"]),
        (&json!(T), &json!("m1"), &json!("subscribeevent"))
    );
    assert_envelope(&v);
}

#[test]
fn round_trip_keeps_the_meaning() {
    let m = Message::new(
        T,
        Body::PropertyReading {
            name: "p".into(),
            value: json!({"deep": [1, 2]}),
            timestamp: "2025-01-20T19:00:00.125Z".into(),
        },
    )
    .with_correlation_id("c");
    let kotlin = obj(render(m.to_value()));
    let back = normalize(kotlin, |_| None).unwrap().messages.remove(0);
    let back = Message::from_value(Value::Object(back)).unwrap();
    assert_eq!((back.body, back.correlation_id), (m.body, m.correlation_id));
}

// ----- gathering -----

fn reading(name: &str, value: i64, correlation: &str) -> Value {
    Message::new(
        T,
        Body::PropertyReading {
            name: name.into(),
            value: json!(value),
            timestamp: "2025-01-20T19:00:00Z".into(),
        },
    )
    .with_correlation_id(correlation)
    .to_value()
}

#[test]
fn readings_are_joined_into_one_property_readings() {
    let mut g = Gatherer::default();
    assert!(g.gather(T, "m1", &["a".into(), "b".into()]).is_none());
    let other = reading("a", 0, "other");
    assert_eq!(g.offer(other.clone()), Some(other));
    assert_eq!(g.offer(reading("b", 2, "m1")), None);
    let joined = g.offer(reading("a", 1, "m1")).unwrap();
    assert_eq!(joined["messageType"], "propertyReadings");
    assert_eq!(joined["correlationID"], "m1");
    assert_eq!(joined["data"], json!({"b": 2, "a": 1}));
    assert!(g.is_empty());
    let empty = g.gather(T, "m2", &[]).unwrap();
    assert_eq!(empty["data"], json!({}));
}

#[test]
fn the_first_error_answers_a_gathered_read() {
    let mut g = Gatherer::default();
    g.gather(T, "m1", &["a".into(), "b".into(), "c".into()]);
    assert_eq!(g.offer(reading("a", 1, "m1")), None);
    let e = Problem::new(ProblemKind::Timeout, "late")
        .to_message(T, Some("m1"))
        .to_value();
    assert_eq!(g.offer(e.clone()), Some(e.clone()));
    assert_eq!(g.offer(e), None);
    assert!(g.is_empty());
}

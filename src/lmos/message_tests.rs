//! Tests of `lmos/message.rs`.

use super::*;
use serde_json::json;

fn parse(v: Value) -> Result<Message, Rejection> {
    Message::from_value(v)
}

#[test]
fn both_spellings_of_the_envelope_are_read() {
    let a = parse(json!({"thingID": "urn:x", "messageID": "1", "messageType": "subscribeAllEvents", "correlationID": "c"})).unwrap();
    let b = parse(json!({"thingId": "urn:x", "messageId": "1", "messageType": "subscribeAllEvents", "correlationId": "c"})).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.thing_id, "urn:x");
    assert_eq!(a.correlation_id.as_deref(), Some("c"));
}

#[test]
fn conflicting_spellings_are_rejected() {
    let e = parse(json!({"thingID": "urn:x", "thingId": "urn:y", "messageID": "1", "messageType": "subscribeAllEvents"})).unwrap_err();
    assert!(
        matches!(e.kind, RejectionKind::ConflictingMembers { .. }),
        "{e:?}"
    );
}

#[test]
fn a_rejection_is_correlated_by_whichever_spelling_holds_a_string() {
    // Found by tests/gateway/fuzz.rs: the table spelling, present but unusable,
    // hid the other one.
    let e = parse(json!({"thingID": "", "thingId": "urn:y", "messageID": null, "messageId": "m", "correlationID": 5, "correlationId": "c", "messageType": "subscribeAllEvents"})).unwrap_err();
    assert!(matches!(e.kind, RejectionKind::ConflictingMembers { .. }));
    assert_eq!(
        (
            e.thing_id.as_deref(),
            e.message_id.as_deref(),
            e.correlation_id.as_deref()
        ),
        (Some("urn:y"), Some("m"), Some("c"))
    );
}

#[test]
fn the_writer_uses_the_table_spelling_and_keeps_unknown_members() {
    let m = parse(json!({"thingId": "urn:x", "messageId": "1", "messageType": "event", "event": "e", "data": {"a": 1}, "timestamp": "2025-01-20T19:00:00Z", "x-vendor": [1, 2], "correlationId": "c"})).unwrap();
    let out = m.to_value();
    assert_eq!(
        out,
        json!({"thingID": "urn:x", "messageID": "1", "messageType": "event", "correlationID": "c", "event": "e", "data": {"a": 1}, "timestamp": "2025-01-20T19:00:00Z", "x-vendor": [1, 2]})
    );
    let keys: Vec<_> = out.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        &keys[..4],
        ["thingID", "messageID", "messageType", "correlationID"]
    );
    assert_eq!(parse(out).unwrap(), m);
}

#[test]
fn missing_and_ill_typed_members_name_the_member() {
    let e = parse(json!({"thingID": "urn:x", "messageID": "m1", "messageType": "readProperty"}))
        .unwrap_err();
    assert_eq!(e.kind, RejectionKind::MissingMember("name"));
    assert_eq!(e.message_id.as_deref(), Some("m1"));
    assert_eq!(e.message_type.as_deref(), Some("readProperty"));

    let e = parse(
        json!({"thingID": "urn:x", "messageID": "m1", "messageType": "readProperty", "name": 3}),
    )
    .unwrap_err();
    assert!(matches!(
        e.kind,
        RejectionKind::InvalidMember { member: "name", .. }
    ));

    let e =
        parse(json!({"thingID": 7, "messageID": "m1", "messageType": "readProperty", "name": "n"}))
            .unwrap_err();
    assert!(matches!(
        e.kind,
        RejectionKind::InvalidMember {
            member: "thingID",
            ..
        }
    ));

    let e =
        parse(json!({"messageID": "m1", "messageType": "readProperty", "name": "n"})).unwrap_err();
    assert_eq!(e.kind, RejectionKind::MissingMember("thingID"));

    let e = parse(json!({"thingID": "urn:x", "messageID": "m1", "messageType": "event", "event": "e", "data": 1, "timestamp": "yesterday"})).unwrap_err();
    assert!(matches!(
        e.kind,
        RejectionKind::InvalidMember {
            member: "timestamp",
            ..
        }
    ));
}

#[test]
fn unknown_type_and_non_objects_are_rejected() {
    let e = parse(json!({"thingID": "urn:x", "messageID": "m1", "messageType": "teleport"}))
        .unwrap_err();
    assert_eq!(e.kind, RejectionKind::UnknownMessageType("teleport".into()));
    assert_eq!(
        parse(json!([1])).unwrap_err().kind,
        RejectionKind::NotAnObject
    );
    let e = Message::parse(b"{\"thingID\": ").unwrap_err();
    assert!(
        matches!(e.kind, RejectionKind::InvalidJson { line: 1, .. }),
        "{e:?}"
    );
}

#[test]
fn timestamps_accept_rfc_9557_suffixes() {
    for ts in [
        "2024-01-13T23:20:50.52Z",
        "2025-01-20T19:00:00+01:00",
        "2025-01-20T19:00:00Z[Europe/Paris]",
    ] {
        parse(json!({"thingID": "urn:x", "messageID": "m", "messageType": "propertyReadings", "data": {}, "timestamp": ts})).unwrap();
    }
}

#[test]
fn error_status_may_be_a_number() {
    let m = parse(json!({"thingID": "urn:x", "messageID": "m", "messageType": "error", "type": "t", "title": "x", "status": 500, "detail": "d", "instance": "i"})).unwrap();
    match m.body {
        Body::Error(e) => assert_eq!(e.status, "500"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn new_messages_get_uuid_v4_ids() {
    let m = Message::new("urn:x", Body::SubscribeAllEvents);
    let id = Uuid::parse_str(&m.message_id).unwrap();
    assert_eq!(id.get_version_num(), 4);
}

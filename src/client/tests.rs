//! How the client reads and prints answers (no I/O).

use serde_json::json;

use super::{ends, render, Output};

#[test]
fn a_cancel_succeeds_when_the_action_is_cancelled() {
    let status = |s: &str| json!({"messageType": "actionStatus", "status": s});
    assert_eq!(ends("cancelAction", &status("cancelled")), Some(true));
    assert_eq!(ends("cancelAction", &status("completed")), Some(false));
    assert_eq!(
        ends("cancelAction", &json!({"messageType": "error"})),
        Some(false)
    );
    assert_eq!(ends("invokeAction", &status("cancelled")), Some(false));
    assert_eq!(ends("invokeAction", &status("running")), None);
    assert_eq!(ends("queryAction", &status("running")), Some(true));
    assert_eq!(ends("queryAction", &status("failed")), Some(false));
}

#[test]
fn a_write_confirmed_prints_as_a_read() {
    let read = json!({"messageType": "propertyReading", "thingID": "urn:x", "name": "p", "value": {"a": 1}});
    let written =
        json!({"messageType": "propertyReadings", "thingID": "urn:x", "data": {"p": {"a": 1}}});
    assert_eq!(render(&read, Output::Human), "urn:x p = {\"a\":1}");
    assert_eq!(
        render(&written, Output::Human),
        render(&read, Output::Human)
    );
}

//! Tests of `directory/forms.rs`.

use super::*;

const WEATHER: &str = include_str!("../../tests/fixtures/weather-agent-td.json");

fn endpoints() -> Endpoints {
    Endpoints {
        websocket: "ws://sidecar:8080/lmos".into(),
        mqtt: "mqtt://sidecar:1883".into(),
        http: "http://sidecar:8080".into(),
        topics: Topics::new("lmos").unwrap(),
        value_topics: true,
        http_schemes: Vec::new(),
        mqtt_password: false,
    }
}

fn forms<'a>(td: &'a Value, pointer: &str) -> &'a Vec<Value> {
    td.pointer(pointer).and_then(Value::as_array).unwrap()
}

#[test]
fn every_affordance_gets_websocket_and_mqtt_forms_on_the_topic_table() {
    let mut td: Value = serde_json::from_str(WEATHER).unwrap();
    rewrite(&mut td, &endpoints());
    let t = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";

    let p = forms(&td, "/properties/modelConfiguration/forms");
    assert!(
        p.iter()
            .any(|f| f["href"].as_str().unwrap().starts_with("https:")),
        "the agent's own HTTP form is kept: {p:?}"
    );
    let ws = p
        .iter()
        .find(|f| f["subprotocol"] == "lmosprotocol")
        .unwrap();
    assert_eq!(ws["href"], "ws://sidecar:8080/lmos");
    assert!(
        !ws["op"]
            .as_array()
            .unwrap()
            .contains(&json!("writeproperty")),
        "readOnly"
    );
    // A WoT consumer takes the first form of its protocol for an
    // operation: the HTTP form, and on MQTT the value-only topic.
    let first = |scheme: &str, op: &str| {
        p.iter()
            .find(|f| {
                f["href"].as_str().unwrap().starts_with(scheme)
                    && f["op"].as_array().is_some_and(|o| o.contains(&json!(op)))
            })
            .unwrap()
    };
    assert_eq!(
        first("http:", "readproperty")["href"],
        format!("http://sidecar:8080/things/{t}/properties/modelConfiguration")
    );
    assert_eq!(first("http:", "readproperty")["htv:methodName"], "GET");
    assert!(
        !p.iter().any(|f| f["op"] == json!(["writeproperty"])),
        "readOnly: {p:?}"
    );
    let value = first("mqtt:", "observeproperty");
    assert_eq!(
        value["mqv:filter"],
        format!("lmos/{t}/values/properties/modelConfiguration")
    );
    assert!(value.get("subprotocol").is_none());
    assert_eq!(first("mqtt:", "readproperty"), value);
    let envelope = p
        .iter()
        .find(|f| f["mqv:filter"] == format!("lmos/{t}/properties/modelConfiguration"))
        .unwrap();
    assert_eq!(envelope["subprotocol"], "lmosprotocol");
    assert_eq!(
        envelope["href"],
        format!("mqtt://sidecar:1883/lmos/{t}/properties/modelConfiguration")
    );

    let a = forms(&td, "/actions/getWeather/forms");
    let invoke = a
        .iter()
        .find(|f| f["op"] == "invokeaction" && f["mqv:topic"].is_string())
        .unwrap();
    assert_eq!(
        invoke["mqv:topic"],
        format!("lmos/{t}/requests/invokeAction")
    );
    assert_eq!(invoke["mqv:controlPacket"], "publish");

    let e = forms(&td, "/events/userFeedbackReceived/forms");
    assert!(e
        .iter()
        .any(|f| f["mqv:filter"] == format!("lmos/{t}/events/userFeedbackReceived")));
    let top = forms(&td, "/forms");
    assert!(top
        .iter()
        .any(|f| f["mqv:filter"] == format!("lmos/{t}/events/+")));
    assert!(td["@context"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["mqv"] == MQTT_NAMESPACE));
}

#[test]
fn forms_for_other_protocols_are_kept_and_ours_replaced() {
    let mut td = json!({"id": "urn:t", "@context": "x", "events": {"e": {"forms": [
        {"href": "https://agent.example/e", "op": "subscribeevent"},
        {"href": "ws://agent.example/old", "op": "subscribeevent"}
    ]}}});
    rewrite(&mut td, &endpoints());
    rewrite(&mut td, &endpoints());
    let f = forms(&td, "/events/e/forms");
    assert_eq!(f.len(), 4, "{f:?}");
    assert_eq!(f[3]["href"], "https://agent.example/e", "theirs last");
    assert_eq!(
        td["@context"],
        json!(["x", {"mqv": MQTT_NAMESPACE}, {"htv": HTTP_NAMESPACE}, {"lmos": LMOS_NAMESPACE}])
    );
}

#[test]
fn without_value_topics_no_form_points_at_them() {
    let mut td: Value = serde_json::from_str(WEATHER).unwrap();
    let endpoints = Endpoints {
        value_topics: false,
        ..endpoints()
    };
    rewrite(&mut td, &endpoints);
    assert!(!td.to_string().contains("/values/"));
}

#[test]
fn thing_ids_are_one_path_segment_in_http_hrefs() {
    assert_eq!(path_segment("urn:uuid:1-2"), "urn:uuid:1-2");
    assert_eq!(path_segment("a/b c?#%é"), "a%2Fb%20c%3F%23%25%C3%A9");
}

#[test]
fn topic_characters_that_mean_something_in_uris_are_escaped_in_hrefs() {
    assert_eq!(uri_path("lmos/a%2Fb/events/+"), "lmos/a%252Fb/events/+");
    assert_eq!(uri_path("lmos/x/#"), "lmos/x/%23");
}

//! Forms for the sidecar: every TD served says how to reach each affordance
//! through this sidecar, over the `lmosprotocol` WebSocket and over MQTT
//! (W3C WoT Binding Templates, MQTT), on the topics of [`crate::topics`].
//! Pure functions.

use serde_json::{json, Map, Value};

use crate::topics::Topics;

pub const MQTT_NAMESPACE: &str = "https://www.w3.org/2019/wot/mqtt#";

/// Where consumers reach this sidecar (the advertised addresses, not
/// necessarily the bound ones).
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// e.g. `ws://sidecar.example:8080/lmos`
    pub websocket: String,
    /// e.g. `mqtt://sidecar.example:1883`
    pub mqtt: String,
    pub topics: Topics,
}

/// A topic as the path of an `mqtt://` URI: decoding the href gives the
/// topic back (`%`, `#`, `?` and spaces would not survive otherwise). The
/// exact topic is also in `mqv:topic` / `mqv:filter`.
fn uri_path(topic: &str) -> String {
    let mut out = String::with_capacity(topic.len());
    for c in topic.chars() {
        match c {
            '%' => out.push_str("%25"),
            '#' => out.push_str("%23"),
            '?' => out.push_str("%3F"),
            ' ' => out.push_str("%20"),
            c => out.push(c),
        }
    }
    out
}

impl Endpoints {
    fn ws(&self, ops: &[&str]) -> Value {
        json!({
            "href": self.websocket,
            "subprotocol": "lmosprotocol",
            "op": ops,
            "contentType": "application/json",
        })
    }

    fn mqtt_publish(&self, topic: &str, op: &str) -> Value {
        json!({
            "href": format!("{}/{}", self.mqtt, uri_path(topic)),
            "op": op,
            "contentType": "application/json",
            "mqv:controlPacket": "publish",
            "mqv:topic": topic,
            "mqv:qos": "1",
            "mqv:retain": false,
        })
    }

    fn mqtt_subscribe(&self, filter: &str, ops: &[&str]) -> Value {
        json!({
            "href": format!("{}/{}", self.mqtt, uri_path(filter)),
            "op": ops,
            "contentType": "application/json",
            "mqv:controlPacket": "subscribe",
            "mqv:filter": filter,
            "mqv:qos": "1",
        })
    }
}

/// Whether a form reaches the Thing over a protocol the sidecar now serves
/// (those are replaced; forms for other protocols are kept).
fn is_ours(form: &Value) -> bool {
    let href = form["href"].as_str().unwrap_or_default();
    ["ws:", "wss:", "mqtt:", "mqtts:"]
        .iter()
        .any(|s| href.starts_with(s))
}

fn set_forms(affordance: &mut Value, added: Vec<Value>) {
    let Some(map) = affordance.as_object_mut() else {
        return;
    };
    let mut forms: Vec<Value> = match map.remove("forms") {
        Some(Value::Array(forms)) => forms.into_iter().filter(|f| !is_ours(f)).collect(),
        _ => Vec::new(),
    };
    forms.extend(added);
    map.insert("forms".into(), Value::Array(forms));
}

fn affordances(td: &mut Value, kind: &str) -> Vec<(String, Value)> {
    td.get_mut(kind)
        .and_then(Value::as_object_mut)
        .map(|m| std::mem::take(m).into_iter().collect())
        .unwrap_or_default()
}

/// Adds (or replaces) the sidecar's WebSocket and MQTT forms on every
/// property, action and event, and the Thing-level forms for all events.
pub fn rewrite(td: &mut Value, endpoints: &Endpoints) {
    let Some(thing) = td["id"].as_str().map(str::to_owned) else {
        return;
    };
    let t = &endpoints.topics;

    let mut properties = Map::new();
    for (name, mut p) in affordances(td, "properties") {
        let read_only = p["readOnly"] == true;
        let mut ws_ops = vec!["readproperty", "observeproperty", "unobserveproperty"];
        let mut forms = vec![
            endpoints.mqtt_publish(&t.request(&thing, "readProperty"), "readproperty"),
            endpoints.mqtt_subscribe(
                &t.property(&thing, &name),
                &["observeproperty", "unobserveproperty"],
            ),
        ];
        if !read_only {
            ws_ops.insert(1, "writeproperty");
            forms
                .push(endpoints.mqtt_publish(&t.request(&thing, "writeProperty"), "writeproperty"));
        }
        forms.insert(0, endpoints.ws(&ws_ops));
        set_forms(&mut p, forms);
        properties.insert(name, p);
    }

    let mut actions = Map::new();
    for (name, mut a) in affordances(td, "actions") {
        let forms = vec![
            endpoints.ws(&["invokeaction", "queryaction", "cancelaction"]),
            endpoints.mqtt_publish(&t.request(&thing, "invokeAction"), "invokeaction"),
            endpoints.mqtt_publish(&t.request(&thing, "queryAction"), "queryaction"),
            endpoints.mqtt_publish(&t.request(&thing, "cancelAction"), "cancelaction"),
        ];
        set_forms(&mut a, forms);
        actions.insert(name, a);
    }

    let mut events = Map::new();
    for (name, mut e) in affordances(td, "events") {
        let forms = vec![
            endpoints.ws(&["subscribeevent", "unsubscribeevent"]),
            endpoints.mqtt_subscribe(
                &t.event(&thing, &name),
                &["subscribeevent", "unsubscribeevent"],
            ),
        ];
        set_forms(&mut e, forms);
        events.insert(name, e);
    }

    let has_events = !events.is_empty();
    for (kind, map) in [
        ("properties", properties),
        ("actions", actions),
        ("events", events),
    ] {
        if !map.is_empty() {
            td[kind] = Value::Object(map);
        }
    }
    if has_events {
        let top = vec![
            endpoints.ws(&["subscribeallevents", "unsubscribeallevents"]),
            endpoints.mqtt_subscribe(
                &t.thing_events_filter(&thing),
                &["subscribeallevents", "unsubscribeallevents"],
            ),
        ];
        set_forms(td, top);
    }
    add_mqtt_context(td);
}

/// Brings the `mqv:` prefix into `@context`, once.
fn add_mqtt_context(td: &mut Value) {
    let mqv = json!({ "mqv": MQTT_NAMESPACE });
    let context = td.get_mut("@context");
    match context {
        Some(Value::Array(items)) => {
            let present = items.iter().any(|i| i.get("mqv").is_some());
            if !present {
                items.push(mqv);
            }
        }
        Some(other) => {
            let first = other.take();
            *other = Value::Array(vec![first, mqv]);
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEATHER: &str = include_str!("../../tests/fixtures/weather-agent-td.json");

    fn endpoints() -> Endpoints {
        Endpoints {
            websocket: "ws://sidecar:8080/lmos".into(),
            mqtt: "mqtt://sidecar:1883".into(),
            topics: Topics::new("lmos").unwrap(),
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
        let observe = p.iter().find(|f| f["mqv:filter"].is_string()).unwrap();
        assert_eq!(
            observe["mqv:filter"],
            format!("lmos/{t}/properties/modelConfiguration")
        );
        assert_eq!(
            observe["href"],
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
        assert_eq!(f.len(), 3, "{f:?}");
        assert_eq!(f[0]["href"], "https://agent.example/e");
        assert_eq!(td["@context"], json!(["x", {"mqv": MQTT_NAMESPACE}]));
    }

    #[test]
    fn topic_characters_that_mean_something_in_uris_are_escaped_in_hrefs() {
        assert_eq!(uri_path("lmos/a%2Fb/events/+"), "lmos/a%252Fb/events/+");
        assert_eq!(uri_path("lmos/x/#"), "lmos/x/%23");
    }
}

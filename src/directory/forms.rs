//! Forms for the sidecar: every TD served says how to reach each affordance
//! through this sidecar, over the `lmosprotocol` WebSocket, over HTTP (the
//! WoT HTTP Basic Profile's conventions, `crate::http::things`) and over
//! MQTT (W3C WoT Binding Templates, MQTT), on the topics of
//! [`crate::topics`]. Pure functions.
//!
//! Each form delivers what it promises. The HTTP forms and the MQTT forms on
//! the `values/` topics carry the affordance's data as its schema describes
//! it, so a stock WoT consumer (node-wot) can follow them; they come first,
//! because such a consumer takes the first form of a protocol it speaks for
//! an operation. The forms on the LMOS envelope topics say
//! `"subprotocol": "lmosprotocol"`: their payloads are LMOS messages.

use serde_json::{json, Map, Value};

use crate::config::HttpScheme;
use crate::topics::Topics;

pub const MQTT_NAMESPACE: &str = "https://www.w3.org/2019/wot/mqtt#";
pub const HTTP_NAMESPACE: &str = "http://www.w3.org/2011/http#";
pub const LMOS_NAMESPACE: &str = "https://eclipse.dev/lmos/protocol/v1";

/// Where consumers reach this sidecar (the advertised addresses, not
/// necessarily the bound ones).
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// e.g. `ws://sidecar.example:8080/lmos`
    pub websocket: String,
    /// e.g. `mqtt://sidecar.example:1883`
    pub mqtt: String,
    /// e.g. `http://sidecar.example:8080`
    pub http: String,
    pub topics: Topics,
    /// Whether the `values/` topics are kept (`topics.value_topics`).
    pub value_topics: bool,
    /// Schemes the HTTP port requires (empty: none).
    pub http_schemes: Vec<HttpScheme>,
    /// Whether MQTT clients must give a username and password.
    pub mqtt_password: bool,
}

const NOSEC: &str = "nosec_sc";
const BASIC: &str = "basic_sc";
const BEARER: &str = "bearer_sc";
const WS_COMBO: &str = "lmos_ws_sc";
const MQTT_PASSWORD: &str = "lmos_mqtt_sc";
/// Marks the HTTP forms the sidecar wrote, so a TD rewritten again (or
/// learnt from another sidecar) gets this sidecar's and keeps the agent's.
const OURS: &str = "lmos:sidecar";

/// Where an invocation's status is kept, relative to the sidecar's HTTP
/// base: `GET` queries it, `DELETE` cancels it (HTTP binding), and every
/// `actionStatus` a consumer gets names it as `href`.
pub fn status_href(thing: &str, action: &str, invocation: &str) -> String {
    format!(
        "/things/{}/actions/{}/{}",
        path_segment(thing),
        path_segment(action),
        path_segment(invocation)
    )
}

/// One path segment, percent-encoded as RFC 3986 asks (`urn:uuid:...` stays
/// readable: `:` is allowed in a segment).
pub fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:@!$&'()*+,;=".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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
    /// The security scheme names in force for the WebSocket and for MQTT.
    fn scheme_names(&self) -> (&'static str, &'static str) {
        let basic = self.http_schemes.contains(&HttpScheme::Basic);
        let bearer = self.http_schemes.contains(&HttpScheme::Bearer);
        let ws = match (basic, bearer) {
            (true, true) => WS_COMBO,
            (true, false) => BASIC,
            (false, true) => BEARER,
            (false, false) => NOSEC,
        };
        let mqtt = if self.mqtt_password {
            MQTT_PASSWORD
        } else {
            NOSEC
        };
        (ws, mqtt)
    }

    /// The definitions of those schemes (and of the parts of a combo).
    fn security_definitions(&self) -> Map<String, Value> {
        let (ws, mqtt) = self.scheme_names();
        let mut definitions = Map::new();
        let mut define = |name: &str, v: Value| {
            definitions.insert(name.to_owned(), v);
        };
        if ws == BASIC || ws == WS_COMBO {
            define(
                BASIC,
                json!({"scheme": "basic", "in": "header", "name": "Authorization"}),
            );
        }
        if ws == BEARER || ws == WS_COMBO {
            define(
                BEARER,
                json!({"scheme": "bearer", "in": "header", "name": "Authorization", "format": "opaque"}),
            );
        }
        if ws == WS_COMBO {
            define(
                WS_COMBO,
                json!({"scheme": "combo", "oneOf": [BASIC, BEARER]}),
            );
        }
        if mqtt == MQTT_PASSWORD {
            define(
                MQTT_PASSWORD,
                json!({
                    "scheme": "basic",
                    "in": "auto",
                    "description": "MQTT CONNECT username and password (the password may also be one of the principal's bearer tokens)",
                }),
            );
        }
        if ws == NOSEC || mqtt == NOSEC {
            define(NOSEC, json!({"scheme": "nosec"}));
        }
        definitions
    }

    fn ws(&self, ops: &[&str]) -> Value {
        json!({
            "href": self.websocket,
            "subprotocol": "lmosprotocol",
            "op": ops,
            "contentType": "application/json",
            "security": self.scheme_names().0,
        })
    }

    /// An HTTP form on `{http}/things/{id}/{path}`.
    fn http(&self, thing: &str, path: &str, ops: &[&str], method: Option<&str>) -> Value {
        let mut form = json!({
            "href": format!("{}/things/{}/{path}", self.http, path_segment(thing)),
            "op": ops,
            "contentType": "application/json",
            "security": self.scheme_names().0,
            OURS: true,
        });
        if let Some(method) = method {
            form["htv:methodName"] = method.into();
        }
        form
    }

    /// An MQTT form on a `values/` topic: the payload is the data itself.
    fn mqtt_value(&self, topic: &str, ops: &[&str]) -> Value {
        let mut form = self.mqtt_subscribe(topic, ops);
        if let Some(f) = form.as_object_mut() {
            f.remove("subprotocol");
        }
        form
    }

    fn event_forms(&self, thing: &str, event: &str) -> Vec<Value> {
        let ops = ["subscribeevent", "unsubscribeevent"];
        let mut forms = vec![self.ws(&ops)];
        if self.value_topics {
            forms.push(self.mqtt_value(&self.topics.event_value(thing, event), &ops));
        }
        forms.push(self.mqtt_subscribe(&self.topics.event(thing, event), &ops));
        forms
    }

    fn mqtt_publish(&self, topic: &str, op: &str) -> Value {
        json!({
            "href": format!("{}/{}", self.mqtt, uri_path(topic)),
            "op": op,
            "subprotocol": "lmosprotocol",
            "contentType": "application/json",
            "mqv:controlPacket": "publish",
            "mqv:topic": topic,
            "mqv:qos": "1",
            "mqv:retain": false,
            "security": self.scheme_names().1,
        })
    }

    fn mqtt_subscribe(&self, filter: &str, ops: &[&str]) -> Value {
        json!({
            "href": format!("{}/{}", self.mqtt, uri_path(filter)),
            "op": ops,
            "subprotocol": "lmosprotocol",
            "contentType": "application/json",
            "mqv:controlPacket": "subscribe",
            "mqv:filter": filter,
            "mqv:qos": "1",
            "security": self.scheme_names().1,
        })
    }
}

/// Whether a form reaches the Thing over a protocol the sidecar now serves,
/// or is an HTTP form a sidecar wrote (those are replaced; the agent's own
/// forms for other protocols are kept).
fn is_ours(form: &Value) -> bool {
    let href = form["href"].as_str().unwrap_or_default();
    form[OURS] == true
        || ["ws:", "wss:", "mqtt:", "mqtts:"]
            .iter()
            .any(|s| href.starts_with(s))
}

/// The sidecar's forms first (see the module documentation), then the
/// agent's own for other protocols.
fn set_forms(affordance: &mut Value, added: Vec<Value>) {
    let Some(map) = affordance.as_object_mut() else {
        return;
    };
    let mut forms = added;
    if let Some(Value::Array(theirs)) = map.remove("forms") {
        forms.extend(theirs.into_iter().filter(|f| !is_ours(f)));
    }
    map.insert("forms".into(), Value::Array(forms));
}

fn affordances(td: &mut Value, kind: &str) -> Vec<(String, Value)> {
    td.get_mut(kind)
        .and_then(Value::as_object_mut)
        .map(|m| std::mem::take(m).into_iter().collect())
        .unwrap_or_default()
}

/// The sidecar's own directory description: its HTTP forms as they are,
/// the security in force on the HTTP port (the directory API's, the
/// WebSocket's), and forms for its events (`thingCreated`, ...), which it
/// publishes as its own LMOS events.
pub fn directory(td: &mut Value, endpoints: &Endpoints) {
    let Some(thing) = td["id"].as_str().map(str::to_owned) else {
        return;
    };
    declare_security(td, endpoints);
    let mut events = Map::new();
    for (name, mut e) in affordances(td, "events") {
        set_forms(&mut e, endpoints.event_forms(&thing, &name));
        events.insert(name, e);
    }
    if !events.is_empty() {
        td["events"] = Value::Object(events);
        add_contexts(td);
    }
}

/// Adds (or replaces) the sidecar's WebSocket and MQTT forms on every
/// property, action and event, and the Thing-level forms for all events.
pub fn rewrite(td: &mut Value, endpoints: &Endpoints) {
    let Some(thing) = td["id"].as_str().map(str::to_owned) else {
        return;
    };
    let t = &endpoints.topics;
    declare_security(td, endpoints);

    let values = endpoints.value_topics;
    let mut properties = Map::new();
    for (name, mut p) in affordances(td, "properties") {
        let read_only = p["readOnly"] == true;
        let path = format!("properties/{}", path_segment(&name));
        let mut forms = if read_only {
            vec![
                endpoints.ws(&["readproperty", "observeproperty", "unobserveproperty"]),
                endpoints.http(&thing, &path, &["readproperty"], Some("GET")),
            ]
        } else {
            vec![
                endpoints.ws(&[
                    "readproperty",
                    "writeproperty",
                    "observeproperty",
                    "unobserveproperty",
                ]),
                endpoints.http(&thing, &path, &["readproperty"], Some("GET")),
                endpoints.http(&thing, &path, &["writeproperty"], Some("PUT")),
            ]
        };
        if values {
            forms.push(endpoints.mqtt_value(
                &t.property_value(&thing, &name),
                &["readproperty", "observeproperty", "unobserveproperty"],
            ));
        }
        forms.push(endpoints.mqtt_publish(&t.request(&thing, "readProperty"), "readproperty"));
        forms.push(endpoints.mqtt_subscribe(
            &t.property(&thing, &name),
            &["observeproperty", "unobserveproperty"],
        ));
        if !read_only {
            forms
                .push(endpoints.mqtt_publish(&t.request(&thing, "writeProperty"), "writeproperty"));
        }
        set_forms(&mut p, forms);
        properties.insert(name, p);
    }

    let mut actions = Map::new();
    for (name, mut a) in affordances(td, "actions") {
        let path = format!("actions/{}", path_segment(&name));
        let forms = vec![
            endpoints.ws(&["invokeaction", "queryaction", "cancelaction"]),
            endpoints.http(&thing, &path, &["invokeaction"], Some("POST")),
            // Without an invocation in the path: the caller's latest one.
            endpoints.http(&thing, &path, &["queryaction"], Some("GET")),
            endpoints.http(&thing, &path, &["cancelaction"], Some("DELETE")),
            endpoints.mqtt_publish(&t.request(&thing, "invokeAction"), "invokeaction"),
            endpoints.mqtt_publish(&t.request(&thing, "queryAction"), "queryaction"),
            endpoints.mqtt_publish(&t.request(&thing, "cancelAction"), "cancelaction"),
        ];
        set_forms(&mut a, forms);
        actions.insert(name, a);
    }

    let mut events = Map::new();
    for (name, mut e) in affordances(td, "events") {
        set_forms(&mut e, endpoints.event_forms(&thing, &name));
        events.insert(name, e);
    }

    let has_properties = !properties.is_empty();
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
    let mut top = Vec::new();
    if has_properties {
        top.push(endpoints.http(&thing, "properties", &["readallproperties"], Some("GET")));
    }
    if has_events {
        top.push(endpoints.ws(&["subscribeallevents", "unsubscribeallevents"]));
        top.push(endpoints.mqtt_subscribe(
            &t.thing_events_filter(&thing),
            &["subscribeallevents", "unsubscribeallevents"],
        ));
    }
    if !top.is_empty() {
        set_forms(td, top);
    }
    add_contexts(td);
}

/// The schemes actually in force join the agent's own definitions, and
/// become the Thing's default; the agent's own forms for other protocols
/// keep the security they had.
fn declare_security(td: &mut Value, endpoints: &Endpoints) {
    let (ws, _) = endpoints.scheme_names();
    let ours = endpoints.security_definitions();
    let original = td.get("security").cloned();
    let Some(map) = td.as_object_mut() else {
        return;
    };
    let definitions = map
        .entry("securityDefinitions")
        .or_insert_with(|| Value::Object(Map::new()));
    if !definitions.is_object() {
        *definitions = Value::Object(Map::new());
    }
    let definitions = definitions.as_object_mut().expect("made an object above");
    for (name, definition) in ours {
        definitions.insert(name, definition);
    }
    if let Some(original) = original.filter(|o| o.as_str() != Some(ws)) {
        for kind in ["properties", "actions", "events"] {
            let Some(affordances) = map.get_mut(kind).and_then(Value::as_object_mut) else {
                continue;
            };
            for affordance in affordances.values_mut() {
                let forms = affordance.get_mut("forms").and_then(Value::as_array_mut);
                for form in forms.into_iter().flatten() {
                    let theirs = !is_ours(form);
                    if let Some(f) = form.as_object_mut().filter(|_| theirs) {
                        f.entry("security").or_insert_with(|| original.clone());
                    }
                }
            }
        }
    }
    map.insert("security".into(), Value::String(ws.to_owned()));
}

/// Brings the `mqv:`, `htv:` and `lmos:` prefixes into `@context`, once
/// each (an agent's own `lmos` or `htv` stays as it is).
fn add_contexts(td: &mut Value) {
    let Some(context) = td.get_mut("@context") else {
        return;
    };
    if !context.is_array() {
        let first = context.take();
        *context = Value::Array(vec![first]);
    }
    let Value::Array(items) = context else {
        return;
    };
    for (prefix, iri) in [
        ("mqv", MQTT_NAMESPACE),
        ("htv", HTTP_NAMESPACE),
        ("lmos", LMOS_NAMESPACE),
    ] {
        if !items.iter().any(|i| i.get(prefix).is_some()) {
            items.push(json!({ prefix: iri }));
        }
    }
}

#[cfg(test)]
#[path = "forms_tests.rs"]
mod tests;

//! What a registered Thing Description says about a message: does the Thing
//! have the property, action or event it names, and does its data match the
//! TD's data schema? Pure functions; the gateway applies them when the Thing
//! has a TD (without one, everything passes).

use serde_json::{Map, Value};

use crate::lmos::{Body, Message, Problem, ProblemKind};

fn kind_name(kind: &str) -> &'static str {
    match kind {
        "properties" => "property",
        "actions" => "action",
        _ => "event",
    }
}

/// The named affordance, or a `not-found` problem listing what there is.
fn affordance<'a>(td: &'a Value, kind: &str, name: &str) -> Result<&'a Value, Problem> {
    let all = td.get(kind).and_then(Value::as_object);
    if let Some(a) = all.and_then(|m| m.get(name)) {
        return Ok(a);
    }
    let known: Vec<&str> = all
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let detail = format!(
        "The Thing `{}` has no {} `{name}`; its Thing Description lists: {}.",
        td["id"].as_str().unwrap_or_default(),
        kind_name(kind),
        if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        }
    );
    Err(Problem::new(ProblemKind::NotFound, detail))
}

/// A TD data schema as a JSON Schema: the TD terms are JSON Schema terms;
/// `forms` and the interaction terms are not schema and are left out.
fn schema_of(data_schema: &Value) -> Value {
    let mut schema: Map<String, Value> = data_schema.as_object().cloned().unwrap_or_default();
    for key in [
        "forms",
        "observable",
        "uriVariables",
        "safe",
        "idempotent",
        "synchronous",
        "input",
        "output",
    ] {
        schema.remove(key);
    }
    Value::Object(schema)
}

/// Validates `value` against a TD data schema; the violations, each with its
/// JSON pointer, go into the problem's detail.
fn check_data(data_schema: &Value, value: &Value, what: &str) -> Result<(), Problem> {
    let schema = schema_of(data_schema);
    let Ok(validator) = jsonschema::draft7::new(&schema) else {
        // A schema the validator cannot compile was accepted by the TD
        // schema; the data cannot be checked against it, so it passes.
        return Ok(());
    };
    let violations: Vec<String> = validator
        .iter_errors(value)
        .map(|e| {
            let pointer = e.instance_path().as_str().to_owned();
            format!("{}: {e}", if pointer.is_empty() { "/" } else { &pointer })
        })
        .collect();
    if violations.is_empty() {
        Ok(())
    } else {
        let detail = format!(
            "{what} does not match the Thing Description: {}.",
            violations.join("; ")
        );
        Err(Problem::new(ProblemKind::InvalidData, detail))
    }
}

/// The Thing has the named property (`properties`), action (`actions`) or
/// event (`events`).
pub fn require(td: &Value, kind: &str, name: &str) -> Result<(), Problem> {
    affordance(td, kind, name).map(|_| ())
}

/// Checks a consumer's request or subscription against the Thing's TD.
pub fn check_request(td: &Value, message: &Message) -> Result<(), Problem> {
    match &message.body {
        Body::ReadProperty { name }
        | Body::ObserveProperty { name }
        | Body::UnobserveProperty { name } => affordance(td, "properties", name).map(|_| ()),
        Body::WriteProperty { name, data } => {
            let p = affordance(td, "properties", name)?;
            if p["readOnly"] == true {
                let detail = format!("The property `{name}` is read-only.");
                return Err(Problem::new(ProblemKind::InvalidData, detail));
            }
            check_data(p, data, &format!("The value for `{name}`"))
        }
        Body::WriteMultipleProperties { data } => {
            for (name, value) in data {
                let p = affordance(td, "properties", name)?;
                if p["readOnly"] == true {
                    let detail = format!("The property `{name}` is read-only.");
                    return Err(Problem::new(ProblemKind::InvalidData, detail));
                }
                check_data(p, value, &format!("The value for `{name}`"))?;
            }
            Ok(())
        }
        Body::InvokeAction { action, input } => {
            let a = affordance(td, "actions", action)?;
            match (a.get("input"), input) {
                (Some(schema), Some(input)) => {
                    check_data(schema, input, &format!("The input of `{action}`"))
                }
                _ => Ok(()),
            }
        }
        Body::QueryAction { action }
        | Body::CancelAction { action, .. }
        | Body::ActionInput { action } => affordance(td, "actions", action).map(|_| ()),
        Body::SubscribeEvent { event } | Body::UnsubscribeEvent { event } => {
            affordance(td, "events", event).map(|_| ())
        }
        _ => Ok(()),
    }
}

/// Checks what an agent publishes (event data, property values) against its
/// TD, when `discovery.validate_agent_data` asks for it.
pub fn check_agent_data(td: &Value, message: &Message) -> Result<(), Problem> {
    match &message.body {
        Body::Event { event, data, .. } => {
            let e = affordance(td, "events", event)?;
            match e.get("data") {
                Some(schema) => check_data(schema, data, &format!("The data of `{event}`")),
                None => Ok(()),
            }
        }
        Body::PropertyReading { name, value, .. } => {
            let p = affordance(td, "properties", name)?;
            check_data(p, value, &format!("The value of `{name}`"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const WEATHER: &str = include_str!("../../tests/fixtures/weather-agent-td.json");

    fn td() -> Value {
        serde_json::from_str(WEATHER).unwrap()
    }

    fn message(v: Value) -> Message {
        let mut v = v;
        v["thingID"] = json!("urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77");
        v["messageID"] = json!("m");
        Message::from_value(v).unwrap()
    }

    #[test]
    fn unknown_affordances_are_named_with_what_exists() {
        let e = check_request(
            &td(),
            &message(json!({"messageType": "invokeAction", "action": "getWether"})),
        )
        .unwrap_err();
        assert_eq!(e.kind, ProblemKind::NotFound);
        assert!(
            e.detail.contains("getWether") && e.detail.contains("getWeather"),
            "{}",
            e.detail
        );
        assert!(check_request(
            &td(),
            &message(json!({"messageType": "subscribeEvent", "event": "nope"}))
        )
        .is_err());
        check_request(
            &td(),
            &message(json!({"messageType": "observeProperty", "name": "modelConfiguration"})),
        )
        .unwrap();
    }

    #[test]
    fn action_input_is_checked_against_its_schema() {
        check_request(&td(), &message(json!({"messageType": "invokeAction", "action": "getWeather", "input": {"question": "Rain?", "interactionMode": "text"}}))).unwrap();
        let e = check_request(&td(), &message(json!({"messageType": "invokeAction", "action": "getWeather", "input": {"question": 42}}))).unwrap_err();
        assert_eq!(e.kind, ProblemKind::InvalidData);
        assert!(e.detail.contains("/question"), "{}", e.detail);
    }

    #[test]
    fn read_only_properties_refuse_writes() {
        let e = check_request(
            &td(),
            &message(
                json!({"messageType": "writeProperty", "name": "modelConfiguration", "data": {}}),
            ),
        )
        .unwrap_err();
        assert!(e.detail.contains("read-only"));
    }

    #[test]
    fn agent_data_is_checked_when_asked() {
        let bad = message(
            json!({"messageType": "event", "event": "userFeedbackReceived", "data": {"rating": 9}, "timestamp": "2025-01-20T19:00:00Z"}),
        );
        let e = check_agent_data(&td(), &bad).unwrap_err();
        assert!(e.detail.contains("/rating"), "{}", e.detail);
        let good = message(
            json!({"messageType": "event", "event": "userFeedbackReceived", "data": {"rating": 4}, "timestamp": "2025-01-20T19:00:00Z"}),
        );
        check_agent_data(&td(), &good).unwrap();
    }
}

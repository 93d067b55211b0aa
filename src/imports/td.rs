//! An upstream's [`Offer`] as its Thing's Thing Description, valid against
//! the TD 1.1 JSON Schema: no I/O.
//!
//! MCP tools and A2A skills carry JSON Schema, of which a TD DataSchema is a
//! subset: a list of types (`["string", "null"]`, what Pydantic writes for
//! an optional field) becomes a `oneOf`, `$schema` and `$id` go. What the TD
//! schema still refuses is not guessed at: that affordance's schema is left
//! out of the TD and kept whole under `lmos:jsonSchema` (input) or
//! `lmos:outputJsonSchema`, so a consumer loses nothing and the TD stays
//! valid ([`repair`]).

use serde_json::{json, Map, Value};

use super::upstream::Offer;
use crate::config::ThingType;
use crate::directory::validate::{TdError, TdValidator, LMOS_NAMESPACE};

/// The TD of `thing`, imported as `name`.
pub fn describe(thing: &str, kind: ThingType, offer: &Offer) -> Value {
    let mut td = json!({
        "@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": LMOS_NAMESPACE}],
        "id": thing,
        "@type": match kind {
            ThingType::Tool => "lmos:Tool",
            ThingType::Agent => "lmos:Agent",
        },
        "title": if offer.title.is_empty() { thing } else { &offer.title },
        "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}},
        "security": "nosec_sc",
    });
    if let Some(d) = &offer.description {
        td["description"] = json!(d);
    }
    if let Some(v) = &offer.version {
        td["version"] = json!({"instance": v});
    }
    for (k, v) in &offer.extra {
        td[k.as_str()] = v.clone();
    }
    let mut actions = Map::new();
    for a in &offer.actions {
        let mut action = json!({"safe": a.safe, "idempotent": a.idempotent});
        set_opt(&mut action, "title", a.title.as_deref());
        set_opt(&mut action, "description", a.description.as_deref());
        if let Some(input) = &a.input {
            action["input"] = data_schema(input);
        }
        if let Some(output) = &a.output {
            action["output"] = data_schema(output);
        }
        for (k, v) in &a.extra {
            action[k.as_str()] = v.clone();
        }
        action["forms"] = form(thing, "actions", &a.name);
        actions.insert(a.name.clone(), action);
    }
    let mut properties = Map::new();
    for p in &offer.properties {
        let mut property = data_schema(&p.schema);
        property["readOnly"] = json!(true);
        property["observable"] = json!(false);
        set_opt(&mut property, "title", p.title.as_deref());
        set_opt(&mut property, "description", p.description.as_deref());
        for (k, v) in &p.extra {
            property[k.as_str()] = v.clone();
        }
        property["forms"] = form(thing, "properties", &p.name);
        properties.insert(p.name.clone(), property);
    }
    td["actions"] = Value::Object(actions);
    td["properties"] = Value::Object(properties);
    td
}

/// `describe`'s TD, made valid where an upstream's schema is not a TD
/// DataSchema: each offending schema moves out of the TD's way (see the
/// module's doc). `Err` only if the TD is invalid for another reason.
pub fn repair(mut td: Value, validator: &TdValidator) -> Result<Value, TdError> {
    // Each round moves at least one schema; a TD has finitely many.
    for _ in 0..64 {
        let text = td.to_string();
        let Err(TdError::Invalid(violations)) = validator.parse(text.as_bytes()) else {
            return validator.parse(text.as_bytes());
        };
        let mut moved = false;
        for v in &violations {
            let mut parts = v.pointer.trim_start_matches('/').split('/');
            let (Some(section), Some(name)) = (parts.next(), parts.next()) else {
                continue;
            };
            let name = name.replace("~1", "/").replace("~0", "~");
            let part = parts.next();
            moved |= move_out(&mut td, section, &name, part);
        }
        if !moved {
            return Err(TdError::Invalid(violations));
        }
    }
    validator.parse(td.to_string().as_bytes())
}

/// Moves the schema the violation is in (an action's input or output, a
/// property's whole schema) under an `lmos:` member; whether it moved one.
fn move_out(td: &mut Value, section: &str, name: &str, part: Option<&str>) -> bool {
    let Some(affordance) = td.get_mut(section).and_then(|s| s.get_mut(name)) else {
        return false;
    };
    let Some(map) = affordance.as_object_mut() else {
        return false;
    };
    match (section, part) {
        ("actions", Some(p @ ("input" | "output"))) => {
            let Some(schema) = map.remove(p) else {
                return false;
            };
            let key = if p == "input" {
                "lmos:jsonSchema"
            } else {
                "lmos:outputJsonSchema"
            };
            map.insert(key.into(), schema);
            true
        }
        ("properties", Some(p)) if !matches!(p, "forms" | "title" | "description") => {
            let schema: Map<String, Value> = map
                .iter()
                .filter(|(k, _)| !KEPT.contains(&k.as_str()) && !k.starts_with("lmos:"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            map.retain(|k, _| KEPT.contains(&k.as_str()) || k.starts_with("lmos:"));
            map.insert("lmos:jsonSchema".into(), Value::Object(schema));
            true
        }
        _ => false,
    }
}

/// A property's members that are not its value's schema.
const KEPT: [&str; 6] = [
    "forms",
    "title",
    "description",
    "readOnly",
    "observable",
    "contentMediaType",
];

/// JSON Schema as a TD DataSchema, recursively: type lists become `oneOf`,
/// `$schema` and `$id` go.
pub fn data_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$schema" | "$id", _) => {}
                    ("type", Value::Array(types)) => {
                        let one_of: Vec<Value> = types.iter().map(|t| json!({"type": t})).collect();
                        out.insert("oneOf".into(), Value::Array(one_of));
                    }
                    ("properties" | "$defs" | "definitions", Value::Object(members)) => {
                        let members = members
                            .iter()
                            .map(|(n, s)| (n.clone(), data_schema(s)))
                            .collect();
                        out.insert(k.clone(), Value::Object(members));
                    }
                    ("items" | "additionalProperties" | "not", s @ Value::Object(_)) => {
                        out.insert(k.clone(), data_schema(s));
                    }
                    ("oneOf" | "anyOf" | "allOf", Value::Array(list)) => {
                        out.insert(k.clone(), list.iter().map(data_schema).collect());
                    }
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// A placeholder form: the directory writes the sidecar's own forms over
/// it, as for every Thing, but the TD schema wants one to be there.
fn form(thing: &str, section: &str, name: &str) -> Value {
    json!([{"href": format!("/things/{thing}/{section}/{name}")}])
}

fn set_opt(target: &mut Value, key: &str, value: Option<&str>) {
    if let Some(v) = value {
        target[key] = json!(v);
    }
}

#[cfg(test)]
#[path = "td_tests.rs"]
mod tests;

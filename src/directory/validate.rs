//! Checking a Thing Description: JSON, the W3C TD 1.1 JSON Schema, and the
//! LMOS vocabulary. Every violation is reported with its JSON pointer.

use serde_json::Value;

/// The LMOS namespace every Agent or Tool description must bring in.
pub const LMOS_NAMESPACE: &str = "https://eclipse.dev/lmos/protocol/v1";
/// The `@type`s that make a TD an LMOS description.
pub const LMOS_TYPES: [&str; 2] = ["lmos:Agent", "lmos:Tool"];

const TD_SCHEMA: &str = include_str!("td-1.1-json-schema.json");

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer into the TD (`""` for the whole document).
    pub pointer: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TdError {
    #[error("the Thing Description is not valid JSON: {message} (line {line}, column {column})")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the Thing Description is invalid: {}", list(.0))]
    Invalid(Vec<Violation>),
}

fn list(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            format!(
                "{}: {}",
                if v.pointer.is_empty() {
                    "/"
                } else {
                    &v.pointer
                },
                v.message
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Compiled once: the TD schema is large.
pub struct TdValidator {
    schema: jsonschema::Validator,
}

impl std::fmt::Debug for TdValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TdValidator")
    }
}

impl Default for TdValidator {
    fn default() -> Self {
        TdValidator::new()
    }
}

impl TdValidator {
    pub fn new() -> TdValidator {
        let schema: Value = serde_json::from_str(TD_SCHEMA).expect("the shipped TD schema is JSON");
        let schema = jsonschema::draft7::new(&schema).expect("the shipped TD schema compiles");
        TdValidator { schema }
    }

    /// Parses and checks a TD.
    pub fn parse(&self, text: &[u8]) -> Result<Value, TdError> {
        let td: Value = serde_json::from_slice(text).map_err(|e| TdError::Json {
            line: e.line(),
            column: e.column(),
            message: e
                .to_string()
                .split(" at line ")
                .next()
                .unwrap_or_default()
                .to_owned(),
        })?;
        self.check(&td)?;
        Ok(td)
    }

    /// Checks a parsed TD against the schema and the LMOS vocabulary.
    pub fn check(&self, td: &Value) -> Result<(), TdError> {
        let mut violations = self.schema_violations(td);
        violations.extend(vocabulary(td));
        if violations.is_empty() {
            Ok(())
        } else {
            Err(TdError::Invalid(violations))
        }
    }

    /// The W3C TD 1.1 JSON Schema alone, without the LMOS vocabulary (the
    /// sidecar's own directory description is a WoT Thing Directory, not
    /// an LMOS agent or tool).
    pub fn check_schema(&self, td: &Value) -> Result<(), TdError> {
        let violations = self.schema_violations(td);
        if violations.is_empty() {
            Ok(())
        } else {
            Err(TdError::Invalid(violations))
        }
    }

    fn schema_violations(&self, td: &Value) -> Vec<Violation> {
        self.schema
            .iter_errors(td)
            .map(|e| Violation {
                pointer: e.instance_path().as_str().to_owned(),
                message: e.to_string(),
            })
            .collect()
    }
}

/// The LMOS rules on top of the TD schema.
fn vocabulary(td: &Value) -> Vec<Violation> {
    let mut violations = Vec::new();
    let context = &td["@context"];
    let mentions_lmos = |v: &Value| match v {
        Value::String(s) => s == LMOS_NAMESPACE,
        Value::Object(m) => m.values().any(|x| x == LMOS_NAMESPACE),
        _ => false,
    };
    let has_lmos = match context {
        Value::Array(items) => items.iter().any(mentions_lmos),
        other => mentions_lmos(other),
    };
    if !has_lmos {
        violations.push(Violation {
            pointer: "/@context".into(),
            message: format!("must include the LMOS namespace `{LMOS_NAMESPACE}` (e.g. {{\"lmos\": \"{LMOS_NAMESPACE}\"}})"),
        });
    }
    let types: Vec<&str> = match &td["@type"] {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.iter().any(|t| LMOS_TYPES.contains(t)) {
        violations.push(Violation {
            pointer: "/@type".into(),
            message: "must be `lmos:Agent` or `lmos:Tool`".into(),
        });
    }
    violations
}

/// RFC 7396 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let map = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const WEATHER: &str = include_str!("../../tests/fixtures/weather-agent-td.json");
    const AS_PRINTED: &str = include_str!("../../tests/fixtures/short-example-td-as-printed.json");

    #[test]
    fn the_drafts_weather_agent_is_valid_once_its_json_is_fixed() {
        TdValidator::new().parse(WEATHER.as_bytes()).unwrap();
    }

    #[test]
    fn the_drafts_trailing_comma_is_pointed_at() {
        match TdValidator::new().parse(AS_PRINTED.as_bytes()) {
            Err(TdError::Json { line, column, .. }) => {
                let bad_line = AS_PRINTED.lines().nth(line - 1).unwrap();
                assert!(
                    bad_line.trim_start().starts_with('}'),
                    "line {line} col {column}: {bad_line}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_violation_is_listed_with_its_pointer() {
        let mut td: Value = serde_json::from_str(WEATHER).unwrap();
        td["@type"] = json!("Thing");
        td["properties"]["modelConfiguration"]["readOnly"] = json!("yes");
        td["@context"] = json!("https://www.w3.org/2022/wot/td/v1.1");
        let Err(TdError::Invalid(violations)) = TdValidator::new().check(&td) else {
            panic!("accepted")
        };
        let pointers: Vec<&str> = violations.iter().map(|v| v.pointer.as_str()).collect();
        assert!(pointers.contains(&"/@type"), "{violations:?}");
        assert!(pointers.contains(&"/@context"), "{violations:?}");
        assert!(
            pointers.contains(&"/properties/modelConfiguration/readOnly"),
            "{violations:?}"
        );
    }

    #[test]
    fn merge_patch_follows_rfc_7396() {
        let mut v = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut v, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(v, json!({"a": "z", "c": {"d": "e"}}));
    }
}

//! `completion/complete`: a resource template's variable completes from
//! its TD `enum` (the property's `uriVariables` schema). MCP's references
//! name prompts and resource templates only, not tools, so that is where
//! action inputs can be completed: an LMOS Thing has no prompts, and a
//! prompt reference completes to nothing (an empty list, not an error: a
//! client asking for hints gets none).

use serde_json::{json, Value};

use super::resources::{for_caller, Resource};
use crate::auth::Principal;
use crate::http::jsonrpc;
use crate::http::HttpState;

/// MCP allows at most 100 values in one answer.
const MAX_VALUES: usize = 100;

/// The values of `choices` that start with `typed` (case-insensitively),
/// at most 100, with the total and whether there are more.
pub fn complete_from(choices: &[Value], typed: &str) -> Value {
    let typed = typed.to_lowercase();
    let fitting: Vec<String> = choices
        .iter()
        .map(|c| match c {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .filter(|c| c.to_lowercase().starts_with(&typed))
        .collect();
    let total = fitting.len();
    let values: Vec<&String> = fitting.iter().take(MAX_VALUES).collect();
    json!({"completion": {"values": values, "total": total, "hasMore": total > MAX_VALUES}})
}

/// The `enum` of the template's variable, if the TD gives one.
pub fn choices<'a>(resources: &'a [Resource], template: &str, variable: &str) -> &'a [Value] {
    resources
        .iter()
        .find(|r| !r.variables.is_empty() && r.uri == template)
        .and_then(|r| r.schema["uriVariables"][variable]["enum"].as_array())
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// `completion/complete`.
pub async fn complete(
    state: &HttpState,
    principal: &Principal,
    id: &Value,
    params: &Value,
) -> Value {
    let reference = &params["ref"];
    let name = params["argument"]["name"].as_str();
    let typed = params["argument"]["value"].as_str().unwrap_or_default();
    let Some(name) = name else {
        let text = "Invalid params: `argument.name` is required";
        return jsonrpc::error(id, jsonrpc::INVALID_PARAMS, text, None);
    };
    match reference["type"].as_str() {
        Some("ref/resource") => {
            let template = reference["uri"].as_str().unwrap_or_default();
            let resources = for_caller(state, principal).await;
            jsonrpc::result(
                id,
                complete_from(choices(&resources, template, name), typed),
            )
        }
        Some("ref/prompt") => jsonrpc::result(id, complete_from(&[], typed)),
        _ => {
            let text = "Invalid params: `ref.type` must be `ref/resource` or `ref/prompt`";
            jsonrpc::error(id, jsonrpc::INVALID_PARAMS, text, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Access;

    #[test]
    fn a_template_variable_completes_from_its_enum() {
        let td = json!({"properties": {"forecast": {"type": "string",
            "uriVariables": {"city": {"type": "string", "enum": ["Oslo", "Bonn", "Bologna"]}}}}});
        let all = super::super::resources::resources([("urn:w", &td)], &|_: Access, _: &str| true);
        let template = all[0].uri.clone();
        let found = choices(&all, &template, "city");
        assert_eq!(
            complete_from(found, "bo"),
            json!({"completion": {"values": ["Bonn", "Bologna"], "total": 2, "hasMore": false}})
        );
        assert!(choices(&all, &template, "country").is_empty());
        assert!(choices(&all, "lmos://other", "city").is_empty());
        let many: Vec<Value> = (0..150).map(|i| json!(format!("c{i}"))).collect();
        let answer = complete_from(&many, "");
        assert_eq!(
            answer["completion"]["values"].as_array().unwrap().len(),
            100
        );
        assert_eq!(answer["completion"]["hasMore"], true);
    }
}

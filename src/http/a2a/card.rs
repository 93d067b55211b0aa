//! A Thing Description as an A2A Agent Card (v1.0), and which of its
//! actions a message means. No I/O.

use serde_json::{json, Map, Value};

use crate::config::HttpScheme;
use crate::directory::forms::path_segment;

/// Whether the TD describes an agent: its `@type` includes `lmos:Agent`.
pub fn is_agent(td: &Value) -> bool {
    match &td["@type"] {
        Value::String(t) => t == "lmos:Agent",
        Value::Array(types) => types.iter().any(|t| t == "lmos:Agent"),
        _ => false,
    }
}

/// The agent's JSON-RPC endpoint: `{http}/a2a/{thingID as one segment}`.
pub fn endpoint(http: &str, thing: &str) -> String {
    format!("{}/a2a/{}", http.trim_end_matches('/'), path_segment(thing))
}

/// The media types an affordance's data takes: text for a string (or an
/// input a text part can fill, `input.rs`), JSON always.
fn modes(schema: Option<&Value>, input: bool) -> Vec<&'static str> {
    let texty = match schema {
        Some(s) if input => super::input::text_fill(Some(s)).is_some(),
        Some(s) => s["type"] == "string" || s.get("type").is_none(),
        None => false,
    };
    if texty {
        vec!["text/plain", "application/json"]
    } else {
        vec!["application/json"]
    }
}

/// Every media type an action's input takes: what the card lists for it,
/// and the modes an imported A2A skill declared (`lmos:inputModes`).
pub fn input_modes(action: &Value) -> Vec<String> {
    let mut all: Vec<String> = modes(action.get("input"), true)
        .into_iter()
        .map(str::to_owned)
        .collect();
    let declared = action["lmos:inputModes"].as_array().into_iter().flatten();
    all.extend(declared.filter_map(Value::as_str).map(str::to_owned));
    all
}

fn skill(name: &str, action: &Value) -> Value {
    let mut skill = json!({
        "id": name,
        "name": action["title"].as_str().unwrap_or(name),
        "description": action["description"].as_str().unwrap_or(name),
        "tags": ["lmos", "action"],
        "inputModes": modes(action.get("input"), true),
        "outputModes": modes(action.get("output"), false),
    });
    if let Some(input) = action.get("input") {
        // Not in the card's schema, but what a caller needs to fill a
        // DataPart; clients ignore members they do not know.
        skill["examples"] = json!([format!("A DataPart matching the input schema: {input}")]);
    }
    skill
}

/// The security schemes and requirements the HTTP port's authentication
/// asks for.
fn security(schemes: &[HttpScheme]) -> (Value, Value) {
    let mut defined = Map::new();
    let mut required = Vec::new();
    for scheme in schemes {
        let (name, http) = match scheme {
            HttpScheme::Basic => ("basic", "Basic"),
            HttpScheme::Bearer => ("bearer", "Bearer"),
        };
        defined.insert(
            name.into(),
            json!({"httpAuthSecurityScheme": {"scheme": http}}),
        );
        required.push(json!({"schemes": {name: {"list": []}}}));
    }
    (Value::Object(defined), Value::Array(required))
}

/// The Agent Card of `thing` served from `http` (the sidecar's base URL).
pub fn card(thing: &str, td: &Value, http: &str, schemes: &[HttpScheme]) -> Value {
    let skills: Vec<Value> = td["actions"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, action)| skill(name, action))
        .collect();
    // Text for every skill only when every skill takes it; each skill
    // says its own.
    let all_text = skills.iter().all(|s| {
        s["inputModes"]
            .as_array()
            .is_some_and(|m| m.contains(&json!("text/plain")))
    });
    let default_input = if all_text && !skills.is_empty() {
        json!(["application/json", "text/plain"])
    } else {
        json!(["application/json"])
    };
    let name = td["title"].as_str().unwrap_or(thing);
    let mut card = json!({
        "name": name,
        "description": td["description"].as_str().unwrap_or(name),
        "supportedInterfaces": [{
            "url": endpoint(http, thing),
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }],
        "version": td["version"]["instance"].as_str().unwrap_or("1.0.0"),
        "capabilities": {"streaming": true, "pushNotifications": false,
            "extendedAgentCard": !schemes.is_empty()},
        "defaultInputModes": default_input,
        "defaultOutputModes": ["application/json", "text/plain"],
        "skills": skills,
    });
    let vendor = &td["lmos:metadata"]["lmos:vendor"];
    if let (Some(org), Some(url)) = (vendor["lmos:name"].as_str(), vendor["lmos:url"].as_str()) {
        card["provider"] = json!({"organization": org, "url": url});
    }
    if !schemes.is_empty() {
        let (defined, required) = security(schemes);
        card["securitySchemes"] = defined;
        card["securityRequirements"] = required;
    }
    card
}

/// The action a message asks for: named in `metadata.skill` (or
/// `skillId`) of the message or the request, else the agent's only one.
pub fn chosen_skill<'a>(td: &'a Value, metadata: &[&Value]) -> Result<&'a str, String> {
    let actions = td["actions"].as_object();
    let named = metadata
        .iter()
        .find_map(|m| m["skill"].as_str().or_else(|| m["skillId"].as_str()));
    match (named, actions) {
        (Some(name), Some(actions)) => actions
            .get_key_value(name)
            .map(|(k, _)| k.as_str())
            .ok_or_else(|| format!("The agent has no skill `{name}`.")),
        (None, Some(actions)) if actions.len() == 1 => Ok(actions
            .keys()
            .next()
            .map(String::as_str)
            .unwrap_or_default()),
        (None, Some(_)) => Err(
            "The agent has several skills; name one in the message's metadata as `skill`.".into(),
        ),
        (_, None) => Err("The agent has no skills (its Thing Description has no actions).".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        serde_json::from_str(include_str!("../../../examples/weather_agent.td.json")).unwrap()
    }

    #[test]
    fn the_weather_agent_s_card_has_its_action_as_a_skill_and_the_port_s_schemes() {
        let td = weather();
        assert!(is_agent(&td));
        let c = card("urn:uuid:x", &td, "http://h:8080", &[HttpScheme::Bearer]);
        assert_eq!(c["name"], "WeatherAgent");
        assert_eq!(
            c["supportedInterfaces"][0]["url"],
            "http://h:8080/a2a/urn:uuid:x"
        );
        assert_eq!(c["skills"][0]["id"], "getWeather");
        // `interactionMode` has a default: text fills the question.
        assert_eq!(
            c["skills"][0]["inputModes"],
            json!(["text/plain", "application/json"])
        );
        let mut strict = td.clone();
        strict["actions"]["getWeather"]["input"]["properties"]["interactionMode"]
            .as_object_mut()
            .unwrap()
            .remove("default");
        let c2 = card("urn:uuid:x", &strict, "http://h:8080", &[]);
        assert_eq!(c2["skills"][0]["inputModes"], json!(["application/json"]));
        assert_eq!(c2["defaultInputModes"], json!(["application/json"]));
        assert_eq!(c2["capabilities"]["extendedAgentCard"], false);
        assert_eq!(c["capabilities"]["extendedAgentCard"], true);
        assert_eq!(
            c["skills"][0]["outputModes"],
            json!(["text/plain", "application/json"])
        );
        assert_eq!(
            c["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
            "Bearer"
        );
        assert_eq!(c["provider"]["organization"], "Deutsche Telekom AG");
    }

    #[test]
    fn the_skill_is_named_or_implied() {
        let td = weather();
        assert_eq!(chosen_skill(&td, &[&Value::Null]), Ok("getWeather"));
        assert!(chosen_skill(&td, &[&json!({"skill": "nope"})]).is_err());
        let two = json!({"actions": {"a": {}, "b": {}}});
        assert!(chosen_skill(&two, &[&Value::Null]).is_err());
        assert_eq!(
            chosen_skill(&two, &[&Value::Null, &json!({"skillId": "b"})]),
            Ok("b")
        );
    }
}

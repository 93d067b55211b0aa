//! An A2A Agent Card read as an [`Offer`] and the endpoint to call (pure).
//!
//! Two card shapes are read: A2A 1.0 (`supportedInterfaces`, each with
//! `url`, `protocolBinding`, `protocolVersion`) and 0.3 (`url`,
//! `preferredTransport`, `protocolVersion`, `additionalInterfaces`). The
//! a2a-sdk 1.3.0 server serves the 1.0 shape, with the 0.3 members added
//! when one of its interfaces speaks 0.3. As the 1.0 spec asks, the first
//! interface we can speak wins, in the card's order: JSON-RPC, protocol
//! version 0.x or 1.x.
//!
//! Each skill becomes an action that takes a string (one text part) or an
//! object or array (one data part), see [`input_schema`].

use serde_json::{json, Map, Value};

use super::url::resolve;
use crate::imports::upstream::{ActionOffer, Offer, UpstreamError};

/// Which A2A wire the endpoint speaks: method names, part shapes, states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// A2A 1.x: `SendStreamingMessage`, `{"task": …}` wrappers,
    /// `TASK_STATE_WORKING`; requests carry `A2A-Version: 1.0`.
    V1,
    /// A2A 0.x (0.2, 0.3): `message/stream`, `kind` discriminators, `working`.
    V03,
}

/// Where and how to call the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The JSON-RPC interface's URL, resolved against the card's URL.
    pub url: String,
    pub dialect: Dialect,
    /// A 1.0 interface's `tenant`, sent in every request's params.
    pub tenant: Option<String>,
    /// `capabilities.streaming`: call with the streaming method.
    pub streaming: bool,
}

/// What a card says: the Thing's offer and where to call.
#[derive(Debug, Clone, PartialEq)]
pub struct Card {
    pub offer: Offer,
    pub endpoint: Endpoint,
}

/// Reads an Agent Card fetched from `card_url`.
pub fn read_card(card: &Value, card_url: &str) -> Result<Card, UpstreamError> {
    let Some(obj) = card.as_object() else {
        return Err(UpstreamError::Malformed(
            "the Agent Card is not a JSON object".into(),
        ));
    };
    let Some(title) = obj.get("name").and_then(Value::as_str) else {
        return Err(UpstreamError::Malformed(
            "the Agent Card has no `name`".into(),
        ));
    };
    let endpoint = endpoint(obj, card_url)?;
    let (inputs, outputs) = (
        modes(obj.get("defaultInputModes")),
        modes(obj.get("defaultOutputModes")),
    );
    let mut actions: Vec<ActionOffer> = Vec::new();
    for skill in obj
        .get("skills")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        // A skill without an ID cannot be called, a second one of the same
        // ID could not be told apart: both are left out, not the card.
        if let Some(action) = action(skill, &inputs, &outputs) {
            if !actions.iter().any(|a| a.name == action.name) {
                actions.push(action);
            }
        }
    }
    let mut extra = Map::new();
    extra.insert("lmos:protocol".into(), json!("a2a"));
    extra.insert("lmos:upstream".into(), json!(card_url));
    extra.insert("lmos:agentCard".into(), json!(card_url));
    let offer = Offer {
        title: title.to_owned(),
        description: string(obj.get("description")),
        version: string(obj.get("version")),
        actions,
        properties: Vec::new(),
        extra,
    };
    Ok(Card { offer, endpoint })
}

/// The first JSON-RPC interface of a protocol version we speak.
fn endpoint(card: &Map<String, Value>, card_url: &str) -> Result<Endpoint, UpstreamError> {
    let streaming = card
        .get("capabilities")
        .and_then(|c| c.get("streaming"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // The card's own version stands for interfaces that name none (0.3
    // cards; the SDK reads a missing one as 0.3 too).
    let card_version = card
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("0.3");
    for (url, binding, version, tenant) in interfaces(card) {
        if !binding.eq_ignore_ascii_case("JSONRPC") {
            continue;
        }
        let Some(dialect) = dialect(version.unwrap_or(card_version)) else {
            continue;
        };
        let url = resolve(card_url, url).map_err(|e| {
            UpstreamError::Malformed(format!("the Agent Card's JSON-RPC URL `{url}`: {e}"))
        })?;
        let tenant = tenant.filter(|t| !t.is_empty()).map(str::to_owned);
        return Ok(Endpoint {
            url,
            dialect,
            tenant,
            streaming,
        });
    }
    Err(UpstreamError::Refused {
        status: 502,
        message: format!(
            "the Agent Card at {card_url} offers no JSON-RPC interface of A2A 0.x or 1.x \
             (the only binding the sidecar speaks)"
        ),
    })
}

/// `(url, binding, version, tenant)` of every interface, in the card's
/// order: the 1.0 list, else the 0.3 main one and its additional ones.
fn interfaces(card: &Map<String, Value>) -> Vec<(&str, &str, Option<&str>, Option<&str>)> {
    if let Some(list) = card.get("supportedInterfaces").and_then(Value::as_array) {
        return list
            .iter()
            .filter_map(|i| {
                let binding = str_of(i, "protocolBinding").or_else(|| str_of(i, "transport"))?;
                Some((
                    str_of(i, "url")?,
                    binding,
                    str_of(i, "protocolVersion"),
                    str_of(i, "tenant"),
                ))
            })
            .collect();
    }
    let mut found = Vec::new();
    if let Some(url) = card.get("url").and_then(Value::as_str) {
        let binding = card
            .get("preferredTransport")
            .and_then(Value::as_str)
            .unwrap_or("JSONRPC");
        found.push((url, binding, None, None));
    }
    for i in card
        .get("additionalInterfaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let (Some(url), Some(binding)) = (str_of(i, "url"), str_of(i, "transport")) {
            found.push((url, binding, None, None));
        }
    }
    found
}

fn str_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// 0.x and 1.x are spoken; a later major version is not.
fn dialect(version: &str) -> Option<Dialect> {
    match version.trim().split('.').next()? {
        "0" => Some(Dialect::V03),
        "1" => Some(Dialect::V1),
        _ => None,
    }
}

fn action(skill: &Value, inputs: &[String], outputs: &[String]) -> Option<ActionOffer> {
    let name = skill
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())?;
    let mut extra = Map::new();
    let skill_inputs = modes(skill.get("inputModes"));
    let skill_outputs = modes(skill.get("outputModes"));
    let pick = |own: Vec<String>, default: &[String]| {
        if own.is_empty() {
            default.to_vec()
        } else {
            own
        }
    };
    extra.insert("lmos:inputModes".into(), json!(pick(skill_inputs, inputs)));
    extra.insert(
        "lmos:outputModes".into(),
        json!(pick(skill_outputs, outputs)),
    );
    extra.insert("lmos:tags".into(), json!(modes(skill.get("tags"))));
    extra.insert("lmos:examples".into(), json!(modes(skill.get("examples"))));
    Some(ActionOffer {
        name: name.to_owned(),
        title: string(skill.get("name")),
        description: string(skill.get("description")),
        input: Some(input_schema()),
        output: Some(output_schema()),
        safe: false,
        idempotent: false,
        extra,
    })
}

/// What a skill takes. A2A skills declare media types, no schema: a string
/// becomes one text part, an object or array one data part. An object with
/// `taskId` (and `contextId`) answers a task that asked for input: those
/// two are taken out, and an `input` member, if it is all that remains,
/// is sent as the input (so `{"taskId": …, "input": "Oslo"}` answers with
/// text); else what remains is the data part.
pub fn input_schema() -> Value {
    json!({
        "description": "A string is sent as one text part, an object or array as one data part. \
            To answer a task that asked for input, send {\"taskId\", \"contextId\", \"input\"}.",
        "oneOf": [{"type": "string"}, {"type": "object"}, {"type": "array"}]
    })
}

/// What a skill answers: the artifacts' text, a data artifact's value,
/// `{"artifacts": [...]}` when they mix, or `{"state": "input-required",
/// "message", "taskId", "contextId"}` when the agent asks for more. No
/// `type`: a data artifact may hold any JSON value.
pub fn output_schema() -> Value {
    json!({
        "description": "The artifacts' text (a string), one data artifact's value, \
            {\"artifacts\": [...]} when they mix, or {\"state\": \"input-required\", \
            \"message\", \"taskId\", \"contextId\"} when the agent needs more input."
    })
}

/// The strings of a string array (anything else in it is skipped).
fn modes(value: Option<&Value>) -> Vec<String> {
    let list = value
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    list.iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn string(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(str::to_owned)
}

#[cfg(test)]
#[path = "card_tests.rs"]
mod tests;

//! MCP 2026-07-28, the stateless revision, as far as it differs on the
//! wire (sans-IO): no `initialize` and no session; every request carries
//! the revision, the client's identity and capabilities in its `_meta`,
//! and over HTTP the `MCP-Protocol-Version`, `Mcp-Method` and (for a named
//! target) `Mcp-Name` headers, which the server checks against the body
//! (-32020 when they disagree). The client learns the server by
//! `server/discover`, hears of changes on a `subscriptions/listen` stream,
//! and cancels a request by closing its answer's stream; `ping` is gone.
//! Results say what they are (`resultType`, "complete" when absent).
//!
//! The client negotiates as the reference SDK's does: `server/discover`
//! first, at this revision; a server that answers it with the revision
//! among its `supportedVersions` is spoken to statelessly; any other answer
//! that is a refusal or no discovery at all (an older server knows neither
//! the method nor a request without its session) falls back to the
//! `initialize` handshake; an outage is no verdict and fails the connect.

use serde_json::{json, Map, Value};

use crate::imports::upstream::UpstreamError;

/// The stateless revision the client speaks.
pub(crate) const MODERN: &str = "2026-07-28";

const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// What the `server/discover` probe says of the server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Discovered {
    /// It speaks [`MODERN`]: what it told of itself, shaped as an
    /// `initialize` result (`protocolVersion`, `serverInfo`,
    /// `capabilities`, `instructions`) so that the offer reads either alike.
    Modern(Value),
    /// It does not (why, for the logs): the handshake is next.
    Legacy(String),
}

/// The probe's answer as a verdict; an error that says nothing of the
/// server's revision (unreachable, no answer in time, too large) is
/// returned as it is.
pub(crate) fn verdict(answer: Result<Value, UpstreamError>) -> Result<Discovered, UpstreamError> {
    let result = match answer {
        Ok(result) => result,
        Err(e @ (UpstreamError::Refused { .. } | UpstreamError::Malformed(_))) => {
            return Ok(Discovered::Legacy(e.to_string()))
        }
        Err(e) => return Err(e),
    };
    let supported = result["supportedVersions"].as_array();
    if !supported.is_some_and(|versions| versions.iter().any(|v| v == MODERN)) {
        let what = format!("it supports {}", result["supportedVersions"]);
        return Ok(Discovered::Legacy(what));
    }
    let meta = &result["_meta"];
    let mut init = Map::new();
    init.insert("protocolVersion".into(), json!(MODERN));
    init.insert("serverInfo".into(), meta[SERVER_INFO].clone());
    init.insert("capabilities".into(), result["capabilities"].clone());
    if let Some(instructions) = result.get("instructions") {
        init.insert("instructions".into(), instructions.clone());
    }
    Ok(Discovered::Modern(Value::Object(init)))
}

/// Puts the per-request envelope into a request's `params._meta` (made
/// when missing; what else is in it, the progress token, the trace
/// context, is kept).
pub(crate) fn stamp(request: &mut Value) {
    let Some(fields) = request.as_object_mut() else {
        return;
    };
    let params = fields.entry("params").or_insert_with(|| json!({}));
    if !params.is_object() {
        *params = json!({});
    }
    let Some(params) = params.as_object_mut() else {
        return;
    };
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(PROTOCOL_VERSION.into(), json!(MODERN));
        meta.insert(CLIENT_CAPABILITIES.into(), json!({}));
        let info = json!({"name": "lmos-sidecar", "version": env!("CARGO_PKG_VERSION")});
        meta.insert(CLIENT_INFO.into(), info);
    }
}

/// The `Mcp-Method` and `Mcp-Name` header values of a request, as sent
/// (the name of a called tool or prompt, the URI of a read resource),
/// each as [`header_value`] makes it.
pub(crate) fn routing(request: &Value) -> (Option<String>, Option<String>) {
    let method = request["method"].as_str();
    let key = match method {
        Some("tools/call" | "prompts/get") => "name",
        Some("resources/read") => "uri",
        _ => return (method.map(header_value), None),
    };
    let name = request["params"][key].as_str().map(header_value);
    (method.map(header_value), name)
}

/// A value as an HTTP header carries it: printable ASCII without edge
/// whitespace as it is, anything else as `=?base64?…?=` of its UTF-8 (the
/// revision's escape, so that the server can compare it with the body).
pub(crate) fn header_value(text: &str) -> String {
    let plain = text.bytes().all(|b| (0x20..0x7f).contains(&b))
        && text.trim() == text
        && !(text.starts_with("=?base64?") && text.ends_with("?="));
    if plain {
        return text.to_owned();
    }
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
    format!("=?base64?{encoded}?=")
}

/// A result that is final ("complete", or no `resultType`); anything else
/// (a server asking for input the sidecar cannot give, an extension's
/// task) is no answer it can pass on.
pub(crate) fn complete(result: Value) -> Result<Value, UpstreamError> {
    match result.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => Ok(result),
        Some("input_required") => Err(UpstreamError::Refused {
            status: 501,
            message: "the server asks for input (elicitation, sampling) the sidecar cannot give"
                .into(),
        }),
        Some(other) => {
            let other: String = other.chars().take(64).collect();
            Err(UpstreamError::Malformed(format!(
                "a result of type {other:?}, not \"complete\""
            )))
        }
    }
}

/// What to listen for (`subscriptions/listen`'s `notifications`): the
/// list changes the server's capabilities say it tells of; `None` when it
/// tells of none (no stream is opened).
pub(crate) fn listen_filter(init: &Value) -> Option<Value> {
    let capabilities = &init["capabilities"];
    let mut filter = Map::new();
    for (capability, key) in [
        ("tools", "toolsListChanged"),
        ("resources", "resourcesListChanged"),
    ] {
        if capabilities[capability]["listChanged"] == true {
            filter.insert(key.into(), json!(true));
        }
    }
    (!filter.is_empty()).then_some(Value::Object(filter))
}

/// How deep `properties` are followed for `x-mcp-header` annotations.
const MAX_DEPTH: usize = 16;

/// A tool's arguments mirrored in headers: each annotated argument's path
/// (through `properties`) and its header's token.
pub(crate) type ParamTokens = Vec<(Vec<String>, String)>;

/// The `x-mcp-header` annotations of a tool's input schema that a server
/// checks (`Mcp-Param-<token>` must then carry the argument): on a string,
/// integer or boolean property, a valid header token, each once.
pub(crate) fn param_tokens(schema: &Value) -> ParamTokens {
    let mut tokens = ParamTokens::new();
    annotated(schema, &mut Vec::new(), &mut tokens);
    let mut seen = std::collections::HashSet::new();
    tokens.retain(|(_, token)| seen.insert(token.to_ascii_lowercase()));
    tokens
}

fn annotated(schema: &Value, path: &mut Vec<String>, tokens: &mut ParamTokens) {
    let Some(properties) = schema["properties"].as_object() else {
        return;
    };
    if path.len() >= MAX_DEPTH {
        return;
    }
    for (name, property) in properties {
        path.push(name.clone());
        let token = property["x-mcp-header"].as_str().filter(|t| is_token(t));
        let typed = matches!(
            property["type"].as_str(),
            Some("string" | "integer" | "boolean")
        );
        if let (Some(token), true) = (token, typed) {
            tokens.push((path.clone(), token.to_owned()));
        }
        annotated(property, path, tokens);
        path.pop();
    }
}

/// An HTTP field name's characters (RFC 9110 `token`).
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The `Mcp-Param-*` headers of a call with `arguments`: an argument that
/// is absent, null or no scalar goes without one.
pub(crate) fn param_headers(tokens: &ParamTokens, arguments: &Value) -> Vec<(String, String)> {
    let mut headers = Vec::new();
    for (path, token) in tokens {
        let value = path.iter().try_fold(arguments, |node, key| node.get(key));
        let rendered = match value {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Bool(flag)) => flag.to_string(),
            Some(Value::Number(number)) => number.to_string(),
            _ => continue,
        };
        headers.push((
            format!("mcp-param-{}", token.to_ascii_lowercase()),
            header_value(&rendered),
        ));
    }
    headers
}

#[cfg(test)]
#[path = "revision_tests.rs"]
mod tests;

//! The hosted Things' readable properties as MCP resources: what a caller
//! may `consume` is listed (`resources/list`, and `resources/templates/list`
//! for properties with TD `uriVariables`), read (`resources/read` is the
//! property's `readProperty` through the router, as the `read_*` tools
//! read it) and watched ([`super::observe`]). A caller without `consume`
//! on a Thing sees none of its resources: unknown and forbidden alike.
//!
//! URIs: a property's TD may name its resource with `lmos:uri` (an
//! imported MCP server's resources keep theirs that way; with
//! `uriVariables` it is a URI template: `{var}` and a final `{?a,b}`).
//! Otherwise `lmos://{thing id}/properties/{name}`, the id and name
//! percent-encoded, and `{?a,b}` after it for the `uriVariables`.

use serde_json::{json, Map, Value};

pub use super::observe::{watch, ResourceWatch};
use super::Ctx;
use crate::auth::{Access, Principal};
use crate::http::jsonrpc;
use crate::http::HttpState;
use crate::lmos::{Body, Message};
use crate::telemetry::metrics;

/// One resource, or one resource template.
#[derive(Debug, Clone)]
pub struct Resource {
    pub thing: String,
    pub property: String,
    /// The URI, or the URI template when `variables` is not empty.
    pub uri: String,
    pub variables: Vec<String>,
    /// The TD's schema of the property: type, media type, enums.
    pub schema: Value,
    /// What the lists show.
    pub descriptor: Value,
}

/// `[A-Za-z0-9-._~]` stay, every other byte is `%XX`.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `%XX` decoded; `None` for a broken escape or text that is not UTF-8.
pub fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `lmos://{thing}/{kind}/{name}`: a Thing's affordance as a URI.
pub fn affordance_uri(thing: &str, kind: &str, name: &str) -> String {
    format!("lmos://{}/{kind}/{}", encode(thing), encode(name))
}

/// The media type a resource's contents have.
fn mime_type(schema: &Value) -> &str {
    match schema["contentMediaType"].as_str() {
        Some(m) => m,
        None if schema["type"] == "string" => "text/plain",
        None => "application/json",
    }
}

fn resource(thing: &str, td: &Value, name: &str, property: &Value) -> Resource {
    let variables: Vec<String> = property["uriVariables"]
        .as_object()
        .map(|v| v.keys().cloned().collect())
        .unwrap_or_default();
    let own = property["lmos:uri"].as_str().filter(|u| !u.is_empty());
    let uri = match (own, variables.is_empty()) {
        (Some(u), _) => u.to_owned(),
        (None, true) => affordance_uri(thing, "properties", name),
        (None, false) => format!(
            "{}{{?{}}}",
            affordance_uri(thing, "properties", name),
            variables.join(",")
        ),
    };
    let short = td["title"].as_str().unwrap_or(thing);
    let origin = format!("Property `{name}` of {short} ({thing}).");
    let description = match property["description"].as_str() {
        Some(d) => format!("{d} {origin}"),
        None => origin,
    };
    let key = if variables.is_empty() {
        "uri"
    } else {
        "uriTemplate"
    };
    let mut descriptor = json!({key: uri, "name": name, "description": description,
        "mimeType": mime_type(property)});
    if let Some(title) = property["title"].as_str() {
        descriptor["title"] = title.into();
    }
    Resource {
        thing: thing.to_owned(),
        property: name.to_owned(),
        uri,
        variables,
        schema: property.clone(),
        descriptor,
    }
}

/// The resources of `things` (id → TD) the caller may read: readable
/// properties of Things it may `consume`. A URI two properties would share
/// names the first only.
pub fn resources<'a>(
    things: impl IntoIterator<Item = (&'a str, &'a Value)>,
    may: &dyn Fn(Access, &str) -> bool,
) -> Vec<Resource> {
    let mut out: Vec<Resource> = Vec::new();
    for (id, td) in things {
        if !may(Access::Consume, id) {
            continue;
        }
        for (name, property) in td["properties"].as_object().into_iter().flatten() {
            if property["writeOnly"] == true {
                continue;
            }
            let r = resource(id, td, name, property);
            if out.iter().all(|o| o.uri != r.uri) {
                out.push(r);
            }
        }
    }
    out
}

/// The caller's resources now.
pub async fn for_caller(state: &HttpState, principal: &Principal) -> Vec<Resource> {
    let hosts = super::watch::hosted(&state.gateway).await;
    let directory = state.directory.directory();
    let things = hosts
        .iter()
        .filter_map(|id| directory.get(id).map(|td| (id.as_str(), td)));
    resources(things, &|access, thing| principal.may(access, thing))
}

/// One piece of a URI template.
enum Part<'a> {
    Literal(&'a str),
    Variable(&'a str),
    Query(Vec<&'a str>),
}

fn parts(template: &str) -> Option<Vec<Part<'_>>> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            out.push(Part::Literal(&rest[..open]));
        }
        let close = rest[open..].find('}')? + open;
        let inner = &rest[open + 1..close];
        out.push(match inner.strip_prefix('?') {
            Some(names) => Part::Query(names.split(',').map(str::trim).collect()),
            None => Part::Variable(inner.trim()),
        });
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Part::Literal(rest));
    }
    Some(out)
}

/// The variables `uri` gives `template` (`{var}` and a final `{?a,b}`),
/// decoded; `None` when it does not match.
pub fn matches(template: &str, uri: &str) -> Option<Map<String, Value>> {
    let parts = parts(template)?;
    let mut vars = Map::new();
    let mut at = 0;
    for (i, part) in parts.iter().enumerate() {
        let rest = &uri[at..];
        match part {
            Part::Literal(l) => {
                rest.strip_prefix(l)?;
                at += l.len();
            }
            Part::Variable(name) => {
                let stop = match parts.get(i + 1) {
                    Some(Part::Literal(next)) => rest.find(next).unwrap_or(rest.len()),
                    _ => rest.len(),
                };
                let end = rest[..stop].find(['/', '?', '#']).unwrap_or(stop);
                if end == 0 {
                    return None;
                }
                vars.insert((*name).to_owned(), decode(&rest[..end])?.into());
                at += end;
            }
            Part::Query(names) => {
                let Some(query) = rest.strip_prefix('?') else {
                    if !rest.is_empty() {
                        return None;
                    }
                    continue;
                };
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    let k = decode(k)?;
                    if names.contains(&k.as_str()) {
                        vars.insert(k, decode(&v.replace('+', " "))?.into());
                    }
                }
                at = uri.len();
            }
        }
    }
    (at == uri.len()).then_some(vars)
}

/// The caller's resource `uri` names, and the variables it gives.
pub fn find(resources: Vec<Resource>, uri: &str) -> Option<(Resource, Map<String, Value>)> {
    resources.into_iter().find_map(|r| {
        if r.variables.is_empty() {
            (r.uri == uri).then(|| (r, Map::new()))
        } else {
            let vars = matches(&r.uri, uri)?;
            Some((r, vars))
        }
    })
}

/// `-32602` with the URI, for a resource the caller cannot see (SEP-2164's
/// code, which the 2025 revisions' clients take as well).
pub fn not_found(id: &Value, uri: &str) -> Value {
    let data = json!({"uri": uri});
    jsonrpc::error(
        id,
        jsonrpc::INVALID_PARAMS,
        "Resource not found",
        Some(data),
    )
}

/// `resources/list`.
pub async fn list(state: &HttpState, principal: &Principal, id: &Value) -> Value {
    let listed: Vec<Value> = for_caller(state, principal)
        .await
        .into_iter()
        .filter(|r| r.variables.is_empty())
        .map(|r| r.descriptor)
        .collect();
    jsonrpc::result(id, json!({"resources": listed}))
}

/// `resources/templates/list`.
pub async fn templates(state: &HttpState, principal: &Principal, id: &Value) -> Value {
    let listed: Vec<Value> = for_caller(state, principal)
        .await
        .into_iter()
        .filter(|r| !r.variables.is_empty())
        .map(|r| r.descriptor)
        .collect();
    jsonrpc::result(id, json!({"resourceTemplates": listed}))
}

/// A read value as `resources/read` contents: base64 media as a `blob`,
/// a string as `text`, anything else as JSON text.
pub fn contents(uri: &str, schema: &Value, value: &Value) -> Value {
    let base64 = schema["contentEncoding"]
        .as_str()
        .is_some_and(|e| e.eq_ignore_ascii_case("base64"));
    match value {
        Value::String(s) if base64 => json!({"uri": uri, "mimeType": mime_type(schema), "blob": s}),
        Value::String(s) => json!({"uri": uri, "mimeType": mime_type(schema), "text": s}),
        other => json!({"uri": uri, "mimeType": "application/json", "text": other.to_string()}),
    }
}

/// `resources/read`: the property's `readProperty` through the router
/// (with the URI's variables as the request's `uriVariables`).
pub async fn read(ctx: &Ctx, id: &Value, params: &Value) -> Value {
    let uri = params["uri"].as_str().unwrap_or_default();
    let Some((resource, vars)) = find(for_caller(&ctx.state, &ctx.principal).await, uri) else {
        return not_found(id, uri);
    };
    let body = Body::ReadProperty {
        name: resource.property.clone(),
    };
    let mut message = Message::new(&resource.thing, body);
    message.correlation_id = Some(uuid::Uuid::new_v4().to_string());
    message.traceparent = ctx.traceparent.clone();
    message.tracestate = ctx.tracestate.clone();
    if !vars.is_empty() {
        message
            .extra
            .insert("uriVariables".into(), Value::Object(vars));
    }
    let failed = |text: &str| jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, text, None);
    let replies = ctx
        .state
        .gateway
        .request_via(metrics::MCP, &ctx.principal, message)
        .await;
    let mut replies = match replies {
        Ok(r) => r,
        Err(p) => return failed(&format!("{}: {}", p.kind.title(), p.detail)),
    };
    let Some(reply) = replies.next().await else {
        return failed("The sidecar is shutting down.");
    };
    let value = match reply["messageType"].as_str() {
        Some("propertyReadings") => reply["data"].get(&resource.property).cloned(),
        Some("error") => return failed(&super::results::error_text(&reply)),
        _ => reply.get("value").cloned(),
    };
    let value = value.unwrap_or(Value::Null);
    let read = contents(uri, &resource.schema, &value);
    jsonrpc::result(id, json!({"contents": [read]}))
}

#[cfg(test)]
#[path = "resources_tests.rs"]
mod tests;
